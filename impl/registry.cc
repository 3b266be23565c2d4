#include "impl/registry.h"

#include "harness/status.h"
#include "impl/context_parallel/options.h"
#include "impl/data_parallel/options.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/faults.h"
#include "impl/expert_parallel/strategy.h"
#include "impl/pipeline/strategy.h"
#include "impl/tensor_parallel/options.h"
#include "impl/tensor_parallel/strategy.h"

namespace pb {

const std::vector<const Strategy*>& strategies() {
  // Adding a strategy: its folder in impl/ defines a Strategy; list it here.
  static const std::vector<const Strategy*> all = {&dp::strategy(), &pipeline::strategy(), &tp::strategy(), &tp::context_strategy(), &ep::strategy()};
  return all;
}

FaultCatalogue fault_catalogue() {
  // Adding an axis with faults: its table here too (registry_test checks
  // that every strategy's declarations are in it).
  static const std::vector<FaultDecl> all =
      fault_decls({dp::fault_decls(), ep::moe_fault_decls(), tp::fault_decls(), cp::fault_decls(),
                   pipeline::fault_decls()});
  return all;
}

const Strategy& strategy_for(const RunSpec& s) {
  for (const Strategy* st : strategies())
    if (st->runs(s)) {
      check_declared(st->faults, s.faults, "the " + st->name + " strategy");
      return *st;
    }
  std::string missing;
  auto note = [&](int size, const char* axis) {
    if (size > 1) missing += (missing.empty() ? "" : ", ") + std::string(axis) + std::to_string(size);
  };
  if (s.mesh.ep > 1) {
    note(s.mesh.tp, "tp"), note(s.mesh.cp, "cp"), note(s.mesh.pp, "pp");
    missing = "ep" + std::to_string(s.mesh.ep) + (missing.empty() ? " with a schedule or recompute" : " with " + missing);
  }
  throw InputError("mesh: " + mesh_text(s.mesh) + ": no strategy implements " +
                   (missing.empty() ? std::string("this combination") : missing) +
                   " yet (implemented: dp, tp, cp and pp and their combinations, every data-axis option; tp with sp and recompute; cp ring or ulysses; ep with dp)");
}

}  // namespace pb
