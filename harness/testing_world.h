// Test-only: the process's World (mpi or nccl, made once by a test's main())
// as a GoogleTest environment, so every test of the binary reaches it.
#pragma once
#include <gtest/gtest.h>

#include "harness/runner.h"

namespace pb::testing {

class WorldEnv : public ::testing::Environment {
 public:
  explicit WorldEnv(World* w) { world_ = w; }
  static World& world() { return *world_; }

 private:
  static inline World* world_ = nullptr;
};

}  // namespace pb::testing
