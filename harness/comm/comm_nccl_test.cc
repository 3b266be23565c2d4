// The nccl backend under mpirun, one GPU per rank: the conformance matrix on
// exact inputs (bit for bit, except avg, which NCCL computes by pre-scaling).
// Where there are fewer GPUs than ranks on a node, it prints the reason and
// exits 77, which ctest reports as skipped.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "harness/comm/testing_world.h"
#include "harness/comm/comm_nccl.h"
#include "harness/comm/comm_testing.h"

namespace pb {
namespace {

using NcclEnv = testing::WorldEnv;

TEST(Nccl, EveryCollectiveMatchesTheReference) {
  World& w = NcclEnv::world();
  auto comm = w.communicator(w.local_ranks()[0]);
  testing::ConformanceOptions o;
  o.exact_inputs = true;
  o.exact_avg = false;           // ncclAvg pre-scales each input by 1/n
  o.in_place_exchange = false;   // NCCL has no in-place all_to_all / sendrecv
  auto failures = testing::check_collectives(*comm, o);
  std::string msg;
  for (size_t i = 0; i < failures.size() && i < 10; ++i) msg += failures[i] + "\n";
  EXPECT_TRUE(failures.empty()) << msg;
  EXPECT_FALSE(comm->buffers().is_host());
}

}  // namespace
}  // namespace pb

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return pb::testing::run_all_tests_on_gpus("nccl backend test");
}
