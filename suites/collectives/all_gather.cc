// all_gather: o_0 = ... = o_{n-1} = (i_0, ..., i_{n-1}); S = the whole
// output, sendcount * n * sizeof. Bus factor (n-1)/n (nccl-tests
// doc/PERFORMANCE.md): the assignment half of all_reduce.
// In place: send = recv + rank * sendcount (NCCL's convention).
#include "suites/collectives/coll.h"

namespace pb::coll {
namespace {

Layout layout(size_t count, int n, int rank) {
  const size_t per = count / size_t(n);
  return {per, per * size_t(n), per, per * size_t(rank), 0};
}
void init(const Ctx& c, void* send) { fill_values(c.dtype, send, c.param, c.rank, 0, c.rep); }
bool expected(const Ctx& c, void* recv) {
  const size_t es = dtype_size(c.dtype);
  for (int j = 0; j < c.n; ++j)
    fill_values(c.dtype, static_cast<std::byte*>(recv) + size_t(j) * c.param * es, c.param, j, 0, c.rep);
  return true;
}
double bus_factor(int n) { return double(n - 1) / n; }
void run(Communicator& comm, const Ctx& c, const void* send, void* recv) {
  comm.all_gather(send, recv, c.param, c.dtype);
}

}  // namespace

const CollDesc kAllGather{"all_gather", "all_gather", false, false, layout, init, expected, bus_factor, run};

}  // namespace pb::coll
