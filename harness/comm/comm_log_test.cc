// Accounting: the bytes recorded equal the formula of each op (logical bytes
// in nccl-tests' convention; sent and inter-node bytes of the direct-exchange
// model), worked by hand for 4 ranks on 2 nodes (ranks 0,1 | 2,3).
#include "harness/comm/comm_log.h"

#include <gtest/gtest.h>

#include <mutex>
#include <sstream>

#include "harness/comm/runner.h"

namespace pb {
namespace {

struct Expect {
  uint64_t bytes, sent, inter;
};

void expect_entry(const CommLog& log, CommOp op, Expect e, int rank) {
  CommCounters c = log.get("world", op);
  EXPECT_EQ(c.calls, 1u) << comm_op_name(op) << " rank " << rank;
  EXPECT_EQ(c.bytes, e.bytes) << comm_op_name(op) << " rank " << rank;
  EXPECT_EQ(c.sent_bytes, e.sent) << comm_op_name(op) << " rank " << rank;
  EXPECT_EQ(c.inter_node_bytes, e.inter) << comm_op_name(op) << " rank " << rank;
}

TEST(CommLog, BytesMatchTheFormulaOfEachOp) {
  WorldOptions o;
  o.ranks_per_node = 2;
  run_local(4, [](Communicator& c) {
    const int r = c.rank();
    std::vector<float> a(64, 1.0f), b(64, 0.0f);
    std::vector<double> d(64, 1.0), e(64, 0.0);
    c.all_reduce(a.data(), b.data(), 8, DType::f32);  // S = 8*4; chunk j = 2 elems; r->j: (2+2)*4
    expect_entry(c.log(), CommOp::all_reduce, {32, 3 * 16, 2 * 16}, r);
    c.reduce_scatter(a.data(), b.data(), 3, DType::f32);  // S = 3*4*4; r->j: 3*4
    expect_entry(c.log(), CommOp::reduce_scatter, {48, 36, 24}, r);
    c.all_gather(a.data(), b.data(), 3, DType::f32);  // S = 3*4*4; r->j: 3*4
    expect_entry(c.log(), CommOp::all_gather, {48, 36, 24}, r);
    c.broadcast(a.data(), b.data(), 8, DType::f32, /*root=*/1);  // root 1 sends 32 to each of 3
    expect_entry(c.log(), CommOp::broadcast, r == 1 ? Expect{32, 96, 64} : Expect{32, 0, 0}, r);
    c.reduce(a.data(), b.data(), 8, DType::f32, ReduceOp::sum, /*root=*/0);  // r->j: chunk j; r->root: chunk r
    Expect red[4] = {{32, 24, 16}, {32, 32, 16}, {32, 32, 24}, {32, 32, 24}};
    expect_entry(c.log(), CommOp::reduce, red[r], r);
    c.all_to_all(a.data(), b.data(), 3, DType::f32);  // S = this rank's send = 3*4*4
    expect_entry(c.log(), CommOp::all_to_all, {48, 36, 24}, r);
    c.sendrecv(a.data(), (r + 1) % 4, b.data(), (r + 3) % 4, 5, DType::f32);  // to r+1: crosses nodes from 1 and 3
    expect_entry(c.log(), CommOp::sendrecv, {20, 20, (r % 2) ? 20u : 0u}, r);
    c.barrier();
    expect_entry(c.log(), CommOp::barrier, {0, 0, 0}, r);
    const size_t counts[4] = {1, 2, 3, 4};  // uneven, fp64: S = 10*8; r->j: counts[j]*8
    c.log().reset();
    c.reduce_scatter_v(d.data(), e.data(), counts, DType::f64);
    uint64_t sent = 0, inter = 0;
    for (int j = 0; j < 4; ++j)
      if (j != r) sent += counts[j] * 8, inter += (j / 2 != r / 2) ? counts[j] * 8 : 0;
    expect_entry(c.log(), CommOp::reduce_scatter, {80, sent, inter}, r);
  }, o);
}

TEST(CommLog, TotalsGroupsTimeTraceAndCsv) {
  std::mutex mu;
  std::string csv0;
  run_local(2, [&](Communicator& c) {
    c.log().set_trace(true);
    std::vector<float> a(1 << 16, 1.0f);
    c.all_reduce(a.data(), a.data(), a.size(), DType::f32);
    Request q = c.iall_reduce(a.data(), a.data(), a.size(), DType::f32);
    q.wait();
    auto sub = c.split(0, c.rank(), "dp");
    sub->all_gather(a.data(), a.data() + 100 + 10 * c.rank(), 10, DType::f32);
    sub->barrier();
    const CommLog& log = c.log();  // shared by the rank's groups
    EXPECT_EQ(log.get("world", CommOp::all_reduce).calls, 2u);
    EXPECT_EQ(log.get("world", CommOp::all_reduce).bytes, 2u * a.size() * 4);
    EXPECT_GT(log.get("world", CommOp::all_reduce).blocked_s, 0.0);
    EXPECT_EQ(log.by_group("dp").calls, 2u);
    EXPECT_EQ(log.by_op(CommOp::all_gather).bytes, 2u * 10 * 4);
    EXPECT_EQ(log.total().calls, 4u);
    EXPECT_EQ(log.groups(), (std::vector<std::string>{"world", "dp"}));
    auto tr = log.trace();
    ASSERT_EQ(tr.size(), 4u);
    EXPECT_EQ(tr[1].op, CommOp::all_reduce);
    EXPECT_GT(tr[1].counters.blocked_s, 0.0);  // the wait() of the non-blocking call
    EXPECT_EQ(tr[2].group, "dp");
    std::ostringstream os;
    log.write_csv(os);
    if (c.rank() == 0) {
      std::lock_guard lk(mu);
      csv0 = os.str();
    }
    c.log().reset();
    EXPECT_EQ(c.log().total().calls, 0u);
    EXPECT_TRUE(c.log().trace().empty());
  });
  std::istringstream is(csv0);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(is, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u);  // header + world/all_reduce + dp/all_gather + dp/barrier
  EXPECT_EQ(lines[0], "rank,group,op,calls,bytes,sent_bytes,inter_node_bytes,blocked_s");
  EXPECT_EQ(lines[1].rfind("0,world,all_reduce,2,524288,", 0), 0u) << lines[1];
  EXPECT_EQ(lines[3].rfind("0,dp,barrier,1,0,0,0,", 0), 0u) << lines[3];
}

}  // namespace
}  // namespace pb
