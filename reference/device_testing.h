// Test-only: a stand-in device for the device seam (kernels/common/
// device_ops.h) on a machine without one. StandInOps<T> claims its memory is
// not the host's (so every device path runs: values moved in and out, tokens
// staged, losses read back) while every op is the CPU kernel; CountingMemory
// hands out host memory and tracks what is live. Runs on the local backend,
// which reaches host memory, so strategies can run their device path too.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "harness/memory.h"
#include "kernels/common/device_ops.h"
#include "kernels/cpu/ops.h"
#include "reference/trainer.h"

namespace pb::testing {

// Host memory handed out as a device's. Guarded: each buffer is its own
// mapping, inaccessible (PROT_NONE) except while a StandInOps op that was
// given this memory runs, so host code that reads or writes device memory
// outside the seam faults (one thread only: the guard is process-wide).
class CountingMemory final : public DeviceMemory {
 public:
  explicit CountingMemory(bool guarded = false) : guarded_(guarded), locked_(guarded) {}
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    if (guarded_) {
      p = mmap(nullptr, rounded(bytes), locked_ ? PROT_NONE : PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
               -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
    } else {
      p = std::calloc(1, bytes);
      if (!p) throw std::bad_alloc();
    }
    live_[p] = bytes;
    ++allocations_;
    return p;
  }
  void deallocate(void* p) noexcept override {
    auto it = live_.find(p);
    if (it == live_.end()) return;
    if (guarded_) munmap(p, rounded(it->second));
    else std::free(p);
    live_.erase(it);
  }
  size_t live() const { return live_.size(); }
  int allocations() const { return allocations_; }
  void lock() { protect(PROT_NONE), locked_ = true; }
  void unlock() { protect(PROT_READ | PROT_WRITE), locked_ = false; }
  ~CountingMemory() override {
    while (!live_.empty()) deallocate(live_.begin()->first);
  }

 private:
  static size_t rounded(size_t bytes) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
  }
  void protect(int prot) {
    if (!guarded_) return;
    for (auto& [p, n] : live_)
      if (mprotect(p, rounded(n), prot) != 0) std::abort();
  }
  bool guarded_ = false, locked_ = false;
  std::map<void*, size_t> live_;
  int allocations_ = 0;
};

template <class T>
class StandInOps : public kernels::DeviceOps<T> {
 public:
  using A = typename kernels::DeviceOps<T>::A;
  using M = typename kernels::DeviceOps<T>::M;
  mutable int to_device_calls = 0, to_host_calls = 0, syncs = 0;
  // guard: memory to open only while an op runs (CountingMemory(true)); null: none.
  explicit StandInOps(CountingMemory* guard = nullptr) : guard_(guard) {}
  std::string name() const override { return "stand-in device"; }
  bool is_host() const override { return false; }
  void copy(void* d, const void* s, size_t b) const override { cpu()->copy(d, s, b); }
  void zero(void* d, size_t b) const override { cpu()->zero(d, b); }
  void to_device(void* d, const void* s, size_t b) const override {
    ++to_device_calls;
    cpu()->to_device(d, s, b);
  }
  void to_host(void* d, const void* s, size_t b) const override {
    ++to_host_calls;
    cpu()->to_host(d, s, b);
  }
  void synchronize() const override { ++syncs; }
  void encoder_forward(T* o, const int32_t* i, const T* a, const T* b, int B, int Tn, int C) const override {
    cpu()->encoder_forward(o, i, a, b, B, Tn, C);
  }
  void encoder_backward(T* a, T* b, const T* d, const int32_t* i, int B, int Tn, int C) const override {
    cpu()->encoder_backward(a, b, d, i, B, Tn, C);
  }
  void layernorm_forward(T* o, A* m, A* r, const T* i, const T* w, const T* b, int N, int C) const override {
    cpu()->layernorm_forward(o, m, r, i, w, b, N, C);
  }
  void layernorm_backward(T* di, T* dw, T* db, const T* d, const T* i, const T* w, const A* m, const A* r, int N,
                          int C) const override {
    cpu()->layernorm_backward(di, dw, db, d, i, w, m, r, N, C);
  }
  // A device's kernels keep their own workspaces (callers off the host pass
  // none, device_ops.h): the stand-in's are host vectors of its own.
  void matmul_forward(T* o, const T* i, const T* w, const T* b, int N, int C, int OC, float* ws) const override {
    std::vector<float> own(ws ? 0 : kernels::matmul_workspace_floats<T>(N, C, OC));
    cpu()->matmul_forward(o, i, w, b, N, C, OC, ws ? ws : own.data());
  }
  void matmul_backward(T* di, T* dw, T* db, const T* d, const T* i, const T* w, int N, int C, int OC,
                       float* ws) const override {
    std::vector<float> own(ws ? 0 : kernels::matmul_workspace_floats<T>(N, C, OC));
    cpu()->matmul_backward(di, dw, db, d, i, w, N, C, OC, ws ? ws : own.data());
  }
  void attention_forward(T* o, T* att, const T* qkv, int B, int Tn, int C, int NH, A* ws) const override {
    std::vector<A> own(ws ? 0 : kernels::attention_workspace_elems<T>(Tn, C, NH));
    cpu()->attention_forward(o, att, qkv, B, Tn, C, NH, ws ? ws : own.data());
  }
  void attention_backward(T* dq, T* da, const T* d, const T* qkv, const T* att, int B, int Tn, int C, int NH,
                          A* ws) const override {
    std::vector<A> own(ws ? 0 : kernels::attention_workspace_elems<T>(Tn, C, NH));
    cpu()->attention_backward(dq, da, d, qkv, att, B, Tn, C, NH, ws ? ws : own.data());
  }
  void attention_block_forward(A* o, A* m, A* l, const T* q, const T* k, const T* v, int Tq, int Tk, int hs, int qs,
                               int kvs, int q0, int k0, bool causal) const override {
    cpu()->attention_block_forward(o, m, l, q, k, v, Tq, Tk, hs, qs, kvs, q0, k0, causal);
  }
  void attention_block_finalize(T* out, A* lse, const A* o, const A* m, const A* l, int Tq, int hs,
                                int os) const override {
    cpu()->attention_block_finalize(out, lse, o, m, l, Tq, hs, os);
  }
  void attention_block_merge(A* o, A* m, A* l, const A* o2, const A* m2, const A* l2, int Tq, int hs) const override {
    cpu()->attention_block_merge(o, m, l, o2, m2, l2, Tq, hs);
  }
  void attention_block_backward(A* dq, A* dk, A* dv, const T* q, const T* k, const T* v, const T* d, const A* lse,
                                const A* D, int Tq, int Tk, int hs, int qs, int kvs, int ds, int q0, int k0,
                                bool causal) const override {
    cpu()->attention_block_backward(dq, dk, dv, q, k, v, d, lse, D, Tq, Tk, hs, qs, kvs, ds, q0, k0, causal);
  }
  void attention_row_dot(A* D, const T* d, const T* o, int rows, int cols, int stride) const override {
    cpu()->attention_row_dot(D, d, o, rows, cols, stride);
  }
  void gelu_forward(T* o, const T* i, size_t N) const override { cpu()->gelu_forward(o, i, N); }
  void gelu_backward(T* di, const T* i, const T* d, size_t N) const override { cpu()->gelu_backward(di, i, d, N); }
  void residual_forward(T* o, const T* a, const T* b, size_t N) const override { cpu()->residual_forward(o, a, b, N); }
  void accumulate(T* d, const T* s, size_t N) const override { cpu()->accumulate(d, s, N); }
  void copy_rows(T* d, size_t ds, const T* s, size_t ss, size_t c, size_t r) const override {
    cpu()->copy_rows(d, ds, s, ss, c, r);
  }
  void accumulate_rows(T* d, size_t ds, const T* s, size_t ss, size_t c, size_t r) const override {
    cpu()->accumulate_rows(d, ds, s, ss, c, r);
  }
  void fill_acc(A* x, double v, size_t n) const override { cpu()->fill_acc(x, v, n); }
  void accumulate_acc(A* d, const A* s, size_t n) const override { cpu()->accumulate_acc(d, s, n); }
  void accumulate_rows_acc(T* d, size_t ds, const A* s, size_t ss, size_t c, size_t r) const override {
    cpu()->accumulate_rows_acc(d, ds, s, ss, c, r);
  }
  void crossentropy_forward(A* l, T* p, const T* x, const int32_t* t, int N, int V) const override {
    cpu()->crossentropy_forward(l, p, x, t, N, V);
  }
  void crossentropy_backward(T* d, const T* p, const int32_t* t, double s, int N, int V) const override {
    cpu()->crossentropy_backward(d, p, t, s, N, V);
  }
  void embedding_lookup(T* o, const int32_t* i, const T* t, int N, int C, int64_t f, int r) const override {
    cpu()->embedding_lookup(o, i, t, N, C, f, r);
  }
  void add_rows(T* x, const T* t, const int32_t* i, int N, int C) const override { cpu()->add_rows(x, t, i, N, C); }
  void add_rows_backward(T* dt, const T* d, const int32_t* i, int N, int C, int64_t f, int r) const override {
    cpu()->add_rows_backward(dt, d, i, N, C, f, r);
  }
  void vocab_logit_max(A* m, const T* x, int N, int Vr, int v) const override { cpu()->vocab_logit_max(m, x, N, Vr, v); }
  void vocab_sum_exp(A* s, A* xt, const T* x, const A* m, const int32_t* t, int64_t f, int N, int Vr,
                     int v) const override {
    cpu()->vocab_sum_exp(s, xt, x, m, t, f, N, Vr, v);
  }
  void vocab_softmax_loss(A* l, T* p, const T* x, const A* m, const A* s, const A* xt, int N, int Vr,
                          int v) const override {
    cpu()->vocab_softmax_loss(l, p, x, m, s, xt, N, Vr, v);
  }
  void vocab_crossentropy_backward(T* d, const T* p, const int32_t* t, int64_t f, double g, int N, int Vr,
                                   int v) const override {
    cpu()->vocab_crossentropy_backward(d, p, t, f, g, N, Vr, v);
  }
  void moe_scatter_rows(T* xe, const T* x, const int32_t* ch, const int32_t* sl, int N, int K, int C,
                        int rows) const override {
    cpu()->moe_scatter_rows(xe, x, ch, sl, N, K, C, rows);
  }
  void moe_combine(T* o, const T* y, const int32_t* ch, const int32_t* sl, const A* w, int N, int K, int C, int rows,
                   bool acc) const override {
    cpu()->moe_combine(o, y, ch, sl, w, N, K, C, rows, acc);
  }
  void moe_combine_backward(T* dy, A* dw, const T* d, const T* y, const int32_t* ch, const int32_t* sl, const A* w,
                            int N, int K, int C, int rows) const override {
    cpu()->moe_combine_backward(dy, dw, d, y, ch, sl, w, N, K, C, rows);
  }
  double sum(const A* x, size_t n) const override { return cpu()->sum(x, n); }
  void adamw_step(M* master, T* p, const T* g, M* m, M* v, size_t n, const kernels::AdamWHyper& h,
                  bool decay) const override {
    cpu()->adamw_step(master, p, g, m, v, n, h, decay);
  }
  double sum_squares(const T* g, size_t n) const override { return cpu()->sum_squares(g, n); }

 private:
  // The CPU's ops with the guarded memory open for the full expression.
  struct Open {
    CountingMemory* m;
    explicit Open(CountingMemory* mem) : m(mem) {
      if (m) m->unlock();
    }
    ~Open() {
      if (m) m->lock();
    }
    Open(const Open&) = delete;
    Open& operator=(const Open&) = delete;
    const kernels::DeviceOps<T>* operator->() const { return &kernels::cpu_ops<T>(); }
  };
  Open cpu() const { return Open(guard_); }
  CountingMemory* guard_ = nullptr;
};

// Stand-in devices as the engine opens them, one per rank and one for the
// reference (open() is thread-safe): fp32 and bf16 ops, each device its own
// CountingMemory, kept so a test can ask what each allocated. Guarded: each
// device's memory opens only inside its ops (a single rank's run only).
class StandInDevices {
 public:
  explicit StandInDevices(bool guarded = false) : guarded_(guarded) {}
  std::shared_ptr<TrainDevice> open() {
    auto d = std::make_shared<TrainDevice>();
    d->name = "stand-in device";
    auto m = std::make_shared<CountingMemory>(guarded_);
    d->f32 = std::make_shared<StandInOps<float>>(guarded_ ? m.get() : nullptr);
    d->bf16_ops = std::make_shared<StandInOps<bf16>>(guarded_ ? m.get() : nullptr);
    d->memory = m;
    std::lock_guard lk(mu_);
    memories_.push_back(std::move(m));
    return d;
  }
  std::vector<std::shared_ptr<CountingMemory>> memories() const {
    std::lock_guard lk(mu_);
    return memories_;
  }

 private:
  bool guarded_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<CountingMemory>> memories_;
};

}  // namespace pb::testing
