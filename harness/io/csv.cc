// CSV writer (one write(2) per row on O_APPEND) and reader (lines cut here;
// libfccp's quote policy, plus the RFC 4180 checks it leaves out). The commit
// rule (a row exists iff its terminating newline does) is explained in csv.h;
// csv_committed_prefix() is the one place both sides apply it.
#include "harness/io/csv.h"

#include "harness/io/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "harness/status.h"

// Parsing happens on an in-memory buffer; no read-ahead thread needed.
#define CSV_IO_NO_THREAD
// libfccp copies file names with strncpy into 256-byte buffers and terminates
// them itself; GCC 12 flags that when inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-truncation"
#include <libfccp/csv.h>
#pragma GCC diagnostic pop
#else
#include <libfccp/csv.h>
#endif

namespace pb {

namespace {

// A results CSV of a million rows is a few hundred MB; 4 GiB bounds what a
// reader holds (the text and its fields) on the 24 GiB machines it runs on.
constexpr uint64_t kMaxCsvBytes = uint64_t(4) << 30;

using FieldPolicy = io::double_quote_escape<',', '"'>;

// libfccp's column splitter accepts text after a closing quote ("x"y) and a
// quote inside an unquoted field (x"y); RFC 4180 does not, and neither do we:
// such a field is a corrupt file, not data. Empty if `raw` is well formed.
std::string field_quoting_error(std::string_view raw) {
  if (raw.find('"') == std::string_view::npos) return {};
  if (raw.front() != '"') return "stray quote inside an unquoted field";
  for (size_t i = 1; i < raw.size(); ++i) {
    if (raw[i] != '"') continue;
    if (i + 1 == raw.size()) return {};
    if (raw[i + 1] == '"') {
      ++i;
      continue;
    }
    return std::string("unexpected character '") + raw[i + 1] + "' after a closing quote";
  }
  return "unterminated quoted field (a field never spans lines)";
}

// Splits one line (NUL-terminated, line break removed, writable: unescaping
// happens in place) into its fields with libfccp's quote policy.
void split_line(char* line, const std::string& name, size_t line_no, std::vector<std::string>* fields) {
  fields->clear();
  auto fail = [&](const std::string& why) {
    throw InputError(name + ":" + std::to_string(line_no) + ": " + why);
  };
  while (line != nullptr) {
    char* begin = line;
    char* end = nullptr;
    try {
      end = begin + (FieldPolicy::find_next_column_end(begin) - begin);
    } catch (const io::error::escaped_string_not_closed&) {
      // libfccp opens a quoted section at any quote, even mid-field.
      fail(*begin == '"' ? "unterminated quoted field (a field never spans lines)"
                         : "stray quote inside an unquoted field");
    }
    if (*end == '\0') {
      line = nullptr;
    } else {
      *end = '\0';
      line = end + 1;
    }
    if (const std::string err = field_quoting_error({begin, size_t(end - begin)}); !err.empty()) fail(err);
    FieldPolicy::unescape(begin, end);
    fields->emplace_back(begin, end);
  }
}

std::string errno_text() { return std::strerror(errno); }

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& f : v) {
    if (!s.empty()) s += ", ";
    s += f;
  }
  return "[" + s + "]";
}

}  // namespace

std::string csv_escape(std::string_view field) {
  std::string folded;
  if (field.find_first_of("\r\n") != std::string_view::npos) {
    for (size_t i = 0; i < field.size(); ++i) {
      if (field[i] != '\r' && field[i] != '\n') {
        folded += field[i];
        continue;
      }
      if (field[i] == '\r' && i + 1 < field.size() && field[i + 1] == '\n') ++i;
      folded += " | ";
    }
    field = folded;
  }
  const bool quote = field.find_first_of(",\"") != std::string_view::npos ||
                     (!field.empty() && (field.front() == ' ' || field.back() == ' '));
  if (!quote) return std::string(field);
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

std::string csv_format_row(const std::vector<std::string>& fields) {
  std::string row;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) row += ',';
    row += csv_escape(fields[i]);
  }
  return row + '\n';
}

std::string csv_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
  return std::string(buf, res.ptr);
}

void CsvRecord::put(std::string name, std::string value) {
  for (auto& [n, v] : fields_)
    if (n == name) {
      v = std::move(value);
      return;
    }
  fields_.emplace_back(std::move(name), std::move(value));
}

const std::string* CsvRecord::find(std::string_view name) const {
  for (const auto& [n, v] : fields_)
    if (n == name) return &v;
  return nullptr;
}

size_t csv_committed_prefix(std::string_view text) {
  const size_t last = text.rfind('\n');
  return last == std::string_view::npos ? 0 : last + 1;
}

CsvTable parse_csv(std::string_view text, const std::string& name, CsvReadOptions options) {
  if (text.empty()) throw InputError(name + ": empty file (no header)");
  const size_t committed = csv_committed_prefix(text);
  if (committed == 0) throw InputError(name + ":1: truncated header (no terminating newline)");
  CsvTable table;
  if (committed < text.size()) {
    if (!options.drop_partial_tail)
      throw InputError(name + ":" + std::to_string(std::count(text.begin(), text.begin() + committed, '\n') + 1) +
                       ": truncated last row (no terminating newline; was the writer killed mid-row?)");
    table.dropped_partial_tail = true;
  }
  // Lines are NUL-terminated for libfccp: a NUL byte would silently cut a field.
  if (const size_t nul = text.substr(0, committed).find('\0'); nul != std::string_view::npos)
    throw InputError(name + ":" + std::to_string(std::count(text.begin(), text.begin() + std::ptrdiff_t(nul), '\n') + 1) +
                     ": NUL byte (not a text CSV)");
  // Lines are cut here rather than by libfccp's io::LineReader, which
  // allocates a 48 MiB window per parse (a CSV of a few rows read thousands
  // of times, as the gate, resume and fuzzing do, paid that each time). The
  // same rules: a line ends at '\n' (every line of the committed prefix
  // does), a '\r' before it is dropped, a UTF-8 byte-order mark at the start
  // of the file is skipped, and a line is at most 16 MiB.
  constexpr size_t kMaxLine = size_t(1) << 24;
  std::string buf(text.substr(0, committed));
  size_t pos = buf.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  size_t line_no = 0;
  auto next = [&]() -> char* {
    if (pos >= buf.size()) return nullptr;
    ++line_no;
    const size_t end = buf.find('\n', pos);  // found: the prefix ends in '\n'
    if (end - pos + 1 > kMaxLine)
      throw InputError(name + ":" + std::to_string(line_no) + ": line longer than 16 MiB (" +
                       std::to_string(end - pos) + " bytes)");
    buf[end] = '\0';
    if (end > pos && buf[end - 1] == '\r') buf[end - 1] = '\0';
    char* line = buf.data() + pos;
    pos = end + 1;
    return line;
  };
  split_line(next(), name, 1, &table.header);
  std::vector<std::string> fields;
  while (char* line = next()) {
    split_line(line, name, line_no, &fields);
    if (fields.size() != table.header.size())
      throw InputError(name + ":" + std::to_string(line_no) + ": row has " + std::to_string(fields.size()) +
                       " fields, header has " + std::to_string(table.header.size()));
    table.rows.push_back(fields);
    table.row_lines.push_back(line_no);
  }
  return table;
}

CsvTable read_csv(const std::string& path, CsvReadOptions options) {
  return parse_csv(read_input_file(path, path + ": ", "CSV", kMaxCsvBytes), path, options);
}

size_t CsvTable::column(std::string_view name) const {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return i;
  throw std::out_of_range("csv: no column '" + std::string(name) + "'");
}

CsvWriter::CsvWriter(std::string path, std::vector<std::string> header, Options options)
    : path_(std::move(path)), header_(std::move(header)), options_(options) {
  if (header_.empty()) throw std::invalid_argument("CsvWriter " + path_ + ": empty header");
  const auto parent = std::filesystem::path(path_).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) throw InputError(path_ + ": cannot create directory " + parent.string() + ": " + ec.message());
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw InputError(path_ + ": cannot open for appending: " + errno_text());
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw InputError(path_ + ": cannot stat: " + errno_text());
    std::string text(size_t(st.st_size), '\0');
    if (!text.empty() && ::pread(fd_, text.data(), text.size(), 0) != ssize_t(text.size()))
      throw InputError(path_ + ": cannot read existing contents: " + errno_text());
    const size_t keep = csv_committed_prefix(text);
    // Only a prefix of our own header line counts as a torn header; anything
    // else without a complete first record is not ours to truncate.
    if (keep == 0 && !text.empty() && csv_format_row(header_).rfind(text, 0) != 0)
      throw InputError(path_ + ": exists but is not a CSV file with a complete header; refusing to append");
    if (keep > 0) {
      const CsvTable existing = parse_csv(text, path_, {.drop_partial_tail = true});
      if (existing.header != header_)
        throw InputError(path_ + ": existing header " + join(existing.header) + " does not match " + join(header_));
    }
    if (keep < text.size() && ::ftruncate(fd_, off_t(keep)) != 0)
      throw InputError(path_ + ": cannot truncate a torn last row: " + errno_text());
    if (keep == 0) write_row(header_), rows_ = 0;
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

CsvWriter::CsvWriter(CsvWriter&& o) noexcept
    : path_(std::move(o.path_)), header_(std::move(o.header_)), options_(o.options_), fd_(o.fd_),
      rows_(o.rows_.load()), poisoned_(o.poisoned_.load()) {
  o.fd_ = -1;
}

CsvWriter::~CsvWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void CsvWriter::write_row(const std::vector<std::string>& fields) {
  if (fields.size() != header_.size())
    throw std::invalid_argument(path_ + ": row has " + std::to_string(fields.size()) + " fields, header has " +
                                std::to_string(header_.size()));
  if (poisoned_) throw std::runtime_error(path_ + ": an earlier write failed; writer closed");
  const std::string row = csv_format_row(fields);
  ssize_t n;
  do {
    n = ::write(fd_, row.data(), row.size());
  } while (n < 0 && errno == EINTR);
  if (n != ssize_t(row.size())) {
    // No retry of the remainder: another thread's row may already follow the
    // torn prefix. The next reopen truncates it.
    poisoned_ = true;
    throw std::runtime_error(path_ + (n < 0 ? ": write failed: " + errno_text()
                                            : ": short write (" + std::to_string(n) + " of " +
                                                  std::to_string(row.size()) + " bytes)"));
  }
  if (options_.fsync_rows && ::fdatasync(fd_) != 0) {
    poisoned_ = true;
    throw std::runtime_error(path_ + ": fdatasync failed: " + errno_text());
  }
  ++rows_;
}

void CsvWriter::write(const CsvRecord& record) {
  std::vector<std::string> fields(header_.size());
  for (const auto& [name, value] : record.fields()) {
    size_t i = 0;
    while (i < header_.size() && header_[i] != name) ++i;
    if (i == header_.size()) throw std::invalid_argument(path_ + ": no column '" + name + "' in the header");
    fields[i] = value;
  }
  write_row(fields);
}

}  // namespace pb
