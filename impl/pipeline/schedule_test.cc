// Generators: every allowed config validates and has the right shape; the
// orders match hand-written tables from the papers for small cases; rejected
// configs say why.
#include "impl/pipeline/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <map>

#include "harness/status.h"
#include "impl/pipeline/test_util.h"
#include "impl/pipeline/validate.h"

namespace pb::pipeline {
namespace {

std::string compute_order(const Schedule& s, int rank) {
  std::string out;
  for (const Action& a : s.ranks[size_t(rank)])
    if (is_compute(a.op))
      out += std::string(op_name(a.op)) + std::to_string(a.microbatch) +
             (s.virtual_stages > 1 ? "." + std::to_string(a.chunk) : "") + " ";
  return out;
}

TEST(Schedule, EveryAllowedConfigValidatesAndCoversEveryMicrobatch) {
  const auto cases = testing::sweep();
  std::map<ScheduleKind, int> per_kind;
  for (const auto& [kind, cfg] : cases) {
    SCOPED_TRACE(std::string(schedule_name(kind)) + " pp=" + std::to_string(cfg.pp) +
                 " m=" + std::to_string(cfg.microbatches) + " v=" + std::to_string(cfg.virtual_stages) +
                 " steps=" + std::to_string(cfg.steps));
    const Schedule s = make_schedule(kind, cfg);
    const auto issues = find_issues(s);
    ASSERT_TRUE(issues.empty()) << issue_str(s, issues.front());
    EXPECT_EQ(s.name, schedule_name(kind));
    EXPECT_EQ(int(s.ranks.size()), cfg.pp);
    EXPECT_EQ(s.split_backward, kind == ScheduleKind::zb_h1);
    EXPECT_EQ(s.async_weights, kind == ScheduleKind::pipedream_2bw);
    for (const auto& list : s.ranks) {
      int f = 0;
      for (const Action& a : list) f += a.op == Op::forward;
      EXPECT_EQ(f, cfg.microbatches * cfg.steps * cfg.virtual_stages);
    }
    ++per_kind[kind];
  }
  for (ScheduleKind k : testing::kAllKinds) EXPECT_GT(per_kind[k], 20) << schedule_name(k);
}

TEST(Schedule, OneFOneBMatchesPipeDreamFlushTable) {
  const Schedule s = make_1f1b({/*pp=*/4, /*microbatches=*/6});
  EXPECT_EQ(compute_order(s, 0), "F0 F1 F2 F3 BW0 F4 BW1 F5 BW2 BW3 BW4 BW5 ");
  EXPECT_EQ(compute_order(s, 3), "F0 BW0 F1 BW1 F2 BW2 F3 BW3 F4 BW4 F5 BW5 ");
  // Communication sits right beside its compute.
  const auto& r1 = s.ranks[1];
  ASSERT_GE(r1.size(), 3u);
  EXPECT_EQ(r1[0], (Action{Op::recv_act, 0, 0, 0}));
  EXPECT_EQ(r1[1], (Action{Op::forward, 0, 0, -1}));
  EXPECT_EQ(r1[2], (Action{Op::send_act, 0, 0, 2}));
}

TEST(Schedule, FewerMicrobatchesThanStagesAllowedForGPipeAnd1F1B) {
  for (auto k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
    const Schedule s = make_schedule(k, {/*pp=*/4, /*microbatches=*/2});
    EXPECT_TRUE(find_issues(s).empty());
  }
  EXPECT_EQ(compute_order(make_1f1b({4, 2}), 0), "F0 F1 BW0 BW1 ");
}

TEST(Schedule, GPipeRunsAllForwardsFirst) {
  EXPECT_EQ(compute_order(make_gpipe({2, 3}), 1), "F0 F1 F2 BW0 BW1 BW2 ");
}

TEST(Schedule, InterleavedFollowsMegatronTable) {
  // pp=2, v=2, m=4: forward table (mb.chunk) 0.0 1.0 0.1 1.1 2.0 3.0 2.1 3.1;
  // rank 0 warms up 2(p-1) + (v-1)p = 4, rank 1 warms up 2.
  const Schedule s = make_interleaved({/*pp=*/2, /*microbatches=*/4, /*virtual_stages=*/2});
  EXPECT_EQ(compute_order(s, 0),
            "F0.0 F1.0 F0.1 F1.1 F2.0 BW0.1 F3.0 BW1.1 F2.1 BW0.0 F3.1 BW1.0 "
            "BW2.1 BW3.1 BW2.0 BW3.0 ");
  EXPECT_EQ(compute_order(s, 1),
            "F0.0 F1.0 F0.1 BW0.1 F1.1 BW1.1 F2.0 BW0.0 F3.0 BW1.0 F2.1 BW2.1 "
            "F3.1 BW3.1 BW2.0 BW3.0 ");
  // The last rank's chunk 0 feeds rank 0's chunk 1.
  bool found = false;
  for (const Action& a : s.ranks[1]) found |= a == Action{Op::send_act, 0, 0, 0};
  EXPECT_TRUE(found);
}

TEST(Schedule, InterleavedWithOneChunkIs1F1B) {
  const Schedule a = make_interleaved({4, 8, 1}), b = make_1f1b({4, 8});
  EXPECT_EQ(a.ranks, b.ranks);
  EXPECT_EQ(a.name, "interleaved");
}

TEST(Schedule, ZBH1DefersWeightGradientsByRank) {
  const Schedule s = make_zb_h1({/*pp=*/3, /*microbatches=*/4});
  EXPECT_EQ(compute_order(s, 0), "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3 ");
  EXPECT_EQ(compute_order(s, 2), "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3 ");
}

TEST(Schedule, TwoBWSpansStepsWithoutFlushAndVersionsWeights) {
  const Schedule s = make_2bw({/*pp=*/2, /*microbatches=*/2, /*virtual_stages=*/1, /*steps=*/2});
  EXPECT_EQ(compute_order(s, 0), "F0 F1 BW0 F2 BW1 F3 BW2 BW3 ");
  EXPECT_EQ(s.total_microbatches(), 4);
  EXPECT_EQ(s.weight_version(1), 0);
  EXPECT_EQ(s.weight_version(2), 1);
  EXPECT_EQ(make_1f1b({2, 2}).weight_version(1), 0);
}

TEST(Schedule, RejectedConfigsNameTheRule) {
  auto msg = [](ScheduleKind k, ScheduleConfig c) {
    try {
      make_schedule(k, c);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg(ScheduleKind::one_f_one_b, {0, 4}).find("--pp: must be >= 1"), std::string::npos);
  EXPECT_NE(msg(ScheduleKind::gpipe, {2, 0}).find("--microbatches: must be >= 1"), std::string::npos);
  EXPECT_NE(msg(ScheduleKind::interleaved, {4, 6, 2}).find("divisible by pp"), std::string::npos);
  EXPECT_NE(msg(ScheduleKind::interleaved, {4, 8, 0}).find("--virtual-stages"), std::string::npos);
  EXPECT_NE(msg(ScheduleKind::one_f_one_b, {4, 8, 2}).find("use interleaved"), std::string::npos);
  EXPECT_NE(msg(ScheduleKind::zb_h1, {4, 3}).find("microbatches >= pp"), std::string::npos);
  EXPECT_NE(msg(ScheduleKind::pipedream_2bw, {4, 2}).find("microbatches >= pp"), std::string::npos);
  EXPECT_NE(msg(ScheduleKind::gpipe, {2, 2, 1, 2}).find("--steps"), std::string::npos);
  EXPECT_THROW(parse_schedule_kind("foo"), InputError);
  EXPECT_EQ(parse_schedule_kind("zb-h1"), ScheduleKind::zb_h1);
  // Every rejected config of the sweep breaks one of the documented rules.
  for (const auto& [k, c] : testing::sweep(/*allowed=*/false)) {
    const bool interleaved_rule = k == ScheduleKind::interleaved && c.microbatches % c.pp != 0;
    const bool chunk_rule = k != ScheduleKind::interleaved && c.virtual_stages != 1;
    const bool steps_rule = k != ScheduleKind::pipedream_2bw && c.steps != 1;
    const bool full_rule =
        (k == ScheduleKind::zb_h1 || k == ScheduleKind::pipedream_2bw) && c.microbatches < c.pp;
    EXPECT_TRUE(interleaved_rule || chunk_rule || steps_rule || full_rule) << schedule_name(k);
  }
}

TEST(Schedule, MessageIndexIsDenseAndUniquePerDirection) {
  const Schedule s = make_interleaved({/*pp=*/3, /*microbatches=*/6, /*virtual_stages=*/3});
  std::vector<int> sends(size_t(num_messages(s)), 0), recvs(size_t(num_messages(s)), 0);
  for (int r = 0; r < s.pp; ++r)
    for (const Action& a : s.ranks[size_t(r)]) {
      if (is_compute(a.op)) continue;
      const int64_t id = message_index(s, message_key(s, r, a));
      ASSERT_GE(id, 0);
      ASSERT_LT(id, num_messages(s));
      ++(a.op == Op::send_act || a.op == Op::send_grad ? sends : recvs)[size_t(id)];
    }
  // Every boundary but the 2 ends of the 9 virtual stages, both directions: 2 * 8 * 6 messages.
  EXPECT_EQ(std::count(sends.begin(), sends.end(), 1), 2 * 8 * 6);
  EXPECT_EQ(sends, recvs);
}

TEST(Schedule, AddCommunicationRefusesAListThatAlreadyCommunicates) {
  Schedule s = make_1f1b({2, 2});
  EXPECT_THROW(add_communication(s), InputError);
}

// The executor's posting groups cover every message in order and no compute;
// they are the maximal runs of messages, except that 2BW starts a group at
// the first RECV_ACT of a newer weight version (formed before it is posted).
TEST(Schedule, PostingGroupsAreTheRunsSplitWhere2BWFormsAVersion) {
  int splits = 0;
  for (const ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved,
                                  ScheduleKind::zb_h1, ScheduleKind::pipedream_2bw})
    for (int pp = 2; pp <= 4; ++pp)
      for (int m = pp; m <= 2 * pp; m += pp) {
        const ScheduleConfig c{pp, m, kind == ScheduleKind::interleaved ? 2 : 1,
                               kind == ScheduleKind::pipedream_2bw ? 3 : 1};
        const Schedule s = make_schedule(kind, c);
        for (int r = 0; r < pp; ++r) {
          const auto& list = s.ranks[size_t(r)];
          size_t next = 0;
          for (const auto& [first, last] : posting_groups(s, r)) {
            while (next < first) EXPECT_TRUE(is_compute(list[next++].op)) << s.name << " rank " << r;
            ASSERT_LT(first, last);
            for (size_t i = first; i < last; ++i) EXPECT_FALSE(is_compute(list[i].op));
            next = last;
            const bool run_ends = last == list.size() || is_compute(list[last].op);
            if (kind != ScheduleKind::pipedream_2bw) {
              EXPECT_TRUE(run_ends) << s.name << " rank " << r << ": a run split at " << last;
            } else if (!run_ends) {
              ++splits;
              EXPECT_EQ(list[last].op, Op::recv_act);
              EXPECT_GT(s.weight_version(list[last].microbatch), s.weight_version(list[first].microbatch));
            }
          }
          while (next < list.size()) EXPECT_TRUE(is_compute(list[next++].op));
        }
      }
  EXPECT_GT(splits, 0) << "2BW: a gradient sent and the next version's activation received back to back";
}

// Megatron's exchange around each F-backward pair: the compute keeps its
// order, and so do a rank's sends and its receives (so every channel, tagged
// or not, matches as before); between an F and the backward right after it
// there is no message; a message only moves away from the compute that
// produces or consumes it (a receive earlier, a send later).
TEST(Schedule, PairingForwardAndBackwardKeepsEveryOrderAndEmptiesThePairs) {
  auto only = [](const std::vector<Action>& l, auto keep) {
    std::vector<Action> out;
    std::copy_if(l.begin(), l.end(), std::back_inserter(out), keep);
    return out;
  };
  auto compute = [](const Action& a) { return is_compute(a.op); };
  auto sends = [](const Action& a) { return a.op == Op::send_act || a.op == Op::send_grad; };
  auto recvs = [](const Action& a) { return a.op == Op::recv_act || a.op == Op::recv_grad; };
  int pairs = 0, moved = 0;
  for (const ScheduleKind kind : {ScheduleKind::one_f_one_b, ScheduleKind::interleaved})
    for (int pp = 2; pp <= 4; ++pp)
      for (int m = pp; m <= 3 * pp; m += pp) {
        const Schedule s = make_schedule(kind, {pp, m, kind == ScheduleKind::interleaved ? 3 : 1, 1});
        const Schedule t = pair_forward_backward(s);
        ASSERT_EQ(t.ranks.size(), s.ranks.size());
        for (size_t r = 0; r < s.ranks.size(); ++r) {
          const auto &a = s.ranks[r], &b = t.ranks[r];
          ASSERT_EQ(a.size(), b.size());
          EXPECT_EQ(only(a, compute), only(b, compute)) << s.name << " rank " << r;
          EXPECT_EQ(only(a, sends), only(b, sends)) << s.name << " rank " << r;
          EXPECT_EQ(only(a, recvs), only(b, recvs)) << s.name << " rank " << r;
          // Where each message sits: the number of computes before it.
          auto computes_before = [](const std::vector<Action>& l) {
            std::map<std::pair<Op, std::pair<int, int>>, int> at;
            int n = 0;
            for (const Action& x : l) {
              if (is_compute(x.op)) ++n;
              else at[{x.op, {x.microbatch, x.chunk}}] = n;
            }
            return at;
          };
          const auto before = computes_before(a), after = computes_before(b);
          for (const auto& [key, n] : before) {
            const int now = after.at(key);
            if (key.first == Op::send_act || key.first == Op::send_grad) {
              EXPECT_GE(now, n);
            } else {
              EXPECT_LE(now, n);
            }
            moved += now != n;
          }
          for (size_t i = 0; i + 1 < b.size(); ++i)
            if (b[i].op == Op::forward && (b[i + 1].op == Op::backward)) ++pairs;
          for (size_t i = 0; i < b.size(); ++i) {
            if (b[i].op != Op::forward) continue;
            size_t j = i + 1;
            while (j < b.size() && !is_compute(b[j].op)) ++j;
            if (j < b.size() && b[j].op == Op::backward) {
              EXPECT_EQ(j, i + 1) << s.name << " rank " << r << " at " << i;
            }
          }
        }
        // Where the executor pairs (interleaved, m > pp) it is valid with tags
        // too. Not everywhere: at m = pp, v = 3 a gradient received before an
        // F waits for a neighbour that first needs that F's activation.
        if (m > pp) {
          EXPECT_EQ(find_issues(t).size(), 0u) << s.name << " pp" << pp << " m" << m;
        }
      }
  EXPECT_GT(pairs, 0);
  EXPECT_GT(moved, 0);
}

}  // namespace
}  // namespace pb::pipeline
