#include "reference/layout.h"

#include <cmath>

#include "harness/status.h"

namespace pb {

int64_t ParamInfo::full_index(int64_t i) const {
  const int64_t cols = shape.size() >= 2 ? shape[1] : 1;
  const int64_t r = i / cols, c = i % cols;
  const int64_t row = slice.row_starts[size_t(r / slice.rows_per_block)] + r % slice.rows_per_block;
  if (row >= slice.full_rows) return -1;
  return row * slice.full_cols + slice.col0 + c;
}

void ParamLayout::add(std::string name, std::vector<int64_t> shape, int unit, InitKind init,
                      double std, TpSlice slice, bool replicated) {
  ParamInfo p;
  p.name = std::move(name);
  p.numel = 1;
  for (auto d : shape) p.numel *= d;
  if (slice.rows_per_block == 0) {  // the whole tensor
    slice.rows_per_block = shape[0];
    slice.full_rows = shape[0];
    slice.full_cols = shape.size() >= 2 ? shape[1] : 1;
  }
  p.slice = std::move(slice);
  p.replicated = replicated;
  p.shape = std::move(shape);
  p.offset = total_;
  p.unit = unit;
  p.decay = p.shape.size() >= 2;
  p.init = init;
  p.init_std = std;
  total_ += p.numel;
  params_.push_back(std::move(p));
}

namespace {
// Column-parallel (split output rows): `blocks` row blocks of `rows` full
// rows each, rank r's part of every block. Row-parallel (split input
// columns): every row, columns [r*cols, (r+1)*cols) of full_cols.
TpSlice column_slice(int64_t blocks, int64_t rows, int64_t cols, int64_t r, int64_t t) {
  TpSlice s;
  s.row_starts.clear();
  for (int64_t b = 0; b < blocks; ++b) s.row_starts.push_back(b * rows + r * (rows / t));
  s.rows_per_block = rows / t;
  s.full_rows = blocks * rows;
  s.full_cols = cols;
  return s;
}
TpSlice row_slice(int64_t rows, int64_t full_cols, int64_t r, int64_t t) {
  TpSlice s;
  s.rows_per_block = rows;
  s.full_rows = rows;
  s.col0 = r * (full_cols / t);
  s.full_cols = full_cols;
  return s;
}
}  // namespace

ParamLayout::ParamLayout(const ModelConfig& m) : ParamLayout(m, 1, 0) {}

ParamLayout::ParamLayout(const ModelConfig& m, int tp, int r) : m_(m), tp_(tp), tp_rank_(r) {
  m.validate();
  require(tp >= 1 && r >= 0 && r < tp, "tp: rank " + std::to_string(r) + " of " + std::to_string(tp));
  require(m.NH % tp == 0, "mesh.tp: tp" + std::to_string(tp) + " must divide model.heads (" +
                              std::to_string(m.NH) + " heads; " + std::to_string(m.NH) + " % " +
                              std::to_string(tp) + " != 0)");
  const int64_t C = m.C, V = m.V, T = m.maxT, t = tp;
  vocab_rows_ = (V + t - 1) / t;  // Megatron's make-vocab-size-divisible-by = tp
  if (m.llama()) {
    require(m.ffn % tp == 0, "mesh.tp: tp" + std::to_string(tp) + " must divide model.ffn (" +
                                 std::to_string(m.ffn) + " % " + std::to_string(tp) + " != 0)");
    require(m.kv_heads % tp == 0 || tp % m.kv_heads == 0,
            "mesh.tp: tp" + std::to_string(tp) + " and model.kv_heads (" + std::to_string(m.kv_heads) +
                ") must divide one another (kv heads split over tp, or replicated when fewer than tp)");
    add_llama();
    return;
  }
  const int64_t Ct = C / t;
  auto column = [&](int64_t blocks, int64_t rows, int64_t cols) { return column_slice(blocks, rows, cols, r, t); };
  auto row = [&](int64_t rows, int64_t full_cols) { return row_slice(rows, full_cols, r, t); };
  const bool split = tp > 1;
  // GPT-2 init: normal(0, 0.02); residual projections 0.02/sqrt(2L); zero biases; unit LN.
  const double std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * m.L);
  unit_begin_.push_back(0);
  TpSlice vocab;
  vocab.row_starts = {vocab_rows_ * r};
  vocab.rows_per_block = vocab_rows_;
  vocab.full_rows = V;
  vocab.full_cols = C;
  add("wte", {vocab_rows_, C}, 0, InitKind::normal, std, vocab, !split);
  add("wpe", {T, C}, 0, InitKind::normal, std);
  for (int l = 0; l < m.L; ++l) {
    int u = 1 + l;
    unit_begin_.push_back(total_);
    int64_t base = total_;
    std::string h = "h." + std::to_string(l) + ".";
    auto rel = [&] { return total_ - base; };
    block_.ln1_w = rel(); add(h + "ln_1.weight", {C}, u, InitKind::ones, 0);
    block_.ln1_b = rel(); add(h + "ln_1.bias", {C}, u, InitKind::zeros, 0);
    block_.qkv_w = rel();
    add(h + "attn.c_attn.weight", {3 * Ct, C}, u, InitKind::normal, std, column(3, C, C), !split);
    block_.qkv_b = rel();
    add(h + "attn.c_attn.bias", {3 * Ct}, u, InitKind::zeros, 0, column(3, C, 1), !split);
    block_.attproj_w = rel();
    add(h + "attn.c_proj.weight", {C, Ct}, u, InitKind::normal, proj_std, row(C, C), !split);
    block_.attproj_b = rel(); add(h + "attn.c_proj.bias", {C}, u, InitKind::zeros, 0);
    block_.ln2_w = rel(); add(h + "ln_2.weight", {C}, u, InitKind::ones, 0);
    block_.ln2_b = rel(); add(h + "ln_2.bias", {C}, u, InitKind::zeros, 0);
    if (m.is_moe(l)) {
      const int64_t E = m.moe.experts;
      moe_.router_w = rel();
      add(h + "mlp.router.weight", {E, C}, u, InitKind::normal, std);
      moe_.expert0 = rel();
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = h + "mlp.experts." + std::to_string(e) + ".";
        const int64_t start = rel();
        // Tensor parallel: split like the dense MLP (router and c_proj's bias replicated).
        moe_.fc_w = rel() - start;
        add(x + "c_fc.weight", {4 * Ct, C}, u, InitKind::normal, std, column(1, 4 * C, C), !split);
        moe_.fc_b = rel() - start;
        add(x + "c_fc.bias", {4 * Ct}, u, InitKind::zeros, 0, column(1, 4 * C, 1), !split);
        moe_.fcproj_w = rel() - start;
        add(x + "c_proj.weight", {C, 4 * Ct}, u, InitKind::normal, proj_std, row(C, 4 * C), !split);
        moe_.fcproj_b = rel() - start; add(x + "c_proj.bias", {C}, u, InitKind::zeros, 0);
        moe_.expert_size = rel() - start;
      }
      moe_.size = rel();
      continue;
    }
    block_.fc_w = rel();
    add(h + "mlp.c_fc.weight", {4 * Ct, C}, u, InitKind::normal, std, column(1, 4 * C, C), !split);
    block_.fc_b = rel();
    add(h + "mlp.c_fc.bias", {4 * Ct}, u, InitKind::zeros, 0, column(1, 4 * C, 1), !split);
    block_.fcproj_w = rel();
    add(h + "mlp.c_proj.weight", {C, 4 * Ct}, u, InitKind::normal, proj_std, row(C, 4 * C), !split);
    block_.fcproj_b = rel(); add(h + "mlp.c_proj.bias", {C}, u, InitKind::zeros, 0);
    block_.size = rel();
  }
  unit_begin_.push_back(total_);
  add("ln_f.weight", {C}, m.L + 1, InitKind::ones, 0);
  add("ln_f.bias", {C}, m.L + 1, InitKind::zeros, 0);
  unit_begin_.push_back(total_);
}

// Hugging Face LlamaForCausalLM's names and order; normal(0, 0.02) for every
// matrix (its initializer_range, no depth scaling), unit RMSNorm weights.
// Tensor parallel (docs/strategies/tensor-parallel.md): q_proj by heads,
// k_proj and v_proj by kv heads when tp divides them and whole on every rank
// (replicated) when there are fewer kv heads than tp, gate_proj and up_proj
// by the same rows (column-parallel), o_proj and down_proj by input columns
// (row-parallel), embed_tokens and lm_head by vocabulary rows (padded to a
// multiple of tp), the RMSNorm weights replicated.
void ParamLayout::add_llama() {
  const ModelConfig& m = m_;
  const int64_t C = m.C, V = m.V, kvC = int64_t(m.kv_heads) * m.head_size(), F = m.ffn, t = tp_, r = tp_rank_;
  const bool split = tp_ > 1, kv_split = split && m.kv_heads % tp_ == 0;
  const double std = 0.02;
  TpSlice vocab;
  vocab.row_starts = {vocab_rows_ * r};
  vocab.rows_per_block = vocab_rows_;
  vocab.full_rows = V;
  vocab.full_cols = C;
  auto column = [&](int64_t rows) { return column_slice(1, rows, C, r, t); };
  unit_begin_.push_back(0);
  add("model.embed_tokens.weight", {vocab_rows_, C}, 0, InitKind::normal, std, vocab, !split);
  block_ = {};
  block_.ln1_b = block_.qkv_b = block_.attproj_b = block_.ln2_b = block_.fc_b = block_.fcproj_b = -1;
  const int64_t kvr = kv_split ? kvC / t : kvC;
  for (int l = 0; l < m.L; ++l) {
    const int u = 1 + l;
    unit_begin_.push_back(total_);
    const int64_t base = total_;
    const std::string h = "model.layers." + std::to_string(l) + ".";
    auto rel = [&] { return total_ - base; };
    block_.ln1_w = rel(); add(h + "input_layernorm.weight", {C}, u, InitKind::ones, 0);
    block_.qkv_w = rel();
    add(h + "self_attn.q_proj.weight", {C / t, C}, u, InitKind::normal, std, column(C), !split);
    add(h + "self_attn.k_proj.weight", {kvr, C}, u, InitKind::normal, std, kv_split ? column(kvC) : TpSlice{},
        !kv_split);
    add(h + "self_attn.v_proj.weight", {kvr, C}, u, InitKind::normal, std, kv_split ? column(kvC) : TpSlice{},
        !kv_split);
    block_.attproj_w = rel();
    add(h + "self_attn.o_proj.weight", {C, C / t}, u, InitKind::normal, std, row_slice(C, C, r, t), !split);
    block_.ln2_w = rel(); add(h + "post_attention_layernorm.weight", {C}, u, InitKind::ones, 0);
    if (m.is_moe(l)) {
      // Mixtral's names (Hugging Face MixtralForCausalLM): the router
      // block_sparse_moe.gate, expert e's w1 (gate), w3 (up), w2 (down),
      // laid out w1, w3, w2 so gate|up is one (2F, C) projection. Tensor
      // parallel: each expert split like the dense MLP (w1 and w3 by the same
      // rows, w2 by input columns), the router replicated.
      const int64_t E = m.moe.experts;
      const std::string b = h + "block_sparse_moe.";
      moe_ = {};
      moe_.fc_b = moe_.fcproj_b = -1;
      moe_.router_w = rel();
      add(b + "gate.weight", {E, C}, u, InitKind::normal, std);
      moe_.expert0 = rel();
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = b + "experts." + std::to_string(e) + ".";
        const int64_t start = rel();
        moe_.fc_w = rel() - start;
        add(x + "w1.weight", {F / t, C}, u, InitKind::normal, std, column(F), !split);
        add(x + "w3.weight", {F / t, C}, u, InitKind::normal, std, column(F), !split);
        moe_.fcproj_w = rel() - start;
        add(x + "w2.weight", {C, F / t}, u, InitKind::normal, std, row_slice(C, F, r, t), !split);
        moe_.expert_size = rel() - start;
      }
      moe_.size = rel();
      continue;
    }
    block_.fc_w = rel();
    add(h + "mlp.gate_proj.weight", {F / t, C}, u, InitKind::normal, std, column(F), !split);
    add(h + "mlp.up_proj.weight", {F / t, C}, u, InitKind::normal, std, column(F), !split);
    block_.fcproj_w = rel();
    add(h + "mlp.down_proj.weight", {C, F / t}, u, InitKind::normal, std, row_slice(C, F, r, t), !split);
    block_.size = rel();
  }
  unit_begin_.push_back(total_);
  add("model.norm.weight", {C}, m.L + 1, InitKind::ones, 0);
  add("lm_head.weight", {vocab_rows_, C}, m.L + 1, InitKind::normal, std, vocab, !split);
  unit_begin_.push_back(total_);
}

std::vector<std::pair<int64_t, int64_t>> ParamLayout::replicated_ranges() const {
  std::vector<std::pair<int64_t, int64_t>> r;
  if (tp_ == 1) return r;
  for (const auto& p : params_) {
    if (!p.replicated) continue;
    if (!r.empty() && r.back().second == p.offset) r.back().second += p.numel;
    else r.push_back({p.offset, p.offset + p.numel});
  }
  return r;
}

const ParamInfo* ParamLayout::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace pb
