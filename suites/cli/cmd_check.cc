// parabench check: the conformance matrix — every strategy implemented, over
// world sizes and precisions — printed as a table of ratios, written as
// conformance rows, exit 1 on any failure (CI gating).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>

#include "harness/comm/comm_backends.h"
#include "harness/io/csv_schema.h"
#include "harness/status.h"
#include "suites/cli/command.h"
#include "suites/cli/common.h"
#include "suites/cli/conformance_output.h"
#include "reference/train_config_io.h"
#include "suites/conformance/engine.h"
#include "suites/conformance/pipeline_engine.h"

namespace pb::cli {
namespace {

struct CheckFlags {
  std::vector<int> dps = {1, 2, 3, 4, 8};
  std::vector<std::string> precisions = {"fp32", "bf16-mixed"};
  std::vector<std::string> shards = {"none", "zero1", "zero2", "zero3", "hsdp", "hzero"};
  std::string model = "tiny";
  int steps = 3;
  std::vector<std::string> schedules = {"gpipe", "1f1b", "interleaved", "zb-h1", "2bw"};
  std::vector<int> pps = {2, 4};
  bool chaos = false;
  std::string out = "results/runs";
  std::string run_dir;  // write into this directory instead of OUT/<run id>
  std::string backend;  // local | mpi (default: mpi under mpirun)
};



std::vector<StrategyRun> matrix(const CheckFlags& f) {
  std::vector<StrategyRun> runs;
  for (const auto& prec : f.precisions)
    for (const auto& sh : f.shards)
      for (int dp : f.dps) {
        require(dp > 0, "--dp: world sizes must be > 0, got " + std::to_string(dp));
        StrategyRun s;
        s.cfg.model = named_model(f.model);
        s.cfg.precision = parse_precision(prec);
        s.cfg.steps = f.steps;
        s.cfg.seq = std::min(16, s.cfg.model.maxT);
        s.cfg.batch = 8 * dp;
        s.dp.dp = dp;
        s.dp.shard = dp::parse_shard(sh, "--shard");
        s.dp.bucket_bytes = 16 << 10;
        s.world.chaos.enabled = f.chaos;
        if (s.dp.shard == dp::Shard::hsdp || s.dp.shard == dp::Shard::hzero) {
          if (dp < 2) continue;  // two levels need two ranks
          // Shard groups / nodes of dp/2 ranks (of one rank when dp is odd).
          s.dp.shard_group = dp % 2 ? 1 : dp / 2;
          s.dp.ranks_per_node = dp % 2 ? 1 : dp / 2;
        }
        runs.push_back(s);
        if (s.dp.shard == dp::Shard::zero2 && dp > 1) {  // ZeRO-Offload
          s.dp.offload = dp::Offload::optimizer;
          runs.push_back(s);
        }
        if (s.dp.shard == dp::Shard::none && dp > 1) {  // DDP with accumulation (no_sync)
          s.cfg.microbatches = 2;
          s.cfg.batch = 16 * dp;
          runs.push_back(s);
        }
      }
  return runs;
}


// Pipeline points: every schedule at each pp (m = 2p microbatches; v = 2 for
// interleaved) on a tiny model deep enough for pp x v stages, plus PP x DDP
// and PP x ZeRO-1 at dp 2 (1F1B).
std::vector<PipelineRun> pipeline_matrix(const CheckFlags& f) {
  std::vector<PipelineRun> runs;
  for (const auto& prec : f.precisions)
    for (int pp : f.pps) {
      require(pp > 0, "--pp: pipeline sizes must be > 0, got " + std::to_string(pp));
      for (const auto& name : f.schedules) {
        if (name == "none") continue;
        PipelineRun r;
        r.cfg.model = named_model("tiny");
        r.cfg.model.L = 8;
        r.cfg.model.name = "tiny-l8";
        r.cfg.precision = parse_precision(prec);
        r.cfg.steps = f.steps;
        r.cfg.seq = 16;
        r.cfg.microbatches = 2 * pp;
        r.cfg.batch = 2 * pp;
        r.pipe.kind = pipeline::parse_schedule_kind(name, "--schedule");
        r.pipe.pp = pp;
        r.pipe.virtual_stages = r.pipe.kind == pipeline::ScheduleKind::interleaved ? 2 : 1;
        r.world.chaos.enabled = f.chaos;
        runs.push_back(r);
        if (r.pipe.kind == pipeline::ScheduleKind::one_f_one_b && pp == f.pps.front()) {
          for (auto mode : {pipeline::DpMode::ddp, pipeline::DpMode::zero1}) {
            PipelineRun d = r;
            d.pipe.dp = 2;
            d.pipe.dp_mode = mode;
            d.cfg.batch = 2 * r.cfg.batch;
            runs.push_back(d);
          }
        }
      }
    }
  return runs;
}

int run_check(const CheckFlags& f, const Env& env) {
  WorldOptions wo;
  wo.backend = env.under_mpirun ? BackendKind::mpi : BackendKind::local;
  if (!f.backend.empty())
    require(parse_backend(f.backend, &wo.backend) && wo.backend != BackendKind::nccl,
            "--backend: '" + f.backend + "' is not local or mpi");
  require(wo.backend != BackendKind::local || env.launched_size == 1,
          "--backend local: under mpirun -np " + std::to_string(env.launched_size) +
              " every process would write its own results; use --backend mpi");
  std::unique_ptr<World> mpi_world;  // one per process: MPI initializes once
  if (wo.backend != BackendKind::local) {
    wo.size = 0;
    mpi_world = make_world(wo);
  }
  auto runs = matrix(f);
  auto pipes = pipeline_matrix(f);
  if (mpi_world) {  // the world is what mpirun launched: its size picks the points
    std::erase_if(runs, [&](const StrategyRun& s) { return s.dp.dp != mpi_world->size(); });
    for (auto& s : runs) s.world.backend = wo.backend;
    std::erase_if(pipes, [&](const PipelineRun& p) { return p.pipe.dp * p.pipe.pp != mpi_world->size(); });
    for (auto& p : pipes) p.world.backend = wo.backend;
  }
  require(!runs.empty() || !pipes.empty(), "check: the matrix is empty (see --dp, --shard, --precision" +
                             std::string(mpi_world ? "; under mpirun --dp must include the world size)" : ")"));
  bool writer = true;
  if (mpi_world) {
    writer = hosts_rank(*mpi_world, 0);
  }
  const std::string run_id = make_run_id(std::chrono::system_clock::now());
  std::unique_ptr<ResultWriter> csv_writer;
  if (writer) {
    auto dir = f.run_dir.empty() ? make_run_dir(f.out, run_id) : make_run_dir(f.run_dir, "");
    csv_writer = std::make_unique<ResultWriter>((dir / "conformance.csv").string(), "conformance");
  }
  if (writer) print_result_header();
  int failures = 0;
  for (const auto& s : runs) {
    ConformanceResult r;
    try {
      r = mpi_world ? run_conformance(s, *mpi_world) : run_conformance(s);
    } catch (const std::exception& e) {
      if (!mpi_world) throw;
      std::fprintf(stderr, "parabench check: %s\n", e.what());
      mpi_world->terminate(1);  // ends every process; does not return
      throw;
    }
    if (!writer) continue;
    failures += !r.pass();
    print_result_row(r);
    write_conformance_rows(*csv_writer,
                           make_meta(run_id, env.git_rev, r.backend, r.world,
                                     mesh_string(r.world, 1, 1, 1), config_hash_of(s)),
                           r, f.steps);
  }
  for (const auto& p : pipes) {
    ConformanceResult r;
    PipelineReport rep;
    try {
      r = mpi_world ? run_pipeline_conformance(p, *mpi_world, &rep) : run_pipeline_conformance(p, &rep);
    } catch (const std::exception& e) {
      if (!mpi_world) throw;
      std::fprintf(stderr, "parabench check: %s\n", e.what());
      mpi_world->terminate(1);
      throw;
    }
    if (!writer) continue;
    failures += !r.pass();
    print_result_row(r);
    std::printf("    %s\n", describe_bubble(rep).c_str());
    write_conformance_rows(*csv_writer,
                           make_meta(run_id, env.git_rev, r.backend, r.world,
                                     mesh_string(p.pipe.dp, 1, 1, p.pipe.pp), config_hash_of(p)),
                           r, f.steps);
  }
  if (!writer) return 0;
  std::printf("\n%zu configurations, %d failed. %s\nresults: %s\n", runs.size() + pipes.size(), failures,
              kRatioLegend, csv_writer->path().c_str());
  return failures ? 1 : 0;
}

}  // namespace

void register_check(CLI::App& root, Registry& reg, const Env& env) {
  auto f = std::make_shared<CheckFlags>();
  CLI::App* app = root.add_subcommand("check", "conformance matrix; exit 1 on any failure");
  app->add_option("--dp", f->dps, "world sizes")->capture_default_str();
  app->add_option("--precision", f->precisions, "fp32, bf16-mixed, fp64")->capture_default_str();
  app->add_option("--shard", f->shards, "none zero1 zero2 zero3 hsdp hzero")->capture_default_str();
  app->add_option("--model", f->model, "named model")->capture_default_str();
  app->add_option("--steps", f->steps, "steps per configuration")->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--schedule", f->schedules, "pipeline schedules (none: no pipeline points)")
      ->capture_default_str();
  app->add_option("--pp", f->pps, "pipeline sizes")->capture_default_str();
  app->add_flag("--chaos", f->chaos, "inject seeded random delays into every collective");
  app->add_option("--out", f->out, "results directory")->capture_default_str();
  app->add_option("--run-dir", f->run_dir, "write directly into this directory");
  app->add_option("--backend", f->backend, "local or mpi (default: mpi under mpirun, else local)");
  reg.push_back({app, [f, &env] { return run_check(*f, env); }});
}

}  // namespace pb::cli
