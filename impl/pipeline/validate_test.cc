// Validator teeth: each malformed schedule (a dropped F, a swapped send/recv,
// a W before its B, a deadlocking order, ...) is rejected with a message that
// names the rank, the action and the problem.
#include "impl/pipeline/validate.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "harness/status.h"

namespace pb::pipeline {
namespace {

size_t find(const std::vector<Action>& l, const Action& a) {
  auto it = std::find(l.begin(), l.end(), a);
  EXPECT_NE(it, l.end()) << action_str(a);
  return size_t(it - l.begin());
}

// All issues as text, one per line.
std::string issues(const Schedule& s, SendMode mode = SendMode::buffered) {
  std::string out;
  for (const Issue& i : find_issues(s, mode)) out += issue_str(s, i) + "\n";
  return out;
}

bool has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST(Validate, DroppedForward) {
  Schedule s = make_1f1b({/*pp=*/3, /*microbatches=*/4});
  auto& r1 = s.ranks[1];
  r1.erase(r1.begin() + long(find(r1, {Op::forward, 2, 0, -1})));
  const std::string text = issues(s);
  EXPECT_TRUE(has(text, "rank 1: microbatch 2 chunk 0 (virtual stage 1) has no F")) << text;
}

TEST(Validate, DuplicatedForward) {
  Schedule s = make_gpipe({2, 2});
  s.ranks[0].insert(s.ranks[0].begin() + 1, Action{Op::forward, 0, 0, -1});
  EXPECT_TRUE(has(issues(s), "rank 0, action 1 (F0.c0): second F of microbatch 0 chunk 0")) << issues(s);
}

TEST(Validate, SwappedSendAndRecvDeadlocks) {
  // Rank 0 waits for microbatch 0's gradient before sending its activation.
  Schedule s = make_gpipe({/*pp=*/2, /*microbatches=*/1});
  auto& r0 = s.ranks[0];
  std::swap(r0[find(r0, {Op::send_act, 0, 0, 1})], r0[find(r0, {Op::recv_grad, 0, 0, 1})]);
  const std::string text = issues(s);
  EXPECT_TRUE(has(text,
                  "rank 0, action 1 (RECV_GRAD0.c0<-r1): deadlock: blocked here, waiting for rank 1, "
                  "which is blocked at action 0 (RECV_ACT0.c0<-r0)"))
      << text;
  EXPECT_TRUE(has(text, "rank 1, action 0 (RECV_ACT0.c0<-r0): deadlock")) << text;
}

TEST(Validate, SendToTheWrongPeer) {
  Schedule s = make_1f1b({3, 2});
  auto& r1 = s.ranks[1];
  r1[find(r1, {Op::send_act, 1, 0, 2})].peer = 0;
  EXPECT_TRUE(has(issues(s), "rank 1, action 5 (SEND_ACT1.c0->r0): peer must be rank 2")) << issues(s);
}

TEST(Validate, WeightGradientBeforeItsInputGradient) {
  Schedule s = make_zb_h1({/*pp=*/2, /*microbatches=*/3});
  auto& r0 = s.ranks[0];
  const size_t b = find(r0, {Op::backward_input, 1, 0, -1}), w = find(r0, {Op::backward_weight, 1, 0, -1});
  const Action wa = r0[w];
  r0.erase(r0.begin() + long(w));
  r0.insert(r0.begin() + long(b), wa);
  EXPECT_TRUE(has(issues(s), "(W1.c0): W before its B")) << issues(s);
}

TEST(Validate, DeadlockThroughThreeRanks) {
  // Rank 1 runs microbatch 0's backward (and waits for its gradient) before
  // sending its activation on: rank 2 never gets its input, rank 0 never gets
  // its gradient. Every static check passes; only the run-through catches it.
  Schedule s = make_gpipe({/*pp=*/3, /*microbatches=*/1});
  auto& r1 = s.ranks[1];  // RA0 F0 SA0 RG0 BW0 SG0
  const Action send = r1[find(r1, {Op::send_act, 0, 0, 2})];
  r1.erase(r1.begin() + long(find(r1, send)));
  r1.insert(r1.begin() + long(find(r1, {Op::backward, 0, 0, -1})) + 1, send);
  const auto found = find_issues(s);
  ASSERT_EQ(found.size(), 3u) << issues(s);
  for (const Issue& i : found) EXPECT_TRUE(has(i.reason, "deadlock")) << i.reason;
  EXPECT_TRUE(
      has(issues(s), "rank 1, action 2 (RECV_GRAD0.c0<-r2): deadlock: blocked here, waiting for rank 2"))
      << issues(s);
}

TEST(Validate, ReceiveOrderDiffersFromSendOrder) {
  Schedule s = make_gpipe({2, 2});
  auto& r1 = s.ranks[1];  // RA0 F0 RA1 F1 ...: receive 1 before 0
  std::swap(r1[find(r1, {Op::recv_act, 0, 0, 0})], r1[find(r1, {Op::recv_act, 1, 0, 0})]);
  std::swap(r1[find(r1, {Op::forward, 0, 0, -1})], r1[find(r1, {Op::forward, 1, 0, -1})]);
  EXPECT_TRUE(has(issues(s), "rank 1, action 0 (RECV_ACT1.c0<-r0): out of order on channel r0->r1 (act)"))
      << issues(s);
}

TEST(Validate, ForwardBeforeItsInputArrives) {
  Schedule s = make_1f1b({2, 2});
  auto& r1 = s.ranks[1];
  std::swap(r1[find(r1, {Op::recv_act, 1, 0, 0})], r1[find(r1, {Op::forward, 1, 0, -1})]);
  EXPECT_TRUE(has(issues(s), "(F1.c0): F before the RECV_ACT of its input")) << issues(s);
}

TEST(Validate, MissingReceive) {
  Schedule s = make_1f1b({2, 2});
  auto& r1 = s.ranks[1];
  r1.erase(r1.begin() + long(find(r1, {Op::recv_act, 1, 0, 0})));
  EXPECT_TRUE(
      has(issues(s), "rank 1: microbatch 1 chunk 0 (virtual stage 1) has no RECV_ACT (its F's input)"))
      << issues(s);
}

TEST(Validate, BackwardKindMustMatchTheSchedule) {
  Schedule s = make_zb_h1({2, 2});
  s.split_backward = false;
  EXPECT_TRUE(has(issues(s), "B in a schedule without split backward")) << issues(s);
  Schedule t = make_1f1b({2, 2});
  t.split_backward = true;
  EXPECT_TRUE(has(issues(t), "BW in a split-backward schedule")) << issues(t);
}

TEST(Validate, FieldsOutOfRange) {
  Schedule s = make_1f1b({2, 2});
  s.ranks[0][0].microbatch = 7;
  EXPECT_TRUE(has(issues(s), "rank 0, action 0 (F7.c0): microbatch out of range [0, 2)")) << issues(s);
  Schedule t = make_1f1b({1, 2});
  t.ranks[0].insert(t.ranks[0].begin() + 1, Action{Op::send_act, 0, 0, 0});
  EXPECT_TRUE(has(issues(t), "communication with pp = 1")) << issues(t);
}

TEST(Validate, LocalHandOverOrderWithOneRank) {
  Schedule s = make_interleaved({/*pp=*/1, /*microbatches=*/2, /*virtual_stages=*/2});
  ASSERT_TRUE(find_issues(s).empty());
  auto& r0 = s.ranks[0];
  std::swap(r0[find(r0, {Op::forward, 0, 0, -1})], r0[find(r0, {Op::forward, 0, 1, -1})]);
  EXPECT_TRUE(has(issues(s), "F before the F of virtual stage 0 that feeds it")) << issues(s);
}

TEST(Validate, OneFOneBNeedsNonBlockingSends) {
  // The 1F1B steady state crosses an activation and a gradient between two
  // ranks; with rendezvous sends both block (why Megatron batches
  // send_forward_recv_backward). The generators target buffered sends.
  const Schedule s = make_1f1b({2, 4});
  EXPECT_TRUE(find_issues(s, SendMode::buffered).empty());
  EXPECT_TRUE(has(issues(s, SendMode::rendezvous), "deadlock")) << issues(s, SendMode::rendezvous);
  EXPECT_TRUE(find_issues(make_gpipe({3, 4}), SendMode::rendezvous).empty());
}

TEST(Validate, GroupedPostingRunsEveryGeneratedScheduleWithoutTags) {
  // NCCL: consecutive SEND/RECV actions posted as one group, rendezvous
  // completion, matching in order per rank pair (the executor posts runs as
  // groups on every backend). Every generated schedule runs under it as
  // generated but the interleaved one with more microbatches than ranks: its
  // steady state crosses activations in separate runs and its cool-down has
  // each rank post a lone SEND_GRAD to the next in a ring. Posted as Megatron
  // posts it (one exchange around each F-backward pair) it runs too, and
  // posted_without_tags picks that; every other schedule it leaves as it is.
  int checked = 0, paired = 0;
  for (const ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved,
                                  ScheduleKind::zb_h1, ScheduleKind::pipedream_2bw})
    for (int pp = 1; pp <= 5; ++pp)
      for (int m = 1; m <= 9; ++m)
        for (int v = 1; v <= 3; ++v) {
          const ScheduleConfig c{pp, m, v, kind == ScheduleKind::pipedream_2bw ? 2 : 1};
          try {
            check_config(kind, c);
          } catch (const InputError&) {
            continue;
          }
          const Schedule s = make_schedule(kind, c);
          const std::string text = issues(s, SendMode::grouped);
          const Schedule posted = posted_without_tags(s);
          const std::string where = s.name + " pp" + std::to_string(pp) + " m" + std::to_string(m) + " v" + std::to_string(v);
          EXPECT_EQ(issues(posted, SendMode::grouped), "") << where;
          EXPECT_EQ(issues(posted), "") << where;  // and with tags
          if (kind == ScheduleKind::interleaved && m > pp && pp > 1 && v > 1) {
            EXPECT_TRUE(has(text, "deadlock")) << where;
            EXPECT_TRUE(posted.ranks == pair_forward_backward(s).ranks) << where;
            ++paired;
          } else {
            EXPECT_EQ(text, "") << where;
            EXPECT_TRUE(posted.ranks == s.ranks) << where << ": changed though it runs as generated";
            ++checked;
          }
        }
  EXPECT_GT(checked, 100);
  EXPECT_EQ(paired, 12);
  // Interleaved to pp 8, m 24, v 4: every configuration runs as posted.
  int larger = 0;
  for (int pp = 2; pp <= 8; ++pp)
    for (int m = pp; m <= 24; m += pp)
      for (int v = 2; v <= 4; ++v) {
        const Schedule s = make_interleaved({pp, m, v});
        const Schedule posted = posted_without_tags(s);
        EXPECT_EQ(issues(posted, SendMode::grouped), "") << s.name << " pp" << pp << " m" << m << " v" << v;
        larger += posted.ranks != s.ranks;
      }
  EXPECT_EQ(larger, 99);  // exactly those with m > pp
}

TEST(Validate, GroupedPostingCompletesRunsTogetherAndFindsWhatCannot) {
  // One run posts both halves at once: rank 0 receiving its gradient before
  // sending its activation, in the same run, deadlocks buffered sends only.
  Schedule s = make_gpipe({/*pp=*/2, /*microbatches=*/1});
  auto& r0 = s.ranks[0];
  std::swap(r0[find(r0, {Op::send_act, 0, 0, 1})], r0[find(r0, {Op::recv_grad, 0, 0, 1})]);
  EXPECT_TRUE(has(issues(s), "deadlock")) << issues(s);
  EXPECT_EQ(issues(s, SendMode::grouped), "");
  // Apart (a compute between them) it deadlocks grouped too, and says what waits for what.
  Schedule t = make_gpipe({2, 2});
  auto& t0 = t.ranks[0];
  const Action rg = t0[find(t0, {Op::recv_grad, 0, 0, 1})];
  t0.erase(t0.begin() + long(find(t0, rg)));
  t0.insert(t0.begin() + 1, rg);  // F0, RECV_GRAD0, SEND_ACT0, F1, ...
  t0.erase(t0.begin() + long(find(t0, {Op::send_act, 0, 0, 1})));
  t0.insert(t0.begin() + long(find(t0, {Op::forward, 1, 0, -1})) + 1, Action{Op::send_act, 0, 0, 1});
  const std::string text = issues(t, SendMode::grouped);
  EXPECT_TRUE(has(text, "rank 0, action 1 (RECV_GRAD0.c0<-r1): deadlock: blocked here, waiting for rank 1, "
                        "which is blocked at action 0 (RECV_ACT0.c0<-r0)"))
      << text;
  // Pairing each F with its backward does not save it: refused, naming the transport and the blocked action.
  try {
    posted_without_tags(t, "the nccl backend");
    ADD_FAILURE() << "a deadlocking schedule was posted";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "schedule: gpipe cannot run on the nccl backend (messages match in order")) << e.what();
    EXPECT_TRUE(has(e.what(), "rank 0, action 1 (RECV_GRAD0.c0<-r1): deadlock")) << e.what();
  }
  // 1F1B's steady state crosses messages in runs of two: grouped runs it, rendezvous does not.
  EXPECT_EQ(issues(make_1f1b({2, 4}), SendMode::grouped), "");

  // Without tags, a pair's messages match in order across kinds: interleaved
  // at pp = 2 sends activations and gradients from rank 0 to rank 1.
  // Rank 1 takes a gradient from rank 0 before an activation rank 0 sent
  // first: tags match them (buffered: valid), order alone does not.
  const Schedule base = make_interleaved({2, 2, 2});
  Schedule u;
  bool found = false;
  const auto& l1 = base.ranks[1];
  for (size_t g = 0; g < l1.size() && !found; ++g) {
    if (l1[g].op != Op::recv_grad || l1[g].peer != 0) continue;
    for (size_t a = 0; a < g && !found; ++a) {
      if (l1[a].op != Op::recv_act || l1[a].peer != 0) continue;
      u = base;
      auto& r = u.ranks[1];
      const Action moved = r[g];
      r.erase(r.begin() + long(g));
      r.insert(r.begin() + long(a), moved);
      found = find_issues(u, SendMode::buffered).empty();
    }
  }
  ASSERT_TRUE(found);
  EXPECT_TRUE(has(issues(u, SendMode::grouped), "(untagged)")) << issues(u, SendMode::grouped);
}

TEST(Validate, ThrowsInputErrorNamingTheSchedule) {
  Schedule s = make_zb_h1({2, 2});
  s.ranks[1].pop_back();
  try {
    validate(s);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "schedule zb-h1: invalid:\n  rank 1")) << e.what();
  }
  EXPECT_NO_THROW(validate(make_zb_h1({2, 2})));
}

}  // namespace
}  // namespace pb::pipeline
