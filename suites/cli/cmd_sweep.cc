// parabench sweep: throughput / memory / communication scaling of the
// data-parallel strategies over the [sweep] table of a config, one sweep row
// per point in OUT/<run id>/sweep.csv, and the planner's estimate of each ok
// point as a plan row in plan.csv beside it (appended). --resume continues an existing sweep
// CSV in place, skipping the points it already holds. Under mpirun the points
// whose world is mpirun's size run on the MPI backend, one process per rank
// (run once per -np, with --resume, to fill a grid of world sizes).
// sweep.device = cuda: one rank per GPU over the nccl backend (a world of one
// without mpirun), MFU against the GPU's datasheet peak (or its measured GEMM
// rate when no built-in profile matches), no plan rows.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "harness/comm/comm_backends.h"
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
  std::string backend;  // local | mpi (default: mpi under mpirun)
  PreflightFlags limits;
};

// sweep.rounds > 1: the earlier rounds of points not yet in sweep.csv, beside it.
std::string rounds_path(const std::string& csv) {
  return (std::filesystem::path(csv).parent_path() / "sweep_rounds.csv").string();
}

int sweep_main(const SweepFlags& f, const sweep::SweepConfig& c, const Env& env, World* world, bool writer) {
  const std::string run_id = make_run_id(std::chrono::system_clock::now());
  std::string csv;
  std::set<std::string> skip;
  std::map<std::string, std::vector<sweep::PointResult>> rounds_done;
  if (writer && !f.resume.empty()) {
    std::filesystem::path p = f.resume;
    if (std::filesystem::is_directory(p)) p /= "sweep.csv";
    require(std::filesystem::is_regular_file(p), "--resume: no sweep CSV at '" + p.string() + "'");
    csv = p.string();
    skip = sweep::done_keys(csv, c);
    rounds_done = sweep::done_rounds(rounds_path(csv), c);
  } else if (writer) {
    auto dir = f.run_dir.empty() ? make_run_dir(f.cfg.out, run_id) : make_run_dir(f.run_dir, "");
    csv = (dir / "sweep.csv").string();
    require(!std::filesystem::exists(csv),
            "--run-dir: '" + csv + "' exists; continue it with --resume " + csv);
    require(!std::filesystem::exists(rounds_path(csv)), "--run-dir: '" + rounds_path(csv) +
                                                            "' exists (an earlier sweep's rounds): use a new "
                                                            "directory, or continue that sweep with --resume");
  }
  sweep::SweepRun run;
  run.csv_path = csv;
  run.plan_csv_path = writer ? (std::filesystem::path(csv).parent_path() / "plan.csv").string() : "";
  run.rounds_csv_path = writer ? rounds_path(csv) : "";
  run.meta = make_meta(run_id, env.git_rev, world ? std::string(backend_name(world->backend())) : "local", 1, "", "");
  run.progress = writer && env.is_tty ? &std::cerr : nullptr;
  run.table = writer ? &std::cout : nullptr;
  run.world = world;
  run.limits = limits_of(f.limits);
  if (c.device == Device::cuda) {
    run.open_device = rank_device_opener();  // the GPU the nccl backend chose
    if (writer) {  // rank 0's GPU, once per precision
      auto peaks = std::make_shared<std::map<std::string, double>>();
      run.peak_flops = [peaks](const sweep::SweepPoint& p) {
        auto it = peaks->find(p.precision());
        if (it != peaks->end()) return it->second;
        const std::shared_ptr<TrainDevice> d = open_cuda_device(-1);
        const DevicePeaks dp = device_peaks(p.spec.train.precision, d->name, -1);
        return (*peaks)[p.precision()] = dp.table > 0 ? dp.table : dp.measured;
      };
    }
  }
  sweep::SweepSummary s = sweep::run_sweep(c, run, skip, rounds_done);
  if (writer)
    std::printf("\n%d points run (%d ok, %d rejected, %d failed), %d already done, in %.1f s\n"
                "results: %s\n",
                s.points, s.ok, s.rejected, s.failed, s.skipped, s.seconds, csv.c_str());
  // A sweep that measured nothing because every point was refused did not pass.
  require(s.points == 0 || s.rejected < s.points,
          "sweep: every one of its " + std::to_string(s.points) +
              " points was rejected (the table and the CSV's reason column say why): nothing measured");
  return 0;
}

int run_sweep_cmd(const SweepFlags& f, const Env& env) {
  // Read alike by every process before any communication: a bad config ends
  // each one with exit 2 on its own.
  ConfigReader r = load_config(f.cfg);
  const sweep::SweepConfig c = sweep::read_sweep_config(r);
  const bool on_device = c.device == Device::cuda;
  BackendKind backend = on_device ? BackendKind::nccl : env.under_mpirun ? BackendKind::mpi : BackendKind::local;
  if (!f.backend.empty()) {
    require(parse_backend(f.backend, &backend), "--backend: '" + f.backend + "' is not local, mpi or nccl");
    require(on_device == (backend == BackendKind::nccl),
            on_device ? "--backend " + f.backend + ": sweep.device = cuda runs over nccl (one rank per GPU)"
                      : std::string("--backend nccl: needs sweep.device = cuda"));
  }
  if (on_device) {
    const std::string why = cuda_unavailable();
    if (!why.empty()) throw InputError("sweep.device: cuda: " + why);
  }
  if (backend == BackendKind::local) {
    require(env.launched_size == 1, "--backend local: under mpirun -np " + std::to_string(env.launched_size) +
                                        " every process would write the same files; use --backend mpi");
    return sweep_main(f, c, env, nullptr, true);
  }
  WorldOptions wo;
  wo.backend = backend;
  wo.size = 0;  // what mpirun launched
  wo.ranks_per_node = c.ranks_per_node;  // the node boundary the strategies are told about
  std::unique_ptr<World> world = make_world(wo);
  require_same_spec(*world, r.config_hash() + "|" + f.resume, "sweep");
  const bool writer = hosts_rank(*world, 0);
  // Every process takes part in every point: an error on one (bad input only
  // the writer sees, a failed rank) must end them all, or the others would
  // wait in a collective forever. The rows already written stay; --resume
  // goes on from there.
  try {
    return sweep_main(f, c, env, world.get(), writer);
  } catch (const InputError& e) {
    std::fprintf(stderr, "parabench: error: %s\n", e.what());
    world->terminate(2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parabench sweep: %s\n", e.what());
    world->terminate(1);
  }
  return 1;  // terminate() does not return under MPI
}

}  // namespace

void register_sweep(CLI::App& root, Registry& reg, const Env& env) {
  auto f = std::make_shared<SweepFlags>();
  CLI::App* app = root.add_subcommand("sweep", "throughput / memory / comm scaling -> sweep CSV");
  add_config_flags(app, f->cfg);
  app->add_option("--run-dir", f->run_dir, "write sweep.csv directly into this directory");
  app->add_option("--resume", f->resume, "continue this sweep CSV (or run directory) in place");
  app->add_option("--backend", f->backend,
                  "local (ranks are threads; default) or mpi (default under mpirun: runs the points whose "
                  "world is mpirun's -np; no plan rows); nccl for sweep.device = cuda (its default)");
  add_preflight_flags(app, f->limits);
  reg.push_back({app, [f, &env] { return run_sweep_cmd(*f, env); }});
}

}  // namespace pb::cli
