// run_ranks: one thread per hosted rank; the first rank to fail (by anything
// but CommAborted, which is the echo of someone else's failure) is reported.
// The world is aborted before the failing rank's communicator is destroyed,
// so pending operations on it fail fast instead of waiting for peers.
#include "harness/comm/runner.h"

#include <algorithm>

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

bool hosts_rank(const World& world, int rank) {
  const std::vector<int> hosted = world.local_ranks();
  return std::find(hosted.begin(), hosted.end(), rank) != hosted.end();
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
  auto body = [&](int r) {
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
    body(ranks[0]);
  } else {
    std::vector<std::thread> threads;
    threads.reserve(ranks.size());
    for (int r : ranks) threads.emplace_back(body, r);
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
