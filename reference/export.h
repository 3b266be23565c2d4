// Golden files any framework can load and compare with (parabench export);
// the format, v1, is specified in results/TRACE.md:
//  init.safetensors   the init weights, GPT-2 names, Linear (out, in) layout;
//  batch.safetensors  every step's global batch: inputs/targets (steps, B, T) I32;
//  trace.safetensors  the reference's own trace (parabench-trace-v1, what a
//                     framework writes for parabench verify): loss, grad_norm
//                     and lr of every step (F64), the step-1 gradients
//                     "grads.<name>" and the parameters after the last step
//                     "params.<name>", in the storage precision.
// init and batch carry the effective config (TOML), its hash (a trace names
// the export it was trained from by it), the precision and the entropy floor.
#pragma once
#include <string>
#include <vector>

#include "reference/train_config.h"

namespace pb {

inline constexpr const char* kExportFormat = "parabench-export-v1";  // init, batch
inline constexpr const char* kTraceFormat = "parabench-trace-v1";    // trace

// Writes the three files into dir (created if needed); returns their paths.
std::vector<std::string> export_golden(const TrainConfig& cfg, const std::string& dir,
                                       const std::string& config_toml);

}  // namespace pb
