// Run-directory CSV checks (see validate.h).
#include "suites/report/validate.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/status.h"

namespace pb::report {
namespace {

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

}  // namespace

RunFileSchema RunFileSchema::parse(std::string_view json_text, const std::string& name) {
  RunFileSchema s;
  s.results_ = ResultsSchema::parse(json_text, name);
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(name + ": not JSON: " + e.what());
  }
  require(j.contains("auxiliary") && j["auxiliary"].is_object(),
          name + ": needs an 'auxiliary' object (the non-results CSV files)");
  nlohmann::ordered_json aux = {{"schema_version", j.value("schema_version", 0)},
                                {"common", nlohmann::ordered_json::array()},
                                {"kinds", j["auxiliary"]}};
  s.auxiliary_ = ResultsSchema::parse(aux.dump(), name + ": auxiliary");
  return s;
}

RunFileSchema RunFileSchema::load(const std::string& path) {
  std::ifstream in(path);
  require(bool(in), path + ": cannot open the schema");
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

std::vector<std::string> RunFileSchema::validate(const std::string& csv_path) const {
  CsvTable t;
  try {
    t = read_csv(csv_path);
  } catch (const InputError& e) {
    return {e.what()};
  }
  if (std::find(t.header.begin(), t.header.end(), "kind") != t.header.end())
    return validate_csv_against_schema(csv_path, results_);
  std::string kind;
  std::vector<std::string> known;
  for (const auto& k : auxiliary_.kinds()) {
    known.push_back(k + " (" + join(auxiliary_.header(k), ",") + ")");
    if (auxiliary_.header(k) == t.header) kind = k;
  }
  if (kind.empty())
    return {csv_path + ": header '" + join(t.header, ",") +
            "' is neither a results CSV (no 'kind' column) nor an auxiliary file: " + join(known, "; ")};
  std::vector<std::string> problems;
  for (size_t r = 0; r < t.rows.size() && problems.size() < 100; ++r) {
    const std::string where = csv_path + ":" + std::to_string(t.row_lines[r]) + ": ";
    if (t.rows[r].size() != t.header.size())
      problems.push_back(where + std::to_string(t.rows[r].size()) + " fields, header has " +
                         std::to_string(t.header.size()));
    for (const auto& p : auxiliary_.check_row(kind, t.header, t.rows[r])) problems.push_back(where + p);
  }
  return problems;
}

}  // namespace pb::report
