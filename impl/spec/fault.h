// Injected faults (test-only) as data. Every strategy ships faults the
// checker must catch (a missed gradient scale, a skipped bucket, a wrong
// shard offset, ...); each axis declares its own once, as FaultDecl rows
// (name, the axis it breaks, its typed value there, what it breaks, the specs
// it applies to), and each Strategy (rank.h) lists the rows of every axis it
// runs. Names are checked against those rows once, when the strategy for a
// spec is found (impl/registry.h strategy_for); an axis reads its faults as
// its own enum values (fault_values), and the teeth (suites/conformance)
// inject every declared fault where it applies, without a branch per axis.
// Invariant: a name is declared by one axis only, and keeps its text form
// (run_spec.h prints a spec's faults joined by '+').
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pb {

struct RunSpec;

// The axis whose code a fault breaks (the teeth measure each on its cases).
// checkpoint: a resharded load (impl/spec/checkpoint_state.h), injected by check --reshard only.
enum class FaultAxis : uint8_t { data, offload, moe, tensor, context, pipeline, checkpoint };
std::string_view fault_axis_name(FaultAxis a);  // "data-parallel", ..., for messages

struct FaultDecl {
  std::string_view name;    // the text form: strategy.faults, labels, baselines
  FaultAxis axis;
  uint8_t value;            // the axis's typed value (its fault enum's)
  std::string_view breaks;  // what it breaks, in a line
  // The specs it applies to: where it changes what a correct run computes in
  // a way the checker must see (the teeth inject it there); the axis's
  // validate refuses it where it has nothing to break.
  bool (*applies)(const RunSpec&) = nullptr;
};

// The declarations of several axes, in order (a strategy composing them).
std::vector<FaultDecl> fault_decls(std::initializer_list<std::span<const FaultDecl>> axes);

// The declaration named `name`, or null.
const FaultDecl* find_fault(std::span<const FaultDecl> decls, std::string_view name);

// Every name in `faults` is declared in `decls`: InputError "strategy.faults:
// unknown fault 'x' (data-parallel faults: a, b; tensor-parallel faults: ...)"
// otherwise.
void check_fault_names(std::span<const FaultDecl> decls, const std::vector<std::string>& faults);

// The values of `axis`'s faults among `faults` (names of other axes skipped),
// as the axis's enum E.
template <class E>
std::vector<E> fault_values(std::span<const FaultDecl> decls, FaultAxis axis, const std::vector<std::string>& faults) {
  std::vector<E> out;
  for (const std::string& f : faults)
    if (const FaultDecl* d = find_fault(decls, f); d && d->axis == axis) out.push_back(E(d->value));
  return out;
}

// A FaultDecl::applies for fault F of an axis whose list(s) names the
// faults that apply to a spec: whether F is among them.
template <auto F, auto list>
bool listed_for(const RunSpec& s) {
  const auto fs = list(s);
  return std::find(fs.begin(), fs.end(), F) != fs.end();
}

// The name `axis` declares for `value` ("?" if none).
std::string fault_name_of(std::span<const FaultDecl> decls, FaultAxis axis, uint8_t value);

}  // namespace pb
