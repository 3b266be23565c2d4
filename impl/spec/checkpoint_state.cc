#include "impl/spec/checkpoint_state.h"

#include <algorithm>

#include "harness/status.h"
#include "impl/spec/run_spec.h"

namespace pb {
namespace {

bool any_spec(const RunSpec&) { return true; }
// A unit's slices exist only where the optimizer state is sharded.
bool sharded(const RunSpec& s) { return s.data.shard != dp::Shard::none; }

constexpr FaultDecl kCkptFaults[] = {
    {"ckpt_drop_moments", FaultAxis::checkpoint, uint8_t(CkptFault::drop_moments),
     "Adam's moments are not loaded (they restart at zero)", any_spec},
    {"ckpt_step_reset", FaultAxis::checkpoint, uint8_t(CkptFault::step_reset),
     "the optimizer's step counter restarts at 0 (bias correction and the lr schedule restart)", any_spec},
    {"ckpt_uneven_offset", FaultAxis::checkpoint, uint8_t(CkptFault::uneven_offset),
     "a shard's offset computed as if the unit split evenly (wrong where it is padded)", sharded},
    {"ckpt_data_position", FaultAxis::checkpoint, uint8_t(CkptFault::data_position),
     "the data position is not restored (the data stream restarts at step 0)", any_spec},
};

// f(tensor, offset in it, flat lo, flat hi) for the pieces of [lo, hi) cut at tensor boundaries.
template <class F>
void for_each_piece(const ParamLayout& l, int64_t lo, int64_t hi, F&& f) {
  const auto& ps = l.params();
  auto it = std::upper_bound(ps.begin(), ps.end(), lo, [](int64_t x, const ParamInfo& p) { return x < p.offset; });
  require(it != ps.begin(), "checkpoint: flat offset " + std::to_string(lo) + " before the first tensor");
  for (--it; lo < hi; ++it) {
    require(it != ps.end(), "checkpoint: flat offset " + std::to_string(lo) + " past the model's last tensor");
    const int64_t end = std::min(hi, it->offset + it->numel);
    if (end > lo) f(*it, lo - it->offset, lo, end);
    lo = std::max(lo, end);
  }
}

}  // namespace

std::span<const FaultDecl> ckpt_fault_decls() { return kCkptFaults; }

void RankCheckpointOut::put_raw(const char* kind, int64_t lo, int64_t hi, StDType dt, const void* data) {
  require(layout_->tp() == 1, "checkpoint: a tensor-parallel layout's flat ranges are not the model's");
  const char* base = static_cast<const char*>(data);
  const size_t es = st_dtype_size(dt);
  for_each_piece(*layout_, lo, hi, [&](const ParamInfo& p, int64_t off, int64_t a, int64_t b) {
    shard_.add(std::string(kind) + "/" + p.name, Shape(p.shape.begin(), p.shape.end()), dt, off, b - a,
               base + size_t(a - lo) * es);
  });
}

bool RankCheckpointIn::has(CkptFault f) const {
  return std::find(faults_.begin(), faults_.end(), f) != faults_.end();
}

void RankCheckpointIn::get_raw(const char* kind, int64_t lo, int64_t hi, StDType dt, void* out) const {
  require(layout_->tp() == 1, "checkpoint: a tensor-parallel layout's flat ranges are not the model's");
  char* base = static_cast<char*>(out);
  const size_t es = st_dtype_size(dt);
  for_each_piece(*layout_, lo, hi, [&](const ParamInfo& p, int64_t off, int64_t a, int64_t b) {
    reader_->read(std::string(kind) + "/" + p.name, off, b - a, dt, base + size_t(a - lo) * es);
  });
}

}  // namespace pb
