// Communicator front end: argument checks, accounting (logical bytes, the
// direct-exchange traffic model, time blocked), then the backend.
#include <exception>
#include "harness/comm/comm.h"
#include "harness/comm/staging.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <set>

namespace pb {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

size_t sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

std::vector<size_t> to_vec(std::span<const size_t> s) { return {s.begin(), s.end()}; }

}  // namespace

std::string_view reduce_op_name(ReduceOp op) {
  return op == ReduceOp::sum ? "sum" : op == ReduceOp::avg ? "avg" : "max";
}

bool parse_reduce_op(std::string_view s, ReduceOp* out) {
  if (s == "sum") *out = ReduceOp::sum;
  else if (s == "avg") *out = ReduceOp::avg;
  else if (s == "max") *out = ReduceOp::max;
  else return false;
  return true;
}

size_t block_offset(std::span<const size_t> counts, int r) {
  return std::accumulate(counts.begin(), counts.begin() + r, size_t{0});
}

// ---- Request ---------------------------------------------------------------

Request::~Request() {
  if (state_ && std::uncaught_exceptions() > 0) state_->abandon();
}

Request& Request::operator=(Request&& o) noexcept {
  if (this != &o) {
    if (state_ && std::uncaught_exceptions() > 0) state_->abandon();
    state_ = std::move(o.state_);
    log_ = std::move(o.log_);
    ticket_ = o.ticket_;
  }
  return *this;
}

void Request::wait() {
  if (!state_) return;
  auto s = std::move(state_);
  double t0 = now_s();
  s->wait();
  if (log_) log_->add_blocked(ticket_, now_s() - t0);
}

bool Request::test() {
  if (!state_) return true;
  if (!state_->test()) return false;
  state_.reset();
  return true;
}

void wait_all(std::span<Request> requests) {
  for (auto& r : requests) r.wait();
}

// ---- BufferSpace (host) ----------------------------------------------------

void* BufferSpace::allocate(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return p;
}
void BufferSpace::deallocate(void* p) { std::free(p); }
void BufferSpace::copy_in(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}
void BufferSpace::copy_out(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}

// ---- accounting model ------------------------------------------------------

uint64_t comm_logical_bytes(const OpDesc& d) {
  const uint64_t es = d.elem_size();
  switch (d.op) {
    case CommOp::reduce_scatter:
    case CommOp::all_gather:
    case CommOp::all_to_all: return sum(d.counts) * es;
    case CommOp::barrier: return 0;
    default: return d.count * es;
  }
}

size_t send_elems(const OpDesc& d, int rank) {
  switch (d.op) {
    case CommOp::reduce_scatter:
    case CommOp::all_to_all: return sum(d.counts);
    case CommOp::all_gather: return d.counts.at(size_t(rank));
    case CommOp::recv:
    case CommOp::barrier: return 0;
    default: return d.count;  // all_reduce, broadcast, reduce, send, sendrecv
  }
}

size_t recv_elems(const OpDesc& d, int rank) {
  switch (d.op) {
    case CommOp::reduce_scatter: return d.counts.at(size_t(rank));
    case CommOp::all_gather: return sum(d.counts);
    case CommOp::all_to_all: return sum(d.recv_counts);
    case CommOp::send:
    case CommOp::barrier: return 0;
    default: return d.count;  // all_reduce, broadcast, reduce, recv, sendrecv
  }
}

Traffic comm_traffic(const OpDesc& d, int r, std::span<const int> nodes) {
  const int n = int(nodes.size());
  const uint64_t es = d.elem_size();
  Traffic t;
  auto add = [&](int j, uint64_t elems) {
    if (j == r || elems == 0) return;
    t.sent += elems * es;
    if (nodes[size_t(j)] != nodes[size_t(r)]) t.inter_node += elems * es;
  };
  auto chunk = [&](int j) { return chunk_begin(d.count, n, j + 1) - chunk_begin(d.count, n, j); };
  switch (d.op) {
    case CommOp::all_reduce:  // j pulls my chunk j of the input; I push reduced chunk r to j
      for (int j = 0; j < n; ++j) add(j, chunk(j) + chunk(r));
      break;
    case CommOp::reduce_scatter:
    case CommOp::all_to_all:
      for (int j = 0; j < n; ++j) add(j, d.counts[size_t(j)]);
      break;
    case CommOp::all_gather:
      for (int j = 0; j < n; ++j) add(j, d.counts[size_t(r)]);
      break;
    case CommOp::broadcast:
      if (r == d.root)
        for (int j = 0; j < n; ++j) add(j, d.count);
      break;
    case CommOp::reduce:  // j pulls my chunk j; I write reduced chunk r into the root
      for (int j = 0; j < n; ++j) add(j, chunk(j));
      add(d.root, chunk(r));
      break;
    case CommOp::send:
    case CommOp::sendrecv: add(d.root, d.count); break;
    case CommOp::recv:
    case CommOp::barrier: break;
  }
  return t;
}

// ---- Communicator ----------------------------------------------------------

Communicator::Communicator(int rank, std::vector<int> world_ranks, std::vector<int> nodes, std::string name,
                           std::shared_ptr<CommLog> log)
    : rank_(rank), world_ranks_(std::move(world_ranks)), nodes_(std::move(nodes)), name_(std::move(name)),
      log_(std::move(log)) {
  if (nodes_.size() != world_ranks_.size() || rank_ < 0 || rank_ >= int(world_ranks_.size()))
    throw std::logic_error("Communicator: inconsistent rank/world_ranks/nodes");
  if (!log_) log_ = std::make_shared<CommLog>(world_ranks_[size_t(rank_)]);
}

int Communicator::num_nodes() const { return int(std::set<int>(nodes_.begin(), nodes_.end()).size()); }

void Communicator::check(const OpDesc& d) const {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument(name_ + "." + std::string(comm_op_name(d.op)) + ": " + what);
  };
  const int n = size();
  auto in_range = [&](int p) { return p >= 0 && p < n; };
  switch (d.op) {
    case CommOp::broadcast:
    case CommOp::reduce:
    case CommOp::send:
    case CommOp::recv:
      if (!in_range(d.root)) fail("peer/root " + std::to_string(d.root) + " outside [0, " + std::to_string(n) + ")");
      break;
    case CommOp::sendrecv:
      if (!in_range(d.root) || !in_range(d.source)) fail("dest or source outside the group");
      break;
    case CommOp::reduce_scatter:
    case CommOp::all_gather:
    case CommOp::all_to_all:
      if (d.counts.size() != size_t(n)) fail("needs one count per rank (" + std::to_string(n) + ")");
      if (d.op == CommOp::all_to_all && d.recv_counts.size() != size_t(n)) fail("needs one recv count per rank");
      break;
    default: break;
  }
  if (d.op == CommOp::all_to_all && d.send == d.recv && d.send != nullptr) {
    for (int j = 0; j < n; ++j)
      if (d.counts[size_t(j)] != d.counts[0] || d.recv_counts[size_t(j)] != d.counts[0])
        fail("in place needs equal counts (use separate buffers for all_to_all_v)");
  }
}

CommLog::Ticket Communicator::account(const OpDesc& d) {
  Traffic t = comm_traffic(d, rank_, nodes_);
  uint64_t count = d.counts.empty() ? d.count : sum(d.counts);
  return log_->record(name_, d.op, d.dtype, count, comm_logical_bytes(d), t.sent, t.inter_node);
}

void Communicator::exec(const OpDesc& d) {
  if (in_group_)
    throw std::logic_error(name_ + "." + std::string(comm_op_name(d.op)) +
                           ": a blocking operation inside a group (only isend and irecv may be grouped)");
  check(d);
  CommLog::Ticket t = account(d);
  double t0 = now_s();
  StagedOp staged(d, rank_, buffers());  // host buffers on a device backend
  run(staged.desc());
  staged.finish();
  log_->add_blocked(t, now_s() - t0);
}

namespace {
// A non-blocking operation on staged host buffers: copied out when it completes.
class StagedRequest final : public RequestState {
 public:
  StagedRequest(std::shared_ptr<RequestState> op, StagedOp staged) : op_(std::move(op)), staged_(std::move(staged)) {}
  bool test() override {
    if (!op_->test()) return false;
    staged_.finish();
    return true;
  }
  void wait() override {
    op_->wait();
    staged_.finish();
  }
  void abandon() override { op_->abandon(); }

 private:
  std::shared_ptr<RequestState> op_;
  StagedOp staged_;
};
}  // namespace

Request Communicator::issue(const OpDesc& d) {
  if (in_group_ && d.op != CommOp::send && d.op != CommOp::recv)
    throw std::logic_error(name_ + ".i" + std::string(comm_op_name(d.op)) +
                           ": inside a group (only isend and irecv may be grouped)");
  check(d);
  CommLog::Ticket t = account(d);
  StagedOp staged(d, rank_, buffers());
  if (!staged.staged()) return Request(start(d), log_, t);
  std::shared_ptr<RequestState> op = start(staged.desc());
  return Request(std::make_shared<StagedRequest>(std::move(op), std::move(staged)), log_, t);
}

void Communicator::group_start() {
  if (in_group_) throw std::logic_error(name_ + ".group_start: a group is already open (groups do not nest)");
  begin_group();
  in_group_ = true;
}

void Communicator::group_end() {
  if (!in_group_) throw std::logic_error(name_ + ".group_end: no group is open");
  in_group_ = false;
  end_group();
}

namespace {
OpDesc make(CommOp op, const void* s, void* r, size_t count, DType dt, ReduceOp ro = ReduceOp::sum, int root = 0) {
  OpDesc d;
  d.op = op;
  d.send = s;
  d.recv = r;
  d.count = count;
  d.dtype = dt;
  d.redop = ro;
  d.root = root;
  return d;
}
OpDesc make_v(CommOp op, const void* s, void* r, std::vector<size_t> counts, DType dt, ReduceOp ro = ReduceOp::sum) {
  OpDesc d = make(op, s, r, 0, dt, ro);
  d.counts = std::move(counts);
  return d;
}
}  // namespace

void Communicator::all_reduce(const void* s, void* r, size_t c, DType dt, ReduceOp op) {
  exec(make(CommOp::all_reduce, s, r, c, dt, op));
}
Request Communicator::iall_reduce(const void* s, void* r, size_t c, DType dt, ReduceOp op) {
  return issue(make(CommOp::all_reduce, s, r, c, dt, op));
}
void Communicator::reduce_scatter(const void* s, void* r, size_t c, DType dt, ReduceOp op) {
  exec(make_v(CommOp::reduce_scatter, s, r, std::vector<size_t>(size_t(size()), c), dt, op));
}
Request Communicator::ireduce_scatter(const void* s, void* r, size_t c, DType dt, ReduceOp op) {
  return issue(make_v(CommOp::reduce_scatter, s, r, std::vector<size_t>(size_t(size()), c), dt, op));
}
void Communicator::reduce_scatter_v(const void* s, void* r, std::span<const size_t> c, DType dt, ReduceOp op) {
  exec(make_v(CommOp::reduce_scatter, s, r, to_vec(c), dt, op));
}
Request Communicator::ireduce_scatter_v(const void* s, void* r, std::span<const size_t> c, DType dt, ReduceOp op) {
  return issue(make_v(CommOp::reduce_scatter, s, r, to_vec(c), dt, op));
}
void Communicator::all_gather(const void* s, void* r, size_t c, DType dt) {
  exec(make_v(CommOp::all_gather, s, r, std::vector<size_t>(size_t(size()), c), dt));
}
Request Communicator::iall_gather(const void* s, void* r, size_t c, DType dt) {
  return issue(make_v(CommOp::all_gather, s, r, std::vector<size_t>(size_t(size()), c), dt));
}
void Communicator::all_gather_v(const void* s, void* r, std::span<const size_t> c, DType dt) {
  exec(make_v(CommOp::all_gather, s, r, to_vec(c), dt));
}
Request Communicator::iall_gather_v(const void* s, void* r, std::span<const size_t> c, DType dt) {
  return issue(make_v(CommOp::all_gather, s, r, to_vec(c), dt));
}
void Communicator::broadcast(const void* s, void* r, size_t c, DType dt, int root) {
  exec(make(CommOp::broadcast, s, r, c, dt, ReduceOp::sum, root));
}
Request Communicator::ibroadcast(const void* s, void* r, size_t c, DType dt, int root) {
  return issue(make(CommOp::broadcast, s, r, c, dt, ReduceOp::sum, root));
}
void Communicator::reduce(const void* s, void* r, size_t c, DType dt, ReduceOp op, int root) {
  exec(make(CommOp::reduce, s, r, c, dt, op, root));
}
Request Communicator::ireduce(const void* s, void* r, size_t c, DType dt, ReduceOp op, int root) {
  return issue(make(CommOp::reduce, s, r, c, dt, op, root));
}
void Communicator::all_to_all(const void* s, void* r, size_t c, DType dt) {
  OpDesc d = make_v(CommOp::all_to_all, s, r, std::vector<size_t>(size_t(size()), c), dt);
  d.recv_counts = d.counts;
  exec(d);
}
Request Communicator::iall_to_all(const void* s, void* r, size_t c, DType dt) {
  OpDesc d = make_v(CommOp::all_to_all, s, r, std::vector<size_t>(size_t(size()), c), dt);
  d.recv_counts = d.counts;
  return issue(d);
}
void Communicator::all_to_all_v(const void* s, std::span<const size_t> sc, void* r, std::span<const size_t> rc,
                                DType dt) {
  OpDesc d = make_v(CommOp::all_to_all, s, r, to_vec(sc), dt);
  d.recv_counts = to_vec(rc);
  d.varying = true;
  if (s == r && s) throw std::invalid_argument(name_ + ".all_to_all_v: cannot run in place");
  exec(d);
}
Request Communicator::iall_to_all_v(const void* s, std::span<const size_t> sc, void* r,
                                    std::span<const size_t> rc, DType dt) {
  OpDesc d = make_v(CommOp::all_to_all, s, r, to_vec(sc), dt);
  d.recv_counts = to_vec(rc);
  d.varying = true;
  if (s == r && s) throw std::invalid_argument(name_ + ".all_to_all_v: cannot run in place");
  return issue(d);
}
void Communicator::send(const void* b, size_t c, DType dt, int peer, int tag) {
  OpDesc d = make(CommOp::send, b, nullptr, c, dt, ReduceOp::sum, peer);
  d.tag = tag;
  exec(d);
}
Request Communicator::isend(const void* b, size_t c, DType dt, int peer, int tag) {
  OpDesc d = make(CommOp::send, b, nullptr, c, dt, ReduceOp::sum, peer);
  d.tag = tag;
  return issue(d);
}
void Communicator::recv(void* b, size_t c, DType dt, int peer, int tag) {
  OpDesc d = make(CommOp::recv, nullptr, b, c, dt, ReduceOp::sum, peer);
  d.tag = tag;
  exec(d);
}
Request Communicator::irecv(void* b, size_t c, DType dt, int peer, int tag) {
  OpDesc d = make(CommOp::recv, nullptr, b, c, dt, ReduceOp::sum, peer);
  d.tag = tag;
  return issue(d);
}
void Communicator::sendrecv(const void* s, int dest, void* r, int source, size_t c, DType dt, int tag) {
  OpDesc d = make(CommOp::sendrecv, s, r, c, dt, ReduceOp::sum, dest);
  d.source = source;
  d.tag = tag;
  exec(d);
}
void Communicator::barrier() { exec(make(CommOp::barrier, nullptr, nullptr, 0, DType::f32)); }
Request Communicator::ibarrier() { return issue(make(CommOp::barrier, nullptr, nullptr, 0, DType::f32)); }

std::unique_ptr<Communicator> Communicator::split(int color, int key, std::string name) {
  std::unique_ptr<Communicator> c = do_split(color, key, std::move(name));
  if (c) c->order_after(ordered_after_);
  return c;
}

std::unique_ptr<Communicator> Communicator::split_groups(const std::vector<std::vector<int>>& groups,
                                                         std::string name) {
  std::vector<int> seen(size_t(size()), 0);
  int color = -1, key = 0;
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t k = 0; k < groups[g].size(); ++k) {
      int r = groups[g][k];
      if (r < 0 || r >= size() || seen[size_t(r)]++)
        throw std::invalid_argument(name_ + ".split_groups(" + name + "): rank " + std::to_string(r) +
                                    " is outside the group or listed twice");
      if (r == rank_) color = int(g), key = int(k);
    }
  return split(color, key, std::move(name));
}

void two_level_all_reduce(Communicator& intra, Communicator& inter, void* buf, size_t count, DType dtype,
                          ReduceOp op) {
  const int n = intra.size();
  std::vector<size_t> counts(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) counts[size_t(j)] = chunk_begin(count, n, j + 1) - chunk_begin(count, n, j);
  const size_t off = chunk_begin(count, n, intra.rank());
  const size_t mine = counts[size_t(intra.rank())];
  auto* shard = static_cast<std::byte*>(buf) + off * dtype_size(dtype);
  const ReduceOp stage = op == ReduceOp::avg ? ReduceOp::sum : op;
  if (op == ReduceOp::avg && !intra.buffers().is_host())
    throw std::invalid_argument("two_level_all_reduce: avg needs host buffers (it divides on the CPU)");
  intra.reduce_scatter_v(buf, shard, counts, dtype, stage);
  inter.all_reduce(shard, shard, mine, dtype, stage);
  if (op == ReduceOp::avg)
    dispatch_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      auto* x = reinterpret_cast<T*>(shard);
      const acc_t<T> total = acc_t<T>(n * inter.size());
      for (size_t i = 0; i < mine; ++i) x[i] = cast<T>(static_cast<acc_t<T>>(x[i]) / total);
    });
  intra.all_gather_v(shard, buf, counts, dtype);
}

std::vector<std::string> all_gather_strings(Communicator& comm, std::string_view mine) {
  // Lengths, then the bytes padded to whole doubles (data movement only: bits are copied, never computed).
  const int n = comm.size();
  BufferSpace& bs = comm.buffers();
  std::vector<double> lens(static_cast<size_t>(n));
  double my_len = double(mine.size());
  void* dlen = bs.allocate(sizeof(double) * size_t(n + 1));
  bs.copy_in(static_cast<double*>(dlen) + n, &my_len, sizeof(double));
  comm.all_gather(static_cast<double*>(dlen) + n, dlen, 1, DType::f64);
  bs.copy_out(lens.data(), dlen, sizeof(double) * size_t(n));
  bs.deallocate(dlen);
  std::vector<size_t> words(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) words[size_t(j)] = (size_t(lens[size_t(j)]) + 7) / 8;
  size_t total = sum(words);
  std::vector<double> mine_padded(words[size_t(comm.rank())], 0.0);
  if (!mine.empty()) std::memcpy(mine_padded.data(), mine.data(), mine.size());
  void* dsend = bs.allocate(std::max<size_t>(1, mine_padded.size()) * 8);
  void* drecv = bs.allocate(std::max<size_t>(1, total) * 8);
  bs.copy_in(dsend, mine_padded.data(), mine_padded.size() * 8);
  comm.all_gather_v(dsend, drecv, words, DType::f64);
  std::vector<char> all(total * 8);
  bs.copy_out(all.data(), drecv, total * 8);
  bs.deallocate(dsend);
  bs.deallocate(drecv);
  std::vector<std::string> out(static_cast<size_t>(n));
  size_t off = 0;
  for (int j = 0; j < n; ++j) {
    out[size_t(j)].assign(all.data() + off * 8, size_t(lens[size_t(j)]));
    off += words[size_t(j)];
  }
  return out;
}

}  // namespace pb
