// The canonical model's shape (DESIGN.md: GPT-2 architecture, tied LM head)
// and the named shapes parabench ships. Dimension letters as everywhere:
// V vocab, maxT context length, C channels, L blocks, NH heads.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pb {

struct ModelConfig {
  std::string name = "custom";
  int V = 64;     // vocabulary (the synthetic language's alphabet)
  int maxT = 32;  // context length (wpe rows)
  int C = 32;     // channels
  int L = 2;      // transformer blocks
  int NH = 2;     // attention heads

  int head_size() const { return C / NH; }
  // Exact parameter count: V*C + maxT*C + L*(12C^2 + 13C) + 2C.
  int64_t num_params() const;
  // Throws InputError naming the field and the rule it breaks.
  void validate() const;
  bool operator==(const ModelConfig&) const = default;
};

// Model FLOPs of one training step (forward + backward = 3x forward) for B
// sequences of T tokens, counting matmuls and attention (llm.c / PaLM
// accounting: 6*N_matmul_params*tokens + 12*L*C*T*tokens, halved attention for
// the causal mask is NOT applied).
double model_flops_per_step(const ModelConfig& m, int64_t B, int64_t T);

// Named shapes: "tiny", "small", "gpt2-124m" (L12 C768 NH12 T1024 V50257), ...
ModelConfig named_model(std::string_view name);
std::vector<std::string> named_models();

}  // namespace pb
