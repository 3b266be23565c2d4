// The planner's FLOPs and shapes against the papers it cites (Megatron-LM's
// FLOPs formula, Korthikanti et al.'s activation bytes) and the reference's
// own GEMMs; its checks of bad input; the 1T-parameter / thousands-of-ranks scale.
#include "suites/planner/planner.h"
#include "suites/planner/machine.h"
#include "suites/planner/plan_output.h"
#include "suites/planner/planner_testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <mutex>

#include "harness/comm/runner.h"
#include "harness/status.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/strategy.h"
#include "impl/pipeline/strategy.h"
#include "impl/tensor_parallel/runner.h"
#include "impl/tensor_parallel/strategy.h"
#include "impl/pipeline/simulator.h"
#include "reference/device_testing.h"
#include "reference/layout.h"
#include "reference/runner.h"


namespace pb::planner {
namespace {

// F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) checked exactly in integers:
// F * 48 l h == 96 B s l h^2 (48 l h + 8 l s + 3 V).
TEST(Planner, FlopsEqualMegatronFormulaExactly) {
  for (const char* name : {"gpt2-124m", "gpt2-350m", "gpt-1.3b", "gpt-7b", "gpt3-175b", "megatron-1t"}) {
    const ModelConfig m = planner_model(name);
    for (int64_t B : {1, 8, 512, 3072}) {
      for (int64_t s : {int64_t(128), int64_t(m.maxT)}) {
        const u128 l = u128(m.L), h = u128(m.C), V = u128(m.V), b = u128(B), S = u128(s);
        const Flops f = iteration_flops(m, B, s, Recompute::full);
        EXPECT_TRUE(f.hardware * 48 * l * h == 96 * b * S * l * h * h * (48 * l * h + 8 * l * S + 3 * V))
            << name << " B=" << B << " s=" << s;
        // Without recomputation: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
        EXPECT_TRUE(f.model * 12 * l * h == 72 * b * S * l * h * h * (12 * l * h + 2 * l * S + V)) << name;
        EXPECT_TRUE(iteration_flops(m, B, s, Recompute::none).hardware == f.model);
        EXPECT_TRUE(iteration_flops(m, B, s, Recompute::selective).hardware == f.model + 4 * b * S * S * l * h);
      }
    }
  }
}

TEST(Planner, ModelFlopsAgreeWithReference) {
  const ModelConfig m = planner_model("gpt2-124m");
  const double ref = model_flops_per_step(m, 16, 1024);
  EXPECT_NEAR(to_double(iteration_flops(m, 16, 1024, Recompute::none).model), ref, 1e-12 * ref);
}

TEST(Planner, NamedShapesAndParamCounts) {
  EXPECT_EQ(planner_model("gpt2-124m").num_params(), 124'439'808);
  const ModelConfig t = planner_model("1T");
  EXPECT_EQ(t.L, 128);
  EXPECT_EQ(t.C, 25600);
  EXPECT_EQ(t.NH, 160);
  EXPECT_NEAR(double(t.num_params()), 1.008e12, 0.002e12);  // Narayanan et al. Table 1: 1008B
  EXPECT_NEAR(double(planner_model("175b").num_params()), 174.6e9, 0.2e9);
  EXPECT_THROW(planner_model("gpt-5"), InputError);
}

// The GEMMs a rank runs are the model's FLOPs exactly: their 2 m n k per
// microbatch, times the microbatches (and the tp or cp shards), is
// Megatron's formula without recomputation.
// A mixture-of-experts block runs its router and its top_k experts on every
// token (model_flops_per_step's count): at any ep, a rank's E / ep experts
// run the same routed rows in all.
TEST(Planner, RankGemmsAreTheModelFlops) {
  for (const char* name : {"tiny", "small", "gpt2-124m", "tiny-moe", "tiny-moe-e8-top1"}) {
    const ModelConfig m = planner_model(name);
    for (const auto& [tp, cp] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {4, 1}, {1, 2}, {1, 4}}) {
      if (m.NH % tp || m.V % tp) continue;
      for (int ep : {1, 2, 4}) {
        if (ep > 1 && m.moe.experts == 0) continue;
        const int64_t b = 3, s = m.maxT;
        double f = 0;
        for (const GemmShape& g : rank_gemms(m, b, s, tp, cp, true, ep))
          f += 2.0 * double(g.m) * double(g.n) * double(g.k) * g.count;
        EXPECT_NEAR(f * tp * cp, to_double(iteration_flops(m, b, s, Recompute::none).model),
                    1e-12 * f * tp * cp)
            << name << " tp" << tp << " cp" << cp << " ep" << ep;
      }
    }
    if (m.moe.experts > 0) {  // the planner's FLOPs are the sweep's MFU numerator
      EXPECT_NEAR(to_double(iteration_flops(m, 5, 16, Recompute::none).model), model_flops_per_step(m, 5, 16),
                  1e-12 * model_flops_per_step(m, 5, 16))
          << name;
      const double extra = to_double(iteration_flops(m, 5, 16, Recompute::full).hardware) -
                           to_double(iteration_flops(m, 5, 16, Recompute::none).hardware);
      ModelConfig dense = m;
      dense.moe = {};
      const double dense_extra = to_double(iteration_flops(dense, 5, 16, Recompute::full).hardware) -
                                 to_double(iteration_flops(dense, 5, 16, Recompute::none).hardware);
      // Full recomputation runs the MoE blocks' forward again too: a third more of their extra.
      EXPECT_NEAR(extra - dense_extra,
                  (model_flops_per_step(m, 5, 16) - model_flops_per_step(dense, 5, 16)) / 3, 1e-9 * extra)
          << name;
    }
  }
}

// Korthikanti et al. 2022 Table 2 (16-bit activations, dropout).
TEST(Planner, ActivationsMatchKorthikanti) {
  const int64_t s = 2048, b = 4, h = 12288, a = 96, sbh = s * b * h;
  for (int t : {1, 2, 8}) {
    ActivationShape x{b, s, h, a, t, 1, false, true, 2};
    // sbh(10 + 24/t + 5as/(ht)) multiplied through by t.
    EXPECT_EQ(layer_activation_bytes(x, Recompute::none) * t, sbh * (10 * t + 24) + 5 * a * s * s * b);
    EXPECT_EQ(layer_activation_bytes(x, Recompute::selective) * t, sbh * (10 * t + 24));
    EXPECT_EQ(layer_activation_bytes(x, Recompute::full), 2 * sbh);
    x.sp = true;  // sbh/t (34 + 5as/h)
    EXPECT_EQ(layer_activation_bytes(x, Recompute::none) * t, 34 * sbh + 5 * a * s * s * b);
    EXPECT_EQ(layer_activation_bytes(x, Recompute::selective) * t, 34 * sbh);
    EXPECT_EQ(layer_activation_bytes(x, Recompute::full) * t, 2 * sbh);
  }
  // The canonical model has no dropout: 16e sbh + e as^2b per layer.
  ActivationShape fp32{1, 64, 32, 2, 1, 1, false, false, 4};
  EXPECT_EQ(layer_activation_bytes(fp32, Recompute::none), 64 * 64 * 32 + 4 * 2 * 64 * 64);
}

TEST(Planner, BadInputIsInputError) {
  PlanInput in = params_only(1000, 0, dp::Shard::none);
  EXPECT_THROW(plan(in), InputError);
  in.dp = 2;
  in.tp = 2;  // needs a shape
  EXPECT_THROW(plan(in), InputError);
  PlanInput s = model_input("gpt2-124m", 1, 6);
  s.dp = 4;
  EXPECT_THROW(plan(s), InputError);
  s.global_batch = 8;
  s.hw.peak_tflops = 10;  // no bandwidth for the dp traffic
  EXPECT_THROW(plan(s), InputError);
}

TEST(Planner, TrillionParametersOnThousandsOfRanks) {
  PlanInput in = model_input("megatron-1t", 1, 3072 * 16);
  in.tp = 8;
  in.pp = 64;
  in.dp = 96;  // 49152 ranks
  in.sp = true;
  in.shard = dp::Shard::zero1;
  in.recompute = Recompute::selective;
  in.ranks_per_node = 8;
  in.hw = figures({.peak_tflops = 312, .bw_intra_GBps = 300, .bw_inter_GBps = 25, .latency_us = 5});
  const PlanResult r = plan(in);
  EXPECT_EQ(r.world, 8 * 64 * 96);
  EXPECT_TRUE(r.timed);
  EXPECT_GT(r.step_s, r.compute_s);
  EXPECT_GT(r.mfu, 0.0);
  EXPECT_LE(r.mfu, r.hfu);
  EXPECT_LE(r.hfu, 1.0);
  EXPECT_GT(r.worst.activations, 0);
  bool has_tp = false, has_pp = false, has_dp = false;
  for (const CommRow& c : r.comm) {
    has_tp |= c.group == "tp" && !c.inter_node;
    has_pp |= c.group == "pp" && c.inter_node;
    has_dp |= c.group == "dp" && c.inter_node;
    EXPECT_GT(c.time_s, 0.0) << c.group;
  }
  EXPECT_TRUE(has_tp && has_pp && has_dp);
}

}  // namespace
}  // namespace pb::planner
