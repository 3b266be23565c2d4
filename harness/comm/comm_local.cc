// LocalComm: one member's handle on a local Group. Collectives run in issue
// order on a per-communicator stream: a progress thread, so non-blocking calls
// progress while the caller computes, or (WorldOptions::Progress::deferred,
// where ranks and their threads would outnumber the cores) the rank itself,
// when it waits for one, calls the communicator, or blocks anywhere. A
// blocking call runs inline when the stream is idle (no hand-off cost) and
// queues behind it otherwise.
// Point-to-point is eager: send copies into the receiver's posted buffer or
// its unexpected-message queue and returns, so it never blocks the stream.
#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

#include "harness/comm/comm_local.h"
#include "harness/status.h"

namespace pb::local {

Group::Group(std::shared_ptr<WorldState> w, std::string nm, std::vector<int> wr)
    : world(std::move(w)), name(std::move(nm)), world_ranks(std::move(wr)), n(int(world_ranks.size())),
      rv(n, world, world_ranks), slots(size_t(n)) {
  for (int i = 0; i < n; ++i) mail.push_back(std::make_unique<Mailbox>());
}

std::vector<int> Group::nodes() const {
  std::vector<int> out;
  const int rpn = world->opts.ranks_per_node;
  for (int r : world_ranks) out.push_back(rpn > 0 ? r / rpn : 0);
  return out;
}

// A receive posted in a mailbox; completed (under the mailbox mutex) by the sender.
class RecvState : public RequestState {
 public:
  RecvState(Group* g, int me, int src, int tag, void* buf, size_t bytes, ChaosPoint cp)
      : g_(g), me_(me), src_(src), tag_(tag), buf_(buf), bytes_(bytes), cp_(cp) {}

  bool matches(int src, int tag) const {
    return src == src_ && (tag == tag_ || g_->world->opts.match_by_order);
  }
  // Copies a message in; called with the mailbox mutex held.
  void fill(const void* data, size_t bytes) {
    if (bytes != bytes_)
      err_ = std::make_exception_ptr(std::logic_error(
          g_->name + ".recv: message of " + std::to_string(bytes) + " bytes from rank " +
          std::to_string(g_->world_ranks[size_t(src_)]) + " (tag " + std::to_string(tag_) + ") does not match the " +
          std::to_string(bytes_) + "-byte receive"));
    else if (bytes)
      std::memcpy(buf_, data, bytes);
    done_.store(true, std::memory_order_release);  // after the buffer and err_
  }

  bool test() override {
    Mailbox& mb = *g_->mail[size_t(me_)];
    std::lock_guard lk(mb.mu);
    if (!done_.load(std::memory_order_acquire)) return false;
    if (err_) std::rethrow_exception(err_);
    return true;
  }

  // Withdrawn, so that no late sender writes into the buffer being freed.
  void abandon() override {
    Mailbox& mb = *g_->mail[size_t(me_)];
    std::lock_guard lk(mb.mu);
    auto& p = mb.posted;
    p.erase(std::remove_if(p.begin(), p.end(), [&](const auto& r) { return r.get() == this; }), p.end());
  }

  // Deferred progress: the rank's queued collectives run first (a sender may
  // be waiting in one of them).
  void wait() override {
    if (g_->world->deferred) progress_deferred();
    if (spin_until(*g_->world, [&] { return done_.load(std::memory_order_acquire); })) return finish();
    Mailbox& mb = *g_->mail[size_t(me_)];
    std::unique_lock lk(mb.mu);
    try {
      block_until(*g_->world, lk, mb.cv, [&] { return done_.load(std::memory_order_acquire); }, [&] {
        return "timed out after " + format_seconds(g_->world->opts.timeout_s) + " s in recv on group '" + g_->name +
               "': rank " + std::to_string(g_->world_ranks[size_t(src_)]) + " sent nothing with tag " +
               std::to_string(tag_);
      });
    } catch (...) {  // withdraw the receive so that no late sender writes into the buffer
      auto& p = mb.posted;
      p.erase(std::remove_if(p.begin(), p.end(), [&](const auto& r) { return r.get() == this; }), p.end());
      throw;
    }
    lk.unlock();
    finish();
  }

 private:
  void finish() {
    if (cp_.chaos) chaos_delay(*cp_.chaos, cp_.world_rank, g_->name, cp_.seq, 3);
    if (err_) std::rethrow_exception(err_);
  }

  Group* g_;
  int me_, src_, tag_;
  void* buf_;
  size_t bytes_;
  ChaosPoint cp_;
  std::atomic<bool> done_{false};  // set under the mailbox mutex; read without it by a spinning wait
  std::exception_ptr err_;
};

namespace {

class DoneRequest : public RequestState {
 public:
  bool test() override { return true; }
  void wait() override {}
};

class TaskRequest : public RequestState {
 public:
  TaskRequest(std::shared_ptr<WorldState> w, std::shared_ptr<ThreadQueues> issuer)
      : world_(std::move(w)), issuer_(std::move(issuer)) {}
  // Abandoned: fail the world so the task (bounded, polling abort) ends fast,
  // then wait for it (deferred: run it, failing at once), swallowing its
  // error: the exception in flight wins.
  void set_abort(std::function<void()> abort) { abort_ = std::move(abort); }
  void abandon() override;
  void complete(std::exception_ptr e) {
    {
      std::lock_guard lk(mu_);
      err_ = std::move(e);
      done_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }
  // Deferred: true only once the rank has run it (a test does not run a
  // collective, which would block on its peers).
  bool test() override {
    std::lock_guard lk(mu_);
    const bool done = done_.load(std::memory_order_acquire);
    if (done && err_) std::rethrow_exception(err_);
    return done;
  }
  // The task itself is bounded (its waits poll abort and the deadline), so
  // this waits for completion only: returning early would leave the task
  // touching the caller's buffers. Deferred: the caller runs its issuer's
  // tasks up to this one.
  void wait() override;

 private:
  void await_done();

  std::shared_ptr<WorldState> world_;
  std::shared_ptr<ThreadQueues> issuer_;  // deferred only: the issuing thread's order of tasks
  std::function<void()> abort_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};  // set under mu_; read without it by a spinning wait
  std::exception_ptr err_;
};

// Runs tasks in issue order: on a thread started on first use, or (deferred)
// on the issuing rank's thread, in the order it issued them over all its
// communicators, before it starts any blocking call (ThreadQueues). After a
// task fails, later ones fail too (their peers are out of step), like a
// sticky stream error.
class Stream final : public DeferredQueue {
 public:
  explicit Stream(std::shared_ptr<WorldState> w) : world_(std::move(w)), deferred_(world_->deferred) {}
  ~Stream() override {
    if (deferred_) {
      if (issuer_) issuer_->forget(this);
      while (run_one()) {  // peers may wait for what is queued (or, aborted, it fails at once)
      }
      return;
    }
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (th_.joinable()) th_.join();
  }
  bool idle() {
    std::lock_guard lk(mu_);
    return pending_ == 0;
  }
  std::shared_ptr<TaskRequest> push(std::function<void()> fn) {
    std::shared_ptr<ThreadQueues> issuer;
    if (deferred_) issuer = issuer_ ? issuer_ : ThreadQueues::mine();
    auto req = std::make_shared<TaskRequest>(world_, issuer);
    {
      std::lock_guard lk(mu_);
      if (!deferred_ && !th_.joinable()) th_ = std::thread([this] { loop(); });
      q_.push_back({std::move(fn), req});
      ++pending_;
    }
    if (deferred_) {
      issuer_ = std::move(issuer);
      issuer_->issued(this, req.get());
    } else {
      cv_.notify_all();
    }
    return req;
  }
  const void* run_one() override {
    std::lock_guard running(run_mu_);  // one task of the stream at a time, in order, whoever runs it
    Task t;
    {
      std::lock_guard lk(mu_);
      if (q_.empty()) return nullptr;
      t = std::move(q_.front());
      q_.pop_front();
    }
    run(t);
    return t.req.get();
  }

 private:
  struct Task {
    std::function<void()> fn;
    std::shared_ptr<TaskRequest> req;
  };
  void run(Task& t) {
    std::exception_ptr err;
    {
      std::lock_guard lk(mu_);
      err = failed_;
    }
    if (!err) {
      try {
        t.fn();
      } catch (...) {
        err = std::current_exception();
      }
    }
    t.req->complete(err);
    std::lock_guard lk(mu_);
    if (err && !failed_) failed_ = err;
    --pending_;
  }
  void loop() {
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;  // stop requested and drained
      Task t = std::move(q_.front());
      q_.pop_front();
      lk.unlock();
      run(t);
      lk.lock();
    }
  }
  std::shared_ptr<WorldState> world_;
  const bool deferred_;
  std::shared_ptr<ThreadQueues> issuer_;  // deferred: the issuing thread's order, once it issued
  std::mutex run_mu_;                     // deferred: held while a task runs
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> q_;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr failed_;
  std::thread th_;
};

void TaskRequest::await_done() {
  spin_until(*world_, [&] { return done_.load(std::memory_order_acquire); });
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return done_.load(std::memory_order_acquire); });
}

void TaskRequest::wait() {
  if (issuer_ && !done_.load(std::memory_order_acquire)) issuer_->run_until(this);
  await_done();
  std::lock_guard lk(mu_);
  if (err_) std::rethrow_exception(err_);
}

void TaskRequest::abandon() {
  if (abort_) abort_();
  if (issuer_ && !done_.load(std::memory_order_acquire)) issuer_->run_until(this);
  await_done();
}

class LocalComm final : public Communicator {
 public:
  LocalComm(std::shared_ptr<Group> g, int me, std::shared_ptr<CommLog> log)
      : Communicator(me, g->world_ranks, g->nodes(), g->name, std::move(log)), g_(std::move(g)), me_(me),
        stream_(g_->world) {}

  // Destroyed by an exception with operations pending: abort the world so the
  // stream's tasks fail fast instead of waiting for peers that wait for us.
  ~LocalComm() override {
    if (std::uncaught_exceptions() > 0 && !stream_.idle())
      g_->world->abort(world_rank(me_), "failed with operations pending on group '" + g_->name + "'");
  }

  std::string_view backend() const override { return "local"; }
  bool matches_tags() const override { return !opts().match_by_order; }

 protected:
  void run(const OpDesc& d) override {
    switch (d.op) {
      case CommOp::send: deliver(d.send, d.count * d.elem_size(), d.root, d.tag); return;
      case CommOp::recv: post_recv(d.recv, d.count * d.elem_size(), d.root, d.tag)->wait(); return;
      case CommOp::sendrecv: {
        auto r = post_recv(d.recv == d.send ? staging(d) : d.recv, d.count * d.elem_size(), d.source, d.tag);
        deliver(d.send, d.count * d.elem_size(), d.root, d.tag);
        r->wait();
        if (d.recv == d.send && d.count) std::memcpy(d.recv, stage_.data(), d.count * d.elem_size());
        return;
      }
      default: in_order([&] { collective(d); });
    }
  }

  std::shared_ptr<RequestState> start(const OpDesc& d) override {
    if (d.op == CommOp::send) {
      deliver(d.send, d.count * d.elem_size(), d.root, d.tag);
      return std::make_shared<DoneRequest>();
    }
    if (d.op == CommOp::recv) return post_recv(d.recv, d.count * d.elem_size(), d.root, d.tag);
    auto copy = std::make_shared<OpDesc>(d);
    auto req = stream_.push([this, copy] { collective(*copy); });
    req->set_abort([world = g_->world, r = world_rank(me_), name = g_->name] {
      world->abort(r, "failed with operations pending on group '" + name + "'");
    });
    return req;
  }

  std::unique_ptr<Communicator> do_split(int color, int key, std::string name) override {
    std::shared_ptr<Group> made;
    int new_rank = -1;
    in_order([&] { made = split_group(*g_, me_, color, key, name, &new_rank); });
    if (!made) return nullptr;
    return std::make_unique<LocalComm>(made, new_rank, shared_log());
  }

 private:
  template <class F> void in_order(F&& f) {
    if (g_->world->deferred) progress_deferred();  // every stream's, in issue order
    else if (!stream_.idle()) return stream_.push(std::function<void()>(f))->wait();
    f();
  }

  void collective(const OpDesc& d) {
    ChaosPoint cp{opts().chaos.enabled ? &opts().chaos : nullptr, world_rank(me_), coll_seq_++};
    run_collective(*g_, me_, d, cp);
  }

  void deliver(const void* data, size_t bytes, int dst, int tag) {
    g_->world->check();
    if (opts().chaos.enabled) chaos_delay(opts().chaos, world_rank(me_), g_->name, p2p_seq_, 2);
    ++p2p_seq_;
    Mailbox& mb = *g_->mail[size_t(dst)];
    {
      std::lock_guard lk(mb.mu);
      auto it = std::find_if(mb.posted.begin(), mb.posted.end(), [&](auto& r) { return r->matches(me_, tag); });
      if (it != mb.posted.end()) {
        (*it)->fill(data, bytes);
        mb.posted.erase(it);
      } else {
        Message m{me_, tag, std::vector<std::byte>(bytes)};
        if (bytes) std::memcpy(m.data.data(), data, bytes);
        mb.unexpected.push_back(std::move(m));
      }
    }
    mb.cv.notify_all();
  }

  std::shared_ptr<RecvState> post_recv(void* buf, size_t bytes, int src, int tag) {
    g_->world->check();
    ChaosPoint cp{opts().chaos.enabled ? &opts().chaos : nullptr, world_rank(me_), p2p_seq_++};
    auto r = std::make_shared<RecvState>(g_.get(), me_, src, tag, buf, bytes, cp);
    Mailbox& mb = *g_->mail[size_t(me_)];
    std::lock_guard lk(mb.mu);
    auto it = std::find_if(mb.unexpected.begin(), mb.unexpected.end(),
                           [&](const Message& m) { return m.src == src && (m.tag == tag || opts().match_by_order); });
    if (it != mb.unexpected.end()) {
      r->fill(it->data.data(), it->data.size());
      mb.unexpected.erase(it);
    } else {
      mb.posted.push_back(r);
    }
    return r;
  }

  void* staging(const OpDesc& d) {
    stage_.resize(d.count * d.elem_size());
    return stage_.data();
  }
  const WorldOptions& opts() const { return g_->world->opts; }

  std::shared_ptr<Group> g_;
  int me_;
  uint64_t coll_seq_ = 0;  // touched only by whoever runs the stream's ops
  uint64_t p2p_seq_ = 0;   // touched only by the caller's thread
  std::vector<std::byte> stage_;
  Stream stream_;  // last: joined before the members above are destroyed
};

class LocalWorld final : public World {
 public:
  explicit LocalWorld(const WorldOptions& o) : state_(std::make_shared<WorldState>(o)), bind_(local_binds_ranks(o)) {
    std::vector<int> ranks(size_t(o.size));
    for (int i = 0; i < o.size; ++i) ranks[size_t(i)] = i;
    group_ = std::make_shared<Group>(state_, "world", std::move(ranks));
  }
  BackendKind backend() const override { return BackendKind::local; }
  int size() const override { return group_->n; }
  std::vector<int> local_ranks() const override { return group_->world_ranks; }
  std::unique_ptr<Communicator> communicator(int rank) override {
    return std::make_unique<LocalComm>(group_, rank, std::make_shared<CommLog>(rank));
  }
  void abort(int rank, const std::string& what) override { state_->abort(rank, what); }
  bool binds_ranks() const override { return bind_; }

 private:
  std::shared_ptr<WorldState> state_;
  std::shared_ptr<Group> group_;
  bool bind_;
};

}  // namespace
}  // namespace pb::local

namespace pb {

std::unique_ptr<World> make_local_world(const WorldOptions& o) {
  validate(o);
  if (o.size < 1) throw InputError("world size: must be >= 1 on the local backend, got " + std::to_string(o.size));
  return std::make_unique<local::LocalWorld>(o);
}

}  // namespace pb
