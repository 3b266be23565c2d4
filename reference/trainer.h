// The single-device training loop: the ground truth every strategy is checked
// against. It can also replay a strategy's arithmetic order ("split plan") so
// a strategy that does the same arithmetic can be asserted bit-equal:
//  - the global batch is cut into `groups` x `micro` microbatches; each group
//    accumulates its microbatches in order into its own gradient buffer (a DDP
//    rank, a pipeline replica), and groups are summed in group order in the
//    accumulation type, rounded once (the local backend's rank-ordered sum);
//  - the LM head's wte gradient may accumulate separately and be added to the
//    embedding's at the end of each group (a pipeline's first and last stage);
//  - optionally the group sum has two levels (HSDP: reduce-scatter in the
//    shard group, then all-reduce over replicas; hZeRO: reduce-scatter within
//    the node, then across nodes): groups are summed in consecutive blocks of
//    `block` in the accumulation type and rounded once (the inner collective's
//    output), then the blocks' sums are summed in block order and rounded
//    again (the outer collective);
//  - optionally the groups are reduced per microbatch (ZeRO-2/3, HSDP, hZeRO
//    reduce-scatter every microbatch's gradient): microbatch k of every group
//    is summed as above and rounded, and the step's gradient accumulates
//    those sums in microbatch order with the kernels' += (the first copied);
//    with two levels the outer sum is per microbatch too (hZeRO's two-level
//    reduce-scatter) or once per step over the accumulated inner sums
//    (HSDP's replica all-reduce of the accumulated shard);
//  - the squared gradient norm is summed per rank over that rank's ranges,
//    then over ranks in order (a ZeRO shard's partial sums, all-reduced).
#pragma once
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "harness/dtype.h"
#include "harness/memory.h"
#include "harness/status.h"
#include "reference/data.h"
#include "reference/layout.h"
#include "reference/optimizer.h"
#include "reference/runner.h"
#include "reference/train_config.h"

namespace pb {

struct SplitPlan {
  int groups = 1;
  int micro = 1;  // microbatches per group
  bool separate_head_grad = false;
  // Per rank, the flat ranges it sums; empty: the whole vector at once.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> norm_parts;
  // Groups per inner sum of a two-level reduction; 0, 1 or `groups`: one level
  // (a block of one group or one block of all groups rounds nothing extra).
  int block = 0;
  bool two_level() const { return block > 1 && block < groups; }
  bool reduce_per_micro = false;  // see above
  bool outer_per_micro = false;   // two levels: the outer sum per microbatch too
  // Mixture of experts with global capacity over the groups (data ranks):
  // microbatch k of every group runs as one microbatch (groups' samples in
  // group order), so capacity and load balancing span them as they do across
  // the ranks; gradients accumulate over the joint microbatches in order.
  bool moe_joint = false;
  bool operator==(const SplitPlan&) const = default;
};

struct StepStats {
  int step = 0;  // 1-based
  double loss = 0, grad_norm = 0, lr = 0, seconds = 0;
  // A mixture of experts (the reference trainer; empty otherwise): the
  // step's routing, runner.h MoeStepRecord, with each MoE layer's
  // load-balancing loss as it enters the step's loss (its per-run value
  // weighted by the run's share of the step's tokens).
  std::vector<double> moe_tokens, moe_aux;
  std::vector<std::vector<double>> moe_margins;
};

// Summed squares of g over the ranges (each in index order), starting from 0:
// the partial sum one rank contributes to the global norm.
template <class T>
double sum_squares_ranges(const T* g, const std::vector<std::pair<int64_t, int64_t>>& ranges);

// The device a reference trainer runs on, when not the CPU: one GPU's ops for
// each storage type it runs (fp32, bf16-mixed) and the memory its buffers come
// from (kernels/cuda open_device). Null pointers: not available.
struct TrainDevice {
  std::string name;  // e.g. "cuda:0 NVIDIA H100 80GB HBM3"
  std::shared_ptr<const kernels::DeviceOps<float>> f32;
  std::shared_ptr<const kernels::DeviceOps<bf16>> bf16_ops;
  std::shared_ptr<DeviceMemory> memory;
  // The native stream the ops run on (a cudaStream_t; null on a stand-in):
  // a rank's communicators wait for it (Communicator::order_after).
  void* stream = nullptr;
};

// The device's ops for storage type T: InputError naming the device when it
// has none (fp64 never runs on a device: it is the CPU's truth).
template <class T>
std::shared_ptr<const kernels::DeviceOps<T>> device_ops(const TrainDevice& d) {
  std::shared_ptr<const kernels::DeviceOps<T>> ops;
  if constexpr (std::is_same_v<T, float>) ops = d.f32;
  else if constexpr (std::is_same_v<T, bf16>) ops = d.bf16_ops;
  require(ops != nullptr, "train.device: " + d.name + " has no " + std::string(dtype_name(dtype_of<T>())) +
                              " ops (a device runs fp32 and bf16-mixed)");
  return ops;
}

class TrainerBase {
 public:
  virtual ~TrainerBase() = default;
  virtual StepStats step() = 0;
  virtual const ParamLayout& layout() const = 0;
  // Full parameters / gradients of the last step as doubles (for comparisons).
  virtual std::vector<double> params_f64() const = 0;
  virtual std::vector<double> grads_f64() const = 0;
  virtual const MemoryTracker& memory() const = 0;
};

template <class T>
class ReferenceTrainer : public TrainerBase {
 public:
  // ops, memory: the device (default: the CPU). Off the host only the plain
  // plan runs (one group of cfg.microbatches microbatches, nothing split),
  // or a mixture of experts' joint microbatches (moe_joint): the replays of
  // strategies' orders are host code.
  ReferenceTrainer(const TrainConfig& cfg, SplitPlan plan = {}, std::shared_ptr<const kernels::DeviceOps<T>> ops = {},
                   std::shared_ptr<DeviceMemory> memory = {});
  StepStats step() override;
  const ParamLayout& layout() const override { return layout_; }
  std::vector<double> params_f64() const override;
  std::vector<double> grads_f64() const override;
  const MemoryTracker& memory() const override { return tracker_; }
  const T* params() const { return params_.data(); }
  const T* grads() const { return grads_.data(); }
  // A resharded run's replay (suites/conformance/reshard.h) continues one
  // trainer's state in another of another split plan: the parameters, the
  // optimizer's state and the steps done (the next step's data and bias
  // correction follow from it).
  T* mutable_params() { return params_.data(); }
  AdamW<T>& optimizer() { return *opt_; }
  int steps_done() const { return step_; }
  void set_steps_done(int s) { step_ = s; }

 private:
  TrainConfig cfg_;
  SplitPlan plan_;
  std::shared_ptr<const kernels::DeviceOps<T>> ops_;  // never null
  std::shared_ptr<DeviceMemory> memory_;              // null: host memory
  MemoryTracker tracker_;
  ParamLayout layout_;
  MarkovSource data_;
  Buffer<T> params_, grads_, head_grads_, group_grads_;
  Buffer<acc_t<T>> group_acc_, outer_acc_;  // the (inner) group sum; the outer one
  std::unique_ptr<AdamW<T>> opt_;
  std::unique_ptr<MicrobatchRunner<T>> runner_;
  std::unique_ptr<kernels::DeviceTimeline> clock_;  // the step's time on the device (ops_->timeline())
  int step_ = 0;

  void add_group(int g, const T* gb);  // group g's gradient into the rank-ordered sum
  std::vector<double> to_f64(const Buffer<T>& b) const;
  double step_reduced_per_micro();     // the gradient of plan_.reduce_per_micro; returns the loss sum
};

// f(T{}, ops, memory) at the storage type T of cfg.precision on cfg.device:
// the CPU (null ops and memory), or `device` for cuda (InputError when it is
// null; cfg.validate() refuses fp64 and MoE there, naming train.device). The
// single-device trainers' dispatch onto a device.
template <class F>
decltype(auto) on_train_device(const TrainConfig& cfg, const TrainDevice* device, F&& f) {
  if (cfg.device == Device::cpu)
    return dispatch_dtype(storage_dtype(cfg.precision), [&](auto t) {
      return f(t, std::shared_ptr<const kernels::DeviceOps<decltype(t)>>{}, std::shared_ptr<DeviceMemory>{});
    });
  require(device != nullptr, "train.device: cuda: no CUDA device was opened (this build or machine has none)");
  cfg.validate();
  if (cfg.precision == Precision::fp32) return f(float{}, device_ops<float>(*device), device->memory);
  return f(bf16{}, device_ops<bf16>(*device), device->memory);
}

// On cfg.device: the CPU, or `device` for cuda (InputError when it is null,
// or has no ops for the precision).
std::unique_ptr<TrainerBase> make_reference_trainer(const TrainConfig& cfg, SplitPlan plan = {},
                                                    const TrainDevice* device = nullptr);

}  // namespace pb
