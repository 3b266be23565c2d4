// The mixture-of-experts layer's injected faults (reference/moe.h MoeFault),
// declared (impl/spec/fault.h): the capacity and load-balancing faults of
// global capacity, the router's missing gradient, and expert parallel's
// dispatch and expert-reduction faults. Every strategy that runs an MoE model
// lists them.
#pragma once
#include <set>
#include <span>
#include <string>

#include "impl/spec/fault.h"
#include "reference/moe.h"

namespace pb::ep {

std::span<const FaultDecl> moe_fault_decls();
std::string moe_fault_name(MoeFault f);
// The MoE faults among a spec's.
std::set<MoeFault> moe_faults_of(const Faults& faults);
// Under context parallel (cp > 1, in and outside pipeline stages): an MoE
// fault with nothing to break there (its `applies` false) is refused,
// InputError naming the ones that do.
void require_moe_faults_apply_under_cp(const RunSpec& s);

}  // namespace pb::ep
