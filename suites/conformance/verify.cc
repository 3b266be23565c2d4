#include "suites/conformance/verify.h"

#include "reference/trainer.h"

namespace pb {

ConformanceResult verify_trace(const ExportDir& e, const ForeignTrace& t, const ToleranceRule& rule) {
  TrainConfig cfg = e.cfg;
  cfg.precision = t.precision;
  TrainConfig truth_cfg = cfg;
  truth_cfg.precision = Precision::fp64;
  auto run = [](const TrainConfig& c, const SplitPlan& plan) {
    auto tr = make_reference_trainer(c, plan);
    Trace out;
    for (int s = 0; s < c.steps; ++s) {
      const StepStats st = tr->step();
      out.loss.push_back(st.loss);
      out.grad_norm.push_back(st.grad_norm);
      if (s == 0) out.grads1 = tr->grads_f64();
    }
    out.params = tr->params_f64();
    return out;
  };
  const Trace truth = run(truth_cfg, {});
  const Trace whole = run(cfg, {});
  const Trace split = run(cfg, split_of(t));
  ConformanceResult r;
  r.strategy = t.framework + ":" + t.strategy;
  r.mesh = mesh_text(t.mesh);
  r.precision = t.precision;
  r.world = t.world;
  r.backend = "foreign";
  r.trace = {t.loss, t.grad_norm, t.grads1, t.params};
  r.rule = check_rule(r.trace, {&whole, &split}, truth, storage_dtype(t.precision), rule);
  return r;
}

}  // namespace pb
