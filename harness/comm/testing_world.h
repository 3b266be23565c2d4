// Test-only: the process's World (mpi or nccl, made once by a test's main())
// as a GoogleTest environment, so every test of the binary reaches it, and
// the main() body that sets it up.
#pragma once
#include <gtest/gtest.h>

#include <functional>

#include "harness/comm/comm_backends.h"
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

}  // namespace pb::testing
