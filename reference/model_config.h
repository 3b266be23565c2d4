// The canonical model's shape (GPT-2 architecture, tied LM head:
// docs/architecture.md#the-canonical-model; or the Llama family:
// docs/models.md) and the named shapes parabench ships. Dimension letters as
// everywhere: V vocab, maxT context length, C channels, L blocks, NH heads;
// the Llama family adds KVH key/value heads and F, the SwiGLU MLP's width.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pb {

// Mixture of experts (Switch / GShard style, as Megatron-LM's MoE layer):
// block i's MLP is E experts with a softmax router when experts > 0 and
// i % every == 0 (Megatron's moe_layer_freq). Each token goes to its top_k
// experts (ties to the lower expert index), weighted by its router
// probabilities renormalized over the k chosen. An expert takes at most
// capacity = ceil(capacity_factor * tokens * top_k / E) tokens of a
// microbatch, admitted first choices first, each choice rank in token order;
// a choice past capacity is dropped (its share of the output is lost; a
// token with every choice dropped passes through on the residual). Scope of
// `tokens` and of the admission order: global = the whole microbatch as one
// device sees it (every sharding drops the same tokens); local = each data
// rank's part of it (Megatron / DeepSpeed), replayed by the reference.
// Load balancing (Switch, Fedus et al. 2021, eq. 4): aux = coef * E * sum_e
// f_e P_e over the microbatch, f_e the fraction of (token, choice) pairs
// routed to e before capacity (no gradient), P_e the mean router probability;
// the objective adds each microbatch's aux weighted by its share of the
// step's tokens.
enum class MoeCapacity : uint8_t { global, local };
struct MoeConfig {
  int experts = 0;  // E; 0: a dense model
  int top_k = 1;
  double capacity_factor = 1.0;
  int every = 1;
  double aux_loss_coef = 0.01;
  MoeCapacity capacity = MoeCapacity::global;
  bool operator==(const MoeConfig&) const = default;
};

// gpt2: LayerNorm, GELU MLP of 4C, learned positions, tied head, biases.
// llama: RMSNorm (eps norm_eps), SwiGLU MLP of width ffn (gate, up, down),
// rotary positions (rope_theta, Hugging Face's rotate-half layout), grouped-
// query attention (kv_heads dividing heads; 1: multi-query), an untied LM
// head, no biases (docs/models.md).
enum class ModelFamily : uint8_t { gpt2, llama };
const char* family_name(ModelFamily f);

struct ModelConfig {
  std::string name = "custom";
  int V = 64;     // vocabulary (the synthetic language's alphabet)
  int maxT = 32;  // context length (wpe rows; llama: the longest sequence)
  int C = 32;     // channels
  int L = 2;      // transformer blocks
  int NH = 2;     // attention heads
  MoeConfig moe;
  ModelFamily family = ModelFamily::gpt2;
  // The llama family's options (gpt2 takes none: 0 and the defaults).
  int kv_heads = 0;           // KVH
  int ffn = 0;                // F, the SwiGLU hidden width
  double rope_theta = 10000;  // RoPE base
  double norm_eps = 1e-5;     // RMSNorm epsilon

  bool llama() const { return family == ModelFamily::llama; }
  int head_size() const { return C / NH; }
  int kv_heads_or_heads() const { return llama() ? kv_heads : NH; }
  int qkv_width() const { return C + 2 * kv_heads_or_heads() * head_size(); }  // the fused q|k|v rows
  bool is_moe(int layer) const { return moe.experts > 0 && layer % moe.every == 0; }
  int moe_layers() const;
  // Exact parameter count. gpt2: V*C + maxT*C + L*(12C^2 + 13C) + 2C; an MoE
  // block has E experts' MLPs (8C^2 + 5C each) and a router (E*C) for its one
  // MLP. llama: 2*V*C (embedding, untied head) + C (final norm) + L*(2C +
  // 2C^2 + 2*C*KVH*hs) + each block's MLP: 3*C*F, or E experts of 3*C*F and
  // a router of E*C.
  int64_t num_params() const;
  // Parameters one token uses: the MoE blocks' top_k experts instead of E.
  int64_t active_params() const;
  // Throws InputError naming the field and the rule it breaks.
  void validate() const;
  void validate_family() const;  // the family's options (part of validate)
  bool operator==(const ModelConfig&) const = default;
};

// Model FLOPs of one training step (forward + backward = 3x forward) for B
// sequences of T tokens, counting matmuls and attention (llm.c / PaLM
// accounting: 6*N_matmul_params*tokens + 12*L*C*T*tokens, halved attention for
// the causal mask is NOT applied).
double model_flops_per_step(const ModelConfig& m, int64_t B, int64_t T);

// Named shapes: "tiny", "small", "gpt2-124m" (L12 C768 NH12 T1024 V50257),
// the llama family's "tiny-llama", "tiny-mixtral", "llama3-8b", "llama3-70b",
// "llama3-405b", "mixtral-8x7b" (docs/models.md), ...
// A mixture-of-experts name may add variants to "tiny-moe", each once, in
// any order: "-e<E>" experts, "-top<k>", "-cf<F>" capacity factor, "-local"
// capacity (e.g. "tiny-moe-e8-top1-local", "tiny-moe-cf2"); the name is kept
// as given. InputError naming model.name otherwise.
ModelConfig named_model(std::string_view name);
// The canonical variant name of a tiny-moe shape (named_model of it gives it
// back): "tiny-moe", then "-e<E>-top<k>" unless 4 and 2, "-cf<F>" unless
// 1.25, "-local" for local capacity. Other models: their name.
std::string moe_variant_name(const ModelConfig& m);
std::vector<std::string> named_models();

}  // namespace pb
