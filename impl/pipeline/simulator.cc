// Pipeline simulator (see simulator.h). A rank advances until a RECV whose
// message has not been sent yet; the SEND of that message re-queues it, so the
// run is O(actions). Times are exact sums of the
// given costs, so equal costs reproduce the declared bubbles to rounding.
#include "impl/pipeline/simulator.h"

#include <algorithm>
#include <cmath>

#include "harness/status.h"

namespace pb::pipeline {
namespace {

double cost_of(const Schedule& s, const Costs& c, Op op) {
  const double v = s.virtual_stages;
  switch (op) {
    case Op::forward: return c.f / v;
    case Op::backward_input: return c.b / v;
    case Op::backward_weight: return c.w / v;
    case Op::backward: return (c.b + c.w) / v;
    default: return 0;
  }
}

std::vector<int> peaks(const Schedule& s, bool until_w) {
  std::vector<int> out;
  for (const auto& list : s.ranks) {
    int cur = 0, peak = 0;
    for (const Action& a : list) {
      if (a.op == Op::forward) ++cur;
      if (a.op == Op::backward || a.op == (until_w ? Op::backward_weight : Op::backward_input)) --cur;
      peak = std::max(peak, cur);
    }
    out.push_back(peak);
  }
  return out;
}

}  // namespace

std::vector<int> peak_in_flight(const Schedule& s) { return peaks(s, /*until_w=*/true); }
std::vector<int> peak_until_b(const Schedule& s) { return peaks(s, /*until_w=*/false); }

SimResult simulate(const Schedule& s, const Costs& c) {
  require(std::isfinite(c.f) && std::isfinite(c.b) && std::isfinite(c.w) && c.f >= 0 && c.b >= 0 &&
              c.w >= 0 && c.f + c.b + c.w > 0,
          "--costs: F, B, W must be finite, >= 0 and not all 0");
  require(std::isfinite(c.p2p) && c.p2p >= 0, "--p2p: must be finite and >= 0");
  const int p = s.pp;
  SimResult res;
  res.timeline.assign(size_t(p), {});
  std::vector<double> clock(size_t(p), 0.0);
  std::vector<size_t> at(size_t(p), 0);
  std::vector<double> sent(size_t(num_messages(s)), -1.0);  // message -> time sent (-1: not yet)
  size_t remaining = 0;
  for (const auto& l : s.ranks) remaining += l.size();
  // Worklist: a rank runs until a RECV blocks it; a SEND re-queues its peer.
  std::vector<int> work;
  std::vector<char> queued(size_t(p), 1);
  for (int r = p - 1; r >= 0; --r) work.push_back(r);
  while (!work.empty()) {
    const int r = work.back();
    work.pop_back();
    queued[size_t(r)] = 0;
    const auto& list = s.ranks[size_t(r)];
    double& t = clock[size_t(r)];
    for (; at[size_t(r)] < list.size(); ++at[size_t(r)], --remaining) {
      const Action& a = list[at[size_t(r)]];
      if (is_compute(a.op)) {
        const double end = t + cost_of(s, c, a.op);
        res.timeline[size_t(r)].push_back({a.op, a.microbatch, a.chunk, t, end});
        t = end;
      } else if (a.op == Op::send_act || a.op == Op::send_grad) {
        sent[size_t(message_index(s, message_key(s, r, a)))] = t;
        if (!queued[size_t(a.peer)]) {
          queued[size_t(a.peer)] = 1;
          work.push_back(a.peer);
        }
      } else {
        const double when = sent[size_t(message_index(s, message_key(s, r, a)))];
        if (when < 0) break;
        t = std::max(t, when + c.p2p);
      }
    }
  }
  if (remaining > 0)
    throw InputError("schedule " + s.name +
                     ": cannot finish (a RECV waits for a message never "
                     "sent); run validate() for the deadlock report");
  res.makespan = *std::max_element(clock.begin(), clock.end());
  double idle = 0;
  for (const auto& tl : res.timeline) {
    double busy = 0;
    for (const auto& e : tl) busy += e.end - e.start;
    res.busy.push_back(busy);
    idle += res.makespan - busy;
  }
  res.ideal = *std::max_element(res.busy.begin(), res.busy.end());
  res.bubble_over_ideal = res.ideal > 0 ? (res.makespan - res.ideal) / res.ideal : 0;
  res.bubble_fraction = res.makespan > 0 ? idle / (p * res.makespan) : 0;
  res.peak_in_flight = peak_in_flight(s);
  res.peak_until_b = peak_until_b(s);
  return res;
}

}  // namespace pb::pipeline
