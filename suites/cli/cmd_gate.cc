// parabench gate: the CI regression gate (rules in suites/report/gate.h).
// Exit 0: nothing regressed; 1: a failure (the table says what moved); 2: bad
// input (a file that is missing, unreadable or not a results CSV).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <tuple>

#include "harness/io/junit.h"
#include "harness/status.h"
#include "suites/cli/common.h"
#include "suites/cli/command.h"
#include "suites/report/gate.h"

namespace pb::cli {
namespace {

struct GateFlags {
  std::string baseline, current;
  report::GateOptions options;
  std::string junit;  // --junit FILE
};

int run_gate(const GateFlags& f) {
  for (const auto& [flag, path] : {std::pair{"--baseline", f.baseline}, std::pair{"--current", f.current}})
    require(std::filesystem::exists(path), std::string(flag) + ": '" + path + "' does not exist");
  const std::vector<std::string> inputs = input_files({f.baseline, f.current});
  if (!f.junit.empty()) require_junit_writable(f.junit, inputs);
  const auto base = report::load_gate_input(f.baseline);
  const auto cur = report::load_gate_input(f.current);
  const report::GateResult r = report::run_gate(base, cur, f.options);
  // A gate that compared nothing must not pass.
  for (const auto& [flag, path, points] : {std::tuple{"--baseline", f.baseline, r.baseline_points},
                                           std::tuple{"--current", f.current, r.current_points}})
    require(points > 0, std::string(flag) + ": '" + path + "' holds no result rows: nothing to compare");
  std::fputs(report::format_gate_table(r, f.options).c_str(), stdout);
  if (!f.junit.empty()) write_junit(f.junit, {report::gate_junit(r)}, inputs);
  return r.passed() ? 0 : 1;
}

}  // namespace

void register_gate(CLI::App& root, Registry& reg, const Env& /*env*/) {
  auto f = std::make_shared<GateFlags>();
  CLI::App* app = root.add_subcommand("gate", "regression gate: compare current results with a baseline");
  app->add_option("--baseline", f->baseline, "baseline results CSV, or a directory of them")->required();
  app->add_option("--current", f->current, "current results CSV, or a directory of them")->required();
  app->add_option("--max-throughput-drop", f->options.max_throughput_drop,
                  "fail when throughput falls by more than this fraction (default 0.10)");
  app->add_option("--max-memory-rise", f->options.max_memory_rise,
                  "fail when peak memory grows by more than this fraction (default 0.05)");
  app->add_option("--junit", f->junit, "also write JUnit XML here: one test case per point and gated metric")
      ->check(non_empty());
  reg.push_back({app, [f] { return run_gate(*f); }});
}

}  // namespace pb::cli
