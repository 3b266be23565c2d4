// check --determinism (cmd_determinism.cc): the determinism matrix of
// docs/numerics.md#determinism, run instead of the conformance matrix.
#pragma once
#include <string>
#include <vector>

#include "suites/cli/command.h"

namespace pb::cli {

// Every pair at every precision, on the local backend (or, under mpirun, the
// local-vs-mpi pairs); exit 1 when a claim does not hold.
int run_determinism_check(const std::vector<std::string>& precisions, int steps, const std::string& backend,
                          const Env& env);

}  // namespace pb::cli
