// The analytic planner (model and time assumptions in planner.h). Memory and
// DP communication come from impl/data_parallel/cost.h; TP follows Megatron
// (Shoeybi et al. 2019 Sec. 3: two all-reduces per layer in forward and two in
// backward; with SP each becomes all-gather + reduce-scatter of the same bus
// volume, Korthikanti et al. 2022 Sec. 4.2.2); CP is ring attention (K,V blocks
// passed cp-1 times per layer in forward, K,V and dK,dV in backward).
#include "suites/planner/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "harness/status.h"
#include "impl/expert_parallel/cost.h"
#include "impl/expert_parallel/options.h"
#include "impl/pipeline/stage.h"
#include "impl/pipeline/validate.h"
#include "impl/tensor_parallel/runner.h"
#include "reference/runner.h"

namespace pb::planner {
namespace {

int elem_bytes(Precision p) { return p == Precision::fp64 ? 8 : p == Precision::fp32 ? 4 : 2; }

bool spans(int64_t span, int64_t rpn) { return rpn > 0 && span > rpn; }

int64_t world_of(const PlanInput& in) { return int64_t(in.dp) * in.tp * in.cp * in.pp; }

void check_input(const PlanInput& in) {
  auto positive = [](const char* flag, int64_t v) {
    require(v >= 1, std::string(flag) + ": must be >= 1 (got " + std::to_string(v) + ")");
  };
  positive("--dp", in.dp);
  positive("--tp", in.tp);
  positive("--cp", in.cp);
  positive("--pp", in.pp);
  positive("--microbatch-size", in.microbatch_size);
  require(in.global_batch >= 0, "--global-batch: must be >= 1");
  require(in.seq >= 0, "--seq: must be >= 1");
  require(in.ranks_per_node >= 0, "--ranks-per-node: must be >= 1");
  if (in.shape) {
    in.shape->validate();
  } else {
    require(in.params >= 1, "--params: must be >= 1");
    require(in.tp == 1 && in.cp == 1 && in.pp == 1,
            "--tp/--cp/--pp: need a model shape (--model or --layers/--channels/--heads), not --params");
  }
  const int64_t R = in.ranks_per_node;
  for (int64_t span : {int64_t(in.tp), int64_t(in.tp) * in.cp})
    require(R == 0 || R % span == 0 || span % R == 0,
            "--ranks-per-node: must divide, or be a multiple of, tp and tp*cp (got " + std::to_string(R) + ")");
  const Hardware& h = in.hw;
  require(h.peak_tflops >= 0 && h.bw_intra_GBps >= 0 && h.bw_inter_GBps >= 0 && h.latency_us >= 0,
          "--peak-tflops/--bw-intra/--bw-inter/--latency-us: must be >= 0");
  require(h.gemm_efficiency > 0 && h.gemm_efficiency <= 1, "--gemm-efficiency: must be in (0, 1]");
  require(h.mem_bw_GBps >= 0, "--mem-bw: must be >= 0");
  require(h.shared_mem_bw_GBps >= 0 && std::isfinite(h.shared_mem_bw_GBps),
          "shared_mem_bw_GBps: must be a finite number >= 0");
  require(h.optimizer_mem_bw_GBps >= 0 && std::isfinite(h.optimizer_mem_bw_GBps),
          "optimizer_mem_bw_GBps: must be a finite number >= 0");
  require(h.buffer_mem_bw_GBps >= 0 && std::isfinite(h.buffer_mem_bw_GBps),
          "buffer_mem_bw_GBps: must be a finite number >= 0");
  require(h.compute_scale > 0 && std::isfinite(h.compute_scale), "compute_scale: must be a finite number > 0");
  require(h.corun_scale > 0 && std::isfinite(h.corun_scale) && h.corun_ranks >= 1,
          "corun_scale: must be a finite number > 0, at corun_ranks >= 1");
  require(h.core_share > 0 && h.core_share <= 1, "core_share: must be in (0, 1]");
  require(h.attention_fwd_s >= 0 && std::isfinite(h.attention_fwd_s) && h.attention_bwd_s >= 0 &&
              std::isfinite(h.attention_bwd_s),
          "attention_fwd_s/attention_bwd_s: must be finite numbers >= 0");
  for (size_t i = 0; i < h.async_call_cost.size(); ++i) {
    const AsyncCallCost& a = h.async_call_cost[i];
    require(a.compute_us > 0 && std::isfinite(a.compute_us) && a.cost_us >= 0 && std::isfinite(a.cost_us),
            "async_call_cost: compute_us must be a finite number > 0 and cost_us finite and >= 0");
    require(i == 0 || a.compute_us > h.async_call_cost[i - 1].compute_us,
            "async_call_cost: compute_us must be strictly ascending");
  }
  require(in.prefetch >= 0, "prefetch: must be >= 0 (units gathered ahead)");
}

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
double row_time(const CommRow& c, const Hardware& hw) {
  const int64_t n = c.group_size;
  const double steps = ring_steps(c.op, n);
  if (!c.inter_node)
    if (const auto it = hw.collectives.find(c.op); it != hw.collectives.end())
      if (const CollectiveFit* f = nearest_fit(it->second, n))
        return double(c.calls) * f->alpha_us * 1e-6 * steps / ring_steps(c.op, f->group_size) +
               c.bus_bytes / (f->GBps * 1e9);
  const double bw = (c.inter_node ? hw.bw_inter_GBps : hw.bw_intra_GBps) * 1e9;
  require(bw > 0, std::string(c.inter_node ? "--bw-inter" : "--bw-intra") +
                      ": required (> 0) with --peak-tflops: group " + c.group + " has traffic");
  const double latency = c.inter_node && hw.latency_inter_us > 0 ? hw.latency_inter_us : hw.latency_us;
  return double(c.calls) * steps * latency * 1e-6 + c.bus_bytes / bw;
}

// Everything one plan needs about the pipeline, from impl/pipeline/cost.h.
struct Pipe {
  pipeline::ScheduleConfig cfg;
  pipeline::Partition part;
  std::vector<int> in_flight;  // declared peak (microbatch, chunk) units per rank
  // The schedule every stage's comm buffers are replayed in: at most
  // comm_peak_microbatches (the same peak, O(pp v) actions at any global
  // batch), and on GPUs as posted over nccl, where a gradient may be
  // received before the F paired with its backward. Staged plans only.
  pipeline::Schedule comm_schedule;
  // A mixture-of-experts model in pipeline stages: the experts' data axis
  // (over edp, impl/expert_parallel/options.h) beside the dense one.
  std::optional<dp::DataAxis> experts;
  bool staged() const { return part.pp > 1 || part.v > 1; }
};

// A pipeline rank of an MoE model: its dense units and its experts' (ep rank
// 0's; every ep rank holds as many), as the executor holds them (stage.h).
struct StageMoe {
  std::vector<int64_t> dense, experts;
};
StageMoe stage_moe(const ModelConfig& m, const pipeline::Partition& part, int rank, int ep) {
  const ParamLayout l(m);
  StageMoe out;
  for (const auto& u : pipeline::stage_units(l, part, rank).units) out.dense.push_back(u.size);
  for (const auto& u : pipeline::stage_experts(l, part, rank, ep, 0).units) out.experts.push_back(u.size);
  return out;
}

// MoE with global capacity over several data ranks: the capacity scope's
// tokens (every rank's microbatch); 0: a rank's own microbatch.
int64_t moe_scope_tokens(const PlanInput& in, int64_t seq) {
  if (!in.shape || in.shape->moe.experts == 0 || in.shape->moe.capacity != MoeCapacity::global || in.dp < 2) return 0;
  return in.microbatch_size * seq * in.dp;
}

// Expert parallel: the run spec an expert-parallel rank is built from, so
// the planner evaluates the same cost functions it declares (impl/
// expert_parallel/cost.h).
RunSpec ep_spec(const PlanInput& in, int64_t seq, int64_t microbatches, int64_t global_batch) {
  RunSpec s;
  s.train.model = *in.shape;
  s.train.precision = in.precision;
  s.train.seq = int(seq);
  s.train.batch = int(global_batch);
  s.train.microbatches = int(microbatches);
  s.mesh.dp = in.dp;
  s.mesh.ep = in.ep;
  s.mesh.tp = in.tp;  // the experts' tp shard
  s.mesh.ranks_per_node = int(in.ranks_per_node);
  s.data.shard = in.shard;
  s.data.shard_group = int(in.hsdp_group);
  s.data.offload = in.offload;
  s.train.device = in.hw.host_kernels ? Device::cpu : Device::cuda;  // the ranks' states (offload's host copies)
  return s;
}

// The data-parallel components' own buffer traffic per step on pipeline rank
// `rank` (dp::local_traffic_bytes): the expert-parallel rank's two components,
// a stage's units as the executor uses them (and its experts), or the units
// in the microbatch runner's order.
int64_t dp_local_traffic(const PlanInput& in, const dp::DataAxis& axis, const Pipe& pipe, int rank,
                         const std::vector<int64_t>& units, const ep::StateCosts* ep_states) {
  if (ep_states) return ep_states->local_traffic;
  if (!in.shape || !pipe.staged()) {
    const int n = int(units.size());
    return dp::local_traffic_bytes(dp::unit_uses(units, axis, n > 2 ? dp::UnitRoles::model(n)
                                                                    : dp::UnitRoles::all_blocks(n)), axis);
  }
  const ParamLayout layout(*in.shape, in.tp, 0);
  const pipeline::StageUnits su = pipeline::stage_units(layout, pipe.part, rank);
  std::vector<dp::UnitUse> uses;
  for (size_t i = 0; i < su.units.size(); ++i) uses.push_back({su.units[i].size, su.fwd_uses[i], su.bwd_uses[i]});
  int64_t bytes = dp::local_traffic_bytes(uses, axis);
  if (pipe.experts) {
    std::vector<dp::UnitUse> experts;
    for (const auto& u : pipeline::stage_experts(layout, pipe.part, rank, in.ep, 0).units)
      experts.push_back({u.size, 1, 1});
    bytes += dp::local_traffic_bytes(experts, *pipe.experts);
  }
  return bytes;
}

StageMemory rank_memory(const PlanInput& in, const dp::DataAxis& axis, const Pipe& pipe, int rank, int64_t seq,
                        std::vector<int64_t>* units_out, const ep::StateCosts* ep_states) {
  std::vector<int64_t> units =
      in.shape ? rank_param_units(*in.shape, in.tp, pipe.part, rank) : std::vector<int64_t>{in.params};
  std::optional<StageMoe> moe;
  if (pipe.experts) {  // MoE stages: the executor's own units (wte and wpe apart, blocks before their experts)
    moe = stage_moe(*in.shape, pipe.part, rank, in.ep);
    units = moe->dense;
  }
  dp::ModelStateBytes ms = dp::model_state_bytes(units, axis);
  if (moe) {
    const dp::ModelStateBytes e = dp::model_state_bytes(moe->experts, *pipe.experts);
    ms.params += e.params, ms.grads += e.grads, ms.optimizer += e.optimizer, ms.optimizer_host += e.optimizer_host;
  }
  StageMemory s;
  s.stage = rank;
  s.params = ms.params;
  s.grads = ms.grads;
  s.optimizer = ms.optimizer;
  s.optimizer_host = ms.optimizer_host;
  if (ep_states) {  // the dense component over dp and this rank's experts over edp
    const dp::ModelStateBytes &d = ep_states->dense, &e = ep_states->experts;
    s.params = d.params + e.params;
    s.grads = d.grads + e.grads;
    s.optimizer = d.optimizer + e.optimizer;
    s.optimizer_host = d.optimizer_host + e.optimizer_host;
  }
  s.local_traffic = dp_local_traffic(in, axis, pipe, rank, units, ep_states);
  if (ep_states) {
    s.comm = ep_states->comm_peak;
  } else if (!in.shape) {
    if (axis.shard != dp::Shard::none) s.comm = -1;  // no unit structure without a shape
  } else if (pipe.part.pp == 1 && pipe.part.v == 1) {
    // The canonical unit order the runner visits: the protocol replayed, as
    // the conformance engine holds the measured peak to.
    s.comm = dp::comm_buffer_peak_bytes(units, axis);
  } else {
    // A pipeline stage: the executor's gathers, unit gradients and boundary
    // gradients replayed in the rank's schedule order (pipeline/stage.h).
    const ParamLayout layout(*in.shape, in.tp, 0);
    pipeline::StageCommShape x;
    x.units = pipeline::stage_units(layout, pipe.part, rank);
    if (pipe.experts) {
      x.experts = pipeline::stage_experts(layout, pipe.part, rank, in.ep, 0);
      x.expert = *pipe.experts;
    }
    x.dense = axis;
    int64_t tokens = in.microbatch_size * seq / in.cp;
    if (in.sp && in.tp > 1) tokens /= in.tp;
    x.boundary_bytes = tokens * in.shape->C * elem_bytes(in.precision);
    x.tp = in.tp > 1 || in.cp > 1;
    s.comm = pipeline::stage_comm_peak_bytes(pipe.comm_schedule, pipe.part, layout, rank, x);
  }
  tp::TpOptions tpo;
  tpo.tp = in.tp;
  tpo.sp = in.sp;
  tpo.recompute = in.recompute;
  tpo.context.cp = in.cp;
  tpo.context.algo = in.cp_algo;
  const bool staged = pipe.staged();
  const pipeline::MoeStage moe_stage{moe_scope_tokens(in, seq), in.ep, !in.hw.host_kernels};
  if (in.shape && in.cp == 1 && staged && in.recompute == Recompute::none) {  // what a pipeline rank allocates
    s.workspace = pipeline::stage_workspace_bytes(*in.shape, in.microbatch_size, seq, in.precision, tpo, moe_stage,
                                                  in.hw.host_kernels);
  } else if (in.shape && !staged) {
    if (in.tp == 1 && in.cp == 1 && in.recompute == Recompute::none) {  // the reference's runner
      s.workspace = runner_workspace_bytes(*in.shape, int(in.microbatch_size), int(seq), in.precision,
                                           moe_scope_tokens(in, seq), in.ep, in.hw.host_kernels);
    } else {  // the tensor-parallel runner (recompute at tp 1 too)
      s.workspace = tp::runner_workspace_bytes(*in.shape, tpo, int(in.microbatch_size), int(seq), in.precision,
                                               moe_scope_tokens(in, seq), in.ep, in.hw.host_kernels);
    }
  }
  if (in.shape && !in.dropout && pipe.part.pp == 1 && pipe.part.v == 1) {
    // The reference layout on one stage: what the tensor- and
    // context-parallel rank (and, at tp 1, the reference runner) declares and
    // allocates, exactly.
    tp::TpShape x = tp::make_shape(*in.shape, in.tp, in.sp, in.recompute, in.microbatch_size, seq, in.precision);
    x.cp = in.cp;
    x.algo = in.cp_algo;
    x.moe_scope_tokens = moe_scope_tokens(in, seq);
    x.ep = in.ep;
    x.moe_on_device = !in.hw.host_kernels;
    s.activations = tp::activation_bytes(x);
  } else if (in.shape && !in.dropout && in.cp == 1 && in.recompute == Recompute::none) {
    // The reference layout in pipeline stages: the chunks' bytes a stage
    // declares and allocates (impl/pipeline/stage.h, tensor_parallel/cost.h),
    // times the live (microbatch, chunk) units of the schedule.
    s.activations = pipeline::stage_activation_peak(
        in.schedule, pipe.cfg,
        pipeline::chunk_bytes_table(*in.shape, pipe.part, in.microbatch_size, seq, in.precision, tpo,
                                    in.schedule == pipeline::ScheduleKind::zb_h1, moe_stage),
        rank);
  } else if (in.shape) {
    const ModelConfig& mc = *in.shape;
    ActivationShape x{in.microbatch_size, seq, mc.C, mc.NH, in.tp, in.cp, in.sp, in.dropout,
                      elem_bytes(in.precision)};
    x.algo = in.cp_algo;
    const int64_t units_held = pipe.in_flight[size_t(rank)];
    s.activations = units_held * max_chunk_layers(pipe.part, rank) * layer_activation_bytes(x, in.recompute);
    if (pipe.part.at(rank, 0).embedding) s.activations += units_held * first_stage_extra_bytes(x);
    if (pipe.part.at(rank, pipe.part.v - 1).head) s.activations += last_stage_extra_bytes(x, mc.V);
  }
  if (units_out) *units_out = std::move(units);
  return s;
}

void add_row(std::vector<CommRow>& out, const char* group, const char* phase, const char* op, int64_t n,
             int64_t calls, int64_t bytes, bool inter) {
  if (n <= 1 || calls <= 0) return;
  out.push_back({group, phase, op, n, calls, bytes, bus_bytes(op, n, double(bytes)), inter, 0.0});
}

// TP, CP and PP traffic of one pipeline rank over a step of m microbatches.
void model_parallel_comm(const PlanInput& in, const dp::DataAxis& axis, const Pipe& pipe, int rank, int64_t seq,
                         std::vector<CommRow>& out) {
  const ModelConfig& mc = *in.shape;
  const int64_t m = pipe.cfg.microbatches, e = elem_bytes(in.precision), b = in.microbatch_size;
  const int64_t sl = seq / in.cp;
  int64_t layers = 0;
  for (int c = 0; c < pipe.part.v; ++c) layers += pipe.part.at(rank, c).num_blocks;
  const bool first = pipe.part.at(rank, 0).embedding, last = pipe.part.at(rank, pipe.part.v - 1).head;
  const int64_t R = in.ranks_per_node;
  if (in.tp > 1) {
    // The tensor axis's own figures (impl/tensor_parallel/cost.h): the layers
    // this rank holds, the vocabulary-parallel embedding on the first stage,
    // the LM head and cross-entropy on the last, per microbatch.
    const bool inter = spans(in.tp, R);
    const tp::TpShape x = tp::make_shape(mc, in.tp, in.sp, in.recompute, b, sl, in.precision);
    const tp::TpPieceComm lc = tp::layer_comm(x), ec = tp::embedding_comm(x), hc = tp::head_comm(x);
    for (int pass = 0; pass < 2; ++pass) {
      auto of = [&](const tp::TpPieceComm& c) { return pass ? c.bwd : c.fwd; };
      const tp::TpPass l = of(lc), em = of(ec), hd = of(hc);
      auto row = [&](const char* op, tp::TpCalls tp::TpPass::*f) {
        const int64_t calls = m * (layers * (l.*f).calls + (first ? (em.*f).calls : 0) + (last ? (hd.*f).calls : 0));
        const int64_t bytes = m * (layers * (l.*f).bytes + (first ? (em.*f).bytes : 0) + (last ? (hd.*f).bytes : 0));
        add_row(out, "tp", pass ? "bwd" : "fwd", op, in.tp, calls, bytes, inter);
      };
      row("all_reduce", &tp::TpPass::all_reduce);
      row("all_gather", &tp::TpPass::all_gather);
      row("reduce_scatter", &tp::TpPass::reduce_scatter);
    }
    if (mc.moe.experts > 0) {  // MoE blocks: no dense MLP all-reduce; the experts' rows each way instead
      const int64_t n = m * mc.moe_layers(), El = mc.moe.experts / in.ep;
      const int64_t rows = ep::balanced_rows(mc, b * sl, moe_scope_tokens(in, seq));  // a balanced router's, per block
      for (CommRow& r : out)
        if (r.group == "tp" && r.op == "all_reduce" && (r.phase == "fwd" || r.phase == "bwd")) {
          r.calls += n * (El - 1);
          r.bytes += n * (rows * mc.C * e - b * sl * mc.C * e);
          r.bus_bytes = double(r.bytes) * dp::bus_factor(dp::Coll::all_reduce, in.tp);
        }
    }
    // Once per step: the norm's partial sum; with SP the replicated
    // parameters' gradients this rank holds (its 1/g share when sharded).
    const int64_t g = std::max<int64_t>(1, dp::shard_group_size(axis));
    const int64_t held = dp::ceil_div(tp::replicated_params(mc, layers, first, last), g);
    // A pipeline rank sums its norm over the whole world instead (pp_scalar).
    const int64_t norm = in.pp > 1 ? -8 : 0;
    add_row(out, "tp", "step", "all_reduce", in.tp, in.sp ? 2 : 1, tp::step_bytes(in.sp, held, int(e)) + norm, inter);
  }
  if (in.cp > 1) {
    // The context axis's own figures (impl/context_parallel/cost.h): ring's
    // K/V and dK/dV sends or Ulysses' all-to-alls, per layer and microbatch.
    const bool inter = spans(int64_t(in.tp) * in.cp, R);
    tp::TpShape x = tp::make_shape(mc, in.tp, in.sp, in.recompute, b, seq, in.precision);
    x.cp = in.cp;
    x.algo = in.cp_algo;
    const cp::CpLayerComm c = cp::layer_comm(tp::attn_shape(x), in.recompute);
    const int64_t n = m * layers;
    add_row(out, "cp", "fwd", "send_recv", in.cp, n * c.fwd_send.calls, n * c.fwd_send.bytes, inter);
    add_row(out, "cp", "bwd", "send_recv", in.cp, n * c.bwd_send.calls, n * c.bwd_send.bytes, inter);
    add_row(out, "cp", "fwd", "all_to_all", in.cp, n * c.fwd_a2a.calls, n * c.fwd_a2a.bytes, inter);
    add_row(out, "cp", "bwd", "all_to_all", in.cp, n * c.bwd_a2a.calls, n * c.bwd_a2a.bytes, inter);
  }
  if (in.pp > 1) {
    const bool inter = R > 0 && int64_t(in.tp) * in.cp * in.dp >= R;
    // Megatron's scatter/gather: with SP each tp rank sends its 1/t of the boundary.
    // (SP: the microbatch's b*s tokens split over tp, as the stages send them.)
    const int64_t boundary = in.sp ? pipeline::boundary_bytes(1, b * sl / in.tp, mc.C, e)
                                   : pipeline::boundary_bytes(b, sl, mc.C, e);
    const pipeline::P2PVolume vol = pipeline::p2p_per_step(pipe.cfg, boundary);
    const int64_t sent = vol.send_bytes[size_t(rank)];
    const int64_t fwd_msgs = m * (pipe.part.v - (rank == in.pp - 1 ? 1 : 0));
    add_row(out, "pp", "fwd", "send_recv", in.pp, fwd_msgs, fwd_msgs * boundary, inter);
    add_row(out, "pp", "bwd", "send_recv", in.pp, sent / boundary - fwd_msgs, sent - fwd_msgs * boundary, inter);
    if (first || last) {
      const int64_t tied = pipeline::tied_embedding_grad_bytes((mc.V + in.tp - 1) / in.tp, mc.C,
                                                               dp::bytes_per_param(in.precision).grad, in.pp);
      add_row(out, "embedding", "step", "all_reduce", 2, 1, tied, R > 0 && spans(world_of(in), R));
    }
  }
}

// The mixture-of-experts blocks among a stage slice's blocks.
int64_t moe_blocks(const ModelConfig& m, const pipeline::StageSlice& sl) {
  int64_t n = 0;
  for (int b = sl.first_block; b < sl.first_block + sl.num_blocks; ++b) n += m.is_moe(b);
  return n;
}

// Non-GEMM bytes per step of pipeline rank `rank`: its microbatches' layers
// (one more forward of them under full recomputation), embedding and head,
// and its optimizer step over the parameters it updates on the device; and
// of those, the layers' LayerNorms and residual adds and the optimizer step's
// (each timed at its own rate).
struct RankBytes {
  double total = 0, shared = 0, optimizer = 0, buffer = 0;
};
RankBytes rank_memory_bytes(const PlanInput& in, const Pipe& pipe, const PlanResult& r, int rank) {
  const ModelConfig& mc = *in.shape;
  const ActivationShape x{in.microbatch_size, r.seq, mc.C, mc.NH, in.tp, in.cp, in.sp, in.dropout,
                          elem_bytes(in.precision)};
  const double recompute = in.recompute == Recompute::full ? 4.0 / 3 : 1;
  double per_micro = 0, shared = 0;
  for (int c = 0; c < pipe.part.v; ++c) {
    const pipeline::StageSlice& sl = pipe.part.at(rank, c);
    per_micro += double(sl.num_blocks) * double(layer_traffic_bytes(x)) * recompute;
    shared += double(sl.num_blocks) * double(layer_shared_traffic_bytes(x)) * recompute;
    per_micro += double(moe_blocks(mc, sl)) * double(moe_layer_extra_traffic_bytes(x, mc.moe)) * recompute;
    if (sl.embedding) per_micro += double(embedding_traffic_bytes(x));
    if (sl.head) per_micro += double(head_traffic_bytes(x, mc.V));
  }
  const dp::BytesPerParam b = dp::bytes_per_param(in.precision);
  const double stepped = double(r.stages[size_t(rank)].optimizer) / double(b.optimizer);  // updated on the device
  // Reads params (the master is in the state when mixed), grads and states;
  // writes params and states.
  const bool mixed = in.precision == Precision::bf16_mixed;
  const double per_param = double((mixed ? 0 : b.param) + b.grad + b.optimizer + b.param + b.optimizer);
  const double buffer = double(r.stages[size_t(rank)].local_traffic);
  return {per_micro * double(r.microbatches) + stepped * per_param + buffer, shared * double(r.microbatches),
          stepped * per_param, buffer};
}

}  // namespace

double table_gflops(const std::vector<GemmRate>& table, int64_t m, int64_t n, int64_t k) {
  const GemmRate* best = nullptr;
  double best_d = 0;
  for (const GemmRate& g : table) {
    const double a = std::log(double(g.m) / double(m)), b = std::log(double(g.n) / double(n)),
                 c = std::log(double(g.k) / double(k)), d = a * a + b * b + c * c;
    if (!best || d < best_d) {
      best = &g;
      best_d = d;
    }
  }
  return best ? best->gflops : 0;
}

double async_call_cost_us(const std::vector<AsyncCallCost>& t, double compute_us) {
  if (t.empty()) return 0;
  if (!(compute_us > t.front().compute_us)) return t.front().cost_us;
  if (compute_us >= t.back().compute_us) return t.back().cost_us;
  size_t i = 1;
  while (t[i].compute_us < compute_us) ++i;
  const double f = std::log(compute_us / t[i - 1].compute_us) / std::log(t[i].compute_us / t[i - 1].compute_us);
  return t[i - 1].cost_us + f * (t[i].cost_us - t[i - 1].cost_us);
}

double ring_steps(std::string_view op, int64_t n) {
  return op == "all_reduce" ? 2.0 * double(n - 1) : op == "send_recv" ? 1.0 : double(n - 1);
}

double compute_scale_for(const PlanResult& est, double measured_s) {
  const double scaled = est.step_s - est.buffer_s;
  return scaled > 0 && measured_s > est.buffer_s ? (measured_s - est.buffer_s) / scaled : measured_s / est.step_s;
}

double corun_factor(double scale, int64_t at, double copies) {
  if (at < 2) return 1;
  const double w = std::clamp((copies - 1) / double(at - 1), 0.0, 1.0);
  return 1 + (scale - 1) * w;
}

double bus_bytes(std::string_view op, int64_t n, double bytes) {
  return op == "send_recv"    ? bytes
         : op == "all_reduce" ? bytes * dp::bus_factor(dp::Coll::all_reduce, n)
                              : bytes * dp::bus_factor(dp::Coll::all_gather, n);
}

PlanResult plan(const PlanInput& in) {
  check_input(in);
  PlanResult r;
  r.world = world_of(in);
  r.params_total = in.shape ? in.shape->num_params() : in.params;
  r.seq = in.seq > 0 ? in.seq : in.shape ? in.shape->maxT : 1024;
  if (in.shape)
    require(r.seq <= in.shape->maxT, "--seq: must be <= the model's context length (" +
                                         std::to_string(in.shape->maxT) + ")");
  require(!in.shape || in.shape->moe.experts == 0 ||
              (in.cp == 1 && (in.tp == 1 || (in.pp == 1 && !in.sp && in.recompute == Recompute::none))),
          "--model: " + (in.shape ? in.shape->name : std::string()) +
              " is a mixture-of-experts model: the planner models it under data, expert and pipeline parallel, and "
              "tensor parallel (no sp or recompute) x data and expert parallel (tp with pp, and cp, with MoE are not "
              "implemented)");
  require(!in.shape || in.shape->moe.experts == 0 || in.pp == 1 ||
              in.schedule == pipeline::ScheduleKind::gpipe || in.schedule == pipeline::ScheduleKind::one_f_one_b ||
              in.schedule == pipeline::ScheduleKind::interleaved,
          "--schedule: " + std::string(pipeline::schedule_name(in.schedule)) +
              " with a mixture-of-experts model is not implemented (MoE stages run gpipe, 1f1b, interleaved)");
  require(in.ep >= 1, "--ep: must be >= 1 (got " + std::to_string(in.ep) + ")");
  if (in.ep > 1) {
    require(in.shape && in.shape->moe.experts > 0,
            "--ep: expert parallel needs a mixture-of-experts model (--model tiny-moe or a [moe] config)");
    require(in.shape->moe.experts % in.ep == 0, "--ep: must divide the " + std::to_string(in.shape->moe.experts) +
                                                    " experts, got " + std::to_string(in.ep));
    require(in.dp % in.ep == 0, "--ep: must divide --dp (" + std::to_string(in.dp) + "), got " + std::to_string(in.ep));
  }
  require(r.seq % in.cp == 0, "--cp: must divide the sequence length (" + std::to_string(r.seq) + ")");
  if (in.shape && in.cp > 1 && in.cp_algo == CpAlgo::ulysses) {
    const int heads = in.shape->NH / in.tp;
    require(heads % in.cp == 0, "--cp: ulysses shards the heads over cp: heads / tp = " + std::to_string(heads) +
                                    " is not divisible by cp" + std::to_string(in.cp) + "; use cp_algo=ring");
  }
  require(!in.sp || r.seq / in.cp % in.tp == 0, "--sp: tp must divide the per-rank sequence length");
  const int64_t per_step = int64_t(in.dp) * in.microbatch_size;
  r.global_batch = in.global_batch > 0 ? in.global_batch : per_step * in.pp;
  require(r.global_batch % per_step == 0, "--global-batch: must be a multiple of dp * microbatch-size (" +
                                              std::to_string(per_step) + ")");
  r.microbatches = r.global_batch / per_step;
  require(r.microbatches <= (int64_t(1) << 30), "--global-batch: too many microbatches per replica");

  Pipe pipe;
  pipe.cfg = {in.pp, int(r.microbatches), in.virtual_stages, 1};
  try {
    pipeline::check_config(in.schedule, pipe.cfg);
  } catch (const InputError& e) {
    throw InputError(std::string(e.what()) + " (microbatches = global-batch / (dp * microbatch-size))");
  }
  pipe.part = pipeline::partition_layers(in.shape ? in.shape->L : in.pp * in.virtual_stages, in.pp,
                                         in.virtual_stages);
  pipe.in_flight = pipeline::declared_peak_in_flight(in.schedule, pipe.cfg);
  if (in.shape && pipe.staged()) {
    pipeline::ScheduleConfig bounded = pipe.cfg;
    bounded.microbatches = std::min(bounded.microbatches, pipeline::comm_peak_microbatches(pipe.cfg));
    pipe.comm_schedule = pipeline::make_schedule(in.schedule, bounded);
    if (!in.hw.host_kernels) pipe.comm_schedule = pipeline::posted_without_tags(std::move(pipe.comm_schedule), "nccl");
  }

  // Gradients are reduced and states sharded over the dp x cp ranks that hold
  // the same parameters (Megatron-LM's data-parallel-with-context group).
  dp::DataAxis axis;
  axis.dp = int64_t(in.dp) * in.cp;
  axis.shard = in.shard;
  axis.shard_group = in.hsdp_group;
  axis.offload = in.offload;
  axis.precision = in.precision;
  axis.ranks_per_node = in.ranks_per_node;
  axis.stride = in.tp;
  axis.grad_accum = r.microbatches;
  axis.on_device = !in.hw.host_kernels;

  std::optional<ep::StateCosts> eps;
  const bool moe_stages = in.shape && in.shape->moe.experts > 0 && pipe.staged();
  if (moe_stages) {  // the pipeline executor's two components per stage (impl/pipeline/executor.h)
    require(r.global_batch <= INT32_MAX && r.seq <= INT32_MAX && in.ranks_per_node <= INT32_MAX,
            "--global-batch: mixture-of-experts pipeline plans take at most 2^31-1 sequences (got " +
                std::to_string(r.global_batch) + ")");
    const dp::DpOptions eo = ep::expert_options(ep_spec(in, r.seq, r.microbatches, r.global_batch));
    pipe.experts = dp::data_axis(eo, in.precision, int(r.microbatches));
    pipe.experts->on_device = !in.hw.host_kernels;
  } else if (in.ep > 1) {
    // The expert-parallel rank's own cost functions take a run spec (32-bit sizes).
    require(r.global_batch <= INT32_MAX && r.seq <= INT32_MAX && in.ranks_per_node <= INT32_MAX,
            "--global-batch: expert parallel plans take at most 2^31-1 sequences (got " +
                std::to_string(r.global_batch) + ")");
    const RunSpec spec = ep_spec(in, r.seq, r.microbatches, r.global_batch);
    ep::validate(spec);
    eps = ep::state_costs(spec);
  }
  std::vector<int64_t> units, worst_units;
  for (int rank = 0; rank < in.pp; ++rank) {
    r.stages.push_back(rank_memory(in, axis, pipe, rank, r.seq, &units, eps ? &*eps : nullptr));
    if (rank == 0 || r.stages.back().device_total() > r.worst.device_total()) {
      r.worst = r.stages.back();
      worst_units = std::move(units);
    }
  }
  std::vector<dp::CollCost> dcomm = eps ? eps->dense_comm : dp::comm_per_step(worst_units, axis);
  if (eps) dcomm.insert(dcomm.end(), eps->expert_comm.begin(), eps->expert_comm.end());
  for (const dp::CollCost& c : dcomm)
    add_row(r.comm, c.group.c_str(), c.phase.c_str(), std::string(dp::coll_name(c.op)).c_str(), c.group_size,
            c.calls, c.bytes, c.inter_node);
  // MoE stages: the worst rank's experts over edp, and its MoE layers below.
  const int moe_layers = moe_stages ? int(stage_moe(*in.shape, pipe.part, r.worst.stage, in.ep).experts.size())
                         : in.shape ? in.shape->moe_layers() : 0;
  if (moe_stages) {
    std::vector<pipeline::StageUnitUse> uses;
    for (int64_t u : stage_moe(*in.shape, pipe.part, r.worst.stage, in.ep).experts) uses.push_back({u, 1, 1});
    for (const dp::CollCost& c : pipeline::stage_dp_comm_per_step(uses, *pipe.experts, int(r.microbatches)))
      add_row(r.comm, ("e" + c.group).c_str(), c.phase.c_str(), std::string(dp::coll_name(c.op)).c_str(),
              c.group_size, c.calls, c.bytes, c.inter_node);
  }
  if (eps || (moe_stages && in.ep > 1)) {  // the counts, dispatch and combine forward; dispatch and combine backward (balanced router's rows)
    const int64_t n = r.microbatches * moe_layers;
    const int64_t rows = ep::balanced_rows(*in.shape, in.microbatch_size * r.seq, moe_scope_tokens(in, r.seq));
    const int64_t both = ep::a2a_bytes(*in.shape, n, n * rows, n * rows, elem_bytes(in.precision));
    const int64_t bwd = ep::a2a_bytes(*in.shape, 0, n * rows, n * rows, elem_bytes(in.precision)) / 2;
    // An ep group is ep consecutive ranks: it spans nodes when a node holds fewer.
    const bool inter = in.ranks_per_node > 0 && in.ranks_per_node < in.ep;
    add_row(r.comm, "ep", "fwd", "all_to_all", in.ep, 3 * n, both - bwd, inter);
    add_row(r.comm, "ep", "bwd", "all_to_all", in.ep, 2 * n, bwd, inter);
  }
  if (in.shape) model_parallel_comm(in, axis, pipe, r.worst.stage, r.seq, r.comm);
  if (moe_scope_tokens(in, r.seq) > 0 && moe_layers > 0) {  // routing counts gathered and probability sums reduced, per MoE block
    const MoeConfig& c = in.shape->moe;
    const int64_t n = r.microbatches * moe_layers;
    add_row(r.comm, "moe", "fwd", "all_gather", in.dp, n, n * in.dp * c.top_k * c.experts * 8, false);
    add_row(r.comm, "moe", "fwd", "all_reduce", in.dp, n, n * c.experts * 8, false);
  }

  const int64_t tokens = r.global_batch * r.seq;
  if (in.shape) {
    const Flops f = iteration_flops(*in.shape, r.global_batch, r.seq, in.recompute);
    r.model_flops = to_double(f.model);
    r.hardware_flops = to_double(f.hardware);
  } else {  // Kaplan et al. 2020: C = 6 N D; full recomputation adds a forward, 2 N D
    r.flops_exact = false;
    r.model_flops = 6.0 * double(r.params_total) * double(tokens);
    r.hardware_flops = (in.recompute == Recompute::full ? 8.0 : 6.0) * double(r.params_total) * double(tokens);
  }
  // Backward = 2x forward, split evenly into B and W (zero-bubble); full
  // recomputation adds a forward to B.
  const pipeline::Costs costs{1.0, in.recompute == Recompute::full ? 2.0 : 1.0, 1.0, 0.0};
  const pipeline::DeclaredBubble bubble = pipeline::declared_bubble(in.schedule, pipe.cfg, costs);
  require(bubble.over_ideal.has_value(), "--schedule: no declared bubble for these costs");
  r.bubble_over_ideal = *bubble.over_ideal;
  r.bubble_formula = bubble.formula;
  if (in.hw.peak_tflops <= 0) return r;

  r.timed = true;
  const double peak = in.hw.peak_tflops * 1e12 * double(r.world);
  r.gemm_efficiency = in.hw.gemm_efficiency;
  const bool attn_timed = in.shape && in.hw.attention_fwd_s > 0 && in.hw.attention_bwd_s > 0;
  // A rank's GEMMs (tp and cp shards of the whole model's) at the measured
  // rates; a measured attention core's own GEMMs are in its time instead.
  if (in.shape && !in.hw.gemm_rates.empty())
    r.gemm_efficiency = gemm_efficiency(
        rank_gemms(*in.shape, in.microbatch_size, r.seq, in.tp, in.cp, !attn_timed, in.ep),
        [&](const GemmShape& g) { return table_gflops(in.hw.gemm_rates, g.m, g.n, g.k); }, in.hw.peak_tflops * 1e12);
  const double achieved = peak * r.gemm_efficiency;
  // Memory-bound bytes, of which the LayerNorms' and residual adds' and the
  // optimizer step's each at their own rate when one is given.
  // The data-parallel buffers' time at their own rate (0 without one: they
  // are then in the average's bytes).
  auto buffer_time = [&](const RankBytes& b) {
    return in.hw.mem_bw_GBps > 0 && in.hw.buffer_mem_bw_GBps > 0 ? b.buffer / (in.hw.buffer_mem_bw_GBps * 1e9) : 0.0;
  };
  auto memory_s = [&](const RankBytes& b) {
    if (!(in.hw.mem_bw_GBps > 0)) return 0.0;
    const double mem = in.hw.mem_bw_GBps * 1e9;
    const double shared = in.hw.shared_mem_bw_GBps > 0 ? b.shared : 0,
                 opt = in.hw.optimizer_mem_bw_GBps > 0 ? b.optimizer : 0,
                 buf = in.hw.buffer_mem_bw_GBps > 0 ? b.buffer : 0;
    return (b.total - shared - opt - buf) / mem + (shared > 0 ? shared / (in.hw.shared_mem_bw_GBps * 1e9) : 0) +
           (opt > 0 ? opt / (in.hw.optimizer_mem_bw_GBps * 1e9) : 0) + buffer_time(b);
  };
  // The share of the model's FLOPs the rank whose compute sets the pace does,
  // times pp: 1 without a pipeline. Pipeline stages differ (the last holds the
  // LM head, layers need not split evenly): the slowest stage, GEMMs and
  // memory-bound kernels together, sets the pace of every microbatch. With a
  // measured attention core (Hardware::attention_fwd_s), its FLOPs and softmax
  // traffic leave the rates' terms and its time per block and microbatch
  // joins them.
  const double attn_fwds = in.recompute == Recompute::none ? 1 : 2;
  struct StageCost {
    double flop_share = 1;  // of the stage's hardware FLOPs, the attention core's included
    double share = 1;       // of those the rates time
    RankBytes bytes;
    double attn_fwd_s = 0, attn_s = 0, attn_model_flops = 0;
  };
  auto stage_cost = [&](int64_t blocks, double share, RankBytes bytes) {
    StageCost c{share, share, bytes, 0, 0, 0};
    if (!attn_timed) return c;
    const double mb = double(r.microbatches);
    c.attn_fwd_s = double(blocks) * mb * in.hw.attention_fwd_s;
    c.attn_s = double(blocks) * mb * (attn_fwds * in.hw.attention_fwd_s + in.hw.attention_bwd_s);
    // Per rank of the stage, scaled like the stage's FLOPs (hardware_flops * share / world).
    const double pp = double(in.pp);
    c.share -= to_double(attention_core_flops(*in.shape, r.global_batch, r.seq, in.recompute, blocks)) * pp /
               r.hardware_flops;
    c.attn_model_flops = to_double(attention_core_flops(*in.shape, r.global_batch, r.seq, Recompute::none, blocks)) *
                         pp;
    const ModelConfig& mc = *in.shape;
    const ActivationShape x{in.microbatch_size, r.seq, mc.C, mc.NH, in.tp, in.cp, in.sp, in.dropout,
                            elem_bytes(in.precision)};
    c.bytes.total -= double(blocks) * mb * double(layer_softmax_traffic_bytes(x)) *
                     (in.recompute == Recompute::full ? 4.0 / 3 : 1);
    return c;
  };
  auto stage_time = [&](const StageCost& c) {
    return r.hardware_flops * c.share / achieved + memory_s(c.bytes) + c.attn_s;
  };
  // Unstaged (pp = 1): the one rank holds every block.
  StageCost pace = stage_cost(in.shape ? in.shape->L : 0, 1,
                              in.shape ? rank_memory_bytes(in, pipe, r, r.worst.stage) : RankBytes{});
  if (in.shape && pipe.staged()) {
    double slowest = -1;
    for (int rank = 0; rank < in.pp; ++rank) {
      int64_t blocks = 0, moe = 0;
      bool head = false;
      for (int c = 0; c < pipe.part.v; ++c) {
        const pipeline::StageSlice& chunk = pipe.part.at(rank, c);
        blocks += chunk.num_blocks;
        moe += moe_blocks(*in.shape, chunk);
        head = head || chunk.head;
      }
      const double share = to_double(stage_flops(*in.shape, r.global_batch, r.seq, in.recompute, blocks, head,
                                                 moe).hardware) *
                           double(in.pp) / r.hardware_flops;
      const StageCost c = stage_cost(blocks, share, rank_memory_bytes(in, pipe, r, rank));
      const double t = stage_time(c);
      if (t > slowest) slowest = t, pace = c;
    }
  }
  r.memory_bytes = pace.bytes.total;
  r.memory_s = memory_s(pace.bytes);
  // The data-parallel buffers' rate was measured as a step streams them
  // (sweep_plan.cc measure_memory_bound), so compute_scale, which a DDP step
  // calibrates for what the kernels' rates miss, leaves their time alone.
  r.buffer_s = buffer_time(pace.bytes);
  // The node's ranks computing side by side (Hardware::corun_scale).
  const int64_t world = int64_t(in.dp) * in.tp * in.cp * in.pp,
                together = in.ranks_per_node > 0 ? std::min(world, in.ranks_per_node) : world;
  r.corun = corun_factor(in.hw.corun_scale, in.hw.corun_ranks, double(together) / double(in.tp * in.pp));
  const double compute_scale = in.hw.compute_scale * r.corun;
  r.compute_s = (stage_time(pace) - r.buffer_s) * compute_scale + r.buffer_s;
  // Time-shared cores: the critical path runs at a whole core, the node's work
  // at its share; the bubble is what the first exceeds the second by.
  r.bubble_s = in.hw.core_share < 1
                   ? std::max(0.0, r.compute_s * in.hw.core_share * (1 + r.bubble_over_ideal) - r.compute_s)
                   : r.compute_s * r.bubble_over_ideal;
  // Forward is a third of the GEMM work and of the layers' memory traffic.
  const double fwd_s =
                   ((r.model_flops * pace.flop_share - pace.attn_model_flops) / 3.0 / achieved + r.memory_s / 3.0 +
                    pace.attn_fwd_s) *
                   compute_scale,
               bwd_s = r.compute_s - fwd_s;
  double hidden_fwd = 0, hidden_bwd = 0, exposed = 0;
  for (CommRow& c : r.comm) {
    c.time_s = row_time(c, in.hw);
    r.comm_s += c.time_s;
    if (attn_timed && c.group == "cp") continue;  // inside the measured attention core's time
    // Ulysses waits for each all-to-all; the ring posts its hop before the block compute.
    const bool overlappable = in.overlap &&
                              (c.group.rfind("dp", 0) == 0 || (c.group == "cp" && c.op == "send_recv")) &&
                              c.phase != "step";
    if (!overlappable) exposed += c.time_s;
    else (c.phase == "fwd" ? hidden_fwd : hidden_bwd) += c.time_s;
  }
  for (const CommRow& c : r.comm)
    if (async_call(c, in)) r.async_calls += c.calls;
  if (in.hw.core_share < 1 && r.async_calls > 0)
    r.async_cost_s = double(r.async_calls) *
                     async_call_cost_us(in.hw.async_call_cost, r.compute_s * 1e6 / double(r.async_calls)) * 1e-6;
  r.exposed_comm_s = exposed + std::max(0.0, hidden_fwd - fwd_s) + std::max(0.0, hidden_bwd - bwd_s) + r.async_cost_s;
  r.step_s = r.compute_s + r.bubble_s + r.exposed_comm_s;
  r.tokens_per_s = double(tokens) / r.step_s;
  r.mfu = r.model_flops / (r.step_s * peak);
  r.hfu = r.hardware_flops / (r.step_s * peak);
  return r;
}

}  // namespace pb::planner
