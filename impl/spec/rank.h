// The one rank interface every strategy implements, and what a strategy
// declares about itself, so one conformance engine (suites/conformance), the
// sweep and the planner treat every axis and every composition alike:
//  - Rank: one rank of a run — train steps, full parameters and gradients
//    gathered for checking (collective), memory by tag, the costs it declares
//    (compared exactly with what it measured), its compute timing;
//  - Strategy: the static side, registered once per implementation
//    (impl/registry.cc): which specs it runs, its validation, its exactness
//    declaration and the single-device replay that reproduces its
//    arithmetic order.
// Invariant: declared() is a pure function of the spec and the rank's place in
// the mesh (never of anything measured), so a wrong figure is caught.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/comm/comm.h"
#include "harness/memory.h"
#include "harness/comm/runner.h"
#include "impl/spec/checkpoint_state.h"
#include "impl/spec/fault.h"
#include "impl/spec/groups.h"
#include "impl/spec/run_spec.h"
#include "reference/trainer.h"

namespace pb {

// One declared memory figure: the peak of `tag` on `place` over the run.
struct DeclaredMemory {
  std::string item;  // "mem.params", "mem.optimizer.host", ...
  MemTag tag = MemTag::params;
  Place place = Place::device;
  int64_t bytes = 0;
};

// Logical bytes (comm_log.h) of one op on one group over the whole run.
struct DeclaredComm {
  std::string group;
  CommOp op = CommOp::all_reduce;
  int64_t bytes = 0;
};

// Everything a rank declares. Communication is complete: every (group, op)
// the rank uses is listed, and any group or op not listed must move 0 bytes —
// except the "check" group (gathers for the checks) and recv/sendrecv/barrier
// (a recv mirrors a peer's send, which that peer declares).
struct Declared {
  std::vector<DeclaredMemory> memory;
  std::vector<DeclaredComm> comm;
  void add_comm(const std::string& group, CommOp op, int64_t bytes);  // accumulates
  void add_comm(Group group, CommOp op, int64_t bytes) { add_comm(std::string(group_name(group)), op, bytes); }
};

// Compute timing of the last step: wall time from the step's start and time
// inside compute, plus an optional packed per-action timeline that the
// strategy's own report code reads (pipeline: op, microbatch, chunk, start, end).
struct RankTimes {
  double wall_s = 0, busy_s = 0;
  std::vector<double> timeline;
};

class Rank {
 public:
  virtual ~Rank() = default;
  // Trains spec.train.steps optimizer steps; `grads1` (if set) receives the
  // full gradients of step 1 (a collective, like full_grads()). The default
  // runs step() in a loop; asynchronous schedules override it.
  virtual std::vector<StepStats> train(int steps, std::vector<double>* grads1);
  virtual StepStats step() = 0;
  // Collective over the world: full vectors in flat order, widened to double.
  // Traffic goes to the group "check". Grads: the last step's reduced ones.
  virtual std::vector<double> full_params() = 0;
  virtual std::vector<double> full_grads() = 0;
  virtual const MemoryTracker& memory() const = 0;
  // Peaks restart from the current bytes (the sweep calls it after warm-up).
  virtual void reset_memory_peaks() = 0;
  // What this rank declares for a run of `steps` steps.
  virtual Declared declared(int steps) const = 0;
  virtual RankTimes times() const { return {}; }
  // Mixture-of-experts routing totals since construction or the last reset
  // (zeros for a dense model or a strategy that does not run one).
  virtual MoeLoad moe_load() const { return {}; }
  virtual void reset_moe_load() {}
  // Checkpoints (checkpoint_state.h, docs/checkpoint.md): this rank's share
  // of the run's state and its counters into `out`; after construction, the
  // state and counters of a checkpoint written at any mesh from `in`. Not
  // collective. Default: InputError, the strategy does not checkpoint.
  virtual void save_state(RankCheckpointOut& out);
  virtual void load_state(const RankCheckpointIn& in);
};

// One rank of the storage type of `p` (double, float or bf16):
// R<T>(args...), for a Strategy's make_rank.
template <template <class> class R, class... Args>
std::unique_ptr<Rank> make_typed_rank(Precision p, Args&&... args) {
  std::unique_ptr<Rank> r;
  dispatch_dtype(storage_dtype(p), [&](auto t) { r = std::make_unique<R<decltype(t)>>(std::forward<Args>(args)...); });
  return r;
}

// The same on `device` (null: the CPU): R<T>(args..., the device's ops for T,
// its memory); InputError naming train.device when it has no ops for T.
template <template <class> class R, class... Args>
std::unique_ptr<Rank> make_typed_rank_on(const TrainDevice* device, Precision p, Args&&... args) {
  if (!device) return make_typed_rank<R>(p, std::forward<Args>(args)...);
  std::unique_ptr<Rank> r;
  dispatch_dtype(storage_dtype(p), [&](auto t) {
    using T = decltype(t);
    r = std::make_unique<R<T>>(std::forward<Args>(args)..., device_ops<T>(*device), device->memory);
  });
  return r;
}

// Opens the device one rank runs on: called on the rank's thread (the CLI
// opens the GPU the nccl backend chose for the process; tests give stand-ins).
using DeviceOpener = std::function<std::shared_ptr<TrainDevice>()>;

// The device a run of `device` trains on: null on the CPU; on cuda, what
// `open` opens (InputError when there is no opener or it opens nothing).
std::shared_ptr<TrainDevice> open_device(Device device, const DeviceOpener& open);

// The device of one rank for as long as the rank runs (construct it before
// the rank, so it outlives the rank's buffers): opened when `device` is cuda
// (InputError when `open` is empty or opens nothing), none on the CPU; the
// world's communicators wait for its stream meanwhile
// (Communicator::order_after), and no longer.
class RankDevice {
 public:
  RankDevice(Communicator& world, Device device, const DeviceOpener& open);
  ~RankDevice();
  RankDevice(const RankDevice&) = delete;
  RankDevice& operator=(const RankDevice&) = delete;
  const TrainDevice* get() const { return device_.get(); }

 private:
  std::shared_ptr<TrainDevice> device_;
  Communicator& world_;
  void* before_;
};

// The single-device reference's replay of a strategy: its split plan and
// whether weights are one step delayed (PipeDream-2BW).
struct Replay {
  SplitPlan plan;
  bool delayed_weights = false;
  bool operator==(const Replay&) const = default;
};

// The static side of one strategy implementation (one registration each).
struct Strategy {
  std::string name;  // "data_parallel", "pipeline"
  // Whether this implementation runs the spec (by its mesh and options).
  bool (*runs)(const RunSpec&) = nullptr;
  // Axis rules beyond validate(RunSpec) (InputError naming the field): called
  // before any rank starts, on every process alike.
  void (*validate)(const RunSpec&) = nullptr;
  // Same arithmetic in the same order as its replay (bit equality asserted).
  bool (*bitwise)(const RunSpec&, BackendKind) = nullptr;
  Replay (*replay)(const RunSpec&) = nullptr;
  // One rank; `world` is the run's world communicator. `device`: the rank's
  // device when train.device = cuda (null: the CPU); only implementations
  // validate(RunSpec) lets run on a device are given one.
  std::unique_ptr<Rank> (*make_rank)(const RunSpec&, Communicator& world, const TrainDevice* device) = nullptr;
  // A spec whose results must be bit-identical to this one's on the same
  // mesh (recomputation against none: the same arithmetic), or nothing. The
  // engine runs it with this same implementation.
  std::optional<RunSpec> (*bitwise_twin)(const RunSpec&) = nullptr;
  // The injected faults it ships (fault.h): its own axes' and those of the
  // axes it composes; strategy_for (impl/registry.h) refuses a spec's fault
  // that is not among these.
  std::vector<FaultDecl> faults;
};

}  // namespace pb
