// broadcast: o_0 = ... = o_{n-1} = i_R; S = count * sizeof. Bus factor 1
// (nccl-tests doc/PERFORMANCE.md): all data must leave the root through its
// one link, t >= S/B.
#include "suites/collectives/coll.h"

namespace pb::coll {
namespace {

Layout layout(size_t count, int, int) { return {count, count, count, 0, 0}; }
void init(const Ctx& c, void* send) { fill_values(c.dtype, send, c.param, c.rank, 0, c.rep); }
bool expected(const Ctx& c, void* recv) {
  fill_values(c.dtype, recv, c.param, c.root, 0, c.rep);
  return true;
}
double bus_factor(int) { return 1.0; }
void run(Communicator& comm, const Ctx& c, const void* send, void* recv) {
  comm.broadcast(send, recv, c.param, c.dtype, c.root);
}

}  // namespace

const CollDesc kBroadcast{"broadcast", "broadcast", false, true, layout, init, expected, bus_factor, run};

}  // namespace pb::coll
