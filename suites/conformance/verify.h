// parabench verify: a trace written by code that is not ours, judged by the
// same rule as `check` (compare.h). The files are the export/trace format v1
// of results/TRACE.md:
//  - an export directory (parabench export): init.safetensors and
//    batch.safetensors ("parabench-export-v1") carry the config; they are
//    checked against the reference's own init and batches, element by element,
//    so a trace is never judged against an export that was altered;
//  - a trace ("parabench-trace-v1"): per-step loss and gradient norm (lr
//    optional), the step-1 gradients "grads.<name>" and the parameters after
//    the last step "params.<name>" of every parameter, optional per-rank peak
//    memory and communication bytes, and metadata naming the export (its
//    config hash), the precision, the framework, the strategy, the mesh and
//    the microbatches per data replica.
// The readers accept nothing else: a missing, unknown, misshapen or
// mistyped tensor or key is an InputError naming the file and the tensor or
// key (exit 2 at the CLI).
// The truth is the reference at fp64; the noise floor the largest distance to
// it of the reference at the trace's precision, run whole and replaying the
// trace's split of the batch (data replicas x microbatches): a correct
// framework's different summation order is within C x that floor.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "harness/mesh.h"
#include "reference/train_config.h"
#include "suites/conformance/compare.h"
#include "suites/conformance/engine.h"

namespace pb {

struct ExportDir {
  std::string dir;
  TrainConfig cfg;          // as exported (its precision: the init's storage)
  std::string config_toml;  // the canonical config the export carries
  std::string config_hash;  // ConfigReader::config_hash of it
};

// Reads and checks DIR/init.safetensors and DIR/batch.safetensors.
ExportDir read_export(const std::string& dir);

struct ForeignTrace {
  std::string path;
  std::string framework, strategy, note;
  MeshShape mesh;
  int world = 1;
  int microbatches = 1;  // per data replica
  Precision precision = Precision::fp32;
  Trace trace;
  std::vector<double> lr;                       // empty when the trace has none
  std::vector<int64_t> peak_memory, comm_bytes;  // per rank; empty when absent
};

// Reads a trace and checks it against the export (hash, steps, every
// parameter's name and shape, the split dividing the batch, the precision).
ForeignTrace read_trace(const std::string& path, const ExportDir& e);

// The precisions a trace may have against an export of precision p: its own,
// and bf16-mixed from an fp32 export (the fp32 master starts at the fp32 init).
bool trace_precision_allowed(Precision exported, Precision trace);

// The reference split a trace's run amounts to: its data replicas (mesh dp,
// ep included) x its microbatches per replica.
SplitPlan split_of(const ForeignTrace& t);

// The rule (truth at fp64; floor: the reference at the trace's precision,
// whole and replaying split_of(t)). strategy: "<framework>:<strategy>";
// backend "foreign"; no declared costs (the per-rank figures are reported, not
// judged).
ConformanceResult verify_trace(const ExportDir& e, const ForeignTrace& t, const ToleranceRule& rule = {});

}  // namespace pb
