// The collective benchmark on every rank of a world: each (op, dtype, redop,
// root) case of a plan runs over the size sweep (run_collective, driver.h),
// then every rank's communication counters are gathered to rank 0.
// Invariant: the sink is called only on rank 0, by the process that hosts it,
// as the measurements happen; a failing rank ends the run (run_ranks) and the
// result says which case and size rank 0 was measuring, so the caller can
// record the failure as a result.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "harness/comm/runner.h"
#include "suites/collectives/driver.h"

namespace pb::coll {

struct BenchPlan {
  std::vector<const CollDesc*> ops;
  std::vector<DType> dtypes;
  std::vector<ReduceOp> redops;  // used by the ops that reduce (else: sum, reported as "none")
  std::vector<int> roots;        // used by the rooted ops (else: -1)
  BenchOptions bench;
};

// One case of the plan: redop "none" unless op reduces, root -1 unless rooted.
struct BenchCase {
  const CollDesc* op = nullptr;
  DType dtype = DType::f32;
  std::string redop = "none";
  int root = -1;
};

// What rank 0 sees; every member may be empty.
struct BenchSink {
  std::function<void(const BenchCase&)> on_case;  // before the case's first size
  std::function<void(const BenchCase&, const BenchPoint& oop, const BenchPoint& ip)> on_line;
};

struct BenchResult {
  // Rank 0's process only (elsewhere zero / empty):
  long wrong = 0;              // wrong elements over every point (each summed over ranks)
  double mean_busbw_gbps = 0;  // mean busbw over every point, out of and in place
  std::vector<std::vector<std::string>> counters;  // every rank's CommLog rows (CommLog::csv_header())
  // Set when a rank failed ("rank N: <error>"); `failed_at` is the case rank 0
  // was measuring (op null if it was not inside one) and `failed_bytes` its size.
  std::string error;
  BenchCase failed_at;
  size_t failed_bytes = 0;
};

// Runs the plan on every rank `world` hosts. Never throws for a rank's
// failure: it is returned in BenchResult::error.
BenchResult run_benchmark(World& world, const BenchPlan& plan, const BenchSink& sink = {});

}  // namespace pb::coll
