// Launching SPMD ranks. A World is a backend's process-level state: the ranks
// this process hosts (local: all of them, as threads; mpi/nccl: one) and their
// world communicators. run_ranks() calls fn once per hosted rank and turns any
// failure into one RankError naming the first rank that failed.
// Invariant (local): when a rank throws, the world is aborted, so every peer
// blocked in a collective or recv wakes and throws CommAborted; a rank that
// never arrives is ended by the timeout. Either way run_ranks returns within
// about timeout_s and never hangs.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "harness/comm/comm.h"

namespace pb {

enum class BackendKind : uint8_t { local, mpi, nccl };
std::string_view backend_name(BackendKind b);
bool parse_backend(std::string_view s, BackendKind* out);

// Seeded random delays before and inside every operation of the local
// backend, to shake out races in code that overlaps communication with compute.
struct ChaosOptions {
  bool enabled = false;
  uint64_t seed = 0;
  double max_delay_us = 2000;  // each delay is uniform in [0, max_delay_us]
};

struct WorldOptions {
  BackendKind backend = BackendKind::local;
  int size = 1;             // local: ranks; mpi/nccl: 0 = as launched, else must match
  int ranks_per_node = 0;   // 0: local = one node, mpi/nccl = the real hosts
  double timeout_s = 60;    // a call blocked longer than this fails the run; 0 = never
  ChaosOptions chaos;       // local backend only
  // Local backend only: receives ignore tags and take a pair's messages in
  // the order they were sent, as nccl does (a stand-in for its matching).
  bool match_by_order = false;
  // Local backend only: who runs a non-blocking collective. thread: the
  // communicator's progress thread, while the caller computes (overlap, as a
  // GPU's communication stream); deferred: the issuing rank itself, in issue
  // order, when it waits for it or blocks in any other call (MPI's progress
  // rule without an asynchronous progress thread; a Request::test() does not
  // run one: it would block on the peers); automatic: thread when
  // every rank and its progress thread have a core of their own (2 x ranks <=
  // cores), deferred otherwise, where a progress thread can only take the
  // core of a computing rank and a collective waits on the scheduler.
  enum class Progress { automatic, thread, deferred };
  Progress progress = Progress::automatic;
  // Local backend only: automatic binds hosted rank i's thread to core i mod
  // n of the n cores the calling thread may run on, whenever progress is
  // deferred (no progress threads, which would inherit their rank's core):
  // one rank per core where they fit, as mpirun binds, and an even share of
  // each core where they do not, as the planner's time-sharing assumes;
  // none leaves placement to the scheduler. Unbound, the same point moved
  // between two speeds from window to window (sweeps in rounds, three each
  // way, alternating, on 2 cores): dp2 ZeRO-2 tiny 0.53 or 0.75 ms per step,
  // tp2 tiny 0.31 or 0.49-0.58 ms, dp4 ZeRO-2 tiny 1.11 or 1.42-1.64 ms,
  // dp4.ep2 ZeRO-3 tiny-moe 1.58 or 2.65 ms, dp2.pp2 tiny 0.59 or 0.80-0.83
  // ms; bound, the first speed in every window of those sweeps. (Spells in
  // which the host moves the VM's cores still slow bound ranks: docs/measurements.md.)
  enum class Binding { automatic, none };
  Binding binding = Binding::automatic;
};
// Whether a local world of these options binds its rank threads to cores
// (Binding::automatic resolved against `cores`, 0: this machine's).
bool local_binds_ranks(const WorldOptions& o, unsigned cores = 0);
// Whether a local world of these options runs its non-blocking collectives
// deferred (Progress::automatic resolved against `cores`, 0: this machine's).
bool local_progress_deferred(const WorldOptions& o, unsigned cores = 0);
// InputError naming the field and the rule.
void validate(const WorldOptions& o);

class World {
 public:
  virtual ~World() = default;
  virtual BackendKind backend() const = 0;
  virtual int size() const = 0;
  virtual std::vector<int> local_ranks() const = 0;
  // The world communicator of a hosted rank; call once per rank.
  virtual std::unique_ptr<Communicator> communicator(int rank) = 0;
  // Rank `rank` failed with `what`: wake its peers in this process.
  virtual void abort(int rank, const std::string& what) = 0;
  // Whether run_ranks binds each hosted rank's thread to a core
  // (WorldOptions::binding).
  virtual bool binds_ranks() const { return false; }
  // Ends the ranks of other processes after the boundary has reported an
  // error (mpi/nccl: MPI_Abort, does not return); local: nothing to do.
  virtual void terminate(int exit_code) {}
};

// Whether this process hosts `rank` of the world (rank 0: whether it writes
// a command's results).
bool hosts_rank(const World& world, int rank);

// Under a world of several processes (mpi, nccl): every process hashes
// `spec` (its run spec as text: what it was asked to run) and the hashes are
// all-gathered before any work, so processes started with different
// arguments (shard, precision, steps, config) stop at once with exit 2
// instead of aborting inside MPI, hanging until the timeout or writing false
// rows. InputError on every process naming the ranks whose spec differs
// from rank 0's. A local world (one process) has nothing to agree on.
void require_same_spec(World& world, const std::string& spec, const std::string& what);

// The cores the calling thread may run on, in order (empty if the system
// does not say): hosted rank i of a binding world goes to core i mod their
// count.
std::vector<int> allowed_cores();
// Binds the calling thread to `core` (its threads started later inherit it).
void bind_to_core(int core);

// Runs fn on every rank the world hosts (one thread each when more than one,
// bound to cores as World::binds_ranks says).
// Throws RankError(first failing rank, its message) if any rank failed.
void run_ranks(World& world, const std::function<void(Communicator&)>& fn);

// The local backend: a world of n threads.
std::unique_ptr<World> make_local_world(const WorldOptions& o);
void run_local(int n, const std::function<void(Communicator&)>& fn, WorldOptions o = {});

}  // namespace pb
