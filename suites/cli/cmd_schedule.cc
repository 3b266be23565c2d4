// parabench schedule: build a pipeline schedule, validate it, simulate it with
// the given per-action costs, and print the ASCII timeline, the bubble
// (simulated vs declared), the peak in-flight microbatches per rank and the p2p
// message count; --csv writes the timeline for the report's Gantt plot. The
// CSV is written to FILE.tmp and renamed, so a failed run leaves no partial file.
// --transport nccl shows the schedule as the executor posts it over nccl
// (validate.h posted_without_tags), simulated with its later sends.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "harness/io/output_file.h"
#include "harness/status.h"
#include "impl/pipeline/cost.h"
#include "impl/pipeline/schedule.h"
#include "impl/pipeline/simulator.h"
#include "impl/pipeline/timeline.h"
#include "impl/pipeline/validate.h"
#include "suites/cli/command.h"
#include "suites/cli/common.h"

namespace pb::cli {
namespace {

namespace pl = pb::pipeline;

struct ScheduleOptions {
  int pp = 0;
  int microbatches = 0;
  std::string schedule;
  int virtual_stages = 1;
  int steps = 0;  // 0: 2 for 2bw (so the version switch shows), 1 otherwise
  std::string costs = "1,1,1";
  double p2p = 0;
  std::string csv;
  int width = 0;
  std::string transport = "tags";
  cli::PreflightFlags limits;
};

// Memory per schedule action (its entry in the schedule, the simulator's
// events and the timeline; measured 92-140 bytes at 0.1-1 M actions), and
// per action of a --csv timeline's text.
constexpr double kCsvBytesPerAction = 64;  // kScheduleBytesPerAction: harness/preflight.h

// "F,B,W": three finite numbers >= 0, not all zero.
pl::Costs parse_costs(const std::string& text, double p2p) {
  pl::Costs c;
  double* dst[3] = {&c.f, &c.b, &c.w};
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t end = i < 2 ? text.find(',', pos) : text.size();
    require(end != std::string::npos && (i < 2 || text.find(',', pos) == std::string::npos),
            "--costs: expected F,B,W (three numbers), got '" + text + "'");
    const std::string item = text.substr(pos, end - pos);
    size_t used = 0;
    double x = 0;
    try {
      x = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    require(used > 0 && used == item.size() && std::isfinite(x) && x >= 0,
            "--costs: '" + item + "' is not a finite number >= 0 (expected F,B,W)");
    *dst[i] = x;
    pos = end + 1;
  }
  c.p2p = p2p;
  return c;
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}


int run_schedule(const ScheduleOptions& o) {
  const pl::ScheduleKind kind = pl::parse_schedule_kind(o.schedule, "--schedule");
  require(o.steps >= 0, "--steps: must be >= 1, got " + std::to_string(o.steps));
  require(o.width >= 0, "--width: must be >= 0 (0 = automatic), got " + std::to_string(o.width));
  const int steps = o.steps > 0 ? o.steps : kind == pl::ScheduleKind::pipedream_2bw ? 2 : 1;
  const pl::ScheduleConfig cfg{o.pp, o.microbatches, o.virtual_stages, steps};
  const pl::Costs costs = parse_costs(o.costs, o.p2p);
  require(std::isfinite(o.p2p) && o.p2p >= 0, "--p2p: must be a finite number >= 0");
  require(o.pp >= 1 && o.microbatches >= 1 && o.virtual_stages >= 1,
          "--pp, --microbatches and --virtual-stages: must be >= 1, got " + std::to_string(o.pp) + ", " +
              std::to_string(o.microbatches) + ", " + std::to_string(o.virtual_stages));
  {  // preflight: every action is held by the schedule, the simulator and the timeline
    const bool split = kind == pl::ScheduleKind::zb_h1;
    const double actions = double(o.pp) * o.microbatches * o.virtual_stages * steps * (split ? 3 : 2);
    Need need;
    need.bytes = actions * (kScheduleBytesPerAction + (o.csv.empty() ? 0 : kCsvBytesPerAction)) +
                 double(o.pp) * std::max(o.width, 200);  // the rendered chart
    require_fits(need, limits_of(o.limits),
                 "schedule " + o.schedule + " --pp " + std::to_string(o.pp) + " --microbatches " +
                     std::to_string(o.microbatches) + " (" + std::to_string(int64_t(actions)) + " actions)");
  }
  require(o.transport == "tags" || o.transport == "nccl",
          "--transport: '" + o.transport + "' is neither tags (local, mpi) nor nccl");
  const pl::Schedule generated = pl::make_schedule(kind, cfg);
  pl::validate(generated);
  const pl::Schedule s = o.transport == "nccl" ? pl::posted_without_tags(generated, "nccl") : generated;
  const bool reposted = s.ranks != generated.ranks;
  const pl::SimResult r = pl::simulate(s, costs);
  const pl::DeclaredBubble d = pl::declared_bubble(kind, cfg, costs);
  const auto peak = pl::declared_peak_in_flight(kind, cfg);
  const auto peak_b = pl::declared_peak_until_b(kind, cfg);
  if (!o.csv.empty()) write_output_file(o.csv, pl::timeline_csv(r.timeline), "--csv");  // before printing: errors print alone

  std::printf("schedule %s: pp=%d microbatches=%d virtual=%d%s costs F=%g B=%g W=%g%s p2p=%g\n",
              s.name.c_str(), s.pp, s.microbatches, s.virtual_stages,
              s.async_weights ? (" steps=" + std::to_string(s.steps)).c_str() : "", costs.f, costs.b, costs.w,
              s.split_backward ? "" : (" (BW=" + fmt("%g", costs.b + costs.w) + ")").c_str(), costs.p2p);
  if (o.transport == "nccl")
    std::printf("posted as over nccl (messages matched by order, sends complete once received): %s\n",
                reposted ? "one exchange around each F-backward pair (Megatron's), since as generated it "
                           "would deadlock; the declared figures are the generated schedule's"
                         : "as generated (it runs there)");
  std::printf("timeline (time 0 .. %g; F/B/W + microbatch%s, '.' idle%s):\n", r.makespan,
              s.virtual_stages > 1 ? ".chunk" : "", s.split_backward ? "" : ", B = full backward");
  std::fputs(pl::render_timeline(r.timeline, r.makespan, s.virtual_stages, o.width).c_str(), stdout);
  auto declared = [](const std::optional<double>& x) { return x ? fmt("%.6f", *x) : std::string("n/a"); };
  std::printf("makespan %g, ideal %g (largest per-rank compute)\n", r.makespan, r.ideal);
  std::printf("bubble over ideal  (T - ideal) / ideal:   simulated %.6f  declared %s  %s%s\n",
              r.bubble_over_ideal, declared(d.over_ideal).c_str(), d.formula.c_str(),
              d.over_ideal ? "" : " (stated for W <= min(F, B))");
  std::printf("bubble fraction    idle / (pp * T):        simulated %.6f  declared %s\n", r.bubble_fraction,
              declared(d.fraction).c_str());
  if (costs.p2p > 0) std::printf("  (declared formulas exclude the p2p latency)\n");
  std::printf("peak in-flight (microbatch, chunk) units per rank, F done and %s not:\n",
              s.split_backward ? "W" : "BW");
  for (int rank = 0; rank < s.pp; ++rank) {
    std::printf("  rank %d: %d (declared %d)", rank, r.peak_in_flight[size_t(rank)], peak[size_t(rank)]);
    if (s.split_backward)
      std::printf(", until B %d (declared %d)", r.peak_until_b[size_t(rank)], peak_b[size_t(rank)]);
    if (s.virtual_stages > 1)
      std::printf(" = %.3g full-stage microbatches",
                  double(r.peak_in_flight[size_t(rank)]) / s.virtual_stages);
    std::printf("\n");
  }
  const pl::P2PVolume vol = pl::p2p_per_step(cfg, 1);
  std::printf(
      "p2p per step: %lld messages (activation + gradient per virtual-stage boundary), each "
      "B*T*C*dtype bytes\n",
      static_cast<long long>(vol.messages));
  if (s.async_weights)
    std::printf(
        "2bw: microbatch j runs F and backward on weight version j / %d; version k >= 1 is "
        "W(k-1) - lr * grad(group k-2), formed before group k's first F\n",
        s.microbatches);
  if (!o.csv.empty()) std::printf("timeline CSV: %s\n", o.csv.c_str());
  return 0;
}

}  // namespace

void register_schedule(CLI::App& root, Registry& reg, const Env& /*env*/) {
  auto opts = std::make_shared<ScheduleOptions>();
  CLI::App* sub = root.add_subcommand(
      "schedule", "pipeline schedule: ASCII timeline, bubble (simulated vs declared), peak activations, CSV");
  sub->add_option("--pp", opts->pp, "pipeline ranks p")->required();
  sub->add_option("--microbatches", opts->microbatches, "microbatches m per step")->required();
  sub->add_option("--schedule", opts->schedule, "gpipe | 1f1b | interleaved | zb-h1 | 2bw")->required();
  sub->add_option("--virtual-stages", opts->virtual_stages, "model chunks per rank v (interleaved)");
  sub->add_option("--steps", opts->steps, "optimizer steps in the window (2bw; default 2)")->check(CLI::Range(1, 1 << 20));
  sub->add_option("--costs", opts->costs, "F,B,W cost of a microbatch through a full stage (default 1,1,1)");
  sub->add_option("--p2p", opts->p2p, "latency of one send -> receive (default 0)");
  sub->add_option("--csv", opts->csv, "write the timeline CSV (rank,action,microbatch,chunk,start,end)");
  sub->add_option("--width", opts->width, "chart width in columns (0 = automatic)");
  sub->add_option("--transport", opts->transport,
                  "tags (local, mpi: the schedule as generated) | nccl (as the executor posts it there)");
  add_preflight_flags(sub, opts->limits);
  reg.push_back({sub, [opts] { return run_schedule(*opts); }});
}

}  // namespace pb::cli
