// Side-by-side timing of raw MPI_Allreduce and the mpi backend's all_reduce,
// in one run on the same buffers, so their bus bandwidths compare directly.
//   mpirun -np 2 mpi_allreduce_baseline [--min 64K] [--max 256M] [--reps 7]
//   [--raw-only]  (MPI_Init without threads, raw calls only: the thread-level cost)
// Per size: fp32 sum, out of place. Each rep makes `iters` pairs of calls,
// one of each kind, the order alternating pair by pair, and times every call
// (so both kinds see the same machine load); a rep's time per kind is the
// mean over its calls, max over ranks. Reported: the median rep of each kind
// and the median of the per-rep ratios. busbw = S/t * 2(n-1)/n (nccl-tests).
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "harness/comm/comm_backends.h"

namespace {

size_t parse_size(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return size_t(v);
}

template <class F> double timed(F&& call) {
  double t0 = MPI_Wtime();
  call();
  return MPI_Wtime() - t0;
}

// {raw, pb} mean seconds per call over `iters` alternating pairs, max over ranks.
template <class R, class P> std::pair<double, double> paired(int iters, R&& raw, P&& pb) {
  double t[2] = {0, 0};
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < iters; ++i) {
    if (i % 2 == 0) t[0] += timed(raw), t[1] += timed(pb);
    else t[1] += timed(pb), t[0] += timed(raw);
  }
  MPI_Allreduce(MPI_IN_PLACE, t, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return {t[0] / iters, t[1] / iters};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t lo = 64 << 10, hi = size_t(256) << 20;
  int reps = 7;
  bool raw_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--min" && i + 1 < argc) lo = parse_size(argv[++i]);
    else if (a == "--max" && i + 1 < argc) hi = parse_size(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--raw-only") raw_only = true;
    else {
      std::fprintf(stderr, "usage: %s [--min BYTES] [--max BYTES] [--reps N] [--raw-only]\n", argv[0]);
      return 2;
    }
  }
  std::unique_ptr<pb::World> world;
  std::unique_ptr<pb::Communicator> comm;
  if (raw_only) {
    MPI_Init(&argc, &argv);
  } else {
    pb::WorldOptions o;
    o.backend = pb::BackendKind::mpi;
    o.size = 0;
    world = pb::make_world(o);
    comm = world->communicator(world->local_ranks()[0]);
  }
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm raw;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  int level = 0;
  MPI_Query_thread(&level);
  const double factor = 2.0 * (n - 1) / n;
  if (rank == 0) {
    std::printf("# mpi_allreduce_baseline: %d ranks, fp32 sum out of place, thread level %d, median of %d reps\n", n,
                level, reps);
    std::printf("# %12s %12s %12s %10s %12s %10s %8s\n", "size(B)", "count", "raw(us)", "raw_busbw", "pb(us)",
                "pb_busbw", "raw/pb");
  }
  std::vector<float> send(hi / sizeof(float), 1.0f), recv(hi / sizeof(float), 0.0f);
  for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
    const size_t count = bytes / sizeof(float);
    const int iters = int(std::clamp<size_t>((size_t(64) << 20) / bytes, 3, 200));
    auto raw_call = [&] { MPI_Allreduce(send.data(), recv.data(), int(count), MPI_FLOAT, MPI_SUM, raw); };
    auto pb_call = [&] { comm->all_reduce(send.data(), recv.data(), count, pb::DType::f32); };
    auto none = [] {};
    std::vector<double> t_raw, t_pb, ratio;
    for (int r = 0; r <= reps; ++r) {  // rep 0 is warm-up
      auto [a, b] = comm ? paired(iters, raw_call, pb_call) : paired(iters, raw_call, none);
      if (r == 0) continue;
      t_raw.push_back(a), t_pb.push_back(b), ratio.push_back(a / b);
    }
    const double a = median(t_raw), b = median(t_pb);
    if (rank == 0)
      std::printf("  %12zu %12zu %12.1f %10.3f %12.1f %10.3f %8.3f\n", bytes, count, a * 1e6, bytes / a * factor / 1e9,
                  b * 1e6, comm ? bytes / b * factor / 1e9 : 0.0, comm ? median(ratio) : 0.0);
    std::fflush(stdout);
  }
  MPI_Comm_free(&raw);
  comm.reset();
  if (raw_only) MPI_Finalize();
  world.reset();
  return 0;
}
