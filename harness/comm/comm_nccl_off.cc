// Compiled instead of comm_nccl.cc when CMake finds no CUDA, NCCL or MPI.
#include "harness/comm/comm_nccl.h"
#include "harness/status.h"

namespace pb {

bool nccl_backend_built() { return false; }

int nccl_device_count(std::string* why) {
  if (why) *why = "this build has no nccl backend (CMake found no CUDA toolkit, NCCL or MPI)";
  return 0;
}

std::unique_ptr<World> make_nccl_world(const WorldOptions&) {
  throw InputError("--backend nccl: this build has no nccl backend (CMake found no CUDA toolkit, NCCL or MPI); "
                   "use --backend mpi or local");
}

}  // namespace pb
