// The training shape's step measurements behind the plan rows' compute_scale
// and corun_scale (shape_step.h).
#include "suites/sweep/shape_step.h"

#include <algorithm>
#include <exception>
#include <thread>
#include <vector>

#include "harness/comm/runner.h"
#include "harness/status.h"
#include "suites/planner/preflight.h"
#include "suites/sweep/sweep_internal.h"

namespace pb::sweep {

using internal::median;

ShapeKey shape_key(const SweepPoint& p, const PointResult& r) {
  return {p.spec.train.model, p.spec.train.precision, int(r.global_batch / (int64_t(p.dp()) * p.microbatches)),
          p.microbatches};
}

SweepPoint single_rank_point(const ShapeKey& k) {
  SweepPoint p;  // a default spec: dp1, no sharding
  p.spec.train.model = k.model;
  p.spec.train.precision = k.precision;
  p.scaling = "weak";
  p.microbatches = k.microbatches;
  return p;
}

PointResult single_rank_step(const SweepConfig& c, const ShapeKey& k, double peak_flops_per_rank,
                             const Limits& limits) {
  SweepConfig one = c;
  one.batch_per_rank = k.batch();
  const SweepPoint p = single_rank_point(k);
  PointResult step;
  try {
    require_fits(planner::run_need(point_spec(one, p), 1, true, /*conformance=*/false), limits, "calibration step");
  } catch (const InputError& e) {
    step.status = "skipped";
    step.reason = e.what();
    return step;
  }
  std::vector<PointResult> rounds;
  const SweepConfig window = round_config(one);
  for (int i = 0; i < c.rounds; ++i) {
    rounds.push_back(run_point(window, p, peak_flops_per_rank, nullptr));
    if (rounds.back().status != "ok") break;
  }
  return rounds.back().status == "ok" ? combine_rounds(rounds) : rounds.back();
}

namespace {

// The step alone (paced_copies of one) on each of the first k cores this
// thread may run on (where paced_copies' k copies go when bound), each from
// a thread of its own bound there; the slowest.
double slowest_core_alone(const SweepConfig& c, const RunSpec& spec, int k) {
  std::vector<int> cores = allowed_cores();
  if (cores.size() > size_t(k)) cores.resize(size_t(k));
  if (cores.empty()) return paced_copies(c, spec, 1)[0];
  double slowest = 0;
  for (int core : cores) {
    double t = 0;
    std::exception_ptr failed;
    std::thread alone([&] {
      bind_to_core(core);
      try {
        t = paced_copies(c, spec, 1)[0];
      } catch (...) {
        failed = std::current_exception();
      }
    });
    alone.join();
    if (failed) std::rethrow_exception(failed);
    slowest = std::max(slowest, t);
  }
  return slowest;
}

}  // namespace

double corun_ratio(const SweepConfig& c, const ShapeKey& k, int ranks, const Limits& limits) {
  SweepConfig one = c;
  one.batch_per_rank = k.batch();
  const SweepPoint p = single_rank_point(k);
  try {
    const RunSpec spec = point_spec(one, p);
    require_fits(planner::run_need(spec, ranks, true, /*conformance=*/false), limits,
                 "calibration step side by side");
    const double alone = slowest_core_alone(one, spec, ranks);
    const double side = median(paced_copies(one, spec, ranks));
    return alone > 0 && side > 0 ? side / alone : 0;
  } catch (const std::exception&) {  // does not fit, or a step failed: not measured
    return 0;
  }
}

double corun_scale(const SweepConfig& c, const ShapeKey& k, int ranks, const Limits& limits,
                   std::vector<double>& windows) {
  while (int(windows.size()) < c.rounds) windows.push_back(corun_ratio(round_config(c), k, ranks, limits));
  if (windows.empty() || std::find(windows.begin(), windows.end(), 0.0) != windows.end()) return 1;
  return median(windows);
}

}  // namespace pb::sweep
