#include "impl/data_parallel/options.h"

#include <algorithm>
#include <cstdio>

#include "harness/status.h"
#include "impl/expert_parallel/faults.h"
#include "impl/spec/run_spec.h"

namespace pb::dp {

std::string fault_name(Fault f) {  // no_copy_back is the offload axis's
  const FaultAxis a = f == Fault::no_copy_back ? FaultAxis::offload : FaultAxis::data;
  return fault_name_of(fault_decls(), a, uint8_t(f));
}

std::vector<Fault> faults_for(Shard s, Offload o) {
  std::vector<Fault> f;
  switch (s) {
    case Shard::none:
      f = {Fault::grad_not_averaged, Fault::skip_bucket, Fault::sync_wrong_microbatch};
      break;
    case Shard::zero1:
    case Shard::zero2:
      f = {Fault::grad_not_averaged, Fault::wrong_shard_offset, Fault::stale_params,
           Fault::skip_grad_reduce};
      break;
    case Shard::zero3:
      f = {Fault::grad_not_averaged, Fault::wrong_shard_offset, Fault::stale_params,
           Fault::skip_grad_reduce, Fault::keep_gathered};
      break;
    case Shard::hsdp:
    case Shard::hzero:
      f = {Fault::grad_not_averaged, Fault::wrong_shard_offset, Fault::skip_grad_reduce,
           Fault::skip_replica_reduce, Fault::keep_gathered};
      break;
  }
  if (s != Shard::none) f.push_back(Fault::norm_not_all_reduced);
  if (s == Shard::hsdp) f.insert(f.end(), {Fault::norm_over_replicas, Fault::hsdp_runs_flat});
  if (o == Offload::optimizer) f.push_back(Fault::no_copy_back);
  return f;
}

namespace {

bool applies(Fault f, Shard s, Offload o) {
  const auto fs = faults_for(s, o);
  return std::find(fs.begin(), fs.end(), f) != fs.end();
}

std::vector<Fault> faults_for_spec(const RunSpec& s) { return faults_for(s.data.shard, s.data.offload); }

}  // namespace

std::span<const FaultDecl> fault_decls() {
  using enum Fault;
  constexpr FaultAxis D = FaultAxis::data;
  static const FaultDecl d[] = {
      {"grad_not_averaged", D, uint8_t(grad_not_averaged),
       "DDP/ZeRO: the loss gradient is scaled by the rank's tokens, not the step's",
       listed_for<grad_not_averaged, faults_for_spec>},
      {"skip_bucket", D, uint8_t(skip_bucket), "DDP: the first gradient bucket is never all-reduced",
       listed_for<skip_bucket, faults_for_spec>},
      {"sync_wrong_microbatch", D, uint8_t(sync_wrong_microbatch),
       "DDP: gradients are synced on the first microbatch instead of the last",
       listed_for<sync_wrong_microbatch, faults_for_spec>},
      {"wrong_shard_offset", D, uint8_t(wrong_shard_offset), "ZeRO: the optimizer steps the neighbour's slice",
       listed_for<wrong_shard_offset, faults_for_spec>},
      {"stale_params", D, uint8_t(stale_params),
       "ZeRO-1/2: no all-gather after the update; ZeRO-3: backward uses the previous unit's gathered buffer",
       listed_for<stale_params, faults_for_spec>},
      {"skip_grad_reduce", D, uint8_t(skip_grad_reduce), "ZeRO: one unit's gradient is not reduce-scattered",
       listed_for<skip_grad_reduce, faults_for_spec>},
      {"skip_replica_reduce", D, uint8_t(skip_replica_reduce),
       "HSDP / hZeRO: the cross-replica (inter-node) reduction is skipped",
       listed_for<skip_replica_reduce, faults_for_spec>},
      {"keep_gathered", D, uint8_t(keep_gathered),
       "ZeRO-3 family: a block's gathered buffer leaks until the end of the microbatch (only comm memory shows it)",
       listed_for<keep_gathered, faults_for_spec>},
      {"norm_not_all_reduced", D, uint8_t(norm_not_all_reduced),
       "ZeRO/FSDP: the gradient norm is this rank's shard's, never all-reduced (each rank clips by its own)",
       listed_for<norm_not_all_reduced, faults_for_spec>, "torchtitan #766"},
      {"norm_over_replicas", D, uint8_t(norm_over_replicas),
       "HSDP: the norm's partials are summed over the replicas too (each element counted dp / F times)",
       listed_for<norm_over_replicas, faults_for_spec>, "VeOmni #184"},
      {"hsdp_runs_flat", D, uint8_t(hsdp_runs_flat),
       "HSDP: the mesh that runs is not the one asked for: states sharded over all of dp (flat FSDP), no replicas",
       listed_for<hsdp_runs_flat, faults_for_spec>, "issue #49: HSDP silently run as flat FSDP"},
      {"no_copy_back", FaultAxis::offload, uint8_t(no_copy_back),
       "offload: device params are not refreshed from the host master", listed_for<no_copy_back, faults_for_spec>}};
  return d;
}

std::set<Fault> faults_of(const Faults& faults) {
  std::set<Fault> out;
  for (FaultAxis a : {FaultAxis::data, FaultAxis::offload})
    for (Fault f : fault_values<Fault>(faults, a)) out.insert(f);
  return out;
}

namespace {

// "zero3", "zero2 + offload"
std::string strategy_name(Shard s, Offload o) {
  return std::string(shard_name(s)) + (o == Offload::optimizer ? " + offload" : "");
}

// The strategies a fault applies to: "none, zero1", or "offload = optimizer"
// for a fault of the offload axis alone.
std::string applies_to(Fault f) {
  std::string out;
  bool offload_only = true;
  for (Shard s : {Shard::none, Shard::zero1, Shard::zero2, Shard::zero3, Shard::hsdp, Shard::hzero}) {
    if (applies(f, s, Offload::none)) out += (out.empty() ? "" : ", ") + std::string(shard_name(s));
    offload_only = offload_only && !applies(f, s, Offload::none) && applies(f, s, Offload::optimizer);
  }
  return offload_only ? "offload = optimizer" : out.empty() ? "none" : out;
}

}  // namespace

void validate(const DpOptions& o) {
  require(o.dp > 0, "strategy.dp: must be > 0");
  require(o.bucket_bytes > 0, "strategy.bucket_mb: must be > 0");
  if (o.ranks_per_node)
    require(o.dp % o.ranks_per_node == 0,
            "strategy.ranks_per_node: must divide strategy.dp (" + std::to_string(o.dp) + ")");
  if (o.shard == Shard::hsdp) {
    int f = shard_group(o);
    require(o.dp % f == 0, "strategy.shard_group: must divide strategy.dp (" +
                               std::to_string(o.dp) + "), got " + std::to_string(f));
  }
  if (o.shard == Shard::hzero)
    require(o.ranks_per_node > 0 && o.ranks_per_node < o.dp,
            "strategy.ranks_per_node: hzero needs more than one node (0 < ranks_per_node < dp)");
  // A fault the strategy does not have would run unharmed and write a PASS
  // row under the fault's name: refused, naming where it applies.
  for (Fault f : o.faults)
    require(applies(f, o.shard, o.offload),
            "strategy.faults: " + fault_name(f) + " does not apply to " + strategy_name(o.shard, o.offload) +
                " (applies to: " + applies_to(f) + ")");
  // Faults of the reduction need something to reduce (one rank's sum is
  // itself), and skipping the cross-replica sum needs more than one replica.
  for (Fault f : {Fault::grad_not_averaged, Fault::skip_bucket, Fault::skip_grad_reduce, Fault::norm_not_all_reduced})
    require(!o.has(f) || o.dp >= 2, "strategy.faults: " + fault_name(f) + " needs strategy.dp >= 2");
  require(!o.has(Fault::stale_params) || o.shard >= Shard::zero3 || o.dp >= 2,
          "strategy.faults: stale_params needs strategy.dp >= 2 with zero1/zero2 (no all-gather to skip)");
  require(!o.has(Fault::skip_grad_reduce) || o.shard != Shard::hsdp || shard_group(o) >= 2,
          "strategy.faults: skip_grad_reduce needs hsdp shard groups of two ranks or more (strategy.shard_group >= 2): "
          "a group of one reduces nothing");
  require(!o.has(Fault::skip_replica_reduce) || o.shard != Shard::hsdp || o.dp > shard_group(o),
          "strategy.faults: skip_replica_reduce needs more than one hsdp replica (strategy.dp > shard_group)");
  for (Fault f : {Fault::norm_over_replicas, Fault::hsdp_runs_flat})
    require(!o.has(f) || o.shard != Shard::hsdp || o.dp > shard_group(o),
            "strategy.faults: " + fault_name(f) + " needs more than one hsdp replica (strategy.dp > shard_group)");
  // Without resharding every block stays gathered into backward, so a leak
  // until the end of the microbatch cannot raise the peak: nothing to catch.
  require(!o.has(Fault::keep_gathered) || (o.shard >= Shard::zero3 && o.reshard_after_forward),
          "strategy.faults: keep_gathered needs a ZeRO-3 family shard and reshard_after_forward = true");
  require(o.prefetch >= 0, "strategy.prefetch: must be >= 0");
}

void validate(const DpOptions& o, const TrainConfig& cfg) {
  validate(o);
  cfg.validate();
  require(cfg.batch % o.dp == 0, "train.batch: must be divisible by strategy.dp (" +
                                     std::to_string(cfg.batch) + " % " + std::to_string(o.dp) + ")");
  const int per_rank = cfg.batch / o.dp;
  require(per_rank % cfg.microbatches == 0,
          "train.microbatches: must divide the per-rank batch (" + std::to_string(per_rank) + ")");
  require(!o.has(Fault::sync_wrong_microbatch) || cfg.microbatches >= 2,
          "strategy.faults: sync_wrong_microbatch needs train.microbatches >= 2 (the first is the last)");
  // Injected by doubling (model_states.h inflate_expert_grads): exact at every precision.
  require(!o.moe_faults.count(MoeFault::ep_grads_ep_times) || (o.ep & (o.ep - 1)) == 0,
          "strategy.faults: ep_grads_ep_times needs mesh ep a power of two");
  const bool shared = cfg.model.moe.experts > 0 && cfg.model.moe.capacity == MoeCapacity::global && o.dp > 1;
  for (MoeFault f : o.moe_faults) {
    require(cfg.model.moe.experts > 0, "strategy.faults: " + ep::moe_fault_name(f) + " needs a mixture-of-experts model");
    if (f == MoeFault::ep_combine_permuted || f == MoeFault::ep_expert_grads_dp || f == MoeFault::ep_grads_ep_times)
      require(o.ep >= 2, "strategy.faults: " + ep::moe_fault_name(f) + " needs expert parallel (mesh ep >= 2)");
    else if (f != MoeFault::recompute_aux_twice)  // (full recompute's: tensor_parallel/strategy.cc validates it)
      require(f == MoeFault::router_grad_missing || shared,
              "strategy.faults: " + ep::moe_fault_name(f) + " needs moe.capacity = global over dp >= 2 ranks");
    const MoeConfig& c = cfg.model.moe;  // no choice dropped: local and global capacity admit the same
    char cf[32];
    std::snprintf(cf, sizeof cf, "%g", c.capacity_factor);
    require(f != MoeFault::local_capacity || c.capacity_factor * c.top_k < c.experts,
            "strategy.faults: moe_local_capacity needs a capacity that can drop a choice (model.moe: capacity_factor " +
                std::string(cf) + " x top_k " + std::to_string(c.top_k) + " >= " +
                std::to_string(c.experts) + " experts admits every token's choices)");
  }
}

DataAxis data_axis(const DpOptions& o, Precision p, int microbatches) {
  DataAxis a;
  static_cast<DataOptions&>(a) = o;  // the spec's options, as they are
  a.dp = o.dp;
  a.precision = p;
  a.ranks_per_node = o.ranks_per_node;
  a.grad_accum = microbatches;
  return a;
}

DataAxis data_axis(const DpOptions& o, const TrainConfig& cfg) {
  DataAxis a = data_axis(o, cfg.precision, cfg.microbatches);
  a.on_device = cfg.device == Device::cuda;
  return a;
}

int shard_group(const DpOptions& o) {
  return int(shard_group_size(data_axis(o, Precision::fp32, 1)));
}

}  // namespace pb::dp
