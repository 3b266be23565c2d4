// sendrecv: every rank sends to rank+1 and receives from rank-1 at once (a
// ring shift); S = count * sizeof. Bus factor 1 (nccl-tests): point to
// point, algbw is the link bandwidth.
#include "suites/collectives/coll.h"

namespace pb::coll {
namespace {

Layout layout(size_t count, int, int) { return {count, count, count, 0, 0}; }
void init(const Ctx& c, void* send) { fill_values(c.dtype, send, c.param, c.rank, 0, c.rep); }
bool expected(const Ctx& c, void* recv) {
  fill_values(c.dtype, recv, c.param, (c.rank + c.n - 1) % c.n, 0, c.rep);
  return true;
}
double bus_factor(int) { return 1.0; }
void run(Communicator& comm, const Ctx& c, const void* send, void* recv) {
  comm.sendrecv(send, (c.rank + 1) % c.n, recv, (c.rank + c.n - 1) % c.n, c.param, c.dtype);
}

}  // namespace

const CollDesc kSendRecv{"sendrecv", "send_recv", false, false, layout, init, expected, bus_factor, run};

}  // namespace pb::coll
