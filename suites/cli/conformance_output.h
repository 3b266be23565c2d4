// How conformance results are shown and stored, shared by `check` (a matrix)
// and `train` (one configuration): one table row per configuration with the
// worst ratio per quantity, and conformance CSV rows per checked quantity;
// every row labelled by its mesh text and ConformanceResult::strategy (the
// run spec's printer: engine.h conformance_label).
#pragma once
#include <string>

#include "harness/io/csv_schema.h"
#include "harness/io/junit.h"
#include "harness/io/run_meta.h"
#include "suites/conformance/engine.h"

namespace pb::cli {

void print_result_header();
void print_result_row(const ConformanceResult& r);
// One row per loss step / gradient / parameter check, per bitwise check, and
// per exact memory or communication check (error = measured, floor = declared).
void write_conformance_rows(ResultWriter& csv, RunMeta meta, const ConformanceResult& r, int steps);
// JUnit test cases for one configuration (classname: mesh, strategy label,
// precision): one per rule quantity (loss, grads, params; their worst step), per
// rule quantity at fp64, per bitwise quantity, and per exact memory or
// communication item; a failure's message names the ratio (or the measured
// and declared figures) and the reason. `seconds` is spread over the cases.
void add_junit_cases(const ConformanceResult& r, double seconds, JunitSuite* suite);
// One point as `check --model M --precision P --mesh ENTRY --strategy S
// --steps N` builds it (cmd_check.cc): the model, batch and sequence follow
// from the mesh; ENTRY may end in ".sp". Empty model: check's default.
StrategyRun check_point(const std::string& model, const std::string& precision, const std::string& mesh_entry,
                        const std::string& strategy, int steps);
// The hash of the configuration a run amounts to (its canonical TOML).
std::string config_hash_of(const StrategyRun& s);
extern const char* const kRatioLegend;

}  // namespace pb::cli
