// Declared data-parallel costs against the ZeRO paper's formulas (Rajbhandari
// et al. 2020, Sec. 3, Fig. 1; Sec. 7 communication) and ZeRO++ hpZ.
#include "impl/data_parallel/cost.h"

#include <gtest/gtest.h>

#include "harness/status.h"

namespace pb::dp {
namespace {

DataAxis axis(int64_t dp, Shard s, Precision p, Padding pad = Padding::padded) {
  DataAxis a;
  a.dp = dp;
  a.shard = s;
  a.precision = p;
  a.padding = pad;
  return a;
}

// ZeRO Fig. 1: Psi = 7.5B, Nd = 64, K = 12 -> 120, 31.4, 16.6, 1.9 GB.
TEST(DpCost, ZeroPaperFigure1) {
  const int64_t psi = 7'500'000'000;
  auto total = [&](Shard s) {
    return model_state_bytes(psi, axis(64, s, Precision::bf16_mixed, Padding::exact)).device_total();
  };
  EXPECT_EQ(total(Shard::none), 120'000'000'000);
  EXPECT_EQ(total(Shard::zero1), 31'406'250'000);
  EXPECT_EQ(total(Shard::zero2), 16'640'625'000);
  EXPECT_EQ(total(Shard::zero3), 1'875'000'000);
}

// (P, G, K) per precision and the stage formulas, with the padding rule:
// shard = ceil(Psi/Nd), replicated sharded-collective buffers Nd*ceil(Psi/Nd).
TEST(DpCost, StageFormulasWithPadding) {
  const Precision precs[] = {Precision::fp64, Precision::fp32, Precision::bf16_mixed};
  const int64_t Ps[] = {8, 4, 2}, Gs[] = {8, 4, 2}, Ks[] = {16, 8, 12};
  for (int pi = 0; pi < 3; ++pi) {
    const BytesPerParam b = bytes_per_param(precs[pi]);
    EXPECT_EQ(b.param, Ps[pi]);
    EXPECT_EQ(b.grad, Gs[pi]);
    EXPECT_EQ(b.optimizer, Ks[pi]);
    for (int64_t psi : {int64_t(1), int64_t(1'000'003), int64_t(124'439'808), int64_t(1'000'000'000'000)}) {
      for (int64_t nd : {1, 3, 8, 64, 4096}) {
        const int64_t sh = (psi + nd - 1) / nd, full = sh * nd;
        const int64_t P = Ps[pi], G = Gs[pi], K = Ks[pi];
        auto ms = [&](Shard s) { return model_state_bytes(psi, axis(nd, s, precs[pi])); };
        EXPECT_EQ(ms(Shard::none).device_total(), (P + G + K) * psi);
        EXPECT_EQ(ms(Shard::zero1).params, P * full);
        EXPECT_EQ(ms(Shard::zero1).grads, G * full);
        EXPECT_EQ(ms(Shard::zero1).optimizer, K * sh);
        EXPECT_EQ(ms(Shard::zero2).device_total(), P * full + (G + K) * sh);
        EXPECT_EQ(ms(Shard::zero3).device_total(), (P + G + K) * sh);
        EXPECT_EQ(ms(Shard::zero3).params, P * sh);
      }
    }
  }
}

TEST(DpCost, UnitsArePaddedSeparately) {
  const int64_t units[] = {10, 7};
  const auto a = axis(4, Shard::zero3, Precision::fp32);
  EXPECT_EQ(model_state_bytes(units, a).params, 4 * (3 + 2));
  EXPECT_EQ(model_state_bytes(17, a).params, 4 * 5);
  const auto z1 = axis(4, Shard::zero1, Precision::fp32);
  EXPECT_EQ(model_state_bytes(units, z1).params, 4 * (12 + 8));
  EXPECT_EQ(model_state_bytes(units, axis(4, Shard::zero1, Precision::fp32, Padding::exact)).params, 4 * 17);
}

TEST(DpCost, OffloadMovesOptimizerToHost) {
  auto a = axis(8, Shard::zero2, Precision::bf16_mixed);
  a.offload = Offload::optimizer;
  const auto m = model_state_bytes(800, a);
  EXPECT_EQ(m.optimizer, 0);
  EXPECT_EQ(m.optimizer_host, 12 * 100);
  EXPECT_EQ(m.device_total(), 2 * 800 + 2 * 100);
}

TEST(DpCost, HsdpShardsOverGroupAndHzeroKeepsSecondary) {
  auto h = axis(16, Shard::hsdp, Precision::bf16_mixed);
  h.shard_group = 4;
  EXPECT_EQ(model_state_bytes(1000, h).device_total(), 16 * 250);
  h.shard_group = 0;
  h.ranks_per_node = 8;  // default F = dp ranks per node
  EXPECT_EQ(shard_group_size(h), 8);
  EXPECT_EQ(model_state_bytes(1000, h).device_total(), 16 * 125);

  auto z = axis(16, Shard::hzero, Precision::bf16_mixed);
  z.ranks_per_node = 8;
  const auto m = model_state_bytes(1000, z);  // padded to 1008: primary 63, secondary 126
  EXPECT_EQ(m.params, 2 * (63 + 126));
  EXPECT_EQ(m.grads, 2 * 63);
  EXPECT_EQ(m.optimizer, 12 * 63);
  z.ranks_per_node = 16;  // one node: hpZ is plain ZeRO-3
  EXPECT_EQ(model_state_bytes(1000, z).params, 2 * 63);
}

TEST(DpCost, DpRanksPerNodeFollowsStride) {
  DataAxis a = axis(16, Shard::zero3, Precision::fp32);
  a.ranks_per_node = 8;
  a.stride = 2;  // tp*cp = 2: 4 dp ranks per node
  EXPECT_EQ(dp_ranks_per_node(a), 4);
  a.stride = 16;
  EXPECT_EQ(dp_ranks_per_node(a), 1);
  a.stride = 3;
  EXPECT_THROW(validate(a), InputError);
}

TEST(DpCost, UnitBuffers) {
  auto a = axis(4, Shard::zero3, Precision::bf16_mixed);
  const auto u = zero3_unit_buffer_bytes(10, 1, a);
  EXPECT_EQ(u.gathered_params, 2 * 12 * 2);
  EXPECT_EQ(u.unsharded_grads, 12 * 2);
}

// Replays worked by hand (units: embeddings, two blocks, final LN; fp32, dp 2).
TEST(DpCost, CommBufferPeakByHand) {
  const std::vector<int64_t> units = {4, 8, 8, 2};
  // ZeRO-3, prefetch 1: the peak is block 2's backward: its gradient (8) and
  // reduce-scatter slice (4), blocks 2 and 1 gathered (8 + 8; 1 prefetched),
  // the roots (4 + 2) and unit 0's gradient from the tied head (4): 38.
  auto z3 = axis(2, Shard::zero3, Precision::fp32);
  EXPECT_EQ(comm_buffer_peak_bytes(units, z3), 38 * 4);
  z3.prefetch = 0;  // block 1 is not gathered yet: 30
  EXPECT_EQ(comm_buffer_peak_bytes(units, z3), 30 * 4);
  // ZeRO-2: block 2's gradient (8) and slice (4) with unit 0's gradient (4).
  EXPECT_EQ(comm_buffer_peak_bytes(units, axis(2, Shard::zero2, Precision::fp32)), 16 * 4);
  // ZeRO-1: one slice at a time, the largest (4).
  EXPECT_EQ(comm_buffer_peak_bytes(units, axis(2, Shard::zero1, Precision::fp32)), 4 * 4);
  EXPECT_EQ(comm_buffer_peak_bytes(units, axis(2, Shard::none, Precision::fp32)), 0);
  auto bad = z3;
  bad.prefetch = -1;
  EXPECT_THROW(comm_buffer_peak_bytes(units, bad), InputError);
}

// The components' own buffer traffic, worked by hand (units: embeddings, one
// block, final LN; fp32, 2 microbatches).
TEST(DpCost, LocalTrafficByHand) {
  const std::vector<int64_t> sizes = {10, 30, 20};
  auto ddp = axis(2, Shard::none, Precision::fp32);
  ddp.grad_accum = 2;
  const std::vector<UnitUse> uses = unit_uses(sizes, ddp, UnitRoles::model(3));
  ASSERT_EQ(uses.size(), 3u);
  EXPECT_EQ(uses[0].fwd_uses, 1);
  EXPECT_EQ(uses[0].bwd_uses, 0);  // a root, held through backward
  EXPECT_EQ(uses[1].bwd_uses, 1);  // the block, gathered again
  EXPECT_EQ(uses[2].bwd_uses, 0);
  // DDP: the gradient zeroed once (60 x 4).
  EXPECT_EQ(local_traffic_bytes(uses, ddp), 240);
  // ZeRO-2 at dp 2: per unit and microbatch its full gradient (pad) and the
  // slice (s) zero-filled; the slice copied in (2 s), then added (3 s);
  // after the step the updated slice's buffer (s); the shard zeroed (120).
  // 2 (4 pad + 4 s) + 8 s + 12 s + 4 s over pads 60 and slices 30.
  auto z2 = ddp;
  z2.shard = Shard::zero2;
  EXPECT_EQ(local_traffic_bytes(uses, z2), 8 * 60 + 32 * 30 + 120);
  // ZeRO-3 at dp 1: the reduce-scatter is a copy (+ 2 s per microbatch) and
  // every gather a zero-filled buffer and a copy (12 bytes per element),
  // 90 elements gathered per microbatch (the block twice).
  auto z3 = axis(1, Shard::zero3, Precision::fp32);
  z3.grad_accum = 2;
  EXPECT_EQ(local_traffic_bytes(uses, z3), 240 + 52 * 60 + 2 * 12 * 90);
  z3.reshard_after_forward = false;  // the block stays gathered through backward
  EXPECT_EQ(local_traffic_bytes(unit_uses(sizes, z3, UnitRoles::model(3)), z3), 240 + 52 * 60 + 2 * 12 * 60);
  // At dp 2 the gather and reduce-scatter are collectives (their rows time them).
  auto z3dp2 = axis(2, Shard::zero3, Precision::fp32);
  z3dp2.grad_accum = 2;
  EXPECT_EQ(local_traffic_bytes(uses, z3dp2), 120 + 8 * 60 + 28 * 30 + 2 * 4 * 90);
  // ZeRO-1 reduces once per step, after the last microbatch.
  auto z1 = ddp;
  z1.shard = Shard::zero1;
  EXPECT_EQ(local_traffic_bytes(uses, z1), 240 + 12 * 30 + 4 * 30);
  const std::vector<UnitUse> bad = {{-1, 1, 0}};
  EXPECT_THROW(local_traffic_bytes(bad, z3), InputError);
}

TEST(DpCost, BusFactors) {
  EXPECT_DOUBLE_EQ(bus_factor(Coll::all_reduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(Coll::reduce_scatter, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(Coll::all_gather, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_factor(Coll::all_reduce, 1), 0.0);
}

int64_t total_logical(const std::vector<CollCost>& c) {
  const auto t = comm_totals(c);
  return t.logical_intra + t.logical_inter;
}

// ZeRO Sec. 7: DDP and ZeRO-1/2 move 2 Psi per step on the bus, ZeRO-3 3 Psi.
TEST(DpCost, CommVolumeMatchesZeroSection7) {
  const int64_t psi = 1 << 20, n = 8;
  const auto ddp = comm_per_step(psi, axis(n, Shard::none, Precision::fp32));
  ASSERT_EQ(ddp.size(), 1u);
  EXPECT_EQ(ddp[0].op, Coll::all_reduce);
  EXPECT_EQ(ddp[0].bytes, 4 * psi);
  EXPECT_DOUBLE_EQ(ddp[0].bus_bytes(), 4.0 * psi * 2 * (n - 1) / n);
  for (Shard s : {Shard::zero1, Shard::zero2}) {
    const auto c = comm_per_step(psi, axis(n, s, Precision::fp32));
    EXPECT_EQ(total_logical(c), 2 * 4 * psi);
    const auto t = comm_totals(c);
    EXPECT_DOUBLE_EQ(t.bus_intra, ddp[0].bus_bytes());
  }
  EXPECT_EQ(total_logical(comm_per_step(psi, axis(n, Shard::zero3, Precision::fp32))), 3 * 4 * psi);
  auto accum = axis(n, Shard::zero3, Precision::bf16_mixed);
  accum.grad_accum = 4;
  EXPECT_EQ(total_logical(comm_per_step(psi, accum)), 4 * 3 * 2 * psi);
  EXPECT_TRUE(comm_per_step(psi, axis(1, Shard::zero3, Precision::fp32)).empty());
}

TEST(DpCost, HsdpAndHzeroLocality) {
  const int64_t psi = 1 << 20;
  auto h = axis(32, Shard::hsdp, Precision::bf16_mixed);
  h.ranks_per_node = 8;
  const auto hc = comm_totals(comm_per_step(psi, h));
  EXPECT_EQ(hc.logical_intra, 3 * 2 * psi);        // shard group = node
  EXPECT_EQ(hc.logical_inter, 2 * psi / 8);        // replica all_reduce of the shard

  auto z = axis(32, Shard::hzero, Precision::bf16_mixed);
  z.ranks_per_node = 8;
  const auto zc = comm_totals(comm_per_step(psi, z));
  EXPECT_EQ(zc.logical_intra, 2 * 2 * psi);
  EXPECT_EQ(zc.logical_inter, 2 * psi + 2 * psi / 8);
  EXPECT_DOUBLE_EQ(hzero_inter_node_reduction(psi, z), 3.0 / (1.0 + 1.0 / 8));
  z.ranks_per_node = 0;
  EXPECT_THROW(hzero_inter_node_reduction(psi, z), InputError);
}

TEST(DpCost, BadInputThrowsInputError) {
  EXPECT_THROW(parse_shard("zero4"), InputError);
  EXPECT_EQ(parse_shard("fsdp"), Shard::zero3);
  EXPECT_THROW(model_state_bytes(10, axis(0, Shard::none, Precision::fp32)), InputError);
  EXPECT_THROW(model_state_bytes(-1, axis(2, Shard::none, Precision::fp32)), InputError);
  auto h = axis(12, Shard::hsdp, Precision::fp32);
  h.shard_group = 5;
  EXPECT_THROW(validate(h), InputError);
}

}  // namespace
}  // namespace pb::dp
