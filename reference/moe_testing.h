// Test-only: the MoE model and parameters the MoE tests share (the
// reference's and the expert-parallel exchange's).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "reference/init.h"
#include "reference/layout.h"
#include "reference/model_config.h"

namespace pb {

inline ModelConfig moe_model(double cf, int top_k = 2) {
  ModelConfig m = named_model("tiny-moe");
  m.moe.capacity_factor = cf;
  m.moe.top_k = top_k;
  m.moe.aux_loss_coef = 0.1;  // large enough to matter in the gradient check
  return m;
}

// Params of `m` (fp64), the router weights made decisive (std 1) so small
// perturbations do not flip a routing decision.
inline std::vector<double> params_of(const ParamLayout& l, uint64_t seed) {
  std::vector<double> p(size_t(l.total()));
  init_params<double>(l, seed, 0, l.total(), p.data());
  std::mt19937_64 g(seed);
  std::normal_distribution<double> n(0, 1);
  for (const auto& t : l.params())
    if (t.name.find("router") != std::string::npos)
      for (int64_t i = 0; i < t.numel; ++i) p[size_t(t.offset + i)] = n(g);
  return p;
}

}  // namespace pb
