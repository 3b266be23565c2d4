// How a sharded data-parallel rank holds the model: every unit (layout.h) is
// padded to a multiple of the shard group g and cut into g equal slices
// (FSDP's flat parameter per unit); a rank owns one slice of every unit.
// Invariant: the padding elements are zero in every buffer and the optimizer
// never touches them, so they add nothing to a sum or a norm.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "reference/layout.h"
#include "reference/optimizer.h"

namespace pb::dp {

struct UnitShard {
  int64_t begin = 0;     // flat offset of the unit
  int64_t size = 0;      // real elements
  int64_t slice = 0;     // ceil(size / g)
  int64_t padded = 0;    // g * slice
  int64_t full_off = 0;  // offset in the padded full buffer
  int64_t shard_off = 0; // offset in the shard buffer
  bool in_norm = true;
};

// A unit to shard: a contiguous flat range of the model (pipeline stages also
// hold the tied wte copy as a unit of its own, outside the norm).
struct UnitSpan {
  int64_t flat_lo = 0, size = 0;
  bool in_norm = true;  // counted in the global gradient norm
};
// The whole model's units, in layout order.
std::vector<UnitSpan> model_units(const ParamLayout& l);

class ShardLayout {
 public:
  // slice_index: which slice of every unit this rank owns (usually its rank in
  // the shard group; hZeRO's two-level reduction decides otherwise).
  ShardLayout(const ParamLayout& layout, int g, int slice_index);
  ShardLayout(const std::vector<UnitSpan>& units, int g, int slice_index);
  int groups() const { return g_; }
  int slice_index() const { return idx_; }
  int64_t full_size() const { return full_; }
  int64_t shard_size() const { return shard_; }
  const UnitShard& unit(int u) const { return units_[size_t(u)]; }
  int num_units() const { return int(units_.size()); }
  int64_t largest_padded_unit() const;
  // Flat range of this rank's real elements of unit u (may be empty).
  std::pair<int64_t, int64_t> owned(int u) const;
  // Optimizer segments: state in shard coordinates; params and grads in shard
  // coordinates when `*_full` is false, else in padded-full coordinates.
  std::vector<Segment> segments(bool params_full, bool grads_full) const;

 private:
  int g_, idx_;
  int64_t full_ = 0, shard_ = 0;
  std::vector<UnitShard> units_;
};

}  // namespace pb::dp
