// The synthetic language: a seeded sparse Markov chain over V tokens whose
// entropy rate is computed exactly, so "the model learns" is checkable — the
// mean loss falls toward that floor (a model that sees the previous token can
// reach it; nothing can beat it).
// Invariant: sample i of step s is a pure function of (seed, s, i): any rank
// can draw its own slice of the global batch without the others.
#pragma once
#include <cstdint>
#include <vector>

namespace pb {

class MarkovSource {
 public:
  // Each token has `branching` random successors with random weights; with
  // probability `mix` the next token is uniform instead (keeps the chain
  // ergodic and every token reachable).
  MarkovSource(int V, uint64_t seed, int branching = 3, double mix = 0.02);

  int vocab() const { return V_; }
  // Entropy rate in nats per token: sum_i pi_i H(P_i), pi the stationary law.
  double entropy_rate() const { return entropy_rate_; }
  // T+1 tokens of sample i of step s; the first drawn from the stationary law.
  void sample(int64_t step, int64_t i, int Tplus1, int32_t* out) const;
  // Samples [first, first + B) of step s: inputs (B,T) and targets (B,T)
  // (targets are the inputs shifted by one).
  void batch(int64_t step, int64_t first, int B, int T, int32_t* inputs, int32_t* targets) const;

 private:
  int32_t next(int32_t cur, double u1, double u2) const;
  int V_, K_;
  double mix_;
  uint64_t seed_;
  std::vector<int32_t> succ_;     // (V, K)
  std::vector<double> cum_;       // (V, K) cumulative successor weights
  std::vector<double> stat_cdf_;  // (V) stationary cdf
  double entropy_rate_ = 0;
};

}  // namespace pb
