// Conformance of a Communicator against a naive reference, for any backend:
// every collective, in place and out of place, every dtype and reduction,
// counts that do not divide the group size, blocking and non-blocking, and
// sub-groups from split. Used by the local, mpi and nccl tests.
// Invariant: the reference reduces in rank order in the accumulation type and
// rounds once, exactly as the local backend, so results are compared bit for
// bit. With exact_inputs (small integers, |sum| <= 256) every summation order
// gives the same bits, so the mpi and nccl backends are held to bit equality
// too.
#pragma once
#include <string>
#include <vector>

#include "harness/comm/comm.h"

namespace pb::testing {

struct ConformanceOptions {
  std::vector<size_t> counts = {0, 1, 5, 37, 1027};
  std::vector<DType> dtypes = {DType::f64, DType::f32, DType::bf16};
  bool exact_inputs = false;  // small integers instead of uniform(-1, 1)
  bool exact_avg = true;      // false: avg within a few ulps (NCCL pre-scales)
  bool in_place_exchange = true;  // all_to_all and sendrecv in place (not on nccl)
  uint64_t salt = 0;          // varies the inputs between runs
};

// Runs the whole matrix on comm (collectively: every rank calls it) and
// returns a description of each mismatch; empty means conformant.
std::vector<std::string> check_collectives(Communicator& comm, const ConformanceOptions& o = {});

// A reproducibility probe: a fixed mixed sequence of blocking and overlapping
// non-blocking collectives on random inputs; returns this rank's result bits.
std::vector<uint8_t> collective_fingerprint(Communicator& comm, uint64_t salt);

}  // namespace pb::testing
