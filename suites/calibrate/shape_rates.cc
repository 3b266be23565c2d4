// A training shape's measured rates (see shape_rates.h).
#include "suites/calibrate/shape_rates.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "harness/status.h"
#include "suites/planner/model_cost.h"
#include "suites/planner/planner.h"

namespace pb::calibrate {
ShapeRates measure_shape_rates(const ModelConfig& m, int Bm, int seq, double peak_flops, int repeats) {
  require(repeats >= 1, "shape rates: repeats must be >= 1");
  ShapeRates r;
  r.gemm_efficiency = 0;
  for (int i = 0; i < repeats; ++i) {
    r.gemm_efficiency = std::max(r.gemm_efficiency, measure_gemm_efficiency(m, Bm, seq, peak_flops, 0.01));
    const MemoryBoundRates x = measure_memory_bound(m, Bm, seq, 0.05);
    if (i == 0) {
      r.memory = x;
      continue;
    }
    r.memory.micro_s = std::min(r.memory.micro_s, x.micro_s);
    r.memory.step_s = std::min(r.memory.step_s, x.step_s);
    r.memory.shared_s = std::min(r.memory.shared_s, x.shared_s);
    r.memory.buffer_s = std::min(r.memory.buffer_s, x.buffer_s);
  }
  return r;
}

double ShapeRates::gemm_efficiency_at(int tp, int cp) const {
  const auto it = split_gemm_efficiency.find({tp, cp});
  return it != split_gemm_efficiency.end() ? it->second : gemm_efficiency;
}

double ShapeRates::corun_at(int k, double copies) const {
  const auto it = corun_scale.find(k);
  return it == corun_scale.end() ? 1 : planner::corun_factor(it->second, k, copies);
}

double ShapeRates::linear_efficiency_at(int tp, int cp) const {
  const auto it = split_linear_efficiency.find({tp, cp});
  return it != split_linear_efficiency.end() ? it->second : gemm_efficiency_at(tp, cp);
}

void measure_split_gemm_efficiency(ShapeRates& r, const ModelConfig& m, int Bm, int seq, double peak_flops, int tp,
                                   int cp, int repeats) {
  require(repeats >= 1, "shape rates: repeats must be >= 1");
  if ((tp == 1 && cp == 1) || r.split_gemm_efficiency.count({tp, cp})) return;
  double best = 0, linear = 0;
  for (int i = 0; i < repeats; ++i) {
    GemmRates rate;
    best = std::max(best, gemm_efficiency_timed(m, Bm, seq, peak_flops, 0.01, tp, cp, true, rate));
    if (cp > 1) linear = std::max(linear, gemm_efficiency_timed(m, Bm, seq, peak_flops, 0.01, tp, cp, false, rate));
  }
  r.split_gemm_efficiency[{tp, cp}] = best;
  if (cp > 1) r.split_linear_efficiency[{tp, cp}] = linear;
}

void add_cp_attention(ShapeRates& r, const ModelConfig& m, Precision precision, int Bm, int seq, int tp, int cp,
                      CpAlgo algo, bool zigzag) {
  const auto key = std::make_tuple(tp, cp, algo, zigzag);
  if (cp < 2 || r.cp_attention.count(key)) return;
  r.cp_attention[key] = measure_cp_attention(m, precision, Bm, seq, tp, cp, algo, zigzag, 0.03, 2);
}

}  // namespace pb::calibrate
