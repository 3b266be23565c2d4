// Helpers shared by the CLI commands: config loading with flag overrides,
// run directories, and human-readable figures.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/config.h"
#include "harness/run_meta.h"

namespace pb::cli {

// Flags every config-driven command shares.
struct ConfigFlags {
  std::string config;              // --config FILE (optional)
  std::vector<std::string> sets;   // --set key=value (repeatable)
  std::string out = "results/runs";  // --out DIR: runs go to DIR/<run id>/
};
void add_config_flags(CLI::App* app, ConfigFlags& f);

// Reads the file (if any), then applies the --set assignments.
ConfigReader load_config(const ConfigFlags& f);

// Creates DIR/<run id>/ and returns it (InputError naming DIR if it cannot).
std::filesystem::path make_run_dir(const std::string& out, const std::string& run_id);

// A RunMeta for rows of this invocation.
RunMeta make_meta(const std::string& run_id, const std::string& git_rev, const std::string& backend,
                  int64_t world, const std::string& mesh, const std::string& config_hash);

std::string human_bytes(double bytes);  // "1.50 MiB"

}  // namespace pb::cli
