// What every rank type shares beneath its own step: the device prologue (the
// device's ops, or the CPU's; its memory behind the tracker; the world size
// the mesh needs; the BLAS threads) and the overrides that only hand out its
// members (memory, its peaks, the last step's times, the MoE routing totals).
// Invariant: the members here are constructed before, and destroyed after, a
// derived rank's buffers, so the device memory outlives everything allocated
// in it.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/comm.h"
#include "harness/memory.h"
#include "impl/spec/rank.h"
#include "kernels/common/device_ops.h"

namespace pb {

// A rank's device, the last two arguments of every rank type's constructor
// (rank.h make_typed_rank_on): its ops and memory, both null on the CPU.
template <class T>
using RankOps = std::shared_ptr<const kernels::DeviceOps<T>>;
using RankMemory = std::shared_ptr<DeviceMemory>;

template <class T>
class RankBase : public Rank {
 public:
  std::vector<double> full_params() override { return gather(false); }
  std::vector<double> full_grads() override { return gather(true); }
  const MemoryTracker& memory() const override { return mem_; }
  void reset_memory_peaks() override { mem_.reset_peaks(); }
  RankTimes times() const override { return times_; }
  MoeLoad moe_load() const override { return load_ ? *load_ : MoeLoad{}; }
  void reset_moe_load() override {
    if (reset_load_) reset_load_();
  }

 protected:
  // `who` names the rank in the device error ("dp: a device rank needs the
  // device's memory"); `mesh` names the world it needs ("mesh: dp2 needs a
  // world of 2 ranks, got 3"). ops, memory: the device (null: the CPU).
  RankBase(const std::string& who, Communicator& world, int world_needed, const std::string& mesh, int threads,
           RankOps<T> ops, RankMemory memory);
  // moe_load() reads, and reset_moe_load() clears, the totals a runner (or
  // the rank itself) keeps.
  template <class Runner>
  void track_moe_load(Runner& r) {
    load_ = &r.moe_load();
    reset_load_ = [&r] { r.reset_moe_load(); };
  }
  void track_moe_load(MoeLoad& l) {
    load_ = &l;
    reset_load_ = [&l] { l = {}; };
  }

  // Collective over the world (group "check"): the full params or the last
  // step's reduced grads, in flat order.
  virtual std::vector<double> gather(bool grads) = 0;

  RankOps<T> ops_;  // never null
  RankMemory device_memory_;  // outlives the tracker's buffers
  MemoryTracker mem_;
  RankTimes times_;

 private:
  const MoeLoad* load_ = nullptr;
  std::function<void()> reset_load_;
};

}  // namespace pb
