// The mpi backend: world (MPI lifetime, node map, watchdog), communicator
// (blocking = blocking MPI; non-blocking = MPI_I* + progress thread), requests.
// Design notes in comm_mpi.h.
#include "harness/comm/comm_mpi.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <thread>

#include "harness/comm/comm_mpi_internal.h"
#include "harness/status.h"

namespace pb {
namespace mpi {

// ---- Watchdog --------------------------------------------------------------

Watchdog::Watchdog(double timeout_s, int world_rank, int world_size, MPI_Comm comm)
    : timeout_s_(timeout_s), rank_(world_rank), size_(world_size), comm_(comm) {
  blocked_.reserve(16);
  th_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  th_.join();
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Watchdog::Scope::Scope(Watchdog* w, CommOp o, const std::string& g) : since(Clock::now()), op(o), group(&g), w_(w) {
  if (!w_) return;
  std::lock_guard lk(w_->mu_);
  w_->blocked_.push_back(this);
}

Watchdog::Scope::~Scope() {
  if (!w_) return;
  std::lock_guard lk(w_->mu_);
  auto& b = w_->blocked_;
  b.erase(std::find(b.begin(), b.end(), this));
}

namespace {
constexpr int kWatchdogProbeTag = 1, kWatchdogAnswerTag = 2;
}  // namespace

double Watchdog::grace_s(double timeout_s) { return std::clamp(timeout_s / 4, 2.0, 10.0); }

std::string Watchdog::state() const {
  if (blocked_.empty()) return "not in a collective";
  const Scope* s = blocked_.front();
  char buf[256];
  std::snprintf(buf, sizeof buf, "waiting in %s on group '%s' for %.1f s", std::string(comm_op_name(s->op)).c_str(),
                s->group->c_str(), std::chrono::duration<double>(Clock::now() - s->since).count());
  return buf;
}

void Watchdog::answer_probes() {
  if (comm_ == MPI_COMM_NULL) return;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kWatchdogProbeTag, comm_, &flag, &st);
    if (!flag) return;
    char dummy = 0;
    MPI_Recv(&dummy, 1, MPI_CHAR, st.MPI_SOURCE, kWatchdogProbeTag, comm_, MPI_STATUS_IGNORE);
    const std::string text = state();
    // A small message: eager, so the send completes without the prober's help.
    MPI_Send(text.data(), int(text.size()), MPI_CHAR, st.MPI_SOURCE, kWatchdogAnswerTag, comm_);
  }
}

std::string Watchdog::survey(double grace, bool* lower_answered) {
  std::vector<std::string> answers(static_cast<size_t>(size_));
  std::vector<bool> answered(size_t(size_), false);
  answered[size_t(rank_)] = true;
  std::vector<MPI_Request> sends;
  const char probe = 1;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    sends.emplace_back();
    MPI_Isend(&probe, 1, MPI_CHAR, r, kWatchdogProbeTag, comm_, &sends.back());
  }
  int missing = size_ - 1;
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace));
  while (missing > 0 && Clock::now() < until) {
    answer_probes();  // others may be surveying too
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kWatchdogAnswerTag, comm_, &flag, &st);
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    int len = 0;
    MPI_Get_count(&st, MPI_CHAR, &len);
    std::string text(size_t(std::max(len, 0)), '\0');
    MPI_Recv(text.data(), len, MPI_CHAR, st.MPI_SOURCE, kWatchdogAnswerTag, comm_, MPI_STATUS_IGNORE);
    if (!answered[size_t(st.MPI_SOURCE)]) --missing;
    answered[size_t(st.MPI_SOURCE)] = true;
    answers[size_t(st.MPI_SOURCE)] = text;
  }
  std::string silent, others;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    if (!answered[size_t(r)]) silent += (silent.empty() ? "" : ", ") + std::to_string(r);
    else others += "\n  rank " + std::to_string(r) + ": " + answers[size_t(r)];
  }
  *lower_answered = false;
  for (int r = 0; r < rank_; ++r) *lower_answered = *lower_answered || answered[size_t(r)];
  for (MPI_Request& q : sends) MPI_Request_free(&q);  // sent or not, nobody waits for them
  char tail[96];
  std::snprintf(tail, sizeof tail, " did not answer within %.0f s: stopped, hung outside MPI, or gone", grace);
  const std::string out = silent.empty() ? std::string("every other rank answered (none is stopped)")
                                         : (silent.find(',') == std::string::npos ? "rank " : "ranks ") + silent + tail;
  return out + others;
}

void Watchdog::loop() {
  const auto period = std::chrono::duration<double>(std::clamp(timeout_s_ / 20, 0.01, 0.25));
  std::unique_lock lk(mu_);
  while (!cv_.wait_for(lk, period, [&] { return stop_; })) {
    answer_probes();
    const auto now = Clock::now();
    for (const Scope* s : blocked_) {
      if (std::chrono::duration<double>(now - s->since).count() < timeout_s_) continue;
      const std::string op(comm_op_name(s->op)), group = *s->group;
      std::string report;
      if (comm_ != MPI_COMM_NULL) {
        std::fprintf(stderr, "rank %d: timed out after %g s in %s on group '%s'; asking the other ranks...\n", rank_,
                     timeout_s_, op.c_str(), group.c_str());
        std::fflush(stderr);
        bool lower_answered = false;
        report = survey(grace_s(timeout_s_), &lower_answered);
        // One report, not one per waiting rank: a lower rank that answered
        // reports and aborts first (several ranks calling MPI_Abort at once
        // was seen to hang Open MPI 4.1's mpirun); this one follows if not.
        const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(lower_answered ? 2 * grace_s(timeout_s_) : 0));
        while (Clock::now() < until) {
          answer_probes();
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
      std::fprintf(stderr, "rank %d: timed out after %g s in %s on group '%s' (a peer did not arrive)%s%s\n"
                   "aborting the job\n", rank_, timeout_s_, op.c_str(), group.c_str(), report.empty() ? "" : ": ",
                   report.c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
}

// ---- Progress --------------------------------------------------------------

void Progress::add() {
  {
    std::lock_guard lk(mu_);
    if (stop_) return;
    ++outstanding_;
    if (!th_.joinable()) th_ = std::thread([this] { loop(); });
  }
  cv_.notify_all();
}

void Progress::done() {
  std::lock_guard lk(mu_);
  if (outstanding_ > 0) --outstanding_;
}

void Progress::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (th_.joinable()) th_.join();
}

void Progress::loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || outstanding_ > 0; });
    if (stop_) return;
    lk.unlock();
    int flag = 0;  // no one sends kWatchdogProbeTag: this only runs the progress engine
    MPI_Iprobe(MPI_ANY_SOURCE, kWatchdogProbeTag, comm_, &flag, MPI_STATUS_IGNORE);
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    lk.lock();
  }
}

namespace {

class MpiRequest : public RequestState {
 public:
  MpiRequest(std::shared_ptr<Pending> p, std::shared_ptr<Progress> prog, Watchdog* wd, CommOp op,
             const std::string& group)
      : p_(std::move(p)), prog_(std::move(prog)), wd_(wd), op_(op), group_(group) {}
  ~MpiRequest() override {
    if (done_) return;
    try {
      wait();
    } catch (...) {
    }
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    std::vector<MPI_Status> st(p_->reqs.size());
    mpi_check(MPI_Testall(int(p_->reqs.size()), p_->reqs.data(), &flag, st.data()), "MPI_Testall");
    if (!flag) return false;
    complete(st);
    return true;
  }
  void wait() override {
    if (done_) return;
    std::vector<MPI_Status> st(p_->reqs.size());
    {
      Watchdog::Scope scope(wd_, op_, group_);
      mpi_check(MPI_Waitall(int(p_->reqs.size()), p_->reqs.data(), st.data()), "MPI_Waitall");
    }
    complete(st);
  }

 private:
  void complete(const std::vector<MPI_Status>& st) {
    done_ = true;
    prog_->done();
    if (p_->recv_index >= 0) check_recv_count(st[size_t(p_->recv_index)], p_->recv_type, p_->recv_count);
    if (p_->finish) p_->finish();
  }
  std::shared_ptr<Pending> p_;
  std::shared_ptr<Progress> prog_;
  Watchdog* wd_;
  CommOp op_;
  std::string group_;
  bool done_ = false;
};

struct Shared {
  Watchdog* watchdog = nullptr;
  std::vector<int> nodes;  // node of each world rank
};

class MpiComm final : public Communicator {
 public:
  MpiComm(MPI_Comm c, int rank, std::vector<int> world_ranks, std::string name, std::shared_ptr<CommLog> log,
          const Shared* sh)
      : Communicator(rank, world_ranks, nodes_of(world_ranks, *sh), std::move(name), std::move(log)), comm_(c),
        sh_(sh), progress_(std::make_shared<Progress>(c)) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }
  ~MpiComm() override {
    progress_->stop();
    MPI_Comm_free(&comm_);
  }
  std::string_view backend() const override { return "mpi"; }

 protected:
  void run(const OpDesc& d) override {
    Pending p;
    {
      Watchdog::Scope scope(sh_->watchdog, d.op, name());
      post(d, comm_, rank(), size(), /*blocking=*/true, p);
    }
    if (p.finish) p.finish();
  }

  std::shared_ptr<RequestState> start(const OpDesc& d) override {
    auto p = std::make_shared<Pending>();
    p->reqs.reserve(2);
    post(d, comm_, rank(), size(), /*blocking=*/false, *p);
    progress_->add();
    return std::make_shared<MpiRequest>(std::move(p), progress_, sh_->watchdog, d.op, name());
  }

  std::unique_ptr<Communicator> do_split(int color, int key, std::string name) override {
    MPI_Comm nc = MPI_COMM_NULL;
    {
      Watchdog::Scope scope(sh_->watchdog, CommOp::barrier, this->name());
      mpi_check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &nc), "MPI_Comm_split");
    }
    if (nc == MPI_COMM_NULL) return nullptr;
    int r = 0, n = 0;
    MPI_Comm_rank(nc, &r);
    MPI_Comm_size(nc, &n);
    std::vector<int> wr(static_cast<size_t>(n));
    int me = world_rank(rank());
    mpi_check(MPI_Allgather(&me, 1, MPI_INT, wr.data(), 1, MPI_INT, nc), "MPI_Allgather");
    return std::make_unique<MpiComm>(nc, r, std::move(wr), std::move(name), shared_log(), sh_);
  }

 private:
  static std::vector<int> nodes_of(const std::vector<int>& wr, const Shared& sh) {
    std::vector<int> out;
    for (int r : wr) out.push_back(sh.nodes[size_t(r)]);
    return out;
  }
  MPI_Comm comm_;
  const Shared* sh_;
  std::shared_ptr<Progress> progress_;
};

// Node of every world rank: rank / ranks_per_node, or the shared-memory
// domains (hosts) numbered by their lowest rank.
std::vector<int> node_map(int rank, int size, int ranks_per_node) {
  std::vector<int> nodes(static_cast<size_t>(size));
  if (ranks_per_node > 0) {
    for (int r = 0; r < size; ++r) nodes[size_t(r)] = r / ranks_per_node;
    return nodes;
  }
  MPI_Comm host;
  mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host), "MPI_Comm_split_type");
  int leader = rank;
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, host), "MPI_Allreduce");
  MPI_Comm_free(&host);
  std::vector<int> leaders(static_cast<size_t>(size));
  mpi_check(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  std::set<int> distinct(leaders.begin(), leaders.end());
  for (int r = 0; r < size; ++r)
    nodes[size_t(r)] = int(std::distance(distinct.begin(), distinct.find(leaders[size_t(r)])));
  return nodes;
}

class MpiWorld final : public World {
 public:
  explicit MpiWorld(const WorldOptions& o) {
    validate(o);
    int inited = 0, level = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &level);
      owns_ = true;
    }
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE)
      throw std::runtime_error("mpi backend: needs MPI_THREAD_MULTIPLE (MPI was initialized with level " +
                               std::to_string(level) + ")");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    require(o.size == 0 || o.size == size_, "world size: " + std::to_string(o.size) + " does not match the " +
                                                std::to_string(size_) + " ranks mpirun started");
    require(o.ranks_per_node == 0 || size_ % o.ranks_per_node == 0,
            "ranks_per_node: must divide the world size " + std::to_string(size_) + ", got " +
                std::to_string(o.ranks_per_node));
    sh_.nodes = node_map(rank_, size_, o.ranks_per_node);
    if (o.timeout_s > 0) {
      MPI_Comm probes = MPI_COMM_NULL;
      mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &probes), "MPI_Comm_dup");
      watchdog_ = std::make_unique<Watchdog>(o.timeout_s, rank_, size_, probes);
      sh_.watchdog = watchdog_.get();
    }
  }
  ~MpiWorld() override {
    watchdog_.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_ && !finalized) MPI_Finalize();
  }
  BackendKind backend() const override { return BackendKind::mpi; }
  int size() const override { return size_; }
  std::vector<int> local_ranks() const override { return {rank_}; }
  std::unique_ptr<Communicator> communicator(int rank) override {
    if (rank != rank_) throw std::logic_error("mpi: this process hosts rank " + std::to_string(rank_));
    MPI_Comm c;
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &c), "MPI_Comm_dup");
    std::vector<int> ranks(static_cast<size_t>(size_));
    for (int i = 0; i < size_; ++i) ranks[size_t(i)] = i;
    return std::make_unique<MpiComm>(c, rank_, std::move(ranks), "world", std::make_shared<CommLog>(rank_), &sh_);
  }
  void abort(int, const std::string&) override {}  // peers are other processes: see terminate()
  void terminate(int exit_code) override { MPI_Abort(MPI_COMM_WORLD, exit_code); }

 private:
  bool owns_ = false;
  int rank_ = 0, size_ = 1;
  Shared sh_;
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace
}  // namespace mpi

bool mpi_backend_built() { return true; }

std::unique_ptr<World> make_mpi_world(const WorldOptions& o) { return std::make_unique<mpi::MpiWorld>(o); }

}  // namespace pb
