#include "impl/data_parallel/shard.h"

#include <algorithm>

namespace pb::dp {

std::vector<UnitSpan> model_units(const ParamLayout& l) {
  std::vector<UnitSpan> v;
  for (int u = 0; u < l.num_units(); ++u) v.push_back({l.unit_begin(u), l.unit_size(u), true});
  return v;
}

ShardLayout::ShardLayout(const ParamLayout& l, int g, int slice_index)
    : ShardLayout(model_units(l), g, slice_index) {}

ShardLayout::ShardLayout(const std::vector<UnitSpan>& units, int g, int slice_index) : g_(g), idx_(slice_index) {
  for (const UnitSpan& sp : units) {
    UnitShard s;
    s.begin = sp.flat_lo;
    s.size = sp.size;
    s.in_norm = sp.in_norm;
    s.slice = (s.size + g - 1) / g;
    s.padded = s.slice * g;
    s.full_off = full_;
    s.shard_off = shard_;
    full_ += s.padded;
    shard_ += s.slice;
    units_.push_back(s);
  }
}

int64_t ShardLayout::largest_padded_unit() const {
  int64_t m = 0;
  for (const auto& u : units_) m = std::max(m, u.padded);
  return m;
}

std::pair<int64_t, int64_t> ShardLayout::owned(int u) const {
  const auto& s = units_[size_t(u)];
  int64_t lo = std::min(s.size, idx_ * s.slice), hi = std::min(s.size, (idx_ + 1) * s.slice);
  return {s.begin + lo, s.begin + hi};
}

std::vector<Segment> ShardLayout::segments(bool params_full, bool grads_full) const {
  std::vector<Segment> out;
  for (int u = 0; u < num_units(); ++u) {
    auto [lo, hi] = owned(u);
    if (lo >= hi) continue;
    const auto& s = units_[size_t(u)];
    const int64_t full_pos = s.full_off + idx_ * s.slice;
    Segment seg;
    seg.flat_lo = lo;
    seg.flat_hi = hi;
    seg.state_off = s.shard_off;
    seg.param_off = params_full ? full_pos : s.shard_off;
    seg.grad_off = grads_full ? full_pos : s.shard_off;
    out.push_back(seg);
  }
  return out;
}

}  // namespace pb::dp
