// Tests of the model family option (docs/models.md): the published shapes'
// parameter counts computed from their configs, the llama layout's Hugging
// Face names and its count, and the bad shapes refused naming the sizes.
#include "reference/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "harness/status.h"
#include "reference/layout.h"

namespace pb {
namespace {

// Meta's and Mistral's published totals: Llama 3 8B 8.03B, 70B 70.6B
// (Llama 3.1 model card), 405B 405.9B (ibid.), Mixtral 8x7B 46.7B (Mistral's
// announcement). The count is ModelConfig::num_params of the shape.
TEST(ModelConfig, PublishedLlamaParameterCountsWithinHalfAPercent) {
  const std::pair<const char*, double> published[] = {
      {"llama3-8b", 8.03e9}, {"llama3-70b", 70.6e9}, {"llama3-405b", 405.9e9}, {"mixtral-8x7b", 46.7e9}};
  for (const auto& [name, n] : published) {
    const ModelConfig m = named_model(name);
    ASSERT_TRUE(m.llama()) << name;
    EXPECT_NO_THROW(m.validate()) << name;
    EXPECT_LE(std::abs(double(m.num_params()) / n - 1), 0.005) << name << ": " << m.num_params();
  }
  // Mixtral uses 2 of 8 experts: about 12.9B active parameters (Mistral).
  EXPECT_LE(std::abs(double(named_model("mixtral-8x7b").active_params()) / 12.9e9 - 1), 0.005);
}

TEST(ModelConfig, LlamaLayoutHasHuggingFaceNamesAndTheCount) {
  const ModelConfig m = named_model("tiny-llama");
  EXPECT_LT(m.kv_heads, m.NH);
  EXPECT_LT(m.kv_heads, 4);  // kv heads fewer than tp 4's ranks
  EXPECT_EQ(m.NH % 4, 0);
  EXPECT_EQ(m.ffn % 4, 0);
  const ParamLayout l(m);
  EXPECT_EQ(l.total(), m.num_params());
  const int64_t C = m.C, kv = int64_t(m.kv_heads) * m.head_size();
  auto shape = [&](const std::string& n) {
    const ParamInfo* p = l.find(n);
    EXPECT_NE(p, nullptr) << n;
    return p ? p->shape : std::vector<int64_t>{};
  };
  EXPECT_EQ(shape("model.embed_tokens.weight"), (std::vector<int64_t>{m.V, C}));
  EXPECT_EQ(shape("model.layers.1.input_layernorm.weight"), (std::vector<int64_t>{C}));
  EXPECT_EQ(shape("model.layers.1.self_attn.q_proj.weight"), (std::vector<int64_t>{C, C}));
  EXPECT_EQ(shape("model.layers.1.self_attn.k_proj.weight"), (std::vector<int64_t>{kv, C}));
  EXPECT_EQ(shape("model.layers.1.self_attn.v_proj.weight"), (std::vector<int64_t>{kv, C}));
  EXPECT_EQ(shape("model.layers.1.self_attn.o_proj.weight"), (std::vector<int64_t>{C, C}));
  EXPECT_EQ(shape("model.layers.1.post_attention_layernorm.weight"), (std::vector<int64_t>{C}));
  EXPECT_EQ(shape("model.layers.0.mlp.gate_proj.weight"), (std::vector<int64_t>{m.ffn, C}));
  EXPECT_EQ(shape("model.layers.0.mlp.up_proj.weight"), (std::vector<int64_t>{m.ffn, C}));
  EXPECT_EQ(shape("model.layers.0.mlp.down_proj.weight"), (std::vector<int64_t>{C, m.ffn}));
  EXPECT_EQ(shape("model.norm.weight"), (std::vector<int64_t>{C}));
  EXPECT_EQ(shape("lm_head.weight"), (std::vector<int64_t>{m.V, C}));
  EXPECT_EQ(l.find("wte"), nullptr);
  EXPECT_EQ(l.find("wpe"), nullptr);
  for (const auto& p : l.params()) EXPECT_EQ(p.name.find("bias"), std::string::npos) << p.name;
  // The fused projections are contiguous: k after q, v after k; up after gate.
  EXPECT_EQ(l.find("model.layers.0.self_attn.k_proj.weight")->offset,
            l.find("model.layers.0.self_attn.q_proj.weight")->offset + C * C);
  EXPECT_EQ(l.find("model.layers.0.mlp.up_proj.weight")->offset,
            l.find("model.layers.0.mlp.gate_proj.weight")->offset + m.ffn * C);
  EXPECT_EQ(l.find("lm_head.weight")->offset, l.lm_head_offset());
}

void expect_refused(const ModelConfig& m, const std::string& needle) {
  try {
    m.validate();
    ADD_FAILURE() << "accepted; wanted an error naming " << needle;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, BadFamilyShapesAreRefusedNamingTheSizes) {
  ModelConfig m = named_model("tiny-llama");
  m.kv_heads = 3;
  expect_refused(m, "model.kv_heads: must divide model.heads (8 heads, 3 kv heads)");
  m = named_model("tiny-llama");
  m.ffn = 0;
  expect_refused(m, "model.ffn: must be > 0");
  m = named_model("tiny");
  m.kv_heads = 1;
  expect_refused(m, "model.kv_heads: model.family = gpt2");
  m = named_model("tiny");
  m.ffn = 64;
  expect_refused(m, "model.ffn: model.family = gpt2");
  m = named_model("tiny-llama");
  m.NH = 64;  // head size 1: no rotate-half pairs
  m.kv_heads = 2;
  expect_refused(m, "even head size");
}

TEST(ModelConfig, Gpt2CountsAreUnchanged) {
  EXPECT_EQ(named_model("gpt2-124m").num_params(), 124439808);
  EXPECT_EQ(named_model("tiny").family, ModelFamily::gpt2);
}

}  // namespace
}  // namespace pb
