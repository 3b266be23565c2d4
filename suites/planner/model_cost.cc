// Analytic costs of the canonical GPT; formulas and citations in model_cost.h.
#include "suites/planner/model_cost.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "harness/status.h"

namespace pb::planner {

namespace {

struct Shape {
  const char* name;
  const char* alias;
  int L, C, NH, T, V;
};
constexpr Shape kLarge[] = {
    {"gpt-1.3b", "1.3b", 24, 2048, 16, 2048, 50257},
    {"gpt-7b", "7b", 32, 4096, 32, 2048, 50257},
    {"gpt3-175b", "175b", 96, 12288, 96, 2048, 50257},
    {"megatron-1t", "1t", 128, 25600, 160, 2048, 51200},
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::vector<std::string> planner_model_names() {
  std::vector<std::string> names = named_models();
  for (const Shape& s : kLarge) names.emplace_back(s.name);
  return names;
}

ModelConfig planner_model(std::string_view name) {
  std::string n = lower(name);
  if (n == "124m") n = "gpt2-124m";
  if (n == "350m") n = "gpt2-350m";
  for (const Shape& s : kLarge) {
    if (n == s.name || n == s.alias) {
      ModelConfig m;
      m.name = s.name;
      m.L = s.L;
      m.C = s.C;
      m.NH = s.NH;
      m.maxT = s.T;
      m.V = s.V;
      return m;
    }
  }
  for (const std::string& known : named_models())
    if (n == known) return named_model(known);
  if (n.rfind("tiny-moe-", 0) == 0) return named_model(n);  // a variant (model_config.h)
  std::string all;
  for (const std::string& k : planner_model_names()) all += (all.empty() ? "" : ", ") + k;
  throw InputError("--model: unknown model '" + std::string(name) + "' (known: " + all + ")");
}

std::vector<int64_t> rank_param_units(const ModelConfig& m, int tp, const pipeline::Partition& part, int rank) {
  require(tp >= 1 && m.C % tp == 0 && m.NH % tp == 0,
          "--tp: must divide hidden (" + std::to_string(m.C) + ") and heads (" + std::to_string(m.NH) + ")");
  // The tensor axis's own unit sizes (impl/tensor_parallel/cost.h): embedding,
  // one per block, final LayerNorm.
  const std::vector<int64_t> model = m.llama() ? llama_unit_params(m, tp) : tp::unit_params(m, tp);
  const int64_t vocab_rows = (int64_t(m.V) + tp - 1) / tp;
  std::vector<int64_t> units;
  for (int c = 0; c < part.v; ++c) {
    const pipeline::StageSlice& sl = part.at(rank, c);
    if (sl.embedding) units.push_back(model.front());
    for (int i = 0; i < sl.num_blocks; ++i) units.push_back(model[size_t(1 + sl.first_block + i)]);
    if (sl.head) {
      units.push_back(model.back());
      if (part.pp > 1 && !m.llama()) units.push_back(vocab_rows * m.C);  // the last stage's copy of the tied embedding
    }
  }
  return units;
}

int64_t llama_kv_heads_per_rank(const ModelConfig& m, int tp) {
  return m.kv_heads >= tp ? m.kv_heads / tp : 1;
}

std::vector<int64_t> llama_unit_params(const ModelConfig& m, int tp) {
  const int64_t C = m.C, t = tp, F = m.ffn, hs = m.head_size(), kv = llama_kv_heads_per_rank(m, tp) * hs;
  const int64_t vocab_rows = (int64_t(m.V) + t - 1) / t;
  std::vector<int64_t> u;
  u.push_back(vocab_rows * C);  // embed_tokens (vocabulary-parallel)
  for (int l = 0; l < m.L; ++l) {
    // two RMSNorm weights (replicated), q and o (C x C/t each), k and v
    // (C x kv each, kv = the rank's kv heads x head size), the MLP
    int64_t block = 2 * C + 2 * C * C / t + 2 * C * kv;
    if (m.is_moe(l))
      block += int64_t(m.moe.experts) * (3 * C * F / t) + int64_t(m.moe.experts) * C;  // experts and router
    else
      block += 3 * C * F / t;  // gate, up, down
    u.push_back(block);
  }
  u.push_back(C + vocab_rows * C);  // model.norm and the untied lm_head (vocabulary-parallel)
  return u;
}

int64_t llama_replicated_params(const ModelConfig& m, int64_t layers, bool head) {
  return 2 * int64_t(m.C) * layers + (head ? m.C : 0);
}

int max_chunk_layers(const pipeline::Partition& part, int rank) {
  int n = 0;
  for (int c = 0; c < part.v; ++c) n = std::max(n, part.at(rank, c).num_blocks);
  return n;
}

Flops iteration_flops(const ModelConfig& m, int64_t B, int64_t s, Recompute r) {
  return stage_flops(m, B, s, r, m.L, true, m.moe_layers());
}

// The attention core's 12Bs^2h per block (no recomputation) or 16Bs^2h is
// attention_core_flops'; the rest is dense (72 or 96 Bsh^2 per block) and
// the head's logits (6BshV).
Flops stage_flops(const ModelConfig& m, int64_t B, int64_t s, Recompute r, int64_t blocks, bool head,
                  int64_t moe_blocks) {
  if (m.llama()) {
    // Per token and block, forward: q and o 2h^2 each, k and v 2h*kvd each
    // (kvd = kv_heads x head size), gate, up and down 2hF each; an MoE
    // block's MLP is its top_k experts (6hF each) and the router (2hE).
    const u128 b = u128(B), S = u128(s), l = u128(blocks), h = u128(m.C), V = head ? u128(m.V) : 0;
    const u128 kvd = u128(m.kv_heads) * u128(m.head_size()), F = u128(m.ffn);
    const u128 moe = u128(moe_blocks);
    const u128 dense_fwd = b * S * (l * (4 * h * h + 4 * h * kvd) + (l - moe) * 6 * h * F);
    const u128 moe_fwd = b * S * moe * (u128(m.moe.top_k) * 6 * h * F + 2 * h * u128(m.moe.experts));
    const u128 core = attention_core_flops(m, B, s, Recompute::none, blocks),
               core_hw = attention_core_flops(m, B, s, r, blocks);
    const u128 logits = b * S * h * V;
    Flops f;
    f.model = 3 * (dense_fwd + moe_fwd) + core + 6 * logits;
    f.hardware = (r == Recompute::full ? 4 : 3) * (dense_fwd + moe_fwd) + core_hw + 6 * logits;
    return f;
  }
  const u128 b = u128(B), S = u128(s), l = u128(blocks), h = u128(m.C), V = head ? u128(m.V) : 0;
  const u128 dense = b * S * l * h * h, logits = b * S * h * V;
  const u128 core = attention_core_flops(m, B, s, Recompute::none, blocks),
             core_hw = attention_core_flops(m, B, s, r, blocks);
  // Per token of an MoE block, forward: (k - 1) more MLPs (16 h^2 each) and
  // the router (2 h E); training runs three forwards' worth, four with full
  // recomputation.
  const u128 moe_fwd = moe_blocks > 0 ? b * S * u128(moe_blocks) *
                                            (16 * u128(m.moe.top_k - 1) * h * h + 2 * h * u128(m.moe.experts))
                                      : 0;
  Flops f;
  f.model = 72 * dense + core + 6 * logits + 3 * moe_fwd;
  f.hardware =
      (r == Recompute::full ? 96 : 72) * dense + core_hw + 6 * logits + (r == Recompute::full ? 4 : 3) * moe_fwd;
  return f;
}

u128 attention_core_flops(const ModelConfig& m, int64_t B, int64_t s, Recompute r, int64_t blocks) {
  const u128 attn = u128(B) * u128(s) * u128(s) * u128(blocks) * u128(m.C);
  return (r == Recompute::none ? 12 : 16) * attn;
}

double to_double(u128 x) {
  return double(uint64_t(x >> 64)) * 18446744073709551616.0 + double(uint64_t(x));
}

std::vector<GemmShape> rank_gemms(const ModelConfig& m, int64_t b, int64_t s, int tp, int cp, bool attention_core,
                                  int ep) {
  const int64_t t = tp, N = b * s / cp, C = m.C, hs = m.C / m.NH, q = s / cp;
  std::vector<GemmShape> out;
  auto linear_rows = [&](int64_t rows, int64_t in, int64_t o, double count) {  // y = x W^T, W stored o x in
    out.push_back({rows, o, in, false, true, count});                          // forward
    out.push_back({rows, in, o, false, false, count});                         // dx = dy W
    out.push_back({o, in, rows, true, false, count});                          // dW = dy^T x
  };
  auto linear = [&](int64_t in, int64_t o, double count) { linear_rows(N, in, o, count); };
  const double L = m.L, heads = double(b) * double(m.NH / t) * m.L, moe = m.moe_layers();
  if (m.llama()) {  // q|k|v (kv heads per rank), o, gate|up, down; the experts' SwiGLU; the untied head
    const int64_t F = m.ffn, kv = llama_kv_heads_per_rank(m, tp) * hs;
    linear(C, C / t + 2 * kv, L);
    linear(C / t, C, L);
    linear(C, 2 * F / t, L - moe);
    linear(F / t, C, L - moe);
    if (moe > 0) {
      const double E = m.moe.experts, rows = double(N) * m.moe.top_k * ep / E;
      const int64_t r = std::max<int64_t>(1, std::llround(rows));
      const double experts = moe * E / ep * rows / double(r);
      linear(C, m.moe.experts, moe / double(t));
      linear_rows(r, C, 2 * F / t, experts);
      linear_rows(r, F / t, C, experts);
    }
  } else {
  linear(C, 3 * C / t, L);
  linear(C / t, C, L);
  linear(C, 4 * C / t, L - moe);
  linear(4 * C / t, C, L - moe);
  if (moe > 0) {
    const double E = m.moe.experts, rows = double(N) * m.moe.top_k * ep / E;
    const int64_t r = std::max<int64_t>(1, std::llround(rows));
    const double experts = moe * E / ep * rows / double(r);  // exact FLOPs at the rounded rows
    linear(C, m.moe.experts, moe / double(t));               // the router (each tp rank runs it whole: its share)
    linear_rows(r, C, 4 * C / t, experts);
    linear_rows(r, 4 * C / t, C, experts);
  }
  }
  linear(C, (m.V + t - 1) / t, 1);
  if (!attention_core) return out;
  const double batch = double(b) * double(m.NH / t);  // one batched call per layer and microbatch
  out.push_back({q, s, hs, false, true, 2 * heads, batch});   // S = Q K^T; dP = dO V^T
  out.push_back({q, hs, s, false, false, 2 * heads, batch});  // O = P V; dQ = dS K
  out.push_back({s, hs, q, true, false, 2 * heads, batch});   // dV = P^T dO; dK = dS^T Q
  return out;
}

double modeled_gemm_gflops(double achievable_tflops, int64_t units, int64_t tile_m, int64_t tile_n,
                           const GemmShape& g, double mem_bw_GBps, int64_t elem_bytes) {
  double used = 1;
  if (units > 0 && tile_m > 0 && tile_n > 0) {
    const double tm = double((g.m + tile_m - 1) / tile_m), tn = double((g.n + tile_n - 1) / tile_n);
    const double tiles = tm * tn * std::max(1.0, g.batch);
    const double waves = std::ceil(tiles / double(units));
    used = double(g.m) * double(g.n) * std::max(1.0, g.batch) / (waves * double(units) * double(tile_m * tile_n));
  }
  const double tiled = achievable_tflops * 1e3 * std::min(1.0, used);
  if (!(mem_bw_GBps > 0)) return tiled;
  const double m = double(g.m), n = double(g.n), k = double(g.k);
  const double flops_per_byte = 2 * m * n * k / (double(elem_bytes) * (m * k + k * n + m * n));
  return std::min(tiled, flops_per_byte * mem_bw_GBps);
}

int64_t llama_layer_activation_bytes(const ModelConfig& m, const ActivationShape& x, Recompute r) {
  const int64_t t = x.tp, e = x.elem_bytes, sl = x.s / x.cp, tokens = sl * x.b;
  if (r == Recompute::full) return e * tokens * x.h / (x.sp ? t : 1);  // the block's input only
  const int64_t kv = llama_kv_heads_per_rank(m, x.tp) * m.head_size(), F = m.ffn;
  // Per local token: the two RMSNorms' inputs and outputs (4h, replicated
  // over tp unless sp), q (h/t) and k, v after RoPE (2kv), o's input (h/t),
  // gate and up outputs (2F/t), down's input (F/t); the scores' softmax
  // output a/t x s unless selective recomputation drops it.
  const int64_t replicated = 4 * x.h / (x.sp ? t : 1);
  const int64_t split = 2 * x.h / t + 2 * kv + 3 * F / t;
  const int64_t scores = r == Recompute::selective ? 0 : x.a / t * x.s;
  return e * tokens * (replicated + split + scores);
}

int64_t llama_layer_traffic_bytes(const ModelConfig& m, const ActivationShape& x) {
  const int64_t t = x.tp, tokens = x.s / x.cp * x.b;
  const int64_t kv = llama_kv_heads_per_rank(m, x.tp) * m.head_size(), F = m.ffn;
  // Forward per local token: RoPE reads and writes q and k (2(h/t + kv)),
  // SwiGLU reads gate and up and writes their product (3F/t; SiLU and the
  // product as one kernel), the softmax 2as/t; backward twice the forward.
  const int64_t split = 2 * (x.h / t + kv) + 3 * F / t + 2 * x.a * x.s / t;
  return layer_shared_traffic_bytes(x) + 3 * split * tokens * x.elem_bytes;
}

namespace {
// One eager RMSNorm's bytes per element forward (llama_layer_eager_traffic_bytes).
int64_t eager_norm_bytes(int64_t e, bool fused_norm) {
  return fused_norm ? 2 * e : (e + 4) + 8 + 4 + 8 + (4 + e) + 2 * e;
}
}  // namespace

int64_t llama_layer_eager_traffic_bytes(const ModelConfig& m, const ActivationShape& x, bool fused_norm) {
  const int64_t t = x.tp, tokens = x.s / x.cp * x.b, e = x.elem_bytes;
  const int64_t kv = llama_kv_heads_per_rank(m, x.tp) * m.head_size(), F = m.ffn, q = x.h / t;
  const int64_t hn = x.sp ? x.h / t : x.h;  // what the norms and adds see
  const int64_t norm = eager_norm_bytes(e, fused_norm);
  const int64_t fwd = 2 * norm * hn + 2 * 3 * e * hn + (16 + 2 * e) * (q + kv) + (kv < q ? 2 * e * (kv + q) : 0) +
                      2 * e * q + 5 * e * F / t + 2 * x.a * x.s / t * e;
  return 3 * fwd * tokens;
}

int64_t head_eager_traffic_bytes(const ActivationShape& x, int64_t vocab, bool fused_norm) {
  const int64_t tokens = x.s / x.cp * x.b, e = x.elem_bytes;
  const int64_t norm = eager_norm_bytes(e, fused_norm), hn = x.sp ? x.h / x.tp : x.h;
  const int64_t v = (vocab + x.tp - 1) / x.tp;
  return (3 * norm * hn + ((e + 4) + 8 + 4 + 12 + (4 + e)) * v) * tokens;
}

int64_t first_stage_extra_bytes(const ActivationShape& x) {
  const int64_t sbh = x.s / x.cp * x.b * x.h;
  return x.dropout ? (x.sp ? sbh / x.tp : sbh) : 0;
}

int64_t last_stage_extra_bytes(const ActivationShape& x, int64_t vocab) {
  const int64_t sl = x.s / x.cp, sbh = sl * x.b * x.h, e = x.elem_bytes;
  const int64_t inputs = x.sp ? 2 * e * sbh / x.tp : 2 * e * sbh;
  const int64_t logits = std::max<int64_t>(4, e) * sl * x.b * ((vocab + x.tp - 1) / x.tp);
  return inputs + logits;
}

int64_t last_stage_eager_extra_bytes(const ActivationShape& x, int64_t vocab) {
  const int64_t tokens = x.s / x.cp * x.b, e = x.elem_bytes;
  const int64_t hn = x.sp ? x.h / x.tp : x.h, v = (vocab + x.tp - 1) / x.tp;
  const int64_t norm = (4 + e) * hn + e * x.h;  // fp32 input and normed output; the head's input (gathered over sp)
  const int64_t loss = std::max<int64_t>(12, e + 8) * v;
  return tokens * (norm + loss);
}

int64_t layer_shared_traffic_bytes(const ActivationShape& x) {
  const int64_t tokens = x.s / x.cp * x.b, hn = x.sp ? x.h / x.tp : x.h;
  // 2 LayerNorms, 2 residual adds; with dropout each bias-dropout-add writes
  // its 1-byte mask forward and reads it backward.
  return (3 * 10 * hn * x.elem_bytes + (x.dropout ? 2 * 2 * hn : 0)) * tokens;
}

int64_t layer_shared_forward_traffic_bytes(const ActivationShape& x) {
  const int64_t tokens = x.s / x.cp * x.b, hn = x.sp ? x.h / x.tp : x.h;
  return (10 * hn * x.elem_bytes + (x.dropout ? 2 * hn : 0)) * tokens;
}

int64_t layer_traffic_bytes(const ActivationShape& x) {
  const int64_t tokens = x.s / x.cp * x.b;
  return layer_shared_traffic_bytes(x) + 3 * (8 * x.h / x.tp) * tokens * x.elem_bytes +  // GELU
         layer_softmax_traffic_bytes(x);
}

int64_t layer_forward_traffic_bytes(const ActivationShape& x) {
  const int64_t tokens = x.s / x.cp * x.b;
  return layer_shared_forward_traffic_bytes(x) + (8 * x.h / x.tp) * tokens * x.elem_bytes +
         layer_softmax_forward_traffic_bytes(x);
}

int64_t moe_layer_extra_traffic_bytes(const ActivationShape& x, const MoeConfig& moe) {
  const int64_t k = moe.top_k, tokens = x.s / x.cp * x.b;
  const int64_t fwd = 8 * x.h * (k - 1) / x.tp + 2 * k * x.h + (k + 1) * x.h + k + 2 * int64_t(moe.experts);
  return 3 * fwd * tokens * x.elem_bytes;
}

int64_t layer_softmax_traffic_bytes(const ActivationShape& x) {
  // Per score: the softmax reads and writes it (2e), its backward twice that;
  // dropout (torch.nn.Dropout on CUDA: fused_dropout) reads it and writes it
  // with a 1-byte mask, its backward reads the gradient and the mask and
  // writes the gradient.
  const int64_t e = x.elem_bytes, dropout = x.dropout ? (2 * e + 1) + (2 * e + 1) : 0;
  return (x.a * x.s / x.tp) * (x.s / x.cp * x.b) * (3 * 2 * e + dropout);
}

int64_t layer_softmax_forward_traffic_bytes(const ActivationShape& x) {
  const int64_t e = x.elem_bytes;
  return (x.a * x.s / x.tp) * (x.s / x.cp * x.b) * (2 * e + (x.dropout ? 2 * e + 1 : 0));
}

int64_t head_traffic_bytes(const ActivationShape& x, int64_t vocab) {
  const int64_t tokens = x.s / x.cp * x.b, ln = x.sp ? 6 * x.h / x.tp : 6 * x.h;
  return (ln + 4 * ((vocab + x.tp - 1) / x.tp)) * tokens * x.elem_bytes;
}

int64_t head_megatron_traffic_bytes(const ActivationShape& x, int64_t vocab) {
  const int64_t tokens = x.s / x.cp * x.b, ln = x.sp ? 6 * x.h / x.tp : 6 * x.h, e = x.elem_bytes;
  const int64_t forward = (e + 4) + 4 + 8 + 8 + 4 + 8, backward = 8 + (4 + e);
  return (ln * e + (forward + backward) * ((vocab + x.tp - 1) / x.tp)) * tokens;
}

int64_t megatron_batch_traffic_bytes(int64_t b, int64_t s, bool head) {
  return 17 * s * s + 36 * b * s + 8 * s + (head ? 20 * b * s : 0);
}

int64_t head_flash_xentropy_traffic_bytes(const ActivationShape& x, int64_t vocab, bool train_metrics) {
  const int64_t tokens = x.s / x.cp * x.b, ln = x.sp ? 6 * x.h / x.tp : 6 * x.h, e = x.elem_bytes;
  const int64_t kernel = e + 2 * e, metrics = train_metrics ? 2 * ((e + 4) + 8) : 0;
  return (ln * e + (kernel + metrics) * ((vocab + x.tp - 1) / x.tp)) * tokens;
}

int64_t embedding_traffic_bytes(const ActivationShape& x) {
  const int64_t tokens = x.s / x.cp * x.b, hn = x.sp ? x.h / x.tp : x.h, e = x.elem_bytes;
  // With dropout its output goes through one more kernel: read, write and a
  // 1-byte mask forward; gradient and mask read, gradient written backward.
  return (5 * hn * e + (x.dropout ? 2 * (2 * e + 1) * hn : 0)) * tokens;
}

int64_t layer_norm_traffic_bytes(const ActivationShape& x) {
  return 3 * layer_norm_forward_traffic_bytes(x);
}

int64_t layer_norm_forward_traffic_bytes(const ActivationShape& x) {
  const int64_t tokens = x.s / x.cp * x.b, hn = x.sp ? x.h / x.tp : x.h;
  return 2 * 2 * hn * x.elem_bytes * tokens;
}

int64_t llama_layer_eager_norm_traffic_bytes(const ActivationShape& x, bool fused_norm) {
  const int64_t tokens = x.s / x.cp * x.b, hn = x.sp ? x.h / x.tp : x.h;
  return 3 * 2 * eager_norm_bytes(x.elem_bytes, fused_norm) * hn * tokens;
}

int64_t head_norm_traffic_bytes(const ActivationShape& x) {
  const int64_t tokens = x.s / x.cp * x.b, hn = x.sp ? x.h / x.tp : x.h;
  return 6 * hn * x.elem_bytes * tokens;
}

int64_t head_eager_norm_traffic_bytes(const ActivationShape& x, bool fused_norm) {
  const int64_t tokens = x.s / x.cp * x.b, hn = x.sp ? x.h / x.tp : x.h;
  return 3 * eager_norm_bytes(x.elem_bytes, fused_norm) * hn * tokens;
}

int64_t scores_softmax_traffic_bytes(const ActivationShape& x) {
  return 3 * scores_softmax_forward_traffic_bytes(x);
}

int64_t scores_softmax_forward_traffic_bytes(const ActivationShape& x) {
  return (x.a * x.s / x.tp) * (x.s / x.cp * x.b) * 2 * x.elem_bytes;
}

}  // namespace pb::planner
