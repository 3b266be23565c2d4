// The data-parallel component: one rank's share of the model states over its
// dp group, for any list of units — the whole model's (plain data parallel,
// dp_rank.h) or one pipeline stage's pieces (impl/pipeline/executor.h) — and
// the collectives that keep them consistent. Gradient sync is split into
// per-unit starts (reduce_unit, called as a unit's gradient completes) and a
// finish (finish_reduction, after the last microbatch), as Megatron-core's
// DDP splits start_grad_sync / finish_grad_sync, so a caller decides when
// communication happens and the component decides what it is.
// Families (options.h Shard): DDP holds full params and grads, all-reduced;
// ZeRO-1 full params and grads, the grads reduce-scattered once per step and
// the params all-gathered after the update; ZeRO-2 full params, sharded grads
// (reduce-scatter per microbatch); ZeRO-3 / HSDP / hZeRO sharded params,
// gathered per use (hZeRO: forward over dp, backward from a node-local
// secondary copy, ZeRO++ hpZ), HSDP's shard group F with replicas
// all-reduced. Invariant: every unit is padded to a multiple of the shard
// group (shard.h) and padding stays zero, so it adds nothing anywhere.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/comm.h"
#include "harness/mesh.h"
#include "impl/data_parallel/options.h"
#include "impl/data_parallel/shard.h"
#include "impl/spec/checkpoint_state.h"
#include "reference/optimizer.h"

namespace pb::dp {

// The groups a component uses, all slices of the run's mesh (harness/mesh.h):
// "dp" along the mesh's dp axis; HSDP "dp_shard" (F consecutive dp ranks)
// and "dp_replica" (the same position across them); hZeRO "dp_intra" and
// "dp_inter" (split_by_node). Unused ones stay null.
struct DpComms {
  std::unique_ptr<Communicator> dp, shard, replica, intra, inter;
};
// Collective over `world` (every rank calls, alike).
// `axis`: the mesh groups the component spans (dp; dp_cp under context parallel).
// `prefix` names the groups (expert parallel's expert component: "e" -> edp, edp_shard, ...).
DpComms make_dp_comms(Communicator& world, const MeshShape& mesh, const DpOptions& o, MeshAxis axis = MeshAxis::dp,
                      const std::string& prefix = "");

// Which slice of every unit a rank owns: its rank in the shard group, except
// hZeRO's, where the two-level reduce-scatter leaves slice
// (local * nodes + node) on dp rank local + rpn * node.
int owned_slice(const DpOptions& o, int dp_rank);

template <class T>
class Component {
 public:
  // Allocates and inits this rank's params, grads and optimizer state for
  // `units` (their flat ranges index `layout` for init and weight decay).
  // ops: the device the states live on (the tracker's device memory; the CPU
  // by default). Off the host the initial values are drawn on the host, then
  // moved; the optimizer state stays on the device, or with offload on the
  // host, where the CPU steps host copies of the owned gradients and
  // parameters (ZeRO-Offload: each step moves the owned gradients down and
  // the updated parameters up; dp cost.h counts the copies with the state).
  Component(const DpOptions& o, std::vector<UnitSpan> units, const ParamLayout& layout, uint64_t seed,
            DpComms& comms, MemoryTracker& mem, const kernels::DeviceOps<T>& ops = kernels::cpu_ops<T>());
  const kernels::DeviceOps<T>& ops() const { return *ops_; }
  ~Component();

  const DpOptions& options() const { return o_; }
  const ShardLayout& shards() const { return *sl_; }
  int num_units() const { return sl_->num_units(); }
  bool params_sharded() const { return o_.shard >= Shard::zero3; }
  // DDP and ZeRO-1 accumulate whole units in place; the rest reduce each
  // unit's gradient as it completes (ZeRO-2/3 family).
  bool grads_full() const { return o_.shard <= Shard::zero1; }
  Communicator& dp() { return *c_.dp; }

  // Full-parameter families: unit u's parameters / gradient in place.
  T* unit_params(int u);
  T* unit_grads(int u);  // grads_full() only

  // ZeRO-3 family: a unit's full parameters, gathered without blocking;
  // from_secondary: hZeRO's backward gather from the node-local copy.
  struct Gathered {
    Buffer<T> buf, staging;
    Request req;
    bool pending = false;
  };
  Gathered start_gather(int u, bool from_secondary);
  const T* wait_gather(int u, Gathered& g);

  // Reduces one unit's full gradient (padded) into this rank's slot: the shard
  // (ZeRO-2/3 family) or the slice's place in the full buffer (ZeRO-1); the
  // first microbatch overwrites, later ones accumulate.
  void reduce_unit(int u, T* full, bool first_micro);
  // After the last microbatch: ZeRO-1 reduces every unit; HSDP all-reduces
  // the shard over replicas. DDP's all-reduces are the caller's (buckets).
  void finish_reduction();

  // For callers that sync once after the last microbatch (a pipeline stage's
  // hooks, hooks.h StageHooks): DDP all-reduces the whole gradient buffer;
  // the rest as finish_reduction.
  void sync_after_flush();
  // Exchanges the gradient buffer with `other` (same size and tag): the stage
  // hooks keeping two gradient versions (PipeDream-2BW) without copying.
  void swap_grads(Buffer<T>& other);

  void zero_grads();
  // This rank's part of the squared gradient norm: its owned elements of the
  // units in the norm, each counted once over the run (HSDP: replica 0 only).
  double local_sq() const;
  // AdamW on this rank's segments, then (ZeRO-1/2) every unit's updated
  // slices all-gathered.
  void step(const OptimConfig& oc, long t, double lr, double grad_scale);
  // Writes this rank's share of the params or (reduced) grads into `full`
  // (flat layout): each element of the units in the norm by exactly one rank
  // of the dp group (DDP: dp rank 0; sharded: the owner of the slice; HSDP:
  // replica 0's). Summing every rank's `full` (zeros elsewhere) gives the
  // full vector exactly.
  void contribute(bool grads, std::vector<double>& full) const;
  // Collective over `check` (every rank of the run, each with its own
  // component): the full vector of `total` elements, each rank's share summed.
  std::vector<double> gather_full(bool grads, Communicator& check, int64_t total) const;

  // Calls f(flat_lo, flat_hi, data) for every range of params or (reduced,
  // after the finish) grads this rank holds: the whole units when they are
  // full (DDP; ZeRO-1/2 params), else its owned slices. Every rank of the
  // group, replicas included.
  void for_each_held(bool grads, const std::function<void(int64_t, int64_t, T*)>& f);
  // Flat ranges left out of local_sq (a tensor-parallel rank other than 0
  // holds copies of the tp-replicated parameters); sorted, disjoint.
  void exclude_from_norm(std::vector<std::pair<int64_t, int64_t>> ranges) { norm_skip_ = std::move(ranges); }
  // Squares of data[0 .. hi-lo), the grads of flat [lo, hi), minus the
  // excluded ranges (local_sq's sum of one range).
  double norm_sq(const T* data, int64_t lo, int64_t hi) const;
  // The held grads inside `ranges` (sorted flat ranges): all-reduced over
  // `group` in place, one call per contiguous piece; and their count.
  void all_reduce_held_grads(const std::vector<std::pair<int64_t, int64_t>>& ranges, Communicator& group);
  int64_t held_grads_in(const std::vector<std::pair<int64_t, int64_t>>& ranges);

  // Checkpoints (impl/spec/checkpoint_state.h): save writes the optimizer
  // segments this rank steps (params, master, Adam m and v) when it is their
  // writer in the group (contribute's rule: DDP dp rank 0, HSDP the first
  // replica, the other families every rank, each its own slices); load fills
  // every held parameter and every owned segment's state from a checkpoint
  // written at any mesh. On a device through the seam (to_host / to_device,
  // host staging); offloaded, the optimizer's host state and parameter copies.
  void save_state(RankCheckpointOut& out) const;
  void load_state(const RankCheckpointIn& in);

  T* params_data() { return params_.data(); }
  T* grads_data() { return grads_.data(); }
  const T* grads_data() const { return grads_.data(); }

 private:
  DpOptions o_;
  DpComms& c_;
  MemoryTracker& mem_;
  const kernels::DeviceOps<T>* ops_;
  void copy_n(T* dst, const T* src, int64_t n) const { ops_->copy(dst, src, size_t(n) * sizeof(T)); }
  int g_ = 1, rpn_ = 1, nodes_ = 1;
  std::unique_ptr<ShardLayout> sl_;
  Buffer<T> params_, grads_, secondary_, dummy_params_;
  std::unique_ptr<AdamW<T>> opt_;
  // Offload on a device: the owned segments (device offsets) and their host
  // copies, indexed by state_off.
  std::vector<Segment> offload_segs_;
  Buffer<T> host_params_, host_grads_;
  static size_t bytes_of(const Segment& g) { return size_t(g.flat_hi - g.flat_lo) * sizeof(T); }
  std::vector<std::pair<int64_t, int64_t>> norm_skip_;
  Communicator& shard_comm() { return o_.shard == Shard::hsdp ? *c_.shard : *c_.dp; }
};

}  // namespace pb::dp
