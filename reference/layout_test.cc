#include "reference/layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "harness/status.h"
#include "reference/init.h"

namespace pb {
namespace {

TEST(ParamLayout, CountsMatchFormulaAndUnitsAreContiguous) {
  for (auto name : {"tiny", "small", "gpt2-124m"}) {
    ModelConfig m = named_model(name);
    ParamLayout l(m);
    EXPECT_EQ(l.total(), m.num_params()) << name;
    EXPECT_EQ(l.num_units(), m.L + 2);
    EXPECT_EQ(l.unit_begin(0), 0);
    EXPECT_EQ(l.unit_end(l.num_units() - 1), l.total());
    for (int u = 1; u <= m.L; ++u) EXPECT_EQ(l.unit_size(u), l.block().size);
    int64_t expect = 0;
    for (const auto& p : l.params()) {
      EXPECT_EQ(p.offset, expect) << p.name;
      EXPECT_GE(p.offset, l.unit_begin(p.unit));
      EXPECT_LE(p.offset + p.numel, l.unit_end(p.unit));
      expect += p.numel;
    }
  }
  // GPT-2 small: 124,439,808 parameters with the tied head.
  EXPECT_EQ(named_model("gpt2-124m").num_params(), 124439808);
}

TEST(ParamLayout, Gpt2NamesAndDecayOnMatricesOnly) {
  ParamLayout l(named_model("tiny"));
  ASSERT_NE(l.find("wte"), nullptr);
  ASSERT_NE(l.find("h.1.attn.c_attn.weight"), nullptr);
  ASSERT_NE(l.find("h.0.mlp.c_proj.bias"), nullptr);
  ASSERT_NE(l.find("ln_f.bias"), nullptr);
  EXPECT_TRUE(l.find("wte")->decay);
  EXPECT_TRUE(l.find("h.0.attn.c_proj.weight")->decay);
  EXPECT_FALSE(l.find("h.0.ln_1.weight")->decay);
  EXPECT_FALSE(l.find("h.0.attn.c_attn.bias")->decay);
  EXPECT_EQ(l.find("h.1.attn.c_attn.weight")->shape, (std::vector<int64_t>{96, 32}));
}

TEST(ModelConfig, RejectsBadShapesNamingTheField) {
  ModelConfig m = named_model("tiny");
  m.NH = 3;
  try {
    m.validate();
    FAIL() << "heads not dividing channels accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.heads"), std::string::npos) << e.what();
  }
  m = named_model("tiny");
  m.L = 0;
  EXPECT_THROW(m.validate(), InputError);
  m = named_model("tiny");
  m.C = -4;
  EXPECT_THROW(m.validate(), InputError);
  EXPECT_THROW(named_model("gpt5"), InputError);
}

TEST(Init, AnyShardInitsItselfIdentically) {
  ParamLayout l(named_model("tiny"));
  std::vector<double> full(l.total());
  init_params<double>(l, 42, 0, l.total(), full.data());
  for (int64_t lo : {int64_t(0), int64_t(17), int64_t(3001), l.total() / 2}) {
    int64_t hi = std::min(l.total(), lo + 1234);
    std::vector<double> shard(hi - lo);
    init_params<double>(l, 42, lo, hi, shard.data());
    for (int64_t i = lo; i < hi; ++i) ASSERT_EQ(shard[i - lo], full[i]) << i;
  }
  // Biases zero, LN weights one, weights ~ N(0, 0.02).
  const auto* b = l.find("h.0.attn.c_attn.bias");
  const auto* w = l.find("h.0.ln_2.weight");
  EXPECT_EQ(full[b->offset], 0.0);
  EXPECT_EQ(full[w->offset], 1.0);
  const auto* e = l.find("wte");
  double s2 = 0;
  for (int64_t i = 0; i < e->numel; ++i) s2 += full[e->offset + i] * full[e->offset + i];
  EXPECT_NEAR(std::sqrt(s2 / e->numel), 0.02, 0.002);
  // Residual projections are scaled by 1/sqrt(2L).
  const auto* p = l.find("h.1.mlp.c_proj.weight");
  double p2 = 0;
  for (int64_t i = 0; i < p->numel; ++i) p2 += full[p->offset + i] * full[p->offset + i];
  EXPECT_NEAR(std::sqrt(p2 / p->numel), 0.02 / 2.0, 0.0015);
  // A different seed gives different values.
  std::vector<double> other(l.total());
  init_params<double>(l, 43, 0, l.total(), other.data());
  EXPECT_NE(other[e->offset], full[e->offset]);
}

}  // namespace
}  // namespace pb
