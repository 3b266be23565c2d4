// all_reduce: o_0 = ... = o_{n-1} = i_0 + ... + i_{n-1}, S = count * sizeof.
// Bus factor 2(n-1)/n (nccl-tests doc/PERFORMANCE.md): each element needs
// n-1 additions and n assignments, 2(n-1) transfers spread over n links, so
// t >= S/B * 2(n-1)/n and B = algbw * 2(n-1)/n.
#include "suites/collectives/coll.h"

namespace pb::coll {
namespace {

Layout layout(size_t count, int, int) { return {count, count, count, 0, 0}; }
void init(const Ctx& c, void* send) { fill_values(c.dtype, send, c.param, c.rank, 0, c.rep); }
bool expected(const Ctx& c, void* recv) {
  fill_reduced(c.dtype, c.redop, recv, c.param, c.n, 0, c.rep);
  return true;
}
double bus_factor(int n) { return 2.0 * (n - 1) / n; }
void run(Communicator& comm, const Ctx& c, const void* send, void* recv) {
  comm.all_reduce(send, recv, c.param, c.dtype, c.redop);
}

}  // namespace

const CollDesc kAllReduce{"all_reduce", "all_reduce", true, false, layout, init, expected, bus_factor, run};

}  // namespace pb::coll
