// Checking the CSVs a run directory holds (parabench validate, and the
// run-directory test): a results CSV (a `kind` column) against its kind of
// results/schema.json (validate_csv_against_schema); any other CSV must be an
// auxiliary file of the schema's "auxiliary" section (pipeline timelines,
// communication counters): the header exactly as declared, every row of that
// many fields, every value of its column's type. So a CSV the project writes
// either follows a declared shape or is reported.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "harness/io/csv_schema.h"

namespace pb::report {

class RunFileSchema {
 public:
  // Both sections from one schema JSON text; InputError naming `name` and the
  // problem (bad JSON, a bad column, a missing "auxiliary" section).
  static RunFileSchema parse(std::string_view json_text, const std::string& name);
  static RunFileSchema load(const std::string& path);

  const ResultsSchema& results() const { return results_; }
  // The auxiliary file kinds, held as kinds without common columns.
  const ResultsSchema& auxiliary() const { return auxiliary_; }

  // Problems of one CSV, each "FILE[:LINE]: ..."; empty if it is valid. A
  // results CSV is checked against its kind, anything else against the
  // auxiliary kind whose header it has.
  std::vector<std::string> validate(const std::string& csv_path) const;

 private:
  ResultsSchema results_, auxiliary_;
};

}  // namespace pb::report
