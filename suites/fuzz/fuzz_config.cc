// Fuzz target: the TOML config reader and a whole run spec read from it, as
// `parabench train --config FILE --set k=v` does (suites/cli/common.cc
// load_config, cmd_train.cc run_strategy): from_string, the --set overrides,
// read_run_spec, check_no_unknown_keys, validate. Input: TOML text; after a
// NUL byte, NUL-separated --set assignments (TOML text holds no NUL).
// Only pb::InputError may leave the readers. Invariants: dump() is canonical
// (its text reads back to the same dump and hash), and a spec that reads
// writes back (write_run_spec) to TOML that reads to the same spec.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "harness/io/config.h"
#include "harness/status.h"
#include "impl/registry.h"
#include "impl/spec/run_spec.h"
#include "suites/fuzz/fuzz_check.h"

namespace {

void check_dump_round_trips(const pb::ConfigReader& r) {
  const std::string dump = r.dump();
  pb::ConfigReader again = pb::ConfigReader::from_string(dump, "<dump>");
  PB_FUZZ_CHECK(again.dump() == dump, "dump:\n" + dump + "\nre-dump:\n" + again.dump());
  PB_FUZZ_CHECK(again.config_hash() == r.config_hash(), dump);
}

void check_spec_round_trips(const pb::RunSpec& s) {
  // A model given by sizes is named "custom", which is no name read_train_config
  // accepts: only named models round-trip through TOML.
  if (s.train.model.name == "custom") return;
  pb::ConfigReader w;
  pb::write_run_spec(s, w);
  pb::ConfigReader r = pb::ConfigReader::from_string(w.dump(), "<written>");
  const pb::RunSpec t = pb::read_run_spec(r, pb::fault_catalogue());
  r.check_no_unknown_keys();
  PB_FUZZ_CHECK(t == s, pb::spec_label(s) + " -> " + pb::spec_label(t) + "\n" + w.dump());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  pb::ConfigReader r;
  try {
    r = pb::ConfigReader::from_string(in.substr(0, nul), "fuzz.toml");
    if (nul != std::string_view::npos) {
      std::string_view sets = in.substr(nul + 1);
      while (!sets.empty()) {
        const size_t end = sets.find('\0');
        const std::string_view a = sets.substr(0, end);
        if (a.find('=') != std::string_view::npos) r.set_from_assignment(a);  // the CLI's own check first
        sets = end == std::string_view::npos ? std::string_view{} : sets.substr(end + 1);
      }
    }
  } catch (const pb::InputError&) {
    return 0;
  }
  check_dump_round_trips(r);
  try {
    const pb::RunSpec s = pb::read_run_spec(r, pb::fault_catalogue());
    r.check_no_unknown_keys();
    pb::validate(s);
    check_spec_round_trips(s);
  } catch (const pb::InputError&) {
  }
  // Reading defaults into the table changes it; the dump stays canonical.
  check_dump_round_trips(r);
  (void)r.unread_keys();
  return 0;
}
