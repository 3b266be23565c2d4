#include "impl/spec/rank.h"

namespace pb {

void Declared::add_comm(const std::string& group, CommOp op, int64_t bytes) {
  for (auto& c : comm)
    if (c.group == group && c.op == op) {
      c.bytes += bytes;
      return;
    }
  comm.push_back({group, op, bytes});
}

std::vector<StepStats> Rank::train(int steps, std::vector<double>* grads1) {
  std::vector<StepStats> out;
  for (int i = 0; i < steps; ++i) {
    out.push_back(step());
    if (i == 0 && grads1) *grads1 = full_grads();
  }
  return out;
}

}  // namespace pb
