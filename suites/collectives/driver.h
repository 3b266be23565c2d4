// The shared driver of the collective benchmark (nccl-tests' common.cu, in
// spirit): size sweep, warm-up, timing, validation and the table.
// Timing: per size and placement, `warmup` untimed calls, a barrier, then
// `iters` timed calls; time = elapsed / iters per rank, combined over ranks
// by `average` (0 rank 0, 1 mean, 2 min, 3 max; default max, the slowest rank,
// as results/SCHEMA.md defines time_us). Validation runs after timing, on
// fresh inputs, `check` times; #wrong is the number of elements (summed over
// ranks) that differ from the exact expected result.
#pragma once
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "harness/comm/comm.h"
#include "suites/collectives/coll.h"

namespace pb::coll {

enum class FailureKind { none, raise, leave, crash, stop };  // stop: SIGSTOP itself (a frozen rank)

// Bytes one rank holds per byte of the largest size (-e): its send, receive
// and in-place buffers and the host copies of inputs, junk fill, expected and
// received values, plus the backend's staging; measured at 4 local ranks x
// 64 MiB: 8.0x for alltoall, 7.0x all_reduce, 6.1x all_gather.
inline constexpr double kBufferBytesPerMaxByte = 9;

struct BenchOptions {
  size_t min_bytes = size_t(32) << 20, max_bytes = size_t(32) << 20;
  double step_factor = 0;  // > 1: multiply; otherwise add step_bytes
  size_t step_bytes = size_t(1) << 20;
  int iters = 20, warmup = 5, check = 1, average = 3;
  // Failure injection, to test that a failing rank ends the run: at the first
  // timed call, rank fail_rank throws (raise), stops taking part (leave: the
  // others wait for it until the timeout) or aborts its process (crash).
  int fail_rank = -1;
  FailureKind fail_kind = FailureKind::none;
};

struct BenchPoint {
  size_t bytes = 0, count = 0;  // S and its elements
  DType dtype = DType::f32;
  std::string redop;            // "sum", ... or "none"
  int root = -1;                // -1 unless rooted
  bool in_place = false;
  int iters = 0;
  double time_us = 0, algbw_gbps = 0, busbw_gbps = 0;
  long wrong = -1;              // -1: not checked
};

// The sizes S of the sweep, before each op rounds its counts.
std::vector<size_t> sweep_sizes(const BenchOptions& o);

// Runs one op over the sweep for one (dtype, redop, root); on_line gets the
// out-of-place and in-place points of each size, on every rank. Returns false
// if this rank left the run (FailureKind::leave): it must take no further part.
bool run_collective(Communicator& comm, const CollDesc& op, DType dtype, ReduceOp redop, int root,
                    const BenchOptions& o, const std::function<void(const BenchPoint&, const BenchPoint&)>& on_line);

// nccl-tests' table: the header, and one line per size.
void print_header(std::FILE* out);
void print_line(std::FILE* out, const BenchPoint& oop, const BenchPoint& ip);
// nccl-tests' type names (float, double, bfloat16).
const char* nccl_type_name(DType t);

}  // namespace pb::coll
