// Communication accounting, per rank. Every call on a Communicator adds one
// record to its rank's CommLog (shared by all the groups the rank belongs to):
// op, group, dtype, count, logical bytes, bytes sent, bytes sent across a node
// boundary, and time blocked. The log keeps totals per (group, op), an optional
// per-call trace, and writes them as CSV.
//
// Definitions (each figure is written once, here):
//  - bytes: the logical size S of the operation in nccl-tests' convention
//    (nccl-tests doc/PERFORMANCE.md), independent of the algorithm:
//    all_reduce, broadcast, reduce, send, recv, sendrecv: count * sizeof(dtype);
//    reduce_scatter: the whole input, sum of the per-rank counts * sizeof
//    (recvcount * n * sizeof for equal counts); all_gather: the whole output,
//    sum of the per-rank counts * sizeof; all_to_all: this rank's whole send
//    buffer; barrier: 0.
//  - sent_bytes: the bytes this rank sends to other ranks under the direct-
//    exchange algorithm the local backend runs (comm_traffic() in comm.cc); the
//    mpi and nccl libraries choose their own algorithms at run time, so there
//    the figure is this same model, comparable across backends.
//  - inter_node_bytes: the part of sent_bytes addressed to ranks on another
//    node (node = world rank / ranks_per_node).
//  - blocked_s: wall time inside blocking calls plus time inside wait().
// Invariant: a non-blocking call is counted when issued; its wait() time is
// added to the same (group, op) entry later, unless reset() came in between.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "harness/dtype.h"

namespace pb {

enum class CommOp : uint8_t {
  all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all,
  send, recv, sendrecv, barrier
};
inline constexpr int kNumCommOps = 10;
std::string_view comm_op_name(CommOp op);

struct CommCounters {
  uint64_t calls = 0;
  uint64_t bytes = 0;             // logical, nccl-tests convention
  uint64_t sent_bytes = 0;        // sent to other ranks (direct-exchange model)
  uint64_t inter_node_bytes = 0;  // of sent_bytes, to ranks on another node
  double blocked_s = 0;           // inside blocking calls and wait()

  CommCounters& operator+=(const CommCounters& o);
};

// One call, kept when tracing is on.
struct CommRecord {
  std::string group;
  CommOp op = CommOp::barrier;
  DType dtype = DType::f32;
  uint64_t count = 0;
  CommCounters counters;  // calls == 1
};

class CommLog {
 public:
  // Identifies the entry (and trace record) of one call, for add_blocked().
  struct Ticket {
    size_t entry = SIZE_MAX;
    size_t trace = SIZE_MAX;
    uint64_t epoch = 0;
  };

  explicit CommLog(int world_rank = 0) : rank_(world_rank) {}
  int rank() const { return rank_; }

  Ticket record(std::string_view group, CommOp op, DType dtype, uint64_t count,
                uint64_t bytes, uint64_t sent_bytes, uint64_t inter_node_bytes);
  void add_blocked(const Ticket& t, double seconds);

  CommCounters total() const;
  CommCounters get(std::string_view group, CommOp op) const;
  CommCounters by_group(std::string_view group) const;
  CommCounters by_op(CommOp op) const;
  // Groups with at least one entry, in first-use order.
  std::vector<std::string> groups() const;

  // Zeroes every counter and clears the trace (e.g. after warm-up).
  void reset();
  void set_trace(bool on);
  std::vector<CommRecord> trace() const;

  // CSV: one row per (group, op) that has calls, columns csv_header().
  static std::vector<std::string> csv_header();
  std::vector<std::vector<std::string>> csv_rows() const;
  void write_csv(std::ostream& out, bool with_header = true) const;

 private:
  struct Entry {
    std::string group;
    CommOp op;
    CommCounters c;
  };
  size_t find_or_add(std::string_view group, CommOp op);

  int rank_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  std::vector<CommRecord> trace_;
  bool tracing_ = false;
  uint64_t epoch_ = 0;
};

}  // namespace pb
