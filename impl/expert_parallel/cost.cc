#include "impl/expert_parallel/cost.h"

#include <algorithm>

#include "impl/data_parallel/model_states.h"
#include "impl/data_parallel/replay.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/options.h"
#include "reference/moe.h"

namespace pb::ep {

int64_t a2a_bytes(const ModelConfig& m, int64_t calls, int64_t sent_rows, int64_t owner_rows, int elem) {
  return calls * m.moe.experts * 8 + 2 * (sent_rows + owner_rows) * m.C * elem;
}

int64_t balanced_rows(const ModelConfig& m, int64_t N, int64_t scope_tokens) {
  const int64_t scope = scope_tokens > 0 ? scope_tokens : N;
  const int64_t cap = moe_capacity(m.moe, scope);
  return std::min<int64_t>(N * m.moe.top_k, m.moe.experts * cap * N / scope);
}

StateCosts state_costs(const RunSpec& s) {
  const TrainConfig& cfg = s.train;
  const ParamLayout l(cfg.model, s.mesh.tp, 0);  // a tp rank's shard (every tp rank's units have these sizes)
  const dp::DpOptions od = dense_component_options(s), oe = expert_options(s);
  const dp::DataAxis ad = dp::data_axis(od, cfg), ae = dp::data_axis(oe, cfg);
  const std::vector<int64_t> du = sizes(dp::dense_units(l)), eu = sizes(dp::expert_units(l, s.mesh.ep, 0));
  const int n = int(du.size()), M = int(eu.size());
  StateCosts c;
  c.dense = dp::model_state_bytes(du, ad);
  c.experts = dp::model_state_bytes(eu, ae);
  // Comm buffers: both components' hooks in the runner's order (reference/runner.cc).
  dp::PeakMeter meter;
  if (od.shard != dp::Shard::none) {
    dp::CommBufferReplay d(du, ad, dp::UnitRoles::model(n), meter), e(eu, ae, dp::UnitRoles::all_blocks(M), meter);
    dp::replay_step(d, n, &e, [&](int layer) { return cfg.model.is_moe(layer); });
  }
  c.comm_peak = meter.peak();
  c.dense_comm = dp::comm_per_step(du, ad, dp::UnitRoles::model(n));
  c.expert_comm = dp::comm_per_step(eu, ae, dp::UnitRoles::all_blocks(M), kExpertGroupPrefix);
  c.local_traffic = dp::local_traffic_bytes(dp::unit_uses(du, ad, dp::UnitRoles::model(n)), ad) +
                    dp::local_traffic_bytes(dp::unit_uses(eu, ae, dp::UnitRoles::all_blocks(M)), ae);
  return c;
}

Declared declared_costs(const RunSpec& s, int steps) {
  const StateCosts c = state_costs(s);
  const dp::ModelStateBytes &md = c.dense, &me = c.experts;
  Declared out;
  out.memory = {{"mem.params", MemTag::params, Place::device, md.params + me.params},
                {"mem.grads", MemTag::grads, Place::device, md.grads + me.grads},
                {"mem.optimizer", MemTag::optimizer, Place::device, md.optimizer + me.optimizer},
                {"mem.optimizer.host", MemTag::optimizer, Place::host, md.optimizer_host + me.optimizer_host},
                {"mem.comm", MemTag::comm, Place::device, c.comm_peak}};
  for (const auto* list : {&c.dense_comm, &c.expert_comm})
    for (const auto& x : *list) out.add_comm(x.group, dp::comm_op(x.op), x.bytes * steps);
  const dp::DpOptions od = dense_component_options(s);
  dp::add_scalar_comm(out, od, steps);
  // The expert squared-norm partials: over ep (DDP: each edp replica holds
  // them whole), else over the dense group (dp, or dp x cp).
  if ((od.shard == dp::Shard::none ? s.mesh.ep : od.dp) > 1)
    out.add_comm(Group::ep_scalar, CommOp::all_reduce, 8 * int64_t(steps));
  // (full recompute reruns each MoE block's forward: its count exchange
  // twice; context parallel's exchange is the tensor-parallel rank's, tp_rank.cc)
  if (s.mesh.cp == 1)
    dp::add_moe_capacity_comm(out, od, s.train, steps,
                              s.train.model.moe_layers() * (s.tensor.recompute == Recompute::full ? 2 : 1));
  return out;
}

}  // namespace pb::ep
