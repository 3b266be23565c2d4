// alltoall: block j of rank i's input becomes block i of rank j's output;
// S = this rank's whole send buffer, count/n * n * sizeof. Bus factor (n-1)/n
// (nccl-tests doc/PERFORMANCE.md): each rank keeps 1/n of its data and
// sends the rest over its link.
#include "suites/collectives/coll.h"

namespace pb::coll {
namespace {

Layout layout(size_t count, int n, int) {
  const size_t per = count / size_t(n);
  return {per * size_t(n), per * size_t(n), per, 0, 0};
}
void init(const Ctx& c, void* send) { fill_values(c.dtype, send, c.param * size_t(c.n), c.rank, 0, c.rep); }
bool expected(const Ctx& c, void* recv) {  // block j: rank j's block `rank`
  const size_t es = dtype_size(c.dtype);
  for (int j = 0; j < c.n; ++j)
    fill_values(c.dtype, static_cast<std::byte*>(recv) + size_t(j) * c.param * es, c.param, j,
                size_t(c.rank) * c.param, c.rep);
  return true;
}
double bus_factor(int n) { return double(n - 1) / n; }
void run(Communicator& comm, const Ctx& c, const void* send, void* recv) {
  comm.all_to_all(send, recv, c.param, c.dtype);
}

}  // namespace

const CollDesc kAllToAll{"alltoall", "all_to_all", false, false, layout, init, expected, bus_factor, run};

}  // namespace pb::coll
