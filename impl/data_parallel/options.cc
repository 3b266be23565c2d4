#include "impl/data_parallel/options.h"

#include <algorithm>

#include "harness/status.h"
#include "harness/names.h"

namespace pb::dp {

namespace {
const Names<Fault>& names() {
  static const Names<Fault> n{{Fault::grad_not_averaged, "grad_not_averaged"},
                              {Fault::skip_bucket, "skip_bucket"},
                              {Fault::sync_wrong_microbatch, "sync_wrong_microbatch"},
                              {Fault::wrong_shard_offset, "wrong_shard_offset"},
                              {Fault::stale_params, "stale_params"},
                              {Fault::skip_grad_reduce, "skip_grad_reduce"},
                              {Fault::skip_replica_reduce, "skip_replica_reduce"},
                              {Fault::no_copy_back, "no_copy_back"},
                              {Fault::keep_gathered, "keep_gathered"}};
  return n;
}
}  // namespace

std::string fault_name(Fault f) { return names().name(f); }

Fault parse_fault(const std::string& s) {
  if (auto f = names().find(s)) return *f;
  throw InputError("strategy.faults: unknown fault '" + s + "' (known: " + names().list() +
                   "; mixture-of-experts faults: " + moe_fault_list() + ")");
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
  if (o == Offload::optimizer) f.push_back(Fault::no_copy_back);
  return f;
}

namespace {

bool applies(Fault f, Shard s, Offload o) {
  const auto fs = faults_for(s, o);
  return std::find(fs.begin(), fs.end(), f) != fs.end();
}

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

std::string DpOptions::describe() const {
  std::string s = std::string(shard_name(shard)) + " dp" + std::to_string(dp);
  if (offload == Offload::optimizer) s += " offload";
  if (shard == Shard::none) s += overlap ? " overlap" : " no-overlap";
  if (shard == Shard::hsdp) s += " F" + std::to_string(shard_group);
  if (shard == Shard::hzero) s += " node" + std::to_string(ranks_per_node);
  for (Fault f : faults) s += " fault:" + fault_name(f);
  return s;
}

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
  for (Fault f : {Fault::grad_not_averaged, Fault::skip_bucket, Fault::skip_grad_reduce})
    require(!o.has(f) || o.dp >= 2, "strategy.faults: " + fault_name(f) + " needs strategy.dp >= 2");
  require(!o.has(Fault::stale_params) || o.shard >= Shard::zero3 || o.dp >= 2,
          "strategy.faults: stale_params needs strategy.dp >= 2 with zero1/zero2 (no all-gather to skip)");
  require(!o.has(Fault::skip_grad_reduce) || o.shard != Shard::hsdp || shard_group(o) >= 2,
          "strategy.faults: skip_grad_reduce needs hsdp shard groups of two ranks or more (strategy.shard_group >= 2): "
          "a group of one reduces nothing");
  require(!o.has(Fault::skip_replica_reduce) || o.shard != Shard::hsdp || o.dp > shard_group(o),
          "strategy.faults: skip_replica_reduce needs more than one hsdp replica (strategy.dp > shard_group)");
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
  const bool shared = cfg.model.moe.experts > 0 && cfg.model.moe.capacity == MoeCapacity::global && o.dp > 1;
  for (MoeFault f : o.moe_faults) {
    require(cfg.model.moe.experts > 0, "strategy.faults: " + moe_fault_name(f) + " needs a mixture-of-experts model");
    if (f == MoeFault::ep_combine_permuted || f == MoeFault::ep_expert_grads_dp)
      require(o.ep >= 2, "strategy.faults: " + moe_fault_name(f) + " needs expert parallel (mesh ep >= 2)");
    else
      require(f == MoeFault::router_grad_missing || shared,
              "strategy.faults: " + moe_fault_name(f) + " needs moe.capacity = global over dp >= 2 ranks");
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
