// The numerics rule (docs/numerics.md#the-rule), in one place (the project's only tolerance
// policy): a strategy's distance to the fp64 truth must be within C x the
// noise floor of a correct implementation at the precision under test.
//  - error: relative, |x - truth| / |truth| for one loss, ||x - truth||_2 /
//    ||truth||_2 for a vector (step-1 gradients, parameters after N steps);
//  - floor: the largest distance to the truth among the correct references at
//    that precision (the reference itself, and the reference replaying the
//    strategy's summation order: a different order is still correct; at
//    fp64, where the truth is the reference, also the reference in other
//    orders of its inner sums, engine.h ConformanceResult::fp64), for a
//    loss the running maximum over steps so far (a gap that happens to vanish at
//    one step is luck, not precision), raised to at least kMinFloorUlps ulps of
//    the precision under test;
//  - pass: error <= C x floor, C = 8 by default.
// Declared-bitwise strategies are in addition held to bit equality with the
// reference that replays their order.
#pragma once
#include <string>
#include <vector>

#include "harness/dtype.h"

namespace pb {

// What one run yields for the checks; every value widened exactly to double.
struct Trace {
  std::vector<double> loss;       // per step
  std::vector<double> grad_norm;  // per step
  std::vector<double> grads1;     // full gradient of step 1 (before the update)
  std::vector<double> params;     // full parameters after the last step
  // A mixture of experts, per step (empty for a dense model; reference
  // traces, and verify's foreign ones when they carry them): each MoE
  // layer's routed choices per expert (layer-major), each MoE layer's
  // load-balancing loss as it enters the loss, and (references) the near-tie
  // margins of the routing (reference/runner.h MoeStepRecord).
  std::vector<std::vector<double>> moe_tokens, moe_aux, moe_margins;
};

struct ToleranceRule {
  double C = 8.0;
  // A floor near zero is raised to this many ulps (machine epsilons) of the
  // precision under test.
  double min_floor_ulps = 4.0;
};

struct QuantityCheck {
  std::string quantity;  // loss | grad_norm | grads | params (verify: also lr)
  int step = 0;          // 1-based; the last step for params
  double error = 0, floor = 0, ratio = 0, threshold = 0;
  bool bitwise = false;  // checked for bit equality instead of by the rule
  bool pass = false;
};

double rel_error(double x, double truth);
double rel_l2(const std::vector<double>& x, const std::vector<double>& truth);

// The rule: `refs` are the correct references at the precision under test.
std::vector<QuantityCheck> check_rule(const Trace& strategy, const std::vector<const Trace*>& refs,
                                      const Trace& truth, DType precision,
                                      const ToleranceRule& rule = {});

// The gradient norm of every step (before clipping) by the same rule as the
// loss, as its own quantity "grad_norm": relative error to the truth's norm,
// floor the references' running maximum. A NaN, a negative or a wrong norm
// fails. Both check (engine.h) and verify judge it.
std::vector<QuantityCheck> check_grad_norm(const Trace& strategy, const std::vector<const Trace*>& refs,
                                           const Trace& truth, DType precision, const ToleranceRule& rule = {});

// The learning rate of every step against the schedule's (quantity "lr"):
// exact up to the rounding of a schedule computed in fp32 (floor: kLrUlps
// fp32 ulps; ratio = relative error / floor; pass when ratio <= 1).
inline constexpr double kLrUlps = 4.0;
std::vector<QuantityCheck> check_lr(const std::vector<double>& lr, const std::vector<double>& schedule);

// Bit equality of every loss, the step-1 gradients and the final parameters.
std::vector<QuantityCheck> check_bitwise(const Trace& strategy, const Trace& replay);

bool all_pass(const std::vector<QuantityCheck>& checks);

}  // namespace pb
