// The Communicator: one interface over every backend (local threads, MPI,
// NCCL). The public calls validate their arguments, record accounting in the
// rank's CommLog, and hand an OpDesc to the backend (run = blocking, start =
// non-blocking). Buffers are raw pointers to `count` elements of a DType.
//
// Semantics every backend keeps:
//  - In place is pointer equality, in NCCL's convention: all_reduce, reduce,
//    broadcast, all_to_all, sendrecv: send == recv; reduce_scatter: recv ==
//    send + offset(rank) (the rest of send is unspecified afterwards);
//    all_gather: send == recv + offset(rank). Partial overlap is not allowed.
//  - Reductions: sum, avg (= sum / n, divided once), max. bf16 accumulates in
//    fp32 and rounds once. On the local backend the sum runs in rank order,
//    ((x0 + x1) + x2) + ..., so results are bit-reproducible and identical on
//    every rank.
//  - Ordering: collectives on one communicator run in issue order (a stream);
//    send/recv match by (peer, tag) in FIFO order and never wait on the
//    stream, so an irecv posted before a collective cannot deadlock it.
//    nccl has no tags (matches_tags() false): a pair's n-th send matches the
//    n-th receive, and a send completes only once the receive is posted, so
//    sends and receives that cross between two ranks are posted as one group
//    (group_start/group_end).
//  - A communicator is used by one thread at a time (its rank's).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "harness/comm/comm_log.h"
#include "harness/dtype.h"
#include "harness/tensor.h"

namespace pb {

enum class ReduceOp : uint8_t { sum, avg, max };
std::string_view reduce_op_name(ReduceOp op);
bool parse_reduce_op(std::string_view s, ReduceOp* out);

// A peer failed and the world was aborted: thrown by every blocked call of the
// other ranks, so the runner can tell the first failure from its echoes.
class CommAborted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A wait exceeded the world's timeout; the message names who did not arrive.
class CommTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One operation as the front end hands it to a backend. Counts are elements.
struct OpDesc {
  CommOp op = CommOp::barrier;
  const void* send = nullptr;
  void* recv = nullptr;
  DType dtype = DType::f32;
  ReduceOp redop = ReduceOp::sum;
  size_t count = 0;                  // all_reduce, broadcast, reduce, send, recv, sendrecv
  std::vector<size_t> counts;        // per group rank: reduce_scatter recv counts,
                                     // all_gather send counts, all_to_all send counts
  std::vector<size_t> recv_counts;   // all_to_all: counts received from each rank
  int root = 0;                      // broadcast/reduce root; send/recv peer; sendrecv dest
  int source = 0;                    // sendrecv source
  int tag = 0;
  // all_to_all_v: counts may differ between ranks (each rank knows only its
  // own row and column of the exchange), so a backend may not pick an
  // equal-count call from its own counts alone.
  bool varying = false;

  size_t elem_size() const { return dtype_size(dtype); }
};

// Offset (elements) of block r when blocks of `counts` are packed in rank order.
size_t block_offset(std::span<const size_t> counts, int r);
// Balanced split of `count` into n chunks: [chunk_begin(r), chunk_begin(r+1)).
inline size_t chunk_begin(size_t count, int n, int r) { return count * size_t(r) / size_t(n); }

// Backend side of a non-blocking operation.
class RequestState {
 public:
  virtual ~RequestState() = default;
  virtual bool test() = 0;  // true once complete; rethrows the operation's error
  virtual void wait() = 0;  // blocks until complete; rethrows the operation's error
  // The request is destroyed by an exception while pending, and the buffers it
  // uses are about to be freed: make the operation stop touching them before
  // returning, without hanging (local: abort the world, then wait; a receive
  // is withdrawn). Default: nothing (mpi/nccl end the job at the boundary).
  virtual void abandon() {}
};

// Handle of a non-blocking operation. A default Request is complete. wait()
// time is added to the call's accounting entry.
class Request {
 public:
  Request() = default;
  Request(std::shared_ptr<RequestState> state, std::shared_ptr<CommLog> log, CommLog::Ticket t)
      : state_(std::move(state)), log_(std::move(log)), ticket_(t) {}
  // Unwinding with the operation pending: abandon it (see RequestState), so a
  // failing rank's freed buffers are never written by its communicator.
  ~Request();
  Request(Request&&) noexcept = default;
  Request& operator=(Request&& o) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  void wait();
  bool test();
  bool done() const { return !state_; }

 private:
  std::shared_ptr<RequestState> state_;
  std::shared_ptr<CommLog> log_;
  CommLog::Ticket ticket_;
};
void wait_all(std::span<Request> requests);

// Where a backend's buffers live: host memory for local and mpi, device
// memory for nccl. The collective benchmark allocates through this.
class BufferSpace {
 public:
  virtual ~BufferSpace() = default;
  virtual void* allocate(size_t bytes);  // 64-byte aligned, zeroed
  virtual void deallocate(void* p);
  virtual void copy_in(void* dst, const void* host_src, size_t bytes);
  virtual void copy_out(void* host_dst, const void* src, size_t bytes);
  virtual bool is_host() const { return true; }
  // Whether the backend can use `p` as is. A device space (nccl) says no to
  // host memory, which the Communicator then stages through this space
  // (staging.h); a host space reaches everything. Device spaces override it.
  virtual bool reaches(const void* p) const { return p == nullptr || is_host(); }
};

// A region of a BufferSpace, released when it goes out of scope (the
// collective benchmark's messages, calibrate's overlap probe).
class SpaceBuffer {
 public:
  SpaceBuffer(BufferSpace& s, size_t bytes) : s_(s), p_(static_cast<std::byte*>(s.allocate(bytes))) {}
  ~SpaceBuffer() { s_.deallocate(p_); }
  SpaceBuffer(const SpaceBuffer&) = delete;
  SpaceBuffer& operator=(const SpaceBuffer&) = delete;
  std::byte* get() const { return p_; }

 private:
  BufferSpace& s_;
  std::byte* p_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return int(world_ranks_.size()); }
  const std::string& name() const { return name_; }
  int world_rank(int r) const { return world_ranks_.at(size_t(r)); }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  int node(int r) const { return nodes_.at(size_t(r)); }  // node of group rank r
  int num_nodes() const;
  CommLog& log() { return *log_; }
  const std::shared_ptr<CommLog>& shared_log() const { return log_; }
  virtual std::string_view backend() const = 0;
  virtual BufferSpace& buffers() { return host_buffers_; }

  // recv[i] = op over ranks of send[i].
  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op = ReduceOp::sum);
  Request iall_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op = ReduceOp::sum);
  // send holds size() blocks; rank r receives the reduction of block r.
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op = ReduceOp::sum);
  Request ireduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op = ReduceOp::sum);
  void reduce_scatter_v(const void* send, void* recv, std::span<const size_t> recv_counts, DType dtype,
                        ReduceOp op = ReduceOp::sum);
  Request ireduce_scatter_v(const void* send, void* recv, std::span<const size_t> recv_counts, DType dtype,
                            ReduceOp op = ReduceOp::sum);
  // recv holds size() blocks; block r is rank r's send.
  void all_gather(const void* send, void* recv, size_t send_count, DType dtype);
  Request iall_gather(const void* send, void* recv, size_t send_count, DType dtype);
  void all_gather_v(const void* send, void* recv, std::span<const size_t> counts, DType dtype);
  Request iall_gather_v(const void* send, void* recv, std::span<const size_t> counts, DType dtype);
  // recv = root's send (send is read on the root only).
  void broadcast(const void* send, void* recv, size_t count, DType dtype, int root);
  Request ibroadcast(const void* send, void* recv, size_t count, DType dtype, int root);
  void broadcast(void* buf, size_t count, DType dtype, int root) { broadcast(buf, buf, count, dtype, root); }
  // root's recv = op over ranks of send (recv is untouched elsewhere).
  void reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root);
  Request ireduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root);
  // Block j of send goes to rank j; block j of recv comes from rank j.
  void all_to_all(const void* send, void* recv, size_t count_per_rank, DType dtype);
  Request iall_to_all(const void* send, void* recv, size_t count_per_rank, DType dtype);
  // Packed blocks: send_counts[j] elements to rank j, recv_counts[j] from rank j. Never in place.
  void all_to_all_v(const void* send, std::span<const size_t> send_counts, void* recv,
                    std::span<const size_t> recv_counts, DType dtype);
  Request iall_to_all_v(const void* send, std::span<const size_t> send_counts, void* recv,
                        std::span<const size_t> recv_counts, DType dtype);
  void send(const void* buf, size_t count, DType dtype, int peer, int tag = 0);
  Request isend(const void* buf, size_t count, DType dtype, int peer, int tag = 0);
  void recv(void* buf, size_t count, DType dtype, int peer, int tag = 0);
  Request irecv(void* buf, size_t count, DType dtype, int peer, int tag = 0);
  // Sends to dest and receives from source at once (ring exchanges).
  void sendrecv(const void* send, int dest, void* recv, int source, size_t count, DType dtype, int tag = 0);
  void barrier();
  Request ibarrier();

  // Device backends (nccl): every later operation first waits for the work
  // issued so far on `stream` (a cudaStream_t: the rank's compute stream), so
  // it reads what that work wrote; a blocking operation returns, and a
  // non-blocking one's wait() returns, only when it is done, so work issued
  // after them sees their results. Host backends ignore it. split() and
  // split_groups() pass it to the new group. Null: no ordering.
  void order_after(void* stream) { ordered_after_ = stream; }
  void* ordered_after() const { return ordered_after_; }

  // Non-blocking sends and receives issued between group_start() and
  // group_end() are posted together (nccl: one ncclGroupStart/End, so two
  // ranks that send to each other in one group do not wait on each other);
  // their requests are waited on after group_end(). Nothing else may be
  // issued inside a group, and groups do not nest. Host backends post each
  // operation as it comes (their sends never wait for the receiver).
  void group_start();
  void group_end();
  bool in_group() const { return in_group_; }
  // Whether send/recv match by tag (local, mpi) or by order alone (nccl).
  virtual bool matches_tags() const { return true; }

  // Collective over this communicator: ranks with the same color form a new
  // group, ordered by (key, rank); color < 0 gets nullptr.
  std::unique_ptr<Communicator> split(int color, int key, std::string name);
  // Collective: `groups` partitions (some of) this communicator's ranks; each
  // rank gets the group it is listed in, ranked in list order, or nullptr.
  std::unique_ptr<Communicator> split_groups(const std::vector<std::vector<int>>& groups, std::string name);

  // Typed conveniences.
  template <class T> void all_reduce(std::span<T> buf, ReduceOp op = ReduceOp::sum) {
    all_reduce(buf.data(), buf.data(), buf.size(), dtype_of<std::remove_const_t<T>>(), op);
  }
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::sum) {
    all_reduce(t.raw(), t.raw(), size_t(t.numel()), t.dtype(), op);
  }
  Request iall_reduce(Tensor& t, ReduceOp op = ReduceOp::sum) {
    return iall_reduce(t.raw(), t.raw(), size_t(t.numel()), t.dtype(), op);
  }
  void broadcast(Tensor& t, int root) { broadcast(t.raw(), size_t(t.numel()), t.dtype(), root); }

 protected:
  Communicator(int rank, std::vector<int> world_ranks, std::vector<int> nodes, std::string name,
               std::shared_ptr<CommLog> log);
  virtual void run(const OpDesc& d) = 0;
  virtual std::shared_ptr<RequestState> start(const OpDesc& d) = 0;
  virtual std::unique_ptr<Communicator> do_split(int color, int key, std::string name) = 0;
  virtual void begin_group() {}
  virtual void end_group() {}

 private:
  void check(const OpDesc& d) const;
  CommLog::Ticket account(const OpDesc& d);
  void exec(const OpDesc& d);
  Request issue(const OpDesc& d);

  int rank_;
  std::vector<int> world_ranks_;
  std::vector<int> nodes_;
  std::string name_;
  std::shared_ptr<CommLog> log_;
  BufferSpace host_buffers_;
  void* ordered_after_ = nullptr;
  bool in_group_ = false;
};

// Bytes rank `r` sends to each other rank under the direct-exchange model
// (see comm_log.h): {sent, of which to another node}.
struct Traffic {
  uint64_t sent = 0;
  uint64_t inter_node = 0;
};
Traffic comm_traffic(const OpDesc& d, int r, std::span<const int> nodes);
// Logical bytes of an operation (nccl-tests convention, see comm_log.h).
uint64_t comm_logical_bytes(const OpDesc& d);
// Elements of the send and receive buffers of `d` on group rank `rank`.
size_t send_elems(const OpDesc& d, int rank);
size_t recv_elems(const OpDesc& d, int rank);

// Hierarchical all-reduce of buf (count elements) in place: reduce-scatter
// within the node (intra), all-reduce of this rank's shard across nodes
// (inter), all-gather within the node. intra and inter come from
// split_by_node() (mesh.h). avg sums both stages and divides once at the end
// (bf16: the intra-node partial sums are rounded to bf16 in between).
void two_level_all_reduce(Communicator& intra, Communicator& inter, void* buf, size_t count, DType dtype,
                          ReduceOp op = ReduceOp::sum);

// Every rank's string, in rank order (for gathering per-rank CSV text).
std::vector<std::string> all_gather_strings(Communicator& comm, std::string_view mine);

}  // namespace pb
