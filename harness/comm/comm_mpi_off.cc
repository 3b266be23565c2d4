// Compiled instead of comm_mpi.cc when CMake finds no MPI: the backend is
// reported absent rather than silently replaced.
#include "harness/comm/comm_mpi.h"
#include "harness/status.h"

namespace pb {

bool mpi_backend_built() { return false; }

std::unique_ptr<World> make_mpi_world(const WorldOptions&) {
  throw InputError("--backend mpi: this build has no MPI backend (CMake found no MPI); install Open MPI and "
                   "reconfigure, or use --backend local");
}

}  // namespace pb
