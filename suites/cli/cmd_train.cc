// parabench train: one configuration. Trains the reference (and, with a
// [strategy] table, the strategy under the conformance engine), prints a
// per-step table and writes train_step rows to OUT/<run id>/train.csv.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <cstdio>
#include <memory>

#include "harness/comm/comm_backends.h"
#include "harness/io/csv_schema.h"
#include "harness/status.h"
#include "reference/data.h"
#include "reference/train_config_io.h"
#include "reference/trainer.h"
#include "suites/cli/command.h"
#include "suites/cli/common.h"
#include "suites/cli/conformance_output.h"
#include "impl/registry.h"
#include "impl/spec/run_spec.h"
#include "suites/planner/machine.h"
#include "suites/planner/preflight.h"
#ifdef PARABENCH_HAVE_CUDA
#include "kernels/cuda/gpu.h"
#endif

namespace pb::cli {
namespace {

struct TrainFlags {
  ConfigFlags cfg;
  std::string model, precision;
  // Given or not (0 and -1 are values, refused by the checks below, not "unset").
  std::optional<int> steps, batch, seq, microbatches, threads;
  std::optional<double> lr;
  std::optional<int64_t> seed;
  bool quiet = false;
  std::string run_dir;
  std::optional<int> dp;
  std::string shard, backend, mesh, strategy, device;
  PreflightFlags limits;
  CLI::Option *mesh_flag = nullptr, *dp_flag = nullptr, *shard_flag = nullptr, *strategy_flag = nullptr;
};

// The shorthand (--dp N, --shard S) and the run spec's text form (--mesh,
// --strategy) set the same fields: each field given once (docs/cli.md).
void refuse_conflicts(const TrainFlags& f) {
  refuse_together(f.mesh_flag, f.dp_flag, "the mesh");
  if (f.shard_flag->count() == 0) return;
  for (size_t b = 0; b <= f.strategy.size();) {  // the keys of --strategy's key=value items
    const size_t e = std::min(f.strategy.find(',', b), f.strategy.size());
    if (f.strategy.compare(b, 6, "shard=") == 0)
      refuse_together(f.shard_flag, f.strategy_flag, "the data axis's shard");
    b = e + 1;
  }
}

void apply_flags(const TrainFlags& f, ConfigReader& r) {
  if (!f.model.empty()) r.set("model.name", f.model);
  if (!f.precision.empty()) r.set("train.precision", f.precision);
  if (f.steps) r.set("train.steps", *f.steps);
  if (f.batch) r.set("train.batch", *f.batch);
  if (f.seq) r.set("train.seq", *f.seq);
  if (f.microbatches) r.set("train.microbatches", *f.microbatches);
  if (f.threads) r.set("train.threads", *f.threads);
  if (f.lr) r.set("optim.lr", *f.lr);
  if (f.seed) r.set("train.seed", *f.seed);
  if (!f.device.empty()) r.set("train.device", f.device);
  if (!f.mesh.empty()) r.set("strategy.mesh", f.mesh);
  if (f.dp) r.set("strategy.mesh", "dp" + std::to_string(*f.dp));
  if (!f.shard.empty()) r.set("strategy.shard", f.shard);
}

// A run spec names a strategy when the [strategy] table or a strategy flag
// says anything at all; otherwise train runs the reference alone.
bool names_strategy(const TrainFlags& f, ConfigReader& r) {
  for (const char* k : {"mesh", "shard", "offload", "bucket_mb", "overlap", "prefetch", "reshard_after_forward",
                        "shard_group", "sp", "cp_algo", "zigzag", "schedule", "virtual_stages", "faults"})
    if (r.has(std::string("strategy.") + k)) return true;
  return !f.strategy.empty();
}

// The MFU denominators of a GPU run: per GPU, times the GPUs.
void print_peaks(const std::string& device, const DevicePeaks& peaks, int gpus) {
  std::printf("MFU denominators on %s%s: ", device.c_str(), gpus > 1 ? (" x " + std::to_string(gpus)).c_str() : "");
  if (peaks.table > 0) std::printf("the %s datasheet peak %.4g TFLOP/s; ", peaks.table_name.c_str(), peaks.table / 1e12);
  else std::printf("no built-in profile matches this device (mfu empty); ");
  std::printf("measured cuBLAS GEMM %.4g TFLOP/s (mfu_measured)%s\n", peaks.measured / 1e12,
              gpus > 1 ? ", each per GPU" : "");
}

// A [strategy] table: the strategy runs under the conformance engine (the
// reference at fp64, at the precision under test, and replaying the strategy's
// order), and the run is judged. Exit 1 when a check fails.
int run_strategy(const TrainFlags& f, ConfigReader& r, const Env& env) {
  StrategyRun s;
  s.spec = read_run_spec(r, fault_catalogue());
  r.check_no_unknown_keys();
  if (!f.strategy.empty()) {
    apply_strategy_text(s.spec, f.strategy, fault_catalogue(), "--strategy");
    validate(s.spec);
  }
  strategy_for(s.spec).validate(s.spec);  // bad input is exit 2 before any rank starts
  const TrainConfig& cfg = s.spec.train;
  const bool on_device = cfg.device == Device::cuda;
  s.world.backend = on_device ? BackendKind::nccl : env.under_mpirun ? BackendKind::mpi : BackendKind::local;
  if (!f.backend.empty()) {
    require(parse_backend(f.backend, &s.world.backend), "--backend: '" + f.backend + "' is not local, mpi or nccl");
    require(on_device == (s.world.backend == BackendKind::nccl),
            on_device ? "--backend " + f.backend +
                            ": train.device = cuda runs over nccl (its buffers are device memory; local and mpi "
                            "move host memory)"
                      : std::string("--backend nccl: the strategies run on train.device = cpu here; nccl needs "
                                    "train.device = cuda (--device cuda)"));
  }
  if (on_device) s.open_device = rank_device_opener();
  s.world.size = s.world.backend == BackendKind::local ? s.spec.world() : 0;
  s.world.ranks_per_node = s.spec.mesh.ranks_per_node;
  const bool local = s.world.backend == BackendKind::local;
  require_fits(planner::run_need(s.spec, local ? s.spec.world() : 1, local, /*conformance=*/true),
               limits_of(f.limits), "train " + spec_label(s.spec) + " " + cfg.model.name);
  auto world = make_world(s.world);
  require_same_spec(*world, config_hash_of(s), "train");
  ConformanceResult res;
  try {
    res = run_conformance(s, *world);
  } catch (const std::exception& e) {
    if (s.world.backend == BackendKind::local) throw;
    std::fprintf(stderr, "parabench train: %s\n", e.what());
    world->terminate(1);
    throw;
  }
  if (!res.hosts_rank0) return 0;
  const std::string run_id = make_run_id(std::chrono::system_clock::now());
  auto dir = f.run_dir.empty() ? make_run_dir(f.cfg.out, run_id) : make_run_dir(f.run_dir, "");
  RunMeta meta = make_meta(run_id, env.git_rev, res.backend, res.world, res.mesh, config_hash_of(s));
  ResultWriter steps((dir / "train.csv").string(), "train_step");
  // On GPUs, MFU over every rank's GPU: the model's FLOPs per step over the
  // step time and world x the per-GPU peak (this process's GPU measured).
  const DevicePeaks peaks = on_device ? device_peaks(cfg.precision, res.device, -1) : DevicePeaks{};
  const double model_flops = model_flops_per_step(cfg.model, cfg.batch, cfg.seq);
  if (!f.quiet) {
    std::printf("parabench train: %s, %s (%lld params), %s, batch %d x %d tokens, %d steps, on %s\n",
                spec_label(s.spec).c_str(), cfg.model.name.c_str(), (long long)cfg.model.num_params(),
                precision_name(cfg.precision).c_str(), cfg.batch, cfg.seq, cfg.steps,
                on_device ? (res.device + " per rank, over nccl").c_str() : "the CPU");
    std::printf("%5s %10s %10s %10s %11s %9s\n", "step", "loss", "grad_norm", "lr", "tokens/s", "ms");
  }
  for (const auto& st : res.steps) {
    double tps = double(cfg.tokens_per_step()) / st.seconds;
    if (!f.quiet)
      std::printf("%5d %10.5f %10.4f %10.3g %11.0f %9.2f\n", st.step, st.loss, st.grad_norm, st.lr,
                  tps, st.seconds * 1e3);
    CsvRecord row;
    row.set("step", st.step).set("loss", st.loss).set("grad_norm", st.grad_norm).set("lr", st.lr);
    row.set("tokens_per_s", tps).set("step_time_s", st.seconds);
    if (peaks.table > 0 && st.seconds > 0)
      row.set("mfu", model_flops / st.seconds / (res.world * peaks.table)).set("peak_flops", res.world * peaks.table);
    if (peaks.measured > 0 && st.seconds > 0)
      row.set("mfu_measured", model_flops / st.seconds / (res.world * peaks.measured));
    meta.timestamp = iso8601_utc(std::chrono::system_clock::now());
    steps.write(meta, row);
  }
  if (on_device) print_peaks(res.device, peaks, res.world);
  std::printf("\nchecks against the fp64 truth, the %s reference and its replay of this order:\n",
              precision_name(cfg.precision).c_str());
  for (const auto& e : res.exact)
    std::printf("  %-32s measured %12lld  declared %12lld  %s\n", e.what.c_str(),
                (long long)e.measured, (long long)e.declared, e.pass ? "exact" : "DIFFERS");
  print_result_header();
  print_result_row(res);
  ResultWriter conf((dir / "conformance.csv").string(), "conformance");
  write_conformance_rows(conf, meta, res, cfg.steps);
  std::printf("%s\nresults: %s\n", kRatioLegend, dir.string().c_str());
  return res.pass() ? 0 : 1;
}

void print_header() {
  std::printf("%5s %10s %10s %10s %11s %9s %10s %10s %10s %10s\n", "step", "loss", "grad_norm",
              "lr", "tokens/s", "ms", "params", "grads", "optimizer", "activ.");
}

int run_reference(const TrainFlags& f, ConfigReader& r, const TrainConfig& cfg, const Env& env) {
  r.check_no_unknown_keys();
  const std::shared_ptr<TrainDevice> device = cfg.device == Device::cuda ? open_cuda_device(0) : nullptr;
  RunSpec one;
  one.train = cfg;
  require_fits(planner::run_need(one, 1, false, /*conformance=*/false), limits_of(f.limits),
               "train " + cfg.model.name);
  const std::string run_id = make_run_id(std::chrono::system_clock::now());
  auto dir = f.run_dir.empty() ? make_run_dir(f.cfg.out, run_id) : make_run_dir(f.run_dir, "");
  RunMeta meta = make_meta(run_id, env.git_rev, "local", 1, mesh_text(MeshShape{}), r.config_hash());
  ResultWriter out((dir / "train.csv").string(), "train_step");

  SplitPlan plan;
  plan.micro = cfg.microbatches;
  auto trainer = make_reference_trainer(cfg, plan, device.get());
  const DevicePeaks peaks = device ? device_peaks(cfg.precision, device->name, 0) : DevicePeaks{};
  const double model_flops = model_flops_per_step(cfg.model, cfg.batch, cfg.seq);
  MarkovSource src(cfg.model.V, cfg.data.seed, cfg.data.branching, cfg.data.mix);
  if (!f.quiet) {
    std::printf("parabench train: %s (%lld params), %s, batch %d x %d tokens, %d steps, on %s\n",
                cfg.model.name.c_str(), (long long)cfg.model.num_params(),
                precision_name(cfg.precision).c_str(), cfg.batch, cfg.seq, cfg.steps,
                device ? device->name.c_str() : "the CPU");
    print_header();
  }
  const auto& mem = trainer->memory();
  for (int s = 0; s < cfg.steps; ++s) {
    StepStats st = trainer->step();
    double tps = double(cfg.tokens_per_step()) / st.seconds;
    if (!f.quiet)
      std::printf("%5d %10.5f %10.4f %10.3g %11.0f %9.2f %10s %10s %10s %10s\n", st.step, st.loss,
                  st.grad_norm, st.lr, tps, st.seconds * 1e3,
                  human_bytes(double(mem.peak(MemTag::params))).c_str(),
                  human_bytes(double(mem.peak(MemTag::grads))).c_str(),
                  human_bytes(double(mem.peak(MemTag::optimizer))).c_str(),
                  human_bytes(double(mem.peak(MemTag::activations))).c_str());
    CsvRecord row;
    row.set("step", st.step).set("loss", st.loss).set("grad_norm", st.grad_norm).set("lr", st.lr);
    row.set("tokens_per_s", tps).set("step_time_s", st.seconds);
    if (peaks.table > 0) row.set("mfu", model_flops / st.seconds / peaks.table).set("peak_flops", peaks.table);
    if (peaks.measured > 0) row.set("mfu_measured", model_flops / st.seconds / peaks.measured);
    row.set("mem_params", mem.peak(MemTag::params)).set("mem_grads", mem.peak(MemTag::grads));
    row.set("mem_optimizer", mem.peak(MemTag::optimizer));
    row.set("mem_activations", mem.peak(MemTag::activations));
    row.set("mem_comm", mem.peak(MemTag::comm)).set("mem_workspace", mem.peak(MemTag::workspace));
    row.set("mem_total", mem.peak_total()).set("mem_host_total", mem.peak_total(Place::host));
    meta.timestamp = iso8601_utc(std::chrono::system_clock::now());
    out.write(meta, row);
  }
  if (device) print_peaks(device->name, peaks, 1);
  std::printf("entropy floor of the synthetic language: %.5f nats/token\n", src.entropy_rate());
  std::printf("results: %s\n", out.path().c_str());
  return 0;
}

}  // namespace

void register_train(CLI::App& root, Registry& reg, const Env& env) {
  auto f = std::make_shared<TrainFlags>();
  CLI::App* app = root.add_subcommand("train", "train one configuration, with its checks");
  add_config_flags(app, f->cfg);
  app->add_option("--model", f->model, "named model shape (tiny, small, medium, gpt2-124m, ...)");
  app->add_option("--precision", f->precision, "fp64 | fp32 | bf16-mixed");
  // Every given value is checked here, naming the flag (CLI11's message).
  const auto positive = CLI::Range(1, 1 << 30);
  const CLI::Validator finite_positive(
      [](std::string& v) {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        return end && *end == 0 && std::isfinite(x) && x > 0 ? std::string()
                                                               : "must be a finite number > 0, got '" + v + "'";
      },
      "FINITE>0");
  app->add_option("--steps", f->steps, "training steps")->check(positive);
  app->add_option("--batch", f->batch, "global batch (sequences)")->check(positive);
  app->add_option("--seq", f->seq, "tokens per sequence")->check(positive);
  app->add_option("--microbatches", f->microbatches, "gradient accumulation steps")->check(positive);
  app->add_option("--threads", f->threads, "BLAS threads per rank")->check(CLI::Range(1, 1024));
  app->add_option("--lr", f->lr, "peak learning rate")->check(finite_positive);
  app->add_option("--seed", f->seed, "init seed")->check(CLI::Range(int64_t(0), int64_t(1) << 62));
  app->add_flag("--quiet", f->quiet, "no per-step table");
  app->add_option("--run-dir", f->run_dir, "write directly into this directory");
  f->mesh_flag = app->add_option("--mesh", f->mesh,
                                 "the mesh, e.g. dp2.pp2 (runs the strategy under the conformance engine)");
  f->strategy_flag =
      app->add_option("--strategy", f->strategy, "strategy options, e.g. shard=zero3,prefetch=2 or schedule=zb-h1");
  f->dp_flag = app->add_option("--dp", f->dp, "data-parallel ranks: shorthand for --mesh dp<N> (not with --mesh)")
                   ->check(CLI::Range(1, 1 << 20));
  f->shard_flag = app->add_option("--shard", f->shard,
                                  "none | zero1 | zero2 | zero3 | hsdp | hzero: shorthand for --strategy shard=S "
                                  "(not with a shard in --strategy)");
  app->add_option("--backend", f->backend, "local, mpi or nccl (default: nccl for --device cuda, else mpi under mpirun, else local)");
  app->add_option("--device", f->device, "cpu | cuda (the reference on GPU 0; a data-parallel strategy or pipeline schedule on one GPU per rank, over nccl)");
  add_preflight_flags(app, f->limits);
  reg.push_back({app, [f, &env] {
                   refuse_conflicts(*f);
                   ConfigReader r = load_config(f->cfg);
                   apply_flags(*f, r);
                   if (names_strategy(*f, r)) return run_strategy(*f, r, env);
                   TrainConfig cfg = read_train_config(r);
                   return run_reference(*f, r, cfg, env);
                 }});
}

}  // namespace pb::cli
