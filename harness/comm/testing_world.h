// Test-only: the process's World (mpi or nccl, made once by a test's main())
// as a GoogleTest environment, so every test of the binary reaches it, and
// the main() body that sets it up.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "harness/comm/comm_backends.h"
#include "harness/comm/comm_nccl.h"
#include "harness/comm/runner.h"

namespace pb::testing {

class WorldEnv : public ::testing::Environment {
 public:
  explicit WorldEnv(World* w) { world_ = w; }
  static World& world() { return *world_; }

 private:
  static inline World* world_ = nullptr;
};

// A test main()'s body after InitGoogleTest: makes the world, registers it,
// lets `before` adjust the run (e.g. gtest's listeners), runs every test and
// ends the world (MPI_Finalize) before returning RUN_ALL_TESTS's status.
inline int run_all_tests_in_world(const WorldOptions& o, const std::function<void(World&)>& before = {}) {
  std::unique_ptr<World> world = make_world(o);
  ::testing::AddGlobalTestEnvironment(new WorldEnv(world.get()));
  if (before) before(*world);
  const int rc = RUN_ALL_TESTS();
  world.reset();
  return rc;
}

// A GPU test's main() body after InitGoogleTest, under mpirun: unless every
// rank on this node has a GPU of its own, prints "SKIPPED: <what> needs one
// GPU per rank: <why>" and returns 77 (ctest's skip code for these tests);
// otherwise runs every test on the nccl world.
inline int run_all_tests_on_gpus(const std::string& what) {
  std::string why;
  const int devices = nccl_device_count(&why);
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int ranks_here = local ? std::atoi(local) : 1;
  if (devices < ranks_here) {
    if (devices > 0) why = std::to_string(devices) + " CUDA device(s) for " + std::to_string(ranks_here) + " ranks";
    std::printf("SKIPPED: %s needs one GPU per rank: %s\n", what.c_str(), why.c_str());
    return 77;
  }
  WorldOptions o;
  o.backend = BackendKind::nccl;
  o.size = 0;
  return run_all_tests_in_world(o);
}

}  // namespace pb::testing
