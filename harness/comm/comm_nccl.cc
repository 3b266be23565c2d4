// The nccl backend (design notes in comm_nccl.h). The unique id travels over
// the mpi backend's world communicator, which also gives the node map used
// to pick this rank's device (its index among the ranks of its node).
#include "harness/comm/comm_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "harness/comm/comm_mpi.h"
#include "harness/status.h"

namespace pb {
namespace {

using Clock = std::chrono::steady_clock;

void cuda_check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(e));
}
void nccl_check(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(call) + ": " + ncclGetErrorString(r));
}

ncclDataType_t nccl_type(DType t) {
  return t == DType::f64 ? ncclFloat64 : t == DType::f32 ? ncclFloat32 : ncclBfloat16;
}
ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : op == ReduceOp::avg ? ncclAvg : ncclMax; }

// Device memory of the communicator's device. Fills and copies run on the
// communicator's stream and wait for it, so they are complete, and ordered
// before its next operation, when they return (a pageable host-to-device
// cudaMemcpy may return before the copy lands; a legacy-stream memset would
// not be ordered with a non-blocking stream at all).
class DeviceBuffers : public BufferSpace {
 public:
  void set_stream(cudaStream_t s) { stream_ = s; }
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    const size_t n = std::max<size_t>(bytes, 1);
    cuda_check(cudaMalloc(&p, n), "cudaMalloc");
    try {
      cuda_check(cudaMemsetAsync(p, 0, n, stream_), "cudaMemsetAsync");
      cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    } catch (...) {
      cudaFree(p);
      throw;
    }
    return p;
  }
  void deallocate(void* p) override { cudaFree(p); }
  void copy_in(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes, cudaMemcpyHostToDevice); }
  void copy_out(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes, cudaMemcpyDeviceToHost); }
  bool is_host() const override { return false; }
  // Device or managed memory; host memory (pageable or pinned) is staged.
  bool reaches(const void* p) const override {
    if (!p) return true;
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky-free error of an unknown pointer
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  }

 private:
  cudaStream_t stream_ = nullptr;
  void copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (!bytes) return;
    cuda_check(cudaMemcpyAsync(dst, src, bytes, kind, stream_), "cudaMemcpyAsync");
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
};

// The NCCL communicator and its stream, shared with outstanding requests.
struct Channel {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  double timeout_s = 60;
  std::string name;

  // Polls `ready` until it reports done; aborts the communicator on timeout or async error.
  template <class Ready> void wait(Ready ready, CommOp op) {
    const auto start = Clock::now();
    for (;;) {
      cudaError_t e = ready();
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) cuda_check(e, "cuda wait");
      ncclResult_t async = ncclSuccess;
      nccl_check(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError");
      nccl_check(async, "nccl async error");
      if (timeout_s > 0 && std::chrono::duration<double>(Clock::now() - start).count() > timeout_s) {
        ncclCommAbort(comm);
        comm = nullptr;
        char s[64];
        std::snprintf(s, sizeof s, "%g", timeout_s);
        throw CommTimeout("timed out after " + std::string(s) + " s in " + std::string(comm_op_name(op)) +
                          " on group '" + name + "' (a peer did not arrive)");
      }
      std::this_thread::yield();
    }
  }
};

class NcclRequest : public RequestState {
 public:
  // record: mark the operation's end on the stream now; false inside a group,
  // whose operations are launched by ncclGroupEnd (record() after it).
  NcclRequest(std::shared_ptr<Channel> ch, CommOp op, bool record = true) : ch_(std::move(ch)), op_(op) {
    cuda_check(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming), "cudaEventCreate");
    if (record) this->record();
  }
  void record() { cuda_check(cudaEventRecord(ev_, ch_->stream), "cudaEventRecord"); }
  ~NcclRequest() override { cudaEventDestroy(ev_); }
  bool test() override {
    cudaError_t e = cudaEventQuery(ev_);
    if (e == cudaErrorNotReady) return false;
    cuda_check(e, "cudaEventQuery");
    return true;
  }
  void wait() override {
    ch_->wait([&] { return cudaEventQuery(ev_); }, op_);
  }

 private:
  std::shared_ptr<Channel> ch_;
  CommOp op_;
  cudaEvent_t ev_ = nullptr;
};

class NcclComm final : public Communicator {
 public:
  NcclComm(ncclComm_t c, int rank, std::vector<int> world_ranks, std::vector<int> nodes, std::string name,
           std::shared_ptr<CommLog> log, double timeout_s)
      : Communicator(rank, std::move(world_ranks), std::move(nodes), name, std::move(log)),
        ch_(std::make_shared<Channel>()) {
    ch_->comm = c;
    ch_->timeout_s = timeout_s;
    ch_->name = std::move(name);
    cuda_check(cudaStreamCreateWithFlags(&ch_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_check(cudaEventCreateWithFlags(&after_, cudaEventDisableTiming), "cudaEventCreate");
    bufs_.set_stream(ch_->stream);
    scratch_ = bufs_.allocate(sizeof(float));
  }
  ~NcclComm() override {
    bufs_.deallocate(scratch_);
    cudaEventDestroy(after_);
    if (ch_->comm) ncclCommDestroy(ch_->comm);
    cudaStreamDestroy(ch_->stream);
  }
  std::string_view backend() const override { return "nccl"; }
  BufferSpace& buffers() override { return bufs_; }

 protected:
  void run(const OpDesc& d) override {
    enqueue(d);
    ch_->wait([&] { return cudaStreamQuery(ch_->stream); }, d.op);
  }
  std::shared_ptr<RequestState> start(const OpDesc& d) override {
    enqueue(d);
    auto r = std::make_shared<NcclRequest>(ch_, d.op, /*record=*/!in_group());
    if (in_group()) grouped_.push_back(r);
    return r;
  }
  bool matches_tags() const override { return false; }
  void begin_group() override { nccl_check(ncclGroupStart(), "ncclGroupStart"); }
  void end_group() override {
    std::vector<std::shared_ptr<NcclRequest>> reqs = std::move(grouped_);
    grouped_.clear();
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    for (auto& r : reqs) r->record();  // after the launch: each completes with the group
  }
  std::unique_ptr<Communicator> do_split(int color, int key, std::string name) override {
    ncclComm_t nc = nullptr;
    nccl_check(ncclCommSplit(ch_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, nullptr), "ncclCommSplit");
    if (!nc) return nullptr;
    int r = 0, n = 0;
    nccl_check(ncclCommUserRank(nc, &r), "ncclCommUserRank");
    nccl_check(ncclCommCount(nc, &n), "ncclCommCount");
    auto child = std::make_unique<NcclComm>(nc, r, std::vector<int>(size_t(n), 0), std::vector<int>(size_t(n), 0),
                                            name, std::make_shared<CommLog>(), ch_->timeout_s);
    // The members' world ranks (exact in fp64), gathered over the new group.
    std::vector<double> wr(static_cast<size_t>(n));
    double me = world_rank(rank());
    void* dev = bufs_.allocate(sizeof(double) * size_t(n + 1));
    auto* dd = static_cast<double*>(dev);
    bufs_.copy_in(dd + n, &me, sizeof(double));
    child->all_gather(dd + n, dd, 1, DType::f64);
    bufs_.copy_out(wr.data(), dd, sizeof(double) * size_t(n));
    bufs_.deallocate(dev);
    std::vector<int> world_ranks, nodes;
    for (double w : wr) world_ranks.push_back(int(w)), nodes.push_back(node(rank_of_world(int(w))));
    return std::make_unique<NcclComm>(release(*child), r, world_ranks, nodes, name, shared_log(), ch_->timeout_s);
  }

 private:
  static ncclComm_t release(NcclComm& c) {
    ncclComm_t out = c.ch_->comm;
    c.ch_->comm = nullptr;
    return out;
  }
  int rank_of_world(int w) const {
    for (int r = 0; r < size(); ++r)
      if (world_rank(r) == w) return r;
    throw std::logic_error("nccl split: world rank " + std::to_string(w) + " is not in the parent");
  }
  void enqueue(const OpDesc& d) {
    const ncclDataType_t t = nccl_type(d.dtype);
    const ncclRedOp_t op = nccl_op(d.redop);
    const size_t es = d.elem_size();
    ncclComm_t c = ch_->comm;
    cudaStream_t s = ch_->stream;
    if (!c) throw CommAborted("nccl: communicator '" + name() + "' was aborted");
    if (void* producer = ordered_after()) {  // what the rank's compute wrote lands first
      cuda_check(cudaEventRecord(after_, static_cast<cudaStream_t>(producer)), "cudaEventRecord");
      cuda_check(cudaStreamWaitEvent(s, after_, 0), "cudaStreamWaitEvent");
    }
    auto at = [&](const void* p, size_t elems) { return static_cast<const std::byte*>(p) + elems * es; };
    auto atw = [&](void* p, size_t elems) { return static_cast<std::byte*>(p) + elems * es; };
    const int me = rank(), n = size();
    switch (d.op) {
      case CommOp::all_reduce: nccl_check(ncclAllReduce(d.send, d.recv, d.count, t, op, c, s), "ncclAllReduce"); return;
      case CommOp::broadcast: nccl_check(ncclBroadcast(d.send, d.recv, d.count, t, d.root, c, s), "ncclBroadcast"); return;
      case CommOp::reduce: nccl_check(ncclReduce(d.send, d.recv, d.count, t, op, d.root, c, s), "ncclReduce"); return;
      case CommOp::barrier: nccl_check(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, c, s), "barrier"); return;
      case CommOp::send: nccl_check(ncclSend(d.send, d.count, t, d.root, c, s), "ncclSend"); return;
      case CommOp::recv: nccl_check(ncclRecv(d.recv, d.count, t, d.root, c, s), "ncclRecv"); return;
      default: break;
    }
    const bool equal = std::all_of(d.counts.begin(), d.counts.end(), [&](size_t x) { return x == d.counts[0]; });
    if (d.op == CommOp::reduce_scatter && equal) {
      nccl_check(ncclReduceScatter(d.send, d.recv, d.counts[0], t, op, c, s), "ncclReduceScatter");
      return;
    }
    if (d.op == CommOp::all_gather && equal) {
      nccl_check(ncclAllGather(d.send, d.recv, d.counts[0], t, c, s), "ncclAllGather");
      return;
    }
    if ((d.op == CommOp::all_to_all || d.op == CommOp::sendrecv) && d.send == d.recv)
      throw std::invalid_argument("nccl: " + std::string(comm_op_name(d.op)) + " cannot run in place");
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    size_t off = 0, roff = 0;
    for (int j = 0; j < n && d.op != CommOp::sendrecv; ++j) {
      const size_t cj = d.counts[size_t(j)];
      if (d.op == CommOp::reduce_scatter)  // block j reduced onto rank j
        nccl_check(ncclReduce(at(d.send, off), j == me ? d.recv : atw(d.recv, 0), cj, t, op, j, c, s), "ncclReduce");
      else if (d.op == CommOp::all_gather)  // rank j's block broadcast into place
        nccl_check(ncclBroadcast(j == me ? d.send : at(d.recv, off), atw(d.recv, off), cj, t, j, c, s), "ncclBroadcast");
      else {  // all_to_all
        nccl_check(ncclSend(at(d.send, off), cj, t, j, c, s), "ncclSend");
        nccl_check(ncclRecv(atw(d.recv, roff), d.recv_counts[size_t(j)], t, j, c, s), "ncclRecv");
        roff += d.recv_counts[size_t(j)];
      }
      off += cj;
    }
    if (d.op == CommOp::sendrecv) {
      nccl_check(ncclSend(d.send, d.count, t, d.root, c, s), "ncclSend");
      nccl_check(ncclRecv(d.recv, d.count, t, d.source, c, s), "ncclRecv");
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  }

  std::shared_ptr<Channel> ch_;
  DeviceBuffers bufs_;
  void* scratch_ = nullptr;
  cudaEvent_t after_ = nullptr;  // recorded on the producer stream (order_after)
  std::vector<std::shared_ptr<NcclRequest>> grouped_;  // started in the open group, recorded at its end
};

class NcclWorld final : public World {
 public:
  explicit NcclWorld(const WorldOptions& o) : timeout_s_(o.timeout_s) {
    WorldOptions m = o;
    m.backend = BackendKind::mpi;
    mpi_ = make_mpi_world(m);
    rank_ = mpi_->local_ranks()[0];
    boot_ = mpi_->communicator(rank_);
    std::string why;
    const int ndev = nccl_device_count(&why);
    if (ndev == 0) throw std::runtime_error("nccl backend: " + why);
    int local = 0, on_node = 0;
    for (int r = 0; r < boot_->size(); ++r) {
      const bool same = boot_->node(r) == boot_->node(rank_);
      local += same && r < rank_;
      on_node += same;
    }
    // One rank per GPU: NCCL refuses two ranks of a communicator on one device.
    if (on_node > ndev)
      throw std::runtime_error("nccl backend: " + std::to_string(on_node) + " ranks on this node but " +
                               std::to_string(ndev) + " CUDA devices visible; run one rank per GPU (mpirun -np " +
                               "<GPUs per node x nodes>)");
    cuda_check(cudaSetDevice(local), "cudaSetDevice");
  }
  ~NcclWorld() override { boot_.reset(); }
  BackendKind backend() const override { return BackendKind::nccl; }
  int size() const override { return mpi_->size(); }
  std::vector<int> local_ranks() const override { return {rank_}; }
  std::unique_ptr<Communicator> communicator(int rank) override {
    ncclUniqueId id{};
    if (rank == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    static_assert(sizeof(id) % 2 == 0);
    boot_->broadcast(&id, sizeof(id) / 2, DType::bf16, 0);  // bytes carried as 2-byte words, never computed on
    ncclComm_t c = nullptr;
    nccl_check(ncclCommInitRank(&c, size(), id, rank), "ncclCommInitRank");
    std::vector<int> ranks, nodes;
    for (int r = 0; r < size(); ++r) ranks.push_back(r), nodes.push_back(boot_->node(r));
    return std::make_unique<NcclComm>(c, rank, ranks, nodes, "world", std::make_shared<CommLog>(rank), timeout_s_);
  }
  void abort(int, const std::string&) override {}
  void terminate(int exit_code) override { mpi_->terminate(exit_code); }

 private:
  double timeout_s_;
  std::unique_ptr<World> mpi_;
  int rank_ = 0;
  std::unique_ptr<Communicator> boot_;
};

}  // namespace

bool nccl_backend_built() { return true; }

int nccl_device_count(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = std::string("no CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
    return 0;
  }
  return n;
}

std::unique_ptr<World> make_nccl_world(const WorldOptions& o) { return std::make_unique<NcclWorld>(o); }

}  // namespace pb
