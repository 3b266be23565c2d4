#include "impl/spec/fault.h"

#include <algorithm>

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

namespace {

// "data-parallel faults: a, b; tensor-parallel faults: c" (rows of one axis
// stand together in every table).
std::string by_axis(std::span<const FaultDecl> decls) {
  std::string known;
  for (size_t i = 0; i < decls.size(); ++i) {
    const bool first = i == 0 || decls[i - 1].axis != decls[i].axis;
    if (first) known.append(i ? "; " : "").append(fault_axis_name(decls[i].axis)).append(" faults: ");
    known.append(first ? "" : ", ").append(decls[i].name);
  }
  return known.empty() ? "none declared" : known;
}

bool declares(std::span<const FaultDecl> decls, std::string_view name) {
  return std::any_of(decls.begin(), decls.end(), [&](const FaultDecl& d) { return d.name == name; });
}

}  // namespace

const FaultDecl& parse_fault(FaultCatalogue catalogue, std::string_view name, std::string_view field) {
  for (const FaultDecl& d : catalogue)
    if (d.name == name) return d;
  std::string m(field);
  m.append(": unknown fault '").append(name).append("' (").append(by_axis(catalogue)).append(")");
  throw InputError(m);
}

Faults parse_faults(FaultCatalogue catalogue, std::string_view text, std::string_view field) {
  Faults out;
  size_t b = 0;
  while (true) {
    const size_t e = text.find('+', b);
    out.push_back(&parse_fault(catalogue, text.substr(b, e == std::string_view::npos ? e : e - b), field));
    if (e == std::string_view::npos) break;
    b = e + 1;
  }
  normalize_faults(out);
  return out;
}

void normalize_faults(Faults& f) {
  std::sort(f.begin(), f.end(), [](const FaultDecl* a, const FaultDecl* b) { return a->name < b->name; });
  f.erase(std::unique(f.begin(), f.end(), [](const FaultDecl* a, const FaultDecl* b) { return a->name == b->name; }),
          f.end());
}

std::string faults_text(const Faults& f) {
  Faults sorted = f;
  normalize_faults(sorted);
  std::string out;
  for (const FaultDecl* d : sorted) out.append(out.empty() ? "" : "+").append(d->name);
  return out;
}

void check_declared(std::span<const FaultDecl> decls, const Faults& faults, std::string_view who) {
  for (const FaultDecl* f : faults) {
    if (declares(decls, f->name)) continue;
    std::string m("strategy.faults: '");
    m.append(f->name).append("' is not a fault of ").append(who).append(" (").append(by_axis(decls)).append(")");
    throw InputError(m);
  }
}

std::string fault_name_of(std::span<const FaultDecl> decls, FaultAxis axis, uint8_t value) {
  for (const FaultDecl& d : decls)
    if (d.axis == axis && d.value == value) return std::string(d.name);
  return "?";
}

}  // namespace pb
