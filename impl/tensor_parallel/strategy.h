// The tensor-parallel registration (impl/registry.cc): Megatron TP with
// sequence parallel and activation recomputation on a mesh of dp x tp ranks,
// every data-axis option on the dp axis; recomputation alone at tp = 1.
#pragma once
#include <utility>
#include <vector>

#include "impl/data_parallel/options.h"
#include "impl/spec/rank.h"
#include "impl/tensor_parallel/cost.h"
#include "impl/tensor_parallel/options.h"
#include "reference/layout.h"

namespace pb::tp {

const Strategy& strategy();
// The context-parallel registration: ring attention or Ulysses on a mesh of
// dp x tp x cp ranks. A rank is this one (tp_rank.h) with its attention over
// the cp group (impl/context_parallel/attention.h, below this target), its
// tokens placed by impl/context_parallel/options.h, and its data-parallel
// component over the dp x cp ranks (gradients reduced, optimizer states
// sharded over that combined group, as Megatron-LM does).
const Strategy& context_strategy();

// The pieces of both registrations.
void validate_spec(const RunSpec& s);
bool bitwise(const RunSpec& s, BackendKind b);
Replay replay(const RunSpec& s);
std::optional<RunSpec> bitwise_twin(const RunSpec& s);
std::unique_ptr<Rank> make_rank(const RunSpec& s, Communicator& world, const TrainDevice* device);

// The faults tensor (and context) parallel ships: the tensor, context, data
// and MoE axes' (impl/spec/fault.h).
std::vector<FaultDecl> tp_cp_fault_decls();
// The tensor axis of `s` (its tensor- and context-parallel faults).
TpOptions options_of(const RunSpec& s);
// The data axis of `s`, its data-axis faults alone (its dp
// ranks; ranks_per_node counts dp ranks).
dp::DpOptions data_options_of(const RunSpec& s);
// The data-parallel component's options: the data axis over the dp x cp
// ranks that hold the same parameters (Megatron reduces gradients and shards
// the optimizer over that combined group); data_options_of when cp = 1.
dp::DpOptions component_options_of(const RunSpec& s);
// The same from the data axis's options and cp: dp x cp ranks, ranks per node
// counted in them (what a pipeline stage's component spans too).
dp::DpOptions component_options(const dp::DpOptions& data, int cp);
// The cost shape of a rank of `s`.
TpShape tp_shape(const RunSpec& s);
// Declares the cp group's bytes of `layer_microbatches` (layer, microbatch)
// passes of a rank of shape x (cost.h attn_shape; nothing at cp = 1): what the
// tensor-parallel rank and pipeline stages with cp > 1 both move.
void declare_cp_comm(Declared& d, const TpShape& x, int64_t layer_microbatches);

// Elements of tp-replicated parameters whose gradients the component's rank
// `rank` (its dp x cp group rank, cp + CP * dp) holds after the step's
// reduction (all of them for DDP; its owned slices' part when sharded): what
// sequence parallel all-reduces over tp per step.
// (The llama family with kv_heads < tp: without SP, the replicated k_proj /
// v_proj gradients alone, tp_reduced_ranges'.)
int64_t replicated_grads_held(const RunSpec& s, int rank);
// Flat ranges of the parameters whose gradients are partial on each tp rank
// and summed over tp once per step: with SP every replicated one (each rank
// saw its tokens) but an MoE MLP's (router, experts' biases: computed whole on
// every tp rank from the gathered tokens); without, the llama family's replicated k_proj and v_proj
// when kv_heads < tp (each rank's q heads reach one kv head). Empty at tp 1.
std::vector<std::pair<int64_t, int64_t>> tp_reduced_ranges(const ParamLayout& l, bool sp);

}  // namespace pb::tp
