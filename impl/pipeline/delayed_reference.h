// The single-device replay PipeDream-2BW is judged against: training with
// one-step-delayed weights (Narayanan et al., ICML 2021, Sec. 3.1; the weight
// semantics in schedule.h). Group k's gradient g(k) is computed with W(k),
// W(k) = W(k-1) stepped (AdamW, optimizer step k-1) with g(k-2), W(1) = W(0);
// after the window of K = cfg.steps groups the pending g(K-2), g(K-1) are
// applied, so K optimizer steps happen in all — exactly what the executor does.
// Built from the reference's pieces (MicrobatchRunner, AdamW) with the same
// split-plan arithmetic as ReferenceTrainer (reference/trainer.h), so a 2BW run
// on the local backend can be held to bit equality with its replay.
#pragma once
#include <memory>
#include <vector>

#include "reference/trainer.h"

namespace pb::pipeline {

struct DelayedResult {
  std::vector<StepStats> steps;  // per group: its loss, the norm of g(k), the lr applying it
  std::vector<double> grads1;    // g(0)
  std::vector<double> params;    // after the K optimizer steps
};

// device: where it trains when cfg.device is cuda (the plain plan only, as
// ReferenceTrainer off the host); null and cfg.device = cpu: the CPU.
// f64_ops: for an fp64 cfg, the host ops it trains on (null: the CPU's; e.g.
// kernels::cpu_ops_sliced, the same model in another order of summation).
DelayedResult run_delayed_reference(const TrainConfig& cfg, const SplitPlan& plan = {},
                                    const TrainDevice* device = nullptr,
                                    std::shared_ptr<const kernels::DeviceOps<double>> f64_ops = nullptr);

}  // namespace pb::pipeline
