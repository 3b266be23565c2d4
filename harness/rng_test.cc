// Philox4x32 against Random123's known answers (tests/kat_vectors), the
// statistics of the normal draws, and shard independence of the bulk fills.
#include "harness/rng.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace pb::rng {
namespace {

struct Kat {
  Block ctr;
  Key key;
  Block expect;
};

// Random123 tests/kat_vectors, lines "philox4x32 10 ..." and "philox4x32 7 ...":
// ctr[4] key[2] -> result[4].
TEST(Philox, KnownAnswers10Rounds) {
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) EXPECT_EQ(philox<10>(k.ctr, k.key), k.expect);
}

TEST(Philox, KnownAnswers7Rounds) {
  EXPECT_EQ((philox<7>({0, 0, 0, 0}, {0, 0})), (Block{0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}));
  EXPECT_EQ((philox<7>({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0})),
            (Block{0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}));
}

TEST(Philox, LayoutOfSeedStreamIndex) {
  // seed -> key, (block, stream) -> counter words, low word first.
  const uint64_t seed = 0x299f31d0a4093822ull, stream = 0x0370734413198a2eull, blk = 0x85a308d3243f6a88ull;
  EXPECT_EQ(block(seed, stream, blk), (Block{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
  // Word k of block b is u32 index 4b + k; half h is u64 index 2b + h.
  const uint64_t b = blk >> 4;  // small enough that 4b does not overflow
  const Block w = block(seed, stream, b);
  for (uint64_t k = 0; k < 4; ++k) EXPECT_EQ(u32(seed, stream, b * 4 + k), w[k]);
  EXPECT_EQ(u64(seed, stream, b * 2), uint64_t{w[0]} | uint64_t{w[1]} << 32);
  EXPECT_EQ(u64(seed, stream, b * 2 + 1), uint64_t{w[2]} | uint64_t{w[3]} << 32);
}

TEST(Fnv1a, KnownValues) {
  // Reference values of FNV-1a 64 (Noll's test suite): "" and "a".
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(stream_id("wte"), fnv1a64("wte"));
}

TEST(Rng, UniformRangeAndMoments) {
  const int n = 100000;
  double sum = 0, sq = 0, lo = 1, hi = 0;
  for (int i = 0; i < n; ++i) {
    const double u = uniform(7, 3, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sq += u * u;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  const double mean = sum / n, var = sq / n - mean * mean;
  // Standard error of the mean is sqrt(1/12/n) = 9.1e-4; 5 sigma.
  EXPECT_NEAR(mean, 0.5, 5 * 9.1e-4);
  EXPECT_NEAR(var, 1.0 / 12, 2e-3);
  EXPECT_LT(lo, 1e-3);
  EXPECT_GT(hi, 1 - 1e-3);
}

TEST(Rng, NormalMoments) {
  const size_t n = 100000;
  std::vector<double> z(n);
  fill_normal(z.data(), n, 0.0, 1.0, 1234, stream_id("test"), 0);
  double s1 = 0, s2 = 0, s3 = 0, s4 = 0, lag = 0;
  for (size_t i = 0; i < n; ++i) {
    s1 += z[i];
    s2 += z[i] * z[i];
    s3 += z[i] * z[i] * z[i];
    s4 += z[i] * z[i] * z[i] * z[i];
    if (i) lag += z[i] * z[i - 1];
  }
  const double mean = s1 / n, var = s2 / n - mean * mean;
  // Standard errors at n = 1e5: mean 3.2e-3, var 4.5e-3, skew 7.7e-3, kurt 1.5e-2; 5 sigma.
  EXPECT_NEAR(mean, 0.0, 0.016);
  EXPECT_NEAR(var, 1.0, 0.023);
  EXPECT_NEAR(s3 / n, 0.0, 0.04);
  EXPECT_NEAR(s4 / n, 3.0, 0.08);
  // The two halves of a Box-Muller pair are independent: no lag-1 correlation.
  EXPECT_NEAR(lag / (n - 1), 0.0, 0.016);
}

TEST(Rng, NormalMatchesFill) {
  std::vector<double> z(9);
  fill_normal(z.data(), z.size(), 1.5, 0.25, 42, 9, 100);
  for (size_t k = 0; k < z.size(); ++k) EXPECT_EQ(z[k], 1.5 + 0.25 * normal(42, 9, 100 + k)) << k;
}

template <class T>
void ExpectShardsEqualWhole() {
  const size_t n = 1001;
  std::vector<T> whole(n);
  fill_normal(whole.data(), n, 0.0, 0.02, 5, stream_id("h.0.mlp.c_fc.weight"), 0);
  // Odd and even boundaries, empty and one-element shards.
  const size_t cuts[] = {0, 0, 1, 2, 7, 500, 501, 1000, 1001};
  for (size_t c = 0; c + 1 < std::size(cuts); ++c) {
    const size_t a = cuts[c], b = cuts[c + 1];
    std::vector<T> shard(b - a);
    fill_normal(shard.data(), b - a, 0.0, 0.02, 5, stream_id("h.0.mlp.c_fc.weight"), a);
    for (size_t k = a; k < b; ++k) ASSERT_TRUE(shard[k - a] == whole[k]) << "element " << k;
  }
}

TEST(Rng, ShardIndependenceAllTypes) {
  ExpectShardsEqualWhole<double>();
  ExpectShardsEqualWhole<float>();
  ExpectShardsEqualWhole<bf16>();
}

TEST(Rng, LowPrecisionFillsRoundTheDoubleFill) {
  const size_t n = 4096;
  std::vector<double> d(n);
  std::vector<float> f(n);
  std::vector<bf16> h(n);
  fill_normal(d.data(), n, 0.0, 1.0, 3, 4, 17);
  fill_normal(f.data(), n, 0.0, 1.0, 3, 4, 17);
  fill_normal(h.data(), n, 0.0, 1.0, 3, 4, 17);
  for (size_t k = 0; k < n; ++k) {
    ASSERT_EQ(f[k], static_cast<float>(d[k]));
    ASSERT_TRUE(h[k] == cast<bf16>(d[k]));
  }
}

TEST(Rng, StreamsAndSeedsDiffer) {
  EXPECT_NE(u64(1, 0, 0), u64(2, 0, 0));
  EXPECT_NE(u64(1, 0, 0), u64(1, 1, 0));
  EXPECT_NE(u64(1, 0, 0), u64(1, 0, 1));
  // The stream lives in the high counter words: block 2^32 of stream 0 is not block 0 of stream 1.
  EXPECT_NE(block(1, 0, uint64_t{1} << 32), block(1, 1, 0));
}

TEST(Rng, FillUniformBounds) {
  std::vector<float> u(10000);
  fill_uniform(u.data(), u.size(), -2.0, 3.0, 11, 12, 0);
  for (float x : u) {
    ASSERT_GE(x, -2.0f);
    ASSERT_LE(x, 3.0f);
  }
  EXPECT_EQ(u[5], static_cast<float>(-2.0 + 5.0 * uniform(11, 12, 5)));
}

}  // namespace
}  // namespace pb::rng
