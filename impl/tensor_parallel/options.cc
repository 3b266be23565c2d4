#include "impl/tensor_parallel/options.h"

#include "harness/status.h"

namespace pb::tp {

namespace {
constexpr Fault kAll[] = {Fault::bias_tp_times,       Fault::skip_input_allreduce, Fault::padded_vocab_in_loss,
                          Fault::skip_sp_grad_reduce, Fault::norm_tp_times,        Fault::recompute_wrong_input};
}

std::string fault_name(Fault f) {
  switch (f) {
    case Fault::bias_tp_times: return "bias_tp_times";
    case Fault::skip_input_allreduce: return "skip_input_allreduce";
    case Fault::padded_vocab_in_loss: return "padded_vocab_in_loss";
    case Fault::skip_sp_grad_reduce: return "skip_sp_grad_reduce";
    case Fault::norm_tp_times: return "norm_tp_times";
    case Fault::recompute_wrong_input: return "recompute_wrong_input";
  }
  return "?";
}

bool is_fault(const std::string& s) {
  for (Fault f : kAll)
    if (fault_name(f) == s) return true;
  return false;
}

Fault parse_fault(const std::string& s, const std::string& field) {
  std::string known;
  for (Fault f : kAll) {
    if (fault_name(f) == s) return f;
    known += (known.empty() ? "" : ", ") + fault_name(f);
  }
  throw InputError(field + ": '" + s + "' is not a tensor-parallel fault (" + known + ")");
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
