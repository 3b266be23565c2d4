// Fuzz target: the planner's machine profile reader, as `parabench plan
// --machine FILE` and `sweep.machine = FILE` read a profile
// (suites/planner/machine.h load_machine; the format `parabench calibrate`
// writes, machine_toml). Input: TOML text, written to a scratch file (the
// reader takes a path). Only pb::InputError may leave the reader.
// Invariants: a profile that loads writes back (machine_toml) to TOML that
// loads, whose text, written and loaded again, is the same (at 6 significant
// digits the text is a fixed point), and the planner's hardware for every
// precision is built from it without error.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "harness/status.h"
#include "suites/fuzz/fuzz_check.h"
#include "suites/planner/machine.h"

namespace {

const std::string& scratch() {
  static const std::string path = "/tmp/pb_fuzz_machine_" + std::to_string(::getpid()) + ".toml";
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  PB_FUZZ_CHECK(pb_fuzz_write_file(scratch(), in), "cannot write " + scratch());
  pb::planner::MachineProfile m;
  try {
    m = pb::planner::load_machine(scratch());
  } catch (const pb::InputError&) {
    return 0;
  }
  // Written back and read again, twice: the second text is the first's.
  std::string text = pb::planner::machine_toml(m), previous;
  for (int round = 0; round < 2; ++round) {
    PB_FUZZ_CHECK(pb_fuzz_write_file(scratch(), text), "cannot write " + scratch());
    try {
      previous = text;
      text = pb::planner::machine_toml(pb::planner::load_machine(scratch()));
    } catch (const pb::InputError& e) {
      PB_FUZZ_CHECK(false, std::string("a written profile does not load: ") + e.what() + "\n" + text);
    }
  }
  PB_FUZZ_CHECK(text == previous, "machine_toml is not a fixed point:\n" + previous + "\n---\n" + text);
  for (pb::Precision p : {pb::Precision::fp64, pb::Precision::fp32, pb::Precision::bf16_mixed})
    (void)pb::planner::hardware_for(m, p);
  return 0;
}
