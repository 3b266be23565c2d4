// Fuzz target: the results schema reader (harness/io/csv_schema.h
// ResultsSchema::parse, what `parabench validate --schema FILE` loads), then
// every kind's header and check_row over a row of the header's own names (so
// any pattern the schema compiled is matched once).
// Only pb::InputError may leave parse; the accessors throw nothing on a
// schema that parsed.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "harness/io/csv_schema.h"
#include "harness/status.h"
#include "suites/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  pb::ResultsSchema schema;
  try {
    schema = pb::ResultsSchema::parse(text, "fuzz.json");
  } catch (const pb::InputError&) {
    return 0;
  }
  for (const std::string& kind : schema.kinds()) {
    PB_FUZZ_CHECK(schema.has_kind(kind), kind);
    const std::vector<std::string> header = schema.header(kind);
    PB_FUZZ_CHECK(header.size() == schema.common().size() + schema.kind_columns(kind).size(), kind);
    (void)schema.check_row(kind, header, header);
    (void)schema.check_row(kind, header, std::vector<std::string>(header.size()));
  }
  return 0;
}
