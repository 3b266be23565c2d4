// The mixture-of-experts MLP of the canonical model: the gradient of the
// whole objective (cross-entropy + load balancing) against central finite
// differences with tokens dropped at capacity; the routing rules (ties to the
// lower expert, first choices admitted first, token order); dropped tokens
// pass through on the residual; the balanced load-balancing loss equals its
// coefficient; parameter counts; training learns; the declared workspace.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "harness/status.h"
#include "reference/init.h"
#include "reference/moe_testing.h"
#include "reference/runner.h"
#include "reference/trainer.h"

namespace pb {
namespace {

// The objective of one microbatch (loss mean + weighted aux) and its gradient.
double objective(const ParamLayout& l, const std::vector<double>& p, std::vector<double>* grad, int64_t* dropped) {
  const MarkovSource data(l.model().V, 3);
  const int B = 2, T = 12;
  MicrobatchRunner<double> r(l, data, nullptr, B, T);
  std::vector<double> g(p.size(), 0.0);
  FlatHooks<double> hooks(l, p.data(), g.data());
  const double dloss = 1.0 / (B * T);
  const double J = r.run(0, 0, dloss, hooks) * dloss;
  if (grad) *grad = g;
  if (dropped) *dropped = r.moe_dropped();
  return J;
}

TEST(Moe, GradientMatchesFiniteDifferencesWithDrops) {
  const ModelConfig m = moe_model(0.75);
  const ParamLayout l(m);
  const std::vector<double> p = params_of(l, 5);
  std::vector<double> g;
  int64_t dropped = 0;
  objective(l, p, &g, &dropped);
  EXPECT_GT(dropped, 0) << "the check should run with tokens past capacity";
  // A sample of every tensor of the MoE block (router, experts), the dense
  // block's MLP, attention and the embeddings.
  std::vector<int64_t> idx;
  for (const auto& t : l.params()) {
    const bool moe_block = t.name.rfind("h.0.", 0) == 0;
    const int every = moe_block ? 1 : 7;
    for (int64_t i = 0; i < t.numel; i += std::max<int64_t>(1, t.numel / (moe_block ? 6 : 2)))
      if ((i / std::max<int64_t>(1, t.numel / 6)) % every == 0) idx.push_back(t.offset + i);
  }
  ASSERT_GT(idx.size(), 50u);
  const double h = 1e-6;
  int checked = 0;
  for (int64_t i : idx) {
    std::vector<double> q = p;
    q[size_t(i)] += h;
    int64_t d1 = 0, d2 = 0;
    const double jp = objective(l, q, nullptr, &d1);
    q[size_t(i)] -= 2 * h;
    const double jm = objective(l, q, nullptr, &d2);
    const double fd = (jp - jm) / (2 * h);
    const double tol = 1e-7 + 1e-5 * std::abs(fd);
    EXPECT_NEAR(g[size_t(i)], fd, tol) << l.params()[0].name << " element " << i;
    ++checked;
  }
  EXPECT_EQ(checked, int(idx.size()));
}

// With every router weight 0 the probabilities tie: each token takes experts
// 0 and 1 (the lower indices), and with capacity 1 only token 0 is admitted;
// every later token's MoE output is zero, so the block passes it through.
TEST(Moe, TiesGoToTheLowerExpertAndDroppedTokensPassThrough) {
  const ModelConfig m = moe_model(1e-6);
  const ParamLayout l(m);
  std::vector<double> p(size_t(l.total()));
  init_params<double>(l, 1, 0, l.total(), p.data());
  for (const auto& t : l.params())
    if (t.name.find("router") != std::string::npos)
      for (int64_t i = 0; i < t.numel; ++i) p[size_t(t.offset + i)] = 0;
  const int B = 1, T = 8, N = B * T, C = m.C;
  Gpt<double> gpt(l, B, T);
  BlockActs<double> a(nullptr, m, B, T, false);
  MoeActs<double> ma(nullptr, m, N);
  Scratch<double> s(nullptr, m, B, T);
  MoeScratch<double> ms(nullptr, m, N);
  std::vector<double> x(size_t(N) * C);
  std::mt19937_64 g(2);
  std::normal_distribution<double> nd(0, 1);
  for (auto& v : x) v = nd(g);
  gpt.moe_block_forward(a, ma, x.data(), p.data() + l.unit_begin(1), s, ms);
  EXPECT_EQ(ma.cap, 1);
  for (int n = 0; n < N; ++n) {
    EXPECT_EQ(ma.choice[size_t(n) * 2], 0);
    EXPECT_EQ(ma.choice[size_t(n) * 2 + 1], 1);
    EXPECT_DOUBLE_EQ(ma.weight[size_t(n) * 2], 0.5);
    EXPECT_EQ(ma.slot[size_t(n) * 2], n == 0 ? 0 : -1);
    EXPECT_EQ(ma.slot[size_t(n) * 2 + 1], n == 0 ? 0 : -1);
    if (n == 0) continue;
    for (int c = 0; c < C; ++c) EXPECT_EQ(a.xout[size_t(n) * C + c], a.xmid[size_t(n) * C + c]);
  }
  EXPECT_EQ(ma.dropped, 2 * (N - 1));
  // f = (1/2, 1/2, 0, 0), P = 1/4 each: aux = coef * 4 * (1/8 + 1/8) = coef.
  EXPECT_NEAR(ma.aux, m.moe.aux_loss_coef, 1e-15);
}

// Capacity admits first choices of all tokens before any second choice.
TEST(Moe, FirstChoicesAreAdmittedFirst) {
  ModelConfig m = moe_model(0.5);  // cap = ceil(0.5 * 8 * 2 / 4) = 2
  const ParamLayout l(m);
  std::vector<double> p(size_t(l.total()), 0.0);
  init_params<double>(l, 1, 0, l.total(), p.data());
  const auto& o = l.moe_block();
  double* router = p.data() + l.unit_begin(1) + o.router_w;  // (E, C)
  for (int64_t i = 0; i < int64_t(m.moe.experts) * m.C; ++i) router[i] = 0;
  // Feature 0 votes for expert 0, feature 1 for expert 1.
  router[0 * m.C + 0] = 1;
  router[1 * m.C + 1] = 1;
  const int B = 1, T = 8, N = B * T, C = m.C;
  MoeActs<double> ma(nullptr, m, N);
  MoeScratch<double> ms(nullptr, m, N);
  std::vector<double> x(size_t(N) * C, 0.0), out(size_t(N) * C);
  // Tokens 0-5 prefer expert 1 then 0 (feature 1 > feature 0); tokens 6, 7 prefer 0 then 1.
  for (int n = 0; n < N; ++n) {
    x[size_t(n) * C + 0] = n < 6 ? 1 : 3;
    x[size_t(n) * C + 1] = n < 6 ? 3 : 1;
  }
  MoeMlp<double>(l, N).forward(ma, out.data(), x.data(), p.data() + l.unit_begin(1), ms);
  ASSERT_EQ(ma.cap, 2);
  // Expert 1: first choices of tokens 0 and 1 fill it; tokens 2-5 dropped there.
  for (int n = 0; n < 6; ++n) EXPECT_EQ(ma.slot[size_t(n) * 2], n < 2 ? n : -1) << n;
  // Expert 0: first choices of tokens 6 and 7 come before any second choice.
  EXPECT_EQ(ma.slot[size_t(6) * 2], 0);
  EXPECT_EQ(ma.slot[size_t(7) * 2], 1);
  for (int n = 0; n < 6; ++n) EXPECT_EQ(ma.slot[size_t(n) * 2 + 1], -1) << n;
}

TEST(Moe, ParameterCounts) {
  const ModelConfig m = named_model("tiny-moe");
  EXPECT_EQ(ParamLayout(m).total(), m.num_params());
  const int64_t C = m.C, mlp = 8 * C * C + 5 * C;
  EXPECT_EQ(m.num_params() - m.active_params(), (m.moe.experts - m.moe.top_k) * mlp);
  ModelConfig dense = m;
  dense.moe.experts = 0;
  EXPECT_EQ(m.num_params() - dense.num_params(), (m.moe.experts - 1) * mlp + m.moe.experts * C);
}

TEST(Moe, ReferenceTrainingLearns) {
  TrainConfig c;
  c.model = named_model("tiny-moe");
  c.precision = Precision::fp32;
  c.steps = 60;
  c.batch = 8;
  c.seq = 16;
  c.optim.lr = 3e-3;
  ReferenceTrainer<float> t(c);
  double first = 0, last = 0;
  for (int i = 0; i < c.steps; ++i) {
    const StepStats st = t.step();
    if (i == 0) first = st.loss;
    last = st.loss;
  }
  EXPECT_GT(first, 3.5);
  EXPECT_LT(last, first - 1.0) << "first " << first << " last " << last;
}

TEST(Moe, WorkspaceIsDeclared) {
  const ModelConfig m = named_model("tiny-moe");
  const ParamLayout layout(m);
  const MarkovSource data(m.V, 1);
  MemoryTracker mt;
  MicrobatchRunner<float> runner(layout, data, &mt, 4, 16);
  EXPECT_EQ(int64_t(mt.peak(MemTag::workspace)), runner_workspace_bytes(m, 4, 16, Precision::fp32));
}

}  // namespace
}  // namespace pb

namespace pb {
namespace {

// Named variants of tiny-moe: each suffix sets its field once, in any order,
// the name kept; anything else is an InputError naming the model.
TEST(MoeNames, VariantsSetTheirFieldsAndBadOnesAreRefused) {
  const ModelConfig a = named_model("tiny-moe-e8-top1-local");
  EXPECT_EQ(a.moe.experts, 8);
  EXPECT_EQ(a.moe.top_k, 1);
  EXPECT_EQ(a.moe.capacity, MoeCapacity::local);
  EXPECT_DOUBLE_EQ(a.moe.capacity_factor, 1.25);
  EXPECT_EQ(a.name, "tiny-moe-e8-top1-local");
  const ModelConfig b = named_model("tiny-moe-local-cf2");
  EXPECT_DOUBLE_EQ(b.moe.capacity_factor, 2.0);
  EXPECT_EQ(b.moe.capacity, MoeCapacity::local);
  EXPECT_EQ(b.moe.experts, 4);
  for (const char* bad : {"tiny-moe-", "tiny-moe-cf", "tiny-moe-cf0", "tiny-moe-cf-1", "tiny-moe-cfinf", "tiny-moe-cfnan",
                          "tiny-moe-e8-e4", "tiny-moe-top3-e2", "tiny-moe-e1.5", "tiny-moe-x", "tiny-moe-e0", "tiny-moe-e4096",
                          "tiny-moex", "tiny-moe-e08", "tiny-moe-e1e1", "tiny-moe-top+1", "tiny-moe-cf.5", "tiny-moe-e0x8",
                          "tiny-moe-e 8", "tiny-moe-cf1e1"})
    EXPECT_THROW(named_model(bad), InputError) << bad;
  // One spelling per configuration: the canonical name parses back to itself.
  for (const char* n : {"tiny-moe", "tiny-moe-local", "tiny-moe-e8-top1", "tiny-moe-e8-top1-cf2-local", "tiny-moe-cf1.5"}) {
    EXPECT_EQ(moe_variant_name(named_model(n)), n);
    EXPECT_EQ(named_model(moe_variant_name(named_model(n))).moe.capacity_factor, named_model(n).moe.capacity_factor);
  }
  EXPECT_EQ(moe_variant_name(named_model("tiny-moe-local-top1-e8")), "tiny-moe-e8-top1-local");
}

}  // namespace
}  // namespace pb
