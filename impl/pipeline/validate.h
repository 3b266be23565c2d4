// Schedule validator: rejects a malformed or deadlocking schedule before an
// executor runs it. Every problem names the rank, the action index in that
// rank's list (-1 when the problem is an action that is missing) and why.
//
// Checks, in order (a later stage runs only when the earlier ones pass, so a
// deadlock report never stems from a malformed list):
//  1. fields: microbatch in [0, m*steps), chunk in [0, v), peer a valid other
//     rank, messages only between different ranks (pp = 1 hands over locally);
//  2. compute: each (microbatch, virtual stage) has exactly one F, then exactly
//     one BW (or, split_backward, one B then one W); W after its B, B/BW after F;
//  3. data: an F of virtual stage vs > 0 is preceded on its rank by the RECV_ACT
//     of its input (pp = 1: by the F of vs - 1), a B/BW of vs < last by the
//     RECV_GRAD of its output gradient (pp = 1: the B/BW of vs + 1); every F
//     with a successor is followed by one SEND_ACT, every B/BW with a
//     predecessor by one SEND_GRAD, each naming the right peer;
//  4. matching: every SEND has exactly one RECV with the same message key on the
//     peer and vice versa, and each (src, dst, kind) channel receives in the
//     order it sends (so FIFO matching per kind is safe); with grouped sends
//     (a transport without tags) each (src, dst) channel, both kinds together;
//  5. deadlock: runs the lists with blocking receives and the given send
//     semantics; ranks that cannot finish are reported with what they wait for.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "impl/pipeline/schedule.h"

namespace pb::pipeline {

enum class SendMode : uint8_t {
  buffered,    // SEND never blocks (isend / eager): what the generators target
  rendezvous,  // SEND blocks until the peer reaches the matching RECV
  // NCCL's point-to-point (the executor's posting on every backend): each
  // posting group of a rank (schedule.h posting_groups: a run of consecutive
  // SEND/RECV actions, split where 2BW forms a new weight version) is posted
  // as one group (ncclGroupStart/End), whose sends and receives each complete only
  // when the peer has posted the other half, and the rank goes on when all of
  // the group's have; messages carry no tag, so on each (src, dst) pair the
  // n-th send matches the n-th receive, whatever their kinds.
  grouped,
};

struct Issue {
  int rank = 0;
  int index = -1;  // action index in ranks[rank]; -1: the problem is an absence
  std::string reason;
};

// "rank 1, action 5 (RECV_GRAD0.c0<-r2): <reason>"
std::string issue_str(const Schedule& s, const Issue& i);

// All problems found (empty = valid).
std::vector<Issue> find_issues(const Schedule& s, SendMode mode = SendMode::buffered);

// The schedule as an executor posts it on a transport without tags whose
// sends complete only once received (nccl; SendMode::grouped): `s` itself
// when it runs there, otherwise pair_forward_backward(s) when that does
// (among the generators: interleaved with m > pp, whose steady state crosses
// activations between neighbours and whose cool-down has each rank post a
// lone SEND_GRAD in a ring). Throws pb::InputError naming the schedule, the
// transport ("the nccl backend") and the blocked action when neither runs.
Schedule posted_without_tags(Schedule s, std::string_view transport = "a transport without tags");

// Throws pb::InputError "schedule <name>: invalid: <first issues>" unless valid.
void validate(const Schedule& s, SendMode mode = SendMode::buffered);

}  // namespace pb::pipeline
