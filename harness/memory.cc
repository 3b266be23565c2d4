#include "harness/memory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace pb {

std::string_view mem_tag_name(MemTag t) {
  static constexpr std::string_view names[] = {"params", "grads", "optimizer",
                                               "activations", "comm", "workspace"};
  return names[int(t)];
}
std::string_view place_name(Place p) { return p == Place::device ? "device" : "host"; }

void MemoryTracker::on_alloc(MemTag tag, Place place, size_t bytes) {
  std::lock_guard lk(mu_);
  int i = idx(tag, place);
  cur_[i] += bytes;
  peak_[i] = std::max(peak_[i], cur_[i]);
  cur_total_[int(place)] += bytes;
  peak_total_[int(place)] = std::max(peak_total_[int(place)], cur_total_[int(place)]);
}

void MemoryTracker::on_free(MemTag tag, Place place, size_t bytes) {
  std::lock_guard lk(mu_);
  cur_[idx(tag, place)] -= bytes;
  cur_total_[int(place)] -= bytes;
}

size_t MemoryTracker::current(MemTag tag, Place place) const {
  std::lock_guard lk(mu_);
  return cur_[idx(tag, place)];
}
size_t MemoryTracker::peak(MemTag tag, Place place) const {
  std::lock_guard lk(mu_);
  return peak_[idx(tag, place)];
}
size_t MemoryTracker::peak_total(Place place) const {
  std::lock_guard lk(mu_);
  return peak_total_[int(place)];
}
size_t MemoryTracker::current_total(Place place) const {
  std::lock_guard lk(mu_);
  return cur_total_[int(place)];
}
void MemoryTracker::reset_peaks() {
  std::lock_guard lk(mu_);
  peak_ = cur_;
  peak_total_ = cur_total_;
}

Allocation::Allocation(MemoryTracker* tracker, MemTag tag, size_t bytes, Place place)
    : bytes_(bytes), tracker_(tracker), tag_(tag), place_(place) {
  if (bytes == 0) return;
  if (tracker_ && place_ == Place::device && tracker_->device_memory()) {
    device_ = tracker_->device_memory();
    ptr_ = device_->allocate(bytes);
  } else {
    size_t rounded = (bytes + 63) / 64 * 64;
    ptr_ = std::aligned_alloc(64, rounded);
    if (!ptr_) throw std::bad_alloc();
    std::memset(ptr_, 0, rounded);
  }
  if (tracker_) tracker_->on_alloc(tag_, place_, bytes_);
}

Allocation& Allocation::operator=(Allocation&& o) noexcept {
  if (this != &o) {
    release();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    tracker_ = std::exchange(o.tracker_, nullptr);
    device_ = std::exchange(o.device_, nullptr);
    tag_ = o.tag_;
    place_ = o.place_;
  }
  return *this;
}

void Allocation::release() {
  if (ptr_) {
    if (tracker_) tracker_->on_free(tag_, place_, bytes_);
    if (device_) device_->deallocate(ptr_);
    else std::free(ptr_);
  }
  ptr_ = nullptr;
  device_ = nullptr;
  bytes_ = 0;
}

}  // namespace pb
