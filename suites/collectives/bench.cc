// The collective benchmark over a world (see bench.h).
#include "suites/collectives/bench.h"

#include <algorithm>
#include <exception>
#include <sstream>

#include "harness/io/csv.h"

namespace pb::coll {

BenchResult run_benchmark(World& world, const BenchPlan& plan, const BenchSink& sink) {
  BenchResult res;
  const BenchOptions& b = plan.bench;
  const auto sizes = sweep_sizes(b);
  // Rank 0's running figures; only its rank touches them.
  double bw_sum = 0;
  int bw_n = 0;
  bool measuring = false;
  auto body = [&](Communicator& c) {
    const bool rank0 = c.rank() == 0;
    for (const CollDesc* op : plan.ops)
      for (DType t : plan.dtypes)
        for (ReduceOp ro : op->reduces ? plan.redops : std::vector<ReduceOp>{ReduceOp::sum})
          for (int root : op->rooted ? plan.roots : std::vector<int>{-1}) {
            const BenchCase bc{op, t, op->reduces ? std::string(reduce_op_name(ro)) : "none", root};
            size_t line = 0;
            if (rank0) {
              res.failed_at = bc;
              res.failed_bytes = sizes[0];
              measuring = true;
              if (sink.on_case) sink.on_case(bc);
            }
            const bool stayed = run_collective(c, *op, t, ro, std::max(root, 0), b, [&](auto& oop, auto& ip) {
              if (!rank0) return;
              if (sink.on_line) sink.on_line(bc, oop, ip);
              res.failed_bytes = ++line < sizes.size() ? sizes[line] : sizes.back();
              for (const BenchPoint* p : {&oop, &ip}) {
                bw_sum += p->busbw_gbps, ++bw_n;
                res.wrong += std::max(0L, p->wrong);
              }
            });
            if (!stayed) return;  // injected: this rank leaves the run
          }
    if (rank0) measuring = false;
    std::ostringstream counters;
    c.log().write_csv(counters, /*with_header=*/false);
    auto all = all_gather_strings(c, counters.str());
    if (!rank0) return;
    const std::string header = csv_format_row(CommLog::csv_header());
    for (const auto& text : all)
      for (auto& row : parse_csv(header + text, "comm counters").rows) res.counters.push_back(std::move(row));
  };
  try {
    run_ranks(world, body);
  } catch (const std::exception& e) {
    res.error = e.what();
    if (!measuring) res.failed_at = {};
  }
  if (res.error.empty()) {
    res.failed_at = {};
    res.failed_bytes = 0;
  }
  res.mean_busbw_gbps = bw_n ? bw_sum / bw_n : 0.0;
  return res;
}

}  // namespace pb::coll
