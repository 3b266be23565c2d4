// Fuzz target: the results CSV validator (harness/io/csv_schema.h
// validate_csv_text_against_schema, the in-memory form of what `parabench
// validate FILE` runs) with the schema built into the library, which runs
// parse_csv, the header checks and ResultsSchema::check_row (types, enums,
// timestamps, patterns) on every row. It reports problems as values, each
// prefixed with the file's name: nothing may leave it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "harness/io/csv_schema.h"
#include "suites/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto problems = pb::validate_csv_text_against_schema(text, "fuzz.csv", pb::ResultsSchema::builtin());
  for (const auto& p : problems) PB_FUZZ_CHECK(p.rfind("fuzz.csv", 0) == 0, p);  // each names the file
  return 0;
}
