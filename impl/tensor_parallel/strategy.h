// The tensor-parallel registration (impl/registry.cc): Megatron TP with
// sequence parallel and activation recomputation on a mesh of dp x tp ranks,
// every data-axis option on the dp axis; recomputation alone at tp = 1.
#pragma once
#include "impl/data_parallel/options.h"
#include "impl/spec/rank.h"
#include "impl/tensor_parallel/cost.h"
#include "impl/tensor_parallel/options.h"

namespace pb::tp {

const Strategy& strategy();

// The tensor axis of `s` (its tensor-parallel faults parsed).
TpOptions options_of(const RunSpec& s);
// The data axis of `s`, less the tensor-parallel faults.
dp::DpOptions data_options_of(const RunSpec& s);
// The cost shape of a rank of `s`.
TpShape tp_shape(const RunSpec& s);
// Elements of tp-replicated parameters whose gradients dp rank `dp_rank`
// holds after the step's reduction (all of them for DDP; its owned slices'
// part when sharded): what sequence parallel all-reduces over tp per step.
int64_t replicated_grads_held(const RunSpec& s, int dp_rank);

}  // namespace pb::tp
