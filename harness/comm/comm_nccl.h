// The nccl backend (one GPU per rank, one rank per process, bootstrapped over
// the mpi backend), seen from code that must not depend on CUDA: a factory.
// Built into pb::harness_nccl when CMake finds CUDA, NCCL and MPI; otherwise
// comm_nccl_off.cc reports it absent.
//
// Buffers are device memory (Communicator::buffers() allocates and copies);
// host buffers given to an operation are staged through it (staging.h), so a
// strategy's host scalars reduce here too. Every operation waits for the
// stream given to order_after (the rank's compute stream) through an event,
// then is enqueued on the communicator's own CUDA stream; blocking
// calls then wait for the stream, non-blocking ones record an event to wait
// on, so overlap with the caller is real. Waits poll with the world's
// timeout and abort the NCCL communicator when it expires. Differences from
// the local backend, from NCCL itself: bf16 reductions use NCCL's bf16
// arithmetic (rounded per step, not fp32-accumulated once); all_to_all and
// sendrecv cannot run in place; reduction order is NCCL's (ring/tree).
#pragma once
#include <memory>
#include <string>

#include "harness/comm/runner.h"

namespace pb {

bool nccl_backend_built();
// CUDA devices visible to this process; 0 with the reason in *why otherwise.
int nccl_device_count(std::string* why);
std::unique_ptr<World> make_nccl_world(const WorldOptions& o);

}  // namespace pb
