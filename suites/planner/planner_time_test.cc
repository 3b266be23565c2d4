// The planner's time: compute at the GEMM and memory-bound rates, the
// slowest stage's pace, the bubble (the simulator's), the comm rows' ring
// time and what overlap hides, calls issued without waiting.
#include "suites/planner/planner.h"
#include "suites/planner/machine.h"
#include "suites/planner/plan_output.h"
#include "suites/planner/planner_parts.h"
#include "suites/planner/planner_testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <mutex>
#include <set>

#include "harness/comm/runner.h"
#include "harness/input_error_testing.h"
#include "harness/status.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/strategy.h"
#include "impl/pipeline/strategy.h"
#include "impl/tensor_parallel/runner.h"
#include "impl/tensor_parallel/strategy.h"
#include "impl/pipeline/simulator.h"
#include "reference/device_testing.h"
#include "reference/layout.h"
#include "reference/runner.h"


namespace pb::planner {
namespace {

// Megatron-LM's GPT dropout (--dropout; configs/published' Megatron rows):
// the attention dropout over the probabilities moves, per score, 2e + 1
// bytes forward (read, write, the mask) and as many backward; each
// bias-dropout-add's mask is a byte per element written forward and read
// backward; the embedding's dropout is one more kernel. Recomputation runs
// the forward's share again: full the whole layer's, selective the scores'.
TEST(Planner, MegatronDropoutMovesItsKernelsBytes) {
  const ActivationShape x{2, 64, 128, 4, 1, 1, false, false, 2};
  ActivationShape d = x;
  d.dropout = true;
  const int64_t tokens = 2 * 64, scores = 4 * 64 * tokens;
  EXPECT_EQ(layer_softmax_traffic_bytes(x), scores * 3 * 2 * 2);
  EXPECT_EQ(layer_softmax_traffic_bytes(d), scores * (3 * 2 * 2 + 2 * (2 * 2 + 1)));
  EXPECT_EQ(layer_softmax_forward_traffic_bytes(d), scores * (2 * 2 + 2 * 2 + 1));
  EXPECT_EQ(layer_shared_traffic_bytes(d) - layer_shared_traffic_bytes(x), 2 * 2 * 128 * tokens);
  EXPECT_EQ(layer_shared_forward_traffic_bytes(d), (10 * 128 * 2 + 2 * 128) * tokens);
  EXPECT_EQ(layer_traffic_bytes(d) - layer_traffic_bytes(x),
            layer_softmax_traffic_bytes(d) - layer_softmax_traffic_bytes(x) + 2 * 2 * 128 * tokens);
  EXPECT_EQ(layer_forward_traffic_bytes(x) * 3, layer_traffic_bytes(x));  // backward twice the forward
  EXPECT_EQ(embedding_traffic_bytes(d) - embedding_traffic_bytes(x), 2 * (2 * 2 + 1) * 128 * tokens);
  ActivationShape d_sp = d;  // sequence parallel shards the masks of what it shards
  d_sp.tp = 2;
  d_sp.sp = true;
  EXPECT_EQ(layer_shared_traffic_bytes(d_sp), (3 * 10 * 64 * 2 + 2 * 2 * 64) * tokens);

  PlanInput in = model_input("small", 2, 2);
  in.hw = figures({.peak_tflops = 1, .mem_bw_GBps = 10});
  const ModelConfig& m = *in.shape;
  ActivationShape run{2, m.maxT, m.C, m.NH, 1, 1, false, false, 2};
  const PlanResult base = plan(in);
  in.dropout = true;
  const PlanResult drop = plan(in);
  ActivationShape run_d = run;
  run_d.dropout = true;
  const double extra = m.L * double(layer_traffic_bytes(run_d) - layer_traffic_bytes(run)) +
                       double(embedding_traffic_bytes(run_d) - embedding_traffic_bytes(run));
  EXPECT_DOUBLE_EQ(drop.memory_bytes - base.memory_bytes, extra);
  in.recompute = Recompute::selective;
  EXPECT_DOUBLE_EQ(plan(in).memory_bytes - drop.memory_bytes,
                   m.L * double(layer_softmax_forward_traffic_bytes(run_d)));
  in.recompute = Recompute::full;
  EXPECT_DOUBLE_EQ(plan(in).memory_bytes - drop.memory_bytes, m.L * double(layer_forward_traffic_bytes(run_d)));
  // The llama family has no dropout: refused, named.
  in.recompute = Recompute::none;
  in.shape = planner_model("tiny-llama");
  const std::string refused = input_error_of([&] { plan(in); });  // a failure when it plans
  EXPECT_NE(refused.find("--dropout"), std::string::npos) << refused;
}

// The optimizer step and the loss as each framework runs them
// (PlanInput::optimizer_step, PlanInput::loss): the byte counts per updated
// parameter and per local vocabulary entry stated in planner.h and
// model_cost.h, in the plan's memory-bound bytes, and the optimizer's ops.
TEST(Planner, OptimizerStepAndLossAsFrameworksRunThem) {
  EXPECT_EQ(optimizer_step_bytes(OptimizerStep::fused, Precision::bf16_mixed), 2 + 12 + 2 + 12);
  EXPECT_EQ(optimizer_step_bytes(OptimizerStep::fused, Precision::fp32), 4 + 4 + 8 + 4 + 8);
  // Megatron-LM --fp16: .float() 2 + 4, unscale 4 + 4, l2norm 4, FusedAdam 16 + 12, copy back 4 + 2.
  EXPECT_EQ(optimizer_step_bytes(OptimizerStep::megatron_fp16, Precision::bf16_mixed), 52);
  // foreach AdamW 80 (its 8 foreach ops over fp32 tensors), clip_grad_norm_ 4 + 8.
  EXPECT_EQ(optimizer_step_bytes(OptimizerStep::torch_foreach, Precision::bf16_mixed), 92);
  // DecoupledAdamW without weight decay 80, FSDP clip_grad_norm_ 4 + 8.
  EXPECT_EQ(optimizer_step_bytes(OptimizerStep::composer, Precision::bf16_mixed), 92);
  // Megatron's loss: forward (e + 4) + 4 + 8 + 8 + 4 + 8, backward 8 + (4 + e)
  // per local vocabulary entry and token; the final LayerNorm as the fused head's.
  const ActivationShape x{2, 64, 128, 4, 1, 1, false, false, 2};
  EXPECT_EQ(head_megatron_traffic_bytes(x, 1000), (6 * 128 * 2 + 52 * 1000) * 2 * 64);
  ActivationShape t2 = x;
  t2.tp = 2, t2.sp = true;
  EXPECT_EQ(head_megatron_traffic_bytes(t2, 1000), (6 * 64 * 2 + 52 * 500) * 2 * 64);
  // flash-attn 1.0.9's xentropy: forward the logits read (2), backward read (2)
  // and the gradient written (2): 6 bytes per local vocabulary entry and
  // token; with composer's two training metrics each an fp32 cross entropy,
  // upcast 2 + 4 and log_softmax 4 + 4: 6 + 28 = 34.
  EXPECT_EQ(head_flash_xentropy_traffic_bytes(x, 1000, false), (6 * 128 * 2 + 6 * 1000) * 2 * 64);
  EXPECT_EQ(head_flash_xentropy_traffic_bytes(x, 1000, true), (6 * 128 * 2 + 34 * 1000) * 2 * 64);
  EXPECT_EQ(head_flash_xentropy_traffic_bytes(t2, 1000, true), (6 * 64 * 2 + 34 * 500) * 2 * 64);
  ActivationShape f32 = x;
  f32.elem_bytes = 4;  // fp32 logits: 3 x 4, metrics 2 x (4 + 4 + 8)
  EXPECT_EQ(head_flash_xentropy_traffic_bytes(f32, 1000, true), (6 * 128 * 4 + (12 + 32) * 1000) * 2 * 64);

  PlanInput in = model_input("small", 2, 0);
  in.precision = Precision::bf16_mixed;
  in.hw = figures({.peak_tflops = 1, .mem_bw_GBps = 10});
  in.hw.host_op_us = 4;
  const ModelConfig& m = *in.shape;
  const ActivationShape s{2, m.maxT, m.C, m.NH, 1, 1, false, false, 2};
  const PlanResult fused = plan(in);
  const double params = double(fused.worst.optimizer) / 12;  // dp 1: every parameter stepped here
  EXPECT_EQ(params, double(m.num_params()));
  const int64_t tensors = int64_t(m.L) * 12, launches = multi_tensor_launches(tensors, params);
  struct Variant {
    OptimizerStep step;
    double bytes;
    int64_t ops, syncs;
  };
  for (const Variant& v : {Variant{OptimizerStep::megatron_fp16, 52, tensors + 4 * launches, 1},
                           Variant{OptimizerStep::torch_foreach, 92, 10 * launches, 0},
                           Variant{OptimizerStep::composer, 92, 11 * tensors, tensors}}) {
    in.optimizer_step = v.step;
    const PlanResult r = plan(in);
    EXPECT_NEAR(r.memory_bytes - fused.memory_bytes, params * (v.bytes - 28), 1e-9 * r.memory_bytes);
    EXPECT_EQ(r.host_ops - fused.host_ops, v.ops - 3 * launches);
    EXPECT_EQ(r.worst.device_total(), fused.worst.device_total());  // the memory plan is not the step's passes
    EXPECT_GE(r.host_overhead_s, double(1 + v.syncs) * 4e-6 - 1e-15);
  }
  in.optimizer_step = OptimizerStep::fused;
  in.loss = LossKernel::megatron_fp32;
  const PlanResult loss = plan(in);
  EXPECT_NEAR(loss.memory_bytes - fused.memory_bytes,
              double(head_megatron_traffic_bytes(s, m.V) - head_traffic_bytes(s, m.V)), 1e-9 * loss.memory_bytes);
  EXPECT_EQ(loss.loop_syncs, 0);  // the loss alone is not Megatron-LM's loop (PlanInput::train_loop)
  EXPECT_EQ(head_megatron_traffic_bytes(s, m.V) - head_traffic_bytes(s, m.V),
            int64_t(52 - 8) * m.V * 2 * m.maxT);  // 52 bytes per logit where the fused head moves 4 x 2
  EXPECT_GT(loss.step_s, fused.step_s);
  in.loss = LossKernel::flash_xentropy;  // 2 bytes per logit fewer than the fused head's 8
  EXPECT_NEAR(plan(in).memory_bytes - fused.memory_bytes, -2.0 * double(m.V) * 2 * m.maxT, 1e-9 * loss.memory_bytes);
  in.loss = LossKernel::composer_flash_xentropy;  // 34 against 8
  EXPECT_NEAR(plan(in).memory_bytes - fused.memory_bytes, 26.0 * double(m.V) * 2 * m.maxT, 1e-9 * loss.memory_bytes);
}

// Megatron-LM's training loop (PlanInput::train_loop megatron_lm; Megatron-LM
// 6985e58938 and 2755bcb87b): per forward_step call the batch's copies and
// the s x s mask (17 s^2 + 36 b s + 8 s bytes; loss_func's 20 b s on the
// head), the torch.cuda.synchronize() calls of its timers, broadcast_data
// and p2p, the tp broadcasts of the batch, the loss's per-microbatch dp
// all-reduce and the model-parallel group's norm and found_inf all-reduces.
TEST(Planner, MegatronTrainingLoopWorkIsCounted) {
  EXPECT_EQ(megatron_batch_traffic_bytes(1, 2048, false), 17LL * 2048 * 2048 + 36 * 2048 + 8 * 2048);
  EXPECT_EQ(megatron_batch_traffic_bytes(4, 64, true) - megatron_batch_traffic_bytes(4, 64, false), 20 * 4 * 64);
  // 7 per microbatch and chunk; p2p 3 per call; per step 10 timers and the
  // loss scale's .item(), +2 local DDP, +2 fp16 scaler.
  EXPECT_EQ(parts::megatron_loop_syncs(4, 1, 1, 0, true, false), 7 * 4 + 11);
  EXPECT_EQ(parts::megatron_loop_syncs(4, 1, 4, 1, false, true), 7 * 4 + 3 * 4 * 2 + 11 + 2 + 2);  // middle stage
  EXPECT_EQ(parts::megatron_loop_syncs(4, 1, 4, 3, true, false), 7 * 4 + 3 * 4 + 11);             // last stage
  EXPECT_EQ(parts::megatron_loop_syncs(4, 3, 4, 1, true, false), 7 * 12 + 3 * 12 + 11);           // interleaved

  PlanInput in = model_input("small", 2, 2 * 2 * 3);  // dp 2: 3 microbatches per replica
  in.tp = 2, in.pp = 2, in.dp = 2;
  in.ranks_per_node = 2;
  in.hw = figures({.peak_tflops = 1, .bw_intra_GBps = 5, .bw_inter_GBps = 1, .mem_bw_GBps = 10});
  in.hw.host_op_us = 4;
  const PlanResult fused = plan(in);
  auto rows = [](const PlanResult& r, const std::string& group, const std::string& op) {
    std::vector<CommRow> out;
    for (const CommRow& c : r.comm)
      if (c.group == group && c.op == op) out.push_back(c);
    return out;
  };
  EXPECT_TRUE(rows(fused, "loss", "all_reduce").empty());
  EXPECT_TRUE(rows(fused, "mp", "all_reduce").empty());
  EXPECT_TRUE(rows(fused, "tp", "broadcast").empty());
  EXPECT_EQ(fused.loop_syncs, 0);
  in.loss = LossKernel::megatron_fp32;
  in.optimizer_step = OptimizerStep::megatron_fp16;
  const PlanResult loss_only = plan(in);  // Megatron-LM's loss and optimizer, not its loop
  EXPECT_TRUE(rows(loss_only, "loss", "all_reduce").empty());
  EXPECT_EQ(loss_only.loop_syncs, 0);
  in.train_loop = TrainLoop::megatron_lm;
  const PlanResult r = plan(in);
  // the batch and masks of each forward_step call (3 microbatches; the head's loss mask on this end stage)
  EXPECT_NEAR(r.memory_bytes - loss_only.memory_bytes, 3.0 * double(megatron_batch_traffic_bytes(2, r.seq, true)),
              1e-9 * r.memory_bytes);
  const auto loss = rows(r, "loss", "all_reduce"), mp = rows(r, "mp", "all_reduce"), bc = rows(r, "tp", "broadcast");
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_EQ(loss[0].calls, 3);
  EXPECT_EQ(loss[0].bytes, 3 * 4);
  EXPECT_EQ(loss[0].group_size, 2);
  EXPECT_TRUE(loss[0].inter_node);  // dp at stride tp = 2 = ranks per node
  ASSERT_EQ(mp.size(), 1u);
  EXPECT_EQ(mp[0].group_size, 4);
  EXPECT_EQ(mp[0].calls, 2);  // the norm and found_inf
  EXPECT_EQ(mp[0].bytes, 8);
  EXPECT_EQ(mp[0].per_node, 2);
  ASSERT_EQ(bc.size(), 1u);
  EXPECT_EQ(bc[0].calls, 2 * 3);
  EXPECT_EQ(bc[0].bytes, 3 * (32 + 2 * (r.seq + 1) * 8));
  EXPECT_EQ(bc[0].bus_bytes, double(bc[0].bytes));  // a broadcast moves the message once
  for (const CommRow& c : r.comm)  // the norm left the tp step row (no sp)
    EXPECT_FALSE(c.group == "tp" && c.phase == "step") << c.calls;
  EXPECT_EQ(r.loop_syncs, 7 * 3 + 3 * 3 + 11 + 2 + 2);  // an end stage (pp 2); overlap off: local DDP
  // each sync and the step's m + 2 loss ops one op's host time, exposed
  EXPECT_GE(r.host_overhead_s, fused.host_overhead_s + double(r.loop_syncs + 3 + 2) * 4e-6 - 1e-12);
  EXPECT_EQ(r.host_ops - loss_only.host_ops, 3 + 2);  // the step's m + 2 loss ops are issued ops too
  EXPECT_GT(r.step_s, fused.step_s);
}

// A DDP run's gradients in PyTorch autograd's .grad (PlanInput::
// grad_accum_autograd, Megatron-LM 6985e58938's DDPs): in place of the
// engine's one zeroing pass, 3 gradient elements per parameter for each
// microbatch after the first and 6 for the all-reduce's bucket copies (dp >
// 1), at the gradient reduce's bytes; on each pipeline stage its own
// parameters; refused for sharded states.
TEST(Planner, AutogradGradientsAccumulateEveryMicrobatch) {
  PlanInput in = model_input("small", 2, 2 * 2 * 5);  // 5 microbatches per replica
  in.dp = 2;
  in.hw = figures({.peak_tflops = 1, .bw_intra_GBps = 5, .mem_bw_GBps = 10});
  const ModelConfig& m = *in.shape;
  const PlanResult buffer = plan(in);
  const double params = double(m.num_params());
  EXPECT_EQ(buffer.worst.local_traffic, int64_t(params) * 2);  // zeroed once
  in.grad_accum_autograd = true;
  const PlanResult autograd = plan(in);
  EXPECT_EQ(autograd.worst.local_traffic, int64_t(params) * 2 * (3 * 4 + 6));
  EXPECT_NEAR(autograd.memory_bytes - buffer.memory_bytes, params * 2 * (3 * 4 + 6 - 1), 1e-9 * autograd.memory_bytes);
  EXPECT_GT(autograd.step_s, buffer.step_s);
  in.grad_reduce_bytes = 4;  // fp32 gradients: twice the bytes
  EXPECT_EQ(plan(in).worst.local_traffic, int64_t(params) * 4 * (3 * 4 + 6));
  in.grad_reduce_bytes = 0;
  in.dp = 1;  // no all-reduce, no bucket
  in.global_batch = 2 * 5;
  EXPECT_EQ(plan(in).worst.local_traffic, int64_t(params) * 2 * 3 * 4);
  in.pp = 2;  // each stage its own gradients
  const PlanResult staged = plan(in);
  for (const StageMemory& st : staged.stages) EXPECT_EQ(st.local_traffic, st.grads / 2 * 2 * 3 * 4);
  in.pp = 1;
  in.dp = 2;
  in.global_batch = 20;
  in.shard = dp::Shard::zero1;
  const std::string refused = input_error_of([&] { plan(in); });  // a failure when it plans
  EXPECT_NE(refused.find("--grad-accum autograd"), std::string::npos) << refused;
}

// The memory-bound term: the stated per-token counts, split by tp as stated,
// and timed as bytes / bandwidth inside compute.
TEST(Planner, MemoryBoundWorkIsBytesOverBandwidth) {
  const ActivationShape x{2, 64, 128, 4, 1, 1, false, false, 4};
  EXPECT_EQ(layer_traffic_bytes(x), 3 * (10 * 128 + 8 * 128 + 2 * 4 * 64) * 2 * 64 * 4);
  ActivationShape t2 = x;
  t2.tp = 2;
  EXPECT_EQ(layer_traffic_bytes(t2), 3 * (10 * 128 + (8 * 128 + 2 * 4 * 64) / 2) * 2 * 64 * 4);
  EXPECT_EQ(head_traffic_bytes(x, 1000), (6 * 128 + 4 * 1000) * 2 * 64 * 4);
  EXPECT_EQ(embedding_traffic_bytes(x), 5 * 128 * 2 * 64 * 4);

  PlanInput in = model_input("small", 2, 0);
  in.precision = Precision::fp32;
  in.hw = figures({.peak_tflops = 1});
  const PlanResult no_bw = plan(in);
  EXPECT_EQ(no_bw.memory_s, 0);
  in.hw.mem_bw_GBps = 10;
  const PlanResult r = plan(in);
  const ModelConfig& m = *in.shape;
  const ActivationShape s{2, m.maxT, m.C, m.NH, 1, 1, false, false, 4};
  const double opt = double(m.num_params()) * (4 + 4 + 8 + 4 + 8);  // read p, g, m+v; write p, m+v
  const double zeroed = double(m.num_params()) * 4;  // DDP zeroes its gradient (dp::local_traffic_bytes)
  EXPECT_EQ(r.worst.local_traffic, int64_t(zeroed));
  const double bytes = m.L * double(layer_traffic_bytes(s)) + double(embedding_traffic_bytes(s)) +
                       double(head_traffic_bytes(s, m.V)) + opt + zeroed;
  EXPECT_DOUBLE_EQ(r.memory_bytes, bytes);
  EXPECT_DOUBLE_EQ(r.memory_s, bytes / 10e9);
  EXPECT_NEAR(r.compute_s, no_bw.compute_s + r.memory_s, 1e-12);
  // The LayerNorms' and residual adds' bytes at their own rate when given.
  const double shared = m.L * double(layer_shared_traffic_bytes(s));
  EXPECT_EQ(shared, m.L * 3.0 * 10 * m.C * 2 * m.maxT * 4);
  in.hw.shared_mem_bw_GBps = 40;
  const PlanResult split = plan(in);
  EXPECT_DOUBLE_EQ(split.memory_bytes, bytes);
  EXPECT_NEAR(split.memory_s, (bytes - shared) / 10e9 + shared / 40e9, 1e-15);
  // Sequence parallel shards only those: at tp2 it saves half of their time.
  in.hw.bw_intra_GBps = 10;
  in.tp = 2;
  const PlanResult tp = plan(in);
  in.sp = true;
  const PlanResult sp = plan(in);
  const ActivationShape no_sp{2, m.maxT, m.C, m.NH, 2, 1, false, false, 4},
      with_sp{2, m.maxT, m.C, m.NH, 2, 1, true, false, 4};
  const double ends = double(embedding_traffic_bytes(no_sp) - embedding_traffic_bytes(with_sp) +
                             head_traffic_bytes(no_sp, m.V) - head_traffic_bytes(with_sp, m.V));  // the embedding's and final LayerNorm's tokens too
  EXPECT_GT(ends, 0);
  EXPECT_NEAR(tp.memory_s - sp.memory_s, shared / 2 / 40e9 + ends / 10e9, 1e-15);
  in.tp = 1;
  in.sp = false;
  // The optimizer step's bytes at their own rate when given; ZeRO-2 at dp2
  // updates half the parameters, and saves half of that time, not of the
  // average rate's.
  in.hw.optimizer_mem_bw_GBps = 30;
  const PlanResult opt_split = plan(in);
  EXPECT_DOUBLE_EQ(opt_split.memory_bytes, bytes);
  EXPECT_NEAR(opt_split.memory_s, (bytes - shared - opt) / 10e9 + shared / 40e9 + opt / 30e9, 1e-15);
  in.dp = 2;
  in.shard = dp::Shard::zero2;
  const PlanResult z2 = plan(in);
  in.shard = dp::Shard::none;
  const PlanResult ddp = plan(in);
  const double more_buffers = double(z2.worst.local_traffic - ddp.worst.local_traffic);
  EXPECT_GT(more_buffers, 0);
  EXPECT_NEAR(ddp.memory_s - z2.memory_s, opt / 2 / 30e9 - more_buffers / 10e9, 1e-15);
  // The data-parallel buffers at their own rate when given, outside
  // compute_scale (measured as a step streams them).
  in.shard = dp::Shard::zero3;
  in.dp = 1;
  const PlanResult z3 = plan(in);
  in.hw.buffer_mem_bw_GBps = 25;
  in.hw.compute_scale = 1.5;
  const PlanResult z3_own = plan(in);
  const double buf = double(z3.worst.local_traffic);
  EXPECT_NEAR(z3_own.memory_s, z3.memory_s - buf / 10e9 + buf / 25e9, 1e-15);
  EXPECT_NEAR(z3_own.compute_s, (z3.compute_s - buf / 10e9) * 1.5 + buf / 25e9, 1e-12 * z3.compute_s);
  in.hw.compute_scale = 1;
  in.hw.buffer_mem_bw_GBps = -1;
  EXPECT_THROW(plan(in), InputError);
  in.hw.buffer_mem_bw_GBps = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(plan(in), InputError);
  in.hw.buffer_mem_bw_GBps = 0;
  in.shard = dp::Shard::none;
  in.hw.optimizer_mem_bw_GBps = -1;
  EXPECT_THROW(plan(in), InputError);
  in.hw.optimizer_mem_bw_GBps = std::numeric_limits<double>::infinity();
  EXPECT_THROW(plan(in), InputError);
  in.hw.optimizer_mem_bw_GBps = 0;
  in.hw.shared_mem_bw_GBps = -1;
  EXPECT_THROW(plan(in), InputError);
  in.hw.shared_mem_bw_GBps = 0;
  in.hw.mem_bw_GBps = -1;
  EXPECT_THROW(plan(in), InputError);
}

// Pipeline stages differ (the last holds the LM head; 5 blocks over 2 stages
// split 3 + 2): the slowest stage, its GEMMs and memory-bound work together,
// sets the pace. Its FLOPs (stage_flops, which add up to iteration_flops) at
// the per-rank rate plus its own bytes over the bandwidth is the compute; no
// pipeline is the whole model's over the ranks, as before.
TEST(Planner, TheSlowestPipelineStageSetsThePace) {
  ModelConfig m = planner_model("small");
  m.L = 5;
  for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
    const Flops all = iteration_flops(m, 8, 64, rc);
    const Flops first = stage_flops(m, 8, 64, rc, 3, false), last = stage_flops(m, 8, 64, rc, 2, true);
    EXPECT_TRUE(first.hardware + last.hardware == all.hardware);
    EXPECT_TRUE(first.model + last.model == all.model);
  }
  PlanInput in;
  in.shape = m;
  in.precision = Precision::fp32;
  in.microbatch_size = 2;
  in.global_batch = 8;
  in.pp = 2;
  in.hw = figures({.peak_tflops = 0.05, .bw_intra_GBps = 5, .bw_inter_GBps = 5, .mem_bw_GBps = 10});
  const PlanResult r = plan(in);
  ASSERT_EQ(r.stages.size(), 2u);
  const double per_stage_rate = 0.05e12;  // gemm_efficiency 1, one rank per stage
  double slowest = 0;
  for (const auto& [blocks, head] : {std::pair<int64_t, bool>{3, false}, {2, true}}) {
    const double flops = to_double(stage_flops(m, 8, 64, Recompute::none, blocks, head).hardware);
    const ActivationShape x{2, 64, m.C, m.NH, 1, 1, false, false, 4};
    const double opt = double(r.stages[head ? 1 : 0].optimizer) / 8 * (4 + 4 + 8 + 4 + 8);
    const double zeroed = double(r.stages[head ? 1 : 0].grads);  // DDP zeroes its gradient once
    EXPECT_EQ(r.stages[head ? 1 : 0].local_traffic, r.stages[head ? 1 : 0].grads);
    const double bytes = 4 * (double(blocks) * double(layer_traffic_bytes(x)) +
                              (head ? double(head_traffic_bytes(x, m.V)) : double(embedding_traffic_bytes(x)))) +
                         opt + zeroed;
    slowest = std::max(slowest, flops / per_stage_rate + bytes / 10e9);
  }
  EXPECT_NEAR(r.compute_s, slowest, 1e-12 * slowest);
  EXPECT_GT(r.compute_s, r.hardware_flops / (2 * per_stage_rate) + r.memory_s * 0.999);  // not the average stage
  in.pp = 1;
  in.global_batch = 2;
  const PlanResult one = plan(in);
  EXPECT_NEAR(one.compute_s, one.hardware_flops / per_stage_rate + one.memory_s, 1e-12 * one.compute_s);
}

// A measured attention core takes the place of its FLOPs and softmax traffic:
// per block and microbatch its forward (again under recomputation) and its
// backward, scaled by compute_scale like the rest; the cp group's comm is
// inside its time. Without it, Ulysses' all-to-alls are exposed even with
// overlap on (each is waited for at once) while the ring's sends may hide.
TEST(Planner, AMeasuredAttentionCoreReplacesItsFlops) {
  const ModelConfig m = planner_model("small");  // L4 C128 NH4
  for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
    const Flops f = iteration_flops(m, 8, 64, rc);
    const double attn = to_double(attention_core_flops(m, 8, 64, rc, m.L));
    EXPECT_DOUBLE_EQ(attn, (rc == Recompute::none ? 12.0 : 16.0) * 8 * 64 * 64 * m.L * m.C);
    EXPECT_LT(attn, to_double(f.hardware));
  }
  PlanInput in = model_input("small", 2, 8, 64);  // 2 microbatches per replica at dp2
  in.precision = Precision::fp32;
  in.dp = 2;
  in.cp = 2;
  in.overlap = true;
  in.hw = figures({.peak_tflops = 0.05, .bw_intra_GBps = 5, .bw_inter_GBps = 5, .latency_us = 2, .mem_bw_GBps = 10});
  in.hw.compute_scale = 1.25;
  for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
    in.recompute = rc;
    in.hw.attention_fwd_s = in.hw.attention_bwd_s = 0;
    const PlanResult flops = plan(in);
    in.hw.attention_fwd_s = 3e-4;
    in.hw.attention_bwd_s = 5e-4;
    const PlanResult timed = plan(in);
    const double rate = 0.05e12 * 4;  // the job's 4 ranks, gemm_efficiency 1
    const double attn_flops = to_double(attention_core_flops(m, 8, 64, rc, m.L));
    const ActivationShape x{2, 64, m.C, m.NH, 1, 2, false, false, 4};
    // The scores' kernels and, under either recomputation, their forward rerun.
    const double softmax = double(m.L) * 2 *
                           double(layer_softmax_traffic_bytes(x) +
                                  (rc == Recompute::none ? 0 : layer_softmax_forward_traffic_bytes(x)));
    EXPECT_NEAR(timed.memory_bytes, flops.memory_bytes - softmax, 1e-9 * flops.memory_bytes);
    const double core = double(m.L) * 2 * ((rc == Recompute::none ? 1 : 2) * 3e-4 + 5e-4);
    const double expect = ((flops.hardware_flops - attn_flops) / rate + timed.memory_bytes / 10e9 + core) * 1.25;
    EXPECT_NEAR(timed.compute_s, expect, 1e-12 * expect) << recompute_name(rc);
    double cp_s = 0;
    for (const CommRow& c : timed.comm)
      if (c.group == "cp") cp_s += c.time_s;
    EXPECT_GT(cp_s, 0);  // still reported, not added
    EXPECT_LE(timed.exposed_comm_s, flops.exposed_comm_s);
  }
  in.recompute = Recompute::none;
  in.hw.attention_fwd_s = in.hw.attention_bwd_s = 0;
  in.hw.bw_intra_GBps = in.hw.bw_inter_GBps = 0.01;  // slow links: the cp comm outlasts any compute
  in.cp_algo = CpAlgo::ulysses;
  const PlanResult uly = plan(in);
  double a2a = 0;
  for (const CommRow& c : uly.comm)
    if (c.group == "cp") a2a += c.time_s;
  EXPECT_GE(uly.exposed_comm_s, a2a);  // every all-to-all exposed
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    in.hw.attention_fwd_s = bad;
    EXPECT_THROW(plan(in), InputError);
    in.hw.attention_fwd_s = 0;
    in.hw.attention_bwd_s = bad;
    EXPECT_THROW(plan(in), InputError);
    in.hw.attention_bwd_s = 0;
  }
}

// A measured step over the modeled one scales compute (GEMMs and memory-bound
// work alike, and so the bubble and what overlap can hide), nothing else; it
// must be a finite number > 0.
TEST(Planner, ComputeScaleScalesComputeOnly) {
  PlanInput in = model_input("small", 2, 8);
  in.precision = Precision::fp32;
  in.pp = 2;
  in.dp = 2;
  in.shard = dp::Shard::zero3;
  in.hw = figures({.peak_tflops = 0.05, .bw_intra_GBps = 5, .bw_inter_GBps = 5, .latency_us = 3, .mem_bw_GBps = 10});
  const PlanResult one = plan(in);
  in.hw.compute_scale = 1.25;
  const PlanResult scaled = plan(in);
  EXPECT_NEAR(scaled.compute_s, 1.25 * one.compute_s, 1e-12 * one.compute_s);
  EXPECT_NEAR(scaled.bubble_s, 1.25 * one.bubble_s, 1e-12 * one.bubble_s);
  EXPECT_DOUBLE_EQ(scaled.memory_s, one.memory_s);  // the bytes over the bandwidth, as before
  EXPECT_DOUBLE_EQ(scaled.comm_s, one.comm_s);
  EXPECT_NEAR(scaled.step_s, scaled.compute_s + scaled.bubble_s + scaled.exposed_comm_s, 1e-15);
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    in.hw.compute_scale = bad;
    EXPECT_THROW(plan(in), InputError) << bad;
  }
}

// Ranks time-sharing cores: the bubble is what the critical path at a whole
// core (compute x share x (1 + bubble / ideal)) exceeds the shared compute by,
// none when the share's compute is longer; a share outside (0, 1] is refused.
TEST(Planner, TimeSharedCoresHideTheBubble) {
  PlanInput in = model_input("small", 2, 4);  // 2 microbatches over pp 4: a large bubble
  in.precision = Precision::fp32;
  in.pp = 4;
  in.hw = figures({.peak_tflops = 0.05, .bw_intra_GBps = 5, .bw_inter_GBps = 5});
  const PlanResult whole = plan(in);
  ASSERT_GT(whole.bubble_over_ideal, 1);
  EXPECT_NEAR(whole.bubble_s, whole.compute_s * whole.bubble_over_ideal, 1e-15);
  in.hw.core_share = 0.5;
  const PlanResult half = plan(in);
  EXPECT_NEAR(half.bubble_s, half.compute_s * 0.5 * (1 + half.bubble_over_ideal) - half.compute_s, 1e-15);
  in.hw.core_share = 0.2;  // five ranks per core: the shared compute is the longer
  EXPECT_EQ(plan(in).bubble_s, 0);
  for (double bad : {0.0, -0.5, 1.5, std::nan("")}) {
    in.hw.core_share = bad;
    EXPECT_THROW(plan(in), InputError) << bad;
  }
}

// The table is read in log(compute) between its points and held at its ends.
TEST(Planner, AsyncCallCostInterpolatesInLogCompute) {
  const std::vector<AsyncCallCost> t{{100, 50}, {1000, 200}, {4000, 300}};
  EXPECT_EQ(async_call_cost_us({}, 500), 0);
  EXPECT_DOUBLE_EQ(async_call_cost_us(t, 10), 50);
  EXPECT_DOUBLE_EQ(async_call_cost_us(t, 100), 50);
  EXPECT_NEAR(async_call_cost_us(t, std::sqrt(1e5)), 125, 1e-9);  // halfway in log
  EXPECT_DOUBLE_EQ(async_call_cost_us(t, 1000), 200);
  EXPECT_NEAR(async_call_cost_us(t, 2000), 250, 1e-9);
  EXPECT_DOUBLE_EQ(async_call_cost_us(t, 1e6), 300);
}

// On time-shared cores each collective a rank issues without waiting (ZeRO-3's
// prefetched gathers, DDP's overlapped buckets) costs the table's figure at
// the step's compute per such call; with whole cores, or gathers waited for at
// once (prefetch 0), nothing. A table out of order or not finite is refused.
TEST(Planner, AsyncCallsCostOnTimeSharedCoresOnly) {
  PlanInput in = model_input("small", 4, 32);  // 2 microbatches per rank
  in.precision = Precision::fp32;
  in.dp = 4;
  in.shard = dp::Shard::zero3;
  in.hw = figures({.peak_tflops = 0.05, .bw_intra_GBps = 5, .bw_inter_GBps = 5});
  in.hw.async_call_cost = {{100, 50}, {1000, 200}, {4000, 300}};
  const PlanResult whole = plan(in);
  int64_t gathers = 0;
  for (const CommRow& c : whole.comm)
    if (c.op == "all_gather" && c.group == "dp" && c.phase != "step") gathers += c.calls;
  ASSERT_GT(gathers, 0);
  EXPECT_EQ(whole.async_calls, gathers);
  EXPECT_EQ(whole.async_cost_s, 0) << "whole cores";
  in.hw.core_share = 0.5;
  const PlanResult shared = plan(in);
  const double per_call = async_call_cost_us(in.hw.async_call_cost, shared.compute_s * 1e6 / double(gathers));
  EXPECT_GT(per_call, 0);
  EXPECT_NEAR(shared.async_cost_s, double(gathers) * per_call * 1e-6, 1e-15);
  in.hw.async_call_cost.clear();
  const PlanResult untaxed = plan(in);
  EXPECT_NEAR(shared.exposed_comm_s - untaxed.exposed_comm_s, shared.async_cost_s, 1e-12);
  EXPECT_NEAR(shared.step_s - untaxed.step_s, shared.async_cost_s, 1e-12);
  in.hw.async_call_cost = {{100, 50}, {1000, 200}, {4000, 300}};
  in.prefetch = 0;
  EXPECT_EQ(plan(in).async_calls, 0);
  // DDP: the buckets reduced under backward, only when overlapped.
  in.shard = dp::Shard::none;
  in.overlap = true;
  const PlanResult ddp = plan(in);
  EXPECT_GT(ddp.async_calls, 0);
  EXPECT_GT(ddp.async_cost_s, 0);
  in.overlap = false;
  EXPECT_EQ(plan(in).async_calls, 0);
  for (const std::vector<AsyncCallCost>& bad : std::vector<std::vector<AsyncCallCost>>{
           {{1000, 50}, {100, 20}}, {{100, 50}, {100, 60}}, {{0, 50}}, {{100, -1}}, {{100, std::nan("")}},
           {{std::numeric_limits<double>::infinity(), 1}}}) {
    in.hw.async_call_cost = bad;
    EXPECT_THROW(plan(in), InputError);
  }
  in.hw.async_call_cost.clear();
  in.prefetch = -1;
  EXPECT_THROW(plan(in), InputError);
}

// The planner's bubble is the pipeline's declared one, which equals the
// simulator's on the generated schedules.
TEST(Planner, BubbleEqualsSimulator) {
  using pipeline::ScheduleKind;
  struct Case { ScheduleKind kind; int pp, v; int64_t batch; };
  for (const Case c : {Case{ScheduleKind::gpipe, 4, 1, 8}, Case{ScheduleKind::one_f_one_b, 4, 1, 16},
                       Case{ScheduleKind::interleaved, 4, 3, 8}, Case{ScheduleKind::zb_h1, 3, 1, 6},
                       Case{ScheduleKind::one_f_one_b, 6, 1, 5}}) {
    PlanInput in = model_input("gpt2-124m", 1, c.batch);
    in.pp = c.pp;
    in.virtual_stages = c.v;
    in.schedule = c.kind;
    const PlanResult r = plan(in);
    EXPECT_EQ(r.microbatches, c.batch);
    const pipeline::ScheduleConfig cfg{c.pp, int(c.batch), c.v, 1};
    const pipeline::SimResult sim = pipeline::simulate(pipeline::make_schedule(c.kind, cfg), {1, 1, 1, 0});
    EXPECT_NEAR(r.bubble_over_ideal, sim.bubble_over_ideal, 1e-12) << pipeline::schedule_name(c.kind);
    if (c.kind == ScheduleKind::one_f_one_b || c.kind == ScheduleKind::gpipe) {
      EXPECT_DOUBLE_EQ(r.bubble_over_ideal, double(c.pp - 1) / double(c.batch));
    }
  }
}

TEST(Planner, OverlapHidesDataParallelComm) {
  PlanInput in = params_only(124'000'000, 8, dp::Shard::zero2);
  in.global_batch = 64;
  in.hw = figures({.peak_tflops = 100, .bw_intra_GBps = 50, .bw_inter_GBps = 10, .latency_us = 2});
  const PlanResult a = plan(in);
  in.overlap = true;
  const PlanResult b = plan(in);
  EXPECT_NEAR(a.exposed_comm_s, a.comm_s, 1e-15);
  EXPECT_LT(b.exposed_comm_s, a.exposed_comm_s);
}

// A mixture-of-experts block's memory-bound bytes beyond a dense block's,
// counted by hand for tiny-moe (top-2 of 4 experts, C 32), and in the plan
// only on the stage that holds an MoE block (block 0 of 2).
TEST(Planner, MoeBlocksMoveTheirDispatchAndCombine) {
  const ModelConfig m = planner_model("tiny-moe");
  ActivationShape x{4, 16, m.C, m.NH, 1, 1, false, false, 4};
  // Per token, forward: GELU over one more expert's 4C (8 x 32), dispatch
  // 2 x 2 x 32, combine 3 x 32 + 2 weights, router softmax 2 x 4; backward
  // twice that.
  EXPECT_EQ(moe_layer_extra_traffic_bytes(x, m.moe), 3 * (256 + 128 + 96 + 2 + 8) * 64 * 4);
  x.tp = 2;  // the experts' hidden split: the GELU's share halves
  EXPECT_EQ(moe_layer_extra_traffic_bytes(x, m.moe), 3 * (128 + 128 + 96 + 2 + 8) * 64 * 4);
  // In the plan: the same model dense moves, per step, two microbatches of
  // those bytes less, and the experts' states (fp32 AdamW reads and writes 28
  // bytes per parameter; DDP zeroes its 4-byte gradient once) less.
  PlanInput in = model_input("tiny-moe", 4, 8, 16);
  in.precision = Precision::fp32;
  in.hw = figures({.peak_tflops = 0.05, .mem_bw_GBps = 10});
  const PlanResult moe = plan(in);
  ModelConfig dense = m;
  dense.moe = {};
  in.shape = dense;
  const PlanResult d = plan(in);
  x.tp = 1;
  EXPECT_DOUBLE_EQ(moe.memory_bytes - d.memory_bytes,
                   2.0 * double(moe_layer_extra_traffic_bytes(x, m.moe)) +
                       double(m.num_params() - dense.num_params()) * (28 + 4));
}

// A GEMM table: the nearest shape by the logarithms of m, n, k; the model's
// efficiency its GEMMs' flops over their time at those rates.
TEST(Planner, GemmTableGivesTheEfficiencyAtTheRanksShapes) {
  const std::vector<GemmRate> table = {{64, 64, 64, 10}, {64, 1024, 1024, 40}, {1024, 1024, 1024, 80}};
  EXPECT_EQ(table_gflops({}, 5, 5, 5), 0);
  EXPECT_EQ(table_gflops(table, 64, 64, 64), 10);
  EXPECT_EQ(table_gflops(table, 16, 50, 90), 10);
  EXPECT_EQ(table_gflops(table, 100, 700, 2000), 40);
  EXPECT_EQ(table_gflops(table, 512, 1024, 1024), 80);  // log-nearer 1024 than 64
  EXPECT_EQ(table_gflops(table, 100000, 1, 1), 10);
  PlanInput in = model_input("small", 4, 0, 64);
  in.precision = Precision::fp32;
  in.hw = figures({.peak_tflops = 0.1, .bw_intra_GBps = 10});
  in.hw.gemm_efficiency = 0.3;  // unused once a table is given
  const PlanResult scalar = plan(in);
  EXPECT_DOUBLE_EQ(scalar.gemm_efficiency, 0.3);
  in.hw.gemm_rates = {{64, 64, 64, 50}};  // one rate everywhere: half of the 100 GFLOP/s peak
  const PlanResult uniform = plan(in);
  EXPECT_NEAR(uniform.gemm_efficiency, 0.5, 1e-12);
  EXPECT_NEAR(uniform.compute_s - uniform.memory_s, uniform.hardware_flops / 50e9, 1e-12);
  // Rates growing with the size: by hand over the rank's GEMMs, and tensor
  // parallel's smaller shards reach less.
  in.hw.gemm_rates = table;
  double f = 0, t = 0;
  for (const GemmShape& g : rank_gemms(*in.shape, 4, 64, 1, 1)) {
    const double x = 2.0 * double(g.m) * double(g.n) * double(g.k) * g.count;
    f += x;
    t += x / (table_gflops(table, g.m, g.n, g.k) * 1e9);
  }
  const PlanResult one = plan(in);
  EXPECT_NEAR(one.gemm_efficiency, f / t / 1e11, 1e-12);
  // With the attention core's time measured its per-head GEMMs leave the
  // table's average: the linears and the head alone.
  const std::vector<GemmShape> all = rank_gemms(*in.shape, 4, 64, 1, 2);
  const std::vector<GemmShape> linear = rank_gemms(*in.shape, 4, 64, 1, 2, false);
  ASSERT_EQ(linear.size() + 3, all.size());
  EXPECT_TRUE(std::equal(linear.begin(), linear.end(), all.begin(), [](const GemmShape& a, const GemmShape& b) {
    return a.m == b.m && a.n == b.n && a.k == b.k && a.count == b.count;
  }));
  std::vector<GemmRate> small_too = table;
  small_too.push_back({32, 32, 32, 2});  // the per-head shapes of small at cp2 (32 x 64 x 32) crawl
  auto efficiency = [&](const std::vector<GemmShape>& shapes) {
    double fl = 0, ti = 0;
    for (const GemmShape& g : shapes) {
      const double x = 2.0 * double(g.m) * double(g.n) * double(g.k) * g.count;
      fl += x;
      ti += x / (table_gflops(small_too, g.m, g.n, g.k) * 1e9);
    }
    return fl / ti / 1e11;
  };
  in.hw.gemm_rates = small_too;
  in.cp = 2;
  EXPECT_NEAR(plan(in).gemm_efficiency, efficiency(all), 1e-12);
  in.hw.attention_fwd_s = 1e-5;
  in.hw.attention_bwd_s = 2e-5;
  EXPECT_NEAR(plan(in).gemm_efficiency, efficiency(linear), 1e-12);
  EXPECT_GT(efficiency(linear), efficiency(all));  // the per-head shapes are the smallest
  in.hw.attention_fwd_s = in.hw.attention_bwd_s = 0;
  in.hw.gemm_rates = table;
  in.cp = 1;
  in.tp = 2;
  EXPECT_LT(plan(in).gemm_efficiency, one.gemm_efficiency);
}

// A collective fit replaces latency and bandwidth for its op within a node:
// calls x alpha + bus bytes / GBps, alpha scaled by the ring steps when the
// nearest group size is another; across nodes the links stay.
TEST(Planner, CollectiveFitsTimeTheirOp) {
  PlanInput in = params_only(10'000'000, 2, dp::Shard::none);
  in.hw = figures({.peak_tflops = 1, .bw_intra_GBps = 1, .bw_inter_GBps = 1, .latency_us = 1000});
  in.hw.collectives["all_reduce"] = {{2, 5, 20}, {8, 50, 4}};
  const PlanResult r = plan(in);
  ASSERT_FALSE(r.comm.empty());
  for (const CommRow& c : r.comm) {
    ASSERT_EQ(c.op, "all_reduce");
    EXPECT_NEAR(c.time_s, double(c.calls) * 5e-6 + c.bus_bytes / 20e9, 1e-15) << c.group;
  }
  in.dp = 3;  // nearest by ratio: 2 (3/2 < 8/3); 4 ring steps over its 2
  in.global_batch = 3;
  for (const CommRow& c : plan(in).comm)
    EXPECT_NEAR(c.time_s, double(c.calls) * 5e-6 * 4 / 2 + c.bus_bytes / 20e9, 1e-15) << c.group;
  in.dp = 4;  // equidistant from 2 and 8: the larger; 6 steps over its 14
  in.global_batch = 4;
  for (const CommRow& c : plan(in).comm)
    EXPECT_NEAR(c.time_s, double(c.calls) * 50e-6 * 6 / 14 + c.bus_bytes / 4e9, 1e-15) << c.group;
  in.ranks_per_node = 2;  // the dp group spans nodes: the inter-node link and latency
  for (const CommRow& c : plan(in).comm) {
    ASSERT_TRUE(c.inter_node) << c.group;
    EXPECT_NEAR(c.time_s, double(c.calls) * 6 * 1000e-6 + c.bus_bytes / 1e9, 1e-12) << c.group;
  }
  EXPECT_DOUBLE_EQ(ring_steps("send_recv", 9), 1);
  EXPECT_DOUBLE_EQ(ring_steps("all_to_all", 9), 8);
  EXPECT_DOUBLE_EQ(bus_bytes("all_reduce", 4, 100), 150);
  EXPECT_DOUBLE_EQ(bus_bytes("all_to_all", 4, 100), 75);
}


// A small-message collective costs the profile's per-step latency (NCCL's
// ring / Simple model, machine.cc) and its base per call: DDP's all-reduce of
// 1,000 bf16-mixed gradients over 8 A100s is 8.4 us + 14 ring steps x 3.4 us =
// 56.0 us per call, next to which its bytes over 200 GB/s are nothing; across
// 2 nodes of 4, NCCL's model puts 2 (2 - 1) = 2 of the 14 steps on the
// network: 8.4 + 2 x 14 + 12 x 3.4 = 77.2 us per call. With latency 0 (before)
// only the bytes counted.
TEST(Planner, SmallCollectivesCostTheProfilesLatency) {
  PlanInput in = params_only(1000, 8, dp::Shard::none);
  in.global_batch = 8;
  in.hw = hardware_for(load_machine("a100"), Precision::bf16_mixed);
  ASSERT_DOUBLE_EQ(in.hw.latency_us, 3.4);
  ASSERT_DOUBLE_EQ(in.hw.latency_inter_us, 14.0);
  ASSERT_DOUBLE_EQ(in.hw.latency_call_us, 8.4);
  const PlanResult r = plan(in);
  ASSERT_FALSE(r.comm.empty());
  for (const CommRow& c : r.comm) {
    ASSERT_EQ(c.op, "all_reduce");
    ASSERT_FALSE(c.inter_node);
    EXPECT_NEAR(c.time_s, double(c.calls) * 56.0e-6 + c.bus_bytes / 200e9, 1e-12) << c.group;
    EXPECT_GT(double(c.calls) * 56.0e-6, 100 * c.bus_bytes / 200e9) << c.group;  // latency-bound
  }
  in.ranks_per_node = 4;  // the dp group spans two nodes: two steps at the network's 14 us
  for (const CommRow& c : plan(in).comm) {
    ASSERT_TRUE(c.inter_node) << c.group;
    EXPECT_NEAR(c.time_s, double(c.calls) * 77.2e-6 + c.bus_bytes / (inter_node_GBps(c, in.hw, 4) * 1e9), 1e-12)
        << c.group;
  }
  in.ranks_per_node = 2;  // four nodes: 2 (4 - 1) = 6 steps across, 8.4 + 6 x 14 + 8 x 3.4 = 119.6 us
  for (const CommRow& c : plan(in).comm)
    EXPECT_NEAR(c.time_s, double(c.calls) * 119.6e-6 + c.bus_bytes / (inter_node_GBps(c, in.hw, 2) * 1e9), 1e-12)
        << c.group;
  in.ranks_per_node = 8;
  in.hw.latency_us = in.hw.latency_inter_us = in.hw.latency_call_us = 0;
  for (const CommRow& c : plan(in).comm) EXPECT_NEAR(c.time_s, c.bus_bytes / 200e9, 1e-15) << c.group;
}

// NCCL's plateau of a ring (Hardware::ring_plateau): an all-reduce across
// nodes whose bytes per rank and channel reach 64 at NCCL's 64 channels pays
// 1.4 x its whole latency on the A100 profile. DDP over 8 A100s on 2 nodes of
// 4, per call (8.4 + 2 x 14 + 12 x 3.4) x 1.4 = 108.08 us: at 32,768 bytes a
// call (16,384 bf16 gradients; 32768 / (64 x 8) = 64) it applies, one
// gradient fewer it does not (77.2 us); within a node, on host kernels (a
// calibrated CPU profile's inter-node alpha, all 14 steps across) or at 1
// never; out of [1, 10] refused, named.
TEST(Planner, RingPlateauScalesAnInterNodeAllReducesLatency) {
  auto ddp = [](int64_t params, int64_t rpn) {
    PlanInput in = params_only(params, 8, dp::Shard::none);
    in.global_batch = 8;
    in.hw = hardware_for(load_machine("a100"), Precision::bf16_mixed);
    in.ranks_per_node = rpn;
    return in;
  };
  auto per_call_latency = [](const PlanInput& in) {
    const PlanResult r = plan(in);
    EXPECT_EQ(r.comm.size(), 1u);
    const CommRow& c = r.comm.at(0);
    EXPECT_EQ(c.op, "all_reduce");
    const double bw = c.inter_node ? inter_node_GBps(c, in.hw, in.ranks_per_node) : in.hw.bw_intra_GBps;
    return (c.time_s - c.bus_bytes / (bw * 1e9)) / double(c.calls);
  };
  ASSERT_DOUBLE_EQ(ddp(1, 4).hw.ring_plateau, 1.4);
  EXPECT_NEAR(per_call_latency(ddp(16384, 4)), 108.08e-6, 1e-12);
  EXPECT_NEAR(per_call_latency(ddp(100'000'000, 4)), 108.08e-6, 1e-12);
  EXPECT_NEAR(per_call_latency(ddp(16383, 4)), 77.2e-6, 1e-12);
  EXPECT_NEAR(per_call_latency(ddp(100'000'000, 8)), 56.0e-6, 1e-12);  // one node
  PlanInput none = ddp(100'000'000, 4);
  none.hw.ring_plateau = 1;
  EXPECT_NEAR(per_call_latency(none), 77.2e-6, 1e-12);
  PlanInput cpu = ddp(100'000'000, 4);
  cpu.hw.host_kernels = true;  // a CPU profile's fitted alpha, every step across: 8.4 + 14 x 14, no plateau
  EXPECT_NEAR(per_call_latency(cpu), 204.4e-6, 1e-12);
  for (double bad : {0.5, 11.0, std::nan("")}) {
    PlanInput in = ddp(1000, 4);
    in.hw.ring_plateau = bad;
    EXPECT_NE(input_error_of([&] { plan(in); }).find("ring_plateau"), std::string::npos) << bad;
  }
}

// The base per call (Hardware::latency_call_us, NCCL's baseLatencies) adds
// exactly calls x base to each all-reduce, all-gather and reduce-scatter row,
// within a node and across, and nothing to p2p rows (pipeline send_recv,
// Ulysses' all_to_all: NCCL's model has no p2p term), nor to a row a measured
// collective fit times (its alpha holds the call's whole cost). A negative or
// NaN base is refused.
TEST(Planner, CallLatencyAddsCallsTimesTheBasePerCollectiveRow) {
  PlanInput in;
  in.shape = planner_model("small");
  in.precision = Precision::bf16_mixed;
  in.microbatch_size = 1;
  in.global_batch = 8;
  in.tp = 2;
  in.sp = true;
  in.pp = 2;
  in.dp = 2;
  in.shard = dp::Shard::zero3;
  in.ranks_per_node = 4;  // dp across nodes
  in.hw.peak_tflops = 100;
  in.hw.mem_bw_GBps = 1000;
  in.hw.bw_intra_GBps = 200;
  in.hw.bw_inter_GBps = 25;
  in.hw.latency_us = 3.4;
  in.hw.latency_inter_us = 14;
  const PlanResult before = plan(in);
  in.hw.latency_call_us = 8.4;
  const PlanResult after = plan(in);
  ASSERT_EQ(before.comm.size(), after.comm.size());
  std::set<std::string> ops;
  bool inter = false;
  for (size_t i = 0; i < after.comm.size(); ++i) {
    const CommRow &b = before.comm[i], &a = after.comm[i];
    ASSERT_EQ(a.group + a.phase + a.op, b.group + b.phase + b.op);
    ASSERT_GT(a.calls, 0);
    ops.insert(a.op);
    inter = inter || a.inter_node;
    const double base = a.op == "send_recv" ? 0.0 : double(a.calls) * 8.4e-6;
    EXPECT_NEAR(a.time_s - b.time_s, base, 1e-12) << a.group << " " << a.phase << " " << a.op;
  }
  EXPECT_TRUE(inter);
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "send_recv"})
    EXPECT_TRUE(ops.count(op)) << op << ": no row compared";
  EXPECT_GT(after.comm_s, before.comm_s);
  // Ulysses' all-to-alls (p2p in NCCL) take no base.
  PlanInput u = in;
  u.tp = 1;
  u.sp = false;
  u.pp = 1;
  u.cp = 2;
  u.cp_algo = CpAlgo::ulysses;
  u.ranks_per_node = 8;
  int a2a = 0;
  const PlanResult u_after = plan(u);
  u.hw.latency_call_us = 0;
  const PlanResult u_before = plan(u);
  ASSERT_EQ(u_before.comm.size(), u_after.comm.size());
  for (size_t i = 0; i < u_after.comm.size(); ++i)
    if (u_after.comm[i].op == "all_to_all") {
      ++a2a;
      EXPECT_DOUBLE_EQ(u_after.comm[i].time_s, u_before.comm[i].time_s);
    }
  EXPECT_GT(a2a, 0) << "no all_to_all row compared";
  // A row timed by a measured fit (within a node) takes no base on top.
  PlanInput f = in;
  f.ranks_per_node = 16;
  f.hw.collectives["all_reduce"] = {{2, 30, 100}};
  f.hw.collectives["all_gather"] = {{2, 20, 100}};
  f.hw.collectives["reduce_scatter"] = {{2, 20, 100}};
  const PlanResult f_after = plan(f);
  f.hw.latency_call_us = 0;
  const PlanResult f_before = plan(f);
  int fitted = 0;
  for (size_t i = 0; i < f_after.comm.size(); ++i)
    if (f_after.comm[i].op != "send_recv") {
      ++fitted;
      EXPECT_DOUBLE_EQ(f_after.comm[i].time_s, f_before.comm[i].time_s) << f_after.comm[i].op;
    }
  EXPECT_GT(fitted, 0);
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    in.hw.latency_call_us = bad;
    EXPECT_THROW(plan(in), InputError) << bad;
  }
}

// Topology (planner.h Hardware::rails): an inter-node group with k members on
// each node of R ranks reaches k x rails / R NICs, at most the node's own
// link; an all-to-all one NIC; the oversubscription above the leaf divides it.
TEST(Planner, RailsGiveAGroupItsMembersNics) {
  Hardware hw;
  hw.bw_intra_GBps = 200;
  hw.bw_inter_GBps = 24;
  CommRow c;
  c.op = "all_reduce";
  c.group_size = 32;
  c.per_node = 8;
  c.inter_node = true;
  EXPECT_DOUBLE_EQ(inter_node_GBps(c, hw, 8), 24);  // no rails: one link per rank
  hw.rails = 8;
  EXPECT_DOUBLE_EQ(inter_node_GBps(c, hw, 8), 192);  // a DGX A100's 8 NICs (nccl issue 812)
  c.per_node = 4;
  EXPECT_DOUBLE_EQ(inter_node_GBps(c, hw, 8), 96);
  c.per_node = 1;
  EXPECT_DOUBLE_EQ(inter_node_GBps(c, hw, 8), 24);
  hw.rails = 4;  // two ranks per NIC
  EXPECT_DOUBLE_EQ(inter_node_GBps(c, hw, 8), 12);
  hw.rails = 8;
  hw.bw_inter_GBps = 50;
  c.per_node = 8;
  EXPECT_DOUBLE_EQ(inter_node_GBps(c, hw, 8), 200);  // capped at the node's link
  c.op = "all_to_all";
  EXPECT_DOUBLE_EQ(inter_node_GBps(c, hw, 8), 50);
  hw.oversubscription = 2;
  hw.leaf_nodes = 4;  // 32 ranks at 8 per node: 4 nodes, under one leaf
  EXPECT_DOUBLE_EQ(inter_node_GBps(c, hw, 8), 50);
  c.group_size = 64;
  EXPECT_DOUBLE_EQ(inter_node_GBps(c, hw, 8), 25);
}

// The placement order decides which groups share a node: at tp 2, pp 8, dp
// 16 on 8-rank nodes, Megatron's order puts 4 dp ranks on a node and every
// pipeline hop across nodes; Llama 3's puts 4 stages on a node and each dp
// rank on its own.
TEST(Planner, PlacementOrderDecidesWhichGroupsCrossNodes) {
  PlanInput in = model_input("gpt3-175b", 1, 0);
  in.tp = 2;
  in.pp = 8;
  in.dp = 16;
  in.ranks_per_node = 8;
  in.hw = figures({.peak_tflops = 312, .bw_intra_GBps = 200, .bw_inter_GBps = 24});
  in.hw.rails = 8;
  auto rows = [](const PlanResult& r, const std::string& g) {
    std::vector<CommRow> out;
    for (const CommRow& c : r.comm)
      if (c.group == g) out.push_back(c);
    return out;
  };
  const PlanResult mega = plan(in);
  in.pp_inside_dp = true;
  const PlanResult llama = plan(in);
  ASSERT_FALSE(rows(mega, "dp").empty());
  ASSERT_FALSE(rows(mega, "pp").empty());
  for (const CommRow& c : rows(mega, "dp")) EXPECT_TRUE(c.inter_node && c.per_node == 4) << c.op;
  for (const CommRow& c : rows(llama, "dp")) EXPECT_TRUE(c.inter_node && c.per_node == 1) << c.op;
  for (const CommRow& c : rows(mega, "pp")) EXPECT_TRUE(c.inter_node);
  for (const CommRow& c : rows(llama, "pp")) EXPECT_FALSE(c.inter_node);
  for (const CommRow& c : rows(mega, "tp")) EXPECT_FALSE(c.inter_node);
}

// On a device (a GPU profile) the ZeRO-3 family's prefetched gathers and its
// reduce-scatters hide under compute (FSDP's prefetch on its own stream);
// prefetch 0 waits for each; on CPU ranks (host kernels) nothing changes.
TEST(Planner, DeviceFsdpHidesItsGathersUnderCompute) {
  PlanInput in = model_input("gpt2-350m", 4, 256);
  in.dp = 8;
  in.shard = dp::Shard::zero3;
  in.hw = figures({.peak_tflops = 312, .bw_intra_GBps = 200, .mem_bw_GBps = 1800});
  const PlanResult host = plan(in);
  EXPECT_NEAR(host.exposed_comm_s, host.comm_s, 1e-12);
  in.hw.host_kernels = false;
  const PlanResult device = plan(in);
  EXPECT_GT(device.comm_s, 0);
  EXPECT_LT(device.exposed_comm_s, 0.5 * device.comm_s);
  // BACKWARD_POST (PlanInput::backward_prefetch_post): each backward
  // all-gather waits, the whole row exposed on top of what pre exposes; the
  // reduce-scatters and the forward's gathers still hide. On CPU ranks
  // nothing hides either way, so post is refused there (it would plan
  // nothing), as without a sharded, prefetched axis.
  in.backward_prefetch_post = true;
  const PlanResult post = plan(in);
  double bwd_gathers = 0;
  for (const CommRow& c : post.comm)
    if (c.group.rfind("dp", 0) == 0 && c.phase == "bwd" && c.op == "all_gather") bwd_gathers += c.time_s;
  EXPECT_GT(bwd_gathers, 0);
  EXPECT_NEAR(post.unhidden_comm_s - device.unhidden_comm_s, bwd_gathers, 1e-12);
  EXPECT_GT(post.step_s, device.step_s);
  EXPECT_LT(post.exposed_comm_s, post.comm_s);
  in.hw.host_kernels = true;
  EXPECT_NE(input_error_of([&] { plan(in); }).find("got shard zero3, prefetch 1, not a GPU profile"),
            std::string::npos);
  in.hw.host_kernels = false;
  in.prefetch = 0;
  EXPECT_NE(input_error_of([&] { plan(in); }).find("got shard zero3, prefetch 0"), std::string::npos);
  in.prefetch = 1;
  in.shard = dp::Shard::zero2;
  EXPECT_NE(input_error_of([&] { plan(in); }).find("got shard zero2"), std::string::npos);
  in.shard = dp::Shard::zero3;
  in.backward_prefetch_post = false;
  in.prefetch = 0;
  const PlanResult waited = plan(in);
  EXPECT_NEAR(waited.exposed_comm_s, waited.comm_s, 1e-12);
}

// FlashAttention (PlanInput::flash_attention at Hardware::flash_attention_tflops):
// the core's forward 4 b (s/cp) s C / tp / 2 FLOPs (causal) and backward 2.5
// times that at the kernel's rate replace its GEMMs and softmax traffic;
// without a rate, or unasked, the plan is the unfused one.
TEST(Planner, FlashAttentionTimesTheCoreAtItsRate) {
  PlanInput in = model_input("gpt2-350m", 2, 2, 1024);
  in.hw = figures({.peak_tflops = 312, .mem_bw_GBps = 1800});
  const PlanResult unfused = plan(in);
  in.flash_attention = true;
  const PlanResult no_rate = plan(in);
  EXPECT_DOUBLE_EQ(no_rate.step_s, unfused.step_s);
  in.hw.flash_attention_tflops = 100;
  const PlanResult fa = plan(in);
  const ModelConfig& m = *in.shape;
  const double fwd = 4.0 * 2 * 1024 * 1024 * double(m.C) / 2 / 100e12;
  // The rates time the rest: the same plan with the core's FLOPs and softmax traffic taken out
  // is what a measured core of exactly these seconds gives.
  PlanInput measured = in;
  measured.flash_attention = false;
  measured.hw.attention_fwd_s = fwd;
  measured.hw.attention_bwd_s = 2.5 * fwd;
  EXPECT_NEAR(fa.step_s, plan(measured).step_s, 1e-12);
  EXPECT_LT(fa.memory_bytes, unfused.memory_bytes);
}

// torchtitan's op-level checkpointing (PlanInput::recompute_even_matmuls):
// the hardware FLOPs of recompute none plus the even matmuls' forward
// (Llama: wk 2 h kvd, wo 2 h^2, w3 2 h F per token and block); the model
// FLOPs unchanged; fewer activations than none; refused with a pipeline.
TEST(Planner, OpCheckpointingRecomputesTheEvenMatmuls) {
  PlanInput in = model_input("llama3-8b", 1, 1, 1024);
  in.hw = figures({.peak_tflops = 312, .mem_bw_GBps = 1800});
  const PlanResult none = plan(in);
  in.recompute_even_matmuls = true;
  const PlanResult op = plan(in);
  const ModelConfig& m = *in.shape;
  const double h = m.C, kvd = double(m.kv_heads) * m.head_size(), F = m.ffn;
  EXPECT_DOUBLE_EQ(op.model_flops, none.model_flops);
  EXPECT_NEAR(op.hardware_flops - none.hardware_flops, (2 * h * kvd + 2 * h * h + 2 * h * F) * m.L * 1024,
              1e-6 * op.hardware_flops);
  EXPECT_GT(op.step_s, none.step_s);
  EXPECT_LT(op.worst.activations, none.worst.activations);
  in.pp = 2;
  EXPECT_THROW(plan(in), InputError);
  in.pp = 1;
  in.recompute = Recompute::full;
  EXPECT_THROW(plan(in), InputError);
}

// PyTorch eager kernels (PlanInput::eager_kernels): llama3-8b's block moves
// the bytes counted op by op in torchtitan's source (per token, forward, at
// 2-byte activations: two RMSNorms 2 x 36h, two residual adds 2 x 6h, RoPE
// 20 (h + kvd), repeat_kv 4 (kvd + h), the output's copy 4h, SiLU x mul 10F,
// the softmax 4as), backward twice that, over 3x the fused count; only the
// memory-bound time grows;
// refused for the GPT family.
TEST(Planner, EagerKernelsCountTorchtitansOps) {
  PlanInput in = model_input("llama3-8b", 1, 1, 1024);
  in.hw = figures({.peak_tflops = 312, .mem_bw_GBps = 1800});
  const ModelConfig& m = *in.shape;
  const ActivationShape x{1, 1024, m.C, m.NH, 1, 1, false, false, 2};
  const int64_t h = m.C, kvd = int64_t(m.kv_heads) * m.head_size(), F = m.ffn;
  EXPECT_EQ(llama_layer_eager_traffic_bytes(m, x),
            3 * 1024 * (72 * h + 12 * h + 20 * (h + kvd) + 4 * (kvd + h) + 4 * h + 10 * F + 4 * int64_t(m.NH) * 1024));
  in.flash_attention = true;  // no scores: the softmax term leaves both counts
  in.hw.flash_attention_tflops = 192;
  const PlanResult fused = plan(in);
  in.eager_kernels = true;
  const PlanResult eager = plan(in);
  EXPECT_NEAR(eager.memory_bytes - fused.memory_bytes,
              double(m.L) * double(llama_layer_eager_traffic_bytes(m, x) - llama_layer_traffic_bytes(m, x)) +
                  double(head_eager_traffic_bytes(x, m.V) - head_traffic_bytes(x, m.V)),
              1e-9 * eager.memory_bytes);
  EXPECT_GT(llama_layer_eager_traffic_bytes(m, x) - 3 * 1024 * 4 * int64_t(m.NH) * 1024,
            3 * (llama_layer_traffic_bytes(m, x) - 3 * 1024 * 4 * int64_t(m.NH) * 1024));  // > 3x, scores aside
  EXPECT_GT(eager.memory_s, fused.memory_s);
  EXPECT_DOUBLE_EQ(eager.hardware_flops, fused.hardware_flops);
  // torchtitan's Triton RMSNorm (fused_norm): each norm 2e bytes per element
  // forward where eager moves 36 (bf16), the rest unchanged.
  EXPECT_EQ(llama_layer_eager_traffic_bytes(m, x) - llama_layer_eager_traffic_bytes(m, x, true),
            3 * 1024 * 2 * (36 - 4) * h);
  EXPECT_EQ(head_eager_traffic_bytes(x, m.V) - head_eager_traffic_bytes(x, m.V, true), 3 * 1024 * (36 - 4) * h);
  in.fused_norm = true;
  const PlanResult triton_norm = plan(in);
  EXPECT_NEAR(eager.memory_bytes - triton_norm.memory_bytes, double(2 * m.L + 1) * 3 * 1024 * (36 - 4) * double(h),
              1e-9 * eager.memory_bytes);
  EXPECT_LT(triton_norm.step_s, eager.step_s);
  in.fused_norm = false;
  in.shape = planner_model("gpt2-124m");
  EXPECT_THROW(plan(in), InputError);
}

// Megatron's pipeline scatter/gather without sequence parallel (PTD-P Sec.
// 4.1): on a device profile each tp rank sends 1/t of the boundary and the
// receiver all-gathers it over tp; on CPU ranks (parabench's executor) the
// boundary goes whole and nothing is gathered.
TEST(Planner, DevicePipelinesScatterTheBoundaryOverTp) {
  PlanInput in = model_input("gpt2-124m", 1, 4, 1024);
  in.tp = 4;
  in.pp = 2;
  in.hw = figures({.peak_tflops = 312, .bw_intra_GBps = 200, .bw_inter_GBps = 24});
  auto bytes = [](const PlanResult& r, const std::string& group, const std::string& op) {
    int64_t n = 0;
    for (const CommRow& c : r.comm)
      if (c.group == group && c.op == op) n += c.bytes;
    return n;
  };
  const PlanResult cpu = plan(in);
  in.hw.host_kernels = false;
  const PlanResult gpu = plan(in);
  EXPECT_GT(bytes(cpu, "pp", "send_recv"), 0);
  EXPECT_EQ(bytes(gpu, "pp", "send_recv") * 4, bytes(cpu, "pp", "send_recv"));
  EXPECT_EQ(bytes(cpu, "tp", "all_gather"), 0);
  EXPECT_EQ(bytes(gpu, "tp", "all_gather"), bytes(cpu, "pp", "send_recv"));
  in.sp = true;  // with sp the boundary is the rank's 1/t on both
  EXPECT_EQ(bytes(plan(in), "pp", "send_recv") * 4, bytes(cpu, "pp", "send_recv"));
}

// Sequence parallel's backward (PlanInput::sp_regather): Megatron-LM
// all-gathers each block's two stored norm outputs and the head's input again;
// with the gathered inputs kept (PyTorch DTensor, torchtitan) those 2 L + 1
// all-gathers per microbatch, each the forward's size, are not made, under
// full recompute too (the rerun forward's gathers are the ones kept).
TEST(Planner, SequenceParallelKeptGathersDropTheBackwardRegathers) {
  PlanInput in = model_input("tiny-llama", 2, 4, 16);  // 2 microbatches on dp 1
  in.tp = 2;
  in.sp = true;
  in.hw = figures({.peak_tflops = 312, .bw_intra_GBps = 200, .device = true});
  auto gathers = [](const PlanResult& r, const char* phase) {
    for (const CommRow& c : r.comm)
      if (c.group == "tp" && c.op == "all_gather" && c.phase == phase) return std::pair<int64_t, int64_t>{c.calls, c.bytes};
    return std::pair<int64_t, int64_t>{0, 0};
  };
  const int64_t L = in.shape->L;
  for (Recompute rc : {Recompute::none, Recompute::full}) {
    in.recompute = rc;
    in.sp_regather = true;
    const PlanResult megatron = plan(in);
    in.sp_regather = false;
    const PlanResult dtensor = plan(in);
    const auto fwd = gathers(megatron, "fwd");
    ASSERT_EQ(fwd.first, 2 * (2 * L + 1));  // per microbatch: 2 per block, the head's input
    const int64_t each = fwd.second / fwd.first;
    EXPECT_EQ(gathers(dtensor, "fwd"), fwd);
    const auto mb = gathers(megatron, "bwd"), db = gathers(dtensor, "bwd");
    EXPECT_EQ(mb.first - db.first, 2 * (2 * L + 1));
    EXPECT_EQ(mb.second - db.second, 2 * (2 * L + 1) * each);
    EXPECT_LT(dtensor.step_s, megatron.step_s);
  }
  in.sp = false;  // without sp there is nothing to re-gather
  in.sp_regather = true;
  const PlanResult a = plan(in);
  in.sp_regather = false;
  EXPECT_EQ(plan(in).step_s, a.step_s);
}

// torchtitan's FSDP2 wrapping on its published layout (a dense llama, zero3,
// eager kernels, a GPU profile, one stage): the last block is not resharded
// after forward, so backward gathers L - 1 blocks, and the root unit
// (embedding, final norm and output) is the first gathered and the last
// reduce-scattered (the unhidden edges' share). Fused kernels keep the
// engine's roles (every block gathered again; the embedding first).
TEST(Planner, TorchtitanFsdp2KeepsTheLastBlockAndGathersTheRootFirst) {
  PlanInput in = model_input("tiny-llama", 1, 4, 16);
  in.dp = 4;
  in.shard = dp::Shard::zero3;
  in.hw = figures({.peak_tflops = 312, .bw_intra_GBps = 200, .mem_bw_GBps = 1000, .device = true});
  auto bwd_gathers = [](const PlanResult& r) {
    for (const CommRow& c : r.comm)
      if (c.group == "dp" && c.op == "all_gather" && c.phase == "bwd") return c.calls;
    return int64_t(0);
  };
  const int64_t L = in.shape->L;
  const PlanResult fused = plan(in);
  in.eager_kernels = true;
  const PlanResult titan = plan(in);
  EXPECT_EQ(bwd_gathers(fused), L);
  EXPECT_EQ(bwd_gathers(titan), L - 1);
  EXPECT_GT(titan.dp_first_unit_share, fused.dp_first_unit_share);
  const double root = titan.dp_first_unit_share, embedding = fused.dp_first_unit_share;
  const ModelConfig& m = *in.shape;
  // tok_embeddings V x C; the root adds the untied output (V x C) and the final norm (C).
  EXPECT_NEAR(root / embedding, double(2 * m.V * m.C + m.C) / double(m.V * m.C), 1e-9);
}

// FSDP2's own copies on torchtitan's layout (fsdp2_local_traffic), by hand
// (PyTorch _fsdp_collectives.py: per gather the fp32 shard cast to bf16 and
// copied into the all-gather input, 10 bytes per shard element, then the
// gathered output copied out into the parameters, 4 bytes per parameter;
// per reduce-scatter the bf16 gradients copied into the fp32 input, 6 bytes
// per parameter). tiny-llama (C 64, 2 blocks, 8 heads, 2 kv heads, ffn 96,
// V 64) at dp 4: embedding 4096, blocks 28800 each, final norm + output
// 4160; block 1 gathered twice (resharded after forward), the rest once:
//   embedding 10 x 1024 + 4 x 4096 + 6 x 4096             =  51,200
//   block 1   2 x (10 x 7200 + 4 x 28800) + 6 x 28800      = 547,200
//   block 2   10 x 7200 + 4 x 28800 + 6 x 28800            = 360,000
//   root tail 10 x 1040 + 4 x 4160 + 6 x 4160              =  52,000
// 1,010,400 bytes per microbatch; with two, twice that plus the second's
// add into the fp32 sharded gradient, 12 bytes per shard element (16,464):
// 2,218,368. Fused kernels (not torchtitan's layout) keep the engine's.
TEST(Planner, TorchtitanFsdp2CopiesInAndOutAsPyTorchDoes) {
  PlanInput in = model_input("tiny-llama", 1, 4, 16);
  in.precision = Precision::bf16_mixed;
  in.dp = 4;
  in.shard = dp::Shard::zero3;
  in.hw = figures({.peak_tflops = 312, .bw_intra_GBps = 200, .mem_bw_GBps = 1000, .device = true});
  const PlanResult fused = plan(in);
  in.eager_kernels = true;
  const PlanResult titan = plan(in);
  EXPECT_EQ(titan.worst.local_traffic, 1'010'400);
  EXPECT_NE(fused.worst.local_traffic, titan.worst.local_traffic);
  in.eager_kernels = false;
  in.global_batch = 8;
  const PlanResult fused2 = plan(in);
  in.eager_kernels = true;
  const PlanResult titan2 = plan(in);
  EXPECT_EQ(titan2.microbatches, 2);
  EXPECT_EQ(titan2.worst.local_traffic, 2'218'368);
  // The engine's own (dp::local_traffic_bytes) where the layout is not torchtitan's.
  const std::vector<int64_t> units = llama_unit_params(*in.shape, 1);
  dp::DataAxis a;
  a.dp = 4;
  a.shard = dp::Shard::zero3;
  a.precision = Precision::bf16_mixed;
  a.grad_accum = 2;
  EXPECT_EQ(fused2.worst.local_traffic,
            dp::local_traffic_bytes(dp::unit_uses(units, a, dp::UnitRoles::model(int(units.size()))), a));
}

// FlashAttention's rate by kernel, head dimension and sequence
// (flash_attention_rate): the a100 profile's table at its points, log-linear
// between them, the nearest head dimension and the end points beyond; a
// kernel without a table: FlashAttention-2's scalar, or 0 for Triton's.
TEST(Planner, FlashAttentionRateByHeadDimAndSequence) {
  const Hardware a100 = hardware_for(load_machine("a100"), Precision::bf16_mixed);
  EXPECT_DOUBLE_EQ(flash_attention_rate(a100, false, 128, 2048), 155);
  EXPECT_DOUBLE_EQ(flash_attention_rate(a100, true, 128, 2048), 68);
  EXPECT_DOUBLE_EQ(flash_attention_rate(a100, false, 64, 8192), 165);
  EXPECT_NEAR(flash_attention_rate(a100, false, 128, 2896), 155 + 0.5 * (173 - 155), 0.01);  // ~sqrt(2k x 4k)
  EXPECT_DOUBLE_EQ(flash_attention_rate(a100, false, 112, 100), 99);      // d 128 is nearer; below 512
  EXPECT_DOUBLE_EQ(flash_attention_rate(a100, false, 128, 1 << 20), 189);  // beyond 16k
  Hardware none;
  none.flash_attention_tflops = 100;
  EXPECT_DOUBLE_EQ(flash_attention_rate(none, false, 128, 2048), 100);
  EXPECT_DOUBLE_EQ(flash_attention_rate(none, true, 128, 2048), 0);
}


// Overlapped communication is not free on a device (planner_comm.cc's
// time_comm), by hand. DDP, 100M bf16 gradients over dp8 at 100 GB/s: one
// all-reduce of 200 MB, bus 200 MB x 2 x 7/8 = 350 MB, 3.5 ms. Its last
// 25 MiB bucket (26,214,400 of 200,000,000 bytes) waits after backward:
// 0.458752 ms; the other 3.041248 ms hide under backward (49.15 ms of compute
// per rank, two thirds of it backward) and slow the compute they overlap by
// 20%: 0.6082496 ms. On CPU ranks (host kernels) with no slowdown, as before:
// all hidden.
TEST(Planner, OverlappedDdpCostsItsLastBucketAndTheSlowdown) {
  PlanInput in = params_only(100'000'000, 8, dp::Shard::none);
  in.global_batch = 64;
  in.overlap = true;
  in.hw = figures({.peak_tflops = 100, .bw_intra_GBps = 100});
  const PlanResult cpu = plan(in);
  ASSERT_EQ(cpu.comm.size(), 1u);
  EXPECT_NEAR(cpu.comm[0].time_s, 3.5e-3, 1e-12);
  EXPECT_EQ(cpu.exposed_comm_s, 0);
  EXPECT_EQ(cpu.unhidden_comm_s, 0);
  EXPECT_EQ(cpu.overlap_slowdown_s, 0);
  in.hw.host_kernels = false;
  in.hw.overlap_compute_slowdown = 0.2;
  const PlanResult r = plan(in);
  ASSERT_GT(r.compute_s * 2 / 3, 3.5e-3);  // the hidden part fits under backward
  EXPECT_NEAR(r.unhidden_comm_s, 0.458752e-3, 1e-12);
  EXPECT_NEAR(r.overlap_slowdown_s, 0.6082496e-3, 1e-12);
  EXPECT_NEAR(r.exposed_comm_s, 1.0670016e-3, 1e-12);
  EXPECT_NEAR(r.step_s, r.compute_s + 1.0670016e-3, 1e-12);
  // Without --overlap the all-reduce is waited for whole, and slows nothing.
  in.overlap = false;
  const PlanResult waited = plan(in);
  EXPECT_NEAR(waited.exposed_comm_s, 3.5e-3, 1e-12);
  EXPECT_EQ(waited.overlap_slowdown_s, 0);
}

// ZeRO-3 on a device, one unit of 100M bf16 parameters over dp8 at 100 GB/s,
// 8 microbatches per replica: each row moves 8 x 200 MB, bus x 7/8 = 1.4 GB,
// 14 ms. The first (here the only) unit's forward gathers have no compute
// beside them (14 ms), nor the last microbatch's reduce-scatter of it (14/8 =
// 1.75 ms); backward hides the gathers again and the other reduce-scatters
// (14 + 12.25 ms), slowed 20%: 5.25 ms. Exposed: 21 ms.
TEST(Planner, DeviceFsdpExposesItsFirstGatherAndLastReduceScatter) {
  PlanInput in = params_only(100'000'000, 8, dp::Shard::zero3);
  in.global_batch = 64;
  in.hw = figures({.peak_tflops = 100, .bw_intra_GBps = 100, .device = true});
  in.hw.overlap_compute_slowdown = 0.2;
  const PlanResult r = plan(in);
  ASSERT_EQ(r.microbatches, 8);
  ASSERT_EQ(r.comm.size(), 3u);
  for (const CommRow& c : r.comm) EXPECT_NEAR(c.time_s, 14e-3, 1e-12) << c.phase << " " << c.op;
  EXPECT_DOUBLE_EQ(r.dp_first_unit_share, 1);
  ASSERT_GT(r.compute_s * 2 / 3, 26.25e-3);
  EXPECT_NEAR(r.unhidden_comm_s, 15.75e-3, 1e-12);
  EXPECT_NEAR(r.overlap_slowdown_s, 5.25e-3, 1e-12);
  EXPECT_NEAR(r.exposed_comm_s, 21e-3, 1e-12);
}

// The gradient reduce's dtype (PlanInput::grad_reduce_bytes), by hand: 100M
// bf16-mixed parameters over dp 8, 8 microbatches. ZeRO-3: each row moves
// 8 x 100M elements, at 2 bytes 1.6 GB, 7/8 of it on the bus at 100 GB/s =
// 14 ms; an fp32 reduce (torchtitan's reduce_dtype=float32) doubles the
// reduce-scatter to 3.2 GB, 28 ms, the two all-gathers keep bf16's 1.6 GB.
// DDP: the one all-reduce of 100M gradients, 200 MB -> 400 MB. bf16 (2) is
// the default's bytes.
TEST(Planner, GradReduceDtypeScalesTheGradientReductionsOnly) {
  PlanInput in = params_only(100'000'000, 8, dp::Shard::zero3);
  in.global_batch = 64;
  in.hw = figures({.peak_tflops = 100, .bw_intra_GBps = 100});
  auto row = [](const PlanResult& r, const std::string& phase, const std::string& op) {
    for (const CommRow& c : r.comm)
      if (c.group == "dp" && c.phase == phase && c.op == op) return c;
    ADD_FAILURE() << "no dp " << phase << " " << op << " row";
    return CommRow{};
  };
  const PlanResult base = plan(in);
  ASSERT_EQ(base.microbatches, 8);
  ASSERT_EQ(base.comm.size(), 3u);
  EXPECT_EQ(row(base, "bwd", "reduce_scatter").bytes, 1'600'000'000);
  in.grad_reduce_bytes = 2;
  const PlanResult bf16 = plan(in);
  for (size_t i = 0; i < base.comm.size(); ++i) EXPECT_EQ(bf16.comm[i].bytes, base.comm[i].bytes);
  in.grad_reduce_bytes = 4;
  const PlanResult fp32 = plan(in);
  ASSERT_EQ(fp32.comm.size(), 3u);
  EXPECT_EQ(row(fp32, "bwd", "reduce_scatter").bytes, 3'200'000'000);
  EXPECT_NEAR(row(fp32, "bwd", "reduce_scatter").time_s, 28e-3, 1e-12);
  EXPECT_EQ(row(fp32, "fwd", "all_gather").bytes, 1'600'000'000);
  EXPECT_EQ(row(fp32, "bwd", "all_gather").bytes, 1'600'000'000);
  EXPECT_NEAR(row(fp32, "fwd", "all_gather").time_s, 14e-3, 1e-12);
  EXPECT_NEAR(fp32.comm_s - base.comm_s, 14e-3, 1e-12);

  PlanInput ddp = params_only(100'000'000, 8, dp::Shard::none);
  ddp.global_batch = 64;
  ddp.hw = in.hw;
  EXPECT_EQ(row(plan(ddp), "bwd", "all_reduce").bytes, 200'000'000);
  ddp.grad_reduce_bytes = 4;
  EXPECT_EQ(row(plan(ddp), "bwd", "all_reduce").bytes, 400'000'000);
}

// The slowest of n GPUs (expected_max_normal): the closed forms for 2 and 3
// draws (1/sqrt(pi), 3/(2 sqrt(pi))), tabulated values for 5 and 1000
// (Harter 1961: 1.16296, 3.24144), growing with n up to 2^63 - 1 (under
// sqrt(2 ln n)), 0 for one GPU; n below 1 refused, named.
TEST(Planner, ExpectedMaxNormalMatchesClosedFormsAndTables) {
  const double pi = 3.14159265358979323846;
  EXPECT_EQ(expected_max_normal(1), 0);
  EXPECT_NEAR(expected_max_normal(2), 1 / std::sqrt(pi), 1e-9);
  EXPECT_NEAR(expected_max_normal(3), 1.5 / std::sqrt(pi), 1e-9);
  EXPECT_NEAR(expected_max_normal(5), 1.16296, 1e-5);
  EXPECT_NEAR(expected_max_normal(1000), 3.24144, 1e-5);
  double last = 0;
  for (int64_t n : {2, 8, 64, 512, 3072, 100000}) {
    const double e = expected_max_normal(n);
    EXPECT_GT(e, last) << n;
    last = e;
  }
  for (int64_t n : {int64_t(1) << 40, std::numeric_limits<int64_t>::max()}) {  // any world a plan can have
    const double top = expected_max_normal(n);
    EXPECT_TRUE(std::isfinite(top)) << n;
    EXPECT_GT(top, last) << n;
    EXPECT_LT(top, std::sqrt(2 * std::log(double(n)))) << n;  // the bound sqrt(2 ln n)
    last = top;
  }
  EXPECT_NEAR(expected_max_normal(std::numeric_limits<int64_t>::max()), 9.0665, 1e-4);
  for (int64_t n : {int64_t(0), int64_t(-1), std::numeric_limits<int64_t>::min()})
    EXPECT_NE(input_error_of([&] { expected_max_normal(n); }).find("expected_max_normal"), std::string::npos) << n;
}

// A fleet's GEMM spread (Hardware::gemm_spread) paces the GEMMs at the
// world's slowest GPU: 1 + spread x expected_max_normal(world) of their time
// (a FlashAttention core's too), the memory-bound kernels and the
// collectives untouched; one GPU is its own slowest; out-of-range spreads are
// refused, named.
TEST(Planner, SlowestGpuPacesTheGemmBoundCompute) {
  PlanInput in = model_input("gpt2-350m", 4, 256);
  in.dp = 8;
  in.global_batch = 64;
  in.hw = hardware_for(load_machine("h100"), in);
  ASSERT_EQ(in.hw.gemm_spread, 0);  // no fleet figure is cited for the H100
  const PlanResult same = plan(in);
  EXPECT_EQ(same.slowest_gpu, 1);
  in.hw.gemm_spread = 0.01;
  const PlanResult r = plan(in);
  const double factor = 1 + 0.01 * expected_max_normal(8);
  EXPECT_NEAR(r.slowest_gpu, factor, 1e-12);
  EXPECT_DOUBLE_EQ(r.memory_s, same.memory_s);
  EXPECT_NEAR(r.compute_s - r.memory_s, (same.compute_s - same.memory_s) * factor, 1e-12 * r.compute_s);
  EXPECT_DOUBLE_EQ(r.gemm_efficiency, same.gemm_efficiency);  // the typical GPU's, as the profile's
  ASSERT_EQ(r.comm.size(), same.comm.size());
  for (size_t i = 0; i < r.comm.size(); ++i) EXPECT_DOUBLE_EQ(r.comm[i].time_s, same.comm[i].time_s);
  EXPECT_GT(r.step_s, same.step_s);
  // A FlashAttention kernel's core is GEMM-bound too.
  in.flash_attention = true;
  in.hw.gemm_spread = 0;
  const PlanResult flash_same = plan(in);
  in.hw.gemm_spread = 0.01;
  const PlanResult flash = plan(in);
  ASSERT_NE(flash_same.compute_s, same.compute_s);  // the core at the kernel's rate, not as GEMMs
  EXPECT_NEAR(flash.compute_s - flash.memory_s, (flash_same.compute_s - flash_same.memory_s) * factor,
              1e-12 * flash.compute_s);
  // One GPU waits for no other.
  in.flash_attention = false;
  in.dp = 1;
  in.global_batch = 8;
  in.hw.gemm_spread = 0.01;
  const PlanResult one = plan(in);
  EXPECT_EQ(one.slowest_gpu, 1);
  in.hw.gemm_spread = 0;
  EXPECT_DOUBLE_EQ(plan(in).step_s, one.step_s);
  for (double bad : {-0.01, 0.5, 2.0, std::numeric_limits<double>::quiet_NaN()}) {
    in.hw.gemm_spread = bad;
    EXPECT_NE(input_error_of([&] { plan(in); }).find("--gemm-spread"), std::string::npos) << bad;
  }
}

// A model's first unit (its embedding) is its share of the parameters: the
// built-in GPU profiles carry the sourced slowdown, the CPU stand-ins none.
TEST(Planner, FirstUnitShareAndTheProfilesSlowdown) {
  PlanInput in = model_input("gpt2-350m", 4, 256);
  in.dp = 8;
  in.shard = dp::Shard::zero3;
  in.hw = hardware_for(load_machine("h100"), in);
  const PlanResult r = plan(in);
  const ModelConfig& m = *in.shape;
  EXPECT_GT(r.dp_first_unit_share, double(m.V * m.C) / double(r.params_total));
  EXPECT_LT(r.dp_first_unit_share, 0.5);
  EXPECT_GT(r.unhidden_comm_s, 0);
  EXPECT_DOUBLE_EQ(in.hw.overlap_compute_slowdown, 0.189);
  EXPECT_FALSE(load_machine("h100").sources.at("overlap_compute_slowdown").empty());
  EXPECT_EQ(Hardware{}.overlap_compute_slowdown, 0);
}

}  // namespace
}  // namespace pb::planner

namespace pb::planner {
namespace {

// The memory-bound traffic by kind (RankBytes; Hardware::norm_mem_bw_GBps
// ...): the norms', the scores' softmax's and the loss's are parts of the
// counts, hand-computed; a plan's kinds sum within its total; without a
// per-kind rate the time is exactly as before, and each kind's rate moves
// the time by its bytes at the new rate less the old.
TEST(Planner, MemoryBoundKindsSplitTheTraffic) {
  const ActivationShape x{2, 64, 128, 4, 1, 1, false, false, 2};
  ActivationShape d = x;
  d.dropout = true;
  const int64_t tokens = 2 * 64, scores = 4 * 64 * tokens;
  EXPECT_EQ(layer_norm_traffic_bytes(x), 3 * 2 * 2 * 128 * 2 * tokens);
  EXPECT_EQ(scores_softmax_traffic_bytes(d), scores * 3 * 2 * 2);
  // What is left is elementwise: two residual adds (3h), GELU (8h), the masks and the attention dropout.
  EXPECT_EQ(layer_traffic_bytes(x) - layer_norm_traffic_bytes(x) - scores_softmax_traffic_bytes(x),
            3 * (2 * 3 * 128 + 8 * 128) * 2 * tokens);
  EXPECT_EQ(layer_traffic_bytes(d) - layer_norm_traffic_bytes(d) - scores_softmax_traffic_bytes(d),
            3 * (2 * 3 * 128 + 8 * 128) * 2 * tokens + 2 * 2 * 128 * tokens + scores * 2 * (2 * 2 + 1));
  EXPECT_EQ(layer_forward_traffic_bytes(x) - layer_norm_forward_traffic_bytes(x) -
                scores_softmax_forward_traffic_bytes(x),
            (2 * 3 * 128 + 8 * 128) * 2 * tokens);
  EXPECT_EQ(head_traffic_bytes(x, 1000) - head_norm_traffic_bytes(x), 4 * 1000 * 2 * tokens);
  EXPECT_EQ(head_megatron_traffic_bytes(x, 1000) - head_norm_traffic_bytes(x), 52 * 1000 * tokens);
  // The eager RMSNorm: 36 bytes per element forward at e = 2; Triton's 4.
  EXPECT_EQ(llama_layer_eager_norm_traffic_bytes(x), 3 * 2 * 36 * 128 * tokens);
  EXPECT_EQ(llama_layer_eager_norm_traffic_bytes(x, true), 3 * 2 * 4 * 128 * tokens);
  EXPECT_EQ(head_eager_traffic_bytes(x, 1000) - head_eager_norm_traffic_bytes(x), 36 * 1000 * tokens);

  PlanInput in = model_input("gpt2-124m", 1, 1, 64);
  in.recompute = Recompute::full;
  in.hw = figures({.peak_tflops = 100, .mem_bw_GBps = 10});
  const PlanResult before = plan(in);
  EXPECT_GT(before.memory_norm_bytes, 0);
  EXPECT_GT(before.memory_softmax_bytes, 0);
  EXPECT_GT(before.memory_loss_bytes, 0);
  EXPECT_GT(before.memory_optimizer_bytes, 0);
  const double kinds = before.memory_norm_bytes + before.memory_softmax_bytes + before.memory_loss_bytes +
                       before.memory_optimizer_bytes + before.memory_buffer_bytes;
  EXPECT_LT(kinds, before.memory_bytes);  // the rest elementwise
  EXPECT_DOUBLE_EQ(before.memory_s, before.memory_bytes / 10e9);
  // Every kind at the average's own rate: the same time.
  in.hw.norm_mem_bw_GBps = in.hw.softmax_mem_bw_GBps = in.hw.loss_mem_bw_GBps = in.hw.elementwise_mem_bw_GBps = 10;
  const PlanResult same = plan(in);
  EXPECT_NEAR(same.memory_s, before.memory_s, 1e-12 * before.memory_s);
  EXPECT_DOUBLE_EQ(same.memory_bytes, before.memory_bytes);
  // The norms at 5 GB/s: their bytes take twice as long, nothing else moves.
  in.hw.softmax_mem_bw_GBps = in.hw.loss_mem_bw_GBps = in.hw.elementwise_mem_bw_GBps = 0;
  in.hw.norm_mem_bw_GBps = 5;
  const PlanResult slow = plan(in);
  EXPECT_NEAR(slow.memory_s - before.memory_s, before.memory_norm_bytes / 10e9, 1e-9 * before.memory_s);
  EXPECT_GT(slow.step_s, before.step_s);
  // The loss alone at 20 GB/s saves half its time.
  in.hw.norm_mem_bw_GBps = 0;
  in.hw.loss_mem_bw_GBps = 20;
  EXPECT_NEAR(before.memory_s - plan(in).memory_s, before.memory_loss_bytes / 20e9, 1e-9 * before.memory_s);
  // A bad rate, and the norms' rate beside a calibration's shared rate: refused, named.
  in.hw.loss_mem_bw_GBps = -1;
  EXPECT_THROW(plan(in), InputError);
  in.hw.loss_mem_bw_GBps = 0;
  in.hw.norm_mem_bw_GBps = 5;
  in.hw.shared_mem_bw_GBps = 5;
  try {
    plan(in);
    ADD_FAILURE() << "accepted the norms' rate beside the shared rate";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("norm_mem_bw_GBps"), std::string::npos) << e.what();
  }
}

// The norms at the rate of the kernel the plan runs (--kernels): fused
// (one kernel each way) and eager-fused-norm (torchtitan's Triton RMSNorm) at
// norm_mem_bw_GBps, eager (the RMSNorm as eager ops) at
// eager_norm_mem_bw_GBps; each kind's bytes by hand (tiny-llama, one
// microbatch of 16 tokens, no recomputation: two blocks' two norms and the
// head's final one), and the other rate moves nothing.
TEST(Planner, NormsTakeTheRateOfTheKernelTheyRun) {
  PlanInput in = model_input("tiny-llama", 1, 1, 16);
  in.hw = figures({.peak_tflops = 100, .mem_bw_GBps = 10, .device = true});
  const ModelConfig& m = *in.shape;
  const ActivationShape x{1, 16, m.C, m.NH, 1, 1, false, false, 2};
  struct Case {
    bool eager, fused_norm;
    double norm, eager_norm;  // the bytes each kind holds
  };
  const double L = double(m.L);
  const Case cases[] = {
      {false, false, L * double(layer_norm_traffic_bytes(x)) + double(head_norm_traffic_bytes(x)), 0},
      {true, false, 0, L * double(llama_layer_eager_norm_traffic_bytes(x)) + double(head_eager_norm_traffic_bytes(x))},
      {true, true,
       L * double(llama_layer_eager_norm_traffic_bytes(x, true)) + double(head_eager_norm_traffic_bytes(x, true)), 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.eager ? (c.fused_norm ? "eager-fused-norm" : "eager") : "fused");
    in.eager_kernels = c.eager;
    in.fused_norm = c.fused_norm;
    in.hw.norm_mem_bw_GBps = in.hw.eager_norm_mem_bw_GBps = 0;
    const PlanResult base = plan(in);
    EXPECT_DOUBLE_EQ(base.memory_norm_bytes, c.norm);
    EXPECT_DOUBLE_EQ(base.memory_eager_norm_bytes, c.eager_norm);
    EXPECT_DOUBLE_EQ(base.memory_s, base.memory_bytes / 10e9);  // no rate of their own: mem_bw_GBps
    // The fused norms' rate at 5 GB/s: their bytes take twice as long.
    in.hw.norm_mem_bw_GBps = 5;
    EXPECT_NEAR(plan(in).memory_s - base.memory_s, c.norm / 10e9, 1e-9 * base.memory_s);
    // The eager norms' rate at 2 GB/s (beside the fused one's): five times.
    in.hw.eager_norm_mem_bw_GBps = 2;
    EXPECT_NEAR(plan(in).memory_s - base.memory_s, c.norm / 10e9 + 4 * c.eager_norm / 10e9, 1e-9 * base.memory_s);
  }
  // Refused, named: a bad eager rate, and the eager rate beside a calibration's shared rate.
  in.hw.norm_mem_bw_GBps = 0;
  in.hw.eager_norm_mem_bw_GBps = -1;
  EXPECT_THROW(plan(in), InputError);
  in.hw.eager_norm_mem_bw_GBps = 5;
  in.hw.shared_mem_bw_GBps = 5;
  try {
    plan(in);
    ADD_FAILURE() << "accepted the eager norms' rate beside the shared rate";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("eager_norm_mem_bw_GBps"), std::string::npos) << e.what();
  }
}

// Framework per-op host overhead (Hardware::host_op_us): the host issues a
// block's ops ahead of the device, so they cost the step only where their
// issue time exceeds the kernels' device time. Hand-computed: gpt2-124m at a
// near-infinite peak (device time ~0) and 1 ms per op issues, per block and
// microbatch, 12 forward ops (norm, QKV, the unfused core's two batched
// GEMMs and softmax, projection, bias-dropout-add, norm, fc1, bias-GELU,
// fc2, bias-dropout-add) and 24 backward; the optimizer's fused Adam, norm
// and scale each launch max(ceil(144 tensors / 36), ceil(elements / (320 x
// 65536))) times, plus 5 scalar ops; plus the step's one synchronization.
TEST(Planner, HostOverheadOnlyWhereTheHostFallsBehind) {
  EXPECT_EQ(multi_tensor_launches(144, 1e6), 4);
  EXPECT_EQ(multi_tensor_launches(144, 124e6), 6);  // 124e6 / 20971520 = 5.9
  EXPECT_EQ(multi_tensor_launches(0, 1e9), 0);
  PlanInput in = model_input("gpt2-124m", 1, 1, 64);
  in.hw = figures({.peak_tflops = 1e6});
  const PlanResult none = plan(in);
  EXPECT_EQ(none.host_overhead_s, 0);  // host_op_us 0 (every CPU profile): as before
  EXPECT_EQ(block_forward_ops(in), 12);
  in.hw.host_op_us = 1000;
  const PlanResult r = plan(in);
  const double elements = double(r.stages[0].optimizer) / double(dp::bytes_per_param(in.precision).optimizer);
  const int64_t launches = std::max<int64_t>(4, int64_t(std::ceil(elements / (320.0 * 65536))));
  const int64_t ops = 12 * (12 + 24) + 3 * launches + 5;
  EXPECT_EQ(r.host_ops, ops);
  EXPECT_NEAR(r.host_overhead_s, double(ops) * 1e-3 - r.compute_s + 1e-3, 1e-12);
  EXPECT_NEAR(r.step_s, none.step_s + r.host_overhead_s, 1e-12);
  EXPECT_DOUBLE_EQ(r.compute_s, none.compute_s);

  // torchtitan's eager Llama block: RMSNorm 8, wq wk wv, RoPE 6, repeat_kv 2,
  // attention, contiguous, wo, add, RMSNorm 8, w1 w3, SiLU, mul, w2, add.
  PlanInput t;
  t.shape = planner_model("llama3-8b");
  t.flash_attention = true;
  EXPECT_EQ(block_forward_ops(t), 13 + 1);
  t.eager_kernels = true;
  EXPECT_EQ(block_forward_ops(t), 37);
  // On the built-in H100 at a torchtitan shape the device outruns 4 us per op:
  // only the step's synchronization is exposed.
  const MachineProfile& h100 = load_machine("h100-96gb-500w");
  EXPECT_EQ(h100.hw.host_op_us, 4);
  EXPECT_NE(h100.sources.at("host_op_us").find("issue 82793"), std::string::npos);
  t.microbatch_size = 1;
  t.global_batch = 1;
  t.seq = 8192;
  t.hw = hardware_for(h100, t);
  t.hw.flash_attention_tflops = 300;
  const PlanResult big = plan(t);
  EXPECT_GT(big.host_ops, 32 * 3 * 37);
  EXPECT_DOUBLE_EQ(big.host_overhead_s, 4e-6);
}

}  // namespace
}  // namespace pb::planner
