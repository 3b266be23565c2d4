// One OpDesc -> one MPI call (see comm_mpi_internal.h). In place follows
// comm.h's convention and maps to MPI_IN_PLACE; avg is MPI_SUM then one
// division; bf16 reductions go through fp32 copies and round once.
#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>

#include "harness/comm/comm_mpi_internal.h"

namespace pb::mpi {
namespace {

int ic(size_t v, const char* what) {
  if (v > size_t(INT_MAX))
    throw std::invalid_argument(std::string("mpi: ") + what + " " + std::to_string(v) + " exceeds MPI's int limit");
  return int(v);
}

MPI_Datatype move_type(DType t) { return t == DType::f64 ? MPI_DOUBLE : t == DType::f32 ? MPI_FLOAT : MPI_UINT16_T; }
MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

std::vector<float> to_float(const void* src, size_t n) {
  std::vector<float> out(n);
  const auto* s = static_cast<const bf16*>(src);
  for (size_t i = 0; i < n; ++i) out[i] = float(s[i]);
  return out;
}

// dst = round_bf16(src / div): the one rounding of a bf16 reduction.
void from_float(const float* src, void* dst, size_t n, int div) {
  auto* d = static_cast<bf16*>(dst);
  const float f = float(div);
  for (size_t i = 0; i < n; ++i) d[i] = bf16(div > 1 ? src[i] / f : src[i]);
}

// x /= n in the storage type (fp32/fp64): avg's one division.
void divide(void* x, size_t count, DType t, int n) {
  if (t == DType::f64)
    for (size_t i = 0; i < count; ++i) static_cast<double*>(x)[i] /= double(n);
  else
    for (size_t i = 0; i < count; ++i) static_cast<float*>(x)[i] /= float(n);
}

std::vector<int> ints(const std::vector<size_t>& v, const char* what) {
  std::vector<int> out;
  for (size_t x : v) out.push_back(ic(x, what));
  return out;
}
std::vector<int> displs(const std::vector<size_t>& v) {
  std::vector<int> out;
  size_t off = 0;
  for (size_t x : v) out.push_back(ic(off, "displacement")), off += x;
  return out;
}
bool all_equal(const std::vector<size_t>& v, size_t x) {
  return std::all_of(v.begin(), v.end(), [&](size_t y) { return y == x; });
}

}  // namespace

void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(std::string(call) + ": " + std::string(msg, size_t(len)));
}

void check_recv_count(const MPI_Status& st, MPI_Datatype type, int count) {
  int got = 0;
  MPI_Get_count(&st, type, &got);
  if (got != count)
    throw std::logic_error("mpi recv: message of " + std::to_string(got) + " elements from rank " +
                           std::to_string(st.MPI_SOURCE) + " does not match the " + std::to_string(count) +
                           "-element receive");
}

void post(const OpDesc& d, MPI_Comm c, int me, int n, bool blocking, Pending& p) {
  const size_t es = d.elem_size();
  const bool bf = d.dtype == DType::bf16;
  const MPI_Datatype mt = move_type(d.dtype);
  const MPI_Datatype rt = bf ? MPI_FLOAT : mt;  // reduction type
  const MPI_Op op = mpi_op(d.redop);
  const int div = d.redop == ReduceOp::avg ? n : 1;
  auto avg_finish = [&p, &d, div](void* x, size_t count) {
    if (div > 1) p.finish = [x, count, t = d.dtype, div] { divide(x, count, t, div); };
  };
  switch (d.op) {
    case CommOp::all_reduce: {
      const int cnt = ic(d.count, "count");
      const void* s = d.send == d.recv ? MPI_IN_PLACE : d.send;
      void* r = d.recv;
      if (bf) {
        p.tmp_in = to_float(d.send, d.count);
        s = MPI_IN_PLACE;
        r = p.tmp_in.data();
        p.finish = [&p, out = d.recv, count = d.count, div] { from_float(p.tmp_in.data(), out, count, div); };
      } else {
        avg_finish(d.recv, d.count);
      }
      mpi_check(blocking ? MPI_Allreduce(s, r, cnt, rt, op, c) : MPI_Iallreduce(s, r, cnt, rt, op, c, p.next()),
            "MPI_Allreduce");
      return;
    }
    case CommOp::reduce_scatter: {
      const size_t mine = d.counts[size_t(me)], off = block_offset(d.counts, me);
      size_t total = 0;
      for (size_t x : d.counts) total += x;
      const bool equal = all_equal(d.counts, mine);
      p.ints[0] = ints(d.counts, "count");
      const void* s = d.send;
      void* r = d.recv;
      auto* base = const_cast<std::byte*>(static_cast<const std::byte*>(d.send));
      if (bf) {
        p.tmp_in = to_float(d.send, total);
        p.tmp_out.resize(mine);
        s = p.tmp_in.data();
        r = p.tmp_out.data();
        p.finish = [&p, out = d.recv, mine, div] { from_float(p.tmp_out.data(), out, mine, div); };
      } else if (static_cast<std::byte*>(d.recv) == base + off * es) {  // in place: result lands at the start
        s = MPI_IN_PLACE;
        r = base;
        p.finish = [base, off, mine, es, t = d.dtype, div] {
          if (off) std::memmove(base + off * es, base, mine * es);
          if (div > 1) divide(base + off * es, mine, t, div);
        };
      } else {
        avg_finish(d.recv, mine);
      }
      if (equal)
        mpi_check(blocking ? MPI_Reduce_scatter_block(s, r, ic(mine, "count"), rt, op, c)
                       : MPI_Ireduce_scatter_block(s, r, ic(mine, "count"), rt, op, c, p.next()),
              "MPI_Reduce_scatter_block");
      else
        mpi_check(blocking ? MPI_Reduce_scatter(s, r, p.ints[0].data(), rt, op, c)
                       : MPI_Ireduce_scatter(s, r, p.ints[0].data(), rt, op, c, p.next()),
              "MPI_Reduce_scatter");
      return;
    }
    case CommOp::all_gather: {
      const size_t mine = d.counts[size_t(me)];
      const bool in_place = d.send == static_cast<std::byte*>(d.recv) + block_offset(d.counts, me) * es;
      const void* s = in_place ? MPI_IN_PLACE : d.send;
      const int cnt = ic(mine, "count");
      if (all_equal(d.counts, mine)) {
        mpi_check(blocking ? MPI_Allgather(s, cnt, mt, d.recv, cnt, mt, c)
                       : MPI_Iallgather(s, cnt, mt, d.recv, cnt, mt, c, p.next()),
              "MPI_Allgather");
      } else {
        p.ints[0] = ints(d.counts, "count");
        p.ints[1] = displs(d.counts);
        mpi_check(blocking ? MPI_Allgatherv(s, cnt, mt, d.recv, p.ints[0].data(), p.ints[1].data(), mt, c)
                       : MPI_Iallgatherv(s, cnt, mt, d.recv, p.ints[0].data(), p.ints[1].data(), mt, c, p.next()),
              "MPI_Allgatherv");
      }
      return;
    }
    case CommOp::broadcast: {
      if (me == d.root && d.send != d.recv && d.count) std::memcpy(d.recv, d.send, d.count * es);
      const int cnt = ic(d.count, "count");
      mpi_check(blocking ? MPI_Bcast(d.recv, cnt, mt, d.root, c) : MPI_Ibcast(d.recv, cnt, mt, d.root, c, p.next()),
            "MPI_Bcast");
      return;
    }
    case CommOp::reduce: {
      const int cnt = ic(d.count, "count");
      const bool root = me == d.root;
      const void* s = root && d.send == d.recv ? MPI_IN_PLACE : d.send;
      void* r = d.recv;
      if (bf) {
        p.tmp_in = to_float(d.send, d.count);
        s = p.tmp_in.data();
        p.tmp_out.resize(root ? d.count : 0);
        r = p.tmp_out.data();
        if (root) p.finish = [&p, out = d.recv, count = d.count, div] { from_float(p.tmp_out.data(), out, count, div); };
      } else if (root) {
        avg_finish(d.recv, d.count);
      }
      mpi_check(blocking ? MPI_Reduce(s, r, cnt, rt, op, d.root, c) : MPI_Ireduce(s, r, cnt, rt, op, d.root, c, p.next()),
            "MPI_Reduce");
      return;
    }
    case CommOp::all_to_all: {
      // MPI_Alltoall only for all_to_all itself: under all_to_all_v one rank's
      // equal counts say nothing of its peers', and mixing MPI_Alltoall with
      // MPI_Alltoallv in one exchange is erroneous (it hangs).
      const size_t c0 = d.counts[0];
      if (!d.varying && all_equal(d.counts, c0) && all_equal(d.recv_counts, c0)) {
        const void* s = d.send == d.recv ? MPI_IN_PLACE : d.send;
        const int cnt = ic(c0, "count");
        mpi_check(blocking ? MPI_Alltoall(s, cnt, mt, d.recv, cnt, mt, c)
                       : MPI_Ialltoall(s, cnt, mt, d.recv, cnt, mt, c, p.next()),
              "MPI_Alltoall");
      } else {
        p.ints[0] = ints(d.counts, "count");
        p.ints[1] = displs(d.counts);
        p.ints[2] = ints(d.recv_counts, "count");
        p.ints[3] = displs(d.recv_counts);
        auto& q = p.ints;
        mpi_check(blocking ? MPI_Alltoallv(d.send, q[0].data(), q[1].data(), mt, d.recv, q[2].data(), q[3].data(), mt, c)
                       : MPI_Ialltoallv(d.send, q[0].data(), q[1].data(), mt, d.recv, q[2].data(), q[3].data(), mt,
                                        c, p.next()),
              "MPI_Alltoallv");
      }
      return;
    }
    case CommOp::send:
    case CommOp::recv:
    case CommOp::sendrecv: {
      if (d.tag < 0 || d.tag >= kProbeTag)
        throw std::invalid_argument("mpi: tag " + std::to_string(d.tag) + " outside [0, " +
                                    std::to_string(kProbeTag) + ")");
      const int cnt = ic(d.count, "count");
      if (d.op == CommOp::send) {
        mpi_check(blocking ? MPI_Send(d.send, cnt, mt, d.root, d.tag, c)
                       : MPI_Isend(d.send, cnt, mt, d.root, d.tag, c, p.next()),
              "MPI_Send");
        return;
      }
      MPI_Status st;
      if (d.op == CommOp::recv) {
        if (blocking) {
          mpi_check(MPI_Recv(d.recv, cnt, mt, d.root, d.tag, c, &st), "MPI_Recv");
          check_recv_count(st, mt, cnt);
        } else {
          p.recv_index = int(p.reqs.size());
          p.recv_count = cnt;
          p.recv_type = mt;
          mpi_check(MPI_Irecv(d.recv, cnt, mt, d.root, d.tag, c, p.next()), "MPI_Irecv");
        }
        return;
      }
      if (!blocking) throw std::logic_error("mpi: sendrecv has no non-blocking form");
      if (d.send == d.recv)
        mpi_check(MPI_Sendrecv_replace(d.recv, cnt, mt, d.root, d.tag, d.source, d.tag, c, &st), "MPI_Sendrecv_replace");
      else
        mpi_check(MPI_Sendrecv(d.send, cnt, mt, d.root, d.tag, d.recv, cnt, mt, d.source, d.tag, c, &st),
              "MPI_Sendrecv");
      check_recv_count(st, mt, cnt);
      return;
    }
    case CommOp::barrier:
      mpi_check(blocking ? MPI_Barrier(c) : MPI_Ibarrier(c, p.next()), "MPI_Barrier");
      return;
  }
}

}  // namespace pb::mpi
