// Fuzz target: the run spec's text form (impl/spec/run_spec.h): parse_mesh
// and apply_strategy_text, on "<mesh> <strategy>" as sweep points and report
// labels spell it (input without a space: both parsers get all of it).
// Only pb::InputError may leave the parsers. Invariant (run_spec.h): on
// anything that parses, parse(print(x)) == x and print(parse(print(x))) ==
// print(x), for the mesh and the strategy.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "harness/mesh.h"
#include "harness/status.h"
#include "impl/registry.h"
#include "impl/spec/run_spec.h"
#include "suites/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t space = in.find(' ');
  const std::string_view mesh_part = in.substr(0, space);
  const std::string_view strategy_part = space == std::string_view::npos ? in : in.substr(space + 1);

  pb::RunSpec s;
  try {
    s.mesh = pb::parse_mesh(mesh_part);
    const std::string text = pb::mesh_text(s.mesh);
    const pb::MeshShape again = pb::parse_mesh(text);
    PB_FUZZ_CHECK(again == s.mesh, std::string(mesh_part) + " -> " + text + " -> " + pb::mesh_text(again));
    PB_FUZZ_CHECK(pb::mesh_text(again) == text, text);
  } catch (const pb::InputError&) {
  }
  try {
    pb::apply_strategy_text(s, strategy_part, pb::fault_catalogue(), "--strategy");
  } catch (const pb::InputError&) {
    return 0;
  }
  const std::string text = pb::strategy_text(s);
  pb::RunSpec t;
  t.mesh = s.mesh;
  pb::apply_strategy_text(t, text, pb::fault_catalogue());  // printed text must parse: no catch
  PB_FUZZ_CHECK(t == s, std::string(strategy_part) + " -> " + text + " -> " + pb::strategy_text(t));
  PB_FUZZ_CHECK(pb::strategy_text(t) == text, text);
  (void)pb::spec_label(s);
  try {
    pb::validate(s);
  } catch (const pb::InputError&) {
  }
  return 0;
}
