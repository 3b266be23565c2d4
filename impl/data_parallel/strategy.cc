#include "impl/data_parallel/strategy.h"

#include <cstdio>

#include "harness/status.h"
#include "impl/data_parallel/cost.h"
#include "impl/data_parallel/dp_rank.h"
#include "impl/data_parallel/replay.h"
#include "impl/data_parallel/shard.h"
#include "impl/expert_parallel/faults.h"

namespace pb::dp {

DpOptions options_of(const RunSpec& s) {
  DpOptions o;
  o.dp = s.mesh.dp;
  o.shard = s.data.shard;
  o.offload = s.data.offload;
  o.bucket_bytes = s.data.bucket_bytes;
  o.overlap = s.data.overlap;
  o.prefetch = s.data.prefetch;
  o.reshard_after_forward = s.data.reshard_after_forward;
  o.shard_group = s.data.shard_group;
  o.ranks_per_node = s.mesh.ranks_per_node;
  o.ep = s.mesh.ep;
  o.faults = faults_of(s.faults);
  o.moe_faults = ep::moe_faults_of(s.faults);
  return o;
}

namespace {
std::vector<int64_t> unit_sizes(const ParamLayout& l) {
  std::vector<int64_t> u;
  for (int i = 0; i < l.num_units(); ++i) u.push_back(l.unit_size(i));
  return u;
}

}  // namespace

void add_moe_capacity_comm(Declared& d, const DpOptions& o, const TrainConfig& cfg, int steps, int layers) {
  if (!moe_shares_capacity(o, cfg) || layers == 0) return;
  const MoeConfig& c = cfg.model.moe;
  const int64_t n = int64_t(steps) * cfg.microbatches * (layers < 0 ? cfg.model.moe_layers() : layers);
  d.add_comm(Group::moe, CommOp::all_gather, n * o.dp * c.top_k * c.experts * 8);
  d.add_comm(Group::moe, CommOp::all_reduce, n * c.experts * 8);
}

CommOp comm_op(Coll c) {
  return c == Coll::all_reduce ? CommOp::all_reduce
         : c == Coll::reduce_scatter ? CommOp::reduce_scatter : CommOp::all_gather;
}

Declared declared_costs(const DpOptions& o, const TrainConfig& cfg, int steps) {
  return declared_costs(o, cfg, steps, unit_sizes(ParamLayout(cfg.model)));
}

Declared declared_costs(const DpOptions& o, const TrainConfig& cfg, int steps, std::span<const int64_t> units) {
  const DataAxis axis = data_axis(o, cfg);
  const ModelStateBytes m = model_state_bytes(units, axis);
  Declared d;
  d.memory = {{"mem.params", MemTag::params, Place::device, m.params},
              {"mem.grads", MemTag::grads, Place::device, m.grads},
              {"mem.optimizer", MemTag::optimizer, Place::device, m.optimizer},
              {"mem.optimizer.host", MemTag::optimizer, Place::host, m.optimizer_host},
              {"mem.comm", MemTag::comm, Place::device, comm_buffer_peak_bytes(units, axis)}};
  for (const auto& c : comm_per_step(units, axis)) d.add_comm(c.group, comm_op(c.op), c.bytes * steps);
  add_scalar_comm(d, o, steps);
  return d;
}

void add_scalar_comm(Declared& d, const DpOptions& o, int steps) {
  // The loss every step; the squared-norm partial sums when sharded.
  if (o.dp > 1) d.add_comm(Group::dp_scalar, CommOp::all_reduce, 8 * int64_t(steps) * (o.shard == Shard::none ? 1 : 2));
}

namespace {

bool runs(const RunSpec& s) {
  return s.mesh.tp == 1 && s.mesh.cp == 1 && s.mesh.pp == 1 && s.mesh.ep == 1 && !s.pipe.schedule &&
         s.tensor.recompute == Recompute::none;
}

void validate_spec(const RunSpec& s) {
  require(s.tensor == TensorOptions{} && s.context == ContextOptions{},
          "strategy: tensor and context options (sp, cp_algo, zigzag) need tp > 1 or cp > 1 in the mesh");
  validate(options_of(s), s.train);
}

bool bitwise(const RunSpec& s, BackendKind b) {
  return declares_bitwise(options_of(s), s.train, b == BackendKind::local);
}

Replay replay(const RunSpec& s) { return {replay_plan(options_of(s), s.train), false}; }

// On a device: the rank's states, buffers and optimizer in its memory, every
// op on its stream (fp32 and bf16-mixed: device_ops refuses fp64, as
// validate(RunSpec) does first).
std::unique_ptr<Rank> make_rank(const RunSpec& s, Communicator& world, const TrainDevice* device) {
  return make_typed_rank_on<DpRank>(device, s.train.precision, s.train, options_of(s), world);
}

}  // namespace

const Strategy& strategy() {
  static const Strategy s{"data_parallel", runs,      validate_spec, bitwise,
                          replay,          make_rank, nullptr,
                          pb::fault_decls({fault_decls(), ep::moe_fault_decls()})};
  return s;
}

}  // namespace pb::dp
