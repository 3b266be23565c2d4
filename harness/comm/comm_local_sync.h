// Synchronization under the local backend: the failure state shared by the
// ranks (threads) of one world, a reusable barrier, and chaos delays.
// Invariant: every blocking wait of the backend goes through block_until(),
// which polls the world's abort flag and the deadline, so a failed or missing
// rank turns every wait into an exception within a few milliseconds (abort)
// or timeout_s (a rank that never arrives), never a hang. Committed barriers
// (see Rendezvous) skip the abort poll but keep the deadline.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "harness/comm/runner.h"

namespace pb::local {

using Clock = std::chrono::steady_clock;

struct WorldState {
  explicit WorldState(WorldOptions o);

  WorldOptions opts;
  bool spin = false;  // poll on pauses only when there are no more ranks than cores (else yield between polls)
  bool deferred = false;  // non-blocking collectives run by their rank (local_progress_deferred)
  std::atomic<bool> aborted{false};
  mutable std::mutex mu;
  int failed_rank = -1;
  std::string failed_what;

  // Records the first failure and wakes every waiter; later calls are echoes.
  void abort(int rank, const std::string& what);
  void check() const {
    if (aborted.load(std::memory_order_acquire)) throw_aborted();
  }
  [[noreturn]] void throw_aborted() const;
  Clock::time_point deadline() const;
};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// How long a waiting rank polls before it sleeps: a time, not a count of
// pauses (a pause takes about 10 cycles before Skylake and about 140 since:
// 4,000 of them were some 100 us on one machine of this project and 44 us on
// the next, where every pipeline hand-off of the tiny model, 50-100 us apart,
// then paid a wake-up: tiny pp2 1F1B 0.66 ms per step against 0.52 with a
// millisecond). About the longest wait inside a tiny step; MPI and NCCL poll
// without a bound.
inline constexpr std::chrono::microseconds kSpinFor{1000};

// The cheap part of a wait, before sleeping on a condition variable (whose
// wake-up costs tens of microseconds in a VM, more when the waker has to
// bring an idle core out of halt). For kSpinFor, a rank with a core of its
// own (w.spin) spins on pauses; a rank that shares its core yields between
// polls instead, as Open MPI does when oversubscribed (mpi_yield_when_idle):
// a peer on the same core that is ready to run gets the core at once, and a
// core with no ready rank keeps polling instead of halting (4 ranks on 2
// cores, sweep_small: tiny-moe dp4.ep4 2.38 -> 1.69 ms per step, small
// tp2.pp2 ZeRO-3 + SP 8.98 -> 6.20 ms, against 8 yields and then sleep).
// Then yields a few times. True as soon as ready() is; false when the
// caller has to block.
template <class Ready>
bool spin_until(const WorldState& w, Ready ready) {
  const auto until = Clock::now() + kSpinFor;
  do {
    for (int i = 0; i < (w.spin ? 64 : 1); ++i) {
      if (ready()) return true;
      if (w.spin) cpu_relax();
      else std::this_thread::yield();
    }
  } while (Clock::now() < until);
  for (int i = 0; i < 8; ++i) {
    if (ready()) return true;
    std::this_thread::yield();
  }
  return ready();
}

// Deferred progress (WorldOptions::Progress::deferred): a communicator's
// queue of non-blocking collectives its rank issued and has not run yet.
class DeferredQueue {
 public:
  virtual ~DeferredQueue() = default;
  // Runs the oldest queued task (none: nothing); its request, or null. Never
  // throws: a task's error goes to its request.
  virtual const void* run_one() = 0;
};

// The deferred collectives a thread has issued, over all its communicators,
// in issue order. The thread runs them, oldest first, before it starts any
// blocking call (a collective, a receive, a wait): a peer may be waiting in
// one of them before it can send or join, as MPI's blocking calls progress
// outstanding requests. Never from inside a collective's own wait: a rank
// that had joined one collective and then blocked in another could hold up
// both (deadlock); at top level, ranks running the same program in the same
// order meet in the same order.
class ThreadQueues {
 public:
  void issued(DeferredQueue* q, const void* task);
  void forget(DeferredQueue* q);  // a queue going away (it ran what it held)
  // Runs the tasks issued until `task` has run (every task, if null).
  void run_until(const void* task);
  static const std::shared_ptr<ThreadQueues>& mine();  // the calling thread's

 private:
  std::mutex mu_;
  std::deque<std::pair<DeferredQueue*, const void*>> order_;
};

// The calling thread's deferred collectives, all run (ThreadQueues).
void progress_deferred();

// Blocks on cv (lk held) until done() is true, polling abort (unless
// `committed`: every party is known to be on its way) and the deadline; on
// timeout throws CommTimeout(on_timeout()).
template <class Done, class Describe>
void block_until(const WorldState& w, std::unique_lock<std::mutex>& lk, std::condition_variable& cv, Done done,
                 Describe on_timeout, bool committed = false) {
  const auto deadline = w.deadline();
  while (!done()) {
    if (!committed) w.check();
    if (Clock::now() >= deadline) throw CommTimeout(on_timeout());
    cv.wait_for(lk, std::chrono::milliseconds(5));
  }
}

// A reusable n-party barrier (generation counting). Members who have not
// arrived are named when a wait times out. A `committed` wait is one every
// member is certain to reach (all are past an earlier barrier of the same
// call and nothing in between can fail): it does not give up when the world
// aborts, so no member leaves while the others still read its buffers.
class Rendezvous {
 public:
  Rendezvous(int n, std::shared_ptr<WorldState> w, std::vector<int> world_ranks);
  void arrive_and_wait(int member, std::string_view group, std::string_view what, bool committed = false);

 private:
  int n_;
  std::shared_ptr<WorldState> w_;
  std::vector<int> world_ranks_;
  std::atomic<int> count_{0};
  std::atomic<uint64_t> gen_{0};
  std::unique_ptr<std::atomic<uint64_t>[]> arrived_;  // generation + 1 each member last arrived at
  std::mutex mu_;
  std::condition_variable cv_;
};

// "0.3", "60": seconds as people write them in messages.
std::string format_seconds(double s);

// Sleeps a seeded random time in [0, max_delay_us]: a pure function of
// (seed, world rank, group, sequence number, phase). No-op unless enabled.
void chaos_delay(const ChaosOptions& c, int world_rank, std::string_view group, uint64_t seq, int phase);

}  // namespace pb::local
