// What the plan of a training shape needs measured on this machine, gathered
// per shape: the kernel rates (kernel_rates.h), by tensor/context split, and
// the factors a measured step sets (compute_scale, corun_scale).
#pragma once
#include <map>
#include <tuple>
#include <utility>

#include "suites/calibrate/kernel_rates.h"

namespace pb::calibrate {

// What the sweep measures per model and microbatch shape for its plan rows.
struct ShapeRates {
  double gemm_efficiency = 1;
  MemoryBoundRates memory;  // empty: the memcpy figure (2 x copy_GBps) stands in
  // A single-rank training step of the shape measured (a dp1 sweep point) over
  // the planner's estimate of that step from the two figures above
  // (planner::Hardware::compute_scale); 1: not measured.
  double compute_scale = 1;
  bool step_measured = false;  // compute_scale came from a measured step
  // That step run by k ranks at once (k copies, one per core, each in a
  // world of its own, meeting at a barrier after every step) over the step
  // alone, by k: what ranks computing side by side cost each other (the
  // last-level cache and memory bandwidth they share, and the slowest copy
  // of each step setting the pace, as in any world whose ranks meet once a
  // step: tiny 1.03 as free copies, 1.09 meeting; its dp2 DDP rows ran 5-12%
  // slower than the plan with the first). A k not measured: 1.
  std::map<int, double> corun_scale{};
  // The factor for k ranks computing at once with `copies` copies of the
  // model's weights among them (k / (tp x pp): each rank of a tensor- or
  // pipeline-parallel split computes with a slice; data, ZeRO and context
  // parallel ranks with all of it, gathered): linear between one copy (1) and
  // k copies (corun_scale[k]), clamped there. On this machine the dp2 rows of
  // small, DDP and ZeRO alike, ran 5-12% slower than the plan without it,
  // while tp2 and pp2 ran as planned.
  double corun_at(int k, double copies) const;
  // The GEMM efficiency of one rank of a tensor- or context-parallel split,
  // by (tp, cp), at that rank's own GEMM shapes (the best of three, like
  // gemm_efficiency); a split not measured uses gemm_efficiency.
  std::map<std::pair<int, int>, double> split_gemm_efficiency{};
  double gemm_efficiency_at(int tp, int cp) const;
  // The same without the attention core's per-head GEMMs, by (tp, cp), cp > 1
  // (measured from the same timings): what the rates time when the split's
  // attention core is measured (cp_attention), whose GEMMs are in its time.
  // The per-head shapes are the smallest and slowest: tiny at cp2, 0.38 with
  // them. A split not measured uses gemm_efficiency_at.
  std::map<std::pair<int, int>, double> split_linear_efficiency{};
  double linear_efficiency_at(int tp, int cp) const;
  // One block's attention core on a rank of a context-parallel split, by
  // (tp, cp, algorithm, zigzag): measure_cp_attention's figures.
  std::map<std::tuple<int, int, CpAlgo, bool>, CpAttentionTime> cp_attention{};
};

// The best of `repeats` measurements of both (the highest GEMM efficiency;
// each memory-bound time at its least), so one slow moment of a shared
// machine does not set every plan row of the shape (a single 10 ms window gave
// 0.68 where the same shape measures 0.90 +- 0.02).
ShapeRates measure_shape_rates(const ModelConfig& m, int Bm, int seq, double peak_flops, int repeats);
// Adds the (tp, cp) split's GEMM efficiency to r (the best of `repeats`), once;
// with cp > 1 its linear efficiency too.
void measure_split_gemm_efficiency(ShapeRates& r, const ModelConfig& m, int Bm, int seq, double peak_flops, int tp,
                                   int cp, int repeats);
// Adds the attention core of a (tp, cp, algo, zigzag) split (cp > 1) to r,
// once: measure_cp_attention, two windows of about 30 ms, the lesser.
void add_cp_attention(ShapeRates& r, const ModelConfig& m, Precision precision, int Bm, int seq, int tp, int cp,
                      CpAlgo algo, bool zigzag);


}  // namespace pb::calibrate
