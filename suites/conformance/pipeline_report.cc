#include "suites/conformance/pipeline_report.h"

#include <algorithm>
#include <cstdio>

#include "impl/pipeline/simulator.h"
#include "impl/pipeline/strategy.h"

namespace pb {

namespace pl = pipeline;

std::string describe_bubble(const PipelineReport& rep) {
  auto f = [](double x, int prec = 3) {
    char b[32];
    std::snprintf(b, sizeof b, "%.*f", prec, x);
    return std::string(b);
  };
  const auto& c = rep.measured_costs;
  std::string s = "bubble fraction measured " + f(rep.measured_bubble_fraction) + ", simulated " +
                  f(rep.simulated_bubble_fraction) + " (measured costs F " + f(c.f * 1e3) + " B " +
                  f(c.b * 1e3) + " W " + f(c.w * 1e3) + " ms per stage)";
  if (rep.declared.over_ideal)
    s += "; declared " + rep.declared.formula + " = " + f(*rep.declared.over_ideal) + " over ideal (" +
         f(*rep.declared.fraction) + " fraction) at equal costs";
  return s;
}

PipelineReport pipeline_report(const RunSpec& s, const ConformanceResult& r) {
  const pl::PipelineOptions o = pl::options_of(s);
  PipelineReport rep;
  // World rank = dp + DP * pp: replica 0 is every DP-th rank.
  for (size_t w = 0; w < r.times.size(); w += size_t(o.dp())) {
    const RankTimes& t = r.times[w];
    rep.busy_s.push_back(t.busy_s);
    rep.wall_s.push_back(t.wall_s);
    auto& tl = rep.timeline.emplace_back();
    for (size_t i = 0; i + 4 < t.timeline.size(); i += 5)
      tl.push_back({pl::Op(int(t.timeline[i])), int(t.timeline[i + 1]), int(t.timeline[i + 2]),
                    t.timeline[i + 3], t.timeline[i + 4]});
  }
  if (rep.wall_s.empty()) return rep;
  const int p = int(rep.wall_s.size());
  const double T = *std::max_element(rep.wall_s.begin(), rep.wall_s.end());
  const double ideal = *std::max_element(rep.busy_s.begin(), rep.busy_s.end());
  double idle = 0;
  for (double b : rep.busy_s) idle += T - b;
  rep.makespan_s = T;
  rep.measured_bubble_fraction = T > 0 ? idle / (p * T) : 0;
  rep.measured_bubble_over_ideal = ideal > 0 ? (T - ideal) / ideal : 0;
  double sum[4] = {0, 0, 0, 0};  // F, B, W, BW
  int n[4] = {0, 0, 0, 0};
  for (const auto& tl : rep.timeline)
    for (const auto& e : tl) {
      const int i = e.op == pl::Op::forward ? 0 : e.op == pl::Op::backward_input ? 1
                    : e.op == pl::Op::backward_weight ? 2 : 3;
      sum[i] += e.end - e.start;
      ++n[i];
    }
  auto mean = [&](int i) { return n[i] ? sum[i] / n[i] * o.virtual_stages : 0.0; };
  pl::Costs c{mean(0), n[1] ? mean(1) : mean(3) / 2, n[2] ? mean(2) : mean(3) / 2, 0};
  rep.measured_costs = c;
  const pl::ScheduleConfig sc = pl::schedule_config(o, s.train);
  if (c.f + c.b + c.w > 0) {
    const pl::SimResult sim = pl::simulate(pl::make_schedule(o.kind, sc), c);
    rep.simulated_bubble_fraction = sim.bubble_fraction;
    rep.simulated_bubble_over_ideal = sim.bubble_over_ideal;
  }
  rep.declared = pl::declared_bubble(o.kind, sc, pl::Costs{});
  return rep;
}

}  // namespace pb
