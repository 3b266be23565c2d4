#include "impl/tensor_parallel/options.h"

#include "harness/status.h"
#include "harness/names.h"

namespace pb::tp {

namespace {
const Names<Fault>& names() {
  static const Names<Fault> n{{Fault::bias_tp_times, "bias_tp_times"},
                              {Fault::skip_input_allreduce, "skip_input_allreduce"},
                              {Fault::padded_vocab_in_loss, "padded_vocab_in_loss"},
                              {Fault::skip_sp_grad_reduce, "skip_sp_grad_reduce"},
                              {Fault::norm_tp_times, "norm_tp_times"},
                              {Fault::recompute_wrong_input, "recompute_wrong_input"}};
  return n;
}
}  // namespace

std::string fault_name(Fault f) { return names().name(f); }

bool is_fault(const std::string& s) { return names().has(s); }

Fault parse_fault(const std::string& s, const std::string& field) {
  return names().parse(s, field, "tensor-parallel fault");
}

std::vector<Fault> faults_for(int tp, bool sp, Recompute r, bool vocab_padded) {
  std::vector<Fault> f;
  if (tp > 1) {
    f = {Fault::bias_tp_times, Fault::norm_tp_times};
    f.push_back(sp ? Fault::skip_sp_grad_reduce : Fault::skip_input_allreduce);
    if (vocab_padded) f.push_back(Fault::padded_vocab_in_loss);
  }
  if (r == Recompute::full) f.push_back(Fault::recompute_wrong_input);
  return f;
}

}  // namespace pb::tp
