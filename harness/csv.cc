// CSV writer (one write(2) per row on O_APPEND) and RFC 4180 reader. The
// commit rule (a row exists iff its terminating newline does) is explained in
// csv.h; scan_record() below is the one scanner both sides use to apply it.
#include "harness/csv.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "harness/status.h"

namespace pb {

namespace {

enum class Scan { complete, partial, error };

// Scans the record starting at *pos into *fields. complete: *pos is past its
// terminator; partial: the text ended inside it; error: *err says why.
Scan scan_record(std::string_view t, size_t* pos, size_t* line, std::vector<std::string>* fields, std::string* err) {
  fields->clear();
  std::string cur;
  enum { start, unquoted, quoted, after_quote } st = start;
  size_t p = *pos;
  auto end_record = [&](size_t next) {
    fields->push_back(std::move(cur));
    *pos = next;
    ++*line;
    return Scan::complete;
  };
  for (; p < t.size(); ++p) {
    const char c = t[p];
    const bool crlf = c == '\r' && p + 1 < t.size() && t[p + 1] == '\n';
    if (st == quoted) {
      if (c == '"') {
        if (p + 1 < t.size() && t[p + 1] == '"') cur += '"', ++p;
        else st = after_quote;
      } else {
        if (c == '\n') ++*line;
        cur += c;
      }
      continue;
    }
    if (c == ',') {
      fields->push_back(std::move(cur));
      cur.clear();
      st = start;
    } else if (c == '\n') {
      return end_record(p + 1);
    } else if (crlf) {
      return end_record(p + 2);
    } else if (st == after_quote) {
      *err = std::string("unexpected character '") + c + "' after a closing quote";
      return Scan::error;
    } else if (c == '"') {
      if (st == unquoted) {
        *err = "stray quote inside an unquoted field";
        return Scan::error;
      }
      st = quoted;
    } else {
      cur += c;
      st = unquoted;
    }
  }
  *pos = p;
  return Scan::partial;
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
  const bool quote = field.find_first_of(",\"\r\n") != std::string_view::npos ||
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
  size_t pos = 0, line = 1, committed = 0;
  std::vector<std::string> fields;
  std::string err;
  while (pos < text.size() && scan_record(text, &pos, &line, &fields, &err) == Scan::complete) committed = pos;
  return committed;
}

CsvTable parse_csv(std::string_view text, const std::string& name, CsvReadOptions options) {
  if (text.empty()) throw InputError(name + ": empty file (no header)");
  CsvTable table;
  size_t pos = 0, line = 1;
  std::string err;
  switch (scan_record(text, &pos, &line, &table.header, &err)) {
    case Scan::partial: throw InputError(name + ":1: truncated header (no terminating newline)");
    case Scan::error: throw InputError(name + ":1: " + err);
    case Scan::complete: break;
  }
  std::vector<std::string> fields;
  while (pos < text.size()) {
    const size_t row_line = line;
    const Scan s = scan_record(text, &pos, &line, &fields, &err);
    if (s == Scan::error) throw InputError(name + ":" + std::to_string(row_line) + ": " + err);
    if (s == Scan::partial) {
      if (options.drop_partial_tail) {
        table.dropped_partial_tail = true;
        break;
      }
      throw InputError(name + ":" + std::to_string(row_line) +
                       ": truncated last row (no terminating newline; was the writer killed mid-row?)");
    }
    if (fields.size() != table.header.size())
      throw InputError(name + ":" + std::to_string(row_line) + ": row has " + std::to_string(fields.size()) +
                       " fields, header has " + std::to_string(table.header.size()));
    table.rows.push_back(fields);
    table.row_lines.push_back(row_line);
  }
  return table;
}

CsvTable read_csv(const std::string& path, CsvReadOptions options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path + ": read error");
  return parse_csv(text.str(), path, options);
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
