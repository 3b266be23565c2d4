// Side-by-side timing of raw MPI_Allreduce and the mpi backend's all_reduce,
// in one run on the same buffers, so their bus bandwidths compare directly.
//   mpirun -np 2 mpi_allreduce_baseline [--min 64K] [--max 256M] [--reps 7]
//   [--raw-only]  (MPI_Init without threads, raw calls only: the thread-level cost)
// Per size: fp32 sum, out of place; each rep times `iters` calls of one kind
// between barriers (max over ranks), kinds alternating rep by rep; the
// reported time is the median rep. busbw = S/t * 2(n-1)/n (nccl-tests).
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness/comm_backends.h"

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

template <class F> double timed(int iters, F&& call) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) call();
  double t = (MPI_Wtime() - t0) / iters;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
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
                "pb_busbw", "pb/raw");
  }
  std::vector<float> send(hi / sizeof(float), 1.0f), recv(hi / sizeof(float), 0.0f);
  for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
    const size_t count = bytes / sizeof(float);
    const int iters = int(std::clamp<size_t>((size_t(64) << 20) / bytes, 3, 200));
    auto raw_call = [&] { MPI_Allreduce(send.data(), recv.data(), int(count), MPI_FLOAT, MPI_SUM, raw); };
    auto pb_call = [&] { comm->all_reduce(send.data(), recv.data(), count, pb::DType::f32); };
    timed(2, raw_call);
    if (comm) timed(2, pb_call);
    std::vector<double> t_raw, t_pb;
    for (int r = 0; r < reps; ++r) {
      t_raw.push_back(timed(iters, raw_call));
      if (comm) t_pb.push_back(timed(iters, pb_call));
    }
    const double a = median(t_raw), b = comm ? median(t_pb) : 0;
    if (rank == 0)
      std::printf("  %12zu %12zu %12.1f %10.3f %12.1f %10.3f %8.3f\n", bytes, count, a * 1e6, bytes / a * factor / 1e9,
                  b * 1e6, comm ? bytes / b * factor / 1e9 : 0.0, comm ? a / b : 0.0);
    std::fflush(stdout);
  }
  MPI_Comm_free(&raw);
  comm.reset();
  if (raw_only) MPI_Finalize();
  world.reset();
  return 0;
}
