// parabench reshard: a sharded checkpoint (docs/checkpoint.md) read at
// another mesh and written again by that mesh's ranks; and check --reshard,
// resharding judged against an uninterrupted run (suites/conformance/reshard.h).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>

#include "harness/io/csv_schema.h"
#include "harness/io/junit.h"
#include "harness/io/run_meta.h"
#include "harness/status.h"
#include "suites/cli/command.h"
#include "suites/cli/common.h"
#include "suites/cli/conformance_output.h"
#include "suites/cli/reshard_flags.h"
#include "impl/registry.h"
#include "suites/conformance/reshard.h"

namespace pb::cli {

namespace fs = std::filesystem;

namespace {

// Writes into a fresh directory beside `out` and renames it to `out` once
// complete: `out` must not exist, and nothing is left behind on failure.
template <class F>
void write_new_directory(const std::string& out, const std::string& what, F&& write) {
  require(!out.empty(), what + ": an empty path");
  std::error_code ec;
  require(!fs::exists(fs::symlink_status(out, ec)),
          what + " " + out + ": exists; nothing is overwritten (name a new directory)");
  const fs::path target = fs::absolute(out);
  require(fs::is_directory(target.parent_path(), ec), what + " " + out + ": its parent directory does not exist");
  const fs::path tmp = target.parent_path() / ("." + target.filename().string() + ".partial-" + std::to_string(::getpid()));
  require(fs::create_directory(tmp, ec), what + " " + out + ": cannot create " + tmp.string());
  try {
    write(tmp.string());
    fs::rename(tmp, target);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

int run_reshard_command(const std::string& src, const std::string& mesh, const std::string& strategy,
                        int microbatches, const std::string& out) {
  const RunSpec written = checkpoint_spec(src);
  RunSpec to;
  to.train = written.train;
  if (microbatches > 0) to.train.microbatches = microbatches;  // they may differ across a checkpoint
  to.mesh = parse_mesh(mesh, "--mesh");
  if (!strategy.empty()) apply_strategy_text(to, strategy, fault_catalogue(), "--strategy");
  require(to.faults.empty(), "--strategy: faults are for check (check --reshard injects the checkpoint's)");
  require(fs::weakly_canonical(src) != fs::weakly_canonical(out), "--out " + out + ": is the source checkpoint");
  write_new_directory(out, "--out", [&](const std::string& tmp) { reshard_checkpoint(src, to, tmp); });
  std::printf("resharded %s (%s) to %s: %s\n", src.c_str(), spec_label(written).c_str(), spec_label(to).c_str(),
              out.c_str());
  return 0;
}

int gcd_lcm(int a, int b) { return a / std::gcd(a, b) * b; }

bool pipelined(const RunSpec& s) { return s.mesh.pp > 1 || s.pipe.schedule.has_value(); }

}  // namespace

void add_reshard_check_flags(CLI::App* app, ReshardCheckFlags& f) {
  app->add_option("--reshard", f.pairs,
                  "check resharding instead of the matrix: A:B trains at mesh A, saves a checkpoint, loads it at B "
                  "and finishes; each side MESH[,key=value...], e.g. dp2,shard=zero3:dp4,shard=zero1");
  app->add_option("--reshard-at", f.at, "steps trained at A before the checkpoint (default: half the steps)");
  app->add_option("--reshard-keep", f.keep,
                  "keep A's checkpoint in this new directory (one --reshard pair and one --precision)");
}

int run_reshard_check(const ReshardCheckFlags& f, const std::vector<std::string>& precisions,
                      const std::string& model, int steps, const ReshardOutputs& outputs) {
  std::vector<ReshardRun> runs;
  for (const std::string& pair : f.pairs) {
    const size_t colon = pair.find(':');
    require(colon != std::string::npos && pair.find(':', colon + 1) == std::string::npos,
            "--reshard: '" + pair + "' is not A:B (two sides MESH[,key=value...] joined by one ':')");
    for (const std::string& p : precisions) {
      ReshardRun r;
      r.from = parse_reshard_side(pair.substr(0, colon), "--reshard A", nullptr);
      r.to = parse_reshard_side(pair.substr(colon + 1), "--reshard B", &r.faults);
      const bool moe = r.from.mesh.ep > 1 || r.to.mesh.ep > 1;
      const bool split = r.from.mesh.tp > 1 || r.to.mesh.tp > 1 || r.from.mesh.cp > 1 || r.to.mesh.cp > 1;
      TrainConfig c;  // as check's points: tiny-tp's 12 heads where tensor or context parallel split them
      c.model = named_model(!model.empty() ? model : moe ? "tiny-moe" : split ? "tiny-tp" : "tiny");
      c.precision = parse_precision(p);
      c.steps = steps;
      c.seq = std::min(16, c.model.maxT);
      // A pipeline on either side: as check's pipeline points, 8 blocks deep
      // (room for pp x v stages) and, per side, 2 pp microbatches of one
      // sequence per replica (the microbatches may differ across a checkpoint).
      const bool pipelines = pipelined(r.from) || pipelined(r.to);
      if (pipelines && model.empty()) c.model.L = 8;
      const int ma = pipelined(r.from) ? 2 * r.from.mesh.pp : 1, mb = pipelined(r.to) ? 2 * r.to.mesh.pp : 1;
      c.batch = (pipelines ? 1 : 4) * gcd_lcm(r.from.mesh.dp * r.from.mesh.cp * ma, r.to.mesh.dp * r.to.mesh.cp * mb);
      r.from.train = r.to.train = c;
      r.from.train.microbatches = ma;
      r.to.train.microbatches = mb;
      r.at = f.at > 0 ? f.at : steps / 2;
      runs.push_back(std::move(r));
    }
  }
  require(f.keep.empty() || runs.size() == 1,
          "--reshard-keep: keeps one checkpoint; give one --reshard pair and one --precision");
  if (!f.keep.empty()) {
    std::error_code ec;
    require(!fs::exists(fs::symlink_status(f.keep, ec)),
            "--reshard-keep " + f.keep + ": exists; nothing is overwritten (name a new directory)");
  }
  if (!outputs.junit.empty()) require_junit_writable(outputs.junit);
  const std::string run_id = make_run_id(std::chrono::system_clock::now());
  std::unique_ptr<ResultWriter> csv;  // made with the first result: a refused pair leaves no directory behind
  JunitSuite junit{"parabench check --reshard", 0, {}};
  int failures = 0;
  for (ReshardRun& r : runs) {
    if (!f.keep.empty())
      r.keep = [&](const std::string& dir) {
        write_new_directory(f.keep, "--reshard-keep", [&](const std::string& tmp) {
          fs::copy(dir, tmp, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
        });
      };
    const auto started = std::chrono::steady_clock::now();
    const ReshardResult res = run_reshard(r);
    // As conformance rows (the strategy column: the pair's label; the mesh:
    // B's, where the run finishes) and JUnit cases, by check's own writers.
    ConformanceResult as_row;
    as_row.strategy = res.label;
    as_row.mesh = mesh_text(r.to.mesh);
    as_row.precision = res.precision;
    as_row.world = r.to.world();
    as_row.backend = "local";
    as_row.bitwise_declared = res.bitwise_declared;
    as_row.rule = res.rule;
    as_row.bits = res.bits;
    as_row.fp64 = res.fp64;
    StrategyRun finish;
    finish.spec = r.to;
    if (!csv) {
      const fs::path dir =
          outputs.run_dir.empty() ? make_run_dir(outputs.out, run_id) : make_run_dir(outputs.run_dir, "");
      csv = std::make_unique<ResultWriter>((dir / "conformance.csv").string(), "conformance");
    }
    write_conformance_rows(*csv, make_meta(run_id, outputs.git_rev, "local", r.to.world(), as_row.mesh,
                                          config_hash_of(finish)),
                           as_row, r.to.train.steps);
    add_junit_cases(as_row, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), &junit);
    double worst = 0;
    for (const QuantityCheck& q : res.rule) worst = std::max(worst, q.ratio);
    std::string why;
    for (const QuantityCheck& q : res.rule)
      if (!q.pass) why += " [" + q.quantity + "@" + std::to_string(q.step) + " ratio " + std::to_string(q.ratio) + "]";
    for (const QuantityCheck& q : res.fp64)
      if (!q.pass) why += " [at fp64 " + q.quantity + "@" + std::to_string(q.step) + " ratio " + std::to_string(q.ratio) + "]";
    for (const QuantityCheck& q : res.bits)
      if (!q.pass) why += " [bits " + q.quantity + "@" + std::to_string(q.step) + "]";
    std::printf("%-4s %-62s %-10s max ratio %8.3g  bits %-4s%s\n", res.pass() ? "ok" : "FAIL", res.label.c_str(),
                precision_name(res.precision).c_str(), worst,
                !res.bitwise_declared ? "n/a" : all_pass(res.bits) ? "yes" : "no", why.c_str());
    failures += !res.pass();
  }
  if (!outputs.junit.empty()) write_junit(outputs.junit, {junit});
  std::printf("\n%zu resharded runs, %d failed (judged against the uninterrupted fp64 truth; bits: against the "
              "replay of A's order then B's)\nresults: %s\n",
              runs.size(), failures, csv ? csv->path().c_str() : "none");
  return failures ? 1 : 0;
}

void register_reshard(CLI::App& root, Registry& reg, const Env&) {
  struct Flags {
    std::string src, mesh, strategy, out;
    int microbatches = 0;  // 0: the checkpoint's
  };
  auto f = std::make_shared<Flags>();
  CLI::App* app = root.add_subcommand("reshard", "read a sharded checkpoint at another mesh and write it again");
  app->add_option("SRC", f->src, "checkpoint directory (index.json and one safetensors file per rank)")->required();
  app->add_option("--mesh", f->mesh, "the mesh to reshard to, e.g. dp4 or dp4.ep4")->required();
  app->add_option("--strategy", f->strategy, "its options, e.g. shard=zero1");
  app->add_option("--microbatches", f->microbatches,
                  "microbatches per replica at the new mesh (a pipeline's; default: the checkpoint's)")
      ->check(CLI::PositiveNumber);
  app->add_option("--out", f->out, "new checkpoint directory (must not exist)")->required();
  reg.push_back({app, [f] { return run_reshard_command(f->src, f->mesh, f->strategy, f->microbatches, f->out); }});
}

}  // namespace pb::cli
