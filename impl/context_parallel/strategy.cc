#include "impl/context_parallel/strategy.h"

#include "impl/tensor_parallel/strategy.h"

namespace pb::cp {

namespace {
bool runs(const RunSpec& s) { return s.mesh.cp > 1 && s.mesh.ep == 1 && s.mesh.pp == 1 && !s.pipe.schedule; }
}  // namespace

const Strategy& strategy() {
  static const Strategy s{"context_parallel", runs,          tp::validate_spec, tp::describe,
                          tp::bitwise,        tp::replay,    tp::make_rank,     tp::bitwise_twin,
                          tp::tp_cp_fault_decls()};
  return s;
}

}  // namespace pb::cp
