// reduce_scatter: o_K = (i_0 + ... + i_{n-1}) block K; S = the whole input,
// recvcount * n * sizeof. Bus factor (n-1)/n (nccl-tests doc/PERFORMANCE.md):
// the addition half of all_reduce, t >= S * (n-1) / (n B).
// In place: recv = send + rank * recvcount (NCCL's convention).
#include "suites/collectives/coll.h"

namespace pb::coll {
namespace {

Layout layout(size_t count, int n, int rank) {
  const size_t per = count / size_t(n);
  return {per * size_t(n), per, per, 0, per * size_t(rank)};
}
void init(const Ctx& c, void* send) { fill_values(c.dtype, send, c.param * size_t(c.n), c.rank, 0, c.rep); }
bool expected(const Ctx& c, void* recv) {
  fill_reduced(c.dtype, c.redop, recv, c.param, c.n, c.param * size_t(c.rank), c.rep);
  return true;
}
double bus_factor(int n) { return double(n - 1) / n; }
void run(Communicator& comm, const Ctx& c, const void* send, void* recv) {
  comm.reduce_scatter(send, recv, c.param, c.dtype, c.redop);
}

}  // namespace

const CollDesc kReduceScatter{"reduce_scatter", "reduce_scatter", true, false, layout, init, expected, bus_factor,
                              run};

}  // namespace pb::coll
