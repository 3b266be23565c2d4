// The planner's memory part: each pipeline rank's model states, comm
// buffers, workspace and activations from the axes' own cost functions
// (impl/data_parallel/cost.h, tensor_parallel/cost.h, pipeline/stage.h), and
// the non-GEMM bytes the time part charges.
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
#include "suites/planner/planner_parts.h"

namespace pb::planner::parts {
namespace {

// A pipeline rank of an MoE model: its dense units and its experts' (ep rank
// 0's; every ep rank holds as many), as the executor holds them (stage.h), on
// tp rank 0's shard (every tp rank's units have these sizes).
struct StageMoe {
  std::vector<int64_t> dense, experts;
};
StageMoe stage_moe(const ModelConfig& m, const pipeline::Partition& part, int rank, int ep, int tp) {
  const ParamLayout l(m, tp, 0);
  StageMoe out;
  for (const auto& u : pipeline::stage_units(l, part, rank).units) out.dense.push_back(u.size);
  for (const auto& u : pipeline::stage_experts(l, part, rank, ep, 0).units) out.experts.push_back(u.size);
  return out;
}


// The data-parallel components' own buffer traffic per step on pipeline rank
// `rank` (dp::local_traffic_bytes): the expert-parallel rank's two components,
// a stage's units as the executor uses them (and its experts), or the units
// in the microbatch runner's order.
int64_t dp_local_traffic(const PlanInput& in, const dp::DataAxis& axis, const Pipe& pipe, int rank,
                         const std::vector<int64_t>& units, const ep::StateCosts* ep_states) {
  if (ep_states) return ep_states->local_traffic;
  if (!in.shape || !pipe.staged() || (in.shape->llama() && !pipe.experts)) {  // dense llama stages: their units in order
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

// A dense llama plan on a GPU profile with eager kernels under zero3 on one
// stage: the layout of torchtitan's published FSDP runs (PyTorch FSDP2,
// configs/published/torchtitan_llama3.csv), whose peak is the CUDA caching
// allocator's reserve (torchtitan/metrics.py at 9dec370 reads
// memory_stats()["reserved_bytes.all.peak"]). Its comm buffers and the
// loss's allocator hole below are those runs' own, not the engine's
// (docs/planner.md, "Peak memory per GPU").
}  // namespace

bool fsdp2_device_plan(const PlanInput& in, const Pipe& pipe) {
  return !in.hw.host_kernels && in.eager_kernels && in.shape && in.shape->llama() && in.shape->moe.experts == 0 &&
         !pipe.experts && in.shard == dp::Shard::zero3 && in.dp > 1 && pipe.part.pp == 1 && pipe.part.v == 1;
}

namespace {

// FSDP2's buffers at the step's peak (the eager loss's backward), per rank,
// on such a plan (`units`: embedding, blocks, final norm + output):
//  - the root unit (tok_embeddings, final norm, output) gathered in its
//    pre-forward and kept gathered through backward: FSDP2 does not reshard
//    the root after forward (torch/distributed/_composable/fsdp/
//    _fsdp_state.py, FSDPState._lazy_init: "For the root, do not reshard
//    after forward since for training, the parameters would be freed and
//    all-gathered immediately");
//  - the last block gathered too: torchtitan passes reshard_after_forward =
//    int(layer_id) < len(model.layers) - 1 (torchtitan 9dec370,
//    torchtitan/parallelisms/parallelize_llama.py, apply_fsdp);
//  - the all-gather stream's own pool: foreach_all_gather allocates each
//    unit's flat all_gather_output (the unit's gathered size) and its inputs'
//    casts to param_dtype (the shard) on all_gather_copy_in_stream
//    (_fsdp_collectives.py), and the caching allocator serves a stream only
//    from blocks it freed on that stream (c10/cuda/CUDACachingAllocator.cpp:
//    blocks are keyed by stream), so that pool stays reserved at its own high
//    mark, the root's gather (the largest unit) with its inputs, beside the
//    default stream's peak.
// At the param dtype (bf16 under bf16-mixed: torchtitan's MixedPrecisionPolicy
// param_dtype). No dim-0 padding is added (exact where dp divides each
// parameter's rows, as on the published rows: 128256, 4096 and 14336 by 8
// and 128). The reduce-scatter's fp32 input is allocated on the default
// stream at each unit's post-backward, when the loss's blocks are free
// (FSDP2's foreach_reduce of late 2024: its copy-in on the current stream,
// then `unsharded_grads.clear()` and `reduce_scatter_stream.wait_stream`;
// earlier versions allocated it on the reduce-scatter stream), and its
// outputs, the sharded fp32 gradients, are the plan's gradient and master
// bytes (16 bytes per parameter per dp rank either way), so neither adds to
// the peak. NCCL's own buffers are allocated by NCCL, outside the caching
// allocator, so they are not in the reserve.
int64_t fsdp2_comm_bytes(const PlanInput& in, const std::vector<int64_t>& units) {
  const int64_t p = dp::bytes_per_param(in.precision).param, n = int64_t(units.size());
  const int64_t root = units.front() + units.back(), last_block = n > 2 ? units[size_t(n - 2)] : 0;
  return p * (root + last_block + root + root / in.dp);
}

// FSDP2's own copies per step on such a plan (StageMemory::local_traffic,
// timed as RankBytes::buffer), in place of the engine's
// (dp::local_traffic_bytes: the engine zero-fills its comm buffers; FSDP2
// allocates its with torch.empty, and torchtitan's zero_grad sets the
// gradients to None). Per unit of P parameters, shard S = P / dp, under
// torchtitan's MixedPrecisionPolicy (param_dtype bf16, reduce_dtype fp32:
// parallelize_llama.py at 1ea476e, config_manager.py at 3faaa1a and 9dec370),
// as torch/distributed/_composable/fsdp/_fsdp_collectives.py and
// _fsdp_param.py do it:
//  - each all-gather's copy-in (foreach_all_gather, on
//    all_gather_copy_in_stream): the fp32 shard cast to bf16
//    (FSDPParam.all_gather_inputs, _to_dtype_if_needed: reads 4, writes 2
//    bytes per shard element), then torch._foreach_copy_ into the all-gather
//    input, a view into the flat output (reads 2, writes 2): 10 S bytes;
//  - each all-gather's copy-out (foreach_all_gather_copy_out, on the current,
//    compute, stream after it waits for the all-gather):
//    torch.split_with_sizes_copy of the flat output into the parameters' own
//    all_gather_outputs, read and written at bf16: 4 P bytes;
//  - each reduce-scatter's copy-in (foreach_reduce_scatter_copy_in:
//    torch.cat, later torch._chunk_cat, of the unsharded bf16 gradients into
//    the fp32 reduce-scatter input): reads 2, writes 4 bytes per parameter,
//    6 P bytes. Its output is the fp32 shard's gradient as it is (the
//    sharded parameter's dtype, so _to_dtype_if_needed copies nothing; an
//    fp32 reduce divides in NCCL's AVG, no division kernel:
//    _fsdp_param_group.py _init_grad_divide_factors), added to the held one
//    from the second microbatch on (two reads and a write of the shard).
// Gathers: every unit in forward and the blocks resharded after forward
// (all but the last, torchtitan's apply_fsdp) again in backward, as the
// comm rows count them (planner_comm.cc); one reduce-scatter per unit per
// microbatch. All of it is the rank's memory-bound traffic: the copy-out
// runs on the compute stream (and so does the reduce-scatter's copy-in in
// later versions of foreach_reduce, which run it before
// `reduce_scatter_stream.wait_stream`; the early 2024 ones on the
// reduce-scatter stream); the all-gather's copy-in runs on its own stream
// beside compute, where it still contends for the same HBM. At dp 8 that is
// 4 + 10/8 bytes per parameter per gather and 6 per reduce-scatter.
int64_t fsdp2_local_traffic(const PlanInput& in, const dp::DataAxis& axis, const std::vector<int64_t>& units) {
  const int64_t p = dp::bytes_per_param(in.precision).param;  // the gathered (param_dtype) element
  const bool mixed = in.precision == Precision::bf16_mixed;
  const int64_t master = mixed ? 4 : p, reduce = mixed ? 4 : p;  // the shard's element; the reduce dtype's
  const int n = int(units.size());
  const std::vector<dp::UnitUse> uses =
      dp::unit_uses(units, axis, n > 3 ? dp::UnitRoles{1, n - 3, n - 1} : dp::UnitRoles::model(n));
  const int64_t m = axis.grad_accum;
  int64_t bytes = 0;
  for (const dp::UnitUse& u : uses) {
    const int64_t shard = (u.size + in.dp - 1) / in.dp, gathered = shard * in.dp;
    const int64_t copy_in = shard * ((mixed ? master + p : 0) + 2 * p), copy_out = gathered * 2 * p;
    const int64_t reduce_in = gathered * (p + reduce);
    bytes += m * (int64_t(u.fwd_uses + u.bwd_uses) * (copy_in + copy_out) + reduce_in) + (m - 1) * 3 * shard * master;
  }
  return bytes;
}

// A DDP rank's gradients in PyTorch autograd's .grad (PlanInput::
// grad_accum_autograd): `grads` bytes of gradients at the precision's
// element, re-counted at the gradient's bytes; per step (m - 1) in-place
// accumulations of 3 elements each and, with dp > 1, the all-reduce's flat
// bucket copied in, divided and copied back, 6.
int64_t autograd_grad_traffic(const PlanInput& in, const dp::DataAxis& axis, int64_t grads) {
  const int64_t g = dp::bytes_per_param(in.precision).grad, e = in.grad_reduce_bytes > 0 ? in.grad_reduce_bytes : g;
  const int64_t elements = grads / g;
  return elements * e * (3 * (axis.grad_accum - 1) + (in.dp > 1 ? 6 : 0));
}

// The comm buffers' peak of pipeline rank `rank` (s.comm): the expert-parallel
// rank's declared peak, the runner's unit protocol replayed, or a pipeline
// stage's gathers and gradients replayed in its schedule order; -1 when a
// sharded plan has no unit structure (no shape).
int64_t comm_peak(const PlanInput& in, const dp::DataAxis& axis, const Pipe& pipe, int rank, int64_t seq,
                  const std::vector<int64_t>& units, const ep::StateCosts* ep_states) {
  if (ep_states) return ep_states->comm_peak;
  if (!in.shape) return axis.shard != dp::Shard::none ? -1 : 0;  // no unit structure without a shape
  if (fsdp2_device_plan(in, pipe)) return fsdp2_comm_bytes(in, units);
  // The canonical unit order the runner visits: the protocol replayed, as
  // the conformance engine holds the measured peak to.
  // The llama family's dense stages (no pipeline layout for them yet): its
  // units in order; its MoE stages take the executor's layout below.
  if ((pipe.part.pp == 1 && pipe.part.v == 1) || (in.shape->llama() && !pipe.experts))
    return dp::comm_buffer_peak_bytes(units, axis);
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
  return pipeline::stage_comm_peak_bytes(pipe.comm_schedule, pipe.part, layout, rank, x);
}

// The tensor/context split of a plan as the tensor-parallel runner takes it.
tp::TpOptions tp_options(const PlanInput& in) {
  tp::TpOptions tpo;
  tpo.tp = in.tp;
  tpo.sp = in.sp;
  tpo.recompute = in.recompute;
  tpo.context.cp = in.cp;
  tpo.context.algo = in.cp_algo;
  return tpo;
}

// The workspace of pipeline rank `rank`: what a pipeline rank, the
// reference's runner or the tensor-parallel runner allocates (0 for shapes
// none of them runs as planned: -1).
int64_t workspace_bytes(const PlanInput& in, const Pipe& pipe, int64_t seq) {
  const tp::TpOptions tpo = tp_options(in);
  const bool staged = pipe.staged();
  const pipeline::MoeStage moe_stage{moe_scope_tokens(in, seq), in.ep, !in.hw.host_kernels};
  if (in.shape && in.shape->llama()) return -1;  // the llama family's runners' workspace: not modelled
  // (MoE stages: with sp, cp and recompute too, impl/pipeline/stage.h)
  const bool moe_stages = in.shape && in.shape->moe.experts > 0 && staged;
  if (in.shape && ((in.cp == 1 && in.recompute == Recompute::none) || moe_stages) && staged) {  // what a pipeline rank allocates
    return pipeline::stage_workspace_bytes(*in.shape, in.microbatch_size, seq, in.precision, tpo, moe_stage,
                                           in.hw.host_kernels);
  } else if (in.shape && !staged) {
    if (in.tp == 1 && in.cp == 1 && in.recompute == Recompute::none) {  // the reference's runner
      return runner_workspace_bytes(*in.shape, int(in.microbatch_size), int(seq), in.precision,
                                    moe_scope_tokens(in, seq), in.ep, in.hw.host_kernels);
    } else {  // the tensor-parallel runner (recompute at tp 1 too)
      return tp::runner_workspace_bytes(*in.shape, tpo, int(in.microbatch_size), int(seq), in.precision,
                                        moe_scope_tokens(in, seq), in.ep, in.hw.host_kernels);
    }
  }
  return -1;  // not modeled
}

// One block's bytes kept under op-level selective checkpointing
// (PlanInput::recompute_even_matmuls), per local token: the block's input
// (h), the odd matmuls' outputs (Llama: wq h/t, wv kv, w1 F/t, w2 h; GPT:
// the fused qkv 3h/t and fc1 4h/t) and the attention kernel's output (h/t)
// with its log-sum-exp (a/t fp32 values).
int64_t op_sac_layer_bytes(const ModelConfig& m, const ActivationShape& x) {
  const int64_t t = x.tp, e = x.elem_bytes, tokens = x.s / x.cp * x.b;
  const int64_t kv = m.llama() ? llama_kv_heads_per_rank(m, x.tp) * m.head_size() : 0;
  const int64_t kept = m.llama() ? x.h + x.h / t + kv + m.ffn / t + x.h + x.h / t
                                 : x.h + 3 * x.h / t + 4 * x.h / t + x.h / t;
  return tokens * (e * kept + 4 * x.a / t);
}

// The eager loss's allocator hole on a GPU (bytes reserved and free at the
// loss's backward): torchtitan's train.py (9dec370) computes
// cross_entropy(pred.flatten(0, 1).float(), labels) and then `del pred`, so
// the bf16 logits' block and the fp32 copy's are free and adjacent when the
// backward asks for two fp32 logit-sized blocks (NLL's gradient, then
// log-softmax's). The caching allocator serves a request from the smallest
// free block that fits and splits it (CUDACachingAllocator.cpp, get_free_block
// and should_split; with expandable_segments:True, which torchtitan's
// run_llama_train.sh sets, freed neighbours merge within the segment): the
// first fp32 request takes the merged block's front, the second no longer
// fits the bf16-sized rest and is mapped at the segment's end. So a bf16
// logits' worth, tokens x V/t x 2 bytes, is reserved and idle at the peak. Its
// sizes are whole 2 MiB pages on the rows (128256 x 16384 x 2 bytes), so the
// allocator's rounding of large requests (kRoundLarge, 2 MiB) adds nothing.
// One stage only: train.py's non-pipelined path (a pipeline schedule calls
// the loss itself).
int64_t eager_loss_hole_bytes(const ActivationShape& x, int64_t vocab) {
  return x.s / x.cp * x.b * ((vocab + x.tp - 1) / x.tp) * x.elem_bytes;
}

// The activations pipeline rank `rank` holds at its peak (-1: unknown, no
// shape or a layout not modeled).
int64_t activation_peak(const PlanInput& in, const Pipe& pipe, int rank, int64_t seq) {
  const tp::TpOptions tpo = tp_options(in);
  const pipeline::MoeStage moe_stage{moe_scope_tokens(in, seq), in.ep, !in.hw.host_kernels};
  int64_t a = -1;  // unknown (parameter count only)
  const bool llama = in.shape && in.shape->llama();  // the analytic count below (docs/planner.md)
  // FlashAttention keeps no scores (its output and a row statistic: the
  // selective count), nor does op-level checkpointing, which the runners
  // do not lay out: both take the analytic count below.
  const bool analytic = llama || in.flash_attention || in.recompute_even_matmuls;
  if (in.shape && !analytic && !in.dropout && pipe.part.pp == 1 && pipe.part.v == 1) {
    // The reference layout on one stage: what the tensor- and
    // context-parallel rank (and, at tp 1, the reference runner) declares and
    // allocates, exactly.
    tp::TpShape x = tp::make_shape(*in.shape, in.tp, in.sp, in.recompute, in.microbatch_size, seq, in.precision);
    x.cp = in.cp;
    x.algo = in.cp_algo;
    x.moe_scope_tokens = moe_scope_tokens(in, seq);
    x.ep = in.ep;
    x.moe_on_device = !in.hw.host_kernels;
    a = tp::activation_bytes(x);
  } else if (in.shape && !analytic && !in.dropout &&
             ((in.cp == 1 && in.recompute == Recompute::none) || in.shape->moe.experts > 0)) {
    // The reference layout in pipeline stages: the chunks' bytes a stage
    // declares and allocates (impl/pipeline/stage.h, tensor_parallel/cost.h),
    // times the live (microbatch, chunk) units of the schedule. MoE stages
    // (with sp, cp and recompute too): under full recompute the one MoeActs
    // the backward's rerun of an MoE block fills, beside them.
    a = pipeline::stage_activation_peak(
            in.schedule, pipe.cfg,
            pipeline::chunk_bytes_table(*in.shape, pipe.part, in.microbatch_size, seq, in.precision, tpo,
                                        in.schedule == pipeline::ScheduleKind::zb_h1, moe_stage),
            rank) +
        pipeline::moe_rerun_bytes(*in.shape, in.microbatch_size, seq, in.precision, tpo, moe_stage,
                                  rank_moe_blocks(*in.shape, pipe.part, rank) > 0);
  } else if (in.shape) {
    const ModelConfig& mc = *in.shape;
    ActivationShape x{in.microbatch_size, seq, mc.C, mc.NH, in.tp, in.cp, in.sp, in.dropout,
                      elem_bytes(in.precision)};
    x.algo = in.cp_algo;
    const int64_t units_held = pipe.in_flight[size_t(rank)];
    const Recompute kept =
        in.flash_attention && in.recompute == Recompute::none ? Recompute::selective : in.recompute;
    const int64_t layer = in.recompute_even_matmuls ? op_sac_layer_bytes(mc, x)
                          : llama                    ? llama_layer_activation_bytes(mc, x, kept)
                                                     : layer_activation_bytes(x, kept);
    a = units_held * max_chunk_layers(pipe.part, rank) * layer;
    if (pipe.part.at(rank, 0).embedding) a += units_held * first_stage_extra_bytes(x);
    if (pipe.part.at(rank, pipe.part.v - 1).head) {
      a += llama && in.eager_kernels ? last_stage_eager_extra_bytes(x, mc.V) : last_stage_extra_bytes(x, mc.V);
      if (llama && in.eager_kernels && !in.hw.host_kernels && x.elem_bytes < 4 && pipe.part.pp == 1 && pipe.part.v == 1)
        a += eager_loss_hole_bytes(x, mc.V);
    }
  }
  return a;
}

StageMemory rank_memory(const PlanInput& in, const dp::DataAxis& axis, const Pipe& pipe, int rank, int64_t seq,
                        std::vector<int64_t>* units_out, const ep::StateCosts* ep_states) {
  std::vector<int64_t> units =
      in.shape ? rank_param_units(*in.shape, in.tp, pipe.part, rank) : std::vector<int64_t>{in.params};
  std::optional<StageMoe> moe;
  if (pipe.experts) {  // MoE stages: the executor's own units (wte and wpe apart, blocks before their experts)
    moe = stage_moe(*in.shape, pipe.part, rank, in.ep, in.tp);
    units = moe->dense;
  }
  dp::ModelStateBytes ms = dp::model_state_bytes(units, axis);
  if (moe) {
    const dp::ModelStateBytes e = dp::model_state_bytes(moe->experts, *pipe.experts);
    ms.params += e.params, ms.grads += e.grads, ms.optimizer += e.optimizer, ms.optimizer_host += e.optimizer_host;
  }
  // PipeDream-2BW keeps two weight versions and their gradients (the
  // executor's declared states, pipeline/executor_step.cc).
  const int64_t versions = pipe.staged() && in.schedule == pipeline::ScheduleKind::pipedream_2bw ? 2 : 1;
  StageMemory s;
  s.stage = rank;
  s.params = ms.params * versions;
  s.grads = ms.grads * versions;
  s.optimizer = ms.optimizer;
  s.optimizer_host = ms.optimizer_host;
  if (ep_states) {  // the dense component over dp and this rank's experts over edp
    const dp::ModelStateBytes &d = ep_states->dense, &e = ep_states->experts;
    s.params = d.params + e.params;
    s.grads = d.grads + e.grads;
    s.optimizer = d.optimizer + e.optimizer;
    s.optimizer_host = d.optimizer_host + e.optimizer_host;
  }
  s.local_traffic = fsdp2_device_plan(in, pipe) ? fsdp2_local_traffic(in, axis, units)
                    : in.grad_accum_autograd ? autograd_grad_traffic(in, axis, s.grads)
                                             : dp_local_traffic(in, axis, pipe, rank, units, ep_states);
  s.comm = comm_peak(in, axis, pipe, rank, seq, units, ep_states);
  s.workspace = workspace_bytes(in, pipe, seq);
  s.activations = activation_peak(in, pipe, rank, seq);
  if (units_out) *units_out = std::move(units);
  return s;
}

}  // namespace

int64_t moe_scope_tokens(const PlanInput& in, int64_t seq) {
  return moe_capacity_ranks(in) > 1 ? in.microbatch_size * seq / in.cp * moe_capacity_ranks(in) : 0;
}

int64_t moe_capacity_ranks(const PlanInput& in) {
  if (!in.shape || in.shape->moe.experts == 0) return 1;
  // Global capacity over dp >= 2 joins the data ranks (dp::moe_shares_capacity);
  // the cp ranks of a data rank always share its microbatch (TpRank::context_moe_scope).
  const bool joint = in.shape->moe.capacity == MoeCapacity::global && in.dp > 1;
  return int64_t(joint ? in.dp : 1) * in.cp;
}

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
  s.mesh.cp = in.cp;  // the dense component over dp x cp, ep folded over it
  s.mesh.ranks_per_node = int(in.ranks_per_node);
  s.data.shard = in.shard;
  s.data.shard_group = int(in.hsdp_group);
  s.data.offload = in.offload;
  s.train.device = in.hw.host_kernels ? Device::cpu : Device::cuda;  // the ranks' states (offload's host copies)
  return s;
}

int64_t stage_moe_layers(const ModelConfig& m, const pipeline::Partition& part, int rank, int ep, int tp) {
  return int64_t(stage_moe(m, part, rank, ep, tp).experts.size());
}

std::vector<int64_t> stage_expert_units(const ModelConfig& m, const pipeline::Partition& part, int rank, int ep,
                                        int tp) {
  return stage_moe(m, part, rank, ep, tp).experts;
}

std::vector<int64_t> plan_memory(const PlanInput& in, const dp::DataAxis& axis, const Pipe& pipe,
                                 const ep::StateCosts* ep_states, PlanResult& r) {
  std::vector<int64_t> units, worst_units;
  for (int rank = 0; rank < in.pp; ++rank) {
    r.stages.push_back(rank_memory(in, axis, pipe, rank, r.seq, &units, ep_states));
    if (rank == 0 || r.stages.back().device_total() > r.worst.device_total()) {
      r.worst = r.stages.back();
      worst_units = std::move(units);
    }
  }
  return worst_units;
}

int64_t moe_blocks(const ModelConfig& m, const pipeline::StageSlice& sl) {
  int64_t n = 0;
  for (int b = sl.first_block; b < sl.first_block + sl.num_blocks; ++b) n += m.is_moe(b);
  return n;
}

int64_t rank_moe_blocks(const ModelConfig& m, const pipeline::Partition& part, int rank) {
  int64_t n = 0;
  for (int c = 0; c < part.v; ++c) n += moe_blocks(m, part.at(rank, c));
  return n;
}

}  // namespace pb::planner::parts

namespace pb::planner {

int64_t optimizer_step_bytes(OptimizerStep step, Precision precision) {
  switch (step) {
    case OptimizerStep::megatron_fp16:  // .float() 2 + 4, unscale 4 + 4, l2norm 4, FusedAdam 16 + 12, copy 4 + 2
      return (2 + 4) + (4 + 4) + 4 + (16 + 12) + (4 + 2);
    case OptimizerStep::torch_foreach:  // AdamW foreach 8 + 12 + 8 + 12 + 8 + 8 + 8 + 16, clip 4 + 8
      return (8 + 12 + 8 + 12 + 8 + 8 + 8 + 16) + (4 + 8);
    case OptimizerStep::composer:  // DecoupledAdamW (weight_decay 0) 8 + 12 + 8 + 12 + 8 + 8 + 8 + 16, FSDP clip 4 + 8
      return (8 + 12 + 8 + 12 + 8 + 8 + 8 + 16) + (4 + 8);
    case OptimizerStep::fused:
      break;
  }
  // Reads params (the master is in the state when mixed), grads and states;
  // writes params and states.
  const dp::BytesPerParam b = dp::bytes_per_param(precision);
  const bool mixed = precision == Precision::bf16_mixed;
  return (mixed ? 0 : b.param) + b.grad + b.optimizer + b.param + b.optimizer;
}

}  // namespace pb::planner

namespace pb::planner::parts {

RankBytes rank_memory_bytes(const PlanInput& in, const Pipe& pipe, const PlanResult& r, int rank) {
  const ModelConfig& mc = *in.shape;
  const ActivationShape x{in.microbatch_size, r.seq, mc.C, mc.NH, in.tp, in.cp, in.sp, in.dropout,
                          elem_bytes(in.precision)};
  // Full and op-level checkpointing run the blocks' memory-bound forward
  // again (the llama family's a third of its traffic: backward moves twice
  // the forward); selective the scores' kernels.
  const bool rerun = in.recompute == Recompute::full || in.recompute_even_matmuls;
  const double recompute = rerun ? 4.0 / 3 : 1;
  double layer = mc.llama() ? double(in.eager_kernels ? llama_layer_eager_traffic_bytes(mc, x, in.fused_norm)
                                                      : llama_layer_traffic_bytes(mc, x)) *
                                   recompute
                             : double(layer_traffic_bytes(x)) + (rerun ? double(layer_forward_traffic_bytes(x)) : 0.0);
  // Its kinds (RankBytes): the norms' and the scores' softmax's, rerun alike.
  const double norm_layer =
      mc.llama() ? double(in.eager_kernels ? llama_layer_eager_norm_traffic_bytes(x, in.fused_norm)
                                           : layer_norm_traffic_bytes(x)) *
                       recompute
                 : double(layer_norm_traffic_bytes(x)) + (rerun ? double(layer_norm_forward_traffic_bytes(x)) : 0.0);
  double softmax_layer = mc.llama() ? double(scores_softmax_traffic_bytes(x)) * recompute
                                    : double(scores_softmax_traffic_bytes(x)) +
                                          (rerun ? double(scores_softmax_forward_traffic_bytes(x)) : 0.0);
  if (in.recompute == Recompute::selective) {  // never with the other two (plan() refuses op with any)
    layer += double(layer_softmax_forward_traffic_bytes(x));
    softmax_layer += double(scores_softmax_forward_traffic_bytes(x));
  }
  const double shared_layer =
      double(layer_shared_traffic_bytes(x)) + (rerun ? double(layer_shared_forward_traffic_bytes(x)) : 0.0);
  // The llama family's RMSNorms as eager ops (no fused kernel, no Triton one):
  // their bytes are counted op by op, and timed at the eager chain's rate.
  const bool eager_norms = mc.llama() && in.eager_kernels && !in.fused_norm;
  double per_micro = 0, shared = 0, norm = 0, softmax = 0, loss = 0, eager_norm = 0;
  for (int c = 0; c < pipe.part.v; ++c) {
    const pipeline::StageSlice& sl = pipe.part.at(rank, c);
    per_micro += double(sl.num_blocks) * layer;
    shared += double(sl.num_blocks) * shared_layer;
    (eager_norms ? eager_norm : norm) += double(sl.num_blocks) * norm_layer;
    softmax += double(sl.num_blocks) * softmax_layer;
    per_micro += double(moe_blocks(mc, sl)) * double(moe_layer_extra_traffic_bytes(x, mc.moe)) * recompute;
    if (sl.embedding) per_micro += double(embedding_traffic_bytes(x));
    // Megatron-LM's forward_step builds the batch and masks for every chunk.
    if (in.train_loop == TrainLoop::megatron_lm)
      per_micro += double(megatron_batch_traffic_bytes(in.microbatch_size, r.seq, sl.head));
    if (sl.head) {
      const bool eager_head = in.loss == LossKernel::fused && in.eager_kernels && mc.llama();
      const int64_t head =
          in.loss == LossKernel::megatron_fp32 ? head_megatron_traffic_bytes(x, mc.V)
          : in.loss != LossKernel::fused
              ? head_flash_xentropy_traffic_bytes(x, mc.V, in.loss == LossKernel::composer_flash_xentropy)
          : eager_head ? head_eager_traffic_bytes(x, mc.V, in.fused_norm)
                       : head_traffic_bytes(x, mc.V);
      // The head's final norm; the rest of it is the loss over the vocabulary:
      // a cross-entropy kernel's (torch's log_softmax and nll_loss, flash-attn's
      // xentropy) except Megatron-LM's, a chain of eager elementwise ops and
      // reductions (max, sub_, exp, sum, div_, mul_: elementwise).
      const int64_t head_norm =
          eager_head ? head_eager_norm_traffic_bytes(x, in.fused_norm) : head_norm_traffic_bytes(x);
      per_micro += double(head);
      (eager_head && eager_norms ? eager_norm : norm) += double(head_norm);
      if (in.loss != LossKernel::megatron_fp32) loss += double(head - head_norm);
    }
  }
  const dp::BytesPerParam b = dp::bytes_per_param(in.precision);
  const double stepped = double(r.stages[size_t(rank)].optimizer) / double(b.optimizer);  // updated on the device
  const double per_param = double(optimizer_step_bytes(in.optimizer_step, in.precision));
  const double buffer = double(r.stages[size_t(rank)].local_traffic);
  const double mb = double(r.microbatches);
  return {per_micro * mb + stepped * per_param + buffer, shared * mb, stepped * per_param, buffer,
          norm * mb, softmax * mb, loss * mb, eager_norm * mb};
}

}  // namespace pb::planner::parts
