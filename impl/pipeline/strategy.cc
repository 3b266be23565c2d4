#include "impl/pipeline/strategy.h"

#include "impl/pipeline/stage.h"

#include "harness/status.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/faults.h"
#include "impl/expert_parallel/options.h"
#include "impl/tensor_parallel/strategy.h"

namespace pb::pipeline {

PipelineOptions options_of(const RunSpec& s) {
  PipelineOptions o;
  o.kind = s.pipe.schedule.value_or(ScheduleKind::one_f_one_b);
  o.pp = s.mesh.pp;
  o.virtual_stages = s.pipe.virtual_stages;
  o.tensor = tp::options_of(s);  // the stage's tensor axis, its faults included
  for (Fault f : fault_values<Fault>(s.faults, FaultAxis::pipeline)) {
    switch (f) {
      case Fault::skip_microbatch: o.faults.skip_microbatch = true; break;
      case Fault::grad_to_wrong_stage: o.faults.grad_to_wrong_stage = true; break;
      case Fault::tied_grad_not_summed: o.faults.tied_grad_not_summed = true; break;
      case Fault::drop_w: o.faults.drop_w = true; break;
      case Fault::grads_rescaled_by_microbatches: o.faults.grads_rescaled_by_microbatches = true; break;
      case Fault::unnormalized_loss: o.faults.unnormalized_loss = true; break;
      case Fault::zero_grads_per_microbatch: o.faults.zero_grads_per_microbatch = true; break;
      case Fault::tied_sum_after_reduce_scatter: o.faults.tied_sum_after_reduce_scatter = true; break;
      case Fault::untied_head_summed: o.faults.untied_head_summed = true; break;
      case Fault::bw_newest_weights: o.faults.bw_newest_weights = true; break;
    }
  }
  o.data = tp::data_options_of(s);  // the data axis's faults; data-parallel ranks per node
  o.ep = s.mesh.ep;
  if (s.train.model.moe.experts > 0 && s.mesh.ep <= s.mesh.dp * s.mesh.cp &&
      (s.mesh.dp * s.mesh.cp) % s.mesh.ep == 0) {  // the experts' data axis (else validate names the mesh)
    RunSpec e = s;
    e.faults.clear();
    o.experts = ep::expert_options(e);
  }
  return o;
}

namespace {
bool two_microbatches(const RunSpec& s) { return s.train.microbatches >= 2; }
bool wrong_stage_bites(const RunSpec& s) {
  return s.mesh.pp >= 2 && s.pipe.virtual_stages == 1 && s.train.microbatches >= 2;
}
bool always(const RunSpec&) { return true; }
bool tied_stages(const RunSpec& s) { return s.mesh.pp >= 2 && !s.train.model.llama(); }
bool untied_stages(const RunSpec& s) { return s.mesh.pp >= 2 && s.train.model.llama(); }
// ... with a W that forms weight gradients on rank 0's first chunk (an MoE block's are formed in B).
bool split_backward(const RunSpec& s) {
  const ModelConfig& m = s.train.model;
  if (s.pipe.schedule != ScheduleKind::zb_h1) return false;
  if (m.moe.experts == 0 || m.L < s.mesh.pp * s.pipe.virtual_stages) return true;  // (validate names a bad split)
  return has_dense_block(m, partition_layers(m.L, s.mesh.pp, s.pipe.virtual_stages).at(0, 0));
}
// W(1) = W(0): the versions differ from the third group on (train.steps >= 3).
bool two_versions(const RunSpec& s) {
  return s.pipe.schedule == ScheduleKind::pipedream_2bw && s.mesh.pp >= 2 && s.train.steps >= 3;
}
// One backward per microbatch and stage into one full gradient buffer.
bool accumulates_whole(const RunSpec& s) {
  const auto k = s.pipe.schedule.value_or(ScheduleKind::one_f_one_b);
  return s.train.microbatches >= 2 && s.pipe.virtual_stages == 1 &&
         (k == ScheduleKind::gpipe || k == ScheduleKind::one_f_one_b) &&
         (s.data.shard == dp::Shard::none || s.data.shard == dp::Shard::zero1);
}
// The tied rows of two stages, reduce-scattered over dp (a distributed optimizer).
bool tied_zero1(const RunSpec& s) {
  return s.mesh.pp >= 2 && s.mesh.dp >= 2 && s.data.shard == dp::Shard::zero1 &&
         s.pipe.schedule != ScheduleKind::pipedream_2bw;
}
}  // namespace

std::span<const FaultDecl> fault_decls() {
  constexpr FaultAxis P = FaultAxis::pipeline;
  static const FaultDecl d[] = {
      {"skip_microbatch", P, uint8_t(Fault::skip_microbatch), "the last microbatch is removed from every rank's list",
       two_microbatches},
      {"grad_to_wrong_stage", P, uint8_t(Fault::grad_to_wrong_stage),
       "the last rank's input gradients of microbatches 0 and 1 swap tags", wrong_stage_bites},
      {"tied_grad_not_summed", P, uint8_t(Fault::tied_grad_not_summed),
       "wte's embedding and LM-head gradients are never summed", tied_stages},
      {"drop_w", P, uint8_t(Fault::drop_w), "rank 0 skips W of microbatch 0 (split-backward schedules)",
       split_backward},
      {"grads_rescaled_by_microbatches", P, uint8_t(Fault::grads_rescaled_by_microbatches),
       "pipeline + accumulation: the gradients divided by the microbatch count once more, every step",
       two_microbatches, "torchtitan #1733"},
      {"unnormalized_loss", P, uint8_t(Fault::unnormalized_loss),
       "backward runs on the loss summed over the tokens, not on their mean", always, "torchtitan #2972"},
      {"zero_grads_per_microbatch", P, uint8_t(Fault::zero_grads_per_microbatch),
       "the stage's gradients zeroed before each microbatch's backward: only the last one trains",
       accumulates_whole, "NeMo Automodel PR #3530"},
      {"tied_sum_after_reduce_scatter", P, uint8_t(Fault::tied_sum_after_reduce_scatter),
       "ZeRO-1 stages: wte's first/last-stage sum done after the dp reduce-scatter, on the full rows",
       tied_zero1, "Megatron-LM #844"},
      {"untied_head_summed", P, uint8_t(Fault::untied_head_summed),
       "the llama family's untied lm_head gradient is summed with embed_tokens' over the first and last stage "
       "as if tied",
       untied_stages},
      {"bw_newest_weights", P, uint8_t(Fault::bw_newest_weights),
       "2BW: every backward reads the newest weight version instead of the one its forward ran on", two_versions}};
  return d;
}

namespace {

bool runs(const RunSpec& s) {
  return s.mesh.pp > 1 || s.pipe.schedule;
}

void validate_spec(const RunSpec& s) {
  require(s.mesh.cp > 1 || s.context == ContextOptions{},
          "strategy: context options (cp_algo, zigzag) need cp > 1 in the mesh");
  require(!s.tensor.sp || s.mesh.tp > 1, "strategy.sp: sequence parallel needs tp > 1 in the mesh");
  const int inner = s.mesh.tp * s.mesh.cp;
  require(s.mesh.ranks_per_node % inner == 0,
          "mesh: rpn" + std::to_string(s.mesh.ranks_per_node) + " must be a multiple of " +
              (s.mesh.cp > 1 ? "tp x cp = " + std::to_string(inner) : "tp" + std::to_string(s.mesh.tp)) +
              " (a replica's " + (s.mesh.cp > 1 ? "tp x cp" : "tp") + " ranks share a node)");
  validate(options_of(s), s.train, s.world());
  ep::require_moe_faults_apply_under_cp(s);  // MoE stages under cp
}

bool bitwise(const RunSpec& s, BackendKind b) {
  const PipelineOptions o = options_of(s);
  // DDP and ZeRO-1 sum after the flush, ZeRO-2 and the ZeRO-3 family per
  // microbatch (HSDP and hZeRO in two levels): the replay does the same sums.
  // tp: partial products summed over tp; cp: attention blocks merged by log-sum-exp.
  // MoE: experts run on rows gathered across the capacity scope and ep.
  // Recompute at tp = cp = 1: the tensor-parallel stage model's kernels at
  // tp 1 (stage.h runs_stage_model) round bf16 otherwise than the reference's blocks.
  if (b != BackendKind::local || runs_stage_model(o.tensor) || s.train.model.moe.experts > 0) return false;
  if (o.kind == ScheduleKind::pipedream_2bw) return true;  // against its delayed replay
  return accumulates_in_microbatch_order(make_schedule(o.kind, schedule_config(o, s.train)));
}

Replay replay(const RunSpec& s) {
  const PipelineOptions o = options_of(s);
  return {pipeline_replay_plan(o, s.train), o.kind == ScheduleKind::pipedream_2bw};
}

std::unique_ptr<Rank> make_rank(const RunSpec& s, Communicator& world, const TrainDevice* device) {
  return make_typed_rank_on<PipelineRank>(device, s.train.precision, s.train, options_of(s), world);
}

}  // namespace

const Strategy& strategy() {
  static const Strategy s{"pipeline", runs,      validate_spec, bitwise,
                          replay,     make_rank, nullptr,
                          pb::fault_decls({fault_decls(), tp::tp_cp_fault_decls()})};
  return s;
}

}  // namespace pb::pipeline
