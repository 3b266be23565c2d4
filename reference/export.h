// Golden files any framework can load and compare with (parabench export);
// the format, v1, is specified in results/TRACE.md:
//  init.safetensors   the init weights, GPT-2 names, Linear (out, in) layout;
//  batch.safetensors  every step's global batch: inputs/targets (steps, B, T) I32;
//  trace.safetensors  the reference's own trace (parabench-trace-v2, what a
//                     framework writes for parabench verify): loss, grad_norm
//                     and lr of every step (F64), the step-1 gradients
//                     "grads.<name>" and the parameters after the last step
//                     "params.<name>", in the storage precision; for a
//                     mixture of experts also every step's tokens per expert
//                     and load-balancing loss per MoE layer.
// init and batch carry the effective config (TOML), its hash (a trace names
// the export it was trained from by it), the precision and the entropy floor.
#pragma once
#include <string>
#include <vector>

#include "reference/train_config.h"

namespace pb {

inline constexpr const char* kExportFormat = "parabench-export-v1";  // init, batch
inline constexpr const char* kTraceFormat = "parabench-trace-v2";    // trace (written)
inline constexpr const char* kTraceFormatV1 = "parabench-trace-v1";  // still read: no MoE quantities
// A mixture of experts' optional per-step trace tensors (results/TRACE.md):
// tokens per expert, I64 (steps, MoE layers, experts); each MoE layer's
// load-balancing loss, F64 (steps, MoE layers).
inline constexpr const char* kMoeTokens = "moe.tokens_per_expert";
inline constexpr const char* kMoeAux = "moe.aux_loss";

// Writes the three files into dir (created if needed); returns their paths.
// Staged: the files are written into a fresh directory beside (or, when dir
// exists, inside) the destination and moved into place only once all three
// are written, so a refused or failed export leaves nothing behind. A file
// of the export's name that is not a regular file (a directory, a socket) is
// refused before anything is computed; a link, a pipe or a device there is
// written as harness/io/output_file.h writes it.
std::vector<std::string> export_golden(const TrainConfig& cfg, const std::string& dir,
                                       const std::string& config_toml);

// What the export holds beyond training the reference, in bytes: every
// step's batch (inputs and targets, I32) three times over (the vectors, the
// writer's copy, the file image) and the parameters six times (the init's
// copy and image; the step-1 gradients, and the trace's copies and image of
// them and of the final parameters). The CLI adds it to the run's preflight.
double export_bytes(const TrainConfig& cfg);

}  // namespace pb
