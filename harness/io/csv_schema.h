// The results schema (results/schema.json, described in results/SCHEMA.md):
// every CSV the project writes holds one kind of row, whose header is the
// common run-metadata columns followed by that kind's columns, in schema order.
// Invariant: the schema is read from one file; the copy compiled into the
// library (ResultsSchema::builtin()) is that file's text at configure time, so
// writers, validators and the Python plotting scripts agree on one definition.
#pragma once
#include <memory>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "harness/io/csv.h"
#include "harness/io/run_meta.h"

namespace pb {

struct ColumnSpec {
  enum class Type { string, integer, number, boolean, enumeration, timestamp };
  enum class Required { optional, always, when_ok, when_not_ok };
  std::string name;
  Type type = Type::string;
  Required required = Required::optional;
  std::vector<std::string> values;  // enumeration
  std::string pattern;              // string: ECMAScript regex the value must match (<= 1024 chars, no back-references)
  std::string unit;
  std::shared_ptr<const std::regex> compiled;  // of pattern, built once at load
  // The schema version that added the column (0: there from the start). A
  // file written before it lacks the column and is still valid: the header
  // of an older file is the schema's without such columns.
  int added = 0;
};

// The text of results/schema.json compiled into the library (generated
// schema_builtin.cc, harness/io/CMakeLists.txt); ResultsSchema::builtin() parses it.
const char* builtin_results_schema_json();

class ResultsSchema {
 public:
  // InputError naming the file and the problem (cannot open, bad JSON, a
  // column without name/type, an unknown type, a field of the wrong type, a
  // bad pattern, a duplicate column).
  static ResultsSchema load(const std::string& path);
  static ResultsSchema parse(std::string_view json_text, const std::string& name);
  // The schema compiled into the library from results/schema.json.
  static const ResultsSchema& builtin();

  int version() const { return version_; }
  std::vector<std::string> kinds() const;
  bool has_kind(std::string_view kind) const;
  const std::vector<ColumnSpec>& common() const { return common_; }
  // Common columns then the kind's, in order: the header of a `kind` file.
  // std::invalid_argument for an unknown kind.
  std::vector<std::string> header(std::string_view kind) const;
  // Whether `h` is the header of a `kind` file this schema reads: header(kind),
  // or an older file's, without some columns a later version added.
  bool accepts_header(std::string_view kind, const std::vector<std::string>& h) const;
  const std::vector<ColumnSpec>& kind_columns(std::string_view kind) const;

  // Problems of the values of one row of `kind` under `header`; empty if the
  // row is valid. Each problem names the column. Columns the kind does not
  // have are ignored here (validate_csv_against_schema reports them once).
  std::vector<std::string> check_row(std::string_view kind, const std::vector<std::string>& header,
                                     const std::vector<std::string>& row) const;

 private:
  int version_ = 0;
  std::vector<ColumnSpec> common_;
  std::vector<std::pair<std::string, std::vector<ColumnSpec>>> kinds_;
};

// Problems of a results CSV against the schema, each prefixed "FILE:LINE:"
// (or "FILE:"): unreadable or torn file, unknown or mixed kind, missing or
// unknown column, a value not matching its column's type, enum or pattern, a
// required value empty, a bad status. Empty means valid.
std::vector<std::string> validate_csv_against_schema(const std::string& csv_path, const ResultsSchema& schema);
std::vector<std::string> validate_csv_against_schema(const std::string& csv_path, const std::string& schema_path);
// The same for CSV text already in memory; `name` stands for the file in the
// problems.
std::vector<std::string> validate_csv_text_against_schema(std::string_view csv_text, const std::string& name,
                                                          const ResultsSchema& schema);

// Appends rows of one kind: header from the schema, each row checked against
// it before it is written (std::invalid_argument listing the problems: a
// writer bug, not a user error). Appending to an older file (a header
// without columns a later schema version added: accepts_header) keeps its
// header, and those columns' values are not written.
class ResultWriter {
 public:
  ResultWriter(std::string path, std::string kind, const ResultsSchema& schema = ResultsSchema::builtin(),
               CsvWriter::Options options = {});
  // meta's common fields (its kind is replaced by the writer's) + values.
  void write(const RunMeta& meta, const CsvRecord& values);
  const std::string& path() const { return csv_.path(); }
  const std::string& kind() const { return kind_; }

 private:
  ResultsSchema schema_;
  std::string kind_;
  CsvWriter csv_;
};

}  // namespace pb
