// The export/trace format v1 (results/TRACE.md), the reading side (export.cc
// writes it): what parabench verify (suites/conformance/verify.h) judges.
//  - an export directory (parabench export): init.safetensors and
//    batch.safetensors ("parabench-export-v1") carry the config; they are
//    checked against the reference's own init and batches, element by element,
//    so a trace is never judged against an export that was altered;
//  - a trace ("parabench-trace-v2"; v1, without the MoE quantities, still
//    read): per-step loss and gradient norm (lr
//    optional), the step-1 gradients "grads.<name>" and the parameters after
//    the last step "params.<name>" of every parameter, optional per-rank peak
//    memory and communication bytes, and metadata naming the export (its
//    config hash), the precision, the framework, the strategy, the mesh and
//    the microbatches per data replica.
// The readers accept nothing else: a missing, unknown, misshapen or
// mistyped tensor or key is an InputError naming the file and the tensor or
// key (exit 2 at the CLI).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/io/safetensors.h"
#include "harness/mesh.h"
#include "reference/train_config.h"
#include "reference/trainer.h"

namespace pb {

struct ExportDir {
  std::string dir;
  TrainConfig cfg;          // as exported (its precision: the init's storage)
  std::string config_toml;  // the canonical config the export carries
  std::string config_hash;  // ConfigReader::config_hash of it
};

// Reads and checks DIR/init.safetensors and DIR/batch.safetensors.
// `before_checks` sees the config once it reads and before the init and data
// are regenerated to compare (which allocate a reference model of that
// shape): the caller's preflight, so a config naming a huge model is refused
// before anything is allocated for it.
ExportDir read_export(const std::string& dir,
                      const std::function<void(const TrainConfig&)>& before_checks = {});

struct ForeignTrace {
  std::string path;
  std::string framework, strategy, note;
  MeshShape mesh;
  int world = 1;
  int microbatches = 1;  // per data replica
  Precision precision = Precision::fp32;
  std::vector<double> loss, grad_norm;          // per step
  std::vector<double> grads1, params;           // flat, in the layout's order
  std::vector<double> lr;                       // empty when the trace has none
  std::vector<int64_t> peak_memory, comm_bytes;  // per rank; empty when absent
  // Optional, a mixture-of-experts export only (empty when absent): per step,
  // "moe.tokens_per_expert" (MoE layers x experts, layer-major) and
  // "moe.aux_loss" (per MoE layer), results/TRACE.md.
  std::vector<std::vector<double>> moe_tokens, moe_aux;
};


// Reads a trace and checks it against the export (hash, steps, every
// parameter's name and shape, the split dividing the batch, the precision).
ForeignTrace read_trace(const std::string& path, const ExportDir& e);
// The same on a parsed file (the fuzz target's entry).
ForeignTrace read_trace(const SafetensorsFile& f, const ExportDir& e);

// The precisions a trace may have against an export of precision p: its own,
// and bf16-mixed from an fp32 export (the fp32 master starts at the fp32 init).
bool trace_precision_allowed(Precision exported, Precision trace);

// The reference split a trace's run amounts to: its data replicas (mesh dp,
// ep included) x its microbatches per replica; for a mixture of experts whose
// capacity (and load balancing) spans the data ranks (global capacity),
// microbatch k of every replica joint (SplitPlan::moe_joint).
SplitPlan split_of(const ForeignTrace& t, const TrainConfig& cfg);

}  // namespace pb
