// TrainConfig from TOML: tables [model], [train], [optim], [data]. Every field
// has a default; [model] name = "tiny" picks a named shape whose fields the
// other keys override.
#pragma once
#include "harness/io/config.h"
#include "reference/train_config.h"

namespace pb {

// Reads (and validates) the training configuration. Keys it does not know
// are left for the caller's check_no_unknown_keys().
TrainConfig read_train_config(ConfigReader& r);

// The same configuration written back as TOML keys on r (for dumps/hashes).
void write_train_config(const TrainConfig& c, ConfigReader& r);

}  // namespace pb
