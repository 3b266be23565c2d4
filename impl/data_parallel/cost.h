// Declared costs of the data-parallel axis: per-rank model-state bytes by tag
// and communication volume per step per group, as pure functions of the config.
// The conformance engine compares the measured figures with these; the planner
// evaluates the same functions at any scale.
//
// Memory follows ZeRO (Rajbhandari et al., SC'20, "ZeRO: Memory Optimizations
// Toward Training Trillion Parameter Models", Sec. 3 and Fig. 1), with P, G, K
// bytes per parameter for params, grads and optimizer state (K includes master
// weights): none P+G+K; zero1 P+G+K/Nd; zero2 P+(G+K)/Nd; zero3 (P+G+K)/Nd.
// Hierarchical ZeRO follows ZeRO++ hpZ (Wang et al. 2023, "ZeRO++: Extremely
// Efficient Collective Communication for Giant Model Training", Sec. 3.2).
//
// Padding invariant (Padding::padded): every buffer that takes part in a
// sharded collective is padded to a multiple of its shard-group size g, so a
// rank's shard of n elements is ceil(n/g) and the full buffer g*ceil(n/g); the
// padding elements are allocated and counted. DDP (shard=none) pads nothing.
// With unit sizes given, each unit is padded on its own (FSDP-style flat
// parameter per unit); without, the whole model is one flat vector.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "impl/spec/run_spec.h"  // Shard, Offload
#include "reference/train_config.h"  // pb::Precision

namespace pb::dp {

enum class Padding : uint8_t { padded, exact };

// Bytes per parameter of each model state. bf16-mixed: 2/2/12 (fp32 master +
// Adam m, v: ZeRO's K = 12); fp32: 4/4/8 (Adam m, v; the params are the
// master); fp64: 8/8/16.
struct BytesPerParam {
  int64_t param = 0, grad = 0, optimizer = 0;
};
BytesPerParam bytes_per_param(Precision p);

// The cost model's view of the data axis: the run spec's options (shard,
// shard_group, offload, prefetch, reshard_after_forward, ...; run_spec.h
// DataOptions) plus what the formulas also need.
// ZeRO-3 family: blocks are freed after their forward and gathered again for
// backward. The first and last units (embedding with the tied head, final
// LayerNorm) are FSDP's root: gathered once per microbatch and held through
// backward, as PyTorch FSDP does for the root module.
struct DataAxis : DataOptions {
  int64_t dp = 1;                 // data-parallel group size Nd
  Precision precision = Precision::fp32;
  Padding padding = Padding::padded;
  int64_t ranks_per_node = 0;     // 0: every rank on one node
  int64_t stride = 1;             // global-rank distance between consecutive dp ranks (tp*cp)
  int64_t grad_accum = 1;         // microbatches per step
  // The ranks run on a device (train.device = cuda): an offloaded optimizer
  // steps host copies of the owned gradients and parameters (ZeRO-Offload's
  // transfers), counted in optimizer_host with its state.
  bool on_device = false;
};

// Throws pb::InputError naming the field when the axis is inconsistent.
void validate(const DataAxis& a);

// dp ranks that share a node (consecutive dp ranks), in [1, dp].
int64_t dp_ranks_per_node(const DataAxis& a);
// Size of the group the model states are sharded over (1 for DDP, dp for
// ZeRO, F for HSDP).
int64_t shard_group_size(const DataAxis& a);

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// Elements of the full buffer of n elements sharded over g ranks: g*ceil(n/g)
// when padded, n when exact. A rank's shard is ceil(n/g) either way.
int64_t full_elems(int64_t n, int64_t g, Padding p);

struct ModelStateBytes {
  int64_t params = 0;          // device (includes hzero's secondary shard)
  int64_t grads = 0;           // device
  int64_t optimizer = 0;       // device: master weights + Adam moments
  int64_t optimizer_host = 0;  // host, when the optimizer is offloaded (on a device: and its copies)
  int64_t device_total() const { return params + grads + optimizer; }
};

// Per-rank model states for a model of psi parameters (as held by this rank's
// tensor/pipeline slice) under axis a.
ModelStateBytes model_state_bytes(int64_t psi, const DataAxis& a);
// The same with the parameters split into units padded separately.
ModelStateBytes model_state_bytes(std::span<const int64_t> units, const DataAxis& a);

// ZeRO-3 / HSDP / hZeRO transient buffers: while a unit is in use its full
// parameters are gathered (the current unit plus `prefetch` more in flight),
// and in backward its full gradient exists until reduce-scattered.
struct UnitBufferBytes {
  int64_t gathered_params = 0;   // (1 + prefetch) * padded unit * P
  int64_t unsharded_grads = 0;   // one padded unit * G
};
UnitBufferBytes zero3_unit_buffer_bytes(int64_t largest_unit, int prefetch, const DataAxis& a);

// Peak bytes of one rank's communication buffers (MemTag::comm) over a step:
// the protocol's allocations and frees replayed in the order the microbatch
// runner visits the canonical units (reference/runner.cc: unit 0 embeddings
// with the tied head, units 1..L blocks, unit L+1 final LayerNorm):
//  - ZeRO-3 family: a unit's full parameters (padded, P bytes) from the start
//    of its gather until released: blocks after their forward (when
//    resharding) and after their backward; the root units 0 and L+1 at the
//    end of the microbatch. Using unit u starts the gathers of the next
//    `prefetch` units in use order (none between the final LN and backward).
//    hZeRO's forward gather lands in a second padded staging buffer, freed
//    when waited on; its backward gathers from the secondary need none.
//  - ZeRO-2/3 family: a unit's full gradient (padded, G bytes) from the
//    backward that produces it until reduce-scattered; unit 0's lives from
//    the head's backward (tied weights) to the embedding's.
//  - every reduce-scatter of a unit writes into a slice-sized staging buffer
//    (and hZeRO's two-level one across nodes into a padded/r intermediate);
//    ZeRO-1 reduces every unit after the last microbatch, ZeRO-1/2 all-gather
//    every unit's updated slice from a slice-sized buffer after the step.
// DDP reduces in place: 0. The conformance engine requires the measured peak
// to equal this, so a prefetch that runs ahead or a buffer kept too long is a
// failure, not a footnote.
int64_t comm_buffer_peak_bytes(std::span<const int64_t> units, const DataAxis& a);

// Which units a component's hooks treat as blocks (gathered per use,
// resharded after forward, gathered again for backward, prefetched in use
// order up to last_forward) and which as roots (gathered until the end of the
// microbatch): the model's units 1..L are blocks, 0 and L+1 roots; an expert
// component's units (one per MoE layer) are all blocks.
struct UnitRoles {
  int first_block = 0, last_block = -1, last_forward = -1;
  static UnitRoles model(int n) { return {1, n - 2, n - 1}; }
  static UnitRoles all_blocks(int n) { return {0, n - 1, n - 1}; }
  bool is_block(int u) const { return u >= first_block && u <= last_block; }
};

// One unit of a component as its hooks use it in each microbatch: its
// parameters gathered fwd_uses times in forward and bwd_uses times in
// backward (the ZeRO-3 family; a pipeline stage's units: pipeline::stage_units).
struct UnitUse {
  int64_t size = 0;
  int fwd_uses = 0, bwd_uses = 0;
};
// The uses of units laid out by `roles` in the microbatch runner's order:
// every unit gathered once in forward; blocks again in backward when they
// are resharded after forward (roots are held through backward).
std::vector<UnitUse> unit_uses(std::span<const int64_t> units, const DataAxis& a, UnitRoles roles);

// Bytes a rank's data-parallel component moves through its own memory in one
// step besides its collectives (Component, hooks_*.cc): zeroing the gradient
// before the first microbatch; every comm buffer it allocates is zero-filled
// (harness/memory.h: a unit's gathered parameters per use, its full gradient
// and the reduce-scatter's slice per microbatch, ZeRO-1/2's updated slice
// after the step; hZeRO's staging and intermediate buffers); the reduced
// slice copied into the held gradient (read + write) or added to it (two
// reads + a write) from the second microbatch on; and where the shard group
// is a single rank, the copies that stand in for its gather and
// reduce-scatter (read + write), which the collectives' rows then do not
// time. hZeRO's forward also re-orders the staged slices and keeps the
// node-local secondary copy (read + write each). DDP reduces in place: only
// its zeroing. On a CPU this streaming is a visible share of a ZeRO step
// (small at dp1 with 2 microbatches: ZeRO-3 about 82 MB against DDP's 3.3 MB
// per step); the planner times it at its own measured rate
// (Hardware::buffer_mem_bw_GBps).
int64_t local_traffic_bytes(std::span<const UnitUse> units, const DataAxis& a);

// Current and peak bytes of a replayed allocation sequence.
class PeakMeter {
 public:
  void alloc(int64_t b) { peak_ = std::max(peak_, cur_ += b); }
  void free(int64_t b) { cur_ -= b; }
  int64_t peak() const { return peak_; }

 private:
  int64_t cur_ = 0, peak_ = 0;
};

// One component's comm-buffer protocol (the list above), replayed hook call
// by hook call on a meter that several components may share (expert parallel
// interleaves its dense and expert components' calls as the runner makes them).
class CommBufferReplay {
 public:
  CommBufferReplay(std::span<const int64_t> units, const DataAxis& a, UnitRoles roles, PeakMeter& m);
  void params(int u);
  void release(int u);
  void grads(int u);
  void grads_ready(int u);
  void end_microbatch();  // the roots resharded
  void finish();          // after the last microbatch (ZeRO-1's reductions)
  void after_step();      // ZeRO-1/2's all-gathers of the updated slices

 private:
  void reduce(int u);
  void start_gather(int u);
  DataAxis a_;
  UnitRoles roles_;
  PeakMeter& m_;
  BytesPerParam b_;
  int64_t r_ = 1, nodes_ = 1;
  std::vector<int64_t> pad_, slice_;
  std::vector<bool> gathered_, staged_, unit_grad_;
  bool params_sharded_ = false, grads_per_unit_ = false, backward_ = false, forward_done_ = false;
};

// One optimizer step's hook calls, in the order reference/runner.cc's
// MicrobatchRunner::compute makes them for one microbatch, then the finish
// and the after-step: on `d`, the model's units (`units` of them: embeddings,
// L blocks, final LayerNorm), and under expert parallel on `e`, the expert
// component (unit j: the j-th MoE block, visited inside block i when
// is_moe(i)). d's finish and after-step come before e's.
void replay_step(CommBufferReplay& d, int units, CommBufferReplay* e = nullptr,
                 const std::function<bool(int)>& is_moe = {});

enum class Coll : uint8_t { all_reduce, reduce_scatter, all_gather };
std::string_view coll_name(Coll c);

// Bus-bandwidth factor (nccl-tests PERFORMANCE.md): all_reduce 2(n-1)/n,
// reduce_scatter and all_gather (n-1)/n; busbw = algbw * factor, so the bytes a
// ring moves through each link are logical * factor.
double bus_factor(Coll c, int64_t n);

// One kind of collective on one group, totalled over a step: `calls` calls
// moving `bytes` logical bytes in all (nccl-tests convention: all_reduce counts
// its buffer S, reduce_scatter and all_gather the full unsharded buffer S).
struct CollCost {
  std::string group;           // dp | dp_shard | dp_replica | dp_intra | dp_inter
  std::string phase;           // fwd | bwd | step
  Coll op = Coll::all_reduce;
  int64_t group_size = 1;
  int64_t calls = 0;           // per step
  int64_t bytes = 0;           // logical bytes per step, summed over calls
  bool inter_node = false;     // the group spans more than one node
  double bus_bytes() const { return double(bytes) * bus_factor(op, group_size); }
};

// Collectives of one optimizer step (grad_accum = m microbatches), one entry
// per (group, phase, op):
//   none   all_reduce(Psi*G) once per step                         (2 Psi bus)
//   zero1  reduce_scatter(G) once + all_gather(P) once after the step
//   zero2  reduce_scatter(G) per microbatch (grads are sharded, as in
//          DeepSpeed) + all_gather(P) once after the step
//   zero3  per microbatch and unit: all_gather(P) fwd, reduce_scatter(G) bwd;
//          all_gather(P) bwd of every block unit again when resharded after
//          forward (the root units, first and last, stay gathered; with a
//          single unit — the psi overload — it counts as a block)
//          (ZeRO Sec. 7.2.2: ~3 Psi, 1.5x DDP)
//   hsdp   zero3 on the shard group of F + all_reduce of the accumulated
//          gradient shard (Psi/F) across the dp/F replicas once per step
//   hzero  all_gather(P) fwd over dp; bwd all_gather over the node from the
//          secondary shard (hpZ); reduce_scatter over the node then across
//          nodes of the node-local 1/r (two-level)
// Groups of size 1 issue nothing.
std::vector<CollCost> comm_per_step(int64_t psi, const DataAxis& a);
std::vector<CollCost> comm_per_step(std::span<const int64_t> units, const DataAxis& a);
// The same with the block units named (the overloads above: UnitRoles::model
// for more than 2 units, else all blocks) and the groups' names prefixed
// (expert parallel's expert component: "e" -> edp, edp_shard, ...).
std::vector<CollCost> comm_per_step(std::span<const int64_t> units, const DataAxis& a, UnitRoles roles,
                                    const std::string& prefix = "");

struct CommTotals {
  int64_t logical_intra = 0, logical_inter = 0;
  double bus_intra = 0, bus_inter = 0;
};
CommTotals comm_totals(std::span<const CollCost> c);

// Inter-node logical bytes of flat ZeRO-3 divided by those of hZeRO for the
// same axis (hpZ + two-level reduce-scatter): 3 / (1 + 1/r) with r dp ranks per
// node. Requires the dp group to span nodes.
double hzero_inter_node_reduction(int64_t psi, const DataAxis& a);

}  // namespace pb::dp
