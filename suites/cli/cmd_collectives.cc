// parabench collectives: the collective benchmark, nccl-tests style. The run
// on every rank is suites/collectives (run_benchmark); this file parses the
// flags, prints the table and writes the rows. Flags -b -e -f -i -n -w -c -d
// -o -r -a mean what they mean in nccl-tests (-a defaults to 3, the slowest rank, as results/SCHEMA.md
// defines time_us). Under mpirun the mpi backend is picked by itself;
// --backend overrides. Rows go to OUT/<run id>/collectives.csv (kind
// `collective`), or to -F FILE; every rank's communication counters to
// comm_counters.csv beside them. Exit 1 if any result was wrong or a rank
// failed ("rank N: <error>" on stderr; under MPI the job is aborted).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "harness/comm/comm_backends.h"
#include "harness/comm/runner.h"
#include "harness/io/csv.h"
#include "harness/io/csv_schema.h"
#include "harness/io/run_meta.h"
#include "harness/status.h"
#include "suites/cli/command.h"
#include "suites/cli/common.h"
#include "suites/collectives/bench.h"

namespace pb::cli {
namespace {

struct Flags {
  std::vector<std::string> ops{"all_reduce"};
  std::string min_bytes = "32M", max_bytes = "32M", step_bytes = "1M", dtype = "float", redop = "sum", root = "0";
  double step_factor = 0;
  coll::BenchOptions bench;
  std::string backend, csv, out = "results/runs", inject;
  int world = 2, ranks_per_node = 0;
  double timeout_s = 60;
  bool chaos = false;
  uint64_t chaos_seed = 1;
  double chaos_max_us = 2000;
  PreflightFlags limits;
};

std::vector<DType> parse_dtypes(const std::string& s) {
  if (s == "all") return {DType::f64, DType::f32, DType::bf16};
  DType t;
  if (s == "float") return {DType::f32};
  if (s == "double") return {DType::f64};
  require(parse_dtype(s, &t), "-d/--datatype: '" + s + "' is not one of float, double, bfloat16, fp64, fp32, bf16, all");
  return {t};
}

std::vector<ReduceOp> parse_redops(const std::string& s) {
  if (s == "all") return {ReduceOp::sum, ReduceOp::avg, ReduceOp::max};
  ReduceOp op;
  require(parse_reduce_op(s, &op), "-o/--op: '" + s + "' is not one of sum, avg, max, all");
  return {op};
}

void parse_inject(const std::string& s, coll::BenchOptions& b) {
  if (s.empty()) return;
  const auto colon = s.find(':');
  const std::string kind = colon == std::string::npos ? "raise" : s.substr(colon + 1);
  try {
    b.fail_rank = std::stoi(s.substr(0, colon));
  } catch (const std::exception&) {
    throw InputError("--inject-failure: '" + s + "' is not RANK[:raise|leave|crash|stop]");
  }
  if (kind == "raise") b.fail_kind = coll::FailureKind::raise;
  else if (kind == "leave") b.fail_kind = coll::FailureKind::leave;
  else if (kind == "crash") b.fail_kind = coll::FailureKind::crash;
  else if (kind == "stop") b.fail_kind = coll::FailureKind::stop;
  else throw InputError("--inject-failure: kind '" + kind + "' is not raise, leave, crash or stop");
}

int run(Flags& f, const Env& env, bool world_given) {
  coll::BenchOptions& b = f.bench;
  // nccl-tests' sizes: "8", "1K", "128M", "1G" (powers of 1024).
  b.min_bytes = size_t(parse_byte_size(f.min_bytes, "-b/--minbytes"));
  b.max_bytes = size_t(parse_byte_size(f.max_bytes, "-e/--maxbytes"));
  b.step_bytes = size_t(parse_byte_size(f.step_bytes, "-i/--stepbytes"));
  b.step_factor = f.step_factor;
  require(b.min_bytes <= b.max_bytes, "-b/--minbytes: must be <= -e/--maxbytes");
  require(std::isfinite(b.step_factor) && b.step_factor >= 0 && b.step_factor <= 1e6,
          "-f/--stepfactor: must be a finite number in [0, 1e6] (> 1 enables it)");
  require(b.step_factor > 1 || b.step_bytes > 0, "-i/--stepbytes: must be > 0 when -f is not > 1");
  require(b.iters >= 1, "-n/--iters: must be >= 1");
  require(b.warmup >= 0 && b.check >= 0, "-w/--warmup and -c/--check: must be >= 0");
  require(b.average >= 0 && b.average <= 3, "-a/--average: must be 0 (rank 0), 1 (mean), 2 (min) or 3 (max)");
  std::vector<const coll::CollDesc*> ops;
  for (const auto& name : f.ops) {
    if (name == "all") {
      ops = coll::all_colls();
      break;
    }
    const coll::CollDesc* d = coll::find_coll(name);
    require(d != nullptr, "op: '" + name + "' is not one of all_reduce, reduce_scatter, all_gather, broadcast, "
                          "reduce, alltoall, sendrecv, all");
    ops.push_back(d);
  }
  const auto dtypes = parse_dtypes(f.dtype);
  const auto redops = parse_redops(f.redop);
  parse_inject(f.inject, b);

  WorldOptions wo;
  wo.backend = env.under_mpirun ? BackendKind::mpi : BackendKind::local;
  if (!f.backend.empty())
    require(parse_backend(f.backend, &wo.backend), "--backend: '" + f.backend + "' is not local, mpi or nccl");
  wo.size = wo.backend == BackendKind::local || world_given ? f.world : 0;
  wo.ranks_per_node = f.ranks_per_node;
  wo.timeout_s = f.timeout_s;
  wo.chaos = {f.chaos, f.chaos_seed, f.chaos_max_us};
  validate(wo);
  {  // preflight: the local backend hosts every rank; an MPI process one
    const int64_t hosted = wo.backend == BackendKind::local ? std::max(1, f.world) : 1;
    Need need;
    need.local_ranks = wo.backend == BackendKind::local ? hosted : 0;
    need.bytes = double(hosted) * (coll::kBufferBytesPerMaxByte * double(b.max_bytes) + kRankOverheadBytes);
    require_fits(need, limits_of(f.limits), "collectives, " + std::to_string(hosted) + " ranks of -e " + f.max_bytes);
  }
  auto world = make_world(wo);
  std::string spec;  // what this process was asked to run
  for (const auto* d : ops) spec += std::string(d->name) + ",";
  spec += "|" + std::to_string(b.min_bytes) + "|" + std::to_string(b.max_bytes) + "|" + std::to_string(b.step_bytes) +
          "|" + std::to_string(b.step_factor) + "|" + std::to_string(b.iters) + "|" + std::to_string(b.warmup) + "|" +
          std::to_string(b.check) + "|" + std::to_string(b.average) + "|" + f.dtype + "|" + f.redop + "|" + f.root +
          "|" + std::to_string(f.timeout_s) + "|" + f.inject;
  require_same_spec(*world, spec, "collectives");
  const int n = world->size();
  std::vector<int> roots;
  if (f.root == "all") {
    for (int r = 0; r < n; ++r) roots.push_back(r);
  } else {
    int r = -1;
    try {
      r = std::stoi(f.root);
    } catch (const std::exception&) {
    }
    require(r >= 0 && r < n, "-r/--root: must be a rank in [0, " + std::to_string(n) + ") or all, got '" + f.root + "'");
    roots.push_back(r);
  }

  coll::BenchPlan plan{ops, dtypes, redops, roots, b};
  int nodes = 1;  // what rank 0 sees (host names under MPI, --ranks-per-node locally)
  run_ranks(*world, [&](Communicator& comm) {
    if (comm.rank() == 0) nodes = comm.num_nodes();
  });

  // Rows and counters are written by the process that hosts rank 0.
  const bool writer = hosts_rank(*world, 0);
  const std::string run_id = make_run_id(std::chrono::system_clock::now());
  std::string csv_path = f.csv, counters_path;
  std::unique_ptr<ResultWriter> rows;
  RunMeta meta = make_meta(run_id, env.git_rev, std::string(backend_name(wo.backend)), n, "", "");
  if (writer) {
    if (csv_path.empty()) csv_path = (make_run_dir(f.out, run_id) / "collectives.csv").string();
    counters_path = (std::filesystem::path(csv_path).parent_path() / "comm_counters.csv").string();
    rows = std::make_unique<ResultWriter>(csv_path, "collective");
    std::printf("# parabench collectives: backend %s, %d ranks", std::string(backend_name(wo.backend)).c_str(), n);
    if (wo.ranks_per_node > 0) std::printf(" (%d per node)", wo.ranks_per_node);
    std::printf("\n# minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d validation: %d average: %d\n",
                b.min_bytes, b.max_bytes,
                (b.step_factor > 1 ? std::to_string(b.step_factor) + "(factor)" : std::to_string(b.step_bytes) + "(bytes)").c_str(),
                b.warmup, b.iters, b.check, b.average);
  }
  coll::BenchSink sink;
  sink.on_case = [](const coll::BenchCase& bc) {
    std::printf("#\n# %s\n", std::string(bc.op->name).c_str());
    coll::print_header(stdout);
  };
  sink.on_line = [&](const coll::BenchCase& bc, const coll::BenchPoint& oop, const coll::BenchPoint& ip) {
    coll::print_line(stdout, oop, ip);
    for (const coll::BenchPoint* p : {&oop, &ip}) {
      CsvRecord r;
      r.set("op", bc.op->schema_name).set("bytes", p->bytes).set("count", p->count);
      r.set("dtype", dtype_name(p->dtype)).set("redop", p->redop);
      if (p->root >= 0) r.set("root", p->root);
      r.set("inplace", p->in_place).set("iters", p->iters).set("time_us", p->time_us);
      r.set("algbw_gbps", p->algbw_gbps).set("busbw_gbps", p->busbw_gbps);
      if (p->wrong >= 0) r.set("wrong", p->wrong);
      r.set("nodes", nodes);
      meta.timestamp = iso8601_utc(std::chrono::system_clock::now());
      rows->write(meta, r);
    }
  };
  const coll::BenchResult res = coll::run_benchmark(*world, plan, sink);
  if (!res.error.empty()) {
    std::fprintf(stderr, "%s\n", res.error.c_str());
    std::fflush(stderr);
    if (rows && res.failed_at.op) {  // a failure is a result too
      const coll::BenchCase& at = res.failed_at;
      CsvRecord r;
      r.set("op", at.op->schema_name).set("bytes", res.failed_bytes).set("count", res.failed_bytes / dtype_size(at.dtype));
      r.set("dtype", dtype_name(at.dtype)).set("redop", at.redop).set("inplace", false);
      if (at.root >= 0) r.set("root", at.root);
      meta.status = "failed";
      meta.reason = res.error;
      meta.timestamp = iso8601_utc(std::chrono::system_clock::now());
      rows->write(meta, r);
    }
    world->terminate(1);  // mpi/nccl: ends the other processes; does not return
    return 1;
  }
  if (writer) {
    std::printf("# Out of bounds values : %ld %s\n", res.wrong, res.wrong ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g\n#\n", res.mean_busbw_gbps);
    CsvWriter cw(counters_path, CommLog::csv_header());
    for (const auto& row : res.counters) cw.write_row(row);
    std::printf("results: %s\ncounters: %s\n", csv_path.c_str(), counters_path.c_str());
  }
  if (res.wrong > 0) {
    std::fprintf(stderr, "parabench collectives: %ld wrong elements\n", res.wrong);
    return 1;
  }
  return 0;
}

}  // namespace

void register_collectives(CLI::App& root, Registry& reg, const Env& env) {
  auto f = std::make_shared<Flags>();
  CLI::App* app = root.add_subcommand("collectives", "collective benchmark, nccl-tests style (local, mpi, nccl)");
  app->add_option("ops", f->ops, "all_reduce reduce_scatter all_gather broadcast reduce alltoall sendrecv, or all")
      ->capture_default_str();
  app->add_option("-b,--minbytes", f->min_bytes, "smallest size S (8, 64K, 128M, 1G)")->capture_default_str();
  app->add_option("-e,--maxbytes", f->max_bytes, "largest size S")->capture_default_str();
  app->add_option("-i,--stepbytes", f->step_bytes, "size increment when -f is not > 1")->capture_default_str();
  app->add_option("-f,--stepfactor", f->step_factor, "size multiplier (> 1 enables it)");
  app->add_option("-n,--iters", f->bench.iters, "timed iterations")->capture_default_str();
  app->add_option("-w,--warmup", f->bench.warmup, "untimed warm-up iterations")->capture_default_str();
  app->add_option("-c,--check", f->bench.check, "validation rounds (0: no check)")->capture_default_str();
  app->add_option("-d,--datatype", f->dtype, "float, double, bfloat16 (or fp32, fp64, bf16), all")->capture_default_str();
  app->add_option("-o,--op", f->redop, "reduction: sum, avg, max, all")->capture_default_str();
  app->add_option("-r,--root", f->root, "root of broadcast/reduce, or all")->capture_default_str();
  app->add_option("-a,--average", f->bench.average, "time over ranks: 0 rank 0, 1 mean, 2 min, 3 max")
      ->capture_default_str();
  app->add_option("-F,--csv", f->csv, "write the rows to this file (default OUT/<run id>/collectives.csv)");
  app->add_option("--out", f->out, "directory of run directories")->capture_default_str();
  app->add_option("--backend", f->backend, "local, mpi or nccl (default: mpi under mpirun, else local)");
  auto* world = app->add_option("--world", f->world, "ranks of the local backend")->capture_default_str();
  app->add_option("--ranks-per-node", f->ranks_per_node, "ranks per node (0: one node / the real hosts)")
      ->capture_default_str();
  app->add_option("--timeout", f->timeout_s, "seconds a rank may wait for its peers before the run fails")
      ->capture_default_str();
  app->add_flag("--chaos", f->chaos, "local backend: seeded random delays in every operation");
  app->add_option("--chaos-seed", f->chaos_seed, "seed of the chaos delays")->capture_default_str();
  app->add_option("--chaos-max-us", f->chaos_max_us, "largest chaos delay, microseconds")->capture_default_str();
  add_preflight_flags(app, f->limits);
  app->add_option("--inject-failure", f->inject,
                  "testing: RANK[:raise|leave|crash|stop] fails that rank at its first timed call (stop: SIGSTOP, a frozen rank)");
  reg.push_back({app, [f, &env, world] { return run(*f, env, world->count() > 0); }});
}

}  // namespace pb::cli
