// Collective benchmark driver (see driver.h). Buffers come from the
// communicator's BufferSpace, so the same code runs on host (local, mpi) and
// device (nccl) memory; inputs and expected results are built on the host.
#include "suites/collectives/driver.h"

#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace pb::coll {
namespace {

using Clock = std::chrono::steady_clock;

// v combined over ranks: 0 rank 0's, 1 mean, 2 min, 3 max.
double combine(Communicator& comm, SpaceBuffer& scratch, double v, int how) {
  BufferSpace& bs = comm.buffers();
  double x = how == 2 ? -v : v;
  bs.copy_in(scratch.get(), &x, sizeof x);
  if (how == 0) comm.broadcast(scratch.get(), 1, DType::f64, 0);
  else comm.all_reduce(scratch.get(), scratch.get(), 1, DType::f64, how == 1 ? ReduceOp::avg : ReduceOp::max);
  bs.copy_out(&x, scratch.get(), sizeof x);
  return how == 2 ? -x : x;
}

// Elements of got that differ from want: bit for bit, avg within a few ulps.
long count_wrong(DType t, ReduceOp op, bool reduces, const void* got, const void* want, size_t n) {
  long wrong = 0;
  dispatch_dtype(t, [&](auto x) {
    using T = decltype(x);
    const T* g = static_cast<const T*>(got);
    const T* w = static_cast<const T*>(want);
    for (size_t i = 0; i < n; ++i) {
      if (std::memcmp(&g[i], &w[i], sizeof(T)) == 0) continue;
      if (reduces && op == ReduceOp::avg) {
        const double gv = double(static_cast<acc_t<T>>(g[i])), wv = double(static_cast<acc_t<T>>(w[i]));
        if (std::fabs(gv - wv) <= 4 * dtype_eps(t) * std::max(1.0, std::fabs(wv))) continue;
      }
      ++wrong;
    }
  });
  return wrong;
}

struct Sweep {
  Communicator& comm;
  const CollDesc& op;
  const BenchOptions& o;
  Ctx ctx;
  SpaceBuffer& send;
  SpaceBuffer& recv;
  SpaceBuffer& both;  // the in-place buffer
  SpaceBuffer& scratch;
  bool first = true;
  bool left = false;

  // True if this rank leaves the run here (FailureKind::leave).
  bool inject() {
    if (!first || comm.rank() != o.fail_rank) return false;
    switch (o.fail_kind) {
      case FailureKind::raise: throw std::runtime_error("injected failure (--inject-failure)");
      case FailureKind::crash: std::abort();
      case FailureKind::stop: std::raise(SIGSTOP); return false;
      case FailureKind::leave: return true;
      case FailureKind::none: break;
    }
    return false;
  }

  BenchPoint point(size_t count, bool in_place) {
    BufferSpace& bs = comm.buffers();
    const size_t es = dtype_size(ctx.dtype);
    const Layout L = op.layout(count, comm.size(), comm.rank());
    ctx.param = L.param;
    std::byte* s = in_place ? both.get() + L.send_inplace * es : send.get();
    std::byte* r = in_place ? both.get() + L.recv_inplace * es : recv.get();
    std::vector<std::byte> host(std::max(L.send, L.recv) * es), junk(host.size(), std::byte{0xff});
    auto fill_inputs = [&](uint64_t rep) {
      ctx.rep = rep;
      bs.copy_in(in_place ? both.get() : r, junk.data(), in_place ? junk.size() : L.recv * es);
      op.init(ctx, host.data());
      bs.copy_in(s, host.data(), L.send * es);
    };
    fill_inputs(0);
    for (int i = 0; i < o.warmup; ++i) op.run(comm, ctx, s, r);
    comm.barrier();
    left = inject();
    first = false;
    if (left) return {};
    auto t0 = Clock::now();
    for (int i = 0; i < o.iters; ++i) op.run(comm, ctx, s, r);
    const double t = std::chrono::duration<double>(Clock::now() - t0).count() / std::max(1, o.iters);
    BenchPoint p;
    p.bytes = std::max(L.send, L.recv) * es;
    p.count = p.bytes / es;
    p.dtype = ctx.dtype;
    p.redop = op.reduces ? std::string(reduce_op_name(ctx.redop)) : "none";
    p.root = op.rooted ? ctx.root : -1;
    p.in_place = in_place;
    p.iters = o.iters;
    const double time = combine(comm, scratch, t, o.average);
    p.time_us = time * 1e6;
    p.algbw_gbps = time > 0 ? double(p.bytes) / time / 1e9 : 0;
    p.busbw_gbps = p.algbw_gbps * op.bus_factor(comm.size());
    if (o.check <= 0) return p;
    long wrong = 0;
    std::vector<std::byte> want(L.recv * es), got(L.recv * es);
    for (int k = 1; k <= o.check; ++k) {
      fill_inputs(uint64_t(k));
      op.run(comm, ctx, s, r);
      if (!op.expected(ctx, want.data())) continue;
      bs.copy_out(got.data(), r, got.size());
      wrong += count_wrong(ctx.dtype, ctx.redop, op.reduces, got.data(), want.data(), L.recv);
    }
    p.wrong = long(std::llround(combine(comm, scratch, double(wrong), 1) * comm.size()));
    return p;
  }
};

}  // namespace

std::vector<size_t> sweep_sizes(const BenchOptions& o) {
  std::vector<size_t> out;
  for (size_t s = o.min_bytes; s <= o.max_bytes;) {
    out.push_back(s);
    size_t next = o.step_factor > 1 ? size_t(double(s) * o.step_factor) : s + o.step_bytes;
    if (next <= s) next = s + 1;
    s = next;
  }
  return out;
}

bool run_collective(Communicator& comm, const CollDesc& op, DType dtype, ReduceOp redop, int root,
                    const BenchOptions& o, const std::function<void(const BenchPoint&, const BenchPoint&)>& on_line) {
  BufferSpace& bs = comm.buffers();
  const size_t es = dtype_size(dtype);
  const size_t max_count = o.max_bytes / es;
  const Layout L = op.layout(max_count, comm.size(), comm.rank());
  SpaceBuffer send(bs, L.send * es), recv(bs, L.recv * es), both(bs, std::max(L.send, L.recv) * es), scratch(bs, 8);
  Ctx ctx;
  ctx.rank = comm.rank();
  ctx.n = comm.size();
  ctx.dtype = dtype;
  ctx.redop = redop;
  ctx.root = root;
  Sweep sw{comm, op, o, ctx, send, recv, both, scratch};
  for (size_t bytes : sweep_sizes(o)) {
    BenchPoint oop = sw.point(bytes / es, /*in_place=*/false);
    if (sw.left) return false;
    BenchPoint ip = sw.point(bytes / es, /*in_place=*/true);
    on_line(oop, ip);
  }
  return true;
}

const char* nccl_type_name(DType t) {
  return t == DType::f64 ? "double" : t == DType::f32 ? "float" : "bfloat16";
}

void print_header(std::FILE* out) {
  std::fprintf(out, "#%75s%35s\n", "out-of-place", "in-place");
  std::fprintf(out, "#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type",
               "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::fprintf(out, "#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "",
               "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

void print_line(std::FILE* out, const BenchPoint& a, const BenchPoint& b) {
  std::fprintf(out, "%12zu  %12zu  %8s  %6s  %6d", a.bytes, a.count, nccl_type_name(a.dtype), a.redop.c_str(), a.root);
  for (const BenchPoint* p : {&a, &b}) {
    char t[32], w[32];
    const char* fmt = p->time_us >= 10000 ? "%7.0f" : p->time_us >= 100 ? "%7.1f" : "%7.2f";
    std::snprintf(t, sizeof t, fmt, p->time_us);
    if (p->wrong < 0) std::snprintf(w, sizeof w, "N/A");
    else std::snprintf(w, sizeof w, "%ld", p->wrong);
    std::fprintf(out, "  %7s  %6.2f  %6.2f  %6s", t, p->algbw_gbps, p->busbw_gbps, w);
  }
  std::fprintf(out, "\n");
  std::fflush(out);
}

}  // namespace pb::coll
