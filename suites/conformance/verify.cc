#include "suites/conformance/verify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kernels/common/device_ops.h"
#include "reference/layout.h"

namespace pb {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// Where at one step a check comes in the order a user should look: the
// routing (a mixture of experts' tokens per expert, its load-balancing loss),
// the forward (loss), the gradients, the update (params), then the scalars.
int quantity_rank(const std::string& q) {
  static const char* order[] = {"moe_tokens", "aux_loss", "loss", "grads", "params", "grad_norm", "lr"};
  for (int i = 0; i < 7; ++i)
    if (q == order[i]) return i;
  return 7;
}

// A mixture of experts' per-step quantities, when the trace has them
// (verify.h): the load-balancing losses by the rule (relative L2 over the MoE
// layers; floor the references' running maximum), the tokens per expert
// exactly up to near ties (below).
void check_moe(const ForeignTrace& t, const std::vector<const Trace*>& refs, const Trace& truth, double min_floor,
               const ToleranceRule& rule, std::vector<QuantityCheck>& out) {
  const size_t S = truth.loss.size();
  if (!t.moe_aux.empty()) {
    double running = 0;
    for (size_t s = 0; s < S; ++s) {
      for (const Trace* r : refs)
        if (s < r->moe_aux.size()) running = std::max(running, rel_l2(r->moe_aux[s], truth.moe_aux[s]));
      QuantityCheck c;
      c.quantity = "aux_loss";
      c.step = int(s) + 1;
      c.error = rel_l2(t.moe_aux[s], truth.moe_aux[s]);
      c.floor = std::max(running, min_floor);
      c.threshold = rule.C;
      c.ratio = c.error / c.floor;
      if (std::isnan(c.ratio)) c.ratio = INFINITY;
      c.pass = c.ratio <= rule.C;
      out.push_back(c);
    }
  }
  if (!t.moe_tokens.empty()) {
    // Routing is discrete: a correct run matches the truth's counts exactly,
    // except where a token's k-th chosen and best unchosen expert are a near
    // tie that its rounding may break the other way. A tie is near when its
    // relative margin is within C times the loss floor at that step (how far
    // a correct run at the trace's precision has drifted from the truth).
    // error: the choices moved (half the L1 distance of the counts); floor:
    // the truth's near ties; ratio C x moved / max(ties, 1/2): within C
    // exactly when every moved choice is one near tie broken the other way.
    double running = 0;
    for (size_t s = 0; s < S; ++s) {
      for (const Trace* r : refs)
        if (s < r->loss.size()) running = std::max(running, rel_error(r->loss[s], truth.loss[s]));
      const double tie = rule.C * std::max(running, min_floor);
      double moved = 0, ties = 0;
      for (size_t i = 0; i < truth.moe_tokens[s].size(); ++i)
        moved += std::fabs(t.moe_tokens[s][i] - truth.moe_tokens[s][i]);
      moved /= 2;
      for (double m : truth.moe_margins[s]) ties += m <= tie;
      QuantityCheck c;
      c.quantity = "moe_tokens";
      c.step = int(s) + 1;
      c.error = moved;
      c.floor = ties;
      c.threshold = rule.C;
      c.ratio = rule.C * moved / std::max(ties, 0.5);
      c.pass = c.ratio <= rule.C;
      out.push_back(c);
    }
  }
}

// The per-parameter breakdown of a vector quantity (member: grads1 or params).
std::vector<ParamError> per_param(const ParamLayout& l, const std::vector<double>& x,
                                  std::vector<double> Trace::*member, const std::vector<const Trace*>& refs,
                                  const Trace& truth, double min_floor) {
  std::vector<ParamError> out;
  auto slice = [](const std::vector<double>& v, const ParamInfo& p) {
    return std::vector<double>(v.begin() + p.offset, v.begin() + p.offset + p.numel);
  };
  for (const auto& p : l.params()) {
    const std::vector<double> want = slice(truth.*member, p);
    ParamError e;
    e.name = p.name;
    e.error = rel_l2(slice(x, p), want);
    for (const Trace* r : refs) e.floor = std::max(e.floor, rel_l2(slice(r->*member, p), want));
    e.floor = std::max(e.floor, min_floor);
    e.ratio = e.error / e.floor;
    if (std::isnan(e.ratio)) e.ratio = INFINITY;
    out.push_back(e);
  }
  std::stable_sort(out.begin(), out.end(), [](const ParamError& a, const ParamError& b) { return a.ratio > b.ratio; });
  if (out.size() > size_t(kWorstParams)) out.resize(kWorstParams);
  return out;
}

void diagnose(const ExportDir& e, const ConformanceResult& r, const std::vector<const Trace*>& refs,
              const Trace& truth, double min_floor, const ToleranceRule& rule, VerifyDiagnosis* why) {
  *why = {};
  why->C = rule.C;
  const QuantityCheck* first = nullptr;
  bool grads_failed = false, params_failed = false;
  for (const auto& c : r.rule) {
    if (c.pass) continue;
    grads_failed |= c.quantity == "grads";
    params_failed |= c.quantity == "params";
    if (!first || c.step < first->step ||
        (c.step == first->step && quantity_rank(c.quantity) < quantity_rank(first->quantity)))
      first = &c;
  }
  if (!first) return;
  why->failed = true;
  why->first = *first;
  const bool grads = first->quantity == "grads" || (grads_failed && !params_failed);
  why->vector_quantity = grads ? "grads" : "params";
  why->worst = per_param(ParamLayout(e.cfg.model), grads ? r.trace.grads1 : r.trace.params,
                         grads ? &Trace::grads1 : &Trace::params, refs, truth, min_floor);
}

}  // namespace

std::string VerifyDiagnosis::text() const {
  if (!failed) return "";
  std::string s = "first failure: " + first.quantity + " at step " + std::to_string(first.step) + " (";
  if (first.quantity == "lr")
    s += "relative error " + num(first.error) + ", not the export's schedule";
  else if (first.quantity == "moe_tokens")
    s += num(first.error) + " choices routed to other experts than the truth's, " + num(first.floor) +
         " near ties; ratio " + num(first.ratio) + " > " + num(first.threshold);
  else
    s += "ratio " + num(first.ratio) + " > " + num(first.threshold);
  s += "); largest errors in the " +
       std::string(vector_quantity == "grads" ? "step-1 gradients" : "final parameters") + " (ratio / C = " +
       num(C) + "): ";
  for (size_t i = 0; i < worst.size(); ++i)
    s += (i ? ", " : "") + worst[i].name + " " + num(worst[i].ratio / C);
  return s;
}

ConformanceResult verify_trace(const ExportDir& e, const ForeignTrace& t, const ToleranceRule& rule,
                               VerifyDiagnosis* why) {
  TrainConfig cfg = e.cfg;
  cfg.precision = t.precision;
  TrainConfig truth_cfg = cfg;
  truth_cfg.precision = Precision::fp64;
  Replay as_split;
  as_split.plan = split_of(t, e.cfg);
  // A mixture of experts: routing, capacity and the load-balancing loss are
  // per capacity scope (a replica's microbatch, or with global capacity
  // microbatch k of every replica joint), not sums over tokens, so the truth
  // and the whole reference train the trace's grouping (as check does,
  // engine.cc), only its order of summation left out.
  Replay plain;
  if (e.cfg.model.moe.experts > 0) {
    plain.plan.groups = as_split.plan.groups;
    plain.plan.micro = as_split.plan.micro;
    plain.plan.moe_joint = as_split.plan.moe_joint;
  }
  const Trace truth = reference_trace(truth_cfg, plain);
  const Trace whole = reference_trace(cfg, plain);
  const Trace split = reference_trace(cfg, as_split);
  std::vector<Trace> more;  // the fp64 floor's other orders (verify.h)
  if (t.precision == Precision::fp64) {
    for (int parts : kFp64FloorSlices)
      more.push_back(reference_trace(truth_cfg, plain, nullptr, kernels::cpu_ops_sliced<double>(parts)));
    TrainConfig fp32_cfg = cfg;
    fp32_cfg.precision = Precision::fp32;
    more.push_back(
        scaled_distance(reference_trace(fp32_cfg, plain), truth, dtype_eps(DType::f64) / dtype_eps(DType::f32)));
  }
  std::vector<const Trace*> refs = {&whole, &split};
  for (const Trace& m : more) refs.push_back(&m);
  ConformanceResult r;
  r.strategy = t.framework + ":" + t.strategy;
  r.mesh = mesh_text(t.mesh);
  r.precision = t.precision;
  r.world = t.world;
  r.backend = "foreign";
  r.trace.loss = t.loss;
  r.trace.grad_norm = t.grad_norm;
  r.trace.grads1 = t.grads1;
  r.trace.params = t.params;
  const DType dt = storage_dtype(t.precision);
  r.rule = check_rule(r.trace, refs, truth, dt, rule);
  // What the format requires is judged: the gradient norm of every step; and
  // the learning rate of every step when the trace gives it.
  for (const auto& c : check_grad_norm(r.trace, refs, truth, dt, rule)) r.rule.push_back(c);
  if (!t.lr.empty()) {
    std::vector<double> schedule;
    for (int s = 1; s <= e.cfg.steps; ++s) schedule.push_back(lr_at(e.cfg.optim, s, e.cfg.steps));
    for (const auto& c : check_lr(t.lr, schedule)) r.rule.push_back(c);
  }
  check_moe(t, refs, truth, rule.min_floor_ulps * dtype_eps(dt), rule, r.rule);
  if (why) diagnose(e, r, refs, truth, rule.min_floor_ulps * dtype_eps(dt), rule, why);
  return r;
}

}  // namespace pb
