// The regression gate behind `parabench gate`: compares a current results
// CSV (or a directory of them) with a baseline, row by row, keyed by
// (kind, the kind's point columns). It fails on
//   - any conformance row of current that fails (pass = 0 or status failed),
//     and any collective row reporting wrong elements;
//   - a throughput drop beyond max_throughput_drop (sweep tokens_per_s,
//     collective busbw_gbps, plan est_tokens_per_s), plus for sweep rows
//     twice the measured spread: sqrt(cv_base^2 + cv_current^2) of their
//     step times (step_time_cv), so noise does not fail and a real drop does;
//   - a memory rise beyond max_memory_rise (mem_total and mem_host_total of
//     sweep, train_step and plan rows);
//   - a point of the baseline missing from current, or ok in the baseline and
//     not ok (rejected, oom, failed) in current.
// Rows sharing a key (repeats) are averaged; a conformance key fails if any of
// its rows fails. Per-step training throughput is not gated (noise); sweep
// rows carry throughput.
#pragma once
#include <string>
#include <vector>

#include "harness/io/csv.h"
#include "harness/io/junit.h"

namespace pb::report {

struct GateOptions {
  double max_throughput_drop = 0.10;  // fraction: 0.10 = fail below 90% of baseline
  double max_memory_rise = 0.05;      // fraction: 0.05 = fail above 105% of baseline
};

struct GateLine {
  std::string kind, key, metric;
  std::string baseline, current;  // as found ("" when absent)
  double change = 0;              // (current - baseline) / baseline; 0 when not numeric
  std::string verdict;            // FAIL | ok | new | info
  std::string why;                // for FAIL lines
};

struct GateResult {
  std::vector<GateLine> lines;  // what moved, failures first
  std::vector<GateLine> unchanged;  // checks that passed without a figure moving (verdict ok; JUnit lists them)
  int baseline_points = 0, current_points = 0, failures = 0;
  bool passed() const { return failures == 0; }
};

// InputError for an unreadable file, a missing kind column, an unknown kind,
// a missing key column or a non-numeric metric (each names file and line).
struct GateTable {
  std::string name;  // file, for messages
  CsvTable table;
};
std::vector<GateTable> load_gate_input(const std::string& file_or_dir);

GateResult run_gate(const std::vector<GateTable>& baseline, const std::vector<GateTable>& current,
                    const GateOptions& options);

std::string format_gate_table(const GateResult& r, const GateOptions& options);

// JUnit: one test case per point (classname "kind key") and gated metric;
// failures carry the baseline, current figure and why; new points are
// skipped cases; info lines are left out.
JunitSuite gate_junit(const GateResult& r);

}  // namespace pb::report
