// The mpi backend (Open MPI, one rank per process), seen from code that must
// not depend on MPI: a factory. Built into pb::harness_mpi when CMake finds
// MPI; otherwise comm_mpi_off.cc defines these to report that it is absent.
//
// Under the factory: MPI is initialized with MPI_THREAD_MULTIPLE (by the world,
// which then finalizes it; an MPI already initialized with less is an error).
// Blocking calls are the blocking MPI collectives, so they cost what MPI
// costs; non-blocking calls are MPI_I* requests, progressed while the caller
// computes by a per-communicator thread that polls MPI_Iprobe (which runs
// Open MPI's progress engine, libnbc schedules included) while requests are
// outstanding. bf16 reductions convert to fp32, reduce, and round once.
// A call blocked longer than timeout_s makes a watchdog print
// "rank N: timed out ..." and MPI_Abort the job: a thread stuck inside MPI
// cannot be interrupted any other way. Communicators must be destroyed before
// their world (which finalizes MPI).
#pragma once
#include <memory>

#include "harness/comm/runner.h"

namespace pb {

bool mpi_backend_built();
std::unique_ptr<World> make_mpi_world(const WorldOptions& o);

}  // namespace pb
