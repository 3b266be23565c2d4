// The flat parameter vector of the canonical GPT and its GPT-2 names (the
// llama family: Hugging Face Llama's names and order, docs/models.md).
// Invariant: parameters are laid out in units that are contiguous ranges —
// unit 0 the embeddings (wte, wpe; llama: embed_tokens), unit 1+i block i,
// unit L+1 the final LayerNorm (llama: model.norm, then the untied lm_head) — so a strategy that shards, gathers or pipelines by unit works on
// plain [begin, end) ranges of one vector, and the offsets of a block's tensors
// relative to its unit's start are the same for every block.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "reference/model_config.h"

namespace pb {

enum class InitKind : uint8_t { normal, zeros, ones };

// Where a tensor-parallel shard's elements sit in the full tensor (rows x
// cols, 1-D tensors as one column): local row i is full row
// row_starts[i / rows_per_block] + i % rows_per_block (rows past full_rows are
// vocabulary padding), local column j is full column col0 + j.
struct TpSlice {
  std::vector<int64_t> row_starts{0};
  int64_t rows_per_block = 0, col0 = 0, full_rows = 0, full_cols = 1;
};

struct ParamInfo {
  std::string name;            // GPT-2 name, e.g. "h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;  // Linear layout (out, in) for matrices; a tp shard's local shape
  int64_t offset = 0;          // in the flat vector
  int64_t numel = 0;
  int unit = 0;
  bool decay = false;          // AdamW weight decay: matrices only
  InitKind init = InitKind::zeros;
  double init_std = 0.0;
  // Tensor parallel: the same full tensor on every tp rank (LayerNorms,
  // row-parallel biases, wpe) or a slice of it (split).
  bool replicated = true;
  TpSlice slice;
  // Index of local element i in the full tensor, or -1 for vocabulary padding.
  int64_t full_index(int64_t i) const;
  int64_t full_numel() const { return slice.full_rows * slice.full_cols; }
};

// Offsets of one block's tensors relative to the start of its unit (an MoE
// block has the same ones up to ln2; its MLP is MoeOffsets'). The llama
// family: ln1_w input_layernorm, qkv_w q_proj with k_proj and v_proj after it
// (the fused (C + 2*KVH*hs, C) rows), attproj_w o_proj, ln2_w
// post_attention_layernorm, fc_w gate_proj with up_proj after it (the fused
// (2F, C) rows), fcproj_w down_proj; no biases (their offsets -1).
struct BlockOffsets {
  int64_t ln1_w, ln1_b, qkv_w, qkv_b, attproj_w, attproj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w,
      fcproj_b, size;
};

// An MoE block's MLP, relative to its unit's start: the router (E, C), then
// expert e's c_fc.weight (4C, C), c_fc.bias (4C), c_proj.weight (C, 4C),
// c_proj.bias (C) at expert0 + e * expert_size + fc_w / fc_b / ... — each
// expert a contiguous range, so expert parallel shards experts by ranges.
// The llama family (Mixtral): fc_w is w1 (gate) with w3 (up) after it, the
// fused (2F, C) rows; fcproj_w w2 (down); no biases (their offsets -1).
struct MoeOffsets {
  int64_t router_w = 0, expert0 = 0, expert_size = 0, fc_w = 0, fc_b = 0, fcproj_w = 0, fcproj_b = 0, size = 0;
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& m);
  // Tensor-parallel rank `tp_rank` of `tp` (Megatron): QKV and MLP-up split
  // by output rows (heads), attention-out and MLP-down by input columns, the
  // token embedding by vocabulary rows (padded to a multiple of tp, the
  // padding rows zero), LayerNorms, row-parallel biases and wpe replicated.
  // tp = 1 is the full layout. InputError naming both numbers when heads or
  // channels do not divide.
  ParamLayout(const ModelConfig& m, int tp, int tp_rank);

  const ModelConfig& model() const { return m_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  int64_t total() const { return total_; }
  int num_units() const { return int(unit_begin_.size()) - 1; }
  int64_t unit_begin(int u) const { return unit_begin_[u]; }
  int64_t unit_end(int u) const { return unit_begin_[u + 1]; }
  int64_t unit_size(int u) const { return unit_end(u) - unit_begin(u); }
  int block_unit(int layer) const { return 1 + layer; }
  int final_unit() const { return m_.L + 1; }
  const BlockOffsets& block() const { return block_; }
  const MoeOffsets& moe_block() const { return moe_; }  // model().is_moe(layer) blocks
  int64_t wte_offset() const { return 0; }
  int64_t wpe_offset() const { return vocab_rows_ * m_.C; }
  int tp() const { return tp_; }
  int tp_rank() const { return tp_rank_; }
  // Rows of the (local) token embedding, its first full vocabulary row, and
  // the padded vocabulary (a multiple of tp).
  int64_t vocab_rows() const { return vocab_rows_; }
  int64_t vocab_begin() const { return vocab_rows_ * tp_rank_; }
  int64_t padded_vocab() const { return vocab_rows_ * tp_; }
  int64_t lnf_w_offset() const { return unit_begin(final_unit()); }
  // The llama family's untied LM head (V, C), after model.norm in the final unit.
  int64_t lm_head_offset() const { return unit_begin(final_unit()) + m_.C; }
  int64_t lnf_b_offset() const { return unit_begin(final_unit()) + m_.C; }
  const ParamInfo* find(const std::string& name) const;
  // Flat ranges (merged, in order) of the tensor-parallel replicated
  // parameters; empty at tp = 1, where nothing is split.
  std::vector<std::pair<int64_t, int64_t>> replicated_ranges() const;

  // Calls f(begin, end, decay) for the maximal runs of [lo, hi) with equal decay.
  template <class F> void for_each_decay_run(int64_t lo, int64_t hi, F&& f) const {
    for (const auto& p : params_) {
      int64_t b = std::max(lo, p.offset), e = std::min(hi, p.offset + p.numel);
      if (b < e) f(b, e, p.decay);
    }
  }

 private:
  void add_llama();  // the llama family's tensors (tp = 1)
  void add(std::string name, std::vector<int64_t> shape, int unit, InitKind init, double std,
           TpSlice slice = {}, bool replicated = true);
  ModelConfig m_;
  int tp_ = 1, tp_rank_ = 0;
  int64_t vocab_rows_ = 0;
  std::vector<ParamInfo> params_;
  std::vector<int64_t> unit_begin_;
  BlockOffsets block_{};
  MoeOffsets moe_{};
  int64_t total_ = 0;
};

}  // namespace pb
