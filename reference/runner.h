// Forward + backward of one microbatch through the whole model, reaching
// parameters and gradients unit by unit through UnitHooks, so a strategy sees
// each unit's life: ZeRO-3 gathers in params() and frees in release_params();
// DDP launches a bucket's all-reduce from grads_ready().
// Call order (fixed; strategies rely on it): forward units 0, 1..L, L+1, then
// 0 again for the tied LM head; backward: head (units L+1 and 0's head grad),
// grads_ready(L+1), blocks L..1 each followed by grads_ready, embedding, then
// grads_ready(0).
#pragma once
#include <cstdint>
#include <vector>

#include "reference/data.h"
#include "reference/gpt.h"
#include "reference/train_config.h"

namespace pb {

template <class T>
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual const T* params(int unit) = 0;     // base of the unit's parameters
  virtual void release_params(int /*unit*/) {}   // done with them for now
  virtual T* grads(int unit) = 0;            // base where the unit's gradients accumulate
  // Where the LM head's contribution to wte accumulates (default: unit 0's wte).
  virtual T* head_grads() { return grads(0); }
  virtual void grads_ready(int /*unit*/) {}      // this microbatch's contributions are all in
  // Expert parallel: a second set of hooks holding each MoE layer's local
  // experts as a unit of its own (unit j: the j-th MoE layer); null: the
  // experts are part of their block's unit. Forward: params(j) and
  // release_params(j) around the MoE MLP; backward: grads(j), params(j),
  // grads_ready(j), release_params(j), inside the block's own calls.
  virtual UnitHooks<T>* experts() { return nullptr; }
};

// Full flat vectors: the single-device case.
template <class T>
class FlatHooks : public UnitHooks<T> {
 public:
  FlatHooks(const ParamLayout& l, const T* params, T* grads, T* head_grads = nullptr)
      : l_(&l), p_(params), g_(grads), h_(head_grads) {}
  const T* params(int u) override { return p_ + l_->unit_begin(u); }
  T* grads(int u) override { return g_ + l_->unit_begin(u); }
  T* head_grads() override { return h_ ? h_ : g_; }

 private:
  const ParamLayout* l_;
  const T* p_;
  T* g_;
  T* h_;
};

// A mixture-of-experts model's routing over the runs of one step (what a
// trace's MoE quantities hold, reference/trace_format.h), per MoE layer in
// layer order: each expert's routed (token, choice) pairs, before capacity
// (flattened layer-major, E per layer); the layer's load-balancing loss times
// each run's tokens, summed; and the relative margins
// (p_k - p_{k+1}) / p_k between each token's k-th chosen and best unchosen
// router probability that are below kNearTieMargin (the ties a correct run
// at a lower precision may break the other way).
struct MoeStepRecord {
  std::vector<double> tokens;
  std::vector<double> aux_tokens;
  std::vector<std::vector<double>> margins;
};
inline constexpr double kNearTieMargin = 0.25;

template <class T>
class MicrobatchRunner {
 public:
  // scope: the data ranks a mixture-of-experts model's global capacity spans
  // (moe.h MoeScope; none for a dense model or one device).
  // ops: the device the tracker's Place::device buffers live on (the CPU by
  // default); off the host the tokens are drawn on the host, then moved.
  MicrobatchRunner(const ParamLayout& layout, const MarkovSource& data, MemoryTracker* tracker,
                   int Bm, int Tn, MoeScope scope = {}, const kernels::DeviceOps<T>& ops = kernels::cpu_ops<T>());
  int Bm() const { return model_.B(); }
  // Workspace bytes the constructor allocates (Scratch and the two gradient
  // ping-pong buffers), without allocating.
  // kernel_ws: the CPU kernels' workspaces too (on the host; Scratch); false: a
  // run on a device (and the MoE scratch's bytes there, moe.h).
  static int64_t workspace_bytes(const ModelConfig& m, int Bm, int Tn, int64_t moe_scope_tokens = 0, int ep = 1,
                                 bool kernel_ws = true);
  // Samples [first, first + Bm) of step `step`; dloss = 1 / (tokens in the
  // global batch). Returns the sum of this microbatch's token losses, plus,
  // for a mixture-of-experts model, its load-balancing losses times its
  // tokens (so that over the step's tokens each microbatch's aux term weighs
  // its share of them; the gradient is that objective's).
  double run(int64_t step, int64_t first, double dloss, UnitHooks<T>& hooks);
  // The same over Bm / firsts.size() samples from each of `firsts`, in order
  // (the reference's joint microbatch of several data ranks).
  double run_samples(int64_t step, const std::vector<int64_t>& firsts, double dloss, UnitHooks<T>& hooks);
  // The last run's MoE routing: choices past capacity, and choices made.
  int64_t moe_dropped() const;
  int64_t moe_choices() const;
  // Routing totals since construction or the last reset.
  const MoeLoad& moe_load() const { return load_; }
  void reset_moe_load() { load_ = {}; }
  // The routing since the last reset_moe_step() (empty for a dense model).
  // Recorded only once reset_moe_step() has been called (the reference
  // trainer's steps): the strategies' runners keep nothing.
  const MoeStepRecord& moe_step() const { return step_rec_; }
  void reset_moe_step();

 private:
  double compute(double dloss, UnitHooks<T>& hooks);
  // Where the data source writes (the buffers, or the host staging), and the move after.
  int32_t* token_dst() { return host_tokens_.empty() ? tokens_.data() : host_tokens_.data(); }
  int32_t* target_dst() { return host_targets_.empty() ? targets_.data() : host_targets_.data(); }
  void tokens_to_device();

  const ParamLayout* layout_;
  const MarkovSource* data_;
  MoeScope scope_;
  MoeLoad load_;
  MoeStepRecord step_rec_;
  bool record_moe_ = false;
  void record_routing(int moe_layer, const MoeActs<T>& a, int64_t N);
  Gpt<T> model_;
  Buffer<int32_t> tokens_, targets_;
  std::vector<int32_t> host_tokens_, host_targets_;  // staging when the buffers are not host memory
  Buffer<T> x0_;
  std::vector<BlockActs<T>> blocks_;
  std::vector<MoeActs<T>> moe_;  // per layer; empty for dense blocks
  HeadActs<T> head_;
  Scratch<T> scratch_;
  MoeScratch<T> moe_scratch_;
  Buffer<T> dx_a_, dx_b_;
};

// MicrobatchRunner<T>::workspace_bytes for the compute type of a precision.
int64_t runner_workspace_bytes(const ModelConfig& m, int Bm, int Tn, Precision p, int64_t moe_scope_tokens = 0,
                               int ep = 1, bool kernel_ws = true);

}  // namespace pb
