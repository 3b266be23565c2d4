#include "reference/data.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "harness/rng.h"
#include "harness/status.h"

namespace pb {

using rng::normal;
using rng::uniform;

namespace {
constexpr uint64_t kSuccStream = 0x6d61726b6f762e73ull;    // "markov.s"
constexpr uint64_t kWeightStream = 0x6d61726b6f762e77ull;  // "markov.w"
uint64_t sample_stream(int64_t step, int64_t i) {
  // Distinct from parameter streams (FNV hashes of names) by the top bit.
  return (uint64_t(1) << 63) | (uint64_t(step) << 32) | uint64_t(i & 0xffffffff);
}
}  // namespace

MarkovSource::MarkovSource(int V, uint64_t seed, int branching, double mix)
    : V_(V), K_(branching), mix_(mix), seed_(seed) {
  require(V >= 2, "data: vocabulary must be >= 2, got " + std::to_string(V));
  require(branching >= 1, "data.branching: must be >= 1");
  require(mix > 0 && mix < 1, "data.mix: must be in (0, 1)");
  succ_.resize(size_t(V) * K_);
  cum_.resize(size_t(V) * K_);
  for (int i = 0; i < V; ++i) {
    double total = 0;
    for (int k = 0; k < K_; ++k) {
      uint64_t idx = uint64_t(i) * K_ + k;
      succ_[idx] = int32_t(std::min<double>(V - 1, std::floor(uniform(seed, kSuccStream, idx) * V)));
      total += std::exp(1.5 * normal(seed, kWeightStream, idx));
      cum_[idx] = total;
    }
    for (int k = 0; k < K_; ++k) cum_[size_t(i) * K_ + k] /= total;
  }
  // Stationary law by power iteration on the sparse chain:
  // pi'_j = mix/V + (1 - mix) * sum_i pi_i w_ij.
  std::vector<double> pi(V, 1.0 / V), nxt(V);
  for (int it = 0; it < 10000; ++it) {
    std::fill(nxt.begin(), nxt.end(), mix / V);
    for (int i = 0; i < V; ++i) {
      double prev = 0;
      for (int k = 0; k < K_; ++k) {
        size_t idx = size_t(i) * K_ + k;
        nxt[succ_[idx]] += (1 - mix) * pi[i] * (cum_[idx] - prev);
        prev = cum_[idx];
      }
    }
    double diff = 0;
    for (int j = 0; j < V; ++j) diff += std::abs(nxt[j] - pi[j]);
    pi.swap(nxt);
    if (diff < 1e-14) break;
  }
  stat_cdf_.resize(V);
  double c = 0;
  for (int j = 0; j < V; ++j) stat_cdf_[j] = (c += pi[j]);
  // Entropy rate: row i has mass mix/V everywhere plus (1-mix)*w on successors.
  for (int i = 0; i < V; ++i) {
    std::map<int32_t, double> row;
    double prev = 0;
    for (int k = 0; k < K_; ++k) {
      size_t idx = size_t(i) * K_ + k;
      row[succ_[idx]] += (1 - mix) * (cum_[idx] - prev);
      prev = cum_[idx];
    }
    double base = mix / V, h = 0;
    for (auto& [j, w] : row) h -= (base + w) * std::log(base + w);
    h -= double(V - int(row.size())) * base * std::log(base);
    entropy_rate_ += pi[i] * h;
  }
}

int32_t MarkovSource::next(int32_t cur, double u1, double u2) const {
  if (u1 < mix_) return int32_t(std::min<double>(V_ - 1, std::floor(u2 * V_)));
  const double* c = &cum_[size_t(cur) * K_];
  int k = int(std::upper_bound(c, c + K_, u2) - c);
  return succ_[size_t(cur) * K_ + std::min(k, K_ - 1)];
}

void MarkovSource::sample(int64_t step, int64_t i, int Tplus1, int32_t* out) const {
  const uint64_t key = seed_ ^ 0x9e3779b97f4a7c15ull, stream = sample_stream(step, i);
  double u0 = uniform(key, stream, 0);
  int32_t tok = int32_t(std::upper_bound(stat_cdf_.begin(), stat_cdf_.end(), u0 * stat_cdf_.back()) -
                        stat_cdf_.begin());
  tok = std::min(tok, V_ - 1);
  out[0] = tok;
  for (int t = 1; t < Tplus1; ++t) {
    tok = next(tok, uniform(key, stream, 2 * uint64_t(t)), uniform(key, stream, 2 * uint64_t(t) + 1));
    out[t] = tok;
  }
}

void MarkovSource::batch(int64_t step, int64_t first, int B, int T, int32_t* inputs,
                         int32_t* targets) const {
  std::vector<int32_t> buf(size_t(T) + 1);
  for (int b = 0; b < B; ++b) {
    sample(step, first + b, T + 1, buf.data());
    std::copy(buf.begin(), buf.begin() + T, inputs + size_t(b) * T);
    std::copy(buf.begin() + 1, buf.end(), targets + size_t(b) * T);
  }
}

}  // namespace pb
