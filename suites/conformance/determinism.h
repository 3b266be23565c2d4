// The determinism matrix (docs/numerics.md#determinism): for a pair of runs,
// what the engine vouches for — bit-identical, bounded by the rule, another
// training, or nothing — derived from the strategies' own declarations
// (Strategy::bitwise, replay, bitwise_twin), and the judgement of two finished
// runs against that claim. `parabench check --determinism` runs the pairs.
#pragma once
#include <string>

#include "suites/conformance/engine.h"

namespace pb {

enum class Claim : uint8_t {
  identical,  // every loss, grad norm, step-1 gradient and final parameter bit for bit
  bounded,    // both held to the same truth by the rule; the bits may differ
  different,  // not the same training (another truth): nothing compared between them
  unvouched,  // the engine does not vouch for the pair (a device's kernels, NCCL's algorithms)
};
std::string claim_name(Claim c);

struct ClaimWhy {
  Claim claim = Claim::bounded;
  std::string why;  // the declaration the claim rests on
};

// The claim for runs a and b (each on its StrategyRun::world backend and
// device). Same spec on the CPU: identical (every rank's arithmetic and each
// backend's reduction order are fixed; timing does not enter). Otherwise
// identical when both declare bit equality with the same replay on their
// backend, or b is a's declared bitwise twin; another truth (one-step-delayed
// weights, another model or batch) is `different`; a device or NCCL is
// `unvouched`; the rest is `bounded`.
ClaimWhy claim_for(const StrategyRun& a, const StrategyRun& b);

// Bit equality of every quantity of two traces (loss and grad norm per step,
// the step-1 gradients, the final parameters); false when their sizes differ.
bool traces_identical(const Trace& a, const Trace& b);
// The largest |a - b| over the final parameters, relative to the largest
// |a| (0 when identical); infinity when the sizes differ.
double max_param_difference(const Trace& a, const Trace& b);

struct PairOutcome {
  bool identical = false;  // measured
  double param_difference = 0;
  bool a_passes = false, b_passes = false;  // each run against its truth (the rule, exact memory and comm)
  bool pass = false;                        // the claim held
  std::string note;                         // why not, when it did not
};

// Judges two finished runs against `claim`: identical needs bit equality
// (and both runs passing); bounded and different need both runs to pass
// their own checks. `unvouched` pairs are not run (InputError if asked).
PairOutcome judge_pair(Claim claim, const ConformanceResult& a, const ConformanceResult& b);

}  // namespace pb
