#include "suites/conformance/verify.h"

namespace pb {

ConformanceResult verify_trace(const ExportDir& e, const ForeignTrace& t, const ToleranceRule& rule) {
  TrainConfig cfg = e.cfg;
  cfg.precision = t.precision;
  TrainConfig truth_cfg = cfg;
  truth_cfg.precision = Precision::fp64;
  Replay as_split;
  as_split.plan = split_of(t);
  const Trace truth = reference_trace(truth_cfg, {});
  const Trace whole = reference_trace(cfg, {});
  const Trace split = reference_trace(cfg, as_split);
  ConformanceResult r;
  r.strategy = t.framework + ":" + t.strategy;
  r.mesh = mesh_text(t.mesh);
  r.precision = t.precision;
  r.world = t.world;
  r.backend = "foreign";
  r.trace = {t.loss, t.grad_norm, t.grads1, t.params};
  r.rule = check_rule(r.trace, {&whole, &split}, truth, storage_dtype(t.precision), rule);
  // What the format requires is judged: the gradient norm of every step; and
  // the learning rate of every step when the trace gives it.
  for (const auto& c : check_grad_norm(r.trace, {&whole, &split}, truth, storage_dtype(t.precision), rule))
    r.rule.push_back(c);
  if (!t.lr.empty()) {
    std::vector<double> schedule;
    for (int s = 1; s <= e.cfg.steps; ++s) schedule.push_back(lr_at(e.cfg.optim, s, e.cfg.steps));
    for (const auto& c : check_lr(t.lr, schedule)) r.rule.push_back(c);
  }
  return r;
}

}  // namespace pb
