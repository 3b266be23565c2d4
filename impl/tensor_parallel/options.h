// Options of the tensor axis as a rank runs them (the run spec's
// TensorOptions with the mesh's tp), and the test-only faults the checker's
// teeth are tested with.
#pragma once
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "impl/context_parallel/options.h"
#include "impl/spec/run_spec.h"

namespace pb::tp {

// Injected faults (test-only): each must make the conformance engine fail.
enum class Fault : uint8_t {
  bias_tp_times,         // row-parallel biases added on every tp rank before the all-reduce
  skip_input_allreduce,  // the column-parallel input's backward all-reduce is missing (non-SP)
  padded_vocab_in_loss,  // the padded vocabulary rows take part in the softmax
  skip_sp_grad_reduce,   // SP: grads of tp-replicated params (LayerNorms, row biases) not all-reduced
  norm_tp_times,         // tp-replicated params counted on every tp rank in the clip norm
  recompute_wrong_input, // full recompute reruns a block from the previous block's input
  // The llama family:
  kv_head_by_rank,       // kv_heads < tp: tp rank r attends with kv head r % kv_heads, not its q heads' group
  gate_up_mismatch,      // each rank pairs its gate rows with its up rows in reverse order
  // zb-h1 inside tensor-parallel pipeline stages (GPT-2, SP): W adds the
  // row-parallel biases' gradients from tp rank 0's rows of the gathered
  // output gradient on every rank, not from its own tokens' rows
  zb_w_wrong_rows,
  // Shipped bug class (TransformerEngine PR #3555): the row-parallel layers'
  // partial products rounded to bf16 before the tp reduction and the sum
  // rounded to bf16, as a bf16 all-reduce does; at bf16-mixed the engine's
  // reduction already is that, so the fault is refused there (check_precision)
  row_reduce_bf16,
};
std::string fault_name(Fault f);
std::span<const FaultDecl> fault_decls();  // impl/spec/fault.h
// The faults that apply to (tp, sp, recompute, a vocabulary that tp pads).
std::vector<Fault> faults_for(int tp, bool sp, Recompute r, bool vocab_padded);
// The same for model m (the llama family: no biases, its own faults).
std::vector<Fault> faults_for(const ModelConfig& m, int tp, bool sp, Recompute r);
// InputError if a fault among `faults` has nothing to break at precision p
// (row_reduce_bf16 at bf16-mixed).
void check_precision(const std::set<Fault>& faults, Precision p);

struct TpOptions {
  int tp = 1;
  bool sp = false;
  Recompute recompute = Recompute::none;
  std::set<Fault> faults;
  cp::CpOptions context;  // the context axis the model's attention runs over (cp = 1: none)
  bool has(Fault f) const { return faults.count(f) > 0; }
};

}  // namespace pb::tp
