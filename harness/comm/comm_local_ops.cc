// The local backend's collectives (protocol and race-freedom argument in
// comm_local.h). Shares of work: all_reduce and reduce: member r reduces
// chunk r (balanced split) of every input and writes it to every output (to
// the root's, for reduce); reduce_scatter: member r reduces block r into its
// own output; all_gather, broadcast, all_to_all: member r pulls what it
// receives into its own output.
#include <utility>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "harness/comm/comm_local.h"

namespace pb::local {
namespace {

constexpr size_t kBlock = 1024;  // elements reduced per step; the accumulators stay in L1
// Outputs at least this large are written with non-temporal stores: they
// would only evict the inputs from the cache, and a streaming store saves the
// read-for-ownership of each line. 8 MiB: the 2-rank working set (inputs
// and outputs of both ranks) then no longer fits this machine's 32 MiB L3.
constexpr size_t kStreamBytes = size_t(8) << 20;

// dst = src (bytes), bypassing the cache when `stream`.
void store(void* dst, const void* src, size_t bytes, bool stream) {
#if defined(__SSE2__)
  if (stream) {
    auto* d = static_cast<std::byte*>(dst);
    const auto* s = static_cast<const std::byte*>(src);
    const size_t head = std::min(bytes, (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15);
    std::memcpy(d, s, head);
    size_t k = head;
    for (; k + 16 <= bytes; k += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + k), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + k)));
    std::memcpy(d + k, s + k, bytes - k);
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

// Streaming stores become visible to other threads before the barrier that follows.
void store_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// dst[0..nd)[b, e) = op over src[0..ns)[b, e) in source order, in the
// accumulation type, rounded once: ((x0 + x1) + x2) + ...
template <class T>
void reduce_range(const T* const* src, int ns, T* const* dst, int nd, size_t b, size_t e, ReduceOp op, bool stream) {
  using A = acc_t<T>;
  alignas(64) A acc[kBlock];
  alignas(64) T out[std::is_same_v<T, A> ? 1 : kBlock];
  for (size_t i0 = b; i0 < e; i0 += kBlock) {
    const size_t len = std::min(kBlock, e - i0);
    const T* s0 = src[0] + i0;
    if (ns == 1) {
      for (size_t k = 0; k < len; ++k) acc[k] = static_cast<A>(s0[k]);
    } else if (op == ReduceOp::max) {
      const T* s1 = src[1] + i0;
      for (size_t k = 0; k < len; ++k) {
        A a = static_cast<A>(s0[k]), v = static_cast<A>(s1[k]);
        acc[k] = v > a ? v : a;
      }
    } else {
      const T* s1 = src[1] + i0;
      for (size_t k = 0; k < len; ++k) acc[k] = static_cast<A>(s0[k]) + static_cast<A>(s1[k]);
    }
    for (int j = 2; j < ns; ++j) {
      const T* s = src[j] + i0;
      if (op == ReduceOp::max) {
        for (size_t k = 0; k < len; ++k) {
          A v = static_cast<A>(s[k]);
          acc[k] = v > acc[k] ? v : acc[k];
        }
      } else {
        for (size_t k = 0; k < len; ++k) acc[k] += static_cast<A>(s[k]);
      }
    }
    if (op == ReduceOp::avg)
      for (size_t k = 0; k < len; ++k) acc[k] = acc[k] / static_cast<A>(ns);
    const T* res = reinterpret_cast<const T*>(acc);
    if constexpr (!std::is_same_v<T, A>) {
      for (size_t k = 0; k < len; ++k) out[k] = cast<T>(acc[k]);
      res = out;
    }
    for (int j = 0; j < nd; ++j) store(dst[j] + i0, res, len * sizeof(T), stream);
  }
  if (stream) store_fence();
}

template <class T> const T* in(const Slot& s) { return static_cast<const T*>(s.desc->send); }
template <class T> T* out(const Slot& s) { return static_cast<T*>(s.desc->recv); }

template <class T>
void do_all_reduce(Group& g, int me, const OpDesc& d) {
  std::vector<const T*> src(size_t(g.n));
  std::vector<T*> dst(size_t(g.n));
  for (int j = 0; j < g.n; ++j) src[size_t(j)] = in<T>(g.slots[size_t(j)]), dst[size_t(j)] = out<T>(g.slots[size_t(j)]);
  reduce_range(src.data(), g.n, dst.data(), g.n, chunk_begin(d.count, g.n, me), chunk_begin(d.count, g.n, me + 1),
               d.redop, d.count * sizeof(T) >= kStreamBytes);
}

template <class T>
void do_reduce(Group& g, int me, const OpDesc& d) {
  std::vector<const T*> src(size_t(g.n));
  for (int j = 0; j < g.n; ++j) src[size_t(j)] = in<T>(g.slots[size_t(j)]);
  T* dst = out<T>(g.slots[size_t(d.root)]);
  reduce_range(src.data(), g.n, &dst, 1, chunk_begin(d.count, g.n, me), chunk_begin(d.count, g.n, me + 1), d.redop,
               d.count * sizeof(T) >= kStreamBytes);
}

template <class T>
void do_reduce_scatter(Group& g, int me, const OpDesc& d) {
  const size_t off = block_offset(d.counts, me);
  std::vector<const T*> src(size_t(g.n));
  for (int j = 0; j < g.n; ++j) src[size_t(j)] = in<T>(g.slots[size_t(j)]) + off;
  T* dst = static_cast<T*>(d.recv);
  reduce_range(src.data(), g.n, &dst, 1, 0, d.counts[size_t(me)], d.redop,
               d.counts[size_t(me)] * sizeof(T) * size_t(g.n) >= kStreamBytes);
}

void copy(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) std::memcpy(dst, src, bytes);
}

void do_all_gather(Group& g, int me, const OpDesc& d) {
  const size_t es = d.elem_size();
  auto* dst = static_cast<std::byte*>(d.recv);
  size_t off = 0;
  for (int j = 0; j < g.n; ++j) {
    copy(dst + off * es, g.slots[size_t(j)].desc->send, d.counts[size_t(j)] * es);
    off += d.counts[size_t(j)];
  }
}

// Pulls block `me` of every member's send into my recv (or into `stage`).
void do_all_to_all(Group& g, int me, const OpDesc& d, std::byte* stage) {
  const size_t es = d.elem_size();
  auto* dst = stage ? stage : static_cast<std::byte*>(d.recv);
  size_t off = 0;
  for (int j = 0; j < g.n; ++j) {
    const OpDesc& o = *g.slots[size_t(j)].desc;  // counts agree: checked by mismatch()
    const auto* src = static_cast<const std::byte*>(o.send) + block_offset(o.counts, me) * es;
    copy(dst + off * es, src, d.recv_counts[size_t(j)] * es);
    off += d.recv_counts[size_t(j)];
  }
}

// Every member must have entered the same call.
// Every member compares every slot with slot 0, so all reach the same
// verdict: none (-1), or the first member that called something else, blamed
// by a message naming both calls.
std::pair<int, std::string> mismatch(const Group& g) {
  const OpDesc& o = *g.slots[0].desc;
  auto describe = [&](size_t r, const OpDesc& x) {
    return "rank " + std::to_string(g.world_ranks[r]) + " called " + std::string(comm_op_name(x.op)) + "(" +
           std::string(dtype_name(x.dtype)) + ", count " + std::to_string(x.count) + ", root " +
           std::to_string(x.root) + ")";
  };
  for (size_t r = 1; r < g.slots.size(); ++r) {
    const OpDesc& d = *g.slots[r].desc;
    bool same = o.op == d.op;
    if (same && d.op != CommOp::barrier) same = o.dtype == d.dtype;
    if (same && (d.op == CommOp::all_reduce || d.op == CommOp::reduce || d.op == CommOp::reduce_scatter))
      same = o.redop == d.redop;
    if (same && (d.op == CommOp::all_reduce || d.op == CommOp::reduce || d.op == CommOp::broadcast))
      same = o.count == d.count;
    if (same && (d.op == CommOp::reduce || d.op == CommOp::broadcast)) same = o.root == d.root;
    if (same && (d.op == CommOp::reduce_scatter || d.op == CommOp::all_gather)) same = o.counts == d.counts;
    if (!same) return {int(r), g.name + ": " + describe(r, d) + " while " + describe(0, o)};
  }
  // all_to_all: what j sends to r is what r expects from j (blamed: r).
  if (o.op == CommOp::all_to_all)
    for (size_t r = 0; r < g.slots.size(); ++r)
      for (size_t j = 0; j < g.slots.size(); ++j) {
        const size_t sent = g.slots[j].desc->counts[r], expected = g.slots[r].desc->recv_counts[j];
        if (sent != expected)
          return {int(r), g.name + ".all_to_all: rank " + std::to_string(g.world_ranks[j]) + " sends " +
                              std::to_string(sent) + " elements to rank " + std::to_string(g.world_ranks[r]) +
                              ", which expects " + std::to_string(expected)};
      }
  return {-1, ""};
}

}  // namespace

void run_collective(Group& g, int me, const OpDesc& d, const ChaosPoint& cp) {
  const auto name = comm_op_name(d.op);
  if (cp.chaos) chaos_delay(*cp.chaos, cp.world_rank, g.name, cp.seq, 0);
  // Members read each other's OpDesc until the last rendezvous, so nobody may
  // leave before it — a barrier included, and a mismatch too (all see it).
  g.slots[size_t(me)].desc = &d;
  g.rv.arrive_and_wait(me, g.name, name);
  // From here every member is committed: the later barriers do not give up
  // on an abort, so nobody leaves while a peer still reads its slot.
  if (auto [blamed, what] = mismatch(g); blamed >= 0) {
    g.rv.arrive_and_wait(me, g.name, name, /*committed=*/true);
    if (blamed == me) throw std::logic_error(what);
    throw CommAborted(what);  // the others echo the blamed member's error
  }
  if (cp.chaos) chaos_delay(*cp.chaos, cp.world_rank, g.name, cp.seq, 1);
  switch (d.op) {
    case CommOp::all_reduce:
      dispatch_dtype(d.dtype, [&](auto t) { do_all_reduce<decltype(t)>(g, me, d); });
      break;
    case CommOp::reduce:
      dispatch_dtype(d.dtype, [&](auto t) { do_reduce<decltype(t)>(g, me, d); });
      break;
    case CommOp::reduce_scatter:
      dispatch_dtype(d.dtype, [&](auto t) { do_reduce_scatter<decltype(t)>(g, me, d); });
      break;
    case CommOp::all_gather: do_all_gather(g, me, d); break;
    case CommOp::broadcast:
      copy(d.recv, g.slots[size_t(d.root)].desc->send, d.count * d.elem_size());
      break;
    case CommOp::all_to_all: {
      bool any_in_place = false;
      for (const auto& s : g.slots) any_in_place = any_in_place || s.desc->send == s.desc->recv;
      if (!any_in_place) {
        do_all_to_all(g, me, d, nullptr);
        break;
      }
      size_t total = 0;
      for (size_t c : d.recv_counts) total += c;
      std::vector<std::byte> stage(total * d.elem_size());
      do_all_to_all(g, me, d, stage.data());
      g.rv.arrive_and_wait(me, g.name, name, true);  // every member has read every send buffer
      copy(d.recv, stage.data(), stage.size());
      break;
    }
    case CommOp::barrier: break;
    default: throw std::logic_error("run_collective: not a collective: " + std::string(name));
  }
  g.rv.arrive_and_wait(me, g.name, name, true);
}

std::shared_ptr<Group> split_group(Group& g, int me, int color, int key, const std::string& name, int* new_rank) {
  Slot& mine = g.slots[size_t(me)];
  mine.color = color;
  mine.key = key;
  mine.made.reset();
  g.rv.arrive_and_wait(me, g.name, "split");
  std::vector<int> members;
  if (color >= 0) {
    for (int j = 0; j < g.n; ++j)
      if (g.slots[size_t(j)].color == color) members.push_back(j);
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return g.slots[size_t(a)].key < g.slots[size_t(b)].key; });
    if (members[0] == me) {
      std::vector<int> wr;
      for (int j : members) wr.push_back(g.world_ranks[size_t(j)]);
      mine.made = std::make_shared<Group>(g.world, name, std::move(wr));
    }
  }
  g.rv.arrive_and_wait(me, g.name, "split", true);
  std::shared_ptr<Group> made;
  if (color >= 0) {
    made = g.slots[size_t(members[0])].made;
    *new_rank = int(std::find(members.begin(), members.end(), me) - members.begin());
  }
  g.rv.arrive_and_wait(me, g.name, "split", true);  // the leader's slot is read before it is reused
  return made;
}

}  // namespace pb::local
