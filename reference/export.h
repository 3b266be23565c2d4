// Golden files any framework can load and compare with (parabench export):
//  init.safetensors   the init weights, GPT-2 names, Linear (out, in) layout;
//  batch.safetensors  every step's global batch: inputs/targets (steps, B, T) I32;
//  trace.safetensors  loss, grad_norm and lr of every step (F64), the step-1
//                     gradients "grads.<name>" and the parameters after the
//                     last step "params.<name>", in the storage precision.
// Metadata carries the effective config (TOML) and the entropy floor.
#pragma once
#include <string>
#include <vector>

#include "reference/train_config.h"

namespace pb {

// Writes the three files into dir (created if needed); returns their paths.
std::vector<std::string> export_golden(const TrainConfig& cfg, const std::string& dir,
                                       const std::string& config_toml);

}  // namespace pb
