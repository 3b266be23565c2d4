// The conformance matrix (see comm_testing.h). Each case draws its inputs
// from a counter-based RNG keyed by (salt, case, rank, element), so every rank
// can compute every other rank's input, and with it the expected output.
#include "harness/comm/comm_testing.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include "harness/rng.h"

namespace pb::testing {
namespace {

// A buffer in the communicator's space (device memory for nccl).
class Buf {
 public:
  Buf(BufferSpace& bs, size_t bytes) : bs_(bs), bytes_(bytes), p_(bs.allocate(bytes)) {}
  ~Buf() { bs_.deallocate(p_); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  std::byte* p() const { return static_cast<std::byte*>(p_); }
  void put(const void* host, size_t bytes, size_t at = 0) { bs_.copy_in(p() + at, host, bytes); }
  std::vector<std::byte> get() const {
    std::vector<std::byte> out(bytes_);
    bs_.copy_out(out.data(), p_, bytes_);
    return out;
  }

 private:
  BufferSpace& bs_;
  size_t bytes_;
  void* p_;
};

struct Ctx {
  Communicator& comm;
  const ConformanceOptions& o;
  std::vector<std::string>& failures;
  uint64_t key = 0;  // case counter: identical sequence on every rank
  int n() const { return comm.size(); }
  int me() const { return comm.rank(); }
};

template <class T> T input(const Ctx& c, uint64_t key, int r, size_t i) {
  const uint64_t stream = key * 1024 + uint64_t(r);
  if (c.o.exact_inputs) return cast<T>(double(int(rng::u32(c.o.salt, stream, i) % 9) - 4));
  return cast<T>(rng::uniform(c.o.salt, stream, i) * 2 - 1);
}

template <class T> std::vector<T> inputs(const Ctx& c, uint64_t key, int r, size_t count, size_t first = 0) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = input<T>(c, key, r, first + i);
  return v;
}

// op over ranks in rank order, accumulation type, one rounding (the local backend's arithmetic).
template <class T, class F> T reduce_ref(ReduceOp op, int n, F x) {
  using A = acc_t<T>;
  A acc = static_cast<A>(x(0));
  for (int j = 1; j < n; ++j) {
    A v = static_cast<A>(x(j));
    acc = op == ReduceOp::max ? (v > acc ? v : acc) : acc + v;
  }
  if (op == ReduceOp::avg) acc = acc / static_cast<A>(n);
  return cast<T>(acc);
}

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

template <class T>
void expect(Ctx& c, const std::string& what, const std::byte* got_bytes, const std::vector<T>& want,
            bool loose = false) {
  const T* got = reinterpret_cast<const T*>(got_bytes);
  for (size_t i = 0; i < want.size(); ++i) {
    bool ok = std::memcmp(&got[i], &want[i], sizeof(T)) == 0;
    if (!ok && loose) {
      double g = double(static_cast<acc_t<T>>(got[i])), w = double(static_cast<acc_t<T>>(want[i]));
      ok = std::fabs(g - w) <= 4 * dtype_eps(dtype_of<T>()) * std::max(1.0, std::fabs(w));
    }
    if (!ok) {
      c.failures.push_back(what + " (rank " + std::to_string(c.me()) + " of " + std::to_string(c.n()) +
                           "): element " + std::to_string(i) + " is " +
                           num(double(static_cast<acc_t<T>>(got[i]))) + ", expected " +
                           num(double(static_cast<acc_t<T>>(want[i]))));
      return;
    }
  }
}

std::string label(const char* op, DType t, size_t count, bool in_place, const std::string& extra = "") {
  return std::string(op) + " " + std::string(dtype_name(t)) + " count " + std::to_string(count) +
         (in_place ? " in place" : "") + extra;
}

std::string op_suffix(ReduceOp op) {
  std::string s = " ";
  s += reduce_op_name(op);
  return s;
}

size_t total(const std::vector<size_t>& v) {
  size_t s = 0;
  for (size_t x : v) s += x;
  return s;
}

// Uneven per-rank counts (zeros included) derived from count.
std::vector<size_t> uneven(size_t count, int n) {
  std::vector<size_t> v(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) v[size_t(j)] = (count + size_t(j) * 7) % (count + 3);
  return v;
}

template <class T> void all_reduce(Ctx& c, size_t count, ReduceOp op, bool in_place) {
  const uint64_t k = ++c.key;
  const size_t bytes = count * sizeof(T);
  Buf s(c.comm.buffers(), bytes), r(c.comm.buffers(), bytes);
  auto mine = inputs<T>(c, k, c.me(), count);
  s.put(mine.data(), bytes);
  std::byte* out = in_place ? s.p() : r.p();
  c.comm.all_reduce(s.p(), out, count, dtype_of<T>(), op);
  std::vector<T> want(count);
  for (size_t i = 0; i < count; ++i) want[i] = reduce_ref<T>(op, c.n(), [&](int j) { return input<T>(c, k, j, i); });
  auto got = (in_place ? s : r).get();
  expect(c, label("all_reduce", dtype_of<T>(), count, in_place, op_suffix(op)), got.data(),
         want, op == ReduceOp::avg && !c.o.exact_avg);
}

template <class T> void reduce_scatter(Ctx& c, std::vector<size_t> counts, ReduceOp op, bool in_place) {
  const uint64_t k = ++c.key;
  const size_t all = total(counts), off = block_offset(counts, c.me()), mine = counts[size_t(c.me())];
  Buf s(c.comm.buffers(), all * sizeof(T)), r(c.comm.buffers(), mine * sizeof(T));
  auto in = inputs<T>(c, k, c.me(), all);
  s.put(in.data(), all * sizeof(T));
  std::byte* out = in_place ? s.p() + off * sizeof(T) : r.p();
  c.comm.reduce_scatter_v(s.p(), out, counts, dtype_of<T>(), op);
  std::vector<T> want(mine);
  for (size_t i = 0; i < mine; ++i)
    want[i] = reduce_ref<T>(op, c.n(), [&](int j) { return input<T>(c, k, j, off + i); });
  auto got = (in_place ? s : r).get();
  expect(c, label("reduce_scatter", dtype_of<T>(), all, in_place, op_suffix(op)),
         got.data() + (in_place ? off * sizeof(T) : 0), want, op == ReduceOp::avg && !c.o.exact_avg);
}

template <class T> void all_gather(Ctx& c, std::vector<size_t> counts, bool in_place) {
  const uint64_t k = ++c.key;
  const size_t all = total(counts), off = block_offset(counts, c.me()), mine = counts[size_t(c.me())];
  Buf s(c.comm.buffers(), mine * sizeof(T)), r(c.comm.buffers(), all * sizeof(T));
  auto in = inputs<T>(c, k, c.me(), mine);
  std::vector<T> junk(all, cast<T>(-99.0));
  r.put(junk.data(), all * sizeof(T));
  const std::byte* send = in_place ? r.p() + off * sizeof(T) : s.p();
  (in_place ? r : s).put(in.data(), mine * sizeof(T), in_place ? off * sizeof(T) : 0);
  c.comm.all_gather_v(send, r.p(), counts, dtype_of<T>());
  std::vector<T> want;
  for (int j = 0; j < c.n(); ++j)
    for (size_t i = 0; i < counts[size_t(j)]; ++i) want.push_back(input<T>(c, k, j, i));
  expect(c, label("all_gather", dtype_of<T>(), all, in_place), r.get().data(), want);
}

template <class T> void broadcast(Ctx& c, size_t count, int root, bool in_place) {
  const uint64_t k = ++c.key;
  Buf s(c.comm.buffers(), count * sizeof(T)), r(c.comm.buffers(), count * sizeof(T));
  auto in = inputs<T>(c, k, c.me(), count);
  s.put(in.data(), count * sizeof(T));
  std::byte* out = in_place ? s.p() : r.p();
  c.comm.broadcast(s.p(), out, count, dtype_of<T>(), root);
  expect(c, label("broadcast", dtype_of<T>(), count, in_place, " root " + std::to_string(root)),
         (in_place ? s : r).get().data(), inputs<T>(c, k, root, count));
}

template <class T> void reduce(Ctx& c, size_t count, ReduceOp op, int root, bool in_place) {
  const uint64_t k = ++c.key;
  Buf s(c.comm.buffers(), count * sizeof(T)), r(c.comm.buffers(), count * sizeof(T));
  auto in = inputs<T>(c, k, c.me(), count);
  s.put(in.data(), count * sizeof(T));
  c.comm.reduce(s.p(), in_place ? s.p() : r.p(), count, dtype_of<T>(), op, root);
  if (c.me() != root) return;
  std::vector<T> want(count);
  for (size_t i = 0; i < count; ++i) want[i] = reduce_ref<T>(op, c.n(), [&](int j) { return input<T>(c, k, j, i); });
  expect(c, label("reduce", dtype_of<T>(), count, in_place, " root " + std::to_string(root)),
         (in_place ? s : r).get().data(), want, op == ReduceOp::avg && !c.o.exact_avg);
}

// c_{i->j}: elements rank i sends rank j.
size_t a2a_count(size_t count, int i, int j, bool v) { return v ? (size_t(i) + 2 * size_t(j) + count) % 5 : count; }

template <class T> void all_to_all(Ctx& c, size_t count, bool v, bool in_place) {
  const uint64_t k = ++c.key;
  const int n = c.n(), me = c.me();
  std::vector<size_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) sc[size_t(j)] = a2a_count(count, me, j, v), rc[size_t(j)] = a2a_count(count, j, me, v);
  Buf s(c.comm.buffers(), total(sc) * sizeof(T)), r(c.comm.buffers(), total(rc) * sizeof(T));
  auto in = inputs<T>(c, k, me, total(sc));
  s.put(in.data(), in.size() * sizeof(T));
  if (v) c.comm.all_to_all_v(s.p(), sc, r.p(), rc, dtype_of<T>());
  else c.comm.all_to_all(s.p(), in_place ? s.p() : r.p(), count, dtype_of<T>());
  std::vector<T> want;
  for (int j = 0; j < n; ++j) {  // block `me` of rank j's send
    size_t off = 0;
    for (int q = 0; q < me; ++q) off += a2a_count(count, j, q, v);
    for (size_t i = 0; i < rc[size_t(j)]; ++i) want.push_back(input<T>(c, k, j, off + i));
  }
  expect(c, label(v ? "all_to_all_v" : "all_to_all", dtype_of<T>(), count, in_place),
         (in_place ? s : r).get().data(), want);
}

template <class T> void point_to_point(Ctx& c, size_t count) {
  const uint64_t k = ++c.key;
  const int n = c.n(), me = c.me(), next = (me + 1) % n, prev = (me + n - 1) % n;
  const size_t bytes = count * sizeof(T);
  Buf a(c.comm.buffers(), bytes), b(c.comm.buffers(), bytes), r1(c.comm.buffers(), bytes), r2(c.comm.buffers(), bytes);
  auto x = inputs<T>(c, k, me, count), y = inputs<T>(c, k, me, count, count);
  a.put(x.data(), bytes);
  b.put(y.data(), bytes);
  if (c.comm.matches_tags()) {
    // Two tags, received in the opposite order they were sent: matching is by tag.
    Request q2 = c.comm.irecv(r2.p(), count, dtype_of<T>(), prev, /*tag=*/2);
    Request q1 = c.comm.irecv(r1.p(), count, dtype_of<T>(), prev, /*tag=*/1);
    Request s1 = c.comm.isend(a.p(), count, dtype_of<T>(), next, /*tag=*/1);
    c.comm.send(b.p(), count, dtype_of<T>(), next, /*tag=*/2);
    q1.wait();
    q2.wait();
    s1.wait();
    expect(c, label("isend/irecv tag 1", dtype_of<T>(), count, false), r1.get().data(), inputs<T>(c, k, prev, count));
    expect(c, label("send/irecv tag 2", dtype_of<T>(), count, false), r2.get().data(),
           inputs<T>(c, k, prev, count, count));
  }
  {
    // One group to and from both neighbours: the sends cross, which only a
    // group lets a backend without tags or eager sends (nccl) complete. A
    // pair's messages also match in order (with two ranks both go to one peer).
    std::vector<Request> q;
    c.comm.group_start();
    q.push_back(c.comm.irecv(r1.p(), count, dtype_of<T>(), prev, /*tag=*/3));
    q.push_back(c.comm.irecv(r2.p(), count, dtype_of<T>(), next, /*tag=*/4));
    q.push_back(c.comm.isend(a.p(), count, dtype_of<T>(), next, /*tag=*/3));
    q.push_back(c.comm.isend(b.p(), count, dtype_of<T>(), prev, /*tag=*/4));
    c.comm.group_end();
    wait_all(q);
    expect(c, label("grouped isend/irecv from prev", dtype_of<T>(), count, false), r1.get().data(),
           inputs<T>(c, k, prev, count));
    expect(c, label("grouped isend/irecv from next", dtype_of<T>(), count, false), r2.get().data(),
           inputs<T>(c, k, next, count, count));
  }
  c.comm.sendrecv(a.p(), next, r1.p(), prev, count, dtype_of<T>());
  expect(c, label("sendrecv", dtype_of<T>(), count, false), r1.get().data(), inputs<T>(c, k, prev, count));
  if (!c.o.in_place_exchange) return;
  c.comm.sendrecv(b.p(), next, b.p(), prev, count, dtype_of<T>());
  expect(c, label("sendrecv", dtype_of<T>(), count, true), b.get().data(), inputs<T>(c, k, prev, count, count));
}

// Several non-blocking collectives in flight at once, waited in reverse order.
template <class T> void overlapped(Ctx& c, size_t count) {
  const uint64_t k = ++c.key;
  const int n = c.n(), me = c.me();
  Buf x(c.comm.buffers(), count * sizeof(T)), g(c.comm.buffers(), count * size_t(n) * sizeof(T));
  Buf rs(c.comm.buffers(), count * size_t(n) * sizeof(T)), rr(c.comm.buffers(), count * sizeof(T));
  auto in = inputs<T>(c, k, me, count * size_t(n));
  x.put(in.data(), count * sizeof(T));
  rs.put(in.data(), in.size() * sizeof(T));
  std::vector<Request> reqs;
  reqs.push_back(c.comm.iall_reduce(x.p(), x.p(), count, dtype_of<T>(), ReduceOp::sum));
  reqs.push_back(c.comm.iall_gather(rs.p(), g.p(), count, dtype_of<T>()));  // reads rs before the next op writes it
  reqs.push_back(c.comm.ireduce_scatter(rs.p(), rr.p(), count, dtype_of<T>(), ReduceOp::max));
  reqs.push_back(c.comm.ibarrier());
  for (auto it = reqs.rbegin(); it != reqs.rend(); ++it) it->wait();
  std::vector<T> want(count), want_g, want_rr(count);
  for (size_t i = 0; i < count; ++i) {
    want[i] = reduce_ref<T>(ReduceOp::sum, n, [&](int j) { return input<T>(c, k, j, i); });
    want_rr[i] = reduce_ref<T>(ReduceOp::max, n, [&](int j) { return input<T>(c, k, j, size_t(me) * count + i); });
  }
  for (int j = 0; j < n; ++j)
    for (size_t i = 0; i < count; ++i) want_g.push_back(input<T>(c, k, j, i));
  expect(c, label("iall_reduce", dtype_of<T>(), count, true), x.get().data(), want);
  expect(c, label("iall_gather", dtype_of<T>(), count, false), g.get().data(), want_g);
  expect(c, label("ireduce_scatter max", dtype_of<T>(), count, false), rr.get().data(), want_rr);
}

template <class T> void matrix(Ctx& c) {
  const int n = c.n();
  for (size_t count : c.o.counts) {
    for (bool ip : {false, true}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
        all_reduce<T>(c, count, op, ip);
        reduce_scatter<T>(c, std::vector<size_t>(size_t(n), count), op, ip);
        reduce_scatter<T>(c, uneven(count, n), op, ip);
        for (int root : {0, n - 1}) reduce<T>(c, count, op, root, ip);
      }
      all_gather<T>(c, std::vector<size_t>(size_t(n), count), ip);
      all_gather<T>(c, uneven(count, n), ip);
      for (int root : {0, n - 1}) broadcast<T>(c, count, root, ip);
      if (!ip || c.o.in_place_exchange) all_to_all<T>(c, count, /*v=*/false, ip);
    }
    all_to_all<T>(c, count, /*v=*/true, false);
    point_to_point<T>(c, count);
    overlapped<T>(c, count);
  }
  c.comm.barrier();
}

}  // namespace

std::vector<std::string> check_collectives(Communicator& comm, const ConformanceOptions& o) {
  std::vector<std::string> failures;
  Ctx c{comm, o, failures};
  for (DType t : o.dtypes) dispatch_dtype(t, [&](auto x) { matrix<decltype(x)>(c); });
  // Sub-groups: even and odd ranks, each ordered by descending rank.
  auto sub = comm.split(comm.rank() % 2, -comm.rank(), comm.name() + ".parity");
  const int members = (comm.size() - comm.rank() % 2 + 1) / 2;
  const bool descending = sub && (members == 1 || sub->world_rank(0) > sub->world_rank(sub->size() - 1));
  if (!sub || sub->size() != members || !descending) {
    failures.push_back("split: rank " + std::to_string(comm.rank()) + " got a wrong group");
    return failures;
  }
  Ctx s{*sub, o, failures, 1000000};
  all_reduce<float>(s, 37, ReduceOp::sum, true);
  all_gather<double>(s, uneven(11, sub->size()), false);
  return failures;
}

std::vector<uint8_t> collective_fingerprint(Communicator& comm, uint64_t salt) {
  ConformanceOptions o;
  o.salt = salt;
  std::vector<std::string> failures;
  Ctx c{comm, o, failures};
  const int n = comm.size();
  const size_t count = 4099;
  auto bs = [&](size_t bytes) { return std::make_unique<Buf>(comm.buffers(), bytes); };
  auto a = bs(count * 4), b = bs(count * 2), g = bs(count * size_t(n) * 8), x = bs(count * 8);
  auto in_a = inputs<float>(c, 1, comm.rank(), count);
  auto in_b = inputs<bf16>(c, 2, comm.rank(), count);
  auto in_x = inputs<double>(c, 3, comm.rank(), count);
  a->put(in_a.data(), count * 4);
  b->put(in_b.data(), count * 2);
  x->put(in_x.data(), count * 8);
  Request r1 = comm.iall_reduce(a->p(), a->p(), count, DType::f32, ReduceOp::sum);
  Request r2 = comm.iall_reduce(b->p(), b->p(), count, DType::bf16, ReduceOp::avg);
  double busy = 0;  // compute while the collectives progress
  for (int i = 0; i < 20000; ++i) busy += std::sqrt(double(i));
  Request r3 = comm.iall_gather(x->p(), g->p(), count, DType::f64);
  r2.wait();
  comm.all_reduce(b->p(), b->p(), count, DType::bf16, ReduceOp::max);
  r1.wait();
  r3.wait();
  std::vector<size_t> counts(static_cast<size_t>(n));  // uneven, within g's size and x's
  for (int j = 0; j < n; ++j) counts[size_t(j)] = count - size_t(j) * 3;
  comm.reduce_scatter_v(g->p(), x->p(), counts, DType::f64, ReduceOp::sum);
  std::vector<uint8_t> out;
  for (const Buf* buf : {a.get(), b.get(), g.get(), x.get()}) {
    auto bytes = buf->get();
    for (std::byte v : bytes) out.push_back(uint8_t(v));
  }
  out.push_back(uint8_t(busy > 0));
  return out;
}

}  // namespace pb::testing
