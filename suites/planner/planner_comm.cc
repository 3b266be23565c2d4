// The planner's communication part: the comm rows of a step (data parallel
// from impl/data_parallel/cost.h; TP after Megatron, Shoeybi et al. 2019
// Sec. 3: two all-reduces per layer in forward and two in backward, with SP
// each an all-gather + reduce-scatter of the same bus volume, Korthikanti et
// al. 2022 Sec. 4.2.2; CP ring attention's K,V blocks passed cp-1 times per
// layer in forward, K,V and dK,dV in backward; pipeline p2p), each timed on
// the alpha-beta ring model of planner.h, and what compute does not hide.
#include "suites/planner/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "harness/status.h"
#include "impl/expert_parallel/cost.h"
#include "impl/pipeline/stage.h"
#include "impl/tensor_parallel/runner.h"
#include "suites/planner/planner_parts.h"

namespace pb::planner {

double ring_steps(std::string_view op, int64_t n) {
  return op == "all_reduce" ? 2.0 * double(n - 1) : op == "send_recv" ? 1.0 : double(n - 1);
}

double expected_max_normal(int64_t n) {
  require(n >= 1, "expected_max_normal: n must be >= 1 (got " + std::to_string(n) + ")");
  if (n == 1) return 0;
  // Simpson's rule over [-8, 12] (the largest of 2^63 draws is about 9.07,
  // its density negligible beyond 12), Phi^(n-1) as exp((n-1) log1p(-Q)) so
  // that the upper tail keeps its precision.
  const double lo = -8, hi = 12, pi = 3.14159265358979323846;
  const int steps = 24000;
  const double h = (hi - lo) / steps, m = double(n);
  auto f = [&](double x) {
    const double q = 0.5 * std::erfc(x / std::sqrt(2.0));
    return x * m * std::exp(-0.5 * x * x) / std::sqrt(2 * pi) * std::exp((m - 1) * std::log1p(-q));
  };
  double sum = f(lo) + f(hi);
  for (int i = 1; i < steps; ++i) sum += (i % 2 ? 4 : 2) * f(lo + i * h);
  return sum * h / 3;
}

double bus_bytes(std::string_view op, int64_t n, double bytes) {
  // NCCL's broadcast moves the whole message over every link (nccl-tests
  // doc/PERFORMANCE.md: broadcast's bus bandwidth is its algorithm bandwidth).
  return op == "send_recv" || op == "broadcast" ? bytes
         : op == "all_reduce"                   ? bytes * dp::bus_factor(dp::Coll::all_reduce, n)
                              : bytes * dp::bus_factor(dp::Coll::all_gather, n);
}

double inter_node_GBps(const CommRow& c, const Hardware& hw, int64_t ranks_per_node) {
  double bw = hw.bw_inter_GBps;
  if (hw.rails > 0 && ranks_per_node > 0) {
    // NCCL's rings and trees run a channel per NIC: the group's members on
    // one node reach their share of the node's rails; an all-to-all cannot
    // aggregate NICs (one NIC's). Within the node the ring's hops are NVLink's.
    if (c.op != "all_to_all")
      bw *= double(c.per_node) * double(hw.rails) / double(ranks_per_node);
    if (hw.bw_intra_GBps > 0) bw = std::min(bw, hw.bw_intra_GBps);
  }
  const int64_t nodes = (c.group_size + c.per_node - 1) / std::max<int64_t>(1, c.per_node);
  if (hw.leaf_nodes > 0 && nodes > hw.leaf_nodes && hw.oversubscription > 1) bw /= hw.oversubscription;
  return bw;
}

bool ring_plateau_applies(const CommRow& c, const Hardware& hw) {
  // Where each of NCCL's most channels (MAXCHANNELS, 64) carries at least 64
  // bytes of every rank's call: so whatever channel count NCCL picks.
  constexpr double kMaxChannels = 64, kPlateauBytes = 64;
  return c.inter_node && !hw.host_kernels && c.op == "all_reduce" && hw.ring_plateau > 1 && c.calls > 0 &&
         c.group_size > 0 &&
         double(c.bytes) / double(c.calls) / (kMaxChannels * double(c.group_size)) >= kPlateauBytes;
}

namespace parts {
namespace {

// A collective a rank issues without waiting for it (Hardware::async_call_cost):
// a ZeRO-3-family gather of a unit ahead (prefetch > 0), a bucket reduced
// under backward (overlap). Ring attention's transfers are not counted (their
// cost on time-shared cores is not measured).
bool async_call(const CommRow& c, const PlanInput& in) {
  if (c.group.rfind("dp", 0) != 0 || c.phase == "step") return false;
  const bool gathers_ahead = (in.shard == dp::Shard::zero3 || in.shard == dp::Shard::hsdp ||
                              in.shard == dp::Shard::hzero) && in.prefetch > 0 && c.op == "all_gather";
  return gathers_ahead || (in.overlap && c.phase == "bwd");
}

// The fit of the group size nearest n (by ratio; the larger on a tie).
const CollectiveFit* nearest_fit(const std::vector<CollectiveFit>& fits, int64_t n) {
  const CollectiveFit* best = nullptr;
  double best_d = 0;
  for (const CollectiveFit& f : fits) {
    const double d = std::abs(std::log(double(f.group_size) / double(n)));
    if (!best || d < best_d || (d == best_d && f.group_size > best->group_size)) {
      best = &f;
      best_d = d;
    }
  }
  return best;
}

// Alpha-beta ring time of one row (planner.h).
double row_time(const CommRow& c, const Hardware& hw, int64_t ranks_per_node) {
  const int64_t n = c.group_size;
  const double steps = ring_steps(c.op, n);
  if (!c.inter_node)
    if (const auto it = hw.collectives.find(c.op); it != hw.collectives.end())
      if (const CollectiveFit* f = nearest_fit(it->second, n))
        return double(c.calls) * f->alpha_us * 1e-6 * steps / ring_steps(c.op, f->group_size) +
               c.bus_bytes / (f->GBps * 1e9);
  const double bw = (c.inter_node ? inter_node_GBps(c, hw, ranks_per_node) : hw.bw_intra_GBps) * 1e9;
  require(bw > 0, std::string(c.inter_node ? "--bw-inter" : "--bw-intra") +
                      ": required (> 0) with --peak-tflops: group " + c.group + " has traffic");
  double latency_us = steps * (c.inter_node && hw.latency_inter_us > 0 ? hw.latency_inter_us : hw.latency_us);
  if (c.inter_node && hw.latency_inter_us > 0 && !hw.host_kernels) {
    // On a device, NCCL's cost model (src/graph/tuning.cc, ncclTopoTuneModel):
    // of a ring's steps, 2 (nodes - 1) for all-reduce and nodes - 1 for the
    // others cross the network, the rest run over NVLink. (A calibrated CPU
    // profile's inter-node alpha was fitted with every step across nodes.)
    const int64_t nodes = (n + std::max<int64_t>(1, c.per_node) - 1) / std::max<int64_t>(1, c.per_node);
    const double inter = std::min(steps, double(c.op == "all_reduce" ? 2 * (nodes - 1) : nodes - 1));
    latency_us = inter * hw.latency_inter_us + (steps - inter) * hw.latency_us;
  }
  // NCCL's base latency, once per call of a collective (Hardware::latency_call_us):
  // its model times the five collectives only ("Send/Recv not included for
  // now"), so a p2p row (send_recv; all_to_all, grouped sends) takes none.
  if (c.op == "all_reduce" || c.op == "all_gather" || c.op == "reduce_scatter" || c.op == "broadcast")
    latency_us += hw.latency_call_us;
  if (ring_plateau_applies(c, hw)) latency_us *= hw.ring_plateau;
  return double(c.calls) * latency_us * 1e-6 + c.bus_bytes / bw;
}

void add_row(std::vector<CommRow>& out, const char* group, const char* phase, const char* op, int64_t n,
             int64_t calls, int64_t bytes, bool inter) {
  if (n <= 1 || calls <= 0) return;
  out.push_back({group, phase, op, n, calls, bytes, bus_bytes(op, n, double(bytes)), inter, 0.0, 1, {}});
}

// PlanInput::tp_overlap wgrad (Megatron-LM 2755bcb87b megatron/mpu/layers.py,
// LinearWithGradAccumulationAndAsyncCommunication.backward): the column-
// parallel linears of the rank's blocks (QKV, and fc1 in a dense block; the
// llama family's q|k|v and gate|up) and the LM head, once per microbatch
// each, issue their input gradient's all-reduce (with sp its reduce-scatter)
// async before the weight-gradient GEMM dW = dy^T x, and with sp the
// all-gather of the saved input before the input-gradient GEMM dx = dy W
// (when it is re-gathered, PlanInput::sp_regather). Marks those calls on the
// tp backward rows (CommRow::overlaps), with the GEMM each runs beside at its
// shape's rate (rank_gemms' linears: N = b s/cp rows) times `slowest`
// (PlanResult::slowest_gpu: the step's slowest GPU runs them). A
// mixture-of-experts block's experts are not column-parallel linears there:
// its QKV only.
void column_parallel_overlaps(const PlanInput& in, int64_t m, int64_t layers, int64_t moe_blocks, bool last,
                              int64_t sl, double slowest, std::vector<CommRow>& out) {
  const ModelConfig& mc = *in.shape;
  const int64_t t = in.tp, C = mc.C, N = in.microbatch_size * sl;
  const int64_t bytes = N * C * elem_bytes(in.precision);  // each call's: the input's b s/cp x C
  const int64_t kv = mc.llama() ? llama_kv_heads_per_rank(mc, in.tp) * mc.head_size() : 0;
  struct Linear {
    int64_t calls, out;  // per step on this rank; the layer's output columns on a tp rank
  };
  const Linear linears[] = {{m * layers, mc.llama() ? C / t + 2 * kv : 3 * C / t},
                            {m * (layers - moe_blocks), mc.llama() ? 2 * mc.ffn / t : 4 * C / t},
                            {last ? m : 0, (mc.V + t - 1) / t}};
  auto gemm_s = [&](const GemmShape& g) {
    const double rate = gemm_gflops(in, g) * 1e9;
    return rate > 0 ? 2.0 * double(g.m) * double(g.n) * double(g.k) / rate * slowest : 0.0;  // on the slowest GPU
  };
  auto attach = [&](const std::string& op, bool wgrad) {
    for (CommRow& c : out)
      if (c.group == "tp" && c.phase == "bwd" && c.op == op) {
        for (const Linear& l : linears)
          if (l.calls > 0)
            c.overlaps.push_back({l.calls, bytes,
                                  wgrad ? gemm_s({l.out, C, N, true, false, 1})     // dW = dy^T x
                                        : gemm_s({N, C, l.out, false, false, 1})});  // dx = dy W
        return;
      }
  };
  attach(in.sp ? "reduce_scatter" : "all_reduce", true);
  if (in.sp && in.sp_regather) attach("all_gather", false);
}

// The scalar collectives of Megatron-LM's training loop (PlanInput::
// train_loop megatron_lm; NVIDIA/Megatron-LM 6985e58938 and 2755bcb87b):
// - per microbatch on the rank holding the head, pretrain_gpt.py loss_func's
//   average_losses_across_data_parallel_group([loss]) (megatron/utils.py):
//   an fp32 all-reduce of one element over the data-parallel group (`loss`),
//   charged to whichever rank is planned: with pp > 1 the last stage runs
//   each microbatch's backward after its forward and loss, and the stages
//   before it wait for that backward's gradient (the critical path);
// - per step over the model-parallel group (tp x pp ranks, mpu
//   get_model_parallel_group): megatron/optimizer/clip_grads.py
//   clip_grad_norm_fp32's total_norm all-reduce (--clip-grad 1.0 by default;
//   one fp32 element; with pp = 1 that group is tp's and the tp step row
//   holds it) and, with the fp16 grad scaler (optimizer megatron_fp16),
//   optimizer.py _unscale_main_grads_and_check_for_nan's found_inf (MAX, one
//   fp32 element) (`mp`).
// The group's members: dp at stride tp x cp (x pp in Llama 3's order), pp
// at tp x cp x dp (Megatron's) or tp x cp.
void megatron_loop_comm(const PlanInput& in, int64_t m, int64_t R, std::vector<CommRow>& out) {
  const int64_t tc = int64_t(in.tp) * in.cp;
  const int64_t dp_stride = tc * (in.pp_inside_dp ? in.pp : 1), pp_stride = tc * (in.pp_inside_dp ? 1 : in.dp);
  auto on_node = [R](int64_t n, int64_t stride) { return R <= 0 || stride >= R ? int64_t(1) : std::min(n, R / stride); };
  if (in.dp > 1) {
    add_row(out, "loss", "fwd", "all_reduce", in.dp, m, 4 * m, spans(dp_stride * (in.dp - 1) + 1, R));
    if (!out.empty() && out.back().group == "loss") out.back().per_node = on_node(in.dp, dp_stride);
  }
  const int64_t mp = int64_t(in.tp) * in.pp;
  const int64_t calls = (in.pp > 1 ? 1 : 0) + (in.optimizer_step == OptimizerStep::megatron_fp16 ? 1 : 0);
  if (mp > 1 && calls > 0) {
    add_row(out, "mp", "step", "all_reduce", mp, calls, 4 * calls,
            spans(in.tp + pp_stride * (in.pp - 1), R));
    if (!out.empty() && out.back().group == "mp")
      out.back().per_node = std::min<int64_t>(in.tp, R > 0 ? R : in.tp) * on_node(in.pp, pp_stride);
  }
}

// TP, CP and PP traffic of one pipeline rank over a step of m microbatches.
void model_parallel_comm(const PlanInput& in, const dp::DataAxis& axis, const Pipe& pipe, int rank, int64_t seq,
                         double slowest, std::vector<CommRow>& out) {
  const ModelConfig& mc = *in.shape;
  const int64_t m = pipe.cfg.microbatches, e = elem_bytes(in.precision), b = in.microbatch_size;
  const int64_t sl = seq / in.cp;
  int64_t layers = 0;
  for (int c = 0; c < pipe.part.v; ++c) layers += pipe.part.at(rank, c).num_blocks;
  const bool first = pipe.part.at(rank, 0).embedding, last = pipe.part.at(rank, pipe.part.v - 1).head;
  const int64_t R = in.ranks_per_node;
  const bool megatron = in.train_loop == TrainLoop::megatron_lm;  // Megatron-LM's training loop
  if (in.tp > 1) {
    // The tensor axis's own figures (impl/tensor_parallel/cost.h): the layers
    // this rank holds, the vocabulary-parallel embedding on the first stage,
    // the LM head and cross-entropy on the last, per microbatch.
    const bool inter = spans(in.tp, R);
    const tp::TpShape x = tp::make_shape(mc, in.tp, in.sp, in.recompute, b, sl, in.precision);
    const tp::TpPieceComm lc = tp::layer_comm(x), ec = tp::embedding_comm(x), hc = tp::head_comm(x);
    // MoE blocks (tensor_parallel/tp_rank.cc's rule): no dense MLP reduce
    // (an all-reduce, a reduce-scatter with sp) of the tokens; instead each of
    // the rank's El experts all-reduces the rows it received (a balanced
    // router's), forward, backward, and under full recompute once more in
    // backward (the rerun forward's).
    const int64_t moe_n = mc.moe.experts > 0 ? m * rank_moe_blocks(mc, pipe.part, rank) : 0;
    const int64_t El = mc.moe.experts > 0 ? mc.moe.experts / in.ep : 0;
    const int64_t rows = moe_n ? ep::balanced_rows(mc, b * sl, moe_scope_tokens(in, seq)) : 0;
    const std::string dense_reduce = in.sp ? "reduce_scatter" : "all_reduce";
    for (int pass = 0; pass < 2; ++pass) {
      auto of = [&](const tp::TpPieceComm& c) { return pass ? c.bwd : c.fwd; };
      const tp::TpPass l = of(lc), em = of(ec), hd = of(hc);
      const int64_t passes = pass && in.recompute == Recompute::full ? 2 : 1;
      auto row = [&](const char* op, tp::TpCalls tp::TpPass::*f) {
        int64_t calls = m * (layers * (l.*f).calls + (first ? (em.*f).calls : 0) + (last ? (hd.*f).calls : 0));
        int64_t bytes = m * (layers * (l.*f).bytes + (first ? (em.*f).bytes : 0) + (last ? (hd.*f).bytes : 0));
        if (op == dense_reduce) calls -= passes * moe_n, bytes -= passes * moe_n * b * sl * mc.C * e;
        if (pass && in.sp && !in.sp_regather && op == std::string("all_gather") && lc.fwd.all_gather.calls > 0) {
          // No re-gather of the blocks' two stored norm outputs or the head's input (PlanInput::sp_regather).
          const int64_t n = m * (2 * layers + (last ? 1 : 0));
          calls -= n;
          bytes -= n * (lc.fwd.all_gather.bytes / lc.fwd.all_gather.calls);
        }
        if (op == std::string("all_reduce")) calls += passes * moe_n * El, bytes += passes * moe_n * rows * mc.C * e;
        add_row(out, "tp", pass ? "bwd" : "fwd", op, in.tp, calls, bytes, inter);
      };
      row("all_reduce", &tp::TpPass::all_reduce);
      row("all_gather", &tp::TpPass::all_gather);
      row("reduce_scatter", &tp::TpPass::reduce_scatter);
    }
    if (in.tp_overlap == TpOverlap::wgrad) column_parallel_overlaps(in, m, layers, moe_n / m, last, sl, slowest, out);
    // Once per step: the norm's partial sum; with SP the replicated
    // parameters' gradients this rank holds (its 1/g share when sharded).
    const int64_t g = std::max<int64_t>(1, dp::shard_group_size(axis));
    // (An MoE block's row-parallel bias is its experts', which every tp rank
    // computes whole, as the router: SP leaves them out, tp_reduced_ranges.)
    const int64_t moe_bias = in.sp && !mc.llama() ? moe_n / m * mc.C : 0;
    const int64_t held = dp::ceil_div(
        mc.llama() ? llama_replicated_params(mc, layers, last)
                   : tp::replicated_params(mc, layers, first, last) - moe_bias,
        g);
    // A pipeline rank sums its norm over the whole world instead (pp_scalar);
    // Megatron-LM's over its model-parallel group (the "mp" row below).
    const int64_t norm = in.pp > 1 ? -8 : 0;
    const int64_t calls = (in.sp ? 1 : 0) + (in.pp > 1 && megatron ? 0 : 1);
    add_row(out, "tp", "step", "all_reduce", in.tp, calls, tp::step_bytes(in.sp, held, int(e)) + norm, inter);
    // Megatron-LM's get_batch (pretrain_gpt.py) per forward_step call: mpu/data.py
    // broadcast_data broadcasts the keys' sizes (max_dim 4 int64 per key, one
    // key 'text': 32 bytes) and the int64 tokens, b x (s + 1), over the tp group.
    if (megatron)
      add_row(out, "tp", "fwd", "broadcast", in.tp, 2 * m * pipe.part.v, m * pipe.part.v * (32 + b * (seq + 1) * 8),
              inter);
  }
  if (megatron) megatron_loop_comm(in, m, R, out);
  if (in.cp > 1) {
    // The context axis's own figures (impl/context_parallel/cost.h): ring's
    // K/V and dK/dV sends or Ulysses' all-to-alls, per layer and microbatch.
    const bool inter = spans(int64_t(in.tp) * in.cp, R);
    tp::TpShape x = tp::make_shape(mc, in.tp, in.sp, in.recompute, b, seq, in.precision);
    x.cp = in.cp;
    x.algo = in.cp_algo;
    // The llama family's ring passes K and V, which GQA holds for kv heads
    // only; Ulysses' four all-to-alls move q, k, v and o: (2a + 2kv)/4a of
    // the multi-head figure, kv = lcm(kv heads per tp rank, cp) (replicated
    // to split over cp; tp::attn_shape, docs/planner.md#the-llama-family).
    const cp::CpLayerComm c = cp::layer_comm(tp::attn_shape(x), in.recompute);
    const int64_t n = m * layers;
    add_row(out, "cp", "fwd", "send_recv", in.cp, n * c.fwd_send.calls, n * c.fwd_send.bytes, inter);
    add_row(out, "cp", "bwd", "send_recv", in.cp, n * c.bwd_send.calls, n * c.bwd_send.bytes, inter);
    add_row(out, "cp", "fwd", "all_to_all", in.cp, n * c.fwd_a2a.calls, n * c.fwd_a2a.bytes, inter);
    add_row(out, "cp", "bwd", "all_to_all", in.cp, n * c.bwd_a2a.calls, n * c.bwd_a2a.bytes, inter);
  }
  if (in.pp > 1) {
    // Adjacent stages are tp x cp (x dp in Megatron's order) ranks apart.
    const bool inter = R > 0 && int64_t(in.tp) * in.cp * (in.pp_inside_dp ? 1 : in.dp) >= R;
    // Megatron's scatter/gather: with SP each tp rank sends its 1/t of the boundary.
    // (SP: the microbatch's b*s tokens split over tp, as the stages send them.)
    // Without SP, on a device profile, Megatron-LM still sends 1/t per tp rank
    // and the receiver all-gathers the boundary over tp's NVLink (PTD-P Sec.
    // 4.1; --scatter-gather-tensors-in-pipeline, on by default:
    // p2p_communication.py's split_tensor_into_1d_equal_chunks and
    // gather_split_1d_tensor); parabench's executor, which the CPU profiles
    // plan, sends it whole.
    const bool scatter = !in.sp && in.tp > 1 && !in.hw.host_kernels && in.pp_scatter_gather;
    const int64_t whole = pipeline::boundary_bytes(b, sl, mc.C, e);
    const int64_t boundary = in.sp ? pipeline::boundary_bytes(1, b * sl / in.tp, mc.C, e)
                                   : scatter ? dp::ceil_div(whole, in.tp) : whole;
    const pipeline::P2PVolume vol = pipeline::p2p_per_step(pipe.cfg, boundary);
    const int64_t sent = vol.send_bytes[size_t(rank)];
    const int64_t fwd_msgs = m * (pipe.part.v - (rank == in.pp - 1 ? 1 : 0));
    const int64_t bwd_msgs = sent / boundary - fwd_msgs;
    add_row(out, "pp", "fwd", "send_recv", in.pp, fwd_msgs, fwd_msgs * boundary, inter);
    add_row(out, "pp", "bwd", "send_recv", in.pp, bwd_msgs, sent - fwd_msgs * boundary, inter);
    if (scatter) {  // each message's receiver gathers it whole (as many as this rank sends)
      add_row(out, "tp", "fwd", "all_gather", in.tp, fwd_msgs, fwd_msgs * whole, spans(in.tp, R));
      add_row(out, "tp", "bwd", "all_gather", in.tp, bwd_msgs, bwd_msgs * whole, spans(in.tp, R));
    }
    if ((first || last) && !mc.llama()) {  // the llama family's head is untied
      // Sharded gradients (zero2 and beyond) sum each rank's 1/g share of the rows.
      const int64_t rows = (mc.V + in.tp - 1) / in.tp, gb = dp::bytes_per_param(in.precision).grad;
      const int64_t tied = in.shard <= dp::Shard::zero1
                               ? pipeline::tied_embedding_grad_bytes(rows, mc.C, gb, in.pp)
                               : dp::ceil_div(rows * mc.C, std::max<int64_t>(1, dp::shard_group_size(axis))) * gb;
      add_row(out, "embedding", "step", "all_reduce", 2, 1, tied, R > 0 && spans(world_of(in), R));
    }
  }
}

// Which rows cross nodes and how many of their group's members share a node
// (CommRow::per_node), by the placement order (planner.h): tp fastest, cp at
// stride tp, then dp at tp x cp and pp beyond (Megatron), or pp at tp x cp and
// dp beyond (Llama 3). The flat data-parallel group is dp x cp ranks (the
// ranks holding the same parameters); its crossing is recomputed here, as the
// data axis's own functions know one stride only.
void place_groups(const PlanInput& in, std::vector<CommRow>& rows) {
  const int64_t R = in.ranks_per_node;
  if (R <= 0) return;
  auto per = [R](int64_t n, int64_t stride) { return stride >= R ? int64_t(1) : std::min(n, R / stride); };
  const int64_t tp = in.tp, cp = in.cp, dp_stride = tp * cp * (in.pp_inside_dp ? in.pp : 1);
  for (CommRow& c : rows) {
    if (c.group == "tp") c.per_node = per(tp, 1);
    else if (c.group == "cp") c.per_node = per(cp, tp);
    else if (c.group == "dp" && c.group_size == int64_t(in.dp) * cp) {
      c.per_node = per(cp, tp) * per(in.dp, dp_stride);
      c.inter_node = c.per_node < c.group_size;
    }
  }
}

// A data-parallel row's bytes at the run's gradient-reduce dtype
// (PlanInput::grad_reduce_bytes): the gradient reductions (reduce_scatter,
// all_reduce) scale from the precision's gradient bytes to it; the parameter
// all_gathers keep the parameter bytes.
int64_t grad_reduce_bytes(const PlanInput& in, dp::Coll op, int64_t bytes) {
  const int64_t g = dp::bytes_per_param(in.precision).grad;
  if (in.grad_reduce_bytes <= 0 || in.grad_reduce_bytes == g || op == dp::Coll::all_gather) return bytes;
  return bytes / g * in.grad_reduce_bytes + bytes % g * in.grad_reduce_bytes / g;
}

}  // namespace

void plan_comm(const PlanInput& in, const dp::DataAxis& axis, const Pipe& pipe, const ep::StateCosts* ep_states,
               const std::vector<int64_t>& worst_units, PlanResult& r) {
  const bool moe_stages = in.shape && in.shape->moe.experts > 0 && pipe.staged();
  // torchtitan's FSDP2 wrapping (parallelize_llama.py apply_fsdp at 1ea476e,
  // 3faaa1a, 9dec370): each block a unit with reshard_after_forward =
  // layer_id < n_layers - 1, so the last block, like the root, is not
  // gathered again in backward; the root unit (tok_embeddings, final norm,
  // output: the model's own fully_shard) is gathered first in forward and its
  // gradients reduce-scattered last (the unhidden edges' share below).
  const bool fsdp2 = !ep_states && worst_units.size() > 3 && fsdp2_device_plan(in, pipe);
  const int nu = int(worst_units.size());
  std::vector<dp::CollCost> dcomm = ep_states ? ep_states->dense_comm
                                    : fsdp2   ? dp::comm_per_step(worst_units, axis, dp::UnitRoles{1, nu - 3, nu - 1})
                                              : dp::comm_per_step(worst_units, axis);
  if (ep_states) dcomm.insert(dcomm.end(), ep_states->expert_comm.begin(), ep_states->expert_comm.end());
  for (const dp::CollCost& c : dcomm)
    add_row(r.comm, c.group.c_str(), c.phase.c_str(), std::string(dp::coll_name(c.op)).c_str(), c.group_size,
            c.calls, grad_reduce_bytes(in, c.op, c.bytes), c.inter_node);
  // MoE stages: the worst rank's experts over edp, and its MoE layers below.
  const int moe_layers = moe_stages ? int(stage_moe_layers(*in.shape, pipe.part, r.worst.stage, in.ep, in.tp))
                         : in.shape ? in.shape->moe_layers() : 0;
  if (moe_stages) {
    std::vector<pipeline::StageUnitUse> uses;
    for (int64_t u : stage_expert_units(*in.shape, pipe.part, r.worst.stage, in.ep, in.tp)) uses.push_back({u, 1, 1});
    for (const dp::CollCost& c : pipeline::stage_dp_comm_per_step(uses, *pipe.experts, int(r.microbatches)))
      add_row(r.comm, ("e" + c.group).c_str(), c.phase.c_str(), std::string(dp::coll_name(c.op)).c_str(),
              c.group_size, c.calls, grad_reduce_bytes(in, c.op, c.bytes), c.inter_node);
  }
  // Full recompute reruns each MoE block's forward in backward (the same
  // routing): its count exchange, dispatch and combine, and its capacity
  // scope's exchanges, once more (tensor_parallel/tp_rank.cc).
  const bool rerun = in.recompute == Recompute::full;
  if (ep_states || (moe_stages && in.ep > 1)) {  // the counts, dispatch and combine forward; dispatch and combine backward (balanced router's rows)
    const int64_t n = r.microbatches * moe_layers;
    // (each rank dispatches its own tokens: with cp its 1/cp of the sequence)
    const int64_t rows =
        ep::balanced_rows(*in.shape, in.microbatch_size * r.seq / in.cp, moe_scope_tokens(in, r.seq));
    const int64_t both = ep::a2a_bytes(*in.shape, n, n * rows, n * rows, elem_bytes(in.precision));
    const int64_t bwd = ep::a2a_bytes(*in.shape, 0, n * rows, n * rows, elem_bytes(in.precision)) / 2;
    const int64_t again = rerun ? both - bwd : 0;  // the rerun forward's
    // An ep group is ep consecutive values of the (cp, dp) index (cp
    // fastest; same tp and pp rank, harness/mesh.h): it spans nodes when its
    // first and last rank lie further apart than a node holds.
    const int64_t last = in.ep - 1, dp_stride = int64_t(in.tp) * in.cp * (in.pp_inside_dp ? in.pp : 1);
    const bool inter = spans(in.tp * (last % in.cp) + dp_stride * (last / in.cp) + 1, in.ranks_per_node);
    add_row(r.comm, "ep", "fwd", "all_to_all", in.ep, 3 * n, both - bwd, inter);
    add_row(r.comm, "ep", "bwd", "all_to_all", in.ep, (rerun ? 5 : 2) * n, bwd + again, inter);
  }
  if (!worst_units.empty()) {
    int64_t total = 0;
    for (int64_t u : worst_units) total += u;
    const int64_t first = worst_units.front() + (fsdp2 ? worst_units.back() : 0);  // torchtitan: the root unit
    if (total > 0) r.dp_first_unit_share = double(first) / double(total);
  }
  if (in.shape) model_parallel_comm(in, axis, pipe, r.worst.stage, r.seq, r.slowest_gpu, r.comm);
  place_groups(in, r.comm);
  const int64_t cap = moe_capacity_ranks(in);
  if (cap > 1 && moe_layers > 0) {  // per MoE block: the capacity scope's routing exchanges, its probability sums reduced
    const MoeConfig& c = in.shape->moe;
    const int64_t n = r.microbatches * moe_layers;
    // Over dp: every rank's per-(choice, expert) counts; with cp: every
    // token's choices (the scope's token order is not the ranks').
    const int64_t gathered = in.cp > 1 ? cap * in.microbatch_size * r.seq / in.cp * c.top_k * 8
                                       : in.dp * c.top_k * c.experts * 8;
    // The scope's ranks lie at stride tp (dp x cp; x pp in Llama 3's order).
    const bool inter = spans(int64_t(in.tp) * cap * (in.pp_inside_dp ? in.pp : 1), in.ranks_per_node);
    for (int pass = 0; pass < (rerun ? 2 : 1); ++pass) {
      const char* phase = pass ? "bwd" : "fwd";
      add_row(r.comm, "moe", phase, "all_gather", cap, n, n * gathered, inter);
      add_row(r.comm, "moe", phase, "all_reduce", cap, n, n * c.experts * 8, inter);
    }
  }
}

// PyTorch DDP's gradient bucket cap: bucket_cap_mb, default 25, in MiB
// (torch/nn/parallel/distributed.py: bucket_bytes_cap = bucket_cap_mb * 1024
// * 1024). Buckets fill in reverse order of the parameters, so the last one
// all-reduced holds the first parameters, whose gradients come last.
constexpr double kDdpBucketBytes = 25.0 * 1024 * 1024;

void time_comm(const PlanInput& in, bool attn_timed, double fwd_s, double bwd_s, PlanResult& r) {
  double hidden_fwd = 0, hidden_bwd = 0, exposed = 0, unhidden = 0;
  const bool prefetches = device_prefetches(in);  // time_comm runs on timed plans only
  for (CommRow& c : r.comm) {
    c.time_s = row_time(c, in.hw, in.ranks_per_node);
    r.comm_s += c.time_s;
    if (attn_timed && in.hw.attention_includes_cp && c.group == "cp") continue;  // inside the measured core's time
    if (!c.overlaps.empty()) {
      // PlanInput::tp_overlap wgrad: each column-parallel call hides behind
      // the GEMM it runs beside, up to that GEMM's time (at the step's
      // compute scale); the excess and the row's other calls are exposed.
      double all = 0, hidden = 0;
      for (const CommRow::Overlap& o : c.overlaps) {
        CommRow one = c;
        one.overlaps.clear();
        one.calls = 1;
        one.bytes = o.bytes;
        one.bus_bytes = bus_bytes(c.op, c.group_size, double(o.bytes));
        const double call_s = row_time(one, in.hw, in.ranks_per_node);
        all += double(o.calls) * call_s;
        hidden += double(o.calls) * std::min(call_s, o.gemm_s * in.hw.compute_scale * r.corun);
      }
      hidden = std::min(hidden, c.time_s);
      r.tp_overlap_comm_s += all;
      r.tp_hidden_s += hidden;
      hidden_bwd += hidden;
      exposed += c.time_s - hidden;
      continue;
    }
    // Ulysses waits for each all-to-all; the ring posts its hop before the block compute.
    // On a device the ZeRO-3 family's prefetched gathers and its gradient
    // reduce-scatters run on their own stream beside compute (PyTorch FSDP's
    // forward/backward prefetch); on time-shared CPU cores they compete for
    // the cores instead (Hardware::async_call_cost), as measured.
    const bool dp_row = c.group.rfind("dp", 0) == 0;
    const bool device_fsdp = prefetches && dp_row &&
                             (c.op == "all_gather" || c.op == "reduce_scatter");
    const bool overlappable = (device_fsdp || (in.overlap && (dp_row || (c.group == "cp" && c.op == "send_recv")))) &&
                              c.phase != "step";
    if (!overlappable) {
      exposed += c.time_s;
      continue;
    }
    // What no overlap hides by construction, on a device. PyTorch FSDP's
    // prefetch hides the next unit's gather behind this one's compute and the
    // reduce-scatter of this one's gradients behind the next one's backward
    // (Zhao et al. 2023, arXiv:2304.11277, on forward and backward
    // prefetching), so nothing hides what has no compute beside it: each
    // microbatch's forward waits for its first unit's all-gather (the
    // previous microbatch's backward is over), and the reduce-scatter of the
    // first unit's gradients, the last backward produces, ends the step (the
    // earlier microbatches' run beside the next forward). Both at the first
    // unit's share of the row's time. DDP's last bucket is all-reduced after
    // the last gradient is ready (Li et al. 2020, arXiv:2006.15704, Sec.
    // 3.2.3): the row's time at the bucket's share of its bytes.
    // Under BACKWARD_POST (PlanInput::backward_prefetch_post) the backward's
    // gathers have no compute beside them: the whole row.
    double edge = 0;
    if (!in.hw.host_kernels) {
      if (device_fsdp && c.phase == "bwd" && c.op == "all_gather" && in.backward_prefetch_post)
        edge = c.time_s;
      else if (device_fsdp && c.phase == "fwd" && c.op == "all_gather")
        edge = c.time_s * r.dp_first_unit_share;
      else if (device_fsdp && c.phase == "bwd" && c.op == "reduce_scatter")
        edge = c.time_s * r.dp_first_unit_share / double(std::max<int64_t>(1, r.microbatches));
      else if (in.overlap && in.shard == dp::Shard::none && dp_row && c.op == "all_reduce" && c.bytes > 0)
        edge = c.time_s * std::min(1.0, kDdpBucketBytes / double(c.bytes));
    }
    edge = std::min(edge, c.time_s);
    unhidden += edge;
    (c.phase == "fwd" ? hidden_fwd : hidden_bwd) += c.time_s - edge;
  }
  for (const CommRow& c : r.comm)
    if (async_call(c, in)) r.async_calls += c.calls;
  if (in.hw.core_share < 1 && r.async_calls > 0)
    r.async_cost_s = double(r.async_calls) *
                     async_call_cost_us(in.hw.async_call_cost, r.compute_s * 1e6 / double(r.async_calls)) * 1e-6;
  // The compute that runs beside a hidden collective, at its slowdown
  // (Hardware::overlap_compute_slowdown): of each phase, as much as the
  // phase's hidden collectives last.
  r.overlap_slowdown_s =
      in.hw.overlap_compute_slowdown * (std::min(hidden_fwd, fwd_s) + std::min(hidden_bwd, bwd_s));
  r.tp_overlap_slowdown_s = in.hw.overlap_compute_slowdown * std::min(r.tp_hidden_s, bwd_s);
  r.unhidden_comm_s = unhidden;
  r.exposed_comm_s = exposed + unhidden + std::max(0.0, hidden_fwd - fwd_s) + std::max(0.0, hidden_bwd - bwd_s) +
                     r.overlap_slowdown_s + r.async_cost_s;
}

}  // namespace parts
}  // namespace pb::planner
