#include "reference/data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

namespace pb {
namespace {

TEST(MarkovSource, SamplesArePureFunctionsOfSeedStepIndex) {
  MarkovSource a(64, 7), b(64, 7), c(64, 8);
  std::vector<int32_t> x(33), y(33), z(33);
  a.sample(3, 5, 33, x.data());
  b.sample(3, 5, 33, y.data());
  EXPECT_EQ(x, y);
  c.sample(3, 5, 33, z.data());
  EXPECT_NE(x, z);
  b.sample(3, 6, 33, y.data());
  EXPECT_NE(x, y);
  // A batch slice equals the samples drawn one by one.
  std::vector<int32_t> in(4 * 32), tg(4 * 32);
  a.batch(3, 3, 4, 32, in.data(), tg.data());
  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(in[2 * 32 + t], x[t]);
    EXPECT_EQ(tg[2 * 32 + t], x[t + 1]);
  }
}

TEST(MarkovSource, EntropyRateMatchesEmpiricalConditionalEntropy) {
  const int V = 16;
  MarkovSource src(V, 11);
  EXPECT_GT(src.entropy_rate(), 0.0);
  EXPECT_LT(src.entropy_rate(), std::log(double(V)));
  // Estimate H(X_{t+1} | X_t) from 4000 sequences of 64 tokens.
  std::map<std::pair<int, int>, double> joint;
  std::map<int, double> marg;
  std::vector<int32_t> s(65);
  double n = 0;
  for (int i = 0; i < 4000; ++i) {
    src.sample(0, i, 65, s.data());
    for (int t = 0; t < 64; ++t) {
      joint[{s[t], s[t + 1]}] += 1;
      marg[s[t]] += 1;
      n += 1;
    }
  }
  double h = 0;
  for (auto& [k, c] : joint) h -= c / n * std::log(c / marg[k.first]);
  // Plug-in estimate with 256k transitions: a few percent bias at most.
  EXPECT_NEAR(h, src.entropy_rate(), 0.03 * src.entropy_rate());
}

}  // namespace
}  // namespace pb
