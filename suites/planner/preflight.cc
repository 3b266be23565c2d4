#include "suites/planner/preflight.h"

#include <algorithm>

#include "harness/status.h"
#include "suites/planner/plan_input.h"

namespace pb::planner {

namespace {

// Bytes per rank of the largest stage, from the planner; from the parameter
// and activation counts when the planner does not model the shape (an
// estimate of the same order: weights, grads and two Adam moments, and the
// canonical block's ~34 activation values per token and channel).
double rank_bytes(const RunSpec& s, Precision precision) {
  const ModelConfig& m = s.train.model;
  const double tokens = double(s.train.batch) / s.mesh.dp * s.train.seq;
  const double model_parallel = double(s.mesh.tp) * s.mesh.cp * s.mesh.pp;
  const double per_value = precision == Precision::fp64 ? 8 : 4;
  const double crude = (4 * per_value * double(m.num_params()) +
                        34 * per_value * tokens * m.C * m.L / s.train.microbatches) / model_parallel;
  if (crude > 0x1p56) return crude;  // far beyond any machine: no need to ask the planner (nor to risk its int64)
  // The planner's llama figures are analytic (the runners' workspace and
  // layout not modelled, docs/planner.md#the-llama-family): the crude bound.
  if (m.llama()) return crude;
  // The planner lists every layer's parameters: past 2^16 layers (the deepest
  // models trained have a few hundred) the estimate stands, so a forged
  // `model.layers = 1e9` is refused without an 8 GB list first.
  if (m.L > (1 << 16)) return crude;
  PlanInput in = plan_input_of(s);
  in.precision = precision;
  try {
    const PlanResult r = plan(in);
    const StageMemory& w = r.worst;
    return double(w.device_total() + w.optimizer_host);
  } catch (const InputError&) {
    return crude;
  }
}

}  // namespace

Need run_need(const RunSpec& s, int64_t hosted_ranks, bool local, bool conformance) {
  Need n;
  n.local_ranks = local ? hosted_ranks : 0;
  n.bytes = double(hosted_ranks) * (rank_bytes(s, conformance ? Precision::fp64 : s.train.precision) +
                                    kRankOverheadBytes);
  if (conformance) {
    RunSpec one = s;
    one.mesh = MeshShape{};
    one.data = DataOptions{};
    one.tensor = TensorOptions{};
    one.context = ContextOptions{};
    one.pipe = PipelineOptionsSpec{};
    n.bytes += 3 * rank_bytes(one, Precision::fp64);
  }
  if (s.pipe.schedule || s.mesh.pp > 1) {  // the schedule's actions, held by every hosted rank and the engine
    const bool split = s.pipe.schedule == pipeline::ScheduleKind::zb_h1;
    const double actions =
        double(s.mesh.pp) * s.train.microbatches * s.pipe.virtual_stages * (split ? 3 : 2);
    n.bytes += double(hosted_ranks + 1) * actions * kScheduleBytesPerAction;
  }
  return n;
}

}  // namespace pb::planner
