#include "impl/pipeline/delayed_reference.h"

#include <cmath>

#include "harness/status.h"
#include "reference/init.h"

namespace pb::pipeline {

namespace {

template <class T>
DelayedResult run(const TrainConfig& cfg, const SplitPlan& plan, std::shared_ptr<const kernels::DeviceOps<T>> dev,
                  std::shared_ptr<DeviceMemory> memory) {
  cfg.validate();
  const int split = plan.groups * plan.micro;
  require(cfg.batch % split == 0, "train.batch: must divide into " + std::to_string(split) + " microbatches");
  require(!plan.two_level(), "split plan: the delayed-weight reference sums groups in one level");
  const kernels::DeviceOps<T>& ops = dev ? *dev : kernels::cpu_ops<T>();
  require(ops.is_host() || (plan.groups == 1 && !plan.separate_head_grad && plan.norm_parts.empty()),
          "delayed-weight reference: on " + ops.name() + " only the plain plan runs (the replays are host code)");
  kernels::set_blas_threads(cfg.threads);
  MemoryTracker mt;
  mt.set_device_memory(memory.get());
  const ParamLayout layout(cfg.model);
  const MarkovSource data(cfg.model.V, cfg.data.seed, cfg.data.branching, cfg.data.mix);
  const int64_t n = layout.total();
  const size_t wte = size_t(cfg.model.V) * cfg.model.C;
  Buffer<T> params(&mt, MemTag::params, size_t(n)), head(&mt, MemTag::grads, wte),
      group(&mt, MemTag::workspace, size_t(n));
  Buffer<T> g[2] = {Buffer<T>(&mt, MemTag::grads, size_t(n)), Buffer<T>(&mt, MemTag::grads, size_t(n))};
  Buffer<acc_t<T>> acc(&mt, MemTag::workspace, size_t(n));
  init_params(ops, layout, cfg.seed, 0, n, params.data());
  AdamW<T> opt(layout, cfg.seed, {{0, n, 0, 0, 0}}, n, &mt, Place::device, false, ops);
  MicrobatchRunner<T> runner(layout, data, &mt, cfg.batch / split, cfg.seq, MoeScope{}, ops);
  const int Bm = runner.Bm();
  const double dloss = 1.0 / double(cfg.tokens_per_step());

  // ReferenceTrainer::step's gradient, with the current params, into out.
  auto gradient = [&](int step, T* out) {
    double loss = 0;
    for (int gr = 0; gr < plan.groups; ++gr) {
      T* gb = plan.groups > 1 ? group.data() : out;
      ops.zero(gb, size_t(n) * sizeof(T));
      if (plan.separate_head_grad) ops.zero(head.data(), wte * sizeof(T));
      FlatHooks<T> hooks(layout, params.data(), gb, plan.separate_head_grad ? head.data() : nullptr);
      double group_loss = 0;
      for (int k = 0; k < plan.micro; ++k)
        group_loss += runner.run(step, int64_t(gr * plan.micro + k) * Bm, dloss, hooks);
      if (plan.separate_head_grad) ops.accumulate(gb + layout.wte_offset(), head.data(), wte);
      loss += group_loss;
      if (plan.groups > 1)
        for (int64_t i = 0; i < n; ++i)
          acc[size_t(i)] = gr == 0 ? static_cast<acc_t<T>>(gb[i]) : acc[size_t(i)] + static_cast<acc_t<T>>(gb[i]);
    }
    if (plan.groups > 1)
      for (int64_t i = 0; i < n; ++i) out[i] = cast<T>(acc[size_t(i)]);
    return loss / double(cfg.tokens_per_step());
  };
  auto apply = [&](const T* gr, int t) {
    double sq = 0;
    if (plan.norm_parts.empty()) sq = ops.sum_squares(gr, size_t(n));
    for (const auto& ranges : plan.norm_parts) sq += sum_squares_ranges(gr, ranges);
    const double norm = std::sqrt(sq);
    opt.step(params.data(), gr, cfg.optim, t, lr_at(cfg.optim, t, cfg.steps), clip_factor(norm, cfg.optim.clip));
    return norm;
  };

  auto to_f64 = [&](const T* x, std::vector<double>& out) {
    std::vector<T> host(static_cast<size_t>(n));
    ops.to_host(host.data(), x, size_t(n) * sizeof(T));
    for (const T& v : host) out.push_back(static_cast<double>(v));
  };
  const int K = cfg.steps;
  DelayedResult res;
  res.steps.resize(size_t(K));
  for (int s = 0; s < K; ++s) {
    if (s >= 2) res.steps[size_t(s - 2)].grad_norm = apply(g[s % 2].data(), s - 1);
    res.steps[size_t(s)].loss = gradient(s, g[s % 2].data());
    if (s == 0) to_f64(g[0].data(), res.grads1);
  }
  for (int gr = std::max(0, K - 2); gr < K; ++gr) res.steps[size_t(gr)].grad_norm = apply(g[gr % 2].data(), gr + 1);
  for (int s = 0; s < K; ++s) {
    res.steps[size_t(s)].step = s + 1;
    res.steps[size_t(s)].lr = lr_at(cfg.optim, s + 1, cfg.steps);
  }
  to_f64(params.data(), res.params);
  return res;
}

}  // namespace

DelayedResult run_delayed_reference(const TrainConfig& cfg, const SplitPlan& plan, const TrainDevice* device,
                                    std::shared_ptr<const kernels::DeviceOps<double>> f64_ops) {
  if (f64_ops) {
    require(cfg.precision == Precision::fp64 && cfg.device == Device::cpu && f64_ops->is_host(),
            "delayed-weight reference: fp64 ops are for an fp64 run on the host");
    return run<double>(cfg, plan, std::move(f64_ops), nullptr);
  }
  return on_train_device(cfg, device, [&](auto t, auto ops, auto memory) {
    return run<decltype(t)>(cfg, plan, std::move(ops), std::move(memory));
  });
}

}  // namespace pb::pipeline
