#include "harness/comm/staging.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace pb {
namespace {
size_t total(const std::vector<size_t>& v) {
  size_t t = 0;
  for (size_t x : v) t += x;
  return t;
}
}  // namespace

size_t send_elems(const OpDesc& d, int rank) {
  switch (d.op) {
    case CommOp::reduce_scatter:
    case CommOp::all_to_all: return total(d.counts);
    case CommOp::all_gather: return d.counts.at(size_t(rank));
    case CommOp::recv:
    case CommOp::barrier: return 0;
    default: return d.count;  // all_reduce, broadcast, reduce, send, sendrecv
  }
}

size_t recv_elems(const OpDesc& d, int rank) {
  switch (d.op) {
    case CommOp::reduce_scatter: return d.counts.at(size_t(rank));
    case CommOp::all_gather: return total(d.counts);
    case CommOp::all_to_all: return total(d.recv_counts);
    case CommOp::send:
    case CommOp::barrier: return 0;
    default: return d.count;  // all_reduce, broadcast, reduce, recv, sendrecv
  }
}

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
    regions_.push_back({lo, bytes, nullptr});
    regions_.back().dev = space.allocate(bytes);
    if (copy_in) space.copy_in(regions_.back().dev, lo, bytes);
    return static_cast<std::byte*>(regions_.back().dev);
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
    recv_dev_ = desc_.recv;
    recv_bytes_ = rb;
  }
}

StagedOp::StagedOp(StagedOp&& o) noexcept
    : given_(o.given_), desc_(std::move(o.desc_)), space_(o.space_), regions_(std::move(o.regions_)), recv_host_(o.recv_host_),
      recv_dev_(o.recv_dev_), recv_bytes_(o.recv_bytes_) {
  o.regions_.clear();
  o.recv_host_ = nullptr;
}

void StagedOp::finish() {
  if (recv_host_) space_->copy_out(recv_host_, recv_dev_, recv_bytes_);
  recv_host_ = nullptr;
  release();
}

void StagedOp::release() noexcept {
  for (const Region& g : regions_)
    if (g.dev) space_->deallocate(g.dev);
  regions_.clear();
}

StagedOp::~StagedOp() { release(); }

}  // namespace pb
