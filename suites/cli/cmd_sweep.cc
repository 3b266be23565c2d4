// parabench sweep: throughput / memory / communication scaling of the
// data-parallel strategies over the [sweep] table of a config, one sweep row
// per point in OUT/<run id>/sweep.csv, and the planner's estimate of each ok
// point as a plan row in plan.csv beside it (appended). --resume continues an existing sweep
// CSV in place, skipping the points it already holds.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <string>

#include "harness/status.h"
#include "suites/cli/command.h"
#include "suites/cli/common.h"
#include "suites/sweep/sweep.h"

namespace pb::cli {
namespace {

struct SweepFlags {
  ConfigFlags cfg;
  std::string run_dir;  // write into this directory instead of OUT/<run id>
  std::string resume;   // sweep CSV, or a run directory holding sweep.csv
};

int run_sweep_cmd(const SweepFlags& f, const Env& env) {
  ConfigReader r = load_config(f.cfg);
  const sweep::SweepConfig c = sweep::read_sweep_config(r);
  const std::string run_id = make_run_id(std::chrono::system_clock::now());
  std::string csv;
  std::set<std::string> skip;
  if (!f.resume.empty()) {
    std::filesystem::path p = f.resume;
    if (std::filesystem::is_directory(p)) p /= "sweep.csv";
    require(std::filesystem::is_regular_file(p), "--resume: no sweep CSV at '" + p.string() + "'");
    csv = p.string();
    skip = sweep::done_keys(csv);
  } else {
    auto dir = f.run_dir.empty() ? make_run_dir(f.cfg.out, run_id) : make_run_dir(f.run_dir, "");
    csv = (dir / "sweep.csv").string();
    require(!std::filesystem::exists(csv),
            "--run-dir: '" + csv + "' exists; continue it with --resume " + csv);
  }
  sweep::SweepRun run;
  run.csv_path = csv;
  run.plan_csv_path = (std::filesystem::path(csv).parent_path() / "plan.csv").string();
  run.meta = make_meta(run_id, env.git_rev, "local", 1, "", "");
  run.progress = env.is_tty ? &std::cerr : nullptr;
  run.table = &std::cout;
  sweep::SweepSummary s = sweep::run_sweep(c, run, skip);
  std::printf("\n%d points run (%d ok, %d rejected, %d failed), %d already done, in %.1f s\n"
              "results: %s\n",
              s.points, s.ok, s.rejected, s.failed, s.skipped, s.seconds, csv.c_str());
  return 0;
}

}  // namespace

void register_sweep(CLI::App& root, Registry& reg, const Env& env) {
  auto f = std::make_shared<SweepFlags>();
  CLI::App* app = root.add_subcommand("sweep", "throughput / memory / comm scaling -> sweep CSV");
  add_config_flags(app, f->cfg);
  app->add_option("--run-dir", f->run_dir, "write sweep.csv directly into this directory");
  app->add_option("--resume", f->resume, "continue this sweep CSV (or run directory) in place");
  reg.push_back({app, [f, &env] { return run_sweep_cmd(*f, env); }});
}

}  // namespace pb::cli
