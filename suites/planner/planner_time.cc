// The planner's time part: the step's FLOPs and declared bubble, and its
// time on the given hardware (planner.h: compute at the per-rank peak times
// the GEMM efficiency, memory-bound bytes at their rates, the slowest
// pipeline stage setting the pace, then bubble and exposed communication).
#include "suites/planner/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "harness/status.h"
#include "impl/pipeline/cost.h"
#include "suites/planner/planner_parts.h"

namespace pb::planner {

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

double flash_attention_rate(const Hardware& hw, bool triton, int head_dim, int64_t seq) {
  std::vector<const Hardware::AttentionRate*> rows;
  double best = -1;
  for (const Hardware::AttentionRate& a : hw.flash_rates)
    if (a.triton == triton) {
      const double d = std::abs(std::log(double(a.head_dim) / double(head_dim)));
      if (best < 0 || d < best - 1e-12) best = d, rows.clear();
      if (std::abs(d - best) <= 1e-12) rows.push_back(&a);
    }
  if (rows.empty()) return triton ? 0 : hw.flash_attention_tflops;
  std::sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->seq < b->seq; });
  if (seq <= rows.front()->seq) return rows.front()->tflops;
  if (seq >= rows.back()->seq) return rows.back()->tflops;
  size_t i = 1;
  while (rows[i]->seq < seq) ++i;
  const double f = std::log(double(seq) / double(rows[i - 1]->seq)) / std::log(double(rows[i]->seq) / double(rows[i - 1]->seq));
  return rows[i - 1]->tflops + f * (rows[i]->tflops - rows[i - 1]->tflops);
}

int64_t block_forward_ops(const PlanInput& in) {
  const ModelConfig& m = *in.shape;
  const int64_t attention = in.flash_attention ? 1 : 3 + (in.dropout ? 1 : 0);
  if (!m.llama())  // norm, QKV, attention, projection, bias-dropout-add, norm, fc1, bias-GELU, fc2, bias-dropout-add
    return 9 + attention;
  if (!in.eager_kernels)  // norm, wq wk wv, RoPE, attention, wo, add, norm, w1 w3, SwiGLU, w2, add
    return 13 + attention;
  // torchtitan's eager Llama (models/norms.py, models/llama/model.py):
  // RMSNorm x.float(), pow, mean, + eps, rsqrt, *, type_as, * weight (8);
  // wq wk wv (3); RoPE: q and k upcast, complex product, downcast (6);
  // repeat_kv's copies of k and v (2, with fewer kv heads than q heads);
  // attention; its output made contiguous; wo; add; RMSNorm (8); w1, w3;
  // SiLU; the product; w2; add. fused_norm: each RMSNorm one Triton kernel.
  const int64_t q = m.C / in.tp, kv = llama_kv_heads_per_rank(m, in.tp) * m.head_size();
  const int64_t norm = in.fused_norm ? 1 : 8;
  return norm + 3 + 6 + (kv < q ? 2 : 0) + attention + 1 + 1 + 1 + norm + 2 + 1 + 1 + 1 + 1;
}

int64_t multi_tensor_launches(int64_t tensors, double elements) {
  if (tensors <= 0) return 0;
  const int64_t by_tensors = (tensors + 35) / 36;
  const double by_chunks = std::ceil(std::max(0.0, elements) / (320.0 * 65536.0));
  return std::max(by_tensors, int64_t(by_chunks));
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

double compute_scale_for(const PlanResult& est, double measured_s) {
  const double scaled = est.step_s - est.buffer_s;
  return scaled > 0 && measured_s > est.buffer_s ? (measured_s - est.buffer_s) / scaled : measured_s / est.step_s;
}

double corun_factor(double scale, int64_t at, double copies) {
  if (at < 2) return 1;
  const double w = std::clamp((copies - 1) / double(at - 1), 0.0, 1.0);
  return 1 + (scale - 1) * w;
}

namespace parts {

void plan_flops(const PlanInput& in, const Pipe& pipe, PlanResult& r) {
  const int64_t tokens = r.global_batch * r.seq;
  if (in.shape) {
    const Flops f = iteration_flops(*in.shape, r.global_batch, r.seq, in.recompute);
    r.model_flops = to_double(f.model);
    r.hardware_flops = to_double(f.hardware);
    if (in.recompute_even_matmuls) {
      // The even matmuls' forward once more, per token and block: Llama's wk
      // (2 h kvd), wo (2 h^2) and w3 (2 h F); GPT's projection (2 h^2) and
      // fc2 (8 h^2). Their order is the blocks' forward (model_cost.h).
      const ModelConfig& m = *in.shape;
      const double h = double(m.C);
      const double per_token = m.llama() ? 2 * h * double(int64_t(m.kv_heads) * m.head_size()) + 2 * h * h +
                                               2 * h * double(m.ffn)
                                         : 10 * h * h;
      r.hardware_flops += per_token * double(m.L) * double(tokens);
    }
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
}

namespace {

// Seconds of `b`'s memory-bound bytes on hw: the LayerNorms' and residual
// adds', the optimizer step's and the data-parallel buffers' each at their
// own rate when one is given, the rest at the average's.
double buffer_time(const Hardware& hw, const RankBytes& b) {
  return hw.mem_bw_GBps > 0 && hw.buffer_mem_bw_GBps > 0 ? b.buffer / (hw.buffer_mem_bw_GBps * 1e9) : 0.0;
}
// With a per-kind rate (Hardware::norm_mem_bw_GBps ...), every kind at its
// own (RankBytes): the norms (those run as eager ops at theirs), the softmax,
// the loss, the optimizer step, the buffers and the elementwise rest, each at
// mem_bw_GBps where the profile gives none. Without one exactly as above.
double memory_time(const Hardware& hw, const RankBytes& b) {
  if (!(hw.mem_bw_GBps > 0)) return 0.0;
  const double mem = hw.mem_bw_GBps * 1e9;
  const double shared = hw.shared_mem_bw_GBps > 0 ? b.shared : 0,
               opt = hw.optimizer_mem_bw_GBps > 0 ? b.optimizer : 0,
               buf = hw.buffer_mem_bw_GBps > 0 ? b.buffer : 0;
  if (!has_kind_rates(hw))
    return (b.total - shared - opt - buf) / mem + (shared > 0 ? shared / (hw.shared_mem_bw_GBps * 1e9) : 0) +
           (opt > 0 ? opt / (hw.optimizer_mem_bw_GBps * 1e9) : 0) + buffer_time(hw, b);
  const auto at = [&](double bytes, double GBps) { return bytes / (GBps > 0 ? GBps * 1e9 : mem); };
  // A calibration's shared rate holds the norms (plan() refuses both).
  const double norm = shared > 0 ? 0 : b.norm, eager_norm = shared > 0 ? 0 : b.eager_norm;
  const double elementwise = b.total - shared - norm - eager_norm - b.softmax - b.loss - b.optimizer - b.buffer;
  return at(std::max(0.0, elementwise), hw.elementwise_mem_bw_GBps) +
         (shared > 0 ? at(shared, hw.shared_mem_bw_GBps) : 0) + at(norm, hw.norm_mem_bw_GBps) +
         at(eager_norm, hw.eager_norm_mem_bw_GBps) +
         at(b.softmax, hw.softmax_mem_bw_GBps) + at(b.loss, hw.loss_mem_bw_GBps) +
         at(b.optimizer, hw.optimizer_mem_bw_GBps) + at(b.buffer, hw.buffer_mem_bw_GBps);
}

// What one pipeline stage computes: its share of the model's FLOPs (times
// pp; 1 without a pipeline) and its memory-bound bytes; with a measured
// attention core (Hardware::attention_fwd_s), its FLOPs and softmax traffic
// leave the rates' terms and its time per block and microbatch joins them.
struct StageCost {
  double flop_share = 1;  // of the stage's hardware FLOPs, the attention core's included
  double share = 1;       // of those the rates time
  RankBytes bytes;
  double attn_fwd_s = 0, attn_s = 0, attn_model_flops = 0;
  int64_t blocks = 0;  // the stage's blocks (host_overhead)
  int rank = 0;        // its pipeline rank
};

StageCost stage_cost(const PlanInput& in, const PlanResult& r, bool attn_timed, int64_t blocks, double share,
                     RankBytes bytes, int rank) {
  const double attn_fwds = in.recompute == Recompute::none ? 1 : 2;
  StageCost c{share, share, bytes, 0, 0, 0, blocks, rank};
  if (!attn_timed) return c;
  const double mb = double(r.microbatches);
  c.attn_fwd_s = double(blocks) * mb * in.hw.attention_fwd_s * r.slowest_gpu;
  c.attn_s = double(blocks) * mb * (attn_fwds * in.hw.attention_fwd_s + in.hw.attention_bwd_s) * r.slowest_gpu;
  // Per rank of the stage, scaled like the stage's FLOPs (hardware_flops * share / world).
  const double pp = double(in.pp);
  c.share -= to_double(attention_core_flops(*in.shape, r.global_batch, r.seq, in.recompute, blocks)) * pp /
             r.hardware_flops;
  c.attn_model_flops = to_double(attention_core_flops(*in.shape, r.global_batch, r.seq, Recompute::none, blocks)) *
                       pp;
  const ModelConfig& mc = *in.shape;
  const ActivationShape x{in.microbatch_size, r.seq, mc.C, mc.NH, in.tp, in.cp, in.sp, in.dropout,
                          elem_bytes(in.precision)};
  // The scores' kernels and their reruns (rank_memory_bytes) are the core's.
  const bool again = in.recompute != Recompute::none || in.recompute_even_matmuls;
  c.bytes.total -= double(blocks) * mb *
                   double(layer_softmax_traffic_bytes(x) + (again ? layer_softmax_forward_traffic_bytes(x) : 0));
  c.bytes.softmax = std::max(
      0.0, c.bytes.softmax - double(blocks) * mb *
                                 double(scores_softmax_traffic_bytes(x) +
                                        (again ? scores_softmax_forward_traffic_bytes(x) : 0)));
  return c;
}

double stage_time(const PlanInput& in, const PlanResult& r, double achieved, const StageCost& c) {
  return r.hardware_flops * c.share / achieved + memory_time(in.hw, c.bytes) + c.attn_s;
}

// The stage whose compute sets the pace of every microbatch: the one rank
// unstaged (pp = 1, every block); else the slowest stage, GEMMs and
// memory-bound kernels together (stages differ: the last holds the LM head,
// layers need not split evenly).
StageCost pace_stage(const PlanInput& in, const Pipe& pipe, const PlanResult& r, bool attn_timed, double achieved) {
  StageCost pace = stage_cost(in, r, attn_timed, in.shape ? in.shape->L : 0, 1,
                              in.shape ? rank_memory_bytes(in, pipe, r, r.worst.stage) : RankBytes{},
                              r.worst.stage);
  if (!in.shape || !pipe.staged()) return pace;
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
    const StageCost c = stage_cost(in, r, attn_timed, blocks, share, rank_memory_bytes(in, pipe, r, rank), rank);
    const double t = stage_time(in, r, achieved, c);
    if (t > slowest) slowest = t, pace = c;
  }
  return pace;
}

}  // namespace

int64_t megatron_loop_syncs(int64_t microbatches, int64_t chunks, int64_t pp, int64_t rank, bool overlap,
                            bool fp16_scaler) {
  const int64_t calls = microbatches * chunks;  // forward_step and backward_step calls
  int64_t syncs = (2 + 2 + 1 + 2) * calls;
  if (pp > 1) syncs += 3 * calls * (chunks > 1 ? 1 : (rank == 0 || rank == pp - 1) ? 1 : 2);
  return syncs + 10 + 1 + (overlap ? 0 : 2) + (fp16_scaler ? 2 : 0);
}

namespace {

// The framework's per-op host time the device waits for (Hardware::host_op_us;
// docs/planner.md "Per-op host overhead"). The host issues kernels ahead of
// the device, so an op costs the step only where the host falls behind:
// per block and microbatch, the forward's ops (block_forward_ops) against the
// forward's device time per block, the backward's (twice the forward's ops:
// each GEMM's two gradients, each op's backward; full and op-level
// recomputation issue the forward again, selective the attention) against
// the backward's; the optimizer step's multi-tensor launches (fused: apex's
// Adam, the norm and the scale, 3 ops; eager or torch_foreach: PyTorch's
// foreach AdamW, 8 ops, and clip_grad_norm_'s foreach norm and scale, 2;
// megatron_fp16 and composer as PlanInput::optimizer_step's sources run
// them, per tensor where they loop) over the rank's parameter tensors (GPT
// 12 per block, llama 9) and elements, plus 5 scalar ops of the clip
// coefficient, against the step's optimizer time; and per step one
// synchronization (the loss or the gradient norm read on the host), after
// which the device waits for the next op's issue, and the optimizer's own
// (Megatron's found_inf.item(), composer's per-parameter step.item()). `fwd_s` and `bwd_s` are
// the stage's compute (bwd_s with the optimizer step's `opt_s`).
double host_overhead(const PlanInput& in, const PlanResult& r, const StageCost& pace, double fwd_s, double bwd_s,
                     double opt_s, int64_t& ops, int64_t& ops_syncs) {
  ops = 0, ops_syncs = 0;
  if (!(in.hw.host_op_us > 0) || !in.shape || pace.blocks <= 0) return 0;
  const double op_s = in.hw.host_op_us * 1e-6;
  const int64_t f = block_forward_ops(in);
  const int64_t attention = in.flash_attention ? 1 : 3 + (in.dropout ? 1 : 0);
  const int64_t b = 2 * f + (in.recompute == Recompute::full || in.recompute_even_matmuls ? f
                             : in.recompute == Recompute::selective                         ? attention
                                                                                            : 0);
  const double passes = double(pace.blocks) * double(r.microbatches);
  const double fwd_dev = fwd_s / passes, bwd_dev = std::max(0.0, bwd_s - opt_s) / passes;
  double exposed = passes * (std::max(0.0, double(f) * op_s - fwd_dev) + std::max(0.0, double(b) * op_s - bwd_dev));
  // The optimizer step over the parameters this rank updates.
  const int64_t tensors = pace.blocks * (in.shape->llama() ? 9 : 12);
  const double elements = double(r.stages[size_t(pace.rank)].optimizer) /
                          double(dp::bytes_per_param(in.precision).optimizer);
  const int64_t launches = multi_tensor_launches(tensors, elements);
  int64_t opt_ops = 0, opt_syncs = 0;
  switch (in.optimizer_step) {
    case OptimizerStep::fused:
      opt_ops = (in.eager_kernels ? 10 : 3) * launches;
      break;
    case OptimizerStep::megatron_fp16:
      // A .float() per tensor; unscale, l2norm, FusedAdam and the copy back
      // multi-tensor; found_inf.item() a synchronization.
      opt_ops = tensors + 4 * launches, opt_syncs = 1;
      break;
    case OptimizerStep::torch_foreach:
      opt_ops = 10 * launches;
      break;
    case OptimizerStep::composer:
      // Per tensor: the step's += 1, 8 Adam kernels (weight_decay 0), the
      // grad's norm and scale; state_steps[i].item() a synchronization each.
      opt_ops = 11 * tensors, opt_syncs = tensors;
      break;
  }
  opt_ops += 5;
  exposed += std::max(0.0, double(opt_ops) * op_s - opt_s);
  exposed += double(1 + opt_syncs) * op_s;  // the step's synchronization (and the optimizer's)
  // Megatron-LM's training loop (PlanInput::train_loop megatron_lm; the
  // same code at NVIDIA/Megatron-LM 6985e58938 and 2755bcb87b): its timers
  // run whether or not they are logged, and _Timer.start() and stop()
  // (megatron/global_vars.py) each call torch.cuda.synchronize(), after
  // which the device waits for the next op's issue, as the step's own
  // synchronization above. Per forward_step call (each chunk's forward of
  // each microbatch): megatron/schedules.py forward_step's 'forward-compute'
  // (2), pretrain_gpt.py forward_step's 'batch-generator' (2) and
  // megatron/mpu/data.py broadcast_data's sizes_cuda.cpu() (1); per
  // backward_step call, 'backward-compute' (2). With pp > 1, each
  // communicating megatron/p2p_communication.py call runs its timer (2) and
  // _communicate's torch.cuda.synchronize() after batch_isend_irecv (1):
  // counted at the steady state's calls, one per microbatch and chunk
  // interleaved (send_forward_backward_recv_forward_backward), two per
  // microbatch in 1F1B on a middle stage (send_forward_recv_backward,
  // send_backward_recv_forward), one on the first or last (the other
  // returns at is_pipeline_first/last_stage); the warm-up's and cool-down's
  // extra calls are not counted. Per step, the timers both commits run:
  // 'backward-embedding-all-reduce', 'optimizer', and the float16
  // optimizer's 'optimizer-copy-to-main-grad', 'optimizer-clip-main-grad',
  // 'optimizer-copy-main-to-model-params' (megatron/optimizer/optimizer.py
  // step; 10), 'backward-params-all-reduce' under --DDP-impl local (overlap
  // off: 2), 'optimizer-unscale-and-check-inf' with the fp16 grad scaler
  // (optimizer megatron_fp16: 2). 2755bcb87b's further per-step timers
  // ('backward-reduce-model-grads', 'backward-layernorm-all-reduce',
  // 'optimizer-count-zeros', 'optimizer-inner-step',
  // 'backward-gather-model-params': 10 syncs) are not counted (the input does
  // not tell the commits apart). After the step, megatron/training.py train()
  // reads optimizer.get_loss_scale().item() (1 sync), and on the device left
  // idle by the optimizer's timers train_step sums the microbatches' reduced
  // losses (sum(losses_reduced_for_key) / len: m adds and a divide) and
  // training_log adds them to total_loss_dict (1): m + 2 ops each exposed
  // (on the last stage; the next step's model-parallel norm all-reduce makes
  // every stage wait for it).
  int64_t tail = 0;
  if (in.train_loop == TrainLoop::megatron_lm) {
    const int64_t v = in.schedule == pipeline::ScheduleKind::interleaved ? std::max(1, in.virtual_stages) : 1;
    ops_syncs = megatron_loop_syncs(r.microbatches, v, in.pp, pace.rank, in.overlap,
                                    in.optimizer_step == OptimizerStep::megatron_fp16);
    tail = r.microbatches + 2;
    exposed += double(ops_syncs + tail) * op_s;
  }
  ops = int64_t(passes) * (f + b) + opt_ops + tail;
  return exposed;
}

}  // namespace

double gemm_gflops(const PlanInput& in, const GemmShape& g) {
  if (!in.hw.gemm_rates.empty()) return table_gflops(in.hw.gemm_rates, g.m, g.n, g.k);
  if (in.hw.gemm_achievable_tflops > 0)
    return modeled_gemm_gflops(std::min(in.hw.gemm_achievable_tflops, in.hw.peak_tflops), in.hw.gemm_units,
                               in.hw.gemm_tile_m, in.hw.gemm_tile_n, g, in.hw.mem_bw_GBps, elem_bytes(in.precision));
  return in.hw.peak_tflops * 1e3 * in.hw.gemm_efficiency;
}

void time_step(const PlanInput& in, const Pipe& pipe, PlanResult& r) {
  r.timed = true;
  const double peak = in.hw.peak_tflops * 1e12 * double(r.world);
  r.gemm_efficiency = in.hw.gemm_efficiency;
  const bool attn_timed = in.shape && in.hw.attention_fwd_s > 0 && in.hw.attention_bwd_s > 0;
  // A rank's GEMMs (tp and cp shards of the whole model's) at the measured
  // rates or the tile model's; a measured attention core's own GEMMs are in
  // its time instead.
  if (in.shape && (!in.hw.gemm_rates.empty() || in.hw.gemm_achievable_tflops > 0))
    r.gemm_efficiency = gemm_efficiency(
        rank_gemms(*in.shape, in.microbatch_size, r.seq, in.tp, in.cp, !attn_timed, in.ep),
        [&](const GemmShape& g) { return gemm_gflops(in, g); }, in.hw.peak_tflops * 1e12);
  // The slowest of the world's GPUs paces the step's GEMM-bound compute
  // (Hardware::gemm_spread; r.slowest_gpu, plan()'s): its GEMMs, and a kernel
  // rate's attention core (stage_cost), at 1 + spread x the expected largest
  // of world draws.
  const double achieved = peak * r.gemm_efficiency / r.slowest_gpu;
  const StageCost pace = pace_stage(in, pipe, r, attn_timed, achieved);
  r.memory_bytes = pace.bytes.total;
  r.memory_norm_bytes = pace.bytes.norm;
  r.memory_eager_norm_bytes = pace.bytes.eager_norm;
  r.memory_softmax_bytes = pace.bytes.softmax;
  r.memory_loss_bytes = pace.bytes.loss;
  r.memory_optimizer_bytes = pace.bytes.optimizer;
  r.memory_buffer_bytes = pace.bytes.buffer;
  r.memory_s = memory_time(in.hw, pace.bytes);
  // The data-parallel buffers' rate was measured as a step streams them
  // (calibrate::measure_memory_bound), so compute_scale, which a DDP step
  // calibrates for what the kernels' rates miss, leaves their time alone.
  r.buffer_s = buffer_time(in.hw, pace.bytes);
  // The node's ranks computing side by side (Hardware::corun_scale).
  const int64_t world = int64_t(in.dp) * in.tp * in.cp * in.pp,
                together = in.ranks_per_node > 0 ? std::min(world, in.ranks_per_node) : world;
  r.corun = corun_factor(in.hw.corun_scale, in.hw.corun_ranks, double(together) / double(in.tp * in.pp));
  const double compute_scale = in.hw.compute_scale * r.corun;
  r.compute_s = (stage_time(in, r, achieved, pace) - r.buffer_s) * compute_scale + r.buffer_s;
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
  time_comm(in, attn_timed, fwd_s, bwd_s, r);
  const double opt_rate = in.hw.optimizer_mem_bw_GBps > 0 ? in.hw.optimizer_mem_bw_GBps : in.hw.mem_bw_GBps;
  const double opt_s = opt_rate > 0 ? pace.bytes.optimizer / (opt_rate * 1e9) * compute_scale : 0.0;
  r.host_overhead_s = host_overhead(in, r, pace, fwd_s, bwd_s, opt_s, r.host_ops, r.loop_syncs);
  r.step_s = r.compute_s + r.bubble_s + r.exposed_comm_s + r.host_overhead_s;
  r.tokens_per_s = double(r.global_batch * r.seq) / r.step_s;
  r.mfu = r.model_flops / (r.step_s * peak);
  r.hfu = r.hardware_flops / (r.step_s * peak);
}

}  // namespace parts
}  // namespace pb::planner
