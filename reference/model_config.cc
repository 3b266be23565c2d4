#include "reference/model_config.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "harness/status.h"

namespace pb {

int ModelConfig::moe_layers() const {
  // The blocks l in [0, L) with l % every == 0 (is_moe), counted without a
  // loop over L (validate() counts the parameters of any layers given).
  return moe.experts > 0 && moe.every >= 1 && L > 0 ? (L - 1) / moe.every + 1 : 0;
}

const char* family_name(ModelFamily f) { return f == ModelFamily::llama ? "llama" : "gpt2"; }

namespace {
// The parameter count in U (int64_t: exact; double: for the size check
// before anything can overflow). mlp: one dense MLP's (one expert's).
template <class U>
U count_params(const ModelConfig& m, U* mlp_out = nullptr) {
  const U v = U(m.V), t = U(m.maxT), c = U(m.C), l = U(m.L), e = U(m.moe.experts), moe_l = U(m.moe_layers());
  if (!m.llama()) {
    const U mlp = 8 * c * c + 5 * c;
    if (mlp_out) *mlp_out = mlp;
    return v * c + t * c + l * (12 * c * c + 13 * c) + 2 * c + moe_l * ((e - 1) * mlp + e * c);
  }
  const U kv = U(m.kv_heads) * U(m.head_size()), mlp = 3 * c * U(m.ffn);
  if (mlp_out) *mlp_out = mlp;
  return 2 * v * c + c + l * (2 * c + 2 * c * c + 2 * c * kv + mlp) + moe_l * ((e - 1) * mlp + e * c);
}
}  // namespace

int64_t ModelConfig::num_params() const { return count_params<int64_t>(*this); }

int64_t ModelConfig::active_params() const {
  int64_t mlp = 0;
  const int64_t n = count_params<int64_t>(*this, &mlp);
  return n - moe_layers() * (moe.experts - moe.top_k) * mlp;
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
  validate_family();
  require(moe.experts >= 0 && moe.experts <= 4096,
          "moe.experts: must be in [0, 4096] (0: dense), got " + std::to_string(moe.experts));
  // The parameter count in floating point first, so the int64 counts below
  // (num_params, the planner's bytes) cannot overflow: 2^50 parameters is
  // ~1000x the largest models trained.
  ModelConfig all_moe = *this;  // every block counted as an MoE block: a bound for any `every`
  if (moe.experts) all_moe.moe.every = 1;
  const double params = count_params<double>(all_moe);
  char count[32];
  std::snprintf(count, sizeof count, "%.3g", params);
  require(params <= 0x1p50, "model: channels " + std::to_string(C) + ", layers " + std::to_string(L) + ", vocab " +
                                std::to_string(V) + (moe.experts ? ", experts " + std::to_string(moe.experts) : "") +
                                " make " + std::string(count) + " parameters, more than parabench sizes (2^50)");
  if (moe.experts == 0) return;
  require(moe.top_k >= 1 && moe.top_k <= moe.experts, "moe.top_k: must be in [1, moe.experts = " +
                                                          std::to_string(moe.experts) + "], got " +
                                                          std::to_string(moe.top_k));
  require(std::isfinite(moe.capacity_factor) && moe.capacity_factor > 0 && moe.capacity_factor <= 1e6,
          "moe.capacity_factor: must be finite and in (0, 1e6], got " + std::to_string(moe.capacity_factor));
  require(moe.every >= 1, "moe.every: must be >= 1, got " + std::to_string(moe.every));
  require(std::isfinite(moe.aux_loss_coef) && moe.aux_loss_coef >= 0,
          "moe.aux_loss_coef: must be finite and >= 0, got " + std::to_string(moe.aux_loss_coef));
}

void ModelConfig::validate_family() const {
  const std::string fam = std::string("model.family = ") + family_name(family);
  if (!llama()) {
    // GPT-2's shape has none of the llama options (its LayerNorm eps is 1e-5).
    const ModelConfig d;
    require(kv_heads == 0, "model.kv_heads: " + fam + " has no key/value heads of its own (got " +
                               std::to_string(kv_heads) + "; model.family = llama takes it)");
    require(ffn == 0, "model.ffn: " + fam + " has a 4C MLP (got " + std::to_string(ffn) +
                          "; model.family = llama takes it)");
    require(rope_theta == d.rope_theta, "model.rope_theta: " + fam + " has learned positions, no rotary embedding "
                                        "(model.family = llama takes it)");
    require(norm_eps == d.norm_eps, "model.norm_eps: " + fam + " has LayerNorm eps 1e-5 (model.family = llama takes it)");
    return;
  }
  require(kv_heads > 0 && kv_heads <= NH && NH % kv_heads == 0,
          "model.kv_heads: must divide model.heads (" + std::to_string(NH) + " heads, " + std::to_string(kv_heads) +
              " kv heads)");
  require(ffn > 0, "model.ffn: must be > 0 for model.family = llama, got " + std::to_string(ffn));
  require(head_size() % 2 == 0, "model.heads: the rotary embedding needs an even head size (channels " +
                                    std::to_string(C) + " / heads " + std::to_string(NH) + " = " +
                                    std::to_string(head_size()) + ")");
  require(std::isfinite(rope_theta) && rope_theta > 1, "model.rope_theta: must be finite and > 1, got " +
                                                           std::to_string(rope_theta));
  require(std::isfinite(norm_eps) && norm_eps > 0 && norm_eps < 1,
          "model.norm_eps: must be in (0, 1), got " + std::to_string(norm_eps));
}

double model_flops_per_step(const ModelConfig& m, int64_t B, int64_t T) {
  double c = m.C, tokens = double(B) * double(T);
  if (m.llama()) {
    // Per token: q and o (2C^2), k and v (2*C*KVH*hs), the MLP's three
    // matmuls (3*C*F; an MoE block: top_k experts' and the router's E*C),
    // the untied head (V*C).
    const double kv = double(m.kv_heads) * m.head_size(), mlp = 3.0 * c * m.ffn;
    const double moe_mlp = double(m.moe.top_k) * mlp + double(m.moe.experts) * c;
    const double matmul_params = double(m.L) * (2 * c * c + 2 * c * kv + mlp) + double(m.V) * c +
                                 double(m.moe_layers()) * (moe_mlp - mlp);
    return 6.0 * matmul_params * tokens + 12.0 * double(m.L) * c * double(T) * tokens;
  }
  // Matmul parameters touched per token: blocks (12C^2 each) + LM head (V*C).
  // An MoE block's MLP: top_k experts' 8C^2 per token and the router's E*C.
  const double moe_mlp = double(m.moe.top_k) * 8.0 * c * c + double(m.moe.experts) * c;
  double matmul_params = double(m.L) * 12.0 * c * c + double(m.V) * c + double(m.moe_layers()) * (moe_mlp - 8.0 * c * c);
  double attn = 12.0 * double(m.L) * c * double(T);  // QK^T and AV, fwd+bwd
  return 6.0 * matmul_params * tokens + attn * tokens;
}

namespace {

// "tiny-moe" plus "-e8", "-top1", "-cf2", "-local" (model_config.h).
bool moe_variant(std::string_view name, ModelConfig& m) {
  const std::string_view base = "tiny-moe";
  if (name.substr(0, base.size()) != base || name.size() == base.size() || name[base.size()] != '-') return false;
  m = named_model(base);
  m.name = std::string(name);
  std::set<std::string> seen;
  std::string rest(name.substr(base.size() + 1));
  auto bad = [&](const std::string& why) {
    return InputError("model.name: '" + std::string(name) + "': " + why +
                      " (tiny-moe variants: -e<experts>, -top<k>, -cf<capacity factor>, -local, each once)");
  };
  if (rest.empty() || rest.back() == '-') throw bad("an empty variant");
  std::stringstream ss(rest);
  for (std::string part; std::getline(ss, part, '-');) {
    // Plain decimals only (no sign, exponent, hex or spaces): one spelling per
    // model, so one configuration has one name.
    auto digits = [](const std::string& v, bool point) {
      size_t dots = 0;
      for (char ch : v) {
        if (ch == '.' && point) ++dots;
        else if (ch < '0' || ch > '9') return false;
      }
      return !v.empty() && dots <= 1 && v.front() != '.' && v.back() != '.' && (v.size() == 1 || v[0] != '0' || v[1] == '.');
    };
    std::string key = part == "local" ? "local" : part.rfind("top", 0) == 0 ? "top" : part.rfind("cf", 0) == 0 ? "cf"
                                                   : part.rfind("e", 0) == 0 ? "e" : "";
    if (key.empty()) throw bad("unknown variant '" + part + "'");
    if (!seen.insert(key).second) throw bad("'" + key + "' given twice");
    const std::string v = key == "local" ? "" : part.substr(key.size());
    if (key == "local") {
      m.moe.capacity = MoeCapacity::local;
    } else if (key == "cf") {
      if (!digits(v, true) || !(std::strtod(v.c_str(), nullptr) > 0) || v.size() > 12)
        throw bad("'" + part + "' needs a plain decimal > 0 (e.g. cf1.5)");
      m.moe.capacity_factor = std::strtod(v.c_str(), nullptr);
    } else {
      if (!digits(v, false) || v.size() > 4 || std::stoi(v) < 1 || std::stoi(v) > 1024)
        throw bad("'" + part + "' needs a whole number in [1, 1024] without leading zeros");
      (key == "top" ? m.moe.top_k : m.moe.experts) = std::stoi(v);
    }
  }
  if (m.moe.top_k > m.moe.experts) throw bad("top-" + std::to_string(m.moe.top_k) + " of " + std::to_string(m.moe.experts) + " experts");
  return true;
}

// The llama family (docs/models.md): the tiny shapes, then published ones
// (Meta's Llama 3 / 3.1 config.json and Mistral's Mixtral-8x7B-v0.1: hidden
// size, layers, heads, kv heads, intermediate size, vocabulary, rope theta,
// rms_norm_eps; maxT: their context length).
bool llama_shape(std::string_view name, ModelConfig& m) {
  auto set = [&](int V, int T, int C, int L, int NH, int KVH, int F, double theta) {
    m.family = ModelFamily::llama;
    m.V = V; m.maxT = T; m.C = C; m.L = L; m.NH = NH; m.kv_heads = KVH; m.ffn = F; m.rope_theta = theta;
    m.norm_eps = 1e-5;
  };
  // 8 heads over 2 kv heads (hs 8): tp 2 and 4 split the query heads, and at
  // tp 4 the kv heads are fewer than the ranks; F = 96 splits over 2, 3, 4.
  if (name == "tiny-llama") set(64, 16, 64, 2, 8, 2, 96, 10000);
  // tiny-llama's blocks with SwiGLU experts, Mixtral style: every block 4
  // experts, top-2, no token dropped (capacity factor E / k).
  else if (name == "tiny-mixtral") {
    set(64, 16, 64, 2, 8, 2, 96, 10000);
    m.moe = {4, 2, 2.0, 1, 0.01, MoeCapacity::global};
  }
  else if (name == "llama3-8b") set(128256, 8192, 4096, 32, 32, 8, 14336, 500000);
  else if (name == "llama3-70b") set(128256, 8192, 8192, 80, 64, 8, 28672, 500000);
  else if (name == "llama3-405b") set(128256, 8192, 16384, 126, 128, 8, 53248, 500000);
  else if (name == "mixtral-8x7b") {
    set(32000, 32768, 4096, 32, 32, 8, 14336, 1e6);
    m.moe = {8, 2, 4.0, 1, 0.02, MoeCapacity::global};
  } else return false;
  return true;
}

}  // namespace

std::string moe_variant_name(const ModelConfig& m) {
  if (m.moe.experts == 0 || m.name.rfind("tiny-moe", 0) != 0) return m.name;
  std::string n = "tiny-moe";
  if (m.moe.experts != 4 || m.moe.top_k != 2) n += "-e" + std::to_string(m.moe.experts) + "-top" + std::to_string(m.moe.top_k);
  if (m.moe.capacity_factor != 1.25) {
    char cf[32];
    std::snprintf(cf, sizeof cf, "%g", m.moe.capacity_factor);
    n += std::string("-cf") + cf;
  }
  if (m.moe.capacity == MoeCapacity::local) n += "-local";
  return n;
}

ModelConfig named_model(std::string_view name) {
  ModelConfig m;
  if (moe_variant(name, m)) return m;
  m.name = std::string(name);
  if (name == "tiny") { m.V = 64; m.maxT = 16; m.C = 32; m.L = 2; m.NH = 2; }
  // Heads divisible by 2, 3 and 4 and a vocabulary that none of them divides:
  // the tensor-parallel model (vocabulary padding exercised at every tp).
  else if (name == "tiny-tp") { m.V = 67; m.maxT = 16; m.C = 48; m.L = 2; m.NH = 12; }
  // Mixture of experts: tiny with block 0's MLP as 4 experts, top-2 (block 1 dense).
  else if (name == "tiny-moe") { m.V = 64; m.maxT = 16; m.C = 32; m.L = 2; m.NH = 2; m.moe = {4, 2, 1.25, 2, 0.01, MoeCapacity::global}; }
  else if (name == "small") { m.V = 256; m.maxT = 64; m.C = 128; m.L = 4; m.NH = 4; }
  else if (name == "medium") { m.V = 512; m.maxT = 128; m.C = 256; m.L = 4; m.NH = 8; }
  else if (name == "wide") { m.V = 1024; m.maxT = 128; m.C = 768; m.L = 2; m.NH = 12; }
  else if (name == "gpt2-124m") { m.V = 50257; m.maxT = 1024; m.C = 768; m.L = 12; m.NH = 12; }
  else if (name == "gpt2-350m") { m.V = 50257; m.maxT = 1024; m.C = 1024; m.L = 24; m.NH = 16; }
  else if (llama_shape(name, m)) {}
  else {
    std::string known;
    for (auto& n : named_models()) known += (known.empty() ? "" : ", ") + n;
    throw InputError("model.name: unknown model '" + std::string(name) + "' (known: " + known + ")");
  }
  return m;
}

std::vector<std::string> named_models() {
  return {"tiny",       "tiny-tp",    "tiny-moe",    "small",       "medium",      "wide",        "gpt2-124m",
          "gpt2-350m",  "tiny-llama", "tiny-mixtral", "llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b"};
}

}  // namespace pb
