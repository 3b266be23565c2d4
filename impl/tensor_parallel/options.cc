#include "impl/tensor_parallel/options.h"

#include "harness/status.h"
#include "impl/spec/run_spec.h"

namespace pb::tp {

std::vector<Fault> faults_for(int tp, bool sp, Recompute r, bool vocab_padded) {
  std::vector<Fault> f;
  if (tp > 1) {
    f = {Fault::bias_tp_times, Fault::norm_tp_times};
    f.push_back(sp ? Fault::skip_sp_grad_reduce : Fault::skip_input_allreduce);
    if (vocab_padded) f.push_back(Fault::padded_vocab_in_loss);
    f.push_back(Fault::row_reduce_bf16);
  }
  if (r == Recompute::full) f.push_back(Fault::recompute_wrong_input);
  return f;
}

std::vector<Fault> faults_for(const ModelConfig& m, int tp, bool sp, Recompute r) {
  std::vector<Fault> f = faults_for(tp, sp, r, m.V % tp != 0);
  if (!m.llama()) return f;
  std::erase(f, Fault::bias_tp_times);  // no biases
  if (tp > 1) f.push_back(Fault::gate_up_mismatch);
  if (tp > 1 && m.kv_heads < tp) f.push_back(Fault::kv_head_by_rank);
  return f;
}

namespace {
std::vector<Fault> faults_for_spec(const RunSpec& s) {
  return faults_for(s.train.model, s.mesh.tp, s.tensor.sp, s.tensor.recompute);
}
// W of a split backward in tensor-parallel stages with SP and biases.
bool zb_sp_stages(const RunSpec& s) {
  return s.pipe.schedule == pipeline::ScheduleKind::zb_h1 && s.mesh.pp > 1 && s.mesh.tp > 1 && s.tensor.sp &&
         !s.train.model.llama();
}
// row_reduce_bf16 has nothing to break at bf16-mixed (check_precision).
bool row_reduce_applies(const RunSpec& s) {
  return s.train.precision != Precision::bf16_mixed && listed_for<Fault::row_reduce_bf16, faults_for_spec>(s);
}
}  // namespace

void check_precision(const std::set<Fault>& faults, Precision p) {
  require(!faults.count(Fault::row_reduce_bf16) || p != Precision::bf16_mixed,
          "strategy.faults: row_reduce_bf16 does not apply at precision bf16-mixed: there the row-parallel "
          "partial products are bf16 tensors and the tp all-reduce/reduce-scatter already sums them in bf16 "
          "(as Megatron-LM's reduce_from_tensor_model_parallel_region does), so the fault would change nothing; "
          "inject it at fp32");
}

// In faults_for's order (the teeth table's rows).
std::span<const FaultDecl> fault_decls() {
  using enum Fault;
  constexpr FaultAxis T = FaultAxis::tensor;
  static const FaultDecl d[] = {
      {"bias_tp_times", T, uint8_t(bias_tp_times), "row-parallel biases added on every tp rank before the all-reduce",
       listed_for<bias_tp_times, faults_for_spec>},
      {"norm_tp_times", T, uint8_t(norm_tp_times), "tp-replicated params counted on every tp rank in the clip norm",
       listed_for<norm_tp_times, faults_for_spec>},
      {"skip_input_allreduce", T, uint8_t(skip_input_allreduce),
       "the column-parallel input's backward all-reduce is missing (non-SP)",
       listed_for<skip_input_allreduce, faults_for_spec>},
      {"skip_sp_grad_reduce", T, uint8_t(skip_sp_grad_reduce),
       "SP: grads of tp-replicated params (LayerNorms, row biases) not all-reduced",
       listed_for<skip_sp_grad_reduce, faults_for_spec>},
      {"padded_vocab_in_loss", T, uint8_t(padded_vocab_in_loss),
       "the padded vocabulary rows take part in the softmax", listed_for<padded_vocab_in_loss, faults_for_spec>},
      {"recompute_wrong_input", T, uint8_t(recompute_wrong_input),
       "full recompute reruns a block from the previous block's input",
       listed_for<recompute_wrong_input, faults_for_spec>},
      {"kv_head_by_rank", T, uint8_t(kv_head_by_rank),
       "llama, kv_heads < tp: tp rank r attends with kv head r % kv_heads (kv heads dealt out as if split)",
       listed_for<kv_head_by_rank, faults_for_spec>},
      {"gate_up_mismatch", T, uint8_t(gate_up_mismatch),
       "llama: each tp rank pairs its gate_proj rows with its up_proj rows in reverse order",
       listed_for<gate_up_mismatch, faults_for_spec>},
      {"zb_w_wrong_rows", T, uint8_t(zb_w_wrong_rows),
       "zb-h1 in tensor-parallel stages with SP: W takes the row-parallel biases' gradients from tp rank 0's rows "
       "of the gathered output gradient on every rank",
       zb_sp_stages},
      {"row_reduce_bf16", T, uint8_t(row_reduce_bf16),
       "the row-parallel layers' partial products rounded to bf16 before the tp reduction and the sum rounded "
       "to bf16 (a bf16 all-reduce at fp32)",
       row_reduce_applies, "TransformerEngine PR #3555"}};
  return d;
}

std::string fault_name(Fault f) { return fault_name_of(fault_decls(), FaultAxis::tensor, uint8_t(f)); }

}  // namespace pb::tp
