// What a pipeline rank holds: pieces cover every parameter exactly once (plus
// the last rank's tied wte), norm ranges count wte once, activation bytes
// match what reference/gpt.cc allocates, and the peak of live bytes follows
// the schedule's in-flight counts.
#include "impl/pipeline/stage.h"

#include <gtest/gtest.h>

#include "harness/memory.h"
#include "reference/gpt.h"

namespace pb::pipeline {
namespace {

TEST(Stage, PiecesCoverTheModelOnceAndTheTiedCopyIsMarked) {
  ModelConfig m = named_model("tiny");
  m.L = 6;
  const ParamLayout l(m);
  for (int pp : {1, 2, 3}) {
    for (int v : {1, 2}) {
      if (pp * v > m.L) continue;
      const Partition part = partition_layers(m.L, pp, v);
      std::vector<int> seen(size_t(l.total()), 0);
      int64_t norm_elems = 0;
      for (int r = 0; r < pp; ++r) {
        const StagePieces sp = stage_pieces(l, part, r);
        for (const Piece& p : sp.pieces) {
          EXPECT_EQ(p.tied, pp > 1 && r == pp - 1 && p.flat_lo == 0 && p.flat_hi == int64_t(m.V) * m.C);
          if (!p.tied)
            for (int64_t i = p.flat_lo; i < p.flat_hi; ++i) ++seen[size_t(i)];
        }
        for (auto [b, e] : norm_ranges(sp, 0, sp.size)) norm_elems += e - b;
        if (r == pp - 1) {  // the LM head reads the tied copy, the last piece, when pp > 1
          EXPECT_EQ(sp.head_wte_local(), pp > 1 ? sp.size - int64_t(m.V) * m.C : sp.local(0));
        }
        if (r == 0) {
          EXPECT_EQ(sp.local(0), 0);
        } else if (r != pp - 1) {
          EXPECT_THROW(sp.local(0), std::logic_error);
        }
      }
      for (int x : seen) ASSERT_EQ(x, 1);
      EXPECT_EQ(norm_elems, l.total());
    }
  }
}

TEST(Stage, ActivationBytesMatchTheReferenceAllocations) {
  const ModelConfig m = named_model("tiny");
  const int B = 2, T = 8;
  MemoryTracker mt;
  {
    BlockActs<float> a(&mt, m, B, T);
    BlockGradStash<float> g(&mt, m, B, T);
    HeadActs<float> h(&mt, m, B, T);
    Buffer<float> x(&mt, MemTag::activations, size_t(B) * T * m.C);
    Buffer<int32_t> tok(&mt, MemTag::activations, size_t(B) * T), tgt(&mt, MemTag::activations, size_t(B) * T);
    StageSlice st{0, 0, 0, 0, 1, true, true};
    EXPECT_EQ(int64_t(mt.current(MemTag::activations)), chunk_activation_bytes(m, st, B, T, 4, 4, true));
  }
  BlockActs<bf16> a(&mt, m, B, T);
  Buffer<bf16> x(&mt, MemTag::activations, size_t(B) * T * m.C);
  StageSlice mid{1, 0, 1, 1, 1, false, false};
  EXPECT_EQ(int64_t(mt.current(MemTag::activations)), chunk_activation_bytes(m, mid, B, T, 2, 4, false));
}

// Mixture of experts: block units stop before the experts, and the stage's
// expert units over ep ranks cover every expert of its MoE blocks once.
TEST(Stage, MoeBlocksSplitIntoDenseUnitsAndTheStageExperts) {
  ModelConfig m = named_model("tiny-moe");
  m.L = 6;  // MoE every second block: 0, 2, 4
  const ParamLayout l(m);
  const MoeOffsets& o = l.moe_block();
  for (int pp : {1, 2, 3})
    for (int ep : {1, 2, 4}) {
      const Partition part = partition_layers(m.L, pp, 1);
      std::vector<int> seen(size_t(l.total()), 0);
      for (int r = 0; r < pp; ++r) {
        const StageUnits su = stage_units(l, part, r);
        for (const auto& u : su.units)
          if (u.in_norm)
            for (int64_t i = u.flat_lo; i < u.flat_lo + u.size; ++i) ++seen[size_t(i)];
        for (int e = 0; e < ep; ++e) {
          const StageExperts se = stage_experts(l, part, r, ep, e);
          int moe_blocks = 0;
          for (int b = 0; b < part.at(r, 0).num_blocks; ++b) {
            const int layer = part.at(r, 0).first_block + b;
            EXPECT_EQ(se.of_layer[size_t(layer)] >= 0, m.is_moe(layer));
            moe_blocks += m.is_moe(layer);
          }
          ASSERT_EQ(int(se.units.size()), moe_blocks);
          for (const auto& u : se.units) {
            EXPECT_EQ(u.size, int64_t(m.moe.experts / ep) * o.expert_size);
            for (int64_t i = u.flat_lo; i < u.flat_lo + u.size; ++i) ++seen[size_t(i)];
          }
        }
      }
      for (int x : seen) ASSERT_EQ(x, 1) << "pp" << pp << " ep" << ep;
    }
}

TEST(Stage, MoeActivationAndWorkspaceBytesMatchTheAllocations) {
  ModelConfig m = named_model("tiny-moe");
  m.L = 4;
  const int B = 2, T = 8, N = B * T;
  for (int ep : {1, 2})
    for (int64_t scope : {int64_t(0), int64_t(2 * N)}) {
      MemoryTracker mt;
      BlockActs<float> a0(&mt, m, B, T, false), a1(&mt, m, B, T, true);  // blocks 0 (MoE) and 1
      MoeActs<float> ma(&mt, m, N, scope, ep);
      Buffer<float> x(&mt, MemTag::activations, size_t(N) * m.C);
      Buffer<int32_t> tok(&mt, MemTag::activations, size_t(N));
      StageSlice st{0, 0, 0, 0, 2, true, false};
      EXPECT_EQ(int64_t(mt.current(MemTag::activations)),
                chunk_activation_bytes(m, st, B, T, 4, 4, false, {scope, ep}))
          << "ep" << ep << " scope " << scope;
      MemoryTracker wt;
      Scratch<float> s(&wt, m, B, T);
      MoeScratch<float> ms(&wt, m, N, scope, ep);
      Buffer<float> dx(&wt, MemTag::workspace, 2 * size_t(N) * m.C);
      Buffer<int32_t> tt(&wt, MemTag::workspace, 2 * size_t(N));
      EXPECT_EQ(int64_t(wt.current(MemTag::workspace)),
                stage_workspace_bytes(m, B, T, Precision::fp32, tp::TpOptions{}, {scope, ep}));
    }
}

// The comm-buffer replay's peak stops growing with the microbatches at
// comm_peak_microbatches (the planner replays at most that many): checked to
// three times past it, every schedule, every data-parallel family.
TEST(Stage, CommPeakStopsGrowingPastTheBound) {
  const ModelConfig m = named_model("tiny");
  const ParamLayout l(m);
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved,
                            ScheduleKind::zb_h1, ScheduleKind::pipedream_2bw})
    for (dp::Shard shard : {dp::Shard::none, dp::Shard::zero1, dp::Shard::zero2, dp::Shard::zero3, dp::Shard::hzero}) {
      const int pp = 2, v = kind == ScheduleKind::interleaved ? 2 : 1;
      const Partition part = partition_layers(m.L * v, pp, v);
      const ModelConfig deep = [&] {
        ModelConfig d = m;
        d.L = m.L * v;
        return d;
      }();
      const ParamLayout dl(deep);
      for (int rank = 0; rank < pp; ++rank) {
        StageCommShape x;
        x.units = stage_units(dl, part, rank);
        x.dense.dp = 4;
        x.dense.shard = shard;
        x.dense.ranks_per_node = shard == dp::Shard::hzero ? 2 : 0;
        x.boundary_bytes = 4 * 16 * m.C * 4;
        const int bound = comm_peak_microbatches({pp, 1, v, 1});
        auto peak = [&](int micro) {
          return stage_comm_peak_bytes(make_schedule(kind, {pp, micro, v, 1}), part, dl, rank, x);
        };
        const int64_t at_bound = peak(bound);
        for (int micro = bound + pp; micro <= 3 * bound; micro += pp)
          EXPECT_EQ(peak(micro), at_bound) << schedule_name(kind) << " " << dp::shard_name(shard) << " rank " << rank
                                           << " m " << micro;
      }
    }
  (void)l;
}

TEST(Stage, PeakBytesFollowTheInFlightCounts) {
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::zb_h1}) {
    const ScheduleConfig cfg{4, 8, 1, 1};
    const Schedule s = make_schedule(k, cfg);
    const auto peaks = declared_peak_in_flight(k, cfg);
    const auto bytes = peak_activation_bytes(s, {{100}, {100}, {100}, {100}});
    for (int r = 0; r < 4; ++r) EXPECT_EQ(bytes[size_t(r)], 100 * peaks[size_t(r)]);
  }
}

TEST(Stage, SynchronousSchedulesAccumulateInMicrobatchOrder) {
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::zb_h1})
    for (int pp : {1, 2, 3, 4})
      for (int mb = pp; mb <= 4 * pp; ++mb)
        EXPECT_TRUE(accumulates_in_microbatch_order(make_schedule(k, {pp, mb, 1, 1})));
  for (int pp : {1, 2, 4})
    for (int v : {2, 3})
      EXPECT_TRUE(accumulates_in_microbatch_order(make_schedule(ScheduleKind::interleaved, {pp, 2 * pp, v, 1})));
  Schedule s = make_schedule(ScheduleKind::one_f_one_b, {2, 4, 1, 1});
  auto& r0 = s.ranks[0];
  auto b0 = std::find_if(r0.begin(), r0.end(), [](const Action& a) { return a.op == Op::backward; });
  auto b1 = std::find_if(b0 + 1, r0.end(), [](const Action& a) { return a.op == Op::backward; });
  std::iter_swap(b0, b1);
  EXPECT_FALSE(accumulates_in_microbatch_order(s));
}

}  // namespace
}  // namespace pb::pipeline
