// Tests of the llama family in the reference (docs/models.md): the whole
// model's gradient against finite differences (fp64; the wiring of RMSNorm,
// RoPE, grouped-query attention, SwiGLU and the untied head together), the
// trainer at every precision tracking the fp64 truth and learning, the
// declared workspace, and that GPT-2 is untouched by the option.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "harness/status.h"
#include "reference/init.h"
#include "reference/runner.h"
#include "reference/trainer.h"

namespace pb {
namespace {

ModelConfig small_llama() {
  ModelConfig m = named_model("tiny-llama");
  m.name = "custom";
  m.V = 16;
  m.maxT = 6;
  m.C = 16;
  m.NH = 4;
  m.kv_heads = 2;
  m.ffn = 24;
  m.rope_theta = 100;  // turns that differ visibly over 6 positions
  return m;
}

// The sum of the token losses of one microbatch, and its gradient (dloss 1).
struct LossAndGrad {
  double loss;
  std::vector<double> grad;
};
LossAndGrad run(const ParamLayout& l, const MarkovSource& src, const std::vector<double>& params, int B, int Tn) {
  MemoryTracker mt;
  MicrobatchRunner<double> r(l, src, &mt, B, Tn);
  std::vector<double> g(params.size(), 0.0);
  FlatHooks<double> hooks(l, params.data(), g.data());
  const double loss = r.run(/*step=*/0, /*first=*/0, /*dloss=*/1.0, hooks);
  return {loss, g};
}

void expect_model_gradient(const ModelConfig& m) {
  const ParamLayout l(m);
  const MarkovSource src(m.V, 3);
  std::vector<double> p(size_t(l.total()));
  init_params<double>(l, 5, 0, l.total(), p.data());
  // Larger weights than the init's 0.02, so every path carries signal.
  std::mt19937_64 rng(9);
  std::normal_distribution<double> nd(0.0, 0.3);
  for (const auto& info : l.params())
    if (info.shape.size() == 2)
      for (int64_t i = 0; i < info.numel; ++i) p[size_t(info.offset + i)] = nd(rng);
  const int B = 2, Tn = 6;
  const LossAndGrad base = run(l, src, p, B, Tn);
  double scale = 0;
  for (double g : base.grad) scale = std::max(scale, std::abs(g));
  ASSERT_GT(scale, 0.0);
  // Every tensor probed: a few elements each.
  const double h = 1e-5;
  for (const auto& info : l.params()) {
    for (int64_t k = 0; k < std::min<int64_t>(info.numel, 6); ++k) {
      const size_t i = size_t(info.offset + (k * 7919) % info.numel);
      const double x0 = p[i];
      p[i] = x0 + h;
      const double lp = run(l, src, p, B, Tn).loss;
      p[i] = x0 - h;
      const double lm = run(l, src, p, B, Tn).loss;
      p[i] = x0;
      EXPECT_LE(std::abs((lp - lm) / (2 * h) - base.grad[i]) / scale, 1e-7)
          << m.name << " " << info.name << " [" << i - size_t(info.offset) << "]";
    }
  }
}

TEST(Llama, ModelGradientMatchesFiniteDifferences) { expect_model_gradient(small_llama()); }

// Mixtral's MLP: SwiGLU experts behind a softmax top-2 router (dropless:
// capacity factor E / k), the load-balancing loss included. The routing is
// piecewise constant; these weights keep every choice away from a tie.
TEST(Llama, MixtureOfSwiGluExpertsGradientMatchesFiniteDifferences) {
  ModelConfig m = small_llama();
  m.moe = {4, 2, 2.0, 1, 0.01, MoeCapacity::global};
  expect_model_gradient(m);
}

TrainConfig tiny_llama(Precision p, int steps) {
  TrainConfig c;
  c.model = named_model("tiny-llama");
  c.precision = p;
  c.steps = steps;
  c.batch = 8;
  c.seq = 16;
  c.optim.lr = 3e-3;
  c.optim.min_lr = 3e-4;
  return c;
}

TEST(Llama, TrainerAtEveryPrecisionTracksTheFp64Truth) {
  const int steps = 10;
  std::vector<std::vector<double>> loss;
  for (Precision p : {Precision::fp64, Precision::fp32, Precision::bf16_mixed}) {
    auto t = make_reference_trainer(tiny_llama(p, steps));
    loss.emplace_back();
    for (int i = 0; i < steps; ++i) loss.back().push_back(t->step().loss);
  }
  double gap32 = 0, gap16 = 0;
  for (int i = 0; i < steps; ++i) {
    gap32 = std::max(gap32, std::abs(loss[1][size_t(i)] - loss[0][size_t(i)]) / loss[0][size_t(i)]);
    gap16 = std::max(gap16, std::abs(loss[2][size_t(i)] - loss[0][size_t(i)]) / loss[0][size_t(i)]);
  }
  EXPECT_GT(gap32, 0.0);
  EXPECT_LT(gap32, 1e-5);
  EXPECT_LT(gap16, 3e-2);
  EXPECT_NEAR(loss[0].front(), std::log(64.0), 0.1);  // uniform predictions at init
  EXPECT_LT(loss[0].back(), loss[0].front() - 0.05);   // and it learns
}

TEST(Llama, LossFallsTowardTheEntropyFloor) {
  TrainConfig c = tiny_llama(Precision::fp32, 150);
  c.batch = 16;
  c.optim.lr = 1e-2;
  c.optim.min_lr = 1e-3;
  c.optim.warmup = 10;
  c.optim.weight_decay = 0.0;
  MarkovSource src(c.model.V, c.data.seed, c.data.branching, c.data.mix);
  const double floor = src.entropy_rate(), start = std::log(double(c.model.V));
  auto t = make_reference_trainer(c);
  double last = 0;
  for (int i = 0; i < c.steps; ++i) {
    const double l = t->step().loss;
    if (i >= c.steps - 10) last += l / 10;
  }
  EXPECT_LT(last - floor, 0.1 * (start - floor)) << "floor " << floor << " last " << last;
  EXPECT_GT(last, floor - 0.05);
}

TEST(Llama, WorkspaceAndModelStatesAreDeclared) {
  const ModelConfig m = named_model("tiny-llama");
  const ParamLayout layout(m);
  const MarkovSource data(m.V, 1);
  MemoryTracker mt;
  MicrobatchRunner<bf16> runner(layout, data, &mt, 2, 16);
  EXPECT_EQ(int64_t(mt.peak(MemTag::workspace)), runner_workspace_bytes(m, 2, 16, Precision::bf16_mixed));
  auto t = make_reference_trainer(tiny_llama(Precision::fp32, 1));
  t->step();
  EXPECT_EQ(t->memory().peak(MemTag::params), 4 * size_t(m.num_params()));
}

TEST(Llama, TinyMixtralTrainsAndTracksTheTruth) {
  std::vector<double> loss[2];
  for (int i = 0; i < 2; ++i) {
    TrainConfig c = tiny_llama(i ? Precision::fp32 : Precision::fp64, 6);
    c.model = named_model("tiny-mixtral");
    auto t = make_reference_trainer(c);
    for (int s = 0; s < c.steps; ++s) loss[i].push_back(t->step().loss);
  }
  for (int s = 0; s < 6; ++s) EXPECT_NEAR(loss[1][size_t(s)], loss[0][size_t(s)], 1e-4 * loss[0][size_t(s)]);
  EXPECT_LT(loss[0].back(), loss[0].front());
  const ParamLayout l(named_model("tiny-mixtral"));
  EXPECT_EQ(l.total(), named_model("tiny-mixtral").num_params());
  EXPECT_NE(l.find("model.layers.1.block_sparse_moe.gate.weight"), nullptr);
  EXPECT_NE(l.find("model.layers.0.block_sparse_moe.experts.3.w1.weight"), nullptr);
  EXPECT_NE(l.find("model.layers.0.block_sparse_moe.experts.3.w2.weight"), nullptr);
  EXPECT_NE(l.find("model.layers.0.block_sparse_moe.experts.3.w3.weight"), nullptr);
}

}  // namespace
}  // namespace pb
