// How much `local` capacity (each data rank admits over its own tokens, as
// Megatron-LM and DeepSpeed do) changes training against `global` capacity
// (the whole microbatch's tokens, as one device: parabench's default), as the
// data-parallel degree grows at a fixed global batch: the fraction of routing
// choices dropped at capacity and the loss, per mode and dp; and the same
// under expert parallel (ep = gcd(dp, 4): the 4 experts over the dp ranks),
// where admission stays with the token's rank, so each mode must drop what it
// drops under data parallel. Local backend.
//
// Usage: moe_capacity [--steps N] [--cf F] [--dps 1,2,4,8]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <numeric>

#include "harness/comm/runner.h"
#include "harness/status.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/strategy.h"

namespace pb::ep {
namespace {

struct Result {
  double dropped = 0, loss_last = 0, loss_first = 0;
};

Result run(int dp, int ep, MoeCapacity cap, int steps, double cf) {
  RunSpec spec;
  spec.mesh.dp = dp;
  spec.mesh.ep = ep;
  TrainConfig& cfg = spec.train;
  cfg.model = named_model("tiny-moe");
  cfg.model.moe.capacity = cap;
  cfg.model.moe.capacity_factor = cf;
  cfg.seq = 16;
  cfg.batch = 16;
  cfg.steps = steps;
  cfg.optim.lr = 3e-3;
  cfg.precision = Precision::fp32;
  const Strategy& st = ep > 1 ? strategy() : pb::dp::strategy();  // the experts over ep, or data parallel
  st.validate(spec);
  Result out;
  std::mutex mu;
  int64_t dropped = 0, choices = 0;
  std::vector<double> losses;
  run_local(dp, [&](Communicator& c) {
    std::unique_ptr<Rank> r = st.make_rank(spec, c, nullptr);
    std::vector<double> l;
    for (int i = 0; i < steps; ++i) l.push_back(r->step().loss);
    const int64_t d = r->moe_load().dropped, n = r->moe_load().choices;
    std::lock_guard lk(mu);
    dropped += d, choices += n;
    if (c.rank() == 0) losses = l;
  });
  out.dropped = double(dropped) / double(choices);
  const int tail = std::min(5, steps);
  for (int i = steps - tail; i < steps; ++i) out.loss_last += losses[size_t(i)] / tail;
  out.loss_first = losses.front();
  return out;
}

int main_(int argc, char** argv) {
  int steps = 40;
  double cf = 1.0;
  std::vector<int> dps = {1, 2, 4, 8};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    require(i + 1 < argc, a + ": needs a value (flags: --steps --cf --dps)");
    const std::string v = argv[++i];
    if (a == "--steps") {
      steps = parse_int(v, a, 1, 100000);
    } else if (a == "--cf") {
      char* end = nullptr;
      cf = std::strtod(v.c_str(), &end);
      require(end && *end == 0 && std::isfinite(cf) && cf > 0 && cf <= 1e6, "--cf: expected a number in (0, 1e6]");
    } else if (a == "--dps") {
      dps.clear();
      std::stringstream ss(v);
      for (std::string t; std::getline(ss, t, ',');) dps.push_back(parse_int(t, a, 1, 16));
    } else {
      throw InputError(a + ": unknown flag (flags: --steps --cf --dps)");
    }
  }
  for (int dp : dps) require(16 % dp == 0, "--dps: " + std::to_string(dp) + " does not divide the 16 sequences");
  std::printf("tiny-moe (E4 top-2, capacity factor %g), 16 sequences x 16 tokens, fp32, %d steps, local backend\n\n",
              cf, steps);
  std::printf("| mesh | tokens/rank | dropped, global | dropped, local | loss (last 5), global | loss, local | "
              "local - global |\n|---|---|---|---|---|---|---|\n");
  for (int dp : dps) {
    std::vector<int> eps = {1};
    if (std::gcd(dp, 4) > 1) eps.push_back(std::gcd(dp, 4));  // the same dp ranks, the experts split over ep
    for (int ep : eps) {
      const Result g = run(dp, ep, MoeCapacity::global, steps, cf), l = run(dp, ep, MoeCapacity::local, steps, cf);
      const std::string mesh = "dp" + std::to_string(dp) + (ep > 1 ? ".ep" + std::to_string(ep) : "");
      std::printf("| %s | %d | %.2f%% | %.2f%% | %.4f | %.4f | %+.4f |\n", mesh.c_str(), 256 / dp, 100 * g.dropped,
                  100 * l.dropped, g.loss_last, l.loss_last, l.loss_last - g.loss_last);
    }
  }
  return 0;
}

}  // namespace
}  // namespace pb::ep

int main(int argc, char** argv) {
  return pb::run_main("moe_capacity", [&] { return pb::ep::main_(argc, argv); });
}
