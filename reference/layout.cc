#include "reference/layout.h"

#include <cmath>

namespace pb {

void ParamLayout::add(std::string name, std::vector<int64_t> shape, int unit, InitKind init,
                      double std) {
  ParamInfo p;
  p.name = std::move(name);
  p.numel = 1;
  for (auto d : shape) p.numel *= d;
  p.shape = std::move(shape);
  p.offset = total_;
  p.unit = unit;
  p.decay = p.shape.size() >= 2;
  p.init = init;
  p.init_std = std;
  total_ += p.numel;
  params_.push_back(std::move(p));
}

ParamLayout::ParamLayout(const ModelConfig& m) : m_(m) {
  m.validate();
  const int64_t C = m.C, V = m.V, T = m.maxT;
  // GPT-2 init: normal(0, 0.02); residual projections 0.02/sqrt(2L); zero biases; unit LN.
  const double std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * m.L);
  unit_begin_.push_back(0);
  add("wte", {V, C}, 0, InitKind::normal, std);
  add("wpe", {T, C}, 0, InitKind::normal, std);
  for (int l = 0; l < m.L; ++l) {
    int u = 1 + l;
    unit_begin_.push_back(total_);
    int64_t base = total_;
    std::string h = "h." + std::to_string(l) + ".";
    auto rel = [&] { return total_ - base; };
    block_.ln1_w = rel(); add(h + "ln_1.weight", {C}, u, InitKind::ones, 0);
    block_.ln1_b = rel(); add(h + "ln_1.bias", {C}, u, InitKind::zeros, 0);
    block_.qkv_w = rel(); add(h + "attn.c_attn.weight", {3 * C, C}, u, InitKind::normal, std);
    block_.qkv_b = rel(); add(h + "attn.c_attn.bias", {3 * C}, u, InitKind::zeros, 0);
    block_.attproj_w = rel(); add(h + "attn.c_proj.weight", {C, C}, u, InitKind::normal, proj_std);
    block_.attproj_b = rel(); add(h + "attn.c_proj.bias", {C}, u, InitKind::zeros, 0);
    block_.ln2_w = rel(); add(h + "ln_2.weight", {C}, u, InitKind::ones, 0);
    block_.ln2_b = rel(); add(h + "ln_2.bias", {C}, u, InitKind::zeros, 0);
    block_.fc_w = rel(); add(h + "mlp.c_fc.weight", {4 * C, C}, u, InitKind::normal, std);
    block_.fc_b = rel(); add(h + "mlp.c_fc.bias", {4 * C}, u, InitKind::zeros, 0);
    block_.fcproj_w = rel(); add(h + "mlp.c_proj.weight", {C, 4 * C}, u, InitKind::normal, proj_std);
    block_.fcproj_b = rel(); add(h + "mlp.c_proj.bias", {C}, u, InitKind::zeros, 0);
    block_.size = rel();
  }
  unit_begin_.push_back(total_);
  add("ln_f.weight", {C}, m.L + 1, InitKind::ones, 0);
  add("ln_f.bias", {C}, m.L + 1, InitKind::zeros, 0);
  unit_begin_.push_back(total_);
}

const ParamInfo* ParamLayout::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace pb
