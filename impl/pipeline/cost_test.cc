// Declared costs: partitioning, p2p volume (checked against the SEND actions
// of the generated schedules), tied-embedding bytes, config errors.
#include "impl/pipeline/cost.h"

#include <gtest/gtest.h>

#include "harness/status.h"
#include "impl/pipeline/test_util.h"

namespace pb::pipeline {
namespace {

std::vector<int> blocks(const Partition& p) {
  std::vector<int> out;
  for (const auto& s : p.stages) out.push_back(s.num_blocks);
  return out;
}

TEST(Partition, BalancedContiguousWithEmbeddingFirstAndHeadLast) {
  EXPECT_EQ(blocks(partition_layers(12, 4, 1)), (std::vector<int>{3, 3, 3, 3}));
  EXPECT_EQ(blocks(partition_layers(10, 4, 1)), (std::vector<int>{2, 3, 3, 2}));
  EXPECT_EQ(blocks(partition_layers(7, 2, 2)), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(blocks(partition_layers(3, 2, 1)), (std::vector<int>{2, 1}));
  for (int L = 1; L <= 30; ++L)
    for (int pp : {1, 2, 3, 4, 8})
      for (int v : {1, 2, 3}) {
        if (pp * v > L) continue;
        const Partition p = partition_layers(L, pp, v);
        ASSERT_EQ(int(p.stages.size()), pp * v);
        int next = 0, lo = L, hi = 0;
        for (const auto& s : p.stages) {
          EXPECT_EQ(s.first_block, next);
          EXPECT_EQ(s.rank, s.vstage % pp);
          EXPECT_EQ(s.chunk, s.vstage / pp);
          EXPECT_EQ(&p.at(s.rank, s.chunk), &s);
          EXPECT_EQ(s.embedding, s.vstage == 0);
          EXPECT_EQ(s.head, s.vstage == pp * v - 1);
          next += s.num_blocks;
          lo = std::min(lo, s.num_blocks);
          hi = std::max(hi, s.num_blocks);
        }
        EXPECT_EQ(next, L);
        EXPECT_LE(hi - lo, 1);
        EXPECT_EQ(p.stages.back().num_blocks, lo);  // the head's stage never gets an extra block
        EXPECT_EQ(p.at(pp - 1, v - 1).head, true);
      }
}

TEST(Partition, MoreStagesThanLayersIsAnError) {
  try {
    partition_layers(6, 4, 2);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("more stages than layers"), std::string::npos) << e.what();
  }
  EXPECT_THROW(partition_layers(4, 0, 1), InputError);
  EXPECT_THROW(partition_layers(0, 1, 1), InputError);
}

TEST(Mesh, PPMustDivideWorld) {
  EXPECT_NO_THROW(check_pipeline_mesh(8, 4));
  EXPECT_NO_THROW(check_pipeline_mesh(6, 3));
  try {
    check_pipeline_mesh(8, 3);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("pp: 3 does not divide world size 8"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(check_pipeline_mesh(8, 0), InputError);
}

TEST(P2P, MatchesTheSendsOfEveryGeneratedSchedule) {
  const int64_t a = boundary_bytes(/*B=*/4, /*T=*/64, /*C=*/32, /*dtype_bytes=*/2);
  EXPECT_EQ(a, 4 * 64 * 32 * 2);
  for (const auto& [kind, cfg] : testing::sweep()) {
    const Schedule s = make_schedule(kind, cfg);
    const P2PVolume vol = p2p_per_step(cfg, a);
    int64_t messages = 0;
    for (int r = 0; r < cfg.pp; ++r) {
      int64_t sends = 0;
      for (const Action& x : s.ranks[size_t(r)]) sends += x.op == Op::send_act || x.op == Op::send_grad;
      EXPECT_EQ(sends * a, vol.send_bytes[size_t(r)] * cfg.steps) << schedule_name(kind) << " rank " << r;
      messages += sends;
    }
    EXPECT_EQ(messages, vol.messages * cfg.steps);
    EXPECT_EQ(vol.bytes, vol.messages * a);
  }
  EXPECT_EQ(p2p_per_step({4, 8, 2}, 1).messages, 2 * 8 * 7);
}

TEST(TiedEmbedding, GradientExchangedOnlyAcrossStages) {
  EXPECT_EQ(tied_embedding_grad_bytes(50257, 768, 4, 1), 0);
  EXPECT_EQ(tied_embedding_grad_bytes(50257, 768, 4, 4), int64_t{50257} * 768 * 4);
}

TEST(DeclaredBubble, Formulas) {
  const Costs eq{};
  EXPECT_DOUBLE_EQ(*declared_bubble(ScheduleKind::one_f_one_b, {4, 8}, eq).over_ideal, 3.0 / 8);
  EXPECT_DOUBLE_EQ(*declared_bubble(ScheduleKind::gpipe, {4, 8}, eq).fraction, 3.0 / 11);
  EXPECT_DOUBLE_EQ(*declared_bubble(ScheduleKind::interleaved, {4, 8, 2}, eq).over_ideal, 3.0 / 16);
  EXPECT_DOUBLE_EQ(*declared_bubble(ScheduleKind::zb_h1, {4, 8}, eq).over_ideal, 3.0 / 24);
  EXPECT_DOUBLE_EQ(*declared_bubble(ScheduleKind::pipedream_2bw, {4, 8, 1, 4}, eq).over_ideal, 3.0 / 32);
  EXPECT_EQ(declared_bubble(ScheduleKind::gpipe, {1, 3}, eq).over_ideal, 0.0);
  EXPECT_THROW(declared_bubble(ScheduleKind::interleaved, {4, 6, 2}, eq), InputError);
  EXPECT_EQ(declared_peak_in_flight(ScheduleKind::interleaved, {4, 8, 2}), (std::vector<int>{11, 9, 7, 5}));
  EXPECT_EQ(declared_peak_in_flight(ScheduleKind::zb_h1, {4, 8}), (std::vector<int>{4, 4, 4, 4}));
  EXPECT_EQ(declared_peak_until_b(ScheduleKind::zb_h1, {4, 8}), (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(declared_peak_in_flight(ScheduleKind::gpipe, {4, 2}), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(declared_peak_in_flight(ScheduleKind::one_f_one_b, {4, 2}), (std::vector<int>{2, 2, 2, 1}));
}

}  // namespace
}  // namespace pb::pipeline
