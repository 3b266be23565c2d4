// Host buffers through a device backend. A backend whose buffers are device
// memory (nccl) can only hand its library pointers it reaches; the scalars and
// check vectors strategies reduce in host memory (a loss, a squared norm, the
// gathered parameters) are carried through that memory instead: the send
// range copied in before the operation, the receive range copied out after.
// The Communicator does this for every backend; on a host BufferSpace it is a
// no-op.
// Invariants:
//  - pointers the space reaches, and null ones, are passed through unchanged;
//  - send and receive ranges that overlap (in place: all_reduce's send ==
//    recv, reduce_scatter's recv inside send, all_gather's send inside recv)
//    are staged as one region, so the staged pointers keep their offset;
//  - finish() copies the receive range out once; the destructor frees.
#pragma once
#include <cstddef>
#include <vector>

#include "harness/comm/comm.h"

namespace pb {

class StagedOp {
 public:
  StagedOp(const OpDesc& d, int rank, BufferSpace& space);
  ~StagedOp();
  StagedOp(StagedOp&&) noexcept;
  StagedOp& operator=(StagedOp&&) = delete;
  StagedOp(const StagedOp&) = delete;
  StagedOp& operator=(const StagedOp&) = delete;

  // The operation on reachable pointers: the caller's own when nothing is
  // staged (not copied: a host backend's hot path pays nothing), which must
  // then outlive this object.
  const OpDesc& desc() const { return staged() ? desc_ : *given_; }
  bool staged() const { return !regions_.empty(); }
  void finish();  // copies the receive range to the caller's buffer (once)

 private:
  const OpDesc* given_ = nullptr;
  OpDesc desc_;  // set when staged; its recv is the receive range's copy
  BufferSpace* space_ = nullptr;
  std::vector<void*> regions_;  // the space's copies of the caller's ranges
  void* recv_host_ = nullptr;   // the caller's receive buffer (null: nothing to copy out)
  size_t recv_bytes_ = 0;
  void release() noexcept;
};

}  // namespace pb
