// The pipeline executor: one rank of a pipeline-parallel run, each stage's
// model states held by the data-parallel component (impl/data_parallel/
// component.h) over the stage's dp group — DDP, ZeRO-1/2/3, HSDP, hZeRO or
// offload, the same component plain data parallel uses. It validates its
// schedule (validate.h), then walks this rank's action list over the
// communicator's point-to-point calls: F receives (or embeds) its input, runs
// the chunk's blocks and isends the output; B/BW receives the output gradient,
// runs the backward and isends the input gradient; W computes weight gradients
// from the B -> W stash (reference/gpt.h block_backward_weight).
// Memory: a (microbatch, chunk)'s activations are allocated at its F (or the
// RECV before it) and freed at its last backward, after its output's isend has
// completed; received gradients live until their B/BW, sent ones until their
// isend completes. Only these are tagged `activations` (see stage.h for bytes).
// Split backward (ZB-H1): the B -> W gradient stash is allocated with the
// activations at F and everything is freed at W, so a microbatch's bytes are
// constant over its life and the peak is exactly in-flight units x bytes. B
// also runs the LM head's and the embedding's backward; W runs the blocks'.
// Data parallel inside a stage (stage_units, stage.h), met only through the
// family's stage hooks (data_parallel/hooks.h StageHooks): DDP and ZeRO-1
// accumulate full gradients over the microbatches and sync after the flush
// (the tied wte sum first, then the dp reduction: hooks.h TiedGrad); ZeRO-2 and the ZeRO-3
// family reduce-scatter each unit's gradient of each microbatch when its
// backward completes, and the tied sum runs on the shards; the ZeRO-3 family
// gathers a unit's parameters for each compute action that reads them and
// frees them after it (cost.h stage_dp_comm_per_step declares the bytes).
// Bitwise invariant (local backend, DDP or ZeRO-1, synchronous schedules whose
// backwards run in microbatch order per chunk): a stage's gradients accumulate
// with the kernels' += in microbatch order, the tied wte gradient is E + H by
// an all-reduce over {first, last} (rank order), the dp reduction runs in rank
// order, the loss is all-reduced over the world in rank order, and the squared
// norm is summed unit by unit in unit order (ZeRO-1: per-rank partials over
// the owned slices in world rank order) — exactly ReferenceTrainer under
// pipeline_replay_plan(). Per-unit norm sums make every synchronous schedule,
// pp and v give the same bits (with DDP).
// Mixture of experts (the model's [moe] blocks; tp = cp = 1; gpipe, 1f1b and
// interleaved): an MoE block's unit stops before its experts (stage.h); the
// stage's experts are a second data-parallel component over the expert-data-
// parallel group (expert_parallel/options.h, the same data-axis option),
// split over the ep group (rank r of the group owns the r-th E/ep experts).
// Routing, capacity and the load-balancing loss stay with the token's rank;
// global capacity's counts are exchanged over the stage's dp group "moe", the
// admitted rows travel by all-to-all(v) over "ep" at F and B of the
// microbatch on every member. Each rank's load-balancing terms (coef x N per
// microbatch) join the loss sum; their gradient weight is the scope's tokens
// over the step's. Not bitwise (experts run on rows gathered across ranks).
// PipeDream-2BW (DDP or ZeRO-1): W(k) is formed before the first action of
// group k on a rank from g(k-2) (schedule.h); the last two gradients are
// applied after the window, so a window of K groups makes K optimizer steps;
// the stage hooks keep W(k-1) beside W(k) and g of the other parity.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "harness/comm/comm.h"
#include "impl/data_parallel/component.h"
#include "impl/data_parallel/model_states.h"
#include "impl/pipeline/simulator.h"
#include "impl/pipeline/stage.h"
#include "impl/tensor_parallel/cost.h"
#include "impl/tensor_parallel/runner.h"
#include "reference/gpt.h"
#include "reference/optimizer.h"
#include "impl/spec/rank_base.h"
#include "reference/trainer.h"

namespace pb::pipeline {

// Injected faults (test-only): each must make the conformance engine fail.
struct PipelineFaults {
  bool skip_microbatch = false;       // the last microbatch is removed from every rank's list
  bool grad_to_wrong_stage = false;   // the last rank's input gradients of microbatches 0 and 1
                                      // swap tags: each is consumed by the other's backward
                                      // (needs pp >= 2, v = 1, m >= 2)
  bool tied_grad_not_summed = false;  // wte's embedding and LM-head gradients are never summed
  bool drop_w = false;                // rank 0 skips W of microbatch 0 (split-backward schedules)
  bool grads_rescaled_by_microbatches = false;  // the loss gradient divided by m once more
  bool unnormalized_loss = false;               // backward on the loss summed, not averaged over tokens
  bool zero_grads_per_microbatch = false;       // every B of a microbatch > 0 first zeroes the stage's grads
  bool tied_sum_after_reduce_scatter = false;   // ZeRO-1: wte's stage sum after the dp reduce-scatter
  bool untied_head_summed = false;  // the llama family: embed_tokens' and the untied lm_head's gradients
                                    // are summed over {first, last} as if tied
  bool bw_newest_weights = false;   // 2BW: every backward reads the newest weight version, not its F's
  bool any() const {
    return skip_microbatch || grad_to_wrong_stage || tied_grad_not_summed || drop_w ||
           grads_rescaled_by_microbatches || unnormalized_loss || zero_grads_per_microbatch ||
           tied_sum_after_reduce_scatter || untied_head_summed || bw_newest_weights;
  }
};

struct PipelineOptions {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int pp = 1;
  int virtual_stages = 1;
  dp::DpOptions data;  // each stage's data axis: data.dp replicas
  tp::TpOptions tensor;  // each stage's tensor axis (tp > 1: the stage runs tensor_parallel's pieces)
  PipelineFaults faults;
  int ep = 1;            // expert parallel folded over the stage's dp x cp ranks (an MoE model; harness/mesh.h)
  dp::DpOptions experts;  // an MoE model: the expert component's data axis (over edp = dp x cp / ep)
  int dp() const { return data.dp; }
  int tp() const { return tensor.tp; }
  int cp() const { return tensor.context.cp; }
  // The stage's data-parallel component: the data axis over the dp x cp ranks
  // that hold the same parameters (= data when cp = 1).
  dp::DpOptions component() const;
};

// The schedule's config: m = cfg.microbatches, steps = cfg.steps for 2BW.
ScheduleConfig schedule_config(const PipelineOptions& o, const TrainConfig& cfg);
// InputError naming the field and the rule: pp divides world = dp * pp, more
// stages than layers, the schedule's own rules (schedule.h check_config), the
// batch split into dp * m microbatches, the data axis (dp::validate; 2BW
// composes with DDP and ZeRO-1 only), and each fault's preconditions.
void validate(const PipelineOptions& o, const TrainConfig& cfg, int world);

// The reference's split plan that replays a pipeline run's arithmetic order.
SplitPlan pipeline_replay_plan(const PipelineOptions& o, const TrainConfig& cfg);

// Device time (DeviceOps::timeline: CUDA events on a GPU, the steady clock
// on the CPU), so a GPU rank never waits for its device between actions.
struct RankTiming {
  double wall_s = 0;  // from the step's start barrier to this rank's last action
  double busy_s = 0;  // inside compute actions
  std::vector<TimelineEntry> timeline;  // compute actions, seconds since the barrier
};

// Groups are slices of the mesh dp<dp>.pp<pp> (harness/mesh.h, dp fastest):
// "pp" (a pipeline replica), "pp_tied" (its first and last rank), "dp" (the
// same stage across replicas), "pp_scalar" and "check" (the whole world).
template <class T>
class PipelineRank : public RankBase<T> {
 public:
  // ops, memory: the device (default: the CPU; kernels/common/device_ops.h).
  // On a device the stages are dense (validate(RunSpec)): the tensor- and
  // context-parallel stage runs on the device's ops (tensor_parallel/runner.h),
  // the MoE MLP is host code.
  PipelineRank(const TrainConfig& cfg, const PipelineOptions& o, Communicator& world,
               RankOps<T> ops = {}, RankMemory memory = {});
  ~PipelineRank() override;
  // Synchronous schedules: one optimizer step over cfg.microbatches.
  StepStats step() override;
  // Synchronous: step() per step; 2BW: run_window() (steps = cfg.steps).
  std::vector<StepStats> train(int steps, std::vector<double>* grads1) override;
  // PipeDream-2BW: the whole window; one StepStats per group k (its loss, the
  // norm of g(k), the lr of the optimizer step that applies g(k)).
  std::vector<StepStats> run_window();
  // Collective over all ranks (group "check"): full vectors in flat order. Grads:
  // the last step's reduced gradients (2BW: g(0), the first window's).
  std::vector<double> full_grads() override;
  // Checkpoints (docs/checkpoint.md, executor_checkpoint.cc): the stage's
  // components (a tensor-parallel stage's layout mapped onto the full
  // tensors; the last stage's tied wte copy is not written, and is read from
  // wte), the step and the data position. Synchronous schedules only: a
  // PipeDream-2BW window has no point where its state is one weight version.
  void save_state(RankCheckpointOut& out) override;
  void load_state(const RankCheckpointIn& in) override;

  // Per stage: params, grads and optimizer state (ZeRO-1 slices over dp),
  // peak activations (cost.h / stage.h), bytes per group and op.
  Declared declared(int steps) const override;
  // timeline: (op, microbatch, chunk, start, end) per compute action.
  RankTimes times() const override;
  const Schedule& schedule() const { return s_; }
  const RankTiming& timing() const { return timing_; }
  int pp_rank() const { return pr_; }
  int dp_rank() const { return dr_; }

 private:
  struct Live;
  using Key = std::pair<int, int>;  // (microbatch, chunk or unit)
  Live& open(Key k);
  void free_live(Key k);
  // A SEND/RECV action posted (non-blocking; receives appended to `recvs`),
  // and a compute action run and timed.
  void post(const Action& a, std::vector<Request>& recvs);
  void compute(const Action& a);
  void forward(const Action& a);
  void backward(const Action& a);
  void weight(const Action& a);
  int tag_of(const Action& a) const;
  void run_actions();
  // Units are the stage's dense units 0..nd-1, then its expert units nd + j
  // (stage_experts); the stage hooks (data_parallel/hooks.h StageHooks) hold
  // the parameters microbatch mb reads (its weight version's; gathered until
  // release under ZeRO-3) and where its gradients accumulate until grad_done.
  const T* param(int mb, int u, bool backward) {
    const bool newest = backward && o_.faults.bw_newest_weights;  // the fault's
    return hooks_->params(u, newest ? hooks_->version() : s_.weight_version(mb), backward);
  }
  void release(int u) { hooks_->release_params(u); }
  T* grad(int mb, int u) { return hooks_->grads(mb, u, s_.weight_version(mb)); }
  void grad_done(int mb, int u) { hooks_->grads_ready(mb, u); }
  T* head_wte_grad(int mb);  // the LM head's contribution to wte
  double reduce_grads();  // the hooks' finish (tied sum, dp reduction); returns the global squared norm
  // Squares of the n grads from unit i's start (unpadded), without the ranges
  // the component excludes (tp-replicated parameters on tp rank > 0).
  double unit_sq(int i, int64_t n) const;
  int64_t boundary_elems() const;  // one activation or gradient between stages (tokens held x C)
  tp::TpShape tp_shape() const;    // tp > 1: the cost shape of this rank's tensor axis
  void update_2bw(int k);
  std::vector<double> gather(bool grads) override;

  using RankBase<T>::ops_;
  using RankBase<T>::mem_;
  TrainConfig cfg_;
  PipelineOptions o_;
  ParamLayout layout_;
  ParamLayout full_layout_;  // the whole model's (tp > 1: layout_ is this rank's shard)
  MarkovSource data_;
  Partition part_;
  Schedule s_;
  StageUnits su_;
  int pr_ = 0, dr_ = 0, tr_ = 0, cr_ = 0, m_ = 1, Bm_ = 1;
  RankGroups groups_;
  // Views of groups_'s: pp, pp_tied (null: pp = 1), pp_scalar, check, tp and cp (null: size 1).
  Communicator *pp_ = nullptr, *tied_ = nullptr, *scalar_ = nullptr, *check_ = nullptr, *tp_ = nullptr,
               *cp_ = nullptr;
  std::unique_ptr<tp::TpModel<T>> tpm_;  // the stage model (stage.h runs_stage_model): tp or cp > 1, or recompute
  std::vector<std::pair<int64_t, int64_t>> replicated_;  // flat ranges of tp-replicated params
  std::vector<std::pair<int64_t, int64_t>> reduced_;  // of them, the ones partial per tp rank (tp_reduced_ranges)
  int64_t sp_held_ = 0;  // of reduced_, the gradient elements this rank all-reduces over tp per step
  // The stage's model states: the dense units' component and, in a
  // mixture-of-experts model, the stage's experts' (null when the stage has
  // no MoE block) over the expert data axis (groups "e*"); the actions meet
  // both through hooks_ (states_->stage_hooks()).
  std::unique_ptr<dp::ModelStates<T>> states_;
  dp::StageHooks<T>* hooks_ = nullptr;
  StageExperts se_;
  MoeScope scope_;  // the groups "ep" and "moe" (global capacity's counts)
  MoeScratch<T> moe_scratch_;
  MoeActs<T> moe_work_;  // full recompute: the MoE MLP's state the backward's rerun fills (routing included)
  MoeLoad load_;
  double aux_ = 0;  // this step's load-balancing terms (coef x tokens), every MoE block here
  std::vector<double> aux_mb_;  // 2BW: those terms per microbatch of the window (its loss per group)
  Gpt<T> model_;
  Buffer<T> dxa_, dxb_;
  Buffer<int32_t> tok_tmp_, tgt_tmp_;
  std::vector<int32_t> host_tok_, host_tgt_;          // a device's: the data source draws on the host
  std::vector<int32_t> host_sel_tok_, host_sel_tgt_;  // ... and cp selects this rank's tokens there
  Scratch<T> scratch_;
  std::map<Key, Live> live_;
  std::map<Key, Buffer<T>> grad_in_, grad_out_;
  std::vector<std::pair<Request, Buffer<T>>> sending_;
  std::vector<double> losses_;  // per microbatch, last stage
  std::vector<double> norms_;  // 2BW: of g(0), g(1), ...
  std::vector<double> grads_snapshot_;
  RankTiming timing_;
  // The actions' device time: marks on ops_'s stream around each compute
  // action (no wait between them), resolved when the schedule is done.
  struct Marked {
    Op op;
    int microbatch, chunk, start, end;
  };
  std::unique_ptr<kernels::DeviceTimeline> clock_;
  std::vector<Marked> marked_;
  // The whole step's device time (the schedule, the gradient reduction and
  // the optimizer): StepStats::seconds; 2BW's window over its steps.
  std::unique_ptr<kernels::DeviceTimeline> step_clock_;
  int step_ = 0;
  int data_shift_ = 0;  // the data position minus step_ (0 unless a load's fault moved it)
};

}  // namespace pb::pipeline
