// reduce: o_R = i_0 + ... + i_{n-1}; S = count * sizeof. Bus factor 1
// (nccl-tests doc/PERFORMANCE.md): all data must reach the root through its
// one link, t >= S/B. Only the root's output is checked.
#include "suites/collectives/coll.h"

namespace pb::coll {
namespace {

Layout layout(size_t count, int, int) { return {count, count, count, 0, 0}; }
void init(const Ctx& c, void* send) { fill_values(c.dtype, send, c.param, c.rank, 0, c.rep); }
bool expected(const Ctx& c, void* recv) {
  if (c.rank != c.root) return false;
  fill_reduced(c.dtype, c.redop, recv, c.param, c.n, 0, c.rep);
  return true;
}
double bus_factor(int) { return 1.0; }
void run(Communicator& comm, const Ctx& c, const void* send, void* recv) {
  comm.reduce(send, recv, c.param, c.dtype, c.redop, c.root);
}

}  // namespace

const CollDesc kReduce{"reduce", "reduce", true, true, layout, init, expected, bus_factor, run};

}  // namespace pb::coll
