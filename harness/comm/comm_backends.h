// Choosing a backend at run time: the factory the CLI and the mpi tests use.
// Library target pb::comm; which backends it holds is decided by CMake (the
// mpi and nccl parts are real or report themselves absent, see
// comm_mpi_off.cc and comm_nccl_off.cc), so no code here is conditional.
#pragma once
#include <functional>
#include <memory>

#include "harness/comm/runner.h"

namespace pb {

bool backend_built(BackendKind b);
std::unique_ptr<World> make_world(const WorldOptions& o);
// make_world + run_ranks.
void run_ranks(const WorldOptions& o, const std::function<void(Communicator&)>& fn);

// The SPMD boundary of a command: runs fn on every rank the world hosts. On
// failure prints "rank N: <error>" to stderr, ends the ranks of other
// processes (MPI_Abort under mpi/nccl; does not return there) and returns 1;
// returns 0 on success.
int run_ranks_at_boundary(World& world, const std::function<void(Communicator&)>& fn);

}  // namespace pb
