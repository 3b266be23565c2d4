// The zero-bubble split of a block's backward: B (block_backward_input) then W
// (block_backward_weight) must reproduce block_backward bit for bit, input
// gradient and (accumulating) weight gradients, at every storage precision.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "reference/gpt.h"
#include "reference/init.h"

namespace pb {
namespace {

template <class T>
void fill(const Buffer<T>& b, std::mt19937& rng, double scale) {
  std::normal_distribution<double> d(0.0, scale);
  for (auto& x : b) x = cast<T>(d(rng));
}

template <class T>
void check_split_matches_fused() {
  const ModelConfig m = named_model("tiny");
  const ParamLayout l(m);
  const int B = 2, Tn = 8;
  MemoryTracker mt;
  const int u = l.block_unit(1);
  const size_t us = size_t(l.unit_size(u)), NC = size_t(B) * Tn * m.C;
  Buffer<T> unit(&mt, MemTag::params, us);
  init_params<T>(l, 42, l.unit_begin(u), l.unit_end(u), unit.data());
  std::mt19937 rng(7);
  Buffer<T> x(&mt, MemTag::activations, NC), dout(&mt, MemTag::activations, NC);
  fill(x, rng, 1.0);
  fill(dout, rng, 0.1);
  Buffer<T> du_fused(&mt, MemTag::grads, us), du_split(&mt, MemTag::grads, us);
  fill(du_fused, rng, 0.01);  // weight gradients accumulate: start from something
  std::memcpy(static_cast<void*>(du_split.data()), du_fused.data(), us * sizeof(T));

  Gpt<T> gpt(l, B, Tn);
  Scratch<T> s(&mt, m, B, Tn);
  BlockActs<T> a(&mt, m, B, Tn);
  gpt.block_forward(a, x.data(), unit.data(), s);
  Buffer<T> dx_fused(&mt, MemTag::workspace, NC), dx_split(&mt, MemTag::workspace, NC);
  gpt.block_backward(dx_fused.data(), du_fused.data(), dout.data(), x.data(), a, unit.data(), s);
  BlockGradStash<T> g(&mt, m, B, Tn);
  gpt.block_backward_input(dx_split.data(), g, dout.data(), x.data(), a, unit.data(), s);
  // B alone leaves the weight gradients untouched.
  Buffer<T> du_before(&mt, MemTag::workspace, us);
  std::memcpy(static_cast<void*>(du_before.data()), du_split.data(), us * sizeof(T));
  fill(s.dres, rng, 1.0);  // W must not depend on scratch left over from B
  fill(s.dln, rng, 1.0);
  gpt.block_backward_weight(du_split.data(), g, x.data(), a, s);

  EXPECT_EQ(0, std::memcmp(dx_fused.data(), dx_split.data(), NC * sizeof(T)));
  EXPECT_EQ(0, std::memcmp(du_fused.data(), du_split.data(), us * sizeof(T)));
  EXPECT_NE(0, std::memcmp(du_before.data(), du_split.data(), us * sizeof(T)));
}

TEST(GptSplit, InputThenWeightIsBitIdenticalToFusedBackward) {
  check_split_matches_fused<double>();
  check_split_matches_fused<float>();
  check_split_matches_fused<bf16>();
}

}  // namespace
}  // namespace pb
