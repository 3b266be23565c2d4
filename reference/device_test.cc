// The device path of the reference trainer, run here on a stand-in device:
// ops that claim their memory is not the host's (every kernel is the CPU's)
// and a DeviceMemory that hands out host memory it tracks. Everything a GPU
// run does besides the kernels themselves — buffers from the device's memory,
// the initial parameters and master weights drawn on the host and moved,
// tokens staged and moved per microbatch, zeroing, the loss sum, the norm,
// AdamW and the read-back — runs, and must give the CPU trainer's bits; the
// stand-in's memory is inaccessible outside its ops, so host code that
// touches a device buffer directly faults here as it would on a GPU.
// kernels_cuda_test holds the CUDA kernels to the CPU's on a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <map>
#include <memory>
#include <string>

#include "harness/status.h"
#include "reference/device_testing.h"
#include "reference/moe.h"
#include "reference/trainer.h"

namespace pb {
namespace {

using testing::CountingMemory;
using testing::StandInOps;

TrainConfig config(Precision p, const std::string& model = "tiny") {
  TrainConfig c;
  c.model = named_model(model);
  c.precision = p;
  c.steps = 4;
  c.batch = 8;
  c.seq = 16;
  c.microbatches = 2;
  return c;
}

// model: a mixture-of-experts model adds, per MoE layer and microbatch, the
// routing's read-backs (the logits, the combine weights' gradient) and what
// it sends up (choices, slots, weights; the router's gradient).
template <class T>
void expect_device_path_is_the_cpu_path(Precision p, const std::string& model = "tiny") {
  const TrainConfig cfg = config(p, model);
  const int64_t moe_calls = int64_t(cfg.model.moe_layers()) * cfg.microbatches * cfg.steps;
  SplitPlan plan;
  plan.micro = cfg.microbatches;
  ReferenceTrainer<T> cpu(cfg, plan);
  // Guarded: the device's buffers fault when touched outside an op.
  auto mem = std::make_shared<CountingMemory>(/*guarded=*/true);
  auto ops = std::make_shared<StandInOps<T>>(mem.get());
  {
    ReferenceTrainer<T> dev(cfg, plan, ops, mem);
    EXPECT_GT(mem->allocations(), 0) << "the device's buffers come from its memory";
    for (int s = 0; s < cfg.steps; ++s) {
      const StepStats a = cpu.step(), b = dev.step();
      EXPECT_EQ(a.loss, b.loss) << precision_name(p) << " step " << s;
      EXPECT_EQ(a.grad_norm, b.grad_norm) << precision_name(p) << " step " << s;
    }
    EXPECT_EQ(cpu.params_f64(), dev.params_f64());
    EXPECT_EQ(cpu.grads_f64(), dev.grads_f64());
    // Init (params, and bf16's master) moved once, tokens and targets per microbatch.
    const int inits = p == Precision::bf16_mixed ? 2 : 1;
    EXPECT_EQ(ops->to_device_calls, inits + 2 * cfg.microbatches * cfg.steps + 4 * moe_calls);
    EXPECT_EQ(ops->to_host_calls, 2 + 2 * moe_calls);
    EXPECT_EQ(ops->syncs, cfg.steps);
    // The same memory by tag, but the workspace: a device's kernels keep
    // their own (device_ops.h), so the CPU kernels' GEMM staging and
    // attention scores are not held there.
    // An MoE layer's routing state is host memory on a device (moe.h), its
    // choices, slots and weights copied to the device.
    const ModelConfig& m = cfg.model;
    const int Bm = cfg.batch / cfg.microbatches;
    for (int t = 0; t < kNumMemTags; ++t) {
      if (MemTag(t) == MemTag::workspace) continue;
      if (MemTag(t) == MemTag::activations && m.moe.experts > 0) continue;
      EXPECT_EQ(cpu.memory().peak(MemTag(t)), dev.memory().peak(MemTag(t))) << mem_tag_name(MemTag(t));
    }
    if (m.moe.experts > 0) {
      const int64_t N = int64_t(Bm) * cfg.seq, e = sizeof(T), a = sizeof(acc_t<T>);
      const int64_t cpu_moe = moe_activation_bytes(m, N, 0, int(e), int(a));
      const int64_t dev_moe = moe_activation_bytes(m, N, 0, int(e), int(a), 1, 1, /*on_device=*/true);
      EXPECT_LT(dev_moe, cpu_moe);
      EXPECT_EQ(int64_t(dev.memory().peak(MemTag::activations)),
                int64_t(cpu.memory().peak(MemTag::activations)) - m.moe_layers() * (cpu_moe - dev_moe))
          << "the device holds an MoE layer's rows and its routing's copies, not the routing state";
      EXPECT_GT(dev.memory().peak(MemTag::activations, Place::host), 0u);
    }
    EXPECT_EQ(int64_t(cpu.memory().peak(MemTag::workspace)),
              MicrobatchRunner<T>::workspace_bytes(m, Bm, cfg.seq));
    EXPECT_EQ(int64_t(dev.memory().peak(MemTag::workspace)),
              MicrobatchRunner<T>::workspace_bytes(m, Bm, cfg.seq, 0, 1, /*kernel_ws=*/false));
    EXPECT_LT(dev.memory().peak(MemTag::workspace), cpu.memory().peak(MemTag::workspace));
  }
  EXPECT_EQ(mem->live(), 0u) << "every device buffer is freed";
}

TEST(DeviceTrainer, StandInDeviceGivesTheCpuBitsFp32) { expect_device_path_is_the_cpu_path<float>(Precision::fp32); }

TEST(DeviceTrainer, StandInDeviceGivesTheCpuBitsBf16) {
  expect_device_path_is_the_cpu_path<bf16>(Precision::bf16_mixed);
}

// The MoE MLP on a device: the router GEMM, the rows to and from the
// experts, their FFNs and the combine on the device, the routing on the host
// between them; guarded, so a routing step that read a device buffer would fault.
TEST(DeviceTrainer, StandInDeviceGivesTheCpuBitsForAMixtureOfExperts) {
  expect_device_path_is_the_cpu_path<float>(Precision::fp32, "tiny-moe");
  expect_device_path_is_the_cpu_path<bf16>(Precision::bf16_mixed, "tiny-moe");
}

// Only the plain plan runs off the host; the config's own rules name the key.
TEST(DeviceTrainer, WhatDoesNotRunOnADeviceIsRefused) {
  TrainConfig cfg = config(Precision::fp32);
  SplitPlan split;
  split.groups = 2;
  auto ops = std::make_shared<StandInOps<float>>();
  auto mem = std::make_shared<CountingMemory>();
  EXPECT_THROW(ReferenceTrainer<float>(cfg, split, ops, mem), InputError);
  EXPECT_THROW(ReferenceTrainer<float>(cfg, SplitPlan{}, ops, nullptr), InputError);
  cfg.device = Device::cuda;
  EXPECT_THROW(make_reference_trainer(cfg, SplitPlan{}, nullptr), InputError);  // no device opened
  cfg.precision = Precision::fp64;
  EXPECT_THROW(cfg.validate(), InputError);
  cfg.precision = Precision::fp32;
  cfg.model = named_model("tiny-moe");
  EXPECT_NO_THROW(cfg.validate()) << "an MoE model runs on a device";
  TrainDevice dev{"stand-in", ops, nullptr, mem};
  cfg.model = named_model("tiny");
  EXPECT_NE(make_reference_trainer(cfg, SplitPlan{}, &dev), nullptr);
  cfg.precision = Precision::bf16_mixed;  // no bf16 ops on this device
  EXPECT_THROW(make_reference_trainer(cfg, SplitPlan{}, &dev), InputError);
}

}  // namespace
}  // namespace pb

namespace pb {
namespace {

// The CPU's timeline (and a stand-in's, which inherits it): the steady clock
// at each mark; marks index from 0 again after clear().
TEST(DeviceTimeline, HostMarksReadTheSteadyClock) {
  const std::unique_ptr<kernels::DeviceTimeline> t = kernels::cpu_ops<float>().timeline();
  const int a = t->mark();
  const auto before = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - before < std::chrono::milliseconds(2)) {
  }
  const int b = t->mark(), c = t->mark();
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  EXPECT_GE(t->seconds(a, b), 0.002);
  EXPECT_LT(t->seconds(a, b), 10.0);
  EXPECT_DOUBLE_EQ(t->seconds(a, c), t->seconds(a, b) + t->seconds(b, c));
  EXPECT_THROW(t->seconds(a, 3), std::out_of_range);
  t->clear();
  EXPECT_EQ(t->mark(), 0);
  EXPECT_EQ(testing::StandInOps<bf16>().timeline()->mark(), 0);
}

}  // namespace
}  // namespace pb
