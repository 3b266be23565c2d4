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
  std::string why;
  const int devices = pb::nccl_device_count(&why);
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int ranks_here = local ? std::atoi(local) : 1;
  if (devices < ranks_here) {
    if (devices > 0) why = std::to_string(devices) + " CUDA device(s) for " + std::to_string(ranks_here) + " ranks";
    std::printf("SKIPPED: nccl backend test needs one GPU per rank: %s\n", why.c_str());
    return 77;
  }
  pb::WorldOptions o;
  o.backend = pb::BackendKind::nccl;
  o.size = 0;
  return pb::testing::run_all_tests_in_world(o);
}
