// The training shape's own step, measured: the single-rank step (a dp1
// sweep point) that compute_scale divides, and the same step run as k copies
// side by side (corun_scale). `parabench sweep` takes them for its plan rows
// and `parabench calibrate --model` for a profile's shapes.
#pragma once
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "harness/preflight.h"
#include "reference/model_config.h"
#include "reference/train_config.h"
#include "suites/sweep/sweep.h"

namespace pb::sweep {

// The key of a point's shape figures: model, precision, microbatch sequences
// and microbatches per step (what the single-rank step behind compute_scale
// runs). Typed from the point's run spec on (no text re-parsed); ordered by
// the model's name, which names one config within a sweep.
struct ShapeKey {
  ModelConfig model;
  Precision precision = Precision::fp32;
  int sequences = 1;     // per microbatch
  int microbatches = 1;  // per step
  int64_t batch() const { return int64_t(sequences) * microbatches; }
  bool operator<(const ShapeKey& o) const {
    return std::tie(model.name, precision, sequences, microbatches) <
           std::tie(o.model.name, o.precision, o.sequences, o.microbatches);
  }
  bool operator==(const ShapeKey&) const = default;
};
ShapeKey shape_key(const SweepPoint& p, const PointResult& r);
// The single-rank point of shape key k: dp1, no sharding, weak scaling (the
// step behind compute_scale; its batch per rank is the key's microbatch x
// microbatches).
SweepPoint single_rank_point(const ShapeKey& k);
// Shape k's single-rank step (single_rank_point(k) at c's seq, warm-up,
// steps and seconds), c.rounds windows back to back (round_config), combined
// as a sweep row combines its rounds (the median); not ok when a step fails,
// "skipped" (and why) when it would not fit `limits` on one rank. What
// compute_scale divides; `parabench calibrate --model` measures it too.
PointResult single_rank_step(const SweepConfig& c, const ShapeKey& k, double peak_flops_per_rank,
                             const Limits& limits);
// One window of ShapeRates::corun_scale at `ranks` ranks: shape k's
// single-rank step (single_rank_point) on `ranks` threads at once, each in a
// world of its own and all meeting after every step (paced_copies, c's
// measured steps and seconds), the median of their step times over the same
// step run alone just before on each of their cores, the slowest (the copies
// go at the slowest core's pace, so a core the host slows for a while slows
// both sides of the ratio). 0 if the copies would not fit `limits` or a step
// fails.
double corun_ratio(const SweepConfig& c, const ShapeKey& k, int ranks, const Limits& limits);
// ShapeRates::corun_scale (suites/calibrate/shape_rates.h) of shape k at `ranks` ranks side by side: the ratio
// windows already taken (`windows`: the sweep takes one at the start of each
// of its rounds) topped up to c.rounds back to back, their median; 1 when a
// window failed or the copies would not fit `limits` (a window of 0).
double corun_scale(const SweepConfig& c, const ShapeKey& k, int ranks, const Limits& limits,
                   std::vector<double>& windows);

}  // namespace pb::sweep
