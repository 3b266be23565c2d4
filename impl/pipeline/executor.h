// The pipeline executor: one rank of a pipeline-parallel run (composed with
// data parallelism: DDP or ZeRO-1 over each stage's dp group). It validates
// its schedule (validate.h), then walks this rank's action list over the
// communicator's point-to-point calls: F receives (or embeds) its input, runs
// the chunk's blocks and isends the output; B/BW receives the output gradient,
// runs the backward and isends the input gradient; W computes weight gradients
// from the B -> W stash (reference/gpt.h block_backward_weight).
// Memory: a (microbatch, chunk)'s activations are allocated at its F (or the
// RECV before it) and freed at its last backward, after its output's isend has
// completed; received gradients live until their B/BW, sent ones until their
// isend completes. Only these are tagged `activations` (see stage.h for bytes).
// Split backward (ZB-H1): the B -> W gradient stash is allocated with the
// activations at F and everything is freed at W (the part only B needs is not
// released early), so a microbatch's bytes are constant over its life and the
// peak is exactly in-flight units x bytes. B also runs the LM head's and the
// embedding's backward (their weight gradients); W runs the blocks'.
// Bitwise invariant (local backend, synchronous schedules whose backwards run
// in microbatch order per chunk): a stage's gradients accumulate with the
// kernels' += in microbatch order, the tied wte gradient is E + H by an
// all-reduce over {first, last} (rank order), the dp reduction runs in rank
// order, the loss is all-reduced over the world in rank order, and the squared
// norm is summed unit by unit in unit order (ZeRO-1: per-rank partials in rank
// order) — exactly ReferenceTrainer under pipeline_replay_plan(). Per-unit norm
// sums make every synchronous schedule, pp and v give the same bits (with DDP).
// PipeDream-2BW: W(k) is formed before the first action of group k on a rank
// from g(k-2) (schedule.h); the last two gradients are applied after the
// window, so a window of K groups makes K optimizer steps.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "harness/comm/comm.h"
#include "impl/pipeline/simulator.h"
#include "impl/pipeline/stage.h"
#include "reference/gpt.h"
#include "reference/optimizer.h"
#include "reference/trainer.h"

namespace pb::pipeline {

enum class DpMode : uint8_t { ddp, zero1 };
std::string_view dp_mode_name(DpMode m);
DpMode parse_dp_mode(std::string_view s, std::string_view field = "dp_mode");  // "ddp" | "zero1"

// Injected faults (test-only): each must make the conformance engine fail.
struct PipelineFaults {
  bool skip_microbatch = false;       // the last microbatch is removed from every rank's list
  bool grad_to_wrong_stage = false;   // the last rank's input gradients of microbatches 0 and 1
                                      // swap tags: each is consumed by the other's backward
                                      // (needs pp >= 2, v = 1, m >= 2)
  bool tied_grad_not_summed = false;  // wte's embedding and LM-head gradients are never summed
  bool drop_w = false;                // rank 0 skips W of microbatch 0 (split-backward schedules)
  bool any() const { return skip_microbatch || grad_to_wrong_stage || tied_grad_not_summed || drop_w; }
  std::string describe() const;  // "" or " fault:drop_w,..."
};

struct PipelineOptions {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int pp = 1;
  int virtual_stages = 1;
  int dp = 1;
  DpMode dp_mode = DpMode::ddp;
  PipelineFaults faults;
  std::string describe(int microbatches) const;  // e.g. "1f1b pp4 v1 m8 x ddp dp2"
};

// The schedule's config: m = cfg.microbatches, steps = cfg.steps for 2BW.
ScheduleConfig schedule_config(const PipelineOptions& o, const TrainConfig& cfg);
// InputError naming the field and the rule: pp divides world = dp * pp, more
// stages than layers, the schedule's own rules (schedule.h check_config), the
// batch split into dp * m microbatches, and each fault's preconditions.
void validate(const PipelineOptions& o, const TrainConfig& cfg, int world);

// The reference's split plan that replays a pipeline run's arithmetic order.
SplitPlan pipeline_replay_plan(const PipelineOptions& o, const TrainConfig& cfg);

struct RankTiming {
  double wall_s = 0;  // from the step's start barrier to this rank's last action
  double busy_s = 0;  // inside compute actions
  std::vector<TimelineEntry> timeline;  // compute actions, seconds since the barrier
};

template <class T>
class PipelineRank {
 public:
  PipelineRank(const TrainConfig& cfg, const PipelineOptions& o, Communicator& world);
  ~PipelineRank();
  // Synchronous schedules: one optimizer step over cfg.microbatches.
  StepStats step();
  // PipeDream-2BW: the whole window; one StepStats per group k (its loss, the
  // norm of g(k), the lr of the optimizer step that applies g(k)).
  std::vector<StepStats> run_window();
  // Collective over all ranks (group "check"): full vectors in flat order. Grads:
  // the last step's reduced gradients (2BW: g(0), the first window's).
  std::vector<double> full_params();
  std::vector<double> full_grads();

  const MemoryTracker& memory() const { return mem_; }
  const Schedule& schedule() const { return s_; }
  const RankTiming& timing() const { return timing_; }
  int pp_rank() const { return pr_; }
  int dp_rank() const { return dr_; }
  // Activation bytes one in-flight microbatch of each of this rank's chunks keeps.
  std::vector<int64_t> chunk_bytes() const;

 private:
  struct Live;
  using Key = std::pair<int, int>;  // (microbatch, chunk)
  Live& open(Key k);
  void free_live(Key k);
  void exec(const Action& a);
  void forward(const Action& a);
  void backward(const Action& a);
  void weight(const Action& a);
  int tag_of(const Action& a) const;
  void run_actions();
  const T* P(int mb) const;  // params of microbatch mb's weight version
  T* G(int mb) const;
  T* HG(int mb) const;       // where the LM head's wte gradient accumulates
  int64_t unit_off(int u) const { return sp_.local(layout_.unit_begin(u)); }
  double reduce_grads(T* g, T* hg);  // tied sum, dp reduction; returns the global squared norm
  void apply(T* g, long t, double norm);
  void update_2bw(int k);
  std::vector<double> gather(const T* buf, bool grads);

  TrainConfig cfg_;
  PipelineOptions o_;
  Communicator& world_;
  MemoryTracker mem_;
  ParamLayout layout_;
  MarkovSource data_;
  Partition part_;
  Schedule s_;
  StagePieces sp_;
  int pr_ = 0, dr_ = 0, m_ = 1, Bm_ = 1;
  int64_t slice_ = 0, padded_ = 0;
  std::unique_ptr<Communicator> pp_, tied_, dp_, scalar_, check_;
  Gpt<T> model_;
  Buffer<T> params_, prev_params_, grads_[2], head_grads_[2];
  Buffer<T> dxa_, dxb_;
  Buffer<int32_t> tok_tmp_, tgt_tmp_;
  Scratch<T> scratch_;
  std::unique_ptr<AdamW<T>> opt_;
  std::map<Key, Live> live_;
  std::map<Key, Buffer<T>> grad_in_, grad_out_;
  std::vector<std::pair<Request, Buffer<T>>> sending_;
  std::vector<double> losses_;  // per microbatch, last stage
  std::vector<double> norms_;  // 2BW: of g(0), g(1), ...
  std::vector<double> grads_snapshot_;
  RankTiming timing_;
  int step_ = 0, version_ = 0;
  bool snapshot_taken_ = false;
};

}  // namespace pb::pipeline
