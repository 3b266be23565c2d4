// Loading results/schema.json, checking rows against it, and the validated
// ResultWriter. Values are checked as text, exactly as a plotting script will
// parse them: integers are decimal, floats parse with from_chars (or are
// nan/inf/-inf), booleans are 0/1.
#include "harness/io/csv_schema.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "harness/status.h"

namespace pb {

namespace {

using Json = nlohmann::ordered_json;

// Column patterns run in libstdc++'s polynomial mode (a Thompson NFA: time
// O(value x pattern), recursion bounded by the pattern; back-references are
// a "bad pattern"). Its default backtracking executor recursed once per
// character of the value, so a 100 KB run_id overflowed the stack, and a
// pattern like (a|a)*b took exponential time. The length cap bounds the
// compiler's recursion (one level per parenthesis).
#if defined(__GLIBCXX__)
constexpr auto kPatternSyntax = std::regex::ECMAScript | std::regex_constants::__polynomial;
#else
constexpr auto kPatternSyntax = std::regex::ECMAScript;
#endif
constexpr size_t kMaxPatternLength = 1024;

// libstdc++'s regex compiler reads the numbers of {m,n} and \N into a long
// with no overflow check (undefined behaviour past 18 digits; found by the
// schema fuzzer), so numbers in those places are held to 4 digits before the
// pattern is compiled (a count over 9999 would exceed the NFA's state limit
// anyway). Conservative: a digit run after a backslash or inside braces is
// judged wherever it stands, even inside a bracket class. Empty if fine.
std::string pattern_number_problem(std::string_view p) {
  constexpr size_t kMaxDigits = 4;
  bool in_braces = false;
  auto digits_from = [&](size_t i) {
    size_t j = i;
    while (j < p.size() && p[j] >= '0' && p[j] <= '9') ++j;
    return j - i;
  };
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      if (digits_from(i + 1) > kMaxDigits) return "a back-reference number longer than 4 digits";
      ++i;  // the escaped character
    } else if (c == '{') {
      in_braces = true;
      if (digits_from(i + 1) > kMaxDigits) return "a repetition count longer than 4 digits";
    } else if (c == '}') {
      in_braces = false;
    } else if (c == ',' && in_braces && digits_from(i + 1) > kMaxDigits) {
      return "a repetition count longer than 4 digits";
    }
  }
  return {};
}

// An optional string field of a column ("" when absent); InputError otherwise.
std::string optional_string(const Json& j, const char* key, const std::string& where, const std::string& column) {
  if (!j.contains(key)) return "";
  if (!j[key].is_string()) throw InputError(where + ": column '" + column + "': '" + key + "' must be a string");
  return j[key].get<std::string>();
}

ColumnSpec parse_column(const Json& j, const std::string& where) {
  auto fail = [&](const std::string& what) { throw InputError(where + ": " + what); };
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || !j.contains("type") || !j["type"].is_string())
    fail("a column needs string fields 'name' and 'type'");
  ColumnSpec c;
  c.name = j["name"].get<std::string>();
  const std::string type = j["type"].get<std::string>();
  using T = ColumnSpec::Type;
  if (type == "string") c.type = T::string;
  else if (type == "int") c.type = T::integer;
  else if (type == "float") c.type = T::number;
  else if (type == "bool") c.type = T::boolean;
  else if (type == "enum") c.type = T::enumeration;
  else if (type == "timestamp") c.type = T::timestamp;
  else fail("column '" + c.name + "': unknown type '" + type + "'");
  const std::string req = optional_string(j, "required", where, c.name);
  using R = ColumnSpec::Required;
  if (req.empty()) c.required = R::optional;
  else if (req == "always") c.required = R::always;
  else if (req == "ok") c.required = R::when_ok;
  else if (req == "not_ok") c.required = R::when_not_ok;
  else fail("column '" + c.name + "': unknown 'required' value '" + req + "'");
  if (j.contains("added")) {
    const Json& a = j["added"];
    if (!a.is_number_integer() || a.get<int64_t>() < 1 || a.get<int64_t>() > INT_MAX)
      fail("column '" + c.name + "': 'added' must be a schema version >= 1");
    c.added = int(a.get<int64_t>());
  }
  if (j.contains("values")) {
    const Json& v = j["values"];
    if (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_string(); }))
      fail("column '" + c.name + "': 'values' must be an array of strings");
    c.values = v.get<std::vector<std::string>>();
  }
  if (c.type == T::enumeration && c.values.empty()) fail("column '" + c.name + "': an enum needs 'values'");
  c.unit = optional_string(j, "unit", where, c.name);
  c.pattern = optional_string(j, "pattern", where, c.name);
  if (c.pattern.size() > kMaxPatternLength)
    fail("column '" + c.name + "': pattern longer than " + std::to_string(kMaxPatternLength) + " characters");
  if (const std::string bad = pattern_number_problem(c.pattern); !bad.empty())
    fail("column '" + c.name + "': bad pattern: " + bad);
  if (!c.pattern.empty()) {
    try {
      c.compiled = std::make_shared<const std::regex>(c.pattern, kPatternSyntax);
    } catch (const std::regex_error& e) {
      fail("column '" + c.name + "': bad pattern: " + e.what());
    }
  }
  return c;
}

std::vector<ColumnSpec> parse_columns(const Json& j, const std::string& where,
                                      const std::vector<ColumnSpec>& taken) {
  if (!j.is_array()) throw InputError(where + ": expected an array of columns");
  std::vector<ColumnSpec> cols;
  for (const auto& c : j) {
    ColumnSpec col = parse_column(c, where);
    auto same = [&](const ColumnSpec& x) { return x.name == col.name; };
    if (std::any_of(taken.begin(), taken.end(), same) || std::any_of(cols.begin(), cols.end(), same))
      throw InputError(where + ": duplicate column '" + col.name + "'");
    cols.push_back(std::move(col));
  }
  return cols;
}

bool is_integer(const std::string& v) {
  int64_t x;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  return r.ec == std::errc() && r.ptr == v.data() + v.size();
}

bool is_number(const std::string& v) {
  if (v == "nan" || v == "inf" || v == "-inf") return true;
  double x;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  return r.ec == std::errc() && r.ptr == v.data() + v.size();
}

// A column with a unit (bytes, s, GB/s, tokens/s, ...) holds a measured or
// estimated physical figure: in a row of status ok it must be finite and
// >= 0 (a NaN step time or a negative throughput is not a result).
bool measurement(const ColumnSpec& c, const std::string& status) { return !c.unit.empty() && status == "ok"; }

bool is_timestamp(const std::string& v) {
  static const std::regex kIso(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z)");
  return std::regex_match(v, kIso);
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) {
    if (!s.empty()) s += sep;
    s += x;
  }
  return s;
}

}  // namespace

ResultsSchema ResultsSchema::parse(std::string_view json_text, const std::string& name) {
  const std::string where = "schema " + name;
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    throw InputError(where + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("common") || !j.contains("kinds") || !j["kinds"].is_object())
    throw InputError(where + ": needs 'common' (array) and 'kinds' (object)");
  ResultsSchema s;
  if (j.contains("schema_version")) {
    const Json& v = j["schema_version"];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT_MAX)
      throw InputError(where + ": 'schema_version' must be a whole number >= 0");
    s.version_ = int(v.get<int64_t>());
  }
  s.common_ = parse_columns(j["common"], where + ": common", {});
  for (const auto& [kind, body] : j["kinds"].items()) {
    if (!body.is_object() || !body.contains("columns")) throw InputError(where + ": kind '" + kind + "' needs 'columns'");
    s.kinds_.emplace_back(kind, parse_columns(body["columns"], where + ": kind '" + kind + "'", s.common_));
  }
  return s;
}

ResultsSchema ResultsSchema::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("schema " + path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

const ResultsSchema& ResultsSchema::builtin() {
  static const ResultsSchema schema = parse(builtin_results_schema_json(), "<builtin results/schema.json>");
  return schema;
}

std::vector<std::string> ResultsSchema::kinds() const {
  std::vector<std::string> out;
  for (const auto& [k, cols] : kinds_) out.push_back(k);
  return out;
}

bool ResultsSchema::has_kind(std::string_view kind) const {
  for (const auto& [k, cols] : kinds_)
    if (k == kind) return true;
  return false;
}

const std::vector<ColumnSpec>& ResultsSchema::kind_columns(std::string_view kind) const {
  for (const auto& [k, cols] : kinds_)
    if (k == kind) return cols;
  throw std::invalid_argument("results schema: unknown kind '" + std::string(kind) + "' (known: " + join(kinds(), ", ") + ")");
}

std::vector<std::string> ResultsSchema::header(std::string_view kind) const {
  std::vector<std::string> h;
  for (const auto& c : common_) h.push_back(c.name);
  for (const auto& c : kind_columns(kind)) h.push_back(c.name);
  return h;
}

bool ResultsSchema::accepts_header(std::string_view kind, const std::vector<std::string>& h) const {
  if (!has_kind(kind)) return false;
  // h must be header(kind) with only added columns left out, in order.
  size_t i = 0;
  for (const auto* list : {&common_, &kind_columns(kind)})
    for (const auto& c : *list) {
      if (i < h.size() && h[i] == c.name) ++i;
      else if (c.added == 0) return false;
    }
  return i == h.size();
}

std::vector<std::string> ResultsSchema::check_row(std::string_view kind, const std::vector<std::string>& header,
                                                  const std::vector<std::string>& row) const {
  std::vector<std::string> problems;
  const auto& kcols = kind_columns(kind);
  std::string status;
  for (size_t i = 0; i < header.size() && i < row.size(); ++i)
    if (header[i] == "status") status = row[i];
  for (size_t i = 0; i < header.size() && i < row.size(); ++i) {
    const ColumnSpec* spec = nullptr;
    for (const auto* list : {&common_, &kcols})
      for (const auto& c : *list)
        if (c.name == header[i]) spec = &c;
    if (!spec) continue;  // an unknown column is a header problem, reported once by the validator
    const std::string col = "column '" + header[i] + "'";
    const std::string& v = row[i];
    using R = ColumnSpec::Required;
    if (v.empty()) {
      if (spec->required == R::always) problems.push_back(col + ": required, but empty");
      else if (spec->required == R::when_ok && status == "ok") problems.push_back(col + ": required when status is ok, but empty");
      else if (spec->required == R::when_not_ok && !status.empty() && status != "ok")
        problems.push_back(col + ": required when status is '" + status + "', but empty");
      continue;
    }
    using T = ColumnSpec::Type;
    const std::string quoted = "'" + v + "'";
    switch (spec->type) {
      case T::integer:
        if (!is_integer(v)) problems.push_back(col + ": " + quoted + " is not an integer");
        else if (measurement(*spec, status) && v[0] == '-')
          problems.push_back(col + ": " + quoted + " is not a measurement (" + spec->unit + " >= 0 in a row of status ok)");
        break;
      case T::number:
        if (!is_number(v)) problems.push_back(col + ": " + quoted + " is not a number");
        else if (measurement(*spec, status) && !(std::strtod(v.c_str(), nullptr) >= 0 &&
                                                  std::strtod(v.c_str(), nullptr) < HUGE_VAL))
          problems.push_back(col + ": " + quoted + " is not a measurement (a finite " + spec->unit +
                             " figure >= 0 in a row of status ok)");
        break;
      case T::boolean:
        if (v != "0" && v != "1") problems.push_back(col + ": " + quoted + " is not 0 or 1");
        break;
      case T::enumeration:
        if (std::find(spec->values.begin(), spec->values.end(), v) == spec->values.end())
          problems.push_back(col + ": " + quoted + " is not one of " + join(spec->values, ", "));
        break;
      case T::timestamp:
        if (!is_timestamp(v)) problems.push_back(col + ": " + quoted + " is not an ISO-8601 UTC timestamp");
        break;
      case T::string:
        break;
    }
    if (spec->compiled && !std::regex_match(v, *spec->compiled))
      problems.push_back(col + ": " + quoted + " does not match " + spec->pattern);
    if (spec->name == "kind" && v != kind)
      problems.push_back(col + ": " + quoted + " in a file of kind '" + std::string(kind) + "'");
  }
  return problems;
}

namespace {

// The checks of validate_csv_against_schema on a table read from `csv_path`.
std::vector<std::string> validate_table(const CsvTable& t, const std::string& csv_path, const ResultsSchema& schema) {
  constexpr size_t kMaxProblems = 100;
  std::vector<std::string> problems;
  std::string kind;
  if (!t.rows.empty()) {
    const auto it = std::find(t.header.begin(), t.header.end(), "kind");
    if (it == t.header.end()) return {csv_path + ": no 'kind' column"};
    kind = t.rows[0][size_t(it - t.header.begin())];
    if (!schema.has_kind(kind))
      return {csv_path + ":" + std::to_string(t.row_lines[0]) + ": unknown kind '" + kind + "' (known: " +
              join(schema.kinds(), ", ") + ")"};
  } else {
    for (const auto& k : schema.kinds())
      if (schema.accepts_header(k, t.header)) kind = k;
    if (kind.empty()) return {csv_path + ": header (no rows) matches no kind of the schema"};
  }
  // The current header, or an older file's without the columns a later
  // schema version added; else what is wrong with it.
  if (!schema.accepts_header(kind, t.header)) {
    std::vector<std::string> expect;
    for (const auto* list : {&schema.common(), &schema.kind_columns(kind)})
      for (const auto& c : *list) {
        expect.push_back(c.name);
        if (c.added == 0 && std::find(t.header.begin(), t.header.end(), c.name) == t.header.end())
          problems.push_back(csv_path + ": missing column '" + c.name + "' (kind '" + kind + "')");
      }
    for (const auto& c : t.header)
      if (std::find(expect.begin(), expect.end(), c) == expect.end())
        problems.push_back(csv_path + ": unknown column '" + c + "' (kind '" + kind + "')");
    if (problems.empty()) problems.push_back(csv_path + ": columns are not in schema order");
  }
  for (size_t r = 0; r < t.rows.size() && problems.size() < kMaxProblems; ++r)
    for (auto& p : schema.check_row(kind, t.header, t.rows[r]))
      problems.push_back(csv_path + ":" + std::to_string(t.row_lines[r]) + ": " + p);
  if (problems.size() >= kMaxProblems) problems.push_back(csv_path + ": (stopped after " + std::to_string(kMaxProblems) + " problems)");
  return problems;
}

}  // namespace

std::vector<std::string> validate_csv_against_schema(const std::string& csv_path, const ResultsSchema& schema) {
  CsvTable t;
  try {
    t = read_csv(csv_path);
  } catch (const InputError& e) {
    return {e.what()};
  }
  return validate_table(t, csv_path, schema);
}

std::vector<std::string> validate_csv_text_against_schema(std::string_view csv_text, const std::string& name,
                                                          const ResultsSchema& schema) {
  CsvTable t;
  try {
    t = parse_csv(csv_text, name);
  } catch (const InputError& e) {
    return {e.what()};
  }
  return validate_table(t, name, schema);
}

std::vector<std::string> validate_csv_against_schema(const std::string& csv_path, const std::string& schema_path) {
  return validate_csv_against_schema(csv_path, ResultsSchema::load(schema_path));
}

namespace {

// The header a ResultWriter appends under: the schema's, or an existing older
// file's (ResultsSchema::accepts_header). Any other existing header is left
// for CsvWriter to refuse, naming both.
std::vector<std::string> append_header(const std::string& path, std::string_view kind, const ResultsSchema& schema) {
  std::vector<std::string> header = schema.header(kind);
  std::ifstream in(path, std::ios::binary);
  std::string head(64 << 10, '\0');  // a header is one line, far shorter
  in.read(head.data(), std::streamsize(head.size()));
  head.resize(size_t(in.gcount()));
  const size_t nl = head.find('\n');
  if (nl == std::string::npos) return header;  // absent, empty or a torn header
  try {
    const CsvTable t = parse_csv(std::string_view(head).substr(0, nl + 1), path);
    if (t.header != header && schema.accepts_header(kind, t.header)) return t.header;
  } catch (const InputError&) {
  }
  return header;
}

}  // namespace

ResultWriter::ResultWriter(std::string path, std::string kind, const ResultsSchema& schema, CsvWriter::Options options)
    : schema_(schema), kind_(std::move(kind)),
      csv_(path, append_header(path, kind_, schema_), options) {
  std::vector<std::string> meta_names;
  for (const auto& [name, value] : RunMeta{}.fields()) meta_names.push_back(name);
  std::vector<std::string> common;
  for (const auto& c : schema_.common()) common.push_back(c.name);
  if (meta_names != common)
    throw std::logic_error("RunMeta fields [" + join(meta_names, ", ") + "] differ from the schema's common columns [" +
                           join(common, ", ") + "]");
}

void ResultWriter::write(const RunMeta& meta, const CsvRecord& values) {
  const std::vector<std::string>& header = csv_.header();
  std::vector<std::string> row(header.size());
  const auto meta_fields = meta.fields();  // the common columns, in header order (checked at construction)
  for (size_t i = 0; i < meta_fields.size(); ++i) row[i] = meta_fields[i].first == "kind" ? kind_ : meta_fields[i].second;
  const size_t n_common = meta_fields.size();
  for (const auto& [name, value] : values.fields()) {
    const auto it = std::find(header.begin() + long(n_common), header.end(), name);
    if (it == header.end() && header != schema_.header(kind_)) {
      const auto& cols = schema_.kind_columns(kind_);
      const std::string& col = name;  // (clang 14 cannot capture a structured binding)
      if (std::any_of(cols.begin(), cols.end(), [&](const ColumnSpec& c) { return c.name == col && c.added > 0; }))
        continue;  // an older file, without this column
    }
    if (it == header.end())
      throw std::invalid_argument(path() + ": '" + name + "' is not a column of kind '" + kind_ +
                                  "' (common columns come from RunMeta)");
    row[size_t(it - header.begin())] = value;
  }
  const auto problems = schema_.check_row(kind_, header, row);
  if (!problems.empty()) throw std::invalid_argument(path() + ": invalid " + kind_ + " row: " + join(problems, "; "));
  csv_.write_row(row);
}

}  // namespace pb
