#include "impl/context_parallel/cost.h"

#include <algorithm>

#include "harness/status.h"
#include "impl/context_parallel/options.h"

namespace pb::cp {

int64_t kept_bytes(const AttnShape& x, Recompute r) {
  require(x.cp >= 1 && x.s % x.cp == 0, "cp: must divide the sequence length");
  const int64_t sl = x.s / x.cp;
  if (r == Recompute::full) return 0;
  if (x.algo == CpAlgo::ring) return x.a * x.b * sl * x.acc_bytes;
  const int64_t ac = x.a / x.cp;
  const int64_t qkvh = x.b * x.s * x.hs * (ac + 2 * x.kv_heads() / x.cp) * x.elem_bytes;
  return qkvh + (r == Recompute::selective ? 0 : x.b * ac * x.s * x.s * x.elem_bytes);
}

CpLayerComm layer_comm(const AttnShape& x, Recompute r) {
  CpLayerComm c;
  if (x.cp == 1) return c;
  const int64_t elems = x.b * (x.s / x.cp) * x.a * x.hs, rerun = r == Recompute::full ? 1 : 0;
  const int64_t kv_elems = x.b * (x.s / x.cp) * x.kv_heads() * x.hs;
  auto add = [](CpCalls& k, int64_t calls, int64_t bytes) {
    k.calls += calls;
    k.bytes += calls * bytes;
  };
  if (x.algo == CpAlgo::ring) {
    const int64_t kv = 2 * kv_elems * x.elem_bytes, dkv = 2 * kv_elems * x.acc_bytes, hops = x.cp - 1;
    add(c.fwd_send, hops, kv);
    add(c.bwd_send, hops * (1 + rerun), kv);
    add(c.bwd_send, hops, dkv);
  } else {  // q, k, v, o forward; do, dq, dk, dv backward (and the forward again under full recompute)
    const int64_t q = elems * x.elem_bytes, k = kv_elems * x.elem_bytes;
    add(c.fwd_a2a, 2, q), add(c.fwd_a2a, 2, k);
    add(c.bwd_a2a, 2, q), add(c.bwd_a2a, 2, k);
    add(c.bwd_a2a, 2 * rerun, q), add(c.bwd_a2a, 2 * rerun, k);
  }
  return c;
}

int64_t attention_flops(const AttnShape& x, int rank, bool zigzag) {
  if (x.algo == CpAlgo::ulysses || x.cp == 1) return 4 * x.hs * x.b * (x.a / x.cp) * (x.s * (x.s + 1) / 2);
  const Placement p(int(x.s), x.cp, rank, zigzag);
  int64_t pairs = 0;
  for (const Run& q : p.runs())
    for (int i = 0; i < q.len; ++i) pairs += q.pos + i + 1;  // every earlier key, over the ring
  return 4 * x.hs * x.b * x.a * pairs;
}

}  // namespace pb::cp
