// The mpi backend under mpirun (ctest runs it at np 1..4): every collective
// against the naive reference, on the world and on sub-groups of every size
// 1..np, bit for bit on exact inputs; accounting; real overlap; errors.
// Its own main: MPI lives as long as the process, so one world serves every
// test. Flag --ranks-per-node N sets the node map (default: real hosts).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "harness/comm/testing_world.h"
#include "harness/comm/comm_testing.h"

namespace pb {
namespace {

using MpiEnv = testing::WorldEnv;

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 10; ++i) s += v[i] + "\n";
  return s;
}

class Mpi : public ::testing::Test {
 protected:
  void SetUp() override { comm_ = MpiEnv::world().communicator(MpiEnv::world().local_ranks()[0]); }
  void TearDown() override { comm_.reset(); }
  std::unique_ptr<Communicator> comm_;
};

TEST_F(Mpi, EveryCollectiveMatchesTheReferenceOnTheWorld) {
  testing::ConformanceOptions o;
  o.exact_inputs = true;  // every summation order gives the same bits
  auto failures = testing::check_collectives(*comm_, o);
  EXPECT_TRUE(failures.empty()) << join(failures);
}

TEST_F(Mpi, EveryCollectiveMatchesTheReferenceOnSubGroupsOfEverySize) {
  testing::ConformanceOptions o;
  o.exact_inputs = true;
  o.counts = {0, 7, 300};
  for (int k = 1; k <= comm_->size(); ++k) {  // ranks [0, k) form a group of size k
    auto sub = comm_->split(comm_->rank() < k ? 0 : -1, comm_->rank(), "first" + std::to_string(k));
    ASSERT_EQ(sub == nullptr, comm_->rank() >= k);
    if (!sub) continue;
    ASSERT_EQ(sub->size(), k);
    auto failures = testing::check_collectives(*sub, o);
    EXPECT_TRUE(failures.empty()) << "group of " << k << "\n" << join(failures);
  }
}

TEST_F(Mpi, AccountingFollowsTheFormula) {
  const int n = comm_->size(), r = comm_->rank();
  std::vector<float> a(8 * size_t(n), 1.0f), b(8 * size_t(n));
  comm_->all_reduce(a.data(), b.data(), 8 * size_t(n), DType::f32);  // chunks of 8: r->j sends 16 elements
  CommCounters c = comm_->log().get("world", CommOp::all_reduce);
  EXPECT_EQ(c.bytes, 32u * uint64_t(n));
  EXPECT_EQ(c.sent_bytes, uint64_t(n - 1) * 16 * 4);
  uint64_t inter = 0;
  for (int j = 0; j < n; ++j)
    if (comm_->node(j) != comm_->node(r)) inter += 16 * 4;
  EXPECT_EQ(c.inter_node_bytes, inter);
  EXPECT_GT(c.blocked_s, 0.0);
  EXPECT_EQ(b[5], float(n));
}

TEST_F(Mpi, NonBlockingCollectivesProgressWhileTheCallerSleeps) {
  if (comm_->size() < 2) GTEST_SKIP() << "needs 2 ranks (alone, an all-reduce moves nothing)";
  std::vector<float> x(size_t(1) << 21, 1.0f);  // 8 MiB
  comm_->barrier();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) comm_->all_reduce(x.data(), x.data(), x.size(), DType::f32, ReduceOp::avg);
  const double blocking = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 3;
  Request q = comm_->iall_reduce(x.data(), x.data(), x.size(), DType::f32);
  std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.3, 10 * blocking)));
  auto t1 = std::chrono::steady_clock::now();
  q.wait();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  EXPECT_LT(waited, 0.5 * blocking) << "blocking all_reduce " << blocking << " s";
  RecordProperty("blocking_s", std::to_string(blocking));
  RecordProperty("waited_s", std::to_string(waited));
  EXPECT_EQ(x[77], float(comm_->size()));
}

// all_to_all_v whose counts are equal on rank 0 only: every rank must still
// take the same MPI call (rank 0 once chose MPI_Alltoall from its own equal
// counts while its peers called MPI_Alltoallv, and the exchange hung).
TEST_F(Mpi, AllToAllVWithEqualCountsOnOneRankOnly) {
  const int n = comm_->size(), me = comm_->rank();
  auto count = [](int from, int to) { return size_t(from == 0 || to == 0 ? 1 : 1 + from + to); };
  auto value = [](int from, int to, size_t k) { return float(from * 100 + to * 10) + float(k); };
  std::vector<size_t> sc, rc;
  std::vector<float> send, recv;
  for (int j = 0; j < n; ++j) {
    sc.push_back(count(me, j));
    rc.push_back(count(j, me));
    for (size_t k = 0; k < sc.back(); ++k) send.push_back(value(me, j, k));
  }
  size_t total = 0;
  for (size_t c : rc) total += c;
  recv.assign(total, -1.0f);
  comm_->all_to_all_v(send.data(), sc, recv.data(), rc, DType::f32);
  size_t at = 0;
  for (int i = 0; i < n; ++i)
    for (size_t k = 0; k < rc[size_t(i)]; ++k, ++at) EXPECT_EQ(recv[at], value(i, me, k)) << "from " << i;
}

TEST_F(Mpi, WrongMessageSizeIsAnError) {
  if (comm_->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<float> x(8);
  if (comm_->rank() == 0) comm_->send(x.data(), 4, DType::f32, 1, /*tag=*/3);
  if (comm_->rank() == 1) {
    EXPECT_THROW(comm_->recv(x.data(), 8, DType::f32, 0, /*tag=*/3), std::logic_error);
  }
  comm_->barrier();
  EXPECT_EQ(comm_->backend(), "mpi");
}

// On ranks other than 0: print failures only, tagged with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                   r.message());
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace pb

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  pb::WorldOptions o;
  o.backend = pb::BackendKind::mpi;
  o.size = 0;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--ranks-per-node") == 0) o.ranks_per_node = std::atoi(argv[i + 1]);
  return pb::testing::run_all_tests_in_world(o, [](pb::World& world) {
    // Only rank 0 prints gtest's report; every rank's failures still fail the run.
    if (world.local_ranks()[0] != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new pb::FailurePrinter(world.local_ranks()[0]));
    }
  });
}
