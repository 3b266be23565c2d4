// Failure handling: a rank that throws ends the run promptly with a RankError
// naming it, wherever its peers are blocked; a rank that never arrives is
// ended by the timeout with an error naming it; nothing hangs.
#include "harness/comm/runner.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "harness/comm/comm_backends.h"
#include "harness/status.h"

namespace pb {
namespace {

using Clock = std::chrono::steady_clock;

// Runs fn on a local world of n ranks; returns the error and checks the time bound.
RankError expect_failure(int n, double timeout_s, double bound_s, const std::function<void(Communicator&)>& fn,
                         WorldOptions::Progress progress = WorldOptions::Progress::automatic) {
  WorldOptions o;
  o.size = n;
  o.timeout_s = timeout_s;
  o.progress = progress;
  auto t0 = Clock::now();
  try {
    run_ranks(o, fn);
  } catch (const RankError& e) {
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), bound_s);
    return e;
  }
  ADD_FAILURE() << "run_ranks returned normally";
  return RankError(-1, "");
}

// Both ways the local backend runs non-blocking collectives (a progress
// thread; deferred to the rank's own waits).
constexpr WorldOptions::Progress kProgress[] = {WorldOptions::Progress::thread, WorldOptions::Progress::deferred};

TEST(Runner, ThrowingRankEndsTheRunAndIsNamed) {
  // Peers are blocked in a collective, a recv, a sub-group collective, and a pending non-blocking op.
  for (WorldOptions::Progress progress : kProgress) {
    RankError e = expect_failure(5, /*timeout_s=*/60, /*bound_s=*/5, [](Communicator& c) {
      std::vector<float> x(1000, 1.0f);
      c.all_reduce(x.data(), x.data(), x.size(), DType::f32);
      auto sub = c.split(c.rank() % 2, c.rank(), "parity");
      if (c.rank() == 3) throw std::runtime_error("boom at step 7");
      if (c.rank() == 0) c.recv(x.data(), 10, DType::f32, 3);
      if (c.rank() == 1) sub->barrier();
      if (c.rank() == 2) {
        Request q = c.iall_reduce(x.data(), x.data(), x.size(), DType::f32);
        q.wait();
      }
      c.barrier();
    }, progress);
    EXPECT_EQ(e.rank(), 3);
    EXPECT_STREQ(e.what(), "rank 3: boom at step 7");
  }
}

TEST(Runner, ThrowingWithOperationsPendingDoesNotHang) {
  for (WorldOptions::Progress progress : kProgress) {
    RankError e = expect_failure(3, 60, 5, [](Communicator& c) {
      std::vector<float> x(100);
      if (c.rank() == 1) {
        Request q = c.iall_reduce(x.data(), x.data(), x.size(), DType::f32);
        Request q2 = c.iall_reduce(x.data(), x.data(), x.size(), DType::f32);
        throw std::runtime_error("failed after issuing");
      }
      c.barrier();
    }, progress);
    EXPECT_EQ(e.rank(), 1);
  }
}

TEST(Runner, RankThatNeverArrivesIsEndedByTheTimeout) {
  RankError e = expect_failure(4, /*timeout_s=*/0.3, /*bound_s=*/5, [](Communicator& c) {
    if (c.rank() == 2) return;  // leaves without joining the collective
    std::vector<double> x(10);
    c.all_reduce(x.data(), x.data(), x.size(), DType::f64);
  });
  EXPECT_NE(std::string(e.what()).find("timed out after 0.3 s in all_reduce on group 'world'"), std::string::npos)
      << e.what();
  EXPECT_NE(std::string(e.what()).find("rank(s) 2 did not arrive"), std::string::npos) << e.what();
}

TEST(Runner, RecvWithNoSenderTimesOut) {
  RankError e = expect_failure(2, 0.2, 5, [](Communicator& c) {
    float x = 0;
    if (c.rank() == 0) c.recv(&x, 1, DType::f32, 1, /*tag=*/9);
  });
  EXPECT_EQ(e.rank(), 0);
  EXPECT_NE(std::string(e.what()).find("rank 1 sent nothing with tag 9"), std::string::npos) << e.what();
}

TEST(Runner, BoundaryHelperReportsAndReturnsOne) {
  WorldOptions o;
  o.size = 2;
  auto world = make_world(o);
  ::testing::internal::CaptureStderr();
  int rc = run_ranks_at_boundary(*world, [](Communicator& c) {
    if (c.rank() == 1) throw std::runtime_error("bad shard");
    c.barrier();
  });
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "rank 1: bad shard\n");
  auto ok = make_world(o);
  EXPECT_EQ(run_ranks_at_boundary(*ok, [](Communicator& c) { c.barrier(); }), 0);
}

TEST(Runner, SuccessfulRunAndBadOptions) {
  int calls = 0;
  std::mutex mu;
  run_local(3, [&](Communicator& c) {
    std::lock_guard lk(mu);
    ++calls;
    EXPECT_EQ(c.size(), 3);
    EXPECT_EQ(c.backend(), "local");
  });
  EXPECT_EQ(calls, 3);
  WorldOptions o;
  o.size = 6;
  o.ranks_per_node = 4;
  EXPECT_THROW(make_world(o), InputError);
  o.ranks_per_node = 0;
  o.timeout_s = -1;
  EXPECT_THROW(make_world(o), InputError);
  EXPECT_TRUE(backend_built(BackendKind::local));
  BackendKind b;
  EXPECT_TRUE(parse_backend("mpi", &b));
  EXPECT_EQ(b, BackendKind::mpi);
  EXPECT_FALSE(parse_backend("gloo", &b));
}

}  // namespace
}  // namespace pb
