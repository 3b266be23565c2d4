// Fuzz target: the results CSV reader (harness/io/csv.h parse_csv, what
// read_csv runs on a file's text), strict and with drop_partial_tail.
// Only pb::InputError may leave it. On a table it accepts: every row has the
// header's field count, row lines increase, a dropped tail is reported iff the
// text does not end in '\n'; and writing the table back with csv_format_row
// reads to the same table whenever no field holds a CR (which the writer folds
// to " | ") or starts the file with a UTF-8 byte-order mark (which the reader
// drops).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "harness/io/csv.h"
#include "harness/status.h"
#include "suites/fuzz/fuzz_check.h"

namespace {

bool writer_keeps(const pb::CsvTable& t) {
  auto plain = [](const std::vector<std::string>& fields) {
    for (const auto& f : fields)
      if (f.find_first_of("\r\n") != std::string::npos) return false;
    return true;
  };
  if (!plain(t.header) || (!t.header.empty() && t.header[0].rfind("\xEF\xBB\xBF", 0) == 0)) return false;
  for (const auto& r : t.rows)
    if (!plain(r)) return false;
  return true;
}

void check_table(const pb::CsvTable& t, std::string_view text, bool dropping) {
  PB_FUZZ_CHECK(!t.header.empty(), "empty header");
  PB_FUZZ_CHECK(t.rows.size() == t.row_lines.size(), "row_lines");
  size_t prev = 1;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    PB_FUZZ_CHECK(t.rows[i].size() == t.header.size(), "row " + std::to_string(i));
    PB_FUZZ_CHECK(t.row_lines[i] > prev, "row line " + std::to_string(t.row_lines[i]));
    prev = t.row_lines[i];
  }
  PB_FUZZ_CHECK(t.dropped_partial_tail == (dropping && text.back() != '\n'), "dropped_partial_tail");
  if (!writer_keeps(t)) return;
  std::string out = pb::csv_format_row(t.header);
  for (const auto& r : t.rows) out += pb::csv_format_row(r);
  PB_FUZZ_CHECK(pb::csv_committed_prefix(out) == out.size(), out);
  const pb::CsvTable back = pb::parse_csv(out, "<written>");
  PB_FUZZ_CHECK(back.header == t.header, out);
  PB_FUZZ_CHECK(back.rows == t.rows, out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool dropping : {false, true}) {
    // Ending in '\n', the text has no tail to drop: both modes read alike, and
    // each parse costs libfccp's 48 MiB line buffer.
    if (dropping && size > 0 && text.back() == '\n') break;
    try {
      const pb::CsvTable t = pb::parse_csv(text, "fuzz.csv", {.drop_partial_tail = dropping});
      check_table(t, text, dropping);
    } catch (const pb::InputError&) {
    }
  }
  return 0;
}
