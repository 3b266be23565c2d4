// Pipeline schedules as data: for each pipeline rank, the ordered list of
// actions it runs in one optimizer step (or, for the asynchronous PipeDream-2BW,
// in a window of `steps` steps). Generators: GPipe, 1F1B (PipeDream-flush),
// interleaved 1F1B (Megatron virtual pipeline), ZB-H1 and PipeDream-2BW. The
// executor runs any Schedule; validate.h checks one; simulator.h times one.
//
// Layout: virtual stage vs = chunk * pp + rank (Megatron's interleaving), so
// virtual stage vs feeds vs + 1 on rank (vs + 1) % pp. With pp = 1 consecutive
// chunks sit on the same rank and hand tensors over locally (no SEND/RECV).
//
// Communication semantics the generators and the validator assume: SEND_* is
// non-blocking (isend; its buffer stays alive until the send completes, at the
// latest the end of the step), RECV_* blocks until the message arrives. Every
// message is identified by (kind, microbatch, receiving virtual stage); on each
// (src, dst, kind) channel, sends and receives also appear in the same order,
// so an executor may match by a unique tag or by one FIFO tag per kind.
// Under these semantics every generated schedule is deadlock-free (validated).
// Blocking (rendezvous) sends are NOT safe for 1F1B-style orders: the steady
// state crosses an activation and a gradient between neighbours (Megatron
// batches send_forward_recv_backward for this); validate(s, rendezvous) shows it.
// The executor posts each run of consecutive SEND/RECV actions as one group
// (Communicator::group_start/end), which is what NCCL needs: there a send
// completes only once received and messages carry no tag. Under those
// semantics (validate(s, grouped)) every generated schedule runs but
// interleaved with more microbatches than ranks: its steady state crosses
// activations between neighbours in separate runs and its cool-down has each
// rank post a lone SEND_GRAD in a ring. On a backend without tags the executor
// runs that one posted as Megatron does, one exchange around each F-backward
// pair (pair_forward_backward; validate.h posted_without_tags).
//
// Freeing, as early as the order allows: a (microbatch, chunk)'s stashed
// activations live from its F to its BW (split: the part only B needs is freed
// at B, the weight-matmul inputs and output gradient at W); a received
// activation is part of that stash; a received gradient lives until its B/BW;
// a sent tensor until its isend completes. Loss and the tied LM head sit on the
// last virtual stage, the embedding on the first (cost.h partition_layers).
//
// Invariants of every generated schedule: each (microbatch, virtual stage) has
// exactly one F, then either one BW or (split_backward) one B then one W; a
// RECV sits immediately before the compute that consumes it and a SEND
// immediately after the compute that produced it.
#pragma once
#include <compare>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "impl/spec/run_spec.h"  // ScheduleKind

namespace pb::pipeline {

enum class Op : uint8_t {
  forward,          // F: stage forward of one microbatch through one chunk
  backward_input,   // B: input gradient only (split backward, ZB)
  backward_weight,  // W: weight gradient only (split backward, ZB)
  backward,         // BW: full backward (B + W)
  send_act,         // SEND_ACT: F's output to the next virtual stage
  recv_act,         // RECV_ACT: this F's input from the previous virtual stage
  send_grad,        // SEND_GRAD: B's input gradient to the previous virtual stage
  recv_grad,        // RECV_GRAD: this B's output gradient from the next virtual stage
};


struct Action {
  Op op = Op::forward;
  int microbatch = 0;  // in [0, microbatches * steps); 2BW numbers across steps
  int chunk = 0;       // model chunk on this rank, in [0, virtual_stages)
  int peer = -1;       // communication only: the other rank; -1 for compute

  bool operator==(const Action&) const = default;
};

struct ScheduleConfig {
  int pp = 1;              // pipeline ranks p
  int microbatches = 1;    // m, per optimizer step
  int virtual_stages = 1;  // v, model chunks per rank (interleaved only)
  int steps = 1;           // optimizer steps in the window (2BW only; others 1)
};

struct Schedule {
  std::string name;
  int pp = 1;
  int microbatches = 1;  // per step
  int virtual_stages = 1;
  int steps = 1;
  bool split_backward = false;  // B and W instead of BW
  // PipeDream-2BW weight semantics (Narayanan et al., ICML 2021, "Memory-
  // Efficient Pipeline-Parallel DNN Training", Sec. 3.1): microbatch j belongs
  // to group k = j / m and runs its F and its backward with weight version
  // W(k) (weight_version(j)). Before the first F of group k >= 1 a rank forms
  // W(k) = W(k-1) - lr * g(k-2), g(k-2) being the gradient accumulated over
  // group k-2 (computed with W(k-2); g(-1) = 0, so W(1) = W(0)): updates every
  // m microbatches with a one-step-delayed gradient. Because m >= p, at most
  // two versions are live on a rank (W(k-1) for in-flight backwards of group
  // k-1, W(k) for new forwards); W(k-1) is freed after its group's last backward.
  bool async_weights = false;
  std::vector<std::vector<Action>> ranks;  // ranks[r] = rank r's actions, in order

  int total_microbatches() const { return microbatches * steps; }
  int num_virtual_stages() const { return pp * virtual_stages; }
  int virtual_stage(int rank, int chunk) const { return chunk * pp + rank; }
  int rank_of(int vstage) const { return vstage % pp; }
  int chunk_of(int vstage) const { return vstage / pp; }
  int weight_version(int microbatch) const { return async_weights ? microbatch / microbatches : 0; }
};

std::string_view op_name(Op op);  // "F", "B", "W", "BW", "SEND_ACT", ...
bool is_compute(Op op);
// "F3.c1", "SEND_ACT3.c0->r2": for error messages and dumps.
std::string action_str(const Action& a);

// Throws pb::InputError naming the flag and the rule when the config is not
// allowed for `kind`:
//   all:         pp >= 1, microbatches >= 1, virtual_stages >= 1, steps >= 1
//   gpipe, 1f1b: v = 1, steps = 1; any m >= 1 (m < p allowed)
//   interleaved: m % pp == 0, the rule of Megatron-LM's
//                forward_backward_pipelining_with_interleaving ("number of
//                microbatches is not divisible by pipeline-model-parallel-size
//                when using interleaved schedule"; newer Megatron-core checks
//                microbatch_group_size_per_vp_stage, default pp, which with the
//                default group size is the same rule); steps = 1
//   zb-h1:       v = 1, steps = 1, m >= pp (the handcrafted schedule's bubble
//                and memory claims assume a full steady state)
//   2bw:         v = 1, m >= pp (paper: m >= d so two weight versions suffice)
void check_config(ScheduleKind kind, const ScheduleConfig& cfg);

// Generators (call check_config first; they do).
Schedule make_schedule(ScheduleKind kind, const ScheduleConfig& cfg);
Schedule make_gpipe(const ScheduleConfig& cfg);
Schedule make_1f1b(const ScheduleConfig& cfg);
Schedule make_interleaved(const ScheduleConfig& cfg);
Schedule make_zb_h1(const ScheduleConfig& cfg);
Schedule make_2bw(const ScheduleConfig& cfg);

// Identity of the message a SEND/RECV action carries: its kind, microbatch and
// receiving virtual stage. A SEND of an activation from virtual stage vs goes
// to vs + 1, a SEND of a gradient to vs - 1; a RECV names its own stage.
struct MessageKey {
  bool grad = false;
  int microbatch = 0;
  int dst_vstage = 0;
  auto operator<=>(const MessageKey&) const = default;
};
MessageKey message_key(const Schedule& s, int rank, const Action& a);  // a: SEND/RECV
// Dense index of a message in [0, num_messages(s)): unique within the schedule,
// so usable as a tag (check the transport's tag limit).
inline int64_t num_messages(const Schedule& s) {
  return 2 * int64_t(s.num_virtual_stages()) * s.total_microbatches();
}
inline int64_t message_index(const Schedule& s, const MessageKey& k) {
  return (int64_t(k.grad) * s.num_virtual_stages() + k.dst_vstage) * s.total_microbatches() + k.microbatch;
}

// How the executor posts rank `rank`'s messages: each run of consecutive
// SEND/RECV actions is one group [first, last), except that with async
// weights (2BW) a RECV_ACT of a weight version newer than any the rank has
// met (in an F or a RECV_ACT) starts a group of its own: the executor forms
// that version before posting it, after the messages before it. In order.
std::vector<std::pair<size_t, size_t>> posting_groups(const Schedule& s, int rank);

// Megatron's step for a transport without tags whose sends complete only
// once received (nccl): wherever a rank runs an F right before a backward
// (B or BW), the backward's gradient is received before the F, with the
// messages before it, and the F's output sent after the backward, with the
// messages after it, so each F-backward pair is preceded and followed by one
// exchange (Megatron's send_forward_backward_recv_forward_backward). A
// rank's sends keep their order, and so do its receives: every channel's
// order, and so matching by order, is kept; so is the compute order. The
// executor does this only where the schedule as generated cannot run there
// (validate.h posted_without_tags).
Schedule pair_forward_backward(Schedule s);

// Inserts the SEND/RECV actions into compute-only rank lists (RECV right before
// the consuming compute, SEND right after the producing one). Exposed so tests
// and custom schedules build the same way the generators do.
void add_communication(Schedule& s);

}  // namespace pb::pipeline
