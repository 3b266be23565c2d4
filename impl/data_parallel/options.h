// Options of the data axis as a rank runs them (the run spec's DataOptions with
// the mesh's size), and the test-only faults each strategy ships so the
// checker's teeth can be tested.
#pragma once
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "impl/data_parallel/cost.h"
#include "impl/spec/fault.h"
#include "reference/moe.h"
#include "reference/train_config.h"

namespace pb::dp {

// Injected faults (test-only): each must make the conformance engine fail.
enum class Fault : uint8_t {
  grad_not_averaged,     // DDP/ZeRO: loss gradient scaled by local, not global, tokens
  skip_bucket,           // DDP: the first gradient bucket is never all-reduced
  sync_wrong_microbatch, // DDP: communicate on the first microbatch instead of the last
  wrong_shard_offset,    // ZeRO: the optimizer steps the neighbour's slice
  stale_params,          // ZeRO-1/2: no all-gather after the update; ZeRO-3: backward
                         //   uses the previous unit's gathered buffer
  skip_grad_reduce,      // ZeRO: one unit's gradient is not reduce-scattered
  skip_replica_reduce,   // HSDP / hZeRO: the cross-replica (inter-node) reduction is skipped
  no_copy_back,          // offload: device params are not refreshed from the host master
  keep_gathered,         // ZeRO-3 family: a block's gathered buffer leaks until the end of
                         //   the microbatch (gathered again for backward, so numerics and
                         //   comm volume are unchanged: only the comm-memory check sees it)
  // Bug classes shipped by frameworks (each FaultDecl names its source):
  norm_not_all_reduced,  // sharded: each rank clips by the norm of its own shard (no sum over dp)
  norm_over_replicas,    // HSDP: the norm's partials summed over every replica (each counted dp/F times)
  hsdp_runs_flat,        // HSDP: the ranks shard over all of dp (flat FSDP), not the shard groups asked for
};
std::string fault_name(Fault f);
// The data axis's faults, declared (impl/spec/fault.h); no_copy_back is the
// offload axis's.
std::span<const FaultDecl> fault_decls();
std::set<Fault> faults_of(const Faults& faults);  // the data axis's among a spec's
std::vector<Fault> faults_for(Shard s, Offload o);  // the faults that apply

// The data axis as a rank runs it: the run spec's options (run_spec.h
// DataOptions, not repeated here), its size and node boundary from the mesh,
// and the faults of this family parsed once.
struct DpOptions : DataOptions {
  int dp = 1;
  int ranks_per_node = 0;           // 0: all ranks on one node
  int ep = 1;                       // the mesh's expert parallel (the ep faults need ep >= 2)
  std::set<Fault> faults;
  std::set<MoeFault> moe_faults;  // a mixture-of-experts model's (reference/moe.h)

  bool has(Fault f) const { return faults.count(f) > 0; }
};

void validate(const DpOptions& o);
// The options against a training config (batch divisible into ranks and
// microbatches): InputError naming the field. Checked before ranks start, so
// bad input is exit 2, not a rank failure.
void validate(const DpOptions& o, const TrainConfig& cfg);

// The cost-model view of these options.
DataAxis data_axis(const DpOptions& o, Precision p, int microbatches);
// ... for ranks training `cfg`: its precision, microbatches and device.
DataAxis data_axis(const DpOptions& o, const TrainConfig& cfg);
// Ranks the model states are sharded over (cost.h shard_group_size): 1 for
// DDP, F for HSDP (default: ranks per node), dp otherwise.
int shard_group(const DpOptions& o);

}  // namespace pb::dp
