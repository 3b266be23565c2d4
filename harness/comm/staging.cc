#include "harness/comm/staging.h"

#include <algorithm>
#include <utility>

namespace pb {

StagedOp::StagedOp(const OpDesc& d, int rank, BufferSpace& space) : given_(&d), space_(&space) {
  if (space.is_host()) return;
  const size_t es = d.elem_size();
  const auto* s = static_cast<const std::byte*>(d.send);
  auto* r = static_cast<std::byte*>(d.recv);
  // A broadcast reads send on its root only, a reduce writes recv there only:
  // elsewhere the pointer is passed through (it may be anything).
  const bool root = rank == d.root;
  const size_t sb = s && (d.op != CommOp::broadcast || root) ? send_elems(d, rank) * es : 0;
  const size_t rb = r && (d.op != CommOp::reduce || root) ? recv_elems(d, rank) * es : 0;
  const bool stage_s = sb > 0 && !space.reaches(s), stage_r = rb > 0 && !space.reaches(r);
  if (!stage_s && !stage_r) return;
  desc_ = d;
  auto add = [&](const std::byte* lo, size_t bytes, bool copy_in) {
    regions_.push_back(space.allocate(bytes));
    if (copy_in) space.copy_in(regions_.back(), lo, bytes);
    return static_cast<std::byte*>(regions_.back());
  };
  try {
    const bool overlap = stage_s && stage_r && s < r + rb && r < s + sb;
    if (overlap) {  // in place: one region keeps the offset between the two
      const std::byte* lo = std::min<const std::byte*>(s, r);
      const std::byte* hi = std::max<const std::byte*>(s + sb, r + rb);
      std::byte* dev = add(lo, size_t(hi - lo), true);
      desc_.send = dev + (s - lo);
      desc_.recv = dev + (r - lo);
    } else {
      if (stage_s) desc_.send = add(s, sb, true);
      if (stage_r) desc_.recv = add(r, rb, false);  // received bytes only: nothing to copy in
    }
  } catch (...) {
    release();
    throw;
  }
  if (stage_r) {
    recv_host_ = r;
    recv_bytes_ = rb;
  }
}

StagedOp::StagedOp(StagedOp&& o) noexcept
    : given_(o.given_), desc_(std::move(o.desc_)), space_(o.space_), regions_(std::move(o.regions_)),
      recv_host_(o.recv_host_), recv_bytes_(o.recv_bytes_) {
  o.regions_.clear();
  o.recv_host_ = nullptr;
}

void StagedOp::finish() {
  if (recv_host_) space_->copy_out(recv_host_, desc_.recv, recv_bytes_);
  recv_host_ = nullptr;
  release();
}

void StagedOp::release() noexcept {
  for (void* p : regions_) space_->deallocate(p);
  regions_.clear();
}

StagedOp::~StagedOp() { release(); }

}  // namespace pb
