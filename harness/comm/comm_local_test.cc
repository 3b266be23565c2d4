// The local backend: every collective against the naive reference at world
// sizes 1..8 (bit for bit), the same under chaos delays, reproducibility,
// real overlap of non-blocking calls, two-level all-reduce, and misuse that
// must be reported rather than hang.
#include <sched.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include "harness/comm/comm_testing.h"
#include "harness/mesh.h"
#include "harness/comm/runner.h"
#include "harness/status.h"

namespace pb {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Runs the conformance matrix on every rank; returns every rank's failures.
std::vector<std::string> conformance(int n, const testing::ConformanceOptions& co, WorldOptions o = {}) {
  std::mutex mu;
  std::vector<std::string> all;
  run_local(n, [&](Communicator& c) {
    auto f = testing::check_collectives(c, co);
    std::lock_guard lk(mu);
    all.insert(all.end(), f.begin(), f.end());
  }, o);
  return all;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 10; ++i) s += v[i] + "\n";
  return s;
}

class LocalConformance : public ::testing::TestWithParam<int> {};

TEST_P(LocalConformance, EveryCollectiveMatchesTheRankOrderReferenceBitForBit) {
  auto failures = conformance(GetParam(), {});
  EXPECT_TRUE(failures.empty()) << join(failures);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, LocalConformance, ::testing::Range(1, 9));

TEST(LocalChaos, CollectivesGiveTheSameBitsUnderRandomDelays) {
  testing::ConformanceOptions co;
  co.counts = {0, 5, 1027};
  WorldOptions o;
  o.chaos = {.enabled = true, .seed = 7, .max_delay_us = 50};
  for (int n : {3, 5}) {
    auto failures = conformance(n, co, o);
    EXPECT_TRUE(failures.empty()) << "world " << n << "\n" << join(failures);
  }
}

std::vector<std::vector<uint8_t>> fingerprints(int n, WorldOptions o) {
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(n));
  run_local(n, [&](Communicator& c) { out[size_t(c.rank())] = testing::collective_fingerprint(c, /*salt=*/3); }, o);
  return out;
}

TEST(LocalChaos, OverlappedSequenceIsBitReproducibleAcrossDelays) {
  const auto reference = fingerprints(4, {});
  EXPECT_EQ(fingerprints(4, {}), reference);
  for (uint64_t seed : {1, 2}) {
    WorldOptions o;
    o.chaos = {.enabled = true, .seed = seed, .max_delay_us = 300};
    EXPECT_EQ(fingerprints(4, o), reference) << "chaos seed " << seed;
  }
}

TEST(LocalComm, EveryRankGetsIdenticalBits) {
  const auto f = fingerprints(5, {});
  for (size_t r = 1; r < f.size(); ++r) {  // the all-reduced parts (fp32 sum, bf16 avg then max) agree
    EXPECT_TRUE(std::equal(f[0].begin(), f[0].begin() + 4099 * 6, f[r].begin())) << "rank " << r;
  }
}

TEST(LocalComm, NonBlockingCallsProgressWhileTheCallerIsBusy) {
  WorldOptions o;
  o.progress = WorldOptions::Progress::thread;  // automatic defers on a machine with fewer than 4 cores
  run_local(2, [](Communicator& c) {
    std::vector<float> x(size_t(1) << 22, 1.0f);  // 16 MiB
    auto t0 = Clock::now();
    c.all_reduce(x.data(), x.data(), x.size(), DType::f32);
    const double blocking = since(t0);
    Request q = c.iall_reduce(x.data(), x.data(), x.size(), DType::f32);
    std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.2, 10 * blocking)));
    auto t1 = Clock::now();
    q.wait();
    const double waited = since(t1);
    EXPECT_LT(waited, 0.5 * blocking) << "blocking " << blocking << " s";
    EXPECT_EQ(x[123], 4.0f);
  }, o);
}

// Deferred progress: a non-blocking collective runs on its rank's own thread
// when the rank waits for it, not before; in issue order with the blocking
// calls of its communicator.
TEST(LocalComm, DeferredCollectivesRunAtTheWaitInIssueOrder) {
  WorldOptions o;
  o.progress = WorldOptions::Progress::deferred;
  run_local(3, [](Communicator& c) {
    std::vector<float> x(1000, 1.0f), y(7, 2.0f);
    Request q = c.iall_reduce(x.data(), x.data(), x.size(), DType::f32);
    Request q2 = c.iall_reduce(y.data(), y.data(), y.size(), DType::f32);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(q.test());  // a test does not run it: it would block on the peers
    EXPECT_EQ(x[5], 1.0f);
    q2.wait();  // runs q, then q2
    EXPECT_TRUE(q.test());
    EXPECT_EQ(x[5], 3.0f);
    EXPECT_EQ(y[6], 6.0f);
    q.wait();
    Request q3 = c.iall_reduce(x.data(), x.data(), x.size(), DType::f32);
    c.all_reduce(y.data(), y.data(), y.size(), DType::f32);  // a blocking call runs what is queued first
    EXPECT_TRUE(q3.test());
    EXPECT_EQ(x[999], 9.0f);
    EXPECT_EQ(y[0], 18.0f);
  }, o);
}

// A rank that blocks anywhere (a receive, a collective of another group) runs
// its queued collectives first, as MPI's blocking calls progress outstanding
// requests: a peer may be waiting in one of them before it can send or join.
TEST(LocalComm, DeferredCollectivesProgressWhereverTheRankBlocks) {
  WorldOptions o;
  o.progress = WorldOptions::Progress::deferred;
  o.timeout_s = 20;  // a deadlock fails the test instead of hanging it
  run_local(2, [](Communicator& c) {
    std::vector<float> x(100, float(c.rank() + 1));
    float msg = 0;
    // Rank 0 receives before waiting; rank 1 waits before sending.
    Request q = c.iall_reduce(x.data(), x.data(), x.size(), DType::f32);
    if (c.rank() == 0) {
      c.recv(&msg, 1, DType::f32, 1);
      EXPECT_EQ(msg, 42.0f);
      q.wait();
    } else {
      q.wait();
      msg = 42.0f;
      c.send(&msg, 1, DType::f32, 0);
    }
    EXPECT_EQ(x[50], 3.0f);
    // Rank 0 joins a blocking collective of another group first; rank 1 waits first.
    auto pair = c.split(0, c.rank(), "pair");
    Request p = pair->iall_reduce(x.data(), x.data(), x.size(), DType::f32);
    std::vector<double> z(3, 1.0);
    if (c.rank() == 0) {
      c.all_reduce(z.data(), z.data(), z.size(), DType::f64);
      p.wait();
    } else {
      p.wait();
      c.all_reduce(z.data(), z.data(), z.size(), DType::f64);
    }
    EXPECT_EQ(x[0], 6.0f);
    EXPECT_EQ(z[2], 2.0);
  }, o);
}

TEST(LocalComm, BothProgressModesGiveTheSameBits) {
  WorldOptions thread, deferred;
  thread.progress = WorldOptions::Progress::thread;
  deferred.progress = WorldOptions::Progress::deferred;
  EXPECT_EQ(fingerprints(4, thread), fingerprints(4, deferred));
}

TEST(LocalComm, AutomaticProgressDefersWhenRanksAndTheirThreadsOutnumberTheCores) {
  WorldOptions o;
  o.size = 2;
  EXPECT_FALSE(local_progress_deferred(o, 4));
  EXPECT_TRUE(local_progress_deferred(o, 3));
  EXPECT_TRUE(local_progress_deferred(o, 2));
  o.size = 1;
  EXPECT_FALSE(local_progress_deferred(o, 2));
  o.progress = WorldOptions::Progress::deferred;
  EXPECT_TRUE(local_progress_deferred(o, 64));
  o.progress = WorldOptions::Progress::thread;
  o.size = 16;
  EXPECT_FALSE(local_progress_deferred(o, 2));
}

TEST(LocalComm, AutomaticBindingBindsRanksWithoutProgressThreads) {
  WorldOptions o;
  o.size = 2;
  EXPECT_TRUE(local_binds_ranks(o, 2));   // deferred, one core each
  EXPECT_TRUE(local_binds_ranks(o, 3));
  EXPECT_FALSE(local_binds_ranks(o, 4));  // progress threads beside them: the scheduler places both
  EXPECT_TRUE(local_binds_ranks(o, 1));   // both on the one core
  o.progress = WorldOptions::Progress::thread;
  EXPECT_FALSE(local_binds_ranks(o, 2));  // a progress thread would inherit its rank's core
  o.progress = WorldOptions::Progress::deferred;
  EXPECT_TRUE(local_binds_ranks(o, 64));
  o.binding = WorldOptions::Binding::none;
  EXPECT_FALSE(local_binds_ranks(o, 2));
  o.binding = WorldOptions::Binding::automatic;
  o.size = 1;  // one rank runs on the calling thread
  EXPECT_FALSE(local_binds_ranks(o, 2));
}

// Each rank's thread runs on one core, the calling thread's cores in turn
// (rank i on the (i mod n)-th: an even share of each when the ranks
// outnumber the cores); unbound, each may run on all of them.
TEST(LocalComm, BoundRanksEachRunOnACoreOfTheirOwn) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  std::vector<int> cores;
  for (int k = 0; k < CPU_SETSIZE; ++k)
    if (CPU_ISSET(k, &mine)) cores.push_back(k);
  const int n = int(cores.size());
  if (n < 2) GTEST_SKIP() << "this thread may run on " << n << " core: nothing to bind ranks apart on";
  for (int size : {2, n + 1})
    for (auto binding : {WorldOptions::Binding::automatic, WorldOptions::Binding::none}) {
      WorldOptions o;
      o.size = size;
      o.progress = WorldOptions::Progress::deferred;
      o.binding = binding;
      auto world = make_local_world(o);
      EXPECT_EQ(world->binds_ranks(), binding == WorldOptions::Binding::automatic);
      std::vector<int> count(static_cast<size_t>(size)), cpu(static_cast<size_t>(size), -1);
      run_ranks(*world, [&](Communicator& c) {
        cpu_set_t s;
        CPU_ZERO(&s);
        ASSERT_EQ(sched_getaffinity(0, sizeof s, &s), 0);
        count[size_t(c.rank())] = CPU_COUNT(&s);
        for (int k = 0; k < CPU_SETSIZE; ++k)
          if (CPU_ISSET(k, &s)) {
            cpu[size_t(c.rank())] = k;
            break;
          }
        c.barrier();
      });
      for (int r = 0; r < size; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(size));
        if (binding == WorldOptions::Binding::automatic) {
          EXPECT_EQ(count[size_t(r)], 1);
          EXPECT_EQ(cpu[size_t(r)], cores[size_t(r % n)]);
        } else {
          EXPECT_EQ(count[size_t(r)], n);
        }
      }
    }
  // A world started from a bound thread shares that thread's core.
  WorldOptions o;
  o.size = 2;
  o.progress = WorldOptions::Progress::deferred;
  run_local(2, [&](Communicator& outer) {
    if (outer.rank() != 1) return;
    std::vector<int> cpu(2, -1);
    run_ranks(*make_local_world(o), [&](Communicator& c) {
      for (int k = 0; k < CPU_SETSIZE; ++k) {
        cpu_set_t s;
        CPU_ZERO(&s);
        sched_getaffinity(0, sizeof s, &s);
        if (CPU_ISSET(k, &s)) {
          cpu[size_t(c.rank())] = k;
          break;
        }
      }
    });
    EXPECT_EQ(cpu[0], cores[1]);
    EXPECT_EQ(cpu[1], cores[1]);
  }, o);
}

TEST(LocalComm, TwoLevelAllReduceMatchesFlatAndCutsInterNodeTraffic) {
  WorldOptions o;
  o.ranks_per_node = 4;
  run_local(8, [](Communicator& c) {
    const size_t n = 1001;  // does not divide by 4
    std::vector<double> flat(n), two(n);
    for (size_t i = 0; i < n; ++i) flat[i] = two[i] = double((i * 7 + size_t(c.rank()) * 3) % 11);  // exact sums
    c.all_reduce(flat.data(), flat.data(), n, DType::f64);
    const uint64_t flat_inter = c.log().by_group("world").inter_node_bytes;
    auto groups = split_by_node({{0, 1, 2, 3, 4, 5, 6, 7}}, 4);
    auto intra = c.split_groups(groups.intra, "world.intra");
    auto inter = c.split_groups(groups.inter, "world.inter");
    two_level_all_reduce(*intra, *inter, two.data(), n, DType::f64);
    EXPECT_EQ(two, flat);
    EXPECT_EQ(c.log().by_group("world.intra").inter_node_bytes, 0u);
    const uint64_t two_inter = c.log().by_group("world.inter").inter_node_bytes;
    EXPECT_GT(two_inter, 0u);
    EXPECT_LT(two_inter * 3, flat_inter);  // ~n/4 shard crosses once vs every peer chunk crossing
    two_level_all_reduce(*intra, *inter, two.data(), n, DType::f64, ReduceOp::avg);
    EXPECT_DOUBLE_EQ(two[17], flat[17]);  // avg of identical values
  }, o);
}

TEST(LocalComm, LargeBuffersTakeTheStreamingStorePathCorrectly) {
  // Outputs >= kStreamBytes (8 MiB) use non-temporal stores; odd counts make unaligned heads and tails.
  run_local(3, [](Communicator& c) {
    const size_t n = (size_t(16) << 20) / 4 + 13;
    std::vector<float> x(n), y(n), z(n / 3 + 1);
    auto value = [](int r, size_t i) { return float(i % 97) * 0.25f + float(r); };  // exact sums
    for (size_t i = 0; i < n; ++i) x[i] = y[i] = value(c.rank(), i);
    c.all_reduce(x.data(), x.data(), n, DType::f32);  // in place
    c.reduce(y.data(), c.rank() == 1 ? y.data() : nullptr, n, DType::f32, ReduceOp::sum, 1);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += x[i] != 3 * value(0, i) + 3;
    EXPECT_EQ(bad, 0u);
    if (c.rank() == 1) {
      for (size_t i = 1; i < n; i += 4099) EXPECT_EQ(y[i], 3 * value(0, i) + 3);
    }
    std::vector<float> in(3 * (n / 3));
    for (size_t i = 0; i < in.size(); ++i) in[i] = value(c.rank(), i);
    c.reduce_scatter(in.data(), z.data() + 1, n / 3, DType::f32, ReduceOp::max);  // unaligned output
    for (size_t i = 0; i < n / 3; i += 977) EXPECT_EQ(z[1 + i], value(2, size_t(c.rank()) * (n / 3) + i));
  });
}

TEST(LocalComm, MismatchedCallsAreReportedWithTheRanks) {
  try {
    run_local(3, [](Communicator& c) {
      std::vector<float> x(16);
      c.all_reduce(x.data(), x.data(), c.rank() == 2 ? 8 : 16, DType::f32);
    });
    FAIL() << "expected RankError";
  } catch (const RankError& e) {  // every member reaches the same verdict; the message names the odd one
    EXPECT_NE(std::string(e.what()).find("rank 2 called all_reduce(fp32, count 8"), std::string::npos) << e.what();
  }
}

TEST(LocalComm, MessageSizeMismatchIsAnError) {
  EXPECT_THROW(run_local(2, [](Communicator& c) {
    std::vector<float> x(8);
    if (c.rank() == 0) c.send(x.data(), 8, DType::f32, 1);
    else c.recv(x.data(), 4, DType::f32, 0);
  }), RankError);
}

TEST(LocalComm, BadArgumentsThrowBeforeCommunicating) {
  run_local(2, [](Communicator& c) {
    float x = 0;
    EXPECT_THROW(c.send(&x, 1, DType::f32, 5), std::invalid_argument);
    const size_t counts[1] = {1};
    EXPECT_THROW(c.all_gather_v(&x, &x, counts, DType::f32), std::invalid_argument);
    std::vector<float> a(4);
    const size_t two[2] = {2, 2};
    EXPECT_THROW(c.all_to_all_v(a.data(), two, a.data(), two, DType::f32), std::invalid_argument);
  });
}

TEST(LocalComm, AGroupTakesSendsAndReceivesOnlyAndDoesNotNest) {
  run_local(2, [](Communicator& c) {
    float x = 1, y = 0;
    EXPECT_THROW(c.group_end(), std::logic_error);
    c.group_start();
    EXPECT_THROW(c.group_start(), std::logic_error);
    EXPECT_THROW(c.all_reduce(&x, &x, 1, DType::f32), std::logic_error);  // blocking
    EXPECT_THROW(c.iall_reduce(&x, &x, 1, DType::f32), std::logic_error);  // a collective
    EXPECT_THROW(c.send(&x, 1, DType::f32, 1 - c.rank()), std::logic_error);
    Request r = c.irecv(&y, 1, DType::f32, 1 - c.rank());
    Request s = c.isend(&x, 1, DType::f32, 1 - c.rank());
    EXPECT_TRUE(c.in_group());
    c.group_end();
    EXPECT_FALSE(c.in_group());
    r.wait();
    s.wait();
    EXPECT_EQ(y, 1.0f);
    c.barrier();  // usable again
  });
}

}  // namespace
}  // namespace pb
