// The planner's llama family (docs/planner.md#the-llama-family): parameter
// counts against the published totals, FLOPs against the 6N + 12Lhs count
// (torchtitan's and PaLM's), the activation expression's sharding, the eager head's loss peak, GQA's
// smaller K/V in context-parallel traffic, and the family's bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "harness/status.h"
#include "suites/planner/model_cost.h"
#include "suites/planner/planner.h"

namespace pb::planner {
namespace {

PlanInput llama_input(const std::string& name, int64_t seq) {
  PlanInput in;
  in.shape = planner_model(name);
  in.seq = seq;
  in.precision = Precision::bf16_mixed;
  return in;
}

int64_t sum(const std::vector<int64_t>& v) {
  int64_t n = 0;
  for (int64_t x : v) n += x;
  return n;
}

// Meta's model cards (Llama 3.1: 8.03B, 70.6B, 405.9B; the Hugging Face
// repositories' safetensors totals) and Mistral's Mixtral 8x7B (46.7B total,
// 12.9B active): the planner's own count, from the config's fields, within 0.5%.
TEST(PlannerLlama, ParameterCountsMatchPublished) {
  const struct {
    const char* name;
    double published;
  } rows[] = {{"llama3-8b", 8.03e9}, {"llama3-70b", 70.6e9}, {"llama3-405b", 405.9e9}, {"mixtral-8x7b", 46.7e9}};
  for (const auto& row : rows) {
    const PlanResult r = plan(llama_input(row.name, 4096));
    EXPECT_LT(std::abs(double(r.params_total) / row.published - 1), 0.005)
        << row.name << ": planned " << r.params_total << " vs published " << row.published;
    // The planner's units and the reference's closed form (model_config.h) are two counts of one model.
    EXPECT_EQ(r.params_total, planner_model(row.name).num_params()) << row.name;
  }
  EXPECT_LT(std::abs(double(planner_model("mixtral-8x7b").active_params()) / 12.9e9 - 1), 0.005);
}

// Over a tp group the units add up to the model with the replicated RMSNorm
// weights (and Mixtral's routers, which every tp rank runs whole) counted once
// per rank (kv_heads 8 >= tp 8: K and V split).
TEST(PlannerLlama, UnitsSplitOverTensorParallel) {
  for (const char* name : {"llama3-8b", "llama3-70b", "mixtral-8x7b"}) {
    const ModelConfig m = planner_model(name);
    for (int t : {2, 4, 8}) {
      const int64_t replicated =
          llama_replicated_params(m, m.L, true) + int64_t(m.moe.experts) * m.C * m.moe_layers();
      EXPECT_EQ(t * sum(llama_unit_params(m, t)), m.num_params() + (t - 1) * replicated) << name << " tp" << t;
    }
  }
  // kv_heads < tp: one kv head per rank, replicated (more than the model over the group).
  const ModelConfig m = planner_model("llama3-8b");
  EXPECT_EQ(llama_kv_heads_per_rank(m, 16), 1);
  EXPECT_GT(16 * sum(llama_unit_params(m, 16)), m.num_params() + 15 * llama_replicated_params(m, m.L, true));
}

// Model FLOPs = 6 x tokens x the matmul parameters one token uses (every
// parameter but the embedding and the norms; Mixtral's top-k experts and
// router) + 12 L h s per token (the attention core, no causal halving):
// torchtitan's and PaLM's count, exactly.
TEST(PlannerLlama, FlopsAreSixNPlusAttention) {
  for (const char* name : {"llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b"}) {
    const ModelConfig m = planner_model(name);
    const int64_t B = 3, s = 4096;
    const int64_t matmul = m.active_params() - int64_t(m.V) * m.C - llama_replicated_params(m, m.L, true);
    const double want = 6.0 * double(B * s) * double(matmul) + 12.0 * double(m.L) * m.C * double(s) * double(B * s);
    const Flops f = iteration_flops(m, B, s, Recompute::none);
    EXPECT_DOUBLE_EQ(to_double(f.model), want) << name;
    EXPECT_EQ(f.hardware, f.model) << name;
    // Full recomputation runs every block's forward once more (not the head's).
    const Flops full = iteration_flops(m, B, s, Recompute::full);
    const u128 head = 6 * u128(B * s) * u128(m.C) * u128(m.V);
    EXPECT_DOUBLE_EQ(to_double(full.hardware - head), to_double(f.model - head) * 4 / 3) << name;
  }
}

// The stated expression (docs/planner.md): sequence parallel divides the
// whole layer over tp, selective recomputation drops exactly the scores,
// full keeps the layer's input.
TEST(PlannerLlama, ActivationExpression) {
  const ModelConfig m = planner_model("llama3-70b");
  const int64_t b = 2, s = 8192;
  ActivationShape x{b, s, m.C, m.NH, 1, 1, false, false, 2};
  const int64_t one = llama_layer_activation_bytes(m, x, Recompute::none);
  const int64_t tokens = b * s, kv = int64_t(m.kv_heads) * m.head_size();
  EXPECT_EQ(one, 2 * tokens * (4 * m.C + 2 * m.C + 2 * kv + 3 * int64_t(m.ffn) + int64_t(m.NH) * s));
  EXPECT_EQ(one - llama_layer_activation_bytes(m, x, Recompute::selective), 2 * tokens * int64_t(m.NH) * s);
  EXPECT_EQ(llama_layer_activation_bytes(m, x, Recompute::full), 2 * tokens * m.C);
  ActivationShape t8 = x;
  t8.tp = 8;
  t8.sp = true;
  EXPECT_EQ(llama_layer_activation_bytes(m, t8, Recompute::none) * 8, one);
  t8.sp = false;  // the norms' 4h stay whole on every rank
  EXPECT_EQ(llama_layer_activation_bytes(m, t8, Recompute::none) * 8, one + 7 * 2 * tokens * 4 * m.C);
}

// torchtitan's eager head (--kernels eager): the final RMSNorm's fp32 input
// and normalised output, the head's input, and the loss's peak in
// log-softmax's backward, three fp32 tensors of the logits' shape
// (docs/planner.md#the-llama-family); the plan's activations carry it in place
// of the fused head's one fp32 copy.
TEST(PlannerLlama, EagerHeadKeepsTheLossPeak) {
  const ModelConfig m = planner_model("llama3-8b");
  const int64_t b = 2, s = 8192, tokens = b * s, V = m.V;
  ActivationShape x{b, s, m.C, m.NH, 1, 1, false, false, 2};
  EXPECT_EQ(last_stage_eager_extra_bytes(x, V), tokens * (6 * m.C + 2 * m.C + 12 * V));
  EXPECT_EQ(last_stage_extra_bytes(x, V), tokens * (4 * m.C + 4 * V));
  ActivationShape t8 = x;  // vocabulary-parallel logits, sp's norm on s/t tokens, the head's input gathered
  t8.tp = 8;
  t8.sp = true;
  EXPECT_EQ(last_stage_eager_extra_bytes(t8, V), tokens * (6 * m.C / 8 + 2 * m.C + 12 * ((V + 7) / 8)));
  PlanInput in = llama_input("llama3-8b", s);
  in.microbatch_size = b;
  in.global_batch = b;
  in.flash_attention = true;
  in.recompute_even_matmuls = true;
  const int64_t fused = plan(in).worst.activations;
  in.eager_kernels = true;
  EXPECT_EQ(plan(in).worst.activations - fused, last_stage_eager_extra_bytes(x, V) - last_stage_extra_bytes(x, V));
}

int64_t cp_bytes(const PlanInput& in) {
  int64_t n = 0;
  for (const CommRow& c : plan(in).comm)
    if (c.group == "cp") n += c.bytes;
  return n;
}

// Ring attention passes K and V, which GQA holds for kv heads only: the cp
// traffic is kv_heads / heads of the same model's with every head a kv head.
TEST(PlannerLlama, ContextParallelMovesKvHeads) {
  PlanInput gqa = llama_input("llama3-8b", 8192);
  gqa.cp = 2;
  gqa.dp = 1;
  PlanInput mha = gqa;
  mha.shape->kv_heads = mha.shape->NH;
  const int64_t g = cp_bytes(gqa), h = cp_bytes(mha);
  ASSERT_GT(h, 0);
  EXPECT_EQ(g * (mha.shape->NH / gqa.shape->kv_heads), h);
  // Ulysses: q and o whole, k and v at kv heads: (a + kv) / 2a.
  gqa.cp_algo = mha.cp_algo = CpAlgo::ulysses;
  EXPECT_EQ(cp_bytes(gqa) * 2 * 32, cp_bytes(mha) * (32 + 8));
}

// The untied head: no embedding all-reduce across the pipeline.
TEST(PlannerLlama, PipelineHasNoTiedEmbedding) {
  PlanInput in = llama_input("llama3-70b", 4096);
  in.pp = 4;
  in.tp = 8;
  in.global_batch = 16;
  for (const CommRow& c : plan(in).comm) EXPECT_NE(c.group, "embedding");
}

TEST(PlannerLlama, BadInputIsNamed) {
  PlanInput in = llama_input("llama3-8b", 4096);
  in.tp = 3;
  try {
    plan(in);
    FAIL() << "tp 3 planned";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ffn (14336)"), std::string::npos) << e.what();
  }
  PlanInput moe = llama_input("mixtral-8x7b", 4096);
  moe.dp = 4;
  moe.ep = 2;
  EXPECT_NO_THROW(plan(moe));  // expert parallel: the ep rank's own state costs
  PlanInput uly = llama_input("llama3-8b", 4096);
  uly.tp = 2;
  uly.cp = 8;
  uly.cp_algo = CpAlgo::ulysses;  // 4 kv heads per tp rank over cp 8
  try {
    plan(uly);
    FAIL() << "ulysses over 4 kv heads at cp 8 planned";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kv heads"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pb::planner
