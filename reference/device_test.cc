// The device path of the reference trainer, run here on a stand-in device:
// ops that claim their memory is not the host's (every kernel is the CPU's)
// and a DeviceMemory that hands out host memory it tracks. Everything a GPU
// run does besides the kernels themselves — buffers from the device's memory,
// the initial parameters and master weights drawn on the host and moved,
// tokens staged and moved per microbatch, zeroing, the loss sum, the norm,
// AdamW and the read-back — runs, and must give the CPU trainer's bits.
// kernels_cuda_test holds the CUDA kernels to the CPU's on a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>

#include "harness/status.h"
#include "reference/trainer.h"

namespace pb {
namespace {

class CountingMemory final : public DeviceMemory {
 public:
  void* allocate(size_t bytes) override {
    void* p = std::calloc(1, bytes);
    if (!p) throw std::bad_alloc();
    live_[p] = bytes;
    ++allocations_;
    return p;
  }
  void deallocate(void* p) noexcept override { live_.erase(p); }
  size_t live() const { return live_.size(); }
  int allocations() const { return allocations_; }
  ~CountingMemory() override {
    for (auto& [p, n] : live_) std::free(p);
  }

 private:
  std::map<void*, size_t> live_;
  int allocations_ = 0;
};

template <class T>
class StandInOps final : public kernels::DeviceOps<T> {
 public:
  using A = typename kernels::DeviceOps<T>::A;
  using M = typename kernels::DeviceOps<T>::M;
  mutable int to_device_calls = 0, to_host_calls = 0, syncs = 0;
  std::string name() const override { return "stand-in device"; }
  bool is_host() const override { return false; }
  void copy(void* d, const void* s, size_t b) const override { cpu().copy(d, s, b); }
  void zero(void* d, size_t b) const override { cpu().zero(d, b); }
  void to_device(void* d, const void* s, size_t b) const override {
    ++to_device_calls;
    cpu().to_device(d, s, b);
  }
  void to_host(void* d, const void* s, size_t b) const override {
    ++to_host_calls;
    cpu().to_host(d, s, b);
  }
  void synchronize() const override { ++syncs; }
  void encoder_forward(T* o, const int32_t* i, const T* a, const T* b, int B, int Tn, int C) const override {
    cpu().encoder_forward(o, i, a, b, B, Tn, C);
  }
  void encoder_backward(T* a, T* b, const T* d, const int32_t* i, int B, int Tn, int C) const override {
    cpu().encoder_backward(a, b, d, i, B, Tn, C);
  }
  void layernorm_forward(T* o, A* m, A* r, const T* i, const T* w, const T* b, int N, int C) const override {
    cpu().layernorm_forward(o, m, r, i, w, b, N, C);
  }
  void layernorm_backward(T* di, T* dw, T* db, const T* d, const T* i, const T* w, const A* m, const A* r, int N,
                          int C) const override {
    cpu().layernorm_backward(di, dw, db, d, i, w, m, r, N, C);
  }
  void matmul_forward(T* o, const T* i, const T* w, const T* b, int N, int C, int OC, float* ws) const override {
    cpu().matmul_forward(o, i, w, b, N, C, OC, ws);
  }
  void matmul_backward(T* di, T* dw, T* db, const T* d, const T* i, const T* w, int N, int C, int OC,
                       float* ws) const override {
    cpu().matmul_backward(di, dw, db, d, i, w, N, C, OC, ws);
  }
  void attention_forward(T* o, T* att, const T* qkv, int B, int Tn, int C, int NH, A* ws) const override {
    cpu().attention_forward(o, att, qkv, B, Tn, C, NH, ws);
  }
  void attention_backward(T* dq, T* da, const T* d, const T* qkv, const T* att, int B, int Tn, int C, int NH,
                          A* ws) const override {
    cpu().attention_backward(dq, da, d, qkv, att, B, Tn, C, NH, ws);
  }
  void gelu_forward(T* o, const T* i, size_t N) const override { cpu().gelu_forward(o, i, N); }
  void gelu_backward(T* di, const T* i, const T* d, size_t N) const override { cpu().gelu_backward(di, i, d, N); }
  void residual_forward(T* o, const T* a, const T* b, size_t N) const override { cpu().residual_forward(o, a, b, N); }
  void accumulate(T* d, const T* s, size_t N) const override { cpu().accumulate(d, s, N); }
  void crossentropy_forward(A* l, T* p, const T* x, const int32_t* t, int N, int V) const override {
    cpu().crossentropy_forward(l, p, x, t, N, V);
  }
  void crossentropy_backward(T* d, const T* p, const int32_t* t, double s, int N, int V) const override {
    cpu().crossentropy_backward(d, p, t, s, N, V);
  }
  double sum(const A* x, size_t n) const override { return cpu().sum(x, n); }
  void adamw_step(M* master, T* p, const T* g, M* m, M* v, size_t n, const kernels::AdamWHyper& h,
                  bool decay) const override {
    cpu().adamw_step(master, p, g, m, v, n, h, decay);
  }
  double sum_squares(const T* g, size_t n) const override { return cpu().sum_squares(g, n); }

 private:
  static const kernels::DeviceOps<T>& cpu() { return kernels::cpu_ops<T>(); }
};

TrainConfig config(Precision p) {
  TrainConfig c;
  c.model = named_model("tiny");
  c.precision = p;
  c.steps = 4;
  c.batch = 8;
  c.seq = 16;
  c.microbatches = 2;
  return c;
}

template <class T>
void expect_device_path_is_the_cpu_path(Precision p) {
  const TrainConfig cfg = config(p);
  SplitPlan plan;
  plan.micro = cfg.microbatches;
  ReferenceTrainer<T> cpu(cfg, plan);
  auto ops = std::make_shared<StandInOps<T>>();
  auto mem = std::make_shared<CountingMemory>();
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
    EXPECT_EQ(ops->to_device_calls, inits + 2 * cfg.microbatches * cfg.steps);
    EXPECT_EQ(ops->to_host_calls, 2);
    EXPECT_EQ(ops->syncs, cfg.steps);
    for (int t = 0; t < kNumMemTags; ++t)
      EXPECT_EQ(cpu.memory().peak(MemTag(t)), dev.memory().peak(MemTag(t))) << mem_tag_name(MemTag(t));
  }
  EXPECT_EQ(mem->live(), 0u) << "every device buffer is freed";
}

TEST(DeviceTrainer, StandInDeviceGivesTheCpuBitsFp32) { expect_device_path_is_the_cpu_path<float>(Precision::fp32); }

TEST(DeviceTrainer, StandInDeviceGivesTheCpuBitsBf16) {
  expect_device_path_is_the_cpu_path<bf16>(Precision::bf16_mixed);
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
  EXPECT_THROW(cfg.validate(), InputError);
  TrainDevice dev{"stand-in", ops, nullptr, mem};
  cfg.model = named_model("tiny");
  EXPECT_NE(make_reference_trainer(cfg, SplitPlan{}, &dev), nullptr);
  cfg.precision = Precision::bf16_mixed;  // no bf16 ops on this device
  EXPECT_THROW(make_reference_trainer(cfg, SplitPlan{}, &dev), InputError);
}

}  // namespace
}  // namespace pb
