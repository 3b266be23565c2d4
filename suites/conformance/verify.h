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
ConformanceResult verify_trace(const ExportDir& e, const ForeignTrace& t, const ToleranceRule& rule = {});

}  // namespace pb
