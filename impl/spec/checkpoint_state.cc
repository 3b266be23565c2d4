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

// For the local elements [off, off + n) of tensor k of `local`: g(full
// offset, local start e0 relative to off, count) for each run that is
// contiguous in the full tensor (vocabulary padding skipped).
template <class G>
void for_each_full_run(const ParamLayout& local, const ParamInfo& p, int64_t off, int64_t n, G&& g) {
  if (local.tp() == 1 || p.replicated) {
    g(off, int64_t(0), n);
    return;
  }
  int64_t start = -1, e0 = 0, len = 0;
  for (int64_t e = 0; e < n; ++e) {
    const int64_t j = p.full_index(off + e);
    if (j >= 0 && start >= 0 && j == start + len) {
      ++len;
      continue;
    }
    if (len) g(start, e0, len);
    start = j, e0 = e, len = j >= 0 ? 1 : 0;
  }
  if (len) g(start, e0, len);
}

Shape shape_of(const ParamInfo& p) { return Shape(p.shape.begin(), p.shape.end()); }

}  // namespace

std::span<const FaultDecl> ckpt_fault_decls() { return kCkptFaults; }

void RankCheckpointOut::put_raw(const char* kind, int64_t lo, int64_t hi, StDType dt, const void* data) {
  const char* base = static_cast<const char*>(data);
  const size_t es = st_dtype_size(dt);
  const auto& local = layout_->params();
  for_each_piece(*layout_, lo, hi, [&](const ParamInfo& p, int64_t off, int64_t a, int64_t b) {
    const ParamInfo& f = full_->params()[size_t(&p - local.data())];
    for_each_full_run(*layout_, p, off, b - a, [&](int64_t j, int64_t e0, int64_t len) {
      shard_.add(std::string(kind) + "/" + f.name, shape_of(f), dt, j, len, base + size_t(a - lo + e0) * es);
    });
  });
}

bool RankCheckpointIn::has(CkptFault f) const {
  return std::find(faults_.begin(), faults_.end(), f) != faults_.end();
}

void RankCheckpointIn::get_raw(const char* kind, int64_t lo, int64_t hi, StDType dt, void* out) const {
  char* base = static_cast<char*>(out);
  const size_t es = st_dtype_size(dt);
  const auto& local = layout_->params();
  for_each_piece(*layout_, lo, hi, [&](const ParamInfo& p, int64_t off, int64_t a, int64_t b) {
    const ParamInfo& f = full_->params()[size_t(&p - local.data())];
    for_each_full_run(*layout_, p, off, b - a, [&](int64_t j, int64_t e0, int64_t len) {
      reader_->read(std::string(kind) + "/" + f.name, j, len, dt, base + size_t(a - lo + e0) * es);
    });
  });
}

}  // namespace pb
