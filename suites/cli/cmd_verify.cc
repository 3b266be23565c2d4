// parabench verify --export DIR --trace FILE: a trace written by another
// framework (results/TRACE.md) judged by check's rule (suites/conformance/
// verify.h). Prints the per-quantity ratios and, on a failure, the first
// failing check and the parameters with the largest error (VerifyDiagnosis;
// also in each failed JUnit case's message), writes conformance rows (and
// JUnit with --junit); exit 0 when every quantity is within C x the floor,
// 1 when one is not, 2 when a file is not a valid export or trace.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "harness/io/csv_schema.h"
#include "harness/io/junit.h"
#include "harness/status.h"
#include "suites/cli/command.h"
#include "suites/cli/common.h"
#include "suites/cli/conformance_output.h"
#include "suites/conformance/verify.h"
#include "suites/planner/preflight.h"

namespace pb::cli {
namespace {

struct VerifyFlags {
  std::string export_dir;
  std::vector<std::string> traces;
  std::string out = "results/runs";
  std::string run_dir;
  std::string junit;
  PreflightFlags limits;
};

// The per-rank figures a trace reports: rows, not judged (nothing declares
// what a foreign strategy should use).
void write_reported_figures(ResultWriter& csv, RunMeta meta, const ForeignTrace& t, const ConformanceResult& r) {
  auto rows = [&](const std::vector<int64_t>& v, const char* quantity, const char* what) {
    for (size_t rank = 0; rank < v.size(); ++rank) {
      CsvRecord rec;
      rec.set("strategy", r.strategy).set("precision", precision_name(r.precision));
      rec.set("quantity", quantity).set("item", std::string(what) + ".rank" + std::to_string(rank));
      rec.set("step", int64_t(t.loss.size())).set("measured", v[rank]);
      meta.status = "skipped";
      meta.reason = "reported by the trace; not judged (no declared figure for a foreign strategy)";
      meta.timestamp = iso8601_utc(std::chrono::system_clock::now());
      csv.write(meta, rec);
    }
  };
  rows(t.peak_memory, "memory", "peak");
  rows(t.comm_bytes, "comm", "bytes");
}

// The per-step scalars beside the table's columns: the gradient norm's worst
// ratio, whether the learning rate followed the export's schedule, and a
// mixture of experts' load-balancing loss and tokens per expert.
void print_scalar_checks(const ConformanceResult& r) {
  const QuantityCheck* norm = nullptr;
  const QuantityCheck* lr_bad = nullptr;
  bool has_lr = false;
  for (const auto& c : r.rule) {
    if (c.quantity == "grad_norm" && (!norm || !(c.ratio <= norm->ratio))) norm = &c;
    if (c.quantity == "lr") {
      has_lr = true;
      if (!c.pass && !lr_bad) lr_bad = &c;
    }
  }
  if (norm)
    std::printf("    grad_norm: worst ratio %.3f at step %d%s", norm->ratio, norm->step, norm->pass ? "" : " FAIL");
  if (has_lr) {
    if (lr_bad) std::printf("; lr: DIFFERS from the export's schedule at step %d (relative error %.3g)", lr_bad->step,
                            lr_bad->error);
    else std::printf("; lr: the export's schedule at every step");
  } else {
    std::printf("; lr: not in the trace (optional)");
  }
  // A mixture of experts' routing, when the trace has it.
  const QuantityCheck* aux = nullptr;
  const QuantityCheck* tokens_bad = nullptr;
  double moved = 0;
  bool has_tokens = false;
  for (const auto& c : r.rule) {
    if (c.quantity == "aux_loss" && (!aux || !(c.ratio <= aux->ratio))) aux = &c;
    if (c.quantity == "moe_tokens") {
      has_tokens = true;
      moved += c.error;
      if (!c.pass && !tokens_bad) tokens_bad = &c;
    }
  }
  if (aux)
    std::printf("; aux_loss: worst ratio %.3f at step %d%s", aux->ratio, aux->step, aux->pass ? "" : " FAIL");
  if (tokens_bad)
    std::printf("; moe_tokens: %.0f choices routed elsewhere at step %d (%.0f near ties) FAIL", tokens_bad->error,
                tokens_bad->step, tokens_bad->floor);
  else if (has_tokens)
    std::printf("; moe_tokens: the truth's at every step (%.0f near-tie flips)", moved);
  std::printf("\n");
}

int run_verify(const VerifyFlags& f, const Env& env) {
  require(!f.export_dir.empty(), "verify: --export DIR is required (the directory parabench export wrote)");
  require(!f.traces.empty(), "verify: --trace FILE is required (the trace your framework wrote; format: results/TRACE.md)");
  const Limits limits = limits_of(f.limits);
  // verify runs the reference (at fp64 and at the trace's precision, whole and
  // split) one device at a time: refused before anything is allocated when
  // the export's model would not fit (the fp64 run is the largest).
  const ExportDir e = read_export(f.export_dir, [&](const TrainConfig& cfg) {
    RunSpec one;
    one.train = cfg;
    one.train.precision = Precision::fp64;
    require_fits(planner::run_need(one, 1, false, /*conformance=*/true), limits, "verify " + cfg.model.name);
  });
  std::vector<ForeignTrace> traces;
  for (const auto& path : f.traces) traces.push_back(read_trace(path, e));  // every trace valid before any row
  std::vector<std::string> inputs = f.traces;
  inputs.push_back(f.export_dir);
  inputs = input_files(inputs);
  if (!f.junit.empty()) require_junit_writable(f.junit, inputs);
  const std::string run_id = make_run_id(std::chrono::system_clock::now());
  const auto dir = f.run_dir.empty() ? make_run_dir(f.out, run_id) : make_run_dir(f.run_dir, "");
  ResultWriter csv((dir / "conformance.csv").string(), "conformance");
  JunitSuite junit{"parabench verify", 0, {}};
  print_result_header();
  int failures = 0;
  for (const auto& t : traces) {
    const auto started = std::chrono::steady_clock::now();
    VerifyDiagnosis why;
    const ConformanceResult r = verify_trace(e, t, {}, &why);
    print_result_row(r);
    print_scalar_checks(r);
    if (why.failed) std::printf("    %s\n", why.text().c_str());  // what to fix first
    if (!t.note.empty()) std::printf("    note: %s\n", t.note.c_str());
    failures += !r.pass();
    const size_t before = junit.cases.size();
    add_junit_cases(r, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), &junit);
    for (size_t i = before; i < junit.cases.size(); ++i)  // every failed case of this trace says where to look
      if (junit.cases[i].failed) junit.cases[i].message += "; " + why.text();
    const RunMeta meta = make_meta(run_id, env.git_rev, r.backend, r.world, r.mesh, e.config_hash);
    write_conformance_rows(csv, meta, r, e.cfg.steps);
    write_reported_figures(csv, meta, t, r);
  }
  if (!f.junit.empty()) write_junit(f.junit, {junit}, inputs);
  std::printf("\n%zu traces, %d failed. %s\nresults: %s\n", traces.size(), failures, kRatioLegend,
              csv.path().c_str());
  return failures ? 1 : 0;
}

}  // namespace

void register_verify(CLI::App& root, Registry& reg, const Env& env) {
  auto f = std::make_shared<VerifyFlags>();
  CLI::App* app = root.add_subcommand(
      "verify", "judge another framework's trace against a parabench export by check's rule (exit 1 on a failure)");
  app->add_option("--export", f->export_dir, "the export directory the trace was trained from (parabench export)");
  app->add_option("--trace", f->traces, "trace file(s) in the format of results/TRACE.md");
  app->add_option("--junit", f->junit, "also write JUnit XML here: one test case per trace and quantity");
  app->add_option("--out", f->out, "results directory")->capture_default_str();
  app->add_option("--run-dir", f->run_dir, "write directly into this directory");
  add_preflight_flags(app, f->limits);
  reg.push_back({app, [f, &env] { return run_verify(*f, env); }});
}

}  // namespace pb::cli
