// The mixture-of-experts MLP of the canonical model: the gradient of the
// whole objective (cross-entropy + load balancing) against central finite
// differences with tokens dropped at capacity; the routing rules (ties to the
// lower expert, first choices admitted first, token order); dropped tokens
// pass through on the residual; the balanced load-balancing loss equals its
// coefficient; parameter counts; training learns; the declared workspace.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "harness/comm/runner.h"
#include "harness/status.h"
#include "reference/init.h"
#include "reference/runner.h"
#include "reference/trainer.h"

namespace pb {
namespace {

ModelConfig moe_model(double cf, int top_k = 2) {
  ModelConfig m = named_model("tiny-moe");
  m.moe.capacity_factor = cf;
  m.moe.top_k = top_k;
  m.moe.aux_loss_coef = 0.1;  // large enough to matter in the gradient check
  return m;
}

// Params of `m` (fp64), the router weights made decisive (std 1) so small
// perturbations do not flip a routing decision.
std::vector<double> params_of(const ParamLayout& l, uint64_t seed) {
  std::vector<double> p(size_t(l.total()));
  init_params<double>(l, seed, 0, l.total(), p.data());
  std::mt19937_64 g(seed);
  std::normal_distribution<double> n(0, 1);
  for (const auto& t : l.params())
    if (t.name.find("router") != std::string::npos)
      for (int64_t i = 0; i < t.numel; ++i) p[size_t(t.offset + i)] = n(g);
  return p;
}

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

// Tensor-parallel experts (each expert's c_fc rows and c_proj columns split
// over tp, the partial sums all-reduced): at fp64 the MoE MLP of tp 2 (and
// of ep 2 x tp 2) gives the output, input gradient and parameter gradients
// of the whole experts (tp 1), with tokens dropped at capacity 1.0.
struct MoeRun {
  std::vector<double> out, dx, du;  // du: the block unit's gradients in the whole layout's flat order
};
MoeRun run_moe(const ModelConfig& m, int tp, int tp_rank, Communicator* tpc, Communicator* epc,
               const std::vector<double>& full, const std::vector<double>& x, const std::vector<double>& dout) {
  const ParamLayout whole(m), l(m, tp, tp_rank);
  const int N = int(x.size()) / m.C, ep = epc ? epc->size() : 1, er = epc ? epc->rank() : 0;
  std::vector<double> p(size_t(l.total())), g(size_t(l.total()), 0.0);
  for (const ParamInfo& t : l.params()) {
    const int64_t base = whole.find(t.name)->offset;
    for (int64_t i = 0; i < t.numel; ++i) p[size_t(t.offset + i)] = full[size_t(base + t.full_index(i))];
  }
  MoeScope sc;
  sc.tp = tpc;
  sc.ep = epc;
  MoeMlp<double> mlp(l, N, sc);
  MoeActs<double> a(nullptr, m, N, 0, ep, tp);
  MoeScratch<double> s(nullptr, m, N, 0, ep, tp);
  const int64_t u = l.unit_begin(l.block_unit(0));
  const MoeOffsets& o = l.moe_block();
  const int64_t El = m.moe.experts / ep, mine = u + o.expert0 + er * El * o.expert_size;  // this ep rank's experts
  MoeRun r;
  r.out.assign(x.size(), 0.0);
  r.dx.assign(x.size(), 0.0);
  mlp.forward(a, r.out.data(), x.data(), p.data() + u, s, ep > 1 ? p.data() + mine : nullptr);
  mlp.backward(r.dx.data(), g.data() + u, dout.data(), x.data(), a, p.data() + u, 0.5, s,
               ep > 1 ? p.data() + mine : nullptr, ep > 1 ? g.data() + mine : nullptr);
  r.du.assign(size_t(whole.total()), 0.0);
  for (const ParamInfo& t : l.params()) {  // this rank's pieces (under ep: the router and its own experts)
    const int64_t base = whole.find(t.name)->offset;
    if (t.offset < u || t.offset >= l.unit_begin(l.block_unit(0) + 1)) continue;
    if (ep > 1 && t.offset >= u + o.expert0 && (t.offset < mine || t.offset >= mine + El * o.expert_size)) continue;
    for (int64_t i = 0; i < t.numel; ++i) r.du[size_t(base + t.full_index(i))] = g[size_t(t.offset + i)];
  }
  return r;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  EXPECT_LE(worst, 1e-12 * std::max(1.0, scale)) << what << " (scale " << scale << ")";
}

TEST(Moe, TensorParallelExpertsMatchWholeExperts) {
  const ModelConfig m = moe_model(1.0);
  const ParamLayout whole(m);
  const std::vector<double> full = params_of(whole, 7);
  const int N = 24;
  std::mt19937_64 gen(11);
  std::normal_distribution<double> nd(0, 1);
  auto draw = [&](int ranks) {
    std::vector<std::vector<double>> v(size_t(ranks), std::vector<double>(size_t(N) * m.C));
    for (auto& r : v)
      for (double& e : r) e = nd(gen);
    return v;
  };
  const auto xs = draw(2), douts = draw(2);
  // tp 2 against whole experts.
  const MoeRun one = run_moe(m, 1, 0, nullptr, nullptr, full, xs[0], douts[0]);
  std::vector<MoeRun> tp2(2);
  run_local(2, [&](Communicator& w) { tp2[size_t(w.rank())] = run_moe(m, 2, w.rank(), &w, nullptr, full, xs[0], douts[0]); });
  for (int r = 0; r < 2; ++r) {
    expect_near(tp2[size_t(r)].out, one.out, "tp2 out, rank " + std::to_string(r));
    expect_near(tp2[size_t(r)].dx, one.dx, "tp2 dx, rank " + std::to_string(r));
  }
  std::vector<double> du(one.du.size(), 0.0);  // the shards' pieces: split ones once, replicated ones equal
  for (size_t i = 0; i < du.size(); ++i) du[i] = tp2[0].du[i] != 0 ? tp2[0].du[i] : tp2[1].du[i];
  expect_near(du, one.du, "tp2 parameter gradients");
  // ep 2 x tp 2 (world 4, tp fastest) against ep 2 with whole experts: each ep rank its own tokens.
  std::vector<MoeRun> ep2(2), both(4);
  run_local(2, [&](Communicator& w) {
    ep2[size_t(w.rank())] = run_moe(m, 1, 0, nullptr, &w, full, xs[size_t(w.rank())], douts[size_t(w.rank())]);
  });
  run_local(4, [&](Communicator& w) {
    const int t = w.rank() % 2, e = w.rank() / 2;
    auto tpc = w.split_groups({{0, 1}, {2, 3}}, "tp");
    auto epc = w.split_groups({{0, 2}, {1, 3}}, "ep");
    both[size_t(w.rank())] = run_moe(m, 2, t, tpc.get(), epc.get(), full, xs[size_t(e)], douts[size_t(e)]);
  });
  for (int r = 0; r < 4; ++r) {
    expect_near(both[size_t(r)].out, ep2[size_t(r / 2)].out, "ep2.tp2 out, rank " + std::to_string(r));
    expect_near(both[size_t(r)].dx, ep2[size_t(r / 2)].dx, "ep2.tp2 dx, rank " + std::to_string(r));
  }
  for (int e = 0; e < 2; ++e) {
    std::vector<double> d(full.size(), 0.0);
    for (size_t i = 0; i < d.size(); ++i) d[i] = both[size_t(2 * e)].du[i] != 0 ? both[size_t(2 * e)].du[i] : both[size_t(2 * e + 1)].du[i];
    expect_near(d, ep2[size_t(e)].du, "ep2.tp2 parameter gradients, ep rank " + std::to_string(e));
  }
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
