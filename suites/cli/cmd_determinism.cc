// parabench check --determinism: the determinism matrix of
// docs/numerics.md#determinism. Pairs of runs — the same spec rerun, with
// chaos delays, across pipeline schedules, ZeRO stages, recomputation, meshes
// and (under mpirun) backends — each with the engine's claim for it
// (suites/conformance/determinism.h), run and judged: exit 1 when a claim
// does not hold, 2 when nothing could be compared.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/comm_backends.h"
#include "harness/status.h"
#include "impl/registry.h"
#include "suites/cli/conformance_output.h"
#include "suites/cli/determinism_check.h"
#include "suites/conformance/determinism.h"

namespace pb::cli {
namespace {

struct Side {
  const char* mesh;      // check's --mesh entry (".sp" allowed)
  const char* strategy;  // check's --strategy text
  bool chaos = false;
};

struct PairDef {
  const char* kind;
  const char* model;  // "" : check's default for the mesh
  Side a, b;
  // b trains a's configuration (model, batch, sequence): the pairs across
  // meshes compare one training; the others build each side as check does.
  bool same_training = true;
};

// The pairs on one backend (every process alike). Models are named where the
// two sides' meshes would otherwise pick different defaults.
const std::vector<PairDef>& local_pairs() {
  static const std::vector<PairDef> pairs = {
      {"rerun", "", {"dp2", ""}, {"dp2", ""}},
      {"rerun", "", {"dp2", "shard=zero3"}, {"dp2", "shard=zero3"}},
      {"rerun", "", {"dp2.tp2.sp", ""}, {"dp2.tp2.sp", ""}},
      {"rerun", "", {"cp2", ""}, {"cp2", ""}},
      {"rerun", "", {"cp2", "cp_algo=ulysses"}, {"cp2", "cp_algo=ulysses"}},
      {"rerun", "", {"pp2", "schedule=1f1b"}, {"pp2", "schedule=1f1b"}},
      {"rerun", "", {"pp2", "schedule=2bw"}, {"pp2", "schedule=2bw"}},
      {"rerun", "tiny-moe", {"dp2.ep2", ""}, {"dp2.ep2", ""}},
      {"chaos", "", {"dp2", "shard=zero3"}, {"dp2", "shard=zero3", true}},
      {"chaos", "", {"tp2", ""}, {"tp2", "", true}},
      {"chaos", "", {"cp2", ""}, {"cp2", "", true}},
      {"chaos", "", {"pp2", "schedule=interleaved,virtual_stages=2"},
       {"pp2", "schedule=interleaved,virtual_stages=2", true}},
      {"chaos", "tiny-moe", {"dp2.ep2", ""}, {"dp2.ep2", "", true}},
      {"schedules", "", {"pp2", "schedule=gpipe"}, {"pp2", "schedule=1f1b"}},
      {"schedules", "", {"pp2", "schedule=1f1b"}, {"pp2", "schedule=interleaved,virtual_stages=2"}},
      {"schedules", "", {"pp2", "schedule=1f1b"}, {"pp2", "schedule=zb-h1"}},
      {"schedules", "", {"pp2", "schedule=1f1b"}, {"pp2", "schedule=2bw"}},
      {"ZeRO stages", "", {"dp2", ""}, {"dp2", "shard=zero1"}},
      {"ZeRO stages", "", {"dp2", "shard=zero1"}, {"dp2", "shard=zero2"}},
      {"ZeRO stages", "", {"dp2", "shard=zero2"}, {"dp2", "shard=zero3"}},
      {"ZeRO stages", "", {"dp2", "shard=zero3"}, {"dp2", "shard=zero3,prefetch=2"}},
      {"recompute", "", {"tp2", ""}, {"tp2", "recompute=full"}},
      {"recompute", "", {"tp2", ""}, {"tp2", "recompute=selective"}},
      {"meshes", "tiny-tp", {"dp2", ""}, {"dp4", ""}},
      {"meshes", "tiny-tp", {"dp2", ""}, {"tp2", ""}},
      {"meshes", "tiny-tp", {"tp2", ""}, {"cp2", ""}},
      {"meshes", "tiny-tp", {"cp2", ""}, {"cp2", "cp_algo=ulysses"}},
  };
  return pairs;
}

// Local backend against MPI (mpirun -np 2): rank 0 runs the local side in
// its own process after the MPI side.
const std::vector<Side>& backend_sides() {
  static const std::vector<Side> sides = {
      {"dp2", ""}, {"dp2", "shard=zero3"}, {"tp2", ""}, {"cp2", ""}, {"pp2", "schedule=1f1b"}};
  return sides;
}

StrategyRun build(const char* model, const std::string& precision, const Side& s, int steps) {
  StrategyRun r = check_point(model, precision, s.mesh, s.strategy, steps);
  r.world.chaos.enabled = s.chaos;
  return r;
}

struct Row {
  std::string kind, a, b, precision;
  ClaimWhy claim;
  bool ran = false;
  PairOutcome out;
};

std::string label(const StrategyRun& s) {
  const std::string strategy = conformance_label(s.spec);
  return mesh_text(s.spec.mesh) + (strategy.empty() ? "" : " " + strategy) + (s.world.chaos.enabled ? " +chaos" : "") +
         (s.world.backend != BackendKind::local ? " on " + std::string(backend_name(s.world.backend)) : "") +
         (s.spec.train.device == Device::cuda ? " on cuda" : "");
}

Row row(const std::string& kind, const StrategyRun& a, const StrategyRun& b, const std::string& precision) {
  Row r;
  r.kind = kind;
  r.a = label(a);
  r.b = label(b);
  r.precision = precision;
  r.claim = claim_for(a, b);
  return r;
}

void print_row(const Row& r) {
  const char* verdict = !r.ran ? "--" : r.out.pass ? "ok" : "FAIL";
  const std::string measured = !r.ran                  ? "not run"
                               : r.out.identical        ? "bits equal"
                               : r.out.param_difference ? "params differ by " + [&] {
                                   char b[32];
                                   std::snprintf(b, sizeof b, "%.2g", r.out.param_difference);
                                   return std::string(b);
                                 }()
                                                        : "bits differ";
  std::printf("%-4s %-11s %-10s %-44s %-44s %-19s %s\n", verdict, r.kind.c_str(), r.precision.c_str(), r.a.c_str(),
              r.b.c_str(), claim_name(r.claim.claim).c_str(), measured.c_str());
  if (r.ran && !r.out.pass) std::printf("     %s\n", r.out.note.c_str());
}

}  // namespace

int run_determinism_check(const std::vector<std::string>& precisions, int steps, const std::string& backend,
                          const Env& env) {
  for (const auto& p : precisions)
    require(p == "fp64" || p == "fp32" || p == "bf16-mixed",
            "--precision: '" + p + "' is not one of fp64, fp32, bf16-mixed");
  BackendKind kind = env.under_mpirun ? BackendKind::mpi : BackendKind::local;
  if (!backend.empty())
    require(parse_backend(backend, &kind) && kind != BackendKind::nccl,
            "--backend " + backend + ": check --determinism runs on the CPU, over local or mpi");
  require(kind != BackendKind::local || env.launched_size == 1,
          "--backend local: under mpirun -np " + std::to_string(env.launched_size) +
              " every process would run the pairs; use --backend mpi");
  std::vector<Row> rows;
  int failures = 0, ran = 0, skipped = 0;
  std::unique_ptr<World> mpi_world;
  if (kind == BackendKind::mpi) {
    WorldOptions wo;
    wo.backend = BackendKind::mpi;
    wo.size = 0;  // what mpirun launched
    mpi_world = make_world(wo);
  }
  const bool writer = !mpi_world || hosts_rank(*mpi_world, 0);
  if (writer)
    std::printf("%-4s %-11s %-10s %-44s %-44s %-19s %s\n", "", "pair", "precision", "A", "B", "claim", "measured");
  for (const std::string& p : precisions) {
    if (!mpi_world) {
      for (const PairDef& d : local_pairs()) {
        StrategyRun a = build(d.model, p, d.a, steps), b = build(d.model, p, d.b, steps);
        if (d.same_training) b.spec.train = a.spec.train;
        Row r = row(d.kind, a, b, p);
        if (r.claim.claim != Claim::unvouched) {
          r.out = judge_pair(r.claim.claim, run_conformance(a), run_conformance(b));
          r.ran = true;
          ++ran;
          failures += !r.out.pass;
        }
        print_row(r);
        rows.push_back(std::move(r));
      }
      // What the engine does not vouch for: claims only (no device here to run them).
      StrategyRun cpu = build("", p, {"dp2", ""}, steps), gpu = cpu;
      gpu.spec.train.device = Device::cuda;
      gpu.world.backend = BackendKind::nccl;
      Row r = row("device", cpu, gpu, p);
      print_row(r);
      rows.push_back(std::move(r));
    } else {
      for (const Side& s : backend_sides()) {
        StrategyRun on_mpi = build("", p, s, steps), on_local = on_mpi;
        if (on_mpi.spec.world() != mpi_world->size()) {  // named below
          ++skipped;
          continue;
        }
        on_mpi.world.backend = BackendKind::mpi;
        const ConformanceResult rm = run_conformance(on_mpi, *mpi_world);
        if (!writer) continue;
        Row r = row("backends", on_local, on_mpi, p);
        r.out = judge_pair(r.claim.claim, run_conformance(on_local), rm);
        r.ran = true;
        ++ran;
        failures += !r.out.pass;
        print_row(r);
        rows.push_back(std::move(r));
      }
    }
  }
  if (!writer) return 0;
  if (skipped)
    std::fprintf(stderr, "check --determinism: skipped %d local-vs-mpi pairs whose world is not %d (run them under "
                 "mpirun -np 2)\n", skipped, mpi_world->size());
  std::printf("\nclaims:\n");
  std::vector<std::string> seen;
  for (const Row& r : rows) {
    const std::string line = claim_name(r.claim.claim) + ": " + r.claim.why;
    if (std::find(seen.begin(), seen.end(), line) == seen.end()) {
      seen.push_back(line);
      std::printf("  %s\n", line.c_str());
    }
  }
  require(ran > 0, mpi_world ? "check --determinism: nothing to compare under mpirun -np " +
                                   std::to_string(mpi_world->size()) + " (the backend pairs are of world 2)"
                             : std::string("check --determinism: nothing to compare"));
  std::printf("\n%d pairs run, %d failed their claim%s\n", ran, failures,
              mpi_world ? "" : " (local backend; under mpirun -np 2 the local-vs-mpi pairs run)");
  return failures ? 1 : 0;
}

}  // namespace pb::cli
