// Test-only: a strategy run on stand-in devices (reference/device_testing.h),
// one per rank, held to the CPU run of the same spec. The stand-in's
// arithmetic is the CPU's, so the device path (states, buffers, messages
// through the seam; the run judged as on a GPU) must train bit for bit as the
// CPU run; what differs is only how it is judged and where its memory lives.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "harness/mesh.h"
#include "impl/registry.h"
#include "reference/device_testing.h"
#include "suites/conformance/engine.h"

namespace pb::testing {

// A small two-step run of `model` on `mesh`: two 12-token sequences per dp
// rank, one microbatch, lr 3e-3, the data-axis option `shard`.
inline StrategyRun small_run(const MeshShape& mesh, const std::string& model, Precision p, dp::Shard shard) {
  StrategyRun s;
  TrainConfig& c = s.spec.train;
  c.model = named_model(model);
  c.precision = p;
  c.steps = 2;
  c.batch = 2 * mesh.dp;
  c.seq = 12;
  c.microbatches = 1;
  c.optim.lr = 3e-3;
  s.spec.mesh = mesh;
  s.spec.data.shard = shard;
  s.world.timeout_s = 60;
  return s;
}

struct StandInRuns {
  ConformanceResult cpu, device;
};

// Runs s on the CPU (which must pass), then with train.device = cuda on a
// stand-in per rank, and expects the device run to pass, name the device,
// open one device per rank and one for the reference, allocate on each and
// free it all, claim no bits against the host replay (only against a bitwise
// twin, itself run on devices), rerun at fp64 on the CPU, and train bit for
// bit as the CPU run. `what` labels the failures.
inline StandInRuns expect_stand_ins_train_as_the_cpu(StrategyRun s, const std::string& what) {
  StandInRuns out;
  out.cpu = run_conformance(s);
  EXPECT_TRUE(out.cpu.pass()) << what << ": on the CPU:" << describe_failures(out.cpu);
  s.spec.train.device = Device::cuda;
  StandInDevices devices;
  s.open_device = [&] { return devices.open(); };
  const ConformanceResult& cpu = out.cpu;
  const ConformanceResult& r = out.device = run_conformance(s);
  const std::string why = what + ":" + describe_failures(r);
  EXPECT_TRUE(r.pass()) << why;
  EXPECT_EQ(r.device, "stand-in device") << why;
  // A twin the strategy declares bit-identical (recompute against none) runs
  // on devices too: a claim between two runs on the same kind of device.
  const Strategy& st = strategy_for(s.spec);
  const bool twin = st.bitwise_twin && st.bitwise_twin(s.spec);
  const auto memories = devices.memories();
  EXPECT_EQ(memories.size(), size_t((twin ? 2 : 1) * world_size(s.spec.mesh) + 1))
      << why << ": one device per rank (and per twin rank), one for the reference";
  for (const auto& m : memories) {
    EXPECT_GT(m->allocations(), 0) << why << ": a device nothing was allocated on";
    EXPECT_EQ(m->live(), 0u) << why << ": device buffers left";
  }
  EXPECT_EQ(r.bitwise_declared, twin) << why << ": a device's kernels are not the host replay's";
  EXPECT_EQ(r.bits.empty(), !twin) << why;
  EXPECT_FALSE(r.fp64.empty()) << why << ": the fp64 rerun (on the CPU) judges the logic";
  EXPECT_FALSE(r.exact.empty()) << why;
  EXPECT_EQ(r.trace.loss, cpu.trace.loss) << why;
  EXPECT_EQ(r.trace.grad_norm, cpu.trace.grad_norm) << why;
  EXPECT_EQ(r.trace.grads1, cpu.trace.grads1) << why;
  EXPECT_EQ(r.trace.params, cpu.trace.params) << why;
  return out;
}

}  // namespace pb::testing
