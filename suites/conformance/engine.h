// The conformance engine — one for every strategy. It runs the fp64
// reference (truth), the reference at the precision under test (noise floor),
// the reference replaying the strategy's arithmetic order (Strategy::replay),
// the strategy on its ranks, and — when it is not bitwise and runs below fp64 —
// the strategy again at fp64 (Strategy::make_rank, the one Rank interface
// of impl/spec/rank.h) — all from the same init and data — and judges per
// compare.h: the rule for every strategy, bit equality where the strategy
// declares it. Every rank's measured memory (by tag) and communication (bytes
// per group and op) must equal what it declares (Rank::declared), exactly.
//
// On a device (train.device = cuda) every rank opens its device through
// StrategyRun::open_device, its communicators wait for the device's stream
// before each operation, and the reference at the precision under test also
// runs on rank 0's device, as a further floor of the rule: "one device" is
// then this device. The truth, the replay and the fp64 rerun stay on the CPU
// (fp64 is the CPU's; replays are host code).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/runner.h"
#include "impl/spec/rank.h"
#include "impl/spec/run_spec.h"
#include "reference/trainer.h"
#include "suites/conformance/compare.h"

namespace pb {

// open_device (impl/spec/rank.h DeviceOpener) is called once per rank and once
// more in rank 0's process for the reference.

// The fp64 floor's references in other orders of inner sums: every matmul's
// contraction in this many slices (kernels::cpu_ops_sliced).
inline constexpr int kFp64FloorSlices[] = {2, 3, 4};

struct StrategyRun {
  RunSpec spec;
  WorldOptions world;  // size: the mesh's world (set by the local overload)
  ToleranceRule rule;
  DeviceOpener open_device;  // needed when spec.train.device is cuda
};

struct ExactCheck {  // measured == declared
  std::string what;  // e.g. "mem.params", "comm.dp.all_reduce"
  int64_t measured = 0, declared = 0;
  bool pass = false;
};

struct ConformanceResult {
  std::string strategy;  // conformance_label
  std::string mesh;      // mesh_text
  Precision precision = Precision::fp32;
  int world = 1;
  std::string backend;
  std::string device = "cpu";          // rank 0's device name when train.device = cuda
  bool bitwise_declared = false;       // against the replay, or the strategy's bitwise twin
  std::vector<QuantityCheck> rule;     // against the truth
  std::vector<QuantityCheck> bits;     // against the replay (when declared bitwise)
  // Not bitwise and below fp64: the same strategy run again at fp64 and held
  // to the rule there, where the floor is fp64 rounding noise: at least four
  // fp64 ulps, and the distances of the fp64 reference in other correct
  // orders (the replay's; every matmul's inner sums in kFp64FloorSlices
  // slices) and of the fp32 reference scaled to fp64. A logic fault (a sum
  // over the wrong group, a term counted twice) does not depend on the
  // precision, but at bf16 the floor of four bf16 ulps can hide a small one;
  // at fp64 it stands out by orders of magnitude.
  std::vector<QuantityCheck> fp64;
  std::vector<ExactCheck> exact;       // memory and communication, rank 0 (all ranks compared)
  int ranks_with_mismatch = 0;         // ranks whose memory/comm differed from declared
  std::vector<StepStats> steps;        // rank 0's, each step's seconds the slowest rank's
  Trace trace;                         // the strategy's (rank 0)
  std::vector<RankTimes> times;        // per world rank, the last step
  bool hosts_rank0 = true;             // false on MPI ranks other than 0 (fields empty)
  bool pass() const;
  // The exact check named `what` ("mem.workspace"); std::out_of_range naming
  // it and the strategy when there is none.
  const ExactCheck& exact_of(const std::string& what) const;
};

// The label of a checked run, with the mesh text beside it (the CSV
// `strategy` column, check's table, JUnit classnames, the teeth tables): the
// run spec's strategy text (strategy_text), then the train-config parts that
// tell the checks of one mesh apart, space-separated: "model=NAME" for a
// mixture-of-experts model (its experts, top-k and capacity are the model's:
// reference/model_config.h moe_variant_name) and "microbatches=N" when N > 1.
// E.g. "shard=zero3,schedule=1f1b model=tiny-moe-l8 microbatches=4".
std::string conformance_label(const RunSpec& s);

// Every failed check of r, one bracket each ("" when r passes): for test and
// CLI messages.
std::string describe_failures(const ConformanceResult& r);

// Measured against declared for one rank: memory in the declared order, then
// communication for every group the log saw or the rank declared (see
// Declared in rank.h for what is exempt).
std::vector<ExactCheck> exact_checks(const Declared& d, const MemoryTracker& mem, const CommLog& log);

// The strategy's exactness declaration and replay, on s.world's backend.
bool declares_bitwise(const StrategyRun& s);
Replay replay_of(const StrategyRun& s);

// truth + k (x - truth), element by element: a trace k times as far from the
// truth as x (the fp64 floor of a rerun; check and check --reshard use it).
Trace scaled_distance(const Trace& x, const Trace& truth, double k);

// The single-device reference trained under `replay` (its split plan; one step
// delayed weights for PipeDream-2BW): every step's loss and norm, the step-1
// gradients and the final parameters, widened to double.
// On `device` when given (cfg.device = cuda; the plain plan only). f64_ops:
// for an fp64 cfg on the CPU, the host ops it trains on (null: the CPU's;
// kernels::cpu_ops_sliced: the same model in another order of summation).
Trace reference_trace(const TrainConfig& cfg, const Replay& replay, const TrainDevice* device = nullptr,
                      std::shared_ptr<const kernels::DeviceOps<double>> f64_ops = nullptr);

// Validates the spec (validate(RunSpec) and the strategy's own rules) and
// runs everything on `world`, whose size must be the mesh's.
ConformanceResult run_conformance(const StrategyRun& s, World& world);
// Convenience: a local world of the mesh's size built from s.world.
ConformanceResult run_conformance(const StrategyRun& s);

}  // namespace pb
