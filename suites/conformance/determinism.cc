#include "suites/conformance/determinism.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "impl/registry.h"

namespace pb {

std::string claim_name(Claim c) {
  switch (c) {
    case Claim::identical: return "bit-identical";
    case Claim::bounded: return "bounded by the rule";
    case Claim::different: return "another training";
    case Claim::unvouched: return "not vouched for";
  }
  return "?";
}

namespace {

bool bits_equal(const std::vector<double>& x, const std::vector<double>& y) {
  return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0);
}

std::string side(const StrategyRun& s) {
  return spec_label(s.spec) + " (" + std::string(backend_name(s.world.backend)) +
         (s.spec.train.device == Device::cuda ? ", cuda" : "") + (s.world.chaos.enabled ? ", chaos" : "") + ")";
}

}  // namespace

ClaimWhy claim_for(const StrategyRun& a, const StrategyRun& b) {
  for (const StrategyRun* s : {&a, &b}) {
    if (s->spec.train.device == Device::cuda)
      return {Claim::unvouched, side(*s) + " runs on a device: its kernels (cuBLAS's split-K and algorithm choice, "
                                           "atomic adds in reductions) may round differently from run to run"};
    if (s->world.backend == BackendKind::nccl)
      return {Claim::unvouched, side(*s) + " reduces over NCCL, whose algorithm and chunking follow the message "
                                           "size, the topology and NCCL_ALGO/NCCL_PROTO"};
  }
  if (!(a.spec.train == b.spec.train))
    return {Claim::different, "another training configuration (model, batch, sequence, precision, steps or "
                              "optimizer differ): each is held to its own truth"};
  const Strategy &sa = strategy_for(a.spec), &sb = strategy_for(b.spec);
  const Replay ra = sa.replay(a.spec), rb = sb.replay(b.spec);
  if (ra.delayed_weights != rb.delayed_weights)
    return {Claim::different, "one side trains with one-step-delayed weights (PipeDream-2BW): another algorithm, "
                              "held to its own delayed truth"};
  if (a.spec == b.spec && a.world.backend == b.world.backend)
    return {Claim::identical, "the same spec on the same backend: every rank's arithmetic and the backend's "
                              "reduction order are fixed, and timing (chaos delays) does not enter them"};
  const bool bits_a = declares_bitwise(a), bits_b = declares_bitwise(b);
  if (bits_a && bits_b && ra == rb)
    return {Claim::identical, "both declare bit equality with the same replay (the same split plan and order of "
                              "summation) on their backends"};
  for (auto [x, y, st] : {std::tuple{&a, &b, &sa}, std::tuple{&b, &a, &sb}})
    if (st->bitwise_twin && x->world.backend == y->world.backend) {
      if (const std::optional<RunSpec> twin = st->bitwise_twin(x->spec); twin && *twin == y->spec)
        return {Claim::identical, spec_label(y->spec) + " is " + spec_label(x->spec) + "'s declared bitwise twin"};
    }
  std::string why;
  if (!bits_a || !bits_b) {
    const StrategyRun& x = !bits_a ? a : b;
    StrategyRun on_local = x;
    on_local.world.backend = BackendKind::local;
    why = spec_label(x.spec) +
          (x.world.backend != BackendKind::local && declares_bitwise(on_local)
               ? " declares bit equality on the local backend only: " + std::string(backend_name(x.world.backend)) +
                     "'s reductions sum in the library's own order"
               : " does not declare bit equality (its sums are split in an order the single device's replay does "
                 "not follow)");
  } else {
    why = "their replays differ (another split of the batch or of the reductions)";
  }
  return {Claim::bounded, why + ": each within the rule of the same fp64 truth"};
}

bool traces_identical(const Trace& a, const Trace& b) {
  return bits_equal(a.loss, b.loss) && bits_equal(a.grad_norm, b.grad_norm) && bits_equal(a.grads1, b.grads1) &&
         bits_equal(a.params, b.params);
}

double max_param_difference(const Trace& a, const Trace& b) {
  if (a.params.size() != b.params.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.params.size(); ++i) {
    diff = std::max(diff, std::abs(a.params[i] - b.params[i]));
    scale = std::max(scale, std::abs(a.params[i]));
  }
  return diff == 0 ? 0 : scale > 0 ? diff / scale : std::numeric_limits<double>::infinity();
}

PairOutcome judge_pair(Claim claim, const ConformanceResult& a, const ConformanceResult& b) {
  require(claim != Claim::unvouched, "determinism: a pair the engine does not vouch for is not judged");
  PairOutcome o;
  o.identical = traces_identical(a.trace, b.trace);
  o.param_difference = max_param_difference(a.trace, b.trace);
  o.a_passes = a.pass() && !a.rule.empty();  // a run that compared nothing proves nothing
  o.b_passes = b.pass() && !b.rule.empty();
  o.pass = o.a_passes && o.b_passes && (claim != Claim::identical || o.identical);
  if (!o.a_passes) o.note += "A fails its own checks" + describe_failures(a) + "; ";
  if (!o.b_passes) o.note += "B fails its own checks" + describe_failures(b) + "; ";
  if (claim == Claim::identical && !o.identical) {
    const char* first = !bits_equal(a.trace.loss, b.trace.loss)             ? "loss"
                        : !bits_equal(a.trace.grad_norm, b.trace.grad_norm) ? "grad_norm"
                        : !bits_equal(a.trace.grads1, b.trace.grads1)       ? "step-1 grads"
                                                                            : "params";
    o.note += std::string("claimed bit-identical, differs first in ") + first;
  }
  if (o.note.size() >= 2 && o.note.compare(o.note.size() - 2, 2, "; ") == 0)
    o.note.resize(o.note.size() - 2);
  return o;
}

}  // namespace pb
