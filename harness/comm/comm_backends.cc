// Backend factory over the three make_*_world functions.
#include "harness/comm/comm_backends.h"

#include <cstdio>

#include "harness/comm/comm_mpi.h"
#include "harness/comm/comm_nccl.h"
#include "harness/status.h"

namespace pb {

bool backend_built(BackendKind b) {
  switch (b) {
    case BackendKind::local: return true;
    case BackendKind::mpi: return mpi_backend_built();
    case BackendKind::nccl: return nccl_backend_built();
  }
  return false;
}

std::unique_ptr<World> make_world(const WorldOptions& o) {
  switch (o.backend) {
    case BackendKind::local: return make_local_world(o);
    case BackendKind::mpi: return make_mpi_world(o);
    case BackendKind::nccl: return make_nccl_world(o);
  }
  throw InputError("backend: unknown");
}

void run_ranks(const WorldOptions& o, const std::function<void(Communicator&)>& fn) {
  auto world = make_world(o);
  run_ranks(*world, fn);
}

int run_ranks_at_boundary(World& world, const std::function<void(Communicator&)>& fn) {
  try {
    run_ranks(world, fn);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::fflush(stderr);
    world.terminate(1);
    return 1;
  }
}

}  // namespace pb
