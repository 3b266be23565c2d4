// check --reshard (cmd_reshard.cc): its flags, added to check by one call, and
// its run, which replaces the matrix when a pair is given.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace pb::cli {

struct ReshardCheckFlags {
  std::vector<std::string> pairs;  // --reshard A:B
  int at = 0;                      // --reshard-at (0: half the steps)
  std::string keep;                // --reshard-keep DIR: A's checkpoint kept there (one pair, one precision)
};

// Where check's own output flags send the resharded runs' results: rows of
// conformance.csv in OUT/<run id>/ (or RUN_DIR), and JUnit XML when named.
struct ReshardOutputs {
  std::string out, run_dir, junit, git_rev;
};

void add_reshard_check_flags(CLI::App* app, ReshardCheckFlags& f);
// Every pair at every precision; exit 1 when any fails.
int run_reshard_check(const ReshardCheckFlags& f, const std::vector<std::string>& precisions,
                      const std::string& model, int steps, const ReshardOutputs& outputs);

}  // namespace pb::cli
