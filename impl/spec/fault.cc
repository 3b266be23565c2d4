#include "impl/spec/fault.h"

#include "harness/status.h"

namespace pb {

std::string_view fault_axis_name(FaultAxis a) {
  switch (a) {
    case FaultAxis::data: return "data-parallel";
    case FaultAxis::offload: return "offload";
    case FaultAxis::moe: return "mixture-of-experts";
    case FaultAxis::tensor: return "tensor-parallel";
    case FaultAxis::context: return "context-parallel";
    case FaultAxis::pipeline: return "pipeline";
    case FaultAxis::checkpoint: return "checkpoint";
  }
  return "?";
}

std::vector<FaultDecl> fault_decls(std::initializer_list<std::span<const FaultDecl>> axes) {
  std::vector<FaultDecl> out;
  for (auto a : axes) out.insert(out.end(), a.begin(), a.end());
  return out;
}

const FaultDecl* find_fault(std::span<const FaultDecl> decls, std::string_view name) {
  for (const FaultDecl& d : decls)
    if (d.name == name) return &d;
  return nullptr;
}

void check_fault_names(std::span<const FaultDecl> decls, const std::vector<std::string>& faults) {
  for (const std::string& f : faults) {
    if (find_fault(decls, f)) continue;
    std::string known;
    for (size_t i = 0; i < decls.size(); ++i) {
      const bool first = i == 0 || decls[i - 1].axis != decls[i].axis;
      if (first) known += std::string(i ? "; " : "") + std::string(fault_axis_name(decls[i].axis)) + " faults: ";
      known += std::string(first ? "" : ", ") + std::string(decls[i].name);
    }
    throw InputError("strategy.faults: unknown fault '" + f + "' (" + (known.empty() ? "none declared" : known) + ")");
  }
}

std::string fault_name_of(std::span<const FaultDecl> decls, FaultAxis axis, uint8_t value) {
  for (const FaultDecl& d : decls)
    if (d.axis == axis && d.value == value) return std::string(d.name);
  return "?";
}

}  // namespace pb
