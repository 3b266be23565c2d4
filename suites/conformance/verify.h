// parabench verify: a trace written by code that is not ours
// (reference/trace_format.h, results/TRACE.md), judged by the same rule as
// `check` (compare.h). The truth is the reference at fp64; the noise floor the
// largest distance to it of the reference at the trace's precision, run whole
// and replaying the trace's split of the batch (data replicas x
// microbatches): a correct framework's different summation order is within
// C x that floor.
#pragma once
#include "reference/trace_format.h"
#include "suites/conformance/compare.h"
#include "suites/conformance/engine.h"

namespace pb {

// The rule (truth at fp64; floor: the reference at the trace's precision,
// whole and replaying split_of(t)) for every step's loss and gradient norm,
// the step-1 gradients and the final parameters; the learning rate, when the
// trace has it, exactly against the export's schedule (compare.h check_lr). strategy: "<framework>:<strategy>";
// backend "foreign"; no declared costs (the per-rank figures are reported, not
// judged).
// An fp64 trace is held to the fp64 floor `check` holds its fp64 reruns to
// (engine.h ConformanceResult::fp64): the truth, the reference replaying the
// trace's split, the reference with every matmul's inner sums in
// kFp64FloorSlices slices, and the fp32 reference's distance scaled by the
// ratio of the unit roundoffs; at least four fp64 ulps. Not the fp32 floor:
// an fp32-accurate run declared fp64 fails.
// A mixture of experts: the truth and the whole reference train the
// trace's grouping (replicas x microbatches, joint under global capacity:
// routing is per capacity scope); when the trace has them, every step's
// load-balancing losses are judged by the rule ("aux_loss", relative L2 over
// the MoE layers) and its tokens per expert exactly up to the truth's near
// ties ("moe_tokens": a tie within C x the step's loss floor may flip; ratio
// C x moved choices / max(near ties, 1/2)), results/TRACE.md.
// `why`, when given, is filled with what to fix (below).
struct VerifyDiagnosis;
ConformanceResult verify_trace(const ExportDir& e, const ForeignTrace& t, const ToleranceRule& rule = {},
                               VerifyDiagnosis* why = nullptr);

// One parameter's share of a vector quantity (the step-1 gradients or the
// final parameters): its slice's relative L2 error to the truth's, the
// floor the same references give that slice (at least the precision's
// minimum floor), and their ratio.
struct ParamError {
  std::string name;
  double error = 0, floor = 0, ratio = 0;
};

// What a failed verify tells the user to look at: the first failing check
// (the earliest step; at one step in the order moe_tokens, aux_loss, loss,
// grads, params, grad_norm, lr), and the parameters with the largest ratio in the vector
// quantity that failed (the step-1 gradients when they failed first or
// alone, else the final parameters), largest first.
struct VerifyDiagnosis {
  bool failed = false;
  QuantityCheck first;          // the first failing check
  std::string vector_quantity;  // "grads" | "params": what `worst` breaks down
  std::vector<ParamError> worst;  // at most kWorstParams, by ratio, largest first
  double C = 8.0;
  // One line: "first failure: grads at step 1 (ratio 1.2e+03 > 8); largest
  // errors in the step-1 gradients (ratio / C): h.0.attn.c_attn.weight 150, ..."
  // ("" when nothing failed).
  std::string text() const;
};
inline constexpr int kWorstParams = 5;

}  // namespace pb
