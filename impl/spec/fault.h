// Injected faults (test-only) as data. Every strategy ships faults the
// checker must catch (a missed gradient scale, a skipped bucket, a wrong
// shard offset, ...); each axis declares its own once, as FaultDecl rows
// (name, the axis it breaks, its typed value there, what it breaks, the specs
// it applies to), and each Strategy (rank.h) lists the rows of every axis it
// runs. A fault is typed from the parser on: the run-spec parser resolves each
// name against a catalogue of every axis's rows (impl/registry.h
// fault_catalogue) and the spec holds the row itself; strategy_for checks
// that its strategy declares each one; an axis reads its faults as its own
// enum values (fault_values), and the teeth (suites/conformance) inject every
// declared fault where it applies, without a branch per axis.
// Invariants: a name is declared by one axis only, and keeps its text form
// (run_spec.h prints a spec's faults joined by '+'); the rows are static, so
// a spec's pointers to them never dangle.
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
  // Where the bug class shipped (issue or PR of a real framework), for the
  // teeth table; empty for the project's own faults.
  std::string_view source = {};
};

// A spec's injected faults: rows of the axes' static tables, sorted by name,
// unique (normalize_faults).
using Faults = std::vector<const FaultDecl*>;

// Every row the parser may resolve a name to: the tables of every axis, each
// axis's rows together (impl/registry.h fault_catalogue; a test may pass one
// axis's table). Its rows must be static (the spec keeps pointers to them).
using FaultCatalogue = std::span<const FaultDecl>;

// The declarations of several axes, in order (a strategy composing them).
std::vector<FaultDecl> fault_decls(std::initializer_list<std::span<const FaultDecl>> axes);

// The row of `catalogue` named `name`: InputError "<field>: unknown fault 'x'
// (data-parallel faults: a, b; tensor-parallel faults: ...)" otherwise.
const FaultDecl& parse_fault(FaultCatalogue catalogue, std::string_view name, std::string_view field);

// "a+b": each name's row (parse_fault), sorted, unique.
Faults parse_faults(FaultCatalogue catalogue, std::string_view text, std::string_view field);

// Sorts by name and drops repeats (a name means one row).
void normalize_faults(Faults& f);

// "a+b": the text form of a spec's faults (names sorted).
std::string faults_text(const Faults& f);

// Every fault in `faults` is one `decls` declares (a strategy's): InputError
// "strategy.faults: 'x' is not a fault of <who> (data-parallel faults: a, b;
// ...)" otherwise.
void check_declared(std::span<const FaultDecl> decls, const Faults& faults, std::string_view who);

// The values of `axis`'s faults among `faults` (other axes' skipped), as the
// axis's enum E.
template <class E>
std::vector<E> fault_values(const Faults& faults, FaultAxis axis) {
  std::vector<E> out;
  for (const FaultDecl* d : faults)
    if (d->axis == axis) out.push_back(E(d->value));
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
