// Test helpers the planner's tests share.
#pragma once
#include <cstdint>
#include <string>

#include "suites/planner/model_cost.h"
#include "suites/planner/planner.h"

namespace pb::planner {

// A plan input of psi parameters (no model shape) over dp ranks.
inline PlanInput params_only(int64_t psi, int dp, dp::Shard shard) {
  PlanInput in;
  in.params = psi;
  in.dp = dp;
  in.shard = shard;
  in.precision = Precision::bf16_mixed;
  return in;
}

// A plan input of the named model (planner_model): `microbatch_size`
// sequences a microbatch, `global_batch` sequences a step (0: dp x
// microbatch_size x pp) of `seq` tokens (0: the model's context); every
// other field PlanInput's default (one rank, bf16-mixed, no hardware), as
// are the defaults here.
inline PlanInput model_input(const std::string& model, int64_t microbatch_size = 1, int64_t global_batch = 0,
                             int64_t seq = 0) {
  PlanInput in;
  in.shape = planner_model(model);
  in.microbatch_size = microbatch_size;
  in.global_batch = global_batch;
  in.seq = seq;
  return in;
}

// Hardware figures typed by hand, by name: what a test gives, the rest
// Hardware's defaults (0: not given). For a designated initializer:
//   in.hw = figures({.peak_tflops = 312, .bw_intra_GBps = 200, .device = true});
struct Figures {
  double peak_tflops = 0;
  double bw_intra_GBps = 0, bw_inter_GBps = 0;
  double latency_us = 0;
  double mem_bw_GBps = 0;
  bool device = false;  // a GPU's plan (Hardware::host_kernels false); false: CPU ranks
};

inline Hardware figures(const Figures& f) {
  Hardware hw;
  hw.peak_tflops = f.peak_tflops;
  hw.bw_intra_GBps = f.bw_intra_GBps;
  hw.bw_inter_GBps = f.bw_inter_GBps;
  hw.latency_us = f.latency_us;
  hw.mem_bw_GBps = f.mem_bw_GBps;
  hw.host_kernels = !f.device;
  return hw;
}

}  // namespace pb::planner
