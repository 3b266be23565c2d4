// Ring attention and Ulysses over a cp group of local ranks against the
// whole-sequence attention kernels (fp64): the output and the gradient of
// every token match for cp 2, 3, 4, zigzag and contiguous placement; every
// rank's attention FLOPs are the declared ones, equal across ranks with
// zigzag; the declared cp bytes are the ones sent; each ring fault changes
// the result.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <random>

#include "harness/comm/runner.h"
#include "impl/context_parallel/attention.h"
#include "impl/context_parallel/cost.h"
#include "kernels/cpu/ops.h"

namespace pb::cp {
namespace {

constexpr int B = 2, Tn = 24, H = 4, hs = 3, Ct = H * hs;

struct Full {
  std::vector<double> qkv, dout, out, dqkv;
};

Full full_attention() {
  Full f;
  std::mt19937_64 g(11);
  std::uniform_real_distribution<double> u(-1, 1);
  f.qkv.resize(size_t(B) * Tn * 3 * Ct);
  f.dout.resize(size_t(B) * Tn * Ct);
  for (auto& x : f.qkv) x = u(g);
  for (auto& x : f.dout) x = u(g);
  f.out.assign(f.dout.size(), 0);
  f.dqkv.assign(f.qkv.size(), 0);
  std::vector<double> att(size_t(B) * H * Tn * Tn), datt(att.size());
  std::vector<double> ws(kernels::attention_workspace_elems<double>(Tn, Ct, H));
  kernels::attention_forward(f.out.data(), att.data(), f.qkv.data(), B, Tn, Ct, H, ws.data());
  kernels::attention_backward(f.dqkv.data(), datt.data(), f.dout.data(), f.qkv.data(), att.data(), B, Tn, Ct, H,
                              ws.data());
  return f;
}

struct Result {
  double out_err = 0, grad_err = 0;
  std::vector<int64_t> flops;
  std::vector<int64_t> sent;
};

// Runs one algorithm over cp local ranks; errors are max |got - want|.
Result run(const Full& f, CpOptions o) {
  Result res;
  res.flops.resize(size_t(o.cp));
  res.sent.resize(size_t(o.cp));
  std::mutex mu;
  run_local(o.cp, [&](Communicator& comm) {
    const int r = comm.rank(), Tl = Tn / o.cp, N = B * Tl;
    const Placement p(Tn, o.cp, r, o.zigzag);
    std::vector<double> qkv(size_t(N) * 3 * Ct), dout(size_t(N) * Ct), out(size_t(N) * Ct, 0.0),
        dqkv(size_t(N) * 3 * Ct, 0.0);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Tl; ++t) {
        const size_t n = size_t(b) * Tl + t, src = size_t(b) * Tn + p.position(t);
        std::copy_n(f.qkv.begin() + src * 3 * Ct, 3 * Ct, qkv.begin() + n * 3 * Ct);
        std::copy_n(f.dout.begin() + src * Ct, Ct, dout.begin() + n * Ct);
      }
    MemoryTracker mt;
    AttentionStats st;
    if (o.algo == CpAlgo::ring) {
      RingAttention<double> a(o, &comm, &mt, B, Tn, H, hs);
      std::vector<double> lse(size_t(B) * H * Tl);
      a.forward(out.data(), lse.data(), qkv.data());
      a.backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data());
      st = a.stats();
      EXPECT_EQ(mt.peak(MemTag::workspace, Place::device),
                RingAttention<double>::workspace_bytes(B, Tn, o.cp, H, hs));
    } else {
      UlyssesAttention<double> a(o, &comm, &mt, B, Tn, H, hs);
      std::vector<double> qkvh(size_t(B) * Tn * 3 * (Ct / o.cp)), att(size_t(B) * (H / o.cp) * Tn * Tn);
      a.forward(out.data(), qkvh.data(), att.data(), qkv.data());
      a.backward(dqkv.data(), dout.data(), qkvh.data(), att.data());
      st = a.stats();
      EXPECT_EQ(mt.peak(MemTag::workspace, Place::device),
                UlyssesAttention<double>::workspace_bytes(B, Tn, o.cp, H, hs));
    }
    double eo = 0, eg = 0;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < Tl; ++t) {
        const size_t n = size_t(b) * Tl + t, src = size_t(b) * Tn + p.position(t);
        for (int c = 0; c < Ct; ++c) eo = std::max(eo, std::abs(out[n * Ct + c] - f.out[src * Ct + c]));
        for (int c = 0; c < 3 * Ct; ++c) eg = std::max(eg, std::abs(dqkv[n * 3 * Ct + c] - f.dqkv[src * 3 * Ct + c]));
      }
    const int64_t sent = int64_t(comm.log().by_op(CommOp::send).bytes + comm.log().by_op(CommOp::all_to_all).bytes);
    std::lock_guard<std::mutex> lk(mu);
    res.out_err = std::max(res.out_err, eo);
    res.grad_err = std::max(res.grad_err, eg);
    res.flops[size_t(r)] = st.flops;
    res.sent[size_t(r)] = sent;
  });
  return res;
}

TEST(CpAttention, MatchesWholeSequence) {
  const Full f = full_attention();
  for (CpAlgo algo : {CpAlgo::ring, CpAlgo::ulysses})
    for (int cp : {2, 3, 4})
      for (bool zz : {true, false}) {
        if (algo == CpAlgo::ulysses && H % cp) continue;
        CpOptions o;
        o.cp = cp, o.algo = algo, o.zigzag = zz;
        const Result r = run(f, o);
        const std::string what = std::string(algo == CpAlgo::ring ? "ring" : "ulysses") + " cp" + std::to_string(cp) +
                                 (zz ? " zigzag" : " contiguous");
        EXPECT_LT(r.out_err, 1e-13) << what;
        EXPECT_LT(r.grad_err, 1e-13) << what;
        AttnShape x;
        x.b = B, x.s = Tn, x.a = H, x.hs = hs, x.cp = cp, x.algo = algo, x.elem_bytes = 8, x.acc_bytes = 8;
        const CpLayerComm c = layer_comm(x, Recompute::none);
        for (int rank = 0; rank < cp; ++rank) {
          EXPECT_EQ(r.flops[size_t(rank)], attention_flops(x, rank, zz)) << what << " rank " << rank;
          EXPECT_EQ(r.sent[size_t(rank)], c.send() + c.all_to_all()) << what << " rank " << rank;
          if (zz || algo == CpAlgo::ulysses) {
            EXPECT_EQ(r.flops[size_t(rank)], r.flops[0]) << what;
          }
        }
        if (!zz && algo == CpAlgo::ring) {
          EXPECT_GT(r.flops[size_t(cp - 1)], 2 * r.flops[0]) << what;
        }
      }
}

TEST(CpAttention, RingFaultsChangeTheResult) {
  const Full f = full_attention();
  for (Fault fault : {Fault::causal_by_rank, Fault::merge_no_rescale, Fault::dkv_not_returned})
    for (int cp : {2, 3}) {
      CpOptions o;
      o.cp = cp;
      o.faults = {fault};
      const Result r = run(f, o);
      const double err = fault == Fault::dkv_not_returned ? r.grad_err : r.out_err;
      EXPECT_GT(err, 1e-3) << fault_name(fault) << " cp" << cp;
    }
}

// Without overlap the same numbers come out (only the waiting moves).
TEST(CpAttention, OverlapDoesNotChangeTheResult) {
  const Full f = full_attention();
  std::vector<std::vector<double>> outs(2);
  for (bool overlap : {true, false}) {
    std::mutex mu;
    run_local(3, [&](Communicator& comm) {
      CpOptions o;
      o.cp = 3;
      const int Tl = Tn / 3, N = B * Tl;
      const Placement p(Tn, 3, comm.rank(), true);
      std::vector<double> qkv(size_t(N) * 3 * Ct), out(size_t(N) * Ct), lse(size_t(B) * H * Tl);
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < Tl; ++t)
          std::copy_n(f.qkv.begin() + (size_t(b) * Tn + p.position(t)) * 3 * Ct, 3 * Ct,
                      qkv.begin() + (size_t(b) * Tl + t) * 3 * Ct);
      MemoryTracker mt;
      RingAttention<double> a(o, &comm, &mt, B, Tn, H, hs, overlap);
      a.forward(out.data(), lse.data(), qkv.data());
      std::lock_guard<std::mutex> lk(mu);
      if (comm.rank() == 1) outs[overlap ? 0 : 1] = out;
    });
  }
  EXPECT_EQ(outs[0], outs[1]);
}

}  // namespace
}  // namespace pb::cp
