// A parabench subcommand: registered on the CLI11 app by its own file, run by
// main() when parsed. run() returns the process exit code; errors thrown as
// pb::InputError become exit 2 with the message, anything else exit 1.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace pb::cli {

// What main() read from the environment (STYLE: only main() reads it).
struct Env {
  bool under_mpirun = false;  // OMPI_COMM_WORLD_SIZE / PMI_SIZE present
  int launched_size = 1;      // mpirun's -np as the launcher tells it (1 when unknown)
  bool is_tty = false;        // stdout is a terminal (progress lines)
  std::string git_rev;        // PARABENCH_GIT_REV or the build's revision
  std::string argv0;          // path of this executable (for re-exec)
};

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

using Registry = std::vector<Command>;

// One per command file (cmd_<name>.cc).
void register_train(CLI::App& root, Registry& reg, const Env& env);
void register_export(CLI::App& root, Registry& reg, const Env& env);
void register_verify(CLI::App& root, Registry& reg, const Env& env);
void register_selftest(CLI::App& root, Registry& reg, const Env& env);
void register_calibrate(CLI::App& root, Registry& reg, const Env& env);
void register_collectives(CLI::App& root, Registry& reg, const Env& env);
void register_schedule(CLI::App& root, Registry& reg, const Env& env);
void register_plan(CLI::App& root, Registry& reg, const Env& env);
void register_report(CLI::App& root, Registry& reg, const Env& env);
void register_gate(CLI::App& root, Registry& reg, const Env& env);
void register_sweep(CLI::App& root, Registry& reg, const Env& env);
void register_check(CLI::App& root, Registry& reg, const Env& env);
void register_run(CLI::App& root, Registry& reg, const Env& env);
void register_validate(CLI::App& root, Registry& reg, const Env& env);
void register_reshard(CLI::App& root, Registry& reg, const Env& env);

}  // namespace pb::cli
