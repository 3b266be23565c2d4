// parabench run: the main job on the embedded default (local backend) — the
// conformance matrix, the reference training, pipeline schedules, the planner,
// this machine's calibrated profile, a small scaling sweep (and the profile's
// plans of its points) and the collective benchmark, all into one run
// directory, then the report. Each part runs as a subcommand of this same
// executable, so a part that fails is reported (and counted) without losing
// the others' results. Exit 1 when the conformance matrix (or any part) failed.
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "suites/cli/command.h"
#include "suites/cli/common.h"

#ifndef PARABENCH_SOURCE_DIR
#define PARABENCH_SOURCE_DIR ""
#endif

namespace pb::cli {
namespace {

struct RunFlags {
  std::string out = "results/runs";
  bool quick = false;
};

int run_main(const RunFlags& f, const Env& env) {
  const std::string id = make_run_id(std::chrono::system_clock::now());
  const std::string dir = make_run_dir(f.out, id).string();
  const std::string src = PARABENCH_SOURCE_DIR;
  struct Part {
    std::string name;
    std::vector<std::string> args;
  };
  std::vector<Part> parts = {
      {"check", {"check", "--run-dir", dir}},
      {"train", {"train", "--model", "small", "--steps", "40", "--batch", "16", "--seq", "32", "--quiet", "--run-dir", dir}},
      {"schedule 1f1b", {"schedule", "--pp", "4", "--microbatches", "8", "--schedule", "1f1b", "--csv", dir + "/timeline_1f1b.csv"}},
      {"schedule zb-h1", {"schedule", "--pp", "4", "--microbatches", "8", "--schedule", "zb-h1", "--csv", dir + "/timeline_zb-h1.csv"}},
      {"schedule interleaved",
       {"schedule", "--pp", "4", "--microbatches", "8", "--schedule", "interleaved", "--virtual-stages", "2", "--csv",
        dir + "/timeline_interleaved.csv"}},
      {"plan", {"plan", "--model", "gpt2-124m", "--dp", "8", "--shard", "zero3", "--global-batch", "64", "--csv", dir + "/plan.csv"}},
      // This machine's profile (its default training shape, small), then
      // the sweep, then the profile's plans of the sweep's points beside
      // them (the report's "calibrated machine profile" table).
      {"calibrate", {"calibrate", "--out", dir + "/machine.toml"}},
      {"sweep", {"sweep", "--config", src + "/configs/sweep_small.toml", "--run-dir", dir}},
      {"plan against the sweep",
       {"plan", "--machine", dir + "/machine.toml", "--against", dir + "/sweep.csv", "--csv",
        dir + "/profile_plan.csv"}},
      {"collectives",
       {"collectives", "all_reduce", "all_gather", "reduce_scatter", "-b", "1K", "-e", "4M", "-f", "4", "-n", "5", "-w", "2",
        "--world", "2", "-F", dir + "/collectives.csv"}},
      {"report", {"report", dir}},
  };
  if (f.quick) {
    parts[0].args.insert(parts[0].args.end(), {"--dp", "1", "2", "4"});
    for (Part& p : parts)
      if (p.name == "calibrate") p.args.insert(p.args.end(), {"--seconds", "0.05"});
  }

  const std::string exe = self_executable(env.argv0);
  int failed = 0;
  for (auto& p : parts) {
    std::printf("\n=== parabench %s\n", p.name.c_str());
    p.args.insert(p.args.begin(), exe);
    int rc = 0;
    try {
      rc = run_child(p.args);
    } catch (const std::exception& e) {  // could not start it: that part failed, the rest still run
      std::printf("=== %s: %s\n", p.name.c_str(), e.what());
      rc = 127;
    }
    if (rc != 0) {
      std::printf("=== %s FAILED (%s %d)\n", p.name.c_str(), rc < 0 ? "signal" : "exit status", rc < 0 ? -rc : rc);
      ++failed;
    }
  }
  std::printf("\n%d of %zu parts failed\nreport: %s/report.html\n", failed, parts.size(), dir.c_str());
  return failed ? 1 : 0;
}

}  // namespace

void register_run(CLI::App& root, Registry& reg, const Env& env) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* app = root.add_subcommand("run", "the main job: conformance matrix, scaling sweep, report");
  app->add_option("--out", f->out, "results directory; the run writes OUT/<run id>/")->capture_default_str();
  app->add_flag("--quick", f->quick, "a smaller conformance matrix (world sizes 1, 2, 4)");
  reg.push_back({app, [f, &env] { return run_main(*f, env); }});
}

}  // namespace pb::cli
