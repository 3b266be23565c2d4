// The conformance engine: runs the fp64 reference (truth), the reference at
// the precision under test (noise floor), the reference replaying the
// strategy's arithmetic order, and the strategy on its ranks — all from the
// same init and data — and judges per compare.h. It also checks per-rank
// model-state bytes (exactly) and communication bytes per group and op
// (exactly) against what the strategy declares (impl/*/cost.h).
#pragma once
#include <string>
#include <vector>

#include "harness/comm/runner.h"
#include "impl/data_parallel/options.h"
#include "reference/trainer.h"
#include "suites/conformance/compare.h"

namespace pb {

struct StrategyRun {
  TrainConfig cfg;
  dp::DpOptions dp;
  WorldOptions world;
  ToleranceRule rule;
};

struct ExactCheck {  // measured == declared
  std::string what;  // e.g. "mem.params", "comm.dp.all_reduce"
  int64_t measured = 0, declared = 0;
  bool pass = false;
};

struct ConformanceResult {
  std::string strategy;  // DpOptions::describe()
  Precision precision = Precision::fp32;
  int world = 1;
  std::string backend;
  bool bitwise_declared = false;
  std::vector<QuantityCheck> rule;     // against the truth
  std::vector<QuantityCheck> bits;     // against the replay (when declared bitwise)
  std::vector<ExactCheck> exact;       // memory and communication, rank 0 (all ranks compared)
  int ranks_with_mismatch = 0;         // ranks whose memory/comm differed from declared
  std::vector<StepStats> steps;        // rank 0's
  bool hosts_rank0 = true;             // false on MPI ranks other than 0 (fields empty)
  bool pass() const;
};

// Every failed check of r, one bracket each ("" when r passes): for test and
// CLI messages.
std::string describe_failures(const ConformanceResult& r);

// Does the strategy declare bit equality with its replay (see dp_rank.h)?
bool declares_bitwise(const StrategyRun& s);
// The reference's split plan that replays the strategy's order.
SplitPlan replay_plan(const StrategyRun& s);

// Runs everything on `world` (whose size must be s.dp.dp).
ConformanceResult run_conformance(const StrategyRun& s, World& world);
// Convenience: a local world built from s.world.
ConformanceResult run_conformance(const StrategyRun& s);

}  // namespace pb
