// Ring attention and Ulysses, forward + backward of one layer's attention,
// over cp ranks on this machine: time, bytes each rank sends, and for ring
// the share of the K/V transfer time hidden behind block compute.
//
// Usage: cp_benchmark [--cp N] [--seqs 256,512,1024] [--batch B] [--heads H]
//                     [--hs D] [--reps R] [--csv FILE]
// --batch: sequences per call (1 by default; a training step's microbatch
// holds several, and at short sequences the per-block calls dominate).
// Local backend (cp threads) by default; under mpirun, one rank per process
// (the world must be --cp ranks).
//
// Hidden share. Ring runs twice: overlapped (the next block's send/recv is
// posted before the current block's compute, as the strategy runs it) and
// serialized (posted after it and waited for at once). The serialized run's
// wait is the transfer time T (plus any imbalance between ranks, small with
// zigzag); the overlapped run's wait is the exposed part E. Hidden = 1 - E/T.
// Each figure is the median over --reps repetitions, the slowest rank's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "harness/comm/comm_backends.h"
#include "harness/status.h"
#include "impl/context_parallel/attention.h"
#include "kernels/cpu/ops.h"

namespace pb::cp {
namespace {

struct Flags {
  int cp = 2, batch = 1, heads = 4, hs = 32, reps = 5;
  std::vector<int> seqs = {256, 512, 1024};
  std::string csv;
};

struct Row {
  std::string algo;
  bool overlap = true, zigzag = true;
  int seq = 0;
  double time_ms = 0, compute_ms = 0, wait_ms = 0;
  int64_t bytes = 0;  // sent per rank per forward + backward
  std::vector<int64_t> flops;  // attention FLOPs of one forward, per rank (counted by the kernel calls)
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    require(i + 1 < argc, a + ": needs a value (flags: --cp --seqs --batch --heads --hs --reps --csv)");
    const std::string v = argv[++i];
    if (a == "--cp") f.cp = parse_int(v, a, 2, 64);
    else if (a == "--batch") f.batch = parse_int(v, a, 1, 4096);
    else if (a == "--heads") f.heads = parse_int(v, a, 1, 256);
    else if (a == "--hs") f.hs = parse_int(v, a, 1, 1024);
    else if (a == "--reps") f.reps = parse_int(v, a, 1, 1000);
    else if (a == "--csv") f.csv = v;
    else if (a == "--seqs") {
      f.seqs.clear();
      std::stringstream ss(v);
      for (std::string t; std::getline(ss, t, ',');) f.seqs.push_back(parse_int(t, a, 1, 1 << 16));
    } else {
      throw InputError(a + ": unknown flag (flags: --cp --seqs --batch --heads --hs --reps --csv)");
    }
  }
  for (int s : f.seqs)
    require(s % (2 * f.cp) == 0, "--seqs: " + std::to_string(s) + " does not split into 2 x cp zigzag chunks");
  require(f.heads % f.cp == 0, "--heads: Ulysses needs heads % cp == 0, got " + std::to_string(f.heads) + " % " +
                                   std::to_string(f.cp));
  return f;
}

// One configuration on every rank: reps x (forward + backward).
Row measure(World& world, const Flags& f, CpAlgo algo, bool overlap, int seq, bool zigzag = true) {
  Row row;
  row.algo = algo == CpAlgo::ring ? "ring" : "ulysses";
  row.overlap = overlap;
  row.zigzag = zigzag;
  row.seq = seq;
  row.flops.assign(size_t(f.cp), 0);
  std::vector<double> times, computes, waits;
  run_ranks(world, [&](Communicator& comm) {
    kernels::set_blas_threads(1);
    CpOptions o;
    o.cp = f.cp;
    o.algo = algo;
    o.zigzag = zigzag;
    const int Tl = seq / f.cp, Ct = f.heads * f.hs, N = f.batch * Tl;
    std::mt19937 g(uint32_t(comm.rank() + 1));
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> qkv(size_t(N) * 3 * Ct), dout(size_t(N) * Ct), out(size_t(N) * Ct), dqkv(qkv.size());
    for (auto& x : qkv) x = u(g);
    for (auto& x : dout) x = u(g);
    MemoryTracker mt;
    std::unique_ptr<RingAttention<float>> ring;
    std::unique_ptr<UlyssesAttention<float>> uly;
    std::vector<float> lse, qkvh, att;
    if (algo == CpAlgo::ring) {
      ring = std::make_unique<RingAttention<float>>(o, &comm, &mt, f.batch, seq, f.heads, f.hs, overlap);
      lse.resize(size_t(f.batch) * f.heads * Tl);
    } else {
      uly = std::make_unique<UlyssesAttention<float>>(o, &comm, &mt, f.batch, seq, f.heads, f.hs);
      qkvh.resize(size_t(f.batch) * seq * 3 * Ct / f.cp);
      att.resize(size_t(f.batch) * (f.heads / f.cp) * seq * seq);
    }
    auto once = [&] {
      if (ring) {
        ring->forward(out.data(), lse.data(), qkv.data());
        ring->backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data());
      } else {
        uly->forward(out.data(), qkvh.data(), att.data(), qkv.data());
        uly->backward(dqkv.data(), dout.data(), qkvh.data(), att.data());
      }
    };
    once();  // warm-up
    {
      std::vector<double> fl(size_t(f.cp), 0.0);
      fl[size_t(comm.rank())] = double(ring ? ring->stats().flops : uly->stats().flops);
      comm.all_reduce(fl.data(), fl.data(), fl.size(), DType::f64, ReduceOp::sum);
      if (comm.rank() == 0)
        for (int r = 0; r < f.cp; ++r) row.flops[size_t(r)] = int64_t(fl[size_t(r)]);
    }
    comm.log().reset();
    for (int r = 0; r < f.reps; ++r) {
      const AttentionStats before = ring ? ring->stats() : uly->stats();
      comm.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      once();
      double v[3] = {std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0, 0};
      const AttentionStats after = ring ? ring->stats() : uly->stats();
      v[1] = after.compute_s - before.compute_s;
      v[2] = after.wait_s - before.wait_s;
      comm.all_reduce(v, v, 3, DType::f64, ReduceOp::max);  // the slowest rank's
      if (comm.rank() == 0) times.push_back(v[0]), computes.push_back(v[1]), waits.push_back(v[2]);
    }
    if (comm.rank() == 0) {
      const CommCounters c = comm.log().total();
      const CommCounters bar = comm.log().by_op(CommOp::barrier), ar = comm.log().by_op(CommOp::all_reduce);
      row.bytes = int64_t(c.bytes - bar.bytes - ar.bytes - comm.log().by_op(CommOp::recv).bytes) / f.reps;
    }
  });
  row.time_ms = 1e3 * median(times);
  row.compute_ms = 1e3 * median(computes);
  row.wait_ms = 1e3 * median(waits);
  return row;
}

int run(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  WorldOptions wo;
  const bool mpi = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
  wo.backend = mpi ? BackendKind::mpi : BackendKind::local;
  wo.size = mpi ? 0 : f.cp;
  wo.timeout_s = 600;
  auto world = make_world(wo);
  require(world->size() == f.cp, "--cp " + std::to_string(f.cp) + ": the world has " + std::to_string(world->size()) +
                                     " ranks (mpirun -np must equal --cp)");
  std::vector<Row> rows;
  for (int seq : f.seqs) {
    rows.push_back(measure(*world, f, CpAlgo::ring, true, seq));
    rows.push_back(measure(*world, f, CpAlgo::ring, false, seq));
    rows.push_back(measure(*world, f, CpAlgo::ulysses, true, seq));
  }
  Flags once = f;
  once.reps = 1;
  const Row contiguous = measure(*world, once, CpAlgo::ring, true, f.seqs.back(), false);
  if (!hosts_rank(*world, 0)) return 0;
  const char* backend = mpi ? "mpi" : "local";
  std::printf("cp%d %s, %d sequence(s), %d heads x %d, fp32, forward + backward of one layer's attention, "
              "median of %d\n\n",
              f.cp, backend, f.batch, f.heads, f.hs, f.reps);
  std::printf("| seq | ring ms | ring MiB/rank | K/V transfer ms (serialized) | exposed ms (overlapped) | hidden | "
              "Ulysses ms | Ulysses MiB/rank |\n|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i + 2 < rows.size() + 0; i += 3) {
    const Row &r = rows[i], &s = rows[i + 1], &u = rows[i + 2];
    const double hidden = s.wait_ms > 0 ? 1 - r.wait_ms / s.wait_ms : 0;
    std::printf("| %d | %.3f | %.3f | %.3f | %.3f | %.0f%% | %.3f | %.3f |\n", r.seq, r.time_ms,
                double(r.bytes) / (1 << 20), s.wait_ms, r.wait_ms, 100 * hidden, u.time_ms,
                double(u.bytes) / (1 << 20));
  }
  auto flops = [](const Row& r) {
    std::string s;
    for (int64_t x : r.flops) s += (s.empty() ? "" : " / ") + std::to_string(x);
    return s;
  };
  const Row& zig = rows[rows.size() - 3];
  std::printf("\nring attention FLOPs of one forward per rank (rank 0 / ... / rank %d), seq %d: zigzag %s; "
              "contiguous %s\n",
              f.cp - 1, zig.seq, flops(zig).c_str(), flops(contiguous).c_str());
  if (!f.csv.empty()) {
    std::ofstream out(f.csv);
    require(bool(out), "--csv: cannot write " + f.csv);
    out << "backend,cp,batch,heads,hs,algo,overlap,zigzag,seq,time_ms,compute_ms,wait_ms,bytes_per_rank\n";
    for (const Row& r : rows)
      out << backend << ',' << f.cp << ',' << f.batch << ',' << f.heads << ',' << f.hs << ',' << r.algo << ','
          << (r.overlap ? 1 : 0) << ',' << (r.zigzag ? 1 : 0) << ',' << r.seq << ',' << r.time_ms << ',' << r.compute_ms << ','
          << r.wait_ms << ',' << r.bytes << '\n';
    require(bool(out), "--csv: writing " + f.csv + " failed");
  }
  return 0;
}

}  // namespace
}  // namespace pb::cp

int main(int argc, char** argv) {
  return pb::run_main("cp_benchmark", [&] { return pb::cp::run(argc, argv); });
}
