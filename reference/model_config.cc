#include "reference/model_config.h"

#include "harness/status.h"

namespace pb {

int64_t ModelConfig::num_params() const {
  int64_t v = V, t = maxT, c = C, l = L;
  return v * c + t * c + l * (12 * c * c + 13 * c) + 2 * c;
}

void ModelConfig::validate() const {
  auto positive = [](const char* field, int x) {
    require(x > 0, std::string("model.") + field + ": must be > 0, got " + std::to_string(x));
  };
  positive("vocab", V);
  positive("context", maxT);
  positive("channels", C);
  positive("layers", L);
  positive("heads", NH);
  require(C % NH == 0, "model.heads: must divide model.channels (" + std::to_string(C) + " % " +
                           std::to_string(NH) + " != 0)");
}

double model_flops_per_step(const ModelConfig& m, int64_t B, int64_t T) {
  // Matmul parameters touched per token: blocks (12C^2 each) + LM head (V*C).
  double c = m.C, tokens = double(B) * double(T);
  double matmul_params = double(m.L) * 12.0 * c * c + double(m.V) * c;
  double attn = 12.0 * double(m.L) * c * double(T);  // QK^T and AV, fwd+bwd
  return 6.0 * matmul_params * tokens + attn * tokens;
}

ModelConfig named_model(std::string_view name) {
  ModelConfig m;
  m.name = std::string(name);
  if (name == "tiny") { m.V = 64; m.maxT = 16; m.C = 32; m.L = 2; m.NH = 2; }
  // Heads divisible by 2, 3 and 4 and a vocabulary that none of them divides:
  // the tensor-parallel model (vocabulary padding exercised at every tp).
  else if (name == "tiny-tp") { m.V = 67; m.maxT = 16; m.C = 48; m.L = 2; m.NH = 12; }
  else if (name == "small") { m.V = 256; m.maxT = 64; m.C = 128; m.L = 4; m.NH = 4; }
  else if (name == "medium") { m.V = 512; m.maxT = 128; m.C = 256; m.L = 4; m.NH = 8; }
  else if (name == "wide") { m.V = 1024; m.maxT = 128; m.C = 768; m.L = 2; m.NH = 12; }
  else if (name == "gpt2-124m") { m.V = 50257; m.maxT = 1024; m.C = 768; m.L = 12; m.NH = 12; }
  else if (name == "gpt2-350m") { m.V = 50257; m.maxT = 1024; m.C = 1024; m.L = 24; m.NH = 16; }
  else {
    std::string known;
    for (auto& n : named_models()) known += (known.empty() ? "" : ", ") + n;
    throw InputError("model.name: unknown model '" + std::string(name) + "' (known: " + known + ")");
  }
  return m;
}

std::vector<std::string> named_models() { return {"tiny", "tiny-tp", "small", "medium", "wide", "gpt2-124m", "gpt2-350m"}; }

}  // namespace pb
