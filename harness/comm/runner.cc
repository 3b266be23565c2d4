// run_ranks: one thread per hosted rank; the first rank to fail (by anything
// but CommAborted, which is the echo of someone else's failure) is reported.
// The world is aborted before the failing rank's communicator is destroyed,
// so pending operations on it fail fast instead of waiting for peers.
#include "harness/comm/runner.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include <mutex>
#include <thread>

#include "harness/status.h"

namespace pb {

std::string_view backend_name(BackendKind b) {
  return b == BackendKind::local ? "local" : b == BackendKind::mpi ? "mpi" : "nccl";
}

bool parse_backend(std::string_view s, BackendKind* out) {
  if (s == "local") *out = BackendKind::local;
  else if (s == "mpi") *out = BackendKind::mpi;
  else if (s == "nccl") *out = BackendKind::nccl;
  else return false;
  return true;
}

void validate(const WorldOptions& o) {
  require(o.size >= 0, "world size: must be >= 0, got " + std::to_string(o.size));
  require(o.ranks_per_node >= 0,
          "ranks_per_node: must be >= 0 (0 = one node, or the real hosts under MPI), got " +
              std::to_string(o.ranks_per_node));
  if (o.ranks_per_node > 0 && o.size > 0)
    require(o.size % o.ranks_per_node == 0, "ranks_per_node: must divide the world size " + std::to_string(o.size) +
                                                ", got " + std::to_string(o.ranks_per_node));
  require(o.timeout_s >= 0, "timeout: must be >= 0 seconds (0 = never), got " + std::to_string(o.timeout_s));
  require(o.chaos.max_delay_us >= 0, "chaos max delay: must be >= 0 us, got " + std::to_string(o.chaos.max_delay_us));
}

bool local_progress_deferred(const WorldOptions& o, unsigned cores) {
  if (o.progress != WorldOptions::Progress::automatic) return o.progress == WorldOptions::Progress::deferred;
  if (cores == 0) cores = std::thread::hardware_concurrency();
  return cores > 0 && 2 * int64_t(o.size) > int64_t(cores);
}

bool local_binds_ranks(const WorldOptions& o, unsigned cores) {
  if (o.binding == WorldOptions::Binding::none || o.size < 2) return false;
  return local_progress_deferred(o, cores);
}

bool hosts_rank(const World& world, int rank) {
  const std::vector<int> hosted = world.local_ranks();
  return std::find(hosted.begin(), hosted.end(), rank) != hosted.end();
}

void require_same_spec(World& world, const std::string& spec, const std::string& what) {
  if (world.backend() == BackendKind::local) return;
  uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bits
  for (unsigned char ch : spec) h = (h ^ ch) * 1099511628211ull;
  // Two exact halves in f64 (the collectives' element types).
  const double mine[2] = {double(h >> 32), double(h & 0xffffffffu)};
  std::vector<double> all(2 * size_t(world.size()));
  run_ranks(world, [&](Communicator& comm) {
    BufferSpace& bs = comm.buffers();
    void* send = bs.allocate(sizeof mine);
    void* recv = bs.allocate(all.size() * sizeof(double));
    bs.copy_in(send, mine, sizeof mine);
    comm.all_gather(send, recv, 2, DType::f64);
    bs.copy_out(all.data(), recv, all.size() * sizeof(double));
    bs.deallocate(send);
    bs.deallocate(recv);
  });
  std::string differ;
  for (int r = 1; r < world.size(); ++r)
    if (all[2 * size_t(r)] != all[0] || all[2 * size_t(r) + 1] != all[1])
      differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  const bool one = differ.find(',') == std::string::npos;
  require(differ.empty(), what + ": rank" + (one ? " " : "s ") + differ + (one ? " was" : " were") +
                              " started with another run spec than rank 0 (different arguments or config: "
                              "shard, precision, steps, ...); start every process with the same command line");
}

std::vector<int> allowed_cores() {
  std::vector<int> cores;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cores.push_back(c);
  return cores;
}

void bind_to_core(int core) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(core, &one);
  pthread_setaffinity_np(pthread_self(), sizeof one, &one);
}

void run_ranks(World& world, const std::function<void(Communicator&)>& fn) {
  const std::vector<int> ranks = world.local_ranks();
  const size_t ranks_hosted = ranks.size();
  std::mutex mu;
  int first = -1;
  std::string first_what;
  bool echoed = false;
  auto fail = [&](int r, const std::string& what) {
    {
      std::lock_guard lk(mu);
      if (first < 0) first = r, first_what = what;
    }
    world.abort(r, what);
  };
  auto body = [&](int r, int core) {
    if (core >= 0) bind_to_core(core);  // itself, before anything: a failure leaves it where the scheduler put it
    std::unique_ptr<Communicator> comm;
    try {
      comm = world.communicator(r);
      fn(*comm);
    } catch (const CommAborted& e) {
      std::lock_guard lk(mu);
      echoed = true;
      if (ranks_hosted == 1) first_what = e.what();
    } catch (const std::exception& e) {
      fail(r, e.what());
    } catch (...) {
      fail(r, "unknown exception");
    }
    try {
      comm.reset();
    } catch (...) {
    }
  };
  if (ranks.size() == 1) {
    body(ranks[0], -1);
  } else {
    std::vector<std::thread> threads;
    threads.reserve(ranks.size());
    const std::vector<int> cores = world.binds_ranks() ? allowed_cores() : std::vector<int>{};
    for (size_t i = 0; i < ranks.size(); ++i) threads.emplace_back(body, ranks[i], cores.empty() ? -1 : cores[i % cores.size()]);
    for (auto& t : threads) t.join();
  }
  if (first >= 0) throw RankError(first, first_what);
  if (echoed) throw CommAborted(first_what.empty() ? "run aborted" : first_what);
}

void run_local(int n, const std::function<void(Communicator&)>& fn, WorldOptions o) {
  o.backend = BackendKind::local;
  o.size = n;
  auto world = make_local_world(o);
  run_ranks(*world, fn);
}

}  // namespace pb
