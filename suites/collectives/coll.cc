// The op registry and the exact input/expected-value helpers (coll.h).
#include "suites/collectives/coll.h"

namespace pb::coll {

const std::vector<const CollDesc*>& all_colls() {
  static const std::vector<const CollDesc*> kAll = {&kAllReduce, &kReduceScatter, &kAllGather, &kBroadcast,
                                                     &kReduce,    &kAllToAll,      &kSendRecv};
  return kAll;
}

const CollDesc* find_coll(std::string_view name) {
  if (name == "all_to_all") name = "alltoall";
  if (name == "send_recv") name = "sendrecv";
  for (const CollDesc* d : all_colls())
    if (d->name == name) return d;
  return nullptr;
}

void fill_values(DType t, void* dst, size_t n, int r, size_t first, uint64_t rep) {
  dispatch_dtype(t, [&](auto x) {
    using T = decltype(x);
    auto* d = static_cast<T*>(dst);
    for (size_t k = 0; k < n; ++k) d[k] = cast<T>(double(value(r, first + k, rep)));
  });
}

void fill_reduced(DType t, ReduceOp op, void* dst, size_t n, int nranks, size_t first, uint64_t rep) {
  dispatch_dtype(t, [&](auto x) {
    using T = decltype(x);
    using A = acc_t<T>;
    auto* d = static_cast<T*>(dst);
    for (size_t k = 0; k < n; ++k) {
      A acc = A(value(0, first + k, rep));
      for (int j = 1; j < nranks; ++j) {
        A v = A(value(j, first + k, rep));
        acc = op == ReduceOp::max ? (v > acc ? v : acc) : acc + v;
      }
      if (op == ReduceOp::avg) acc = acc / A(nranks);
      d[k] = cast<T>(acc);
    }
  });
}

}  // namespace pb::coll
