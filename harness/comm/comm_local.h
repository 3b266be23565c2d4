// The local backend: ranks are threads of one process over shared memory.
// A Group is the state its members share: a barrier, one slot per member where
// each posts the OpDesc of the collective it entered, and one mailbox per
// member for point-to-point messages.
//
// Collective protocol (run_collective): post my OpDesc in my slot; barrier
// (everyone posted); check that all posted the same call; do my share of the
// work by reading and writing the other members' buffers directly; barrier
// (everyone done, so buffers may be reused). Work is split so that each
// element of each output is written by exactly one member, and every input
// element a member reads is written by no one during the op — hence in-place
// calls are race-free without copies (all_to_all in place is the exception:
// it goes through a staging buffer and a third barrier). Reductions of
// element i always run ((x0 + x1) + x2) + ... in rank order, whoever computes
// them, so results are reproducible bit for bit and identical on all ranks.
//
// Once the first barrier has passed, every member is inside the call and
// reads the others' descriptors and buffers, so no member may leave before
// the last barrier, not even when another rank aborts the world meanwhile:
// the barriers after the first are `committed` (they ignore the abort flag,
// keep the deadline), and nothing between them throws except the verdict of
// the mismatch check, which every member reaches together. (Found by TSan: a
// member leaving on the abort freed the stack descriptor a peer was still
// comparing.)
#pragma once
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "harness/comm/comm.h"
#include "harness/comm/comm_local_sync.h"

namespace pb::local {

struct Group;

struct Slot {
  const OpDesc* desc = nullptr;
  int color = -1, key = 0;     // split
  std::shared_ptr<Group> made;  // split: the group this member (a leader) created
};

class RecvState;

struct Message {
  int src = 0;
  int tag = 0;
  std::vector<std::byte> data;
};

struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Message> unexpected;                  // arrived before a matching recv
  std::deque<std::shared_ptr<RecvState>> posted;   // recvs waiting for a message
};

struct Group {
  Group(std::shared_ptr<WorldState> w, std::string name, std::vector<int> world_ranks);
  std::vector<int> nodes() const;

  std::shared_ptr<WorldState> world;
  std::string name;
  std::vector<int> world_ranks;
  int n;
  Rendezvous rv;
  std::vector<Slot> slots;
  std::vector<std::unique_ptr<Mailbox>> mail;
};

// Where chaos delays are drawn for one operation.
struct ChaosPoint {
  const ChaosOptions* chaos = nullptr;
  int world_rank = 0;
  uint64_t seq = 0;
};

// Member `me` of g runs collective d (every member calls with a matching d).
void run_collective(Group& g, int me, const OpDesc& d, const ChaosPoint& cp);
// Collective split of g; returns the new group (nullptr for color < 0) and my rank in it.
std::shared_ptr<Group> split_group(Group& g, int me, int color, int key, const std::string& name, int* new_rank);

}  // namespace pb::local
