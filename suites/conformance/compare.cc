#include "suites/conformance/compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace pb {

double rel_error(double x, double truth) {
  double d = std::abs(x - truth), s = std::abs(truth);
  if (std::isnan(d)) return INFINITY;
  return s > 0 ? d / s : d;
}

double rel_l2(const std::vector<double>& x, const std::vector<double>& truth) {
  if (x.size() != truth.size())
    throw std::runtime_error("compare: vector of " + std::to_string(x.size()) +
                             " elements against truth of " + std::to_string(truth.size()));
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double d = x[i] - truth[i];
    num += d * d;
    den += truth[i] * truth[i];
  }
  if (std::isnan(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

namespace {

QuantityCheck judge(std::string q, int step, double err, double floor, double min_floor,
                    const ToleranceRule& rule) {
  QuantityCheck c;
  c.quantity = std::move(q);
  c.step = step;
  c.error = err;
  c.floor = std::max(floor, min_floor);
  c.threshold = rule.C;
  c.ratio = c.error / c.floor;
  c.pass = c.ratio <= rule.C;
  return c;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

QuantityCheck bit_check(std::string q, int step, const std::vector<double>& a,
                        const std::vector<double>& b) {
  QuantityCheck c;
  c.quantity = std::move(q);
  c.step = step;
  c.bitwise = true;
  c.pass = same_bits(a, b);
  c.error = c.pass ? 0.0 : (a.size() == b.size() ? rel_l2(a, b) : INFINITY);
  return c;
}

// One check per step of a per-step scalar (loss, grad_norm): the floor is
// the references' running maximum distance to the truth so far.
void per_step(const char* quantity, std::vector<double> Trace::*member, const Trace& s,
              const std::vector<const Trace*>& refs, const Trace& truth, double min_floor, const ToleranceRule& rule,
              std::vector<QuantityCheck>& out) {
  const std::vector<double>& t = truth.*member;
  if ((s.*member).size() != t.size())
    throw std::runtime_error(std::string("compare: ") + quantity + " of " + std::to_string((s.*member).size()) +
                             " steps against the truth's " + std::to_string(t.size()));
  double running = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    for (const Trace* r : refs) running = std::max(running, rel_error((r->*member)[i], t[i]));
    out.push_back(judge(quantity, int(i) + 1, rel_error((s.*member)[i], t[i]), running, min_floor, rule));
  }
}

}  // namespace

std::vector<QuantityCheck> check_grad_norm(const Trace& s, const std::vector<const Trace*>& refs, const Trace& truth,
                                           DType precision, const ToleranceRule& rule) {
  std::vector<QuantityCheck> out;
  per_step("grad_norm", &Trace::grad_norm, s, refs, truth, rule.min_floor_ulps * dtype_eps(precision), rule, out);
  for (size_t i = 0; i < out.size(); ++i)  // a norm is >= 0: a negative one is wrong at any floor
    if (s.grad_norm[i] < 0) out[i].pass = false;
  return out;
}

std::vector<QuantityCheck> check_lr(const std::vector<double>& lr, const std::vector<double>& schedule) {
  if (lr.size() != schedule.size())
    throw std::runtime_error("compare: lr of " + std::to_string(lr.size()) + " steps against the schedule's " +
                             std::to_string(schedule.size()));
  std::vector<QuantityCheck> out;
  for (size_t i = 0; i < lr.size(); ++i) {
    QuantityCheck c;
    c.quantity = "lr";
    c.step = int(i) + 1;
    c.error = rel_error(lr[i], schedule[i]);
    c.floor = kLrUlps * dtype_eps(DType::f32);
    c.threshold = 1;
    c.ratio = c.error / c.floor;
    c.pass = c.ratio <= c.threshold;
    out.push_back(c);
  }
  return out;
}

std::vector<QuantityCheck> check_rule(const Trace& s, const std::vector<const Trace*>& refs,
                                      const Trace& truth, DType precision,
                                      const ToleranceRule& rule) {
  const double min_floor = rule.min_floor_ulps * dtype_eps(precision);
  std::vector<QuantityCheck> out;
  if (s.loss.size() != truth.loss.size())
    throw std::runtime_error("compare: strategy ran " + std::to_string(s.loss.size()) +
                             " steps, truth " + std::to_string(truth.loss.size()));
  per_step("loss", &Trace::loss, s, refs, truth, min_floor, rule, out);
  double gfloor = 0, pfloor = 0;
  for (const Trace* r : refs) {
    gfloor = std::max(gfloor, rel_l2(r->grads1, truth.grads1));
    pfloor = std::max(pfloor, rel_l2(r->params, truth.params));
  }
  out.push_back(judge("grads", 1, rel_l2(s.grads1, truth.grads1), gfloor, min_floor, rule));
  out.push_back(judge("params", int(truth.loss.size()), rel_l2(s.params, truth.params), pfloor,
                      min_floor, rule));
  return out;
}

std::vector<QuantityCheck> check_bitwise(const Trace& s, const Trace& replay) {
  std::vector<QuantityCheck> out;
  for (size_t i = 0; i < replay.loss.size(); ++i) {
    double a = i < s.loss.size() ? s.loss[i] : NAN;
    out.push_back(bit_check("loss", int(i) + 1, {a}, {replay.loss[i]}));
  }
  out.push_back(bit_check("grads", 1, s.grads1, replay.grads1));
  out.push_back(bit_check("params", int(replay.loss.size()), s.params, replay.params));
  return out;
}

bool all_pass(const std::vector<QuantityCheck>& checks) {
  return std::all_of(checks.begin(), checks.end(), [](const auto& c) { return c.pass; });
}

}  // namespace pb
