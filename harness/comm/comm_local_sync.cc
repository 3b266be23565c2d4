// Barrier: the last arriver bumps the generation under the mutex and notifies;
// waiters poll for a millisecond (spinning when ranks <= cores, yielding
// between polls when they share cores), then sleep on the condition variable
// in short polls (spin_until, block_until).
#include "harness/comm/comm_local_sync.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "harness/rng.h"

namespace pb::local {
WorldState::WorldState(WorldOptions o) : opts(std::move(o)) {
  unsigned cores = std::thread::hardware_concurrency();
  spin = cores > 0 && unsigned(opts.size) <= cores;
  deferred = local_progress_deferred(opts, cores);
}

void ThreadQueues::issued(DeferredQueue* q, const void* task) {
  std::lock_guard lk(mu_);
  order_.emplace_back(q, task);
}

void ThreadQueues::forget(DeferredQueue* q) {
  std::lock_guard lk(mu_);
  std::erase_if(order_, [&](const auto& e) { return e.first == q; });
}

void ThreadQueues::run_until(const void* task) {
  for (;;) {
    std::pair<DeferredQueue*, const void*> next;
    {
      std::lock_guard lk(mu_);
      if (order_.empty()) return;
      next = order_.front();
      order_.pop_front();
    }
    // Without the lock: the task blocks until its peers run it too.
    next.first->run_one();
    if (task && next.second == task) return;
  }
}

const std::shared_ptr<ThreadQueues>& ThreadQueues::mine() {
  thread_local const std::shared_ptr<ThreadQueues> q = std::make_shared<ThreadQueues>();
  return q;
}

void progress_deferred() { ThreadQueues::mine()->run_until(nullptr); }

void WorldState::abort(int rank, const std::string& what) {
  std::lock_guard lk(mu);
  if (failed_rank < 0) {
    failed_rank = rank;
    failed_what = what;
  }
  aborted.store(true, std::memory_order_release);
}

void WorldState::throw_aborted() const {
  std::lock_guard lk(mu);
  throw CommAborted("aborted: rank " + std::to_string(failed_rank) + " failed: " + failed_what);
}

Clock::time_point WorldState::deadline() const {
  if (opts.timeout_s <= 0) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opts.timeout_s));
}

Rendezvous::Rendezvous(int n, std::shared_ptr<WorldState> w, std::vector<int> world_ranks)
    : n_(n), w_(std::move(w)), world_ranks_(std::move(world_ranks)),
      arrived_(std::make_unique<std::atomic<uint64_t>[]>(size_t(n))) {
  for (int i = 0; i < n; ++i) arrived_[size_t(i)].store(0);
}

void Rendezvous::arrive_and_wait(int member, std::string_view group, std::string_view what, bool committed) {
  if (!committed) w_->check();
  const uint64_t g = gen_.load(std::memory_order_acquire);
  arrived_[size_t(member)].store(g + 1, std::memory_order_relaxed);
  if (count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
    count_.store(0, std::memory_order_relaxed);
    {
      std::lock_guard lk(mu_);
      gen_.store(g + 1, std::memory_order_release);
    }
    cv_.notify_all();
    return;
  }
  if (spin_until(*w_, [&] { return gen_.load(std::memory_order_acquire) != g; })) return;
  std::unique_lock lk(mu_);
  block_until(*w_, lk, cv_, [&] { return gen_.load(std::memory_order_acquire) != g; }, [&] {
    std::string missing;
    for (int m = 0; m < n_; ++m)
      if (arrived_[size_t(m)].load(std::memory_order_relaxed) != g + 1)
        missing += (missing.empty() ? "" : ", ") + std::to_string(world_ranks_[size_t(m)]);
    return "timed out after " + format_seconds(w_->opts.timeout_s) + " s in " + std::string(what) +
           " on group '" + std::string(group) + "': rank(s) " + missing + " did not arrive";
  }, committed);
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

void chaos_delay(const ChaosOptions& c, int world_rank, std::string_view group, uint64_t seq, int phase) {
  if (!c.enabled || c.max_delay_us <= 0) return;
  uint64_t stream = rng::stream_id(group) ^ (uint64_t(world_rank) * 0x9E3779B97F4A7C15ull);
  double u = rng::uniform(c.seed, stream, seq * 4 + uint64_t(phase));
  std::this_thread::sleep_for(std::chrono::nanoseconds(int64_t(u * c.max_delay_us * 1e3)));
}

}  // namespace pb::local
