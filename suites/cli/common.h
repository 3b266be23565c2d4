// Helpers shared by the CLI commands: config loading with flag overrides,
// run directories, human-readable figures, child processes.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/io/config.h"
#include "harness/io/run_meta.h"
#include "harness/preflight.h"
#include "reference/trainer.h"

namespace pb::cli {

// Flags every config-driven command shares.
struct ConfigFlags {
  std::string config;              // --config FILE (optional)
  std::vector<std::string> sets;   // --set key=value (repeatable)
  std::string out = "results/runs";  // --out DIR: runs go to DIR/<run id>/
};
// A path flag given empty is refused, not taken for "the default".
const CLI::Validator& non_empty();
void add_config_flags(CLI::App* app, ConfigFlags& f);

// --max-memory and --max-ranks: the limits a command's preflight holds its
// estimate to (harness/preflight.h).
struct PreflightFlags {
  std::string max_memory;  // empty: this machine's physical memory
  int64_t max_ranks = kDefaultMaxLocalRanks;
};
void add_preflight_flags(CLI::App* app, PreflightFlags& f);
// The limits the flags give (InputError naming --max-memory for a bad size).
Limits limits_of(const PreflightFlags& f);

// One vocabulary for the run spec's options: two flags that set the same
// thing, given together, are bad input naming both as given ("--mesh dp2
// and --dp 4: both give the mesh; give one"), never one silently winning.
void refuse_together(const CLI::Option* a, const CLI::Option* b, const std::string& what);
// "--dp 4": the flag and the values it was given.
std::string as_given(const CLI::Option* o);

// Reads the file (if any), then applies the --set assignments.
ConfigReader load_config(const ConfigFlags& f);


// The files a command reads, for an output path that must be none of them
// (harness/io/output_file.h): each path, or a directory's files (one level).
std::vector<std::string> input_files(const std::vector<std::string>& paths);

// Creates DIR/<run id>/ and returns it (InputError naming DIR if it cannot).
std::filesystem::path make_run_dir(const std::string& out, const std::string& run_id);

// A RunMeta for rows of this invocation.
RunMeta make_meta(const std::string& run_id, const std::string& git_rev, const std::string& backend,
                  int64_t world, const std::string& mesh, const std::string& config_hash);

// Runs args[0] (a path, not searched in PATH) with args as its argv, no shell
// in between, and waits. Returns its exit status, or minus the signal that
// killed it. std::runtime_error if it cannot be started.
int run_child(const std::vector<std::string>& args);

// Path of the running executable (/proc/self/exe), for re-running it; falls
// back to argv0.
std::string self_executable(const std::string& argv0);

// train.device = cuda: why this build or machine cannot open a CUDA GPU (the
// CUDA runtime's reason), or "" when it can.
std::string cuda_unavailable();
// InputError "train.device: cuda: <why>" when cuda_unavailable() says why.
void require_cuda();
// CUDA GPU `ordinal` (< 0: the device the process's CUDA calls go to, which
// the nccl backend sets to the rank's GPU) as a device of the seam.
// InputError naming train.device when cuda_unavailable() says why not.
std::shared_ptr<TrainDevice> open_cuda_device(int ordinal);
// A strategy rank's GPU (a DeviceOpener, impl/spec/rank.h): the one the nccl
// backend set for its process, its index among its node's ranks. InputError
// now, before any rank starts, when there is none.
std::function<std::shared_ptr<TrainDevice>()> rank_device_opener();

// A GPU's MFU denominators at precision p: the datasheet peak of the
// built-in profile the device's name matches (table_name; 0: none,
// planner::machine_for_device), and the cuBLAS GEMM rate measured now on GPU
// `ordinal` (< 0: the one this process's CUDA calls go to; 0: no CUDA).
struct DevicePeaks {
  double table = 0, measured = 0;
  std::string table_name;
};
DevicePeaks device_peaks(Precision p, const std::string& device_name, int ordinal);

}  // namespace pb::cli
