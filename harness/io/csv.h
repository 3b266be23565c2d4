// Results CSV: RFC 4180 quoting, rows written whole, a strict reader.
//
// What a killed writer can leave behind, precisely. Each row is formatted
// into one buffer and handed to one write(2) on an O_APPEND descriptor.
//  - Signals: Linux does not deliver a signal in the middle of a syscall, but
//    the buffered-write loop of regular files (generic_perform_write in
//    mm/filemap.c) checks fatal_signal_pending() before each page-sized chunk
//    and returns the bytes written so far. So SIGKILL during a row that spans
//    a page boundary can leave a PREFIX of the row (never interleaved or
//    garbage bytes); a row within one page lands whole or not at all. (Seen
//    here: 3 of 20 SIGKILLs of a writer of 20 KB rows left a torn row.) PIPE_BUF
//    atomicity is a pipe/FIFO guarantee and says nothing here.
//  - Crashes of the machine: without fsync, any suffix of recent writes may be
//    lost, again leaving at worst a prefix; Options::fsync_rows makes each
//    row durable before write_row returns.
// Hence the invariant the whole module relies on: a row is committed iff its
// terminating '\n' is in the file. No field holds a line break (csv_escape
// folds them), so every record is exactly one line and the committed prefix
// is everything up to the last '\n'. A trailing unterminated
// row is a torn write: read_csv reports it (or drops it on request) and a
// CsvWriter reopening the file truncates it away before appending, so torn
// rows never merge with later ones. One writer process per file is assumed
// (ranks write separate files, or rank 0 writes); threads of that process may
// share a CsvWriter.
#pragma once
#include <atomic>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace pb {

// RFC 4180 field quoting: quoted iff it holds a comma or quote (or a leading
// or trailing space, which some readers trim); quotes doubled. Each line break
// (LF, CR or CRLF) is first folded to " | ": a record is one line, which keeps
// the commit rule above a byte test and lets line-based readers (libfccp's,
// awk, grep) read every file parabench writes.
std::string csv_escape(std::string_view field);
// One record terminated by '\n' (LF; readers here and Python's csv accept LF
// and CRLF).
std::string csv_format_row(const std::vector<std::string>& fields);
// Shortest text that parses back to the same double (std::to_chars, %g
// style: 0.0003, 1e+20);
// "nan", "inf", "-inf" for non-finite values.
std::string csv_number(double v);

// A row by column name; columns not set are written empty.
class CsvRecord {
 public:
  template <class T>
  CsvRecord& set(std::string name, const T& v) {
    if constexpr (std::is_same_v<T, bool>) put(std::move(name), v ? "1" : "0");
    else if constexpr (std::is_integral_v<T>) put(std::move(name), std::to_string(v));
    else if constexpr (std::is_floating_point_v<T>) put(std::move(name), csv_number(double(v)));
    else put(std::move(name), std::string(std::string_view(v)));
    return *this;
  }
  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }
  const std::string* find(std::string_view name) const;

 private:
  void put(std::string name, std::string value);
  std::vector<std::pair<std::string, std::string>> fields_;
};

class CsvWriter {
 public:
  struct Options {
    bool fsync_rows = false;  // fdatasync after every row (durable, slower)
  };
  // Creates the file with `header`, or reopens it: the existing header must
  // equal `header` (InputError naming the file otherwise) and a torn last row
  // is truncated away. Opening errors are InputError naming the file.
  CsvWriter(std::string path, std::vector<std::string> header, Options options);
  CsvWriter(std::string path, std::vector<std::string> header) : CsvWriter(std::move(path), std::move(header), Options{}) {}
  ~CsvWriter();
  CsvWriter(CsvWriter&& o) noexcept;
  CsvWriter& operator=(CsvWriter&&) = delete;
  CsvWriter(const CsvWriter&) = delete;
  CsvWriter& operator=(const CsvWriter&) = delete;

  // fields.size() must equal the header's (std::invalid_argument otherwise).
  // A failed or short write throws std::runtime_error and poisons the writer.
  void write_row(const std::vector<std::string>& fields);
  // Maps names to header positions; an unknown name is std::invalid_argument.
  void write(const CsvRecord& record);

  const std::string& path() const { return path_; }
  const std::vector<std::string>& header() const { return header_; }
  size_t rows_written() const { return rows_.load(); }

 private:
  std::string path_;
  std::vector<std::string> header_;
  Options options_;
  int fd_ = -1;
  std::atomic<size_t> rows_{0};
  std::atomic<bool> poisoned_{false};
};

struct CsvTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<size_t> row_lines;  // 1-based line where each row starts
  bool dropped_partial_tail = false;

  // Index of a header column; std::out_of_range naming it if absent.
  size_t column(std::string_view name) const;
};

struct CsvReadOptions {
  bool drop_partial_tail = false;  // skip a torn last row instead of failing
};

// Reads a whole CSV: one record per line (LF or CRLF), RFC 4180 quoting
// within the line; a UTF-8 byte-order mark is skipped, a line is at most
// 16 MiB. Fields are split and unescaped by libfccp (io::double_quote_escape);
// its reader class io::CSVReader is not used because it needs the column
// count at compile time and tables here are read by column name. InputError naming the file (and line) for: cannot
// open, empty file, torn last row (no terminating newline), a row whose field
// count differs from the header's, malformed quoting (a stray quote, text
// after a closing quote, a quoted field left open at the end of its line).
CsvTable read_csv(const std::string& path, CsvReadOptions options = {});
CsvTable parse_csv(std::string_view text, const std::string& name, CsvReadOptions options = {});

// Byte length of the committed prefix of `text`: the end of its last complete
// record (0 if none).
size_t csv_committed_prefix(std::string_view text);

}  // namespace pb
