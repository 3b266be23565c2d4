// The planner's parts (planner.cc assembles them into plan()): what one plan
// knows about its pipeline, and the memory, communication and time parts,
// each filling its columns of the PlanResult. Internal to suites/planner.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "impl/data_parallel/cost.h"
#include "impl/expert_parallel/cost.h"
#include "impl/pipeline/cost.h"
#include "impl/pipeline/schedule.h"
#include "impl/pipeline/stage.h"
#include "impl/spec/run_spec.h"
#include "suites/planner/planner.h"

namespace pb::planner::parts {

inline int elem_bytes(Precision p) { return p == Precision::fp64 ? 8 : p == Precision::fp32 ? 4 : 2; }

inline bool spans(int64_t span, int64_t rpn) { return rpn > 0 && span > rpn; }

inline int64_t world_of(const PlanInput& in) { return int64_t(in.dp) * in.tp * in.cp * in.pp; }

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

// MoE with global capacity over several data ranks: the capacity scope's
// tokens (every rank's microbatch); 0: a rank's own microbatch.
int64_t moe_scope_tokens(const PlanInput& in, int64_t seq);
// The ranks sharing a microbatch's capacity: the data ranks under global
// capacity (dp >= 2), times the cp ranks of each; 1 for none.
int64_t moe_capacity_ranks(const PlanInput& in);

// Expert parallel: the run spec an expert-parallel rank is built from, so
// the planner evaluates the same cost functions it declares (impl/
// expert_parallel/cost.h).
RunSpec ep_spec(const PlanInput& in, int64_t seq, int64_t microbatches, int64_t global_batch);

// The MoE blocks of pipeline rank `rank`'s experts (ep rank 0's, as many as
// any): the number of its MoE layers.
int64_t stage_moe_layers(const ModelConfig& m, const pipeline::Partition& part, int rank, int ep, int tp);
// Its expert units (the experts' data axis's units; tp rank 0's shard).
std::vector<int64_t> stage_expert_units(const ModelConfig& m, const pipeline::Partition& part, int rank, int ep,
                                        int tp);

// The mixture-of-experts blocks among a stage slice's blocks.
int64_t moe_blocks(const ModelConfig& m, const pipeline::StageSlice& sl);
// Those of every chunk of pipeline rank `rank` (the whole model's at pp 1).
int64_t rank_moe_blocks(const ModelConfig& m, const pipeline::Partition& part, int rank);

// ---- memory (planner_memory.cc) ----

// Every pipeline rank's memory (r.stages) and the worst (r.worst); the worst
// rank's parameter units, for its data-parallel traffic.
std::vector<int64_t> plan_memory(const PlanInput& in, const dp::DataAxis& axis, const Pipe& pipe,
                                 const ep::StateCosts* ep_states, PlanResult& r);

// Non-GEMM bytes per step of pipeline rank `rank`: its microbatches' layers
// (one more forward of them under full recomputation), embedding and head,
// and its optimizer step over the parameters it updates on the device; and
// of those, the layers' LayerNorms and residual adds and the optimizer step's
// (each timed at its own rate). By kind (Hardware::norm_mem_bw_GBps ...), of
// total: the norms' (every LayerNorm / RMSNorm, the head's included), the
// scores' softmax's (without its dropout), the loss's (the head's traffic
// over the vocabulary in a cross-entropy kernel: not Megatron-LM's chain of
// elementwise ops), the optimizer's and the buffers'; what is left of
// total is elementwise. shared overlaps norm (it holds the norms and adds).
// The norms run as eager ops (torchtitan's RMSNorm: PlanInput::eager_kernels
// without fused_norm) are eager_norm, not norm (Hardware::eager_norm_mem_bw_GBps).
struct RankBytes {
  double total = 0, shared = 0, optimizer = 0, buffer = 0;
  double norm = 0, softmax = 0, loss = 0, eager_norm = 0;
};
RankBytes rank_memory_bytes(const PlanInput& in, const Pipe& pipe, const PlanResult& r, int rank);

// A dense llama plan on a GPU profile with eager kernels under zero3 on one
// stage: the layout of torchtitan's published FSDP2 runs (planner_memory.cc).
bool fsdp2_device_plan(const PlanInput& in, const Pipe& pipe);

// ---- communication (planner_comm.cc) ----

// The comm rows of the worst rank's step (r.comm): data parallel (dense,
// experts), expert parallel, tensor, context and pipeline parallel, MoE routing.
void plan_comm(const PlanInput& in, const dp::DataAxis& axis, const Pipe& pipe, const ep::StateCosts* ep_states,
               const std::vector<int64_t>& worst_units, PlanResult& r);

// Times every comm row and sets comm_s, the async calls and their cost, and
// exposed_comm_s: what compute (fwd_s forward, bwd_s backward) does not hide.
// A measured attention core's cp rows are inside its time.
void time_comm(const PlanInput& in, bool attn_timed, double fwd_s, double bwd_s, PlanResult& r);

// ---- time (planner_time.cc) ----

// The rate (GFLOP/s) at which compute times GEMM g on in.hw: the profile's
// GEMM table at its shape, else its tile and wave model
// (modeled_gemm_gflops), else peak_tflops x gemm_efficiency.
double gemm_gflops(const PlanInput& in, const GemmShape& g);

// The torch.cuda.synchronize() calls Megatron-LM's training loop makes per
// step on a pipeline rank (host_overhead; sources in planner_time.cc): 7 per
// microbatch and chunk, 3 per communicating p2p call with pp > 1, and the
// step's timers (10, +2 under local DDP (`overlap` off), +2 with the fp16
// grad scaler) and the loss scale's .item() (1).
int64_t megatron_loop_syncs(int64_t microbatches, int64_t chunks, int64_t pp, int64_t rank, bool overlap,
                            bool fp16_scaler);

// Model and hardware FLOPs of the step and the schedule's declared bubble.
void plan_flops(const PlanInput& in, const Pipe& pipe, PlanResult& r);

// The step's time on in.hw (in.hw.peak_tflops > 0): compute at the slowest
// stage's pace, bubble, exposed communication, throughput and MFU.
void time_step(const PlanInput& in, const Pipe& pipe, PlanResult& r);

}  // namespace pb::planner::parts
