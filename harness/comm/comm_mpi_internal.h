// Internals of the mpi backend shared by comm_mpi.cc (world, communicator,
// progress, watchdog) and comm_mpi_ops.cc (one OpDesc -> MPI calls).
// Invariant: post() issues exactly one MPI call per operation (blocking, or
// its MPI_I* twin whose requests land in Pending::reqs), and anything that must
// happen after completion (bf16 rounding, avg division, the in-place
// reduce_scatter shift) is Pending::finish, run once after the requests
// complete.
#pragma once
// The C API only: the deprecated C++ bindings are not used.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "harness/comm/comm.h"

namespace pb::mpi {

using Clock = std::chrono::steady_clock;

// Tag reserved for the progress thread's MPI_Iprobe; user tags must be below it.
inline constexpr int kProbeTag = 32767;

void mpi_check(int rc, const char* call);

struct Pending {
  MPI_Request* next() {  // non-blocking only; start() reserves room so earlier pointers stay valid
    reqs.push_back(MPI_REQUEST_NULL);
    return &reqs.back();
  }
  std::vector<MPI_Request> reqs;
  std::vector<float> tmp_in, tmp_out;   // bf16 reductions run on fp32 copies
  std::vector<int> ints[4];             // counts/displacements that must outlive MPI_I* calls
  std::function<void()> finish;
  int recv_index = -1;                  // request whose received count is checked
  int recv_count = 0;
  MPI_Datatype recv_type = MPI_DATATYPE_NULL;
};

// Issues d on comm c (this rank `me` of `n`): blocking, or non-blocking into p.reqs.
void post(const OpDesc& d, MPI_Comm c, int me, int n, bool blocking, Pending& p);
// Throws unless status says `count` elements of `type` arrived.
void check_recv_count(const MPI_Status& st, MPI_Datatype type, int count);

// Aborts the job when a call stays blocked longer than the timeout, naming the
// rank that never arrived. Every rank's watchdog answers probes on its own
// communicator (a dup of the world's) with what its rank is doing; the rank
// that times out probes every other rank and waits a grace period: a rank
// that does not answer is stopped, hung outside MPI or gone, and is named
// first; the answers of the others (waiting in which call, or not in one)
// follow. MPI_THREAD_MULTIPLE lets the watchdog thread talk while its rank is
// blocked in a collective.
class Watchdog {
 public:
  // `comm`: a communicator of the whole world for probes only (owned, freed
  // by the destructor); MPI_COMM_NULL: no probing (the message then names
  // only the waiting rank).
  Watchdog(double timeout_s, int world_rank, int world_size, MPI_Comm comm);
  ~Watchdog();

  class Scope {  // marks the calling thread blocked in `op` on `group` for its lifetime
   public:
    Scope(Watchdog* w, CommOp op, const std::string& group);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Clock::time_point since;
    CommOp op;
    const std::string* group;

   private:
    Watchdog* w_;
  };

  // Seconds a probed rank has to answer before it is named as not answering.
  static double grace_s(double timeout_s);

 private:
  void loop();
  void answer_probes();               // replies to every pending probe (mu_ held)
  std::string state() const;          // what this rank is doing (mu_ held)
  // Probes the others and waits up to `grace` s: the report of who answered;
  // *lower_answered: a rank below this one answered (it reports instead).
  std::string survey(double grace, bool* lower_answered);
  double timeout_s_;
  int rank_, size_;
  MPI_Comm comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Scope*> blocked_;
  bool stop_ = false;
  std::thread th_;
};

// Drives MPI progress while non-blocking requests are outstanding.
class Progress {
 public:
  explicit Progress(MPI_Comm c) : comm_(c) {}
  ~Progress() { stop(); }
  void add();
  void done();
  void stop();

 private:
  void loop();
  MPI_Comm comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  int outstanding_ = 0;
  bool stop_ = false;
  std::thread th_;
};

}  // namespace pb::mpi
