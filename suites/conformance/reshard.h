// Resharding checked against an uninterrupted run (docs/checkpoint.md): train
// `at` steps at mesh A, write a sharded checkpoint (harness/io/checkpoint.h),
// load it at mesh B, train the remaining steps, and judge the whole run by
// the numerics rule (compare.h) against the fp64 truth trained without
// interruption; where A and B both declare themselves bitwise, also bit
// equality with the replay that trains A's split plan for `at` steps and
// continues B's from the same state (the reference's own state copied, no
// file in between). The load's injected faults (impl/spec/checkpoint_state.h
// CkptFault) must fail it.
// Also the pieces `parabench reshard` uses: a checkpoint written by the ranks
// of any mesh, and the check that a checkpoint fits a run.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "impl/spec/checkpoint_state.h"
#include "impl/spec/rank.h"
#include "impl/spec/run_spec.h"
#include "suites/conformance/compare.h"

namespace pb {

struct ReshardRun {
  RunSpec from, to;  // the same training (check_same_training); to.train.steps = from.train.steps = the whole run
  int at = 1;        // steps trained at `from` before the checkpoint, 1 <= at < steps
  std::vector<CkptFault> faults;  // injected into the load at `to`
  ToleranceRule rule;
  // Called with A's checkpoint directory once it is written (e.g. to copy it).
  std::function<void(const std::string&)> keep;
  // Opens a rank's device where a side's train.device is cuda (rank.h).
  DeviceOpener open_device;
};

struct ReshardResult {
  std::string label;  // "dp2 shard=zero3 -> dp4 shard=zero1 at 2 of 4"
  Precision precision = Precision::fp32;
  bool bitwise_declared = false;
  std::vector<QuantityCheck> rule;  // against the truth
  std::vector<QuantityCheck> bits;  // against the switched replay
  // Not bitwise and below fp64: the resharded run again at fp64, held to the
  // rule against the engine's fp64 floor (engine.h ConformanceResult::fp64).
  std::vector<QuantityCheck> fp64;
  Trace trace;
  bool pass() const { return all_pass(rule) && all_pass(bits) && all_pass(fp64); }
};

// "MESH[,key=value...]" (check --reshard's two sides): the mesh text, then
// strategy options; InputError naming `field` and the part when bad. Faults
// of the checkpoint axis in `faults=` are moved to *ckpt_faults (null: refused).
RunSpec parse_reshard_side(const std::string& text, const std::string& field, std::vector<CkptFault>* ckpt_faults);

// InputError naming the first training setting that differs (model,
// precision, seed, steps, batch, seq, optimizer, data), with both values.
// Microbatches, threads and the device may differ.
void check_same_training(const TrainConfig& written, const TrainConfig& run, const std::string& what);

// Whether a spec's ranks write and read checkpoints (the data-parallel family,
// expert, tensor and context parallel, synchronous pipelines; on the CPU or a
// device): InputError naming the mesh and why not.
void require_checkpoints(const RunSpec& s, const std::string& what);

// Trains s for `steps` steps on a local world of its mesh and writes the
// checkpoint into `dir` (an existing, empty directory).
void train_and_save(const RunSpec& s, int steps, const std::string& dir);

// Loads `dir` (any mesh's checkpoint of the same training) on a local world
// of `to`'s mesh and writes it again into `out` (an existing, empty
// directory): `parabench reshard`. InputError when the checkpoint is bad or
// does not fit `to`.
void reshard_checkpoint(const std::string& dir, const RunSpec& to, const std::string& out);

// The run spec a checkpoint was written by (InputError if unreadable).
RunSpec checkpoint_spec(const std::string& dir);

ReshardResult run_reshard(const ReshardRun& r);

}  // namespace pb
