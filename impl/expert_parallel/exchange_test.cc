// The MoE layer's collectives over a rank's groups (exchange.h) against the
// single-device LocalMoeExchange on the local backend: the per-expert counts
// reach their owners; dispatch lands every source's rows at its owner in
// source order and combine brings them back (permuted under the
// ep_combine_permuted fault); global capacity's counts are gathered rank-major
// and the probabilities summed; and through the MoE MLP, tensor-parallel and
// expert-parallel experts give the whole experts' outputs and gradients.
#include "impl/expert_parallel/exchange.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "harness/comm/runner.h"
#include "reference/moe_testing.h"

namespace pb::ep {
namespace {

constexpr int kExperts = 8, kRows = 3, kWidth = 5;

// Source s's rows (expert e's count[e] at e * kRows), values naming (s, e, row, column).
struct Source {
  std::vector<int32_t> count;
  std::vector<double> rows;
};
Source source(int s) {
  std::mt19937 g(uint32_t(100 + s));
  Source src{std::vector<int32_t>(kExperts), std::vector<double>(size_t(kExperts) * kRows * kWidth, -1.0)};
  for (int e = 0; e < kExperts; ++e) {
    src.count[size_t(e)] = int32_t(g() % (kRows + 1));
    for (int j = 0; j < src.count[size_t(e)]; ++j)
      for (int c = 0; c < kWidth; ++c)
        src.rows[(size_t(e) * kRows + size_t(j)) * kWidth + size_t(c)] = s * 1000 + e * 100 + j * 10 + c;
  }
  return src;
}

MoeRows rows_of(const Source& s, const std::vector<int32_t>& recv, std::vector<double>& send,
                std::vector<double>& staged) {
  MoeRows r;
  r.count = s.count.data();
  r.recv = recv.data();
  r.experts = kExperts;
  r.rows = kRows;
  r.width = kWidth;
  r.dtype = DType::f64;
  r.send = send.data();
  r.staged = staged.data();
  r.copy = [](void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); };
  return r;
}

TEST(MoeExchange, DispatchAndCombineMatchTheLocalExchange) {
  const size_t all = size_t(kExperts) * kRows * kWidth;
  for (int ep : {2, 4}) {
    const int El = kExperts / ep;
    std::vector<Source> srcs;
    for (int s = 0; s < ep; ++s) srcs.push_back(source(s));
    run_local(ep, [&](Communicator& w) {
      const int me = w.rank();
      const Source& mine = srcs[size_t(me)];
      const MoeScope scope = moe_scope(nullptr, &w, nullptr, {});
      ASSERT_EQ(scope.ep_size(), ep);
      std::vector<int32_t> recv(size_t(kExperts), -1);
      scope.exchange->exchange_counts(mine.count.data(), recv.data(), kExperts);
      for (int s = 0; s < ep; ++s)
        for (int le = 0; le < El; ++le)
          EXPECT_EQ(recv[size_t(s * El + le)], srcs[size_t(s)].count[size_t(me * El + le)]) << "ep" << ep;
      std::vector<double> send(all), staged(all), owner(all, -1.0), back(all, -1.0), permuted(all, -1.0);
      const MoeRows r = rows_of(mine, recv, send, staged);
      scope.exchange->dispatch(owner.data(), mine.rows.data(), r);
      // The owner's local expert le: every source's rows for it (the local
      // exchange's, expert e at e * kRows), sources in rank order.
      const LocalMoeExchange local;
      for (int le = 0; le < El; ++le) {
        const int e = me * El + le;
        size_t at = size_t(le) * size_t(ep) * kRows;
        for (int s = 0; s < ep; ++s) {
          std::vector<double> one(all, -1.0), none_send(all), none_staged(all);
          local.dispatch(one.data(), srcs[size_t(s)].rows.data(),
                         rows_of(srcs[size_t(s)], srcs[size_t(s)].count, none_send, none_staged));
          for (int j = 0; j < srcs[size_t(s)].count[size_t(e)]; ++j, ++at)
            for (int c = 0; c < kWidth; ++c)
              ASSERT_EQ(owner[at * kWidth + size_t(c)], one[(size_t(e) * kRows + size_t(j)) * kWidth + size_t(c)])
                  << "ep" << ep << " rank " << me << " expert " << e << " source " << s << " row " << j;
        }
      }
      // Back to the sources: the rows they sent, in order (permuted: reversed
      // within each expert, as the local exchange permutes).
      scope.exchange->combine(back.data(), owner.data(), r, false);
      scope.exchange->combine(permuted.data(), owner.data(), r, true);
      std::vector<double> want(all, -1.0), want_permuted(all, -1.0);
      local.combine(want.data(), mine.rows.data(), r, false);
      local.combine(want_permuted.data(), mine.rows.data(), r, true);
      for (int e = 0; e < kExperts; ++e)
        for (size_t i = 0; i < size_t(mine.count[size_t(e)]) * kWidth; ++i) {
          const size_t at = size_t(e) * kRows * kWidth + i;
          ASSERT_EQ(back[at], want[at]) << "ep" << ep << " expert " << e;
          ASSERT_EQ(back[at], mine.rows[at]);
          ASSERT_EQ(permuted[at], want_permuted[at]) << "ep" << ep << " expert " << e;
        }
    });
  }
}

TEST(MoeExchange, CapacityCountsAreGatheredRankMajorAndProbabilitiesSummed) {
  const int R = 3, n = 4;
  run_local(R, [&](Communicator& w) {
    const MoeScope scope = moe_scope(&w, nullptr, nullptr, {});
    ASSERT_EQ(scope.capacity_ranks(), R);
    EXPECT_EQ(scope.exchange->capacity_rank(), w.rank());
    std::vector<double> mine(n), all(size_t(R) * n), p(n);
    for (int i = 0; i < n; ++i) mine[size_t(i)] = p[size_t(i)] = 10 * w.rank() + i;
    scope.exchange->gather_routed(mine.data(), all.data(), size_t(n));
    scope.exchange->sum_probs(p.data(), size_t(n));
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < n; ++i) EXPECT_EQ(all[size_t(r * n + i)], 10 * r + i);
    for (int i = 0; i < n; ++i) EXPECT_EQ(p[size_t(i)], 10 * (0 + 1 + 2) + R * i);
    // One rank alone: the local exchange's answers.
    const LocalMoeExchange local;
    std::vector<double> one(n), q = mine;
    local.gather_routed(mine.data(), one.data(), size_t(n));
    local.sum_probs(q.data(), size_t(n));
    EXPECT_EQ(one, mine);
    EXPECT_EQ(q, mine);
  });
}

TEST(MoeExchange, NoGroupsIsTheLocalScope) {
  const MoeScope none = moe_scope(nullptr, nullptr, nullptr, {MoeFault::router_grad_missing});
  EXPECT_EQ(none.exchange, nullptr);
  EXPECT_EQ(none.ep_size(), 1);
  EXPECT_EQ(none.tp_size(), 1);
  EXPECT_TRUE(none.has(MoeFault::router_grad_missing));
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
  MoeMlp<double> mlp(l, N, moe_scope(nullptr, epc, tpc, {}));
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

TEST(MoeExchange, TensorAndExpertParallelExpertsMatchWholeExperts) {
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

}  // namespace
}  // namespace pb::ep
