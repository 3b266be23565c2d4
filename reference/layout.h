// The flat parameter vector of the canonical GPT and its GPT-2 names.
// Invariant: parameters are laid out in units that are contiguous ranges —
// unit 0 the embeddings (wte, wpe), unit 1+i block i, unit L+1 the final
// LayerNorm — so a strategy that shards, gathers or pipelines by unit works on
// plain [begin, end) ranges of one vector, and the offsets of a block's tensors
// relative to its unit's start are the same for every block.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "reference/model_config.h"

namespace pb {

enum class InitKind : uint8_t { normal, zeros, ones };

struct ParamInfo {
  std::string name;            // GPT-2 name, e.g. "h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;  // Linear layout (out, in) for matrices
  int64_t offset = 0;          // in the flat vector
  int64_t numel = 0;
  int unit = 0;
  bool decay = false;          // AdamW weight decay: matrices only
  InitKind init = InitKind::zeros;
  double init_std = 0.0;
};

// Offsets of one block's tensors relative to the start of its unit.
struct BlockOffsets {
  int64_t ln1_w, ln1_b, qkv_w, qkv_b, attproj_w, attproj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w,
      fcproj_b, size;
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& m);

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
  int64_t wte_offset() const { return 0; }
  int64_t wpe_offset() const { return int64_t(m_.V) * m_.C; }
  int64_t lnf_w_offset() const { return unit_begin(final_unit()); }
  int64_t lnf_b_offset() const { return unit_begin(final_unit()) + m_.C; }
  const ParamInfo* find(const std::string& name) const;

  // Calls f(begin, end, decay) for the maximal runs of [lo, hi) with equal decay.
  template <class F> void for_each_decay_run(int64_t lo, int64_t hi, F&& f) const {
    for (const auto& p : params_) {
      int64_t b = std::max(lo, p.offset), e = std::min(hi, p.offset + p.numel);
      if (b < e) f(b, e, p.decay);
    }
  }

 private:
  void add(std::string name, std::vector<int64_t> shape, int unit, InitKind init, double std);
  ModelConfig m_;
  std::vector<ParamInfo> params_;
  std::vector<int64_t> unit_begin_;
  BlockOffsets block_{};
  int64_t total_ = 0;
};

}  // namespace pb
