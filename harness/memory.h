// Tracked memory: every buffer a rank allocates carries a tag (what it holds)
// and a place (device or host), and the rank's MemoryTracker keeps current and
// peak bytes per (tag, place) and the peak of their sum.
// Invariant: bytes are counted exactly as requested (no allocator rounding), so
// the conformance engine can compare measured model-state bytes with the
// declared formula for equality.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <utility>

namespace pb {

enum class MemTag : uint8_t { params, grads, optimizer, activations, comm, workspace };
inline constexpr int kNumMemTags = 6;
enum class Place : uint8_t { device, host };
inline constexpr int kNumPlaces = 2;

std::string_view mem_tag_name(MemTag t);
std::string_view place_name(Place p);

// Where a rank's Place::device buffers live when they are not host memory
// (kernels/cuda's cudaMalloc; harness code never calls a device API itself).
// allocate() returns zero-filled memory of at least `bytes`, or throws.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p) noexcept = 0;
};

class MemoryTracker {
 public:
  // Place::device buffers come from `m` (null: host memory, the CPU device).
  // Set before the first device allocation; the memory outlives the buffers.
  void set_device_memory(DeviceMemory* m) { device_memory_ = m; }
  DeviceMemory* device_memory() const { return device_memory_; }

  void on_alloc(MemTag tag, Place place, size_t bytes);
  void on_free(MemTag tag, Place place, size_t bytes);

  size_t current(MemTag tag, Place place = Place::device) const;
  size_t peak(MemTag tag, Place place = Place::device) const;
  // Peak of the sum over all tags at one place (not the sum of per-tag peaks).
  size_t peak_total(Place place = Place::device) const;
  size_t current_total(Place place = Place::device) const;
  // Peaks restart from the current values (e.g. after warm-up).
  void reset_peaks();

 private:
  static int idx(MemTag t, Place p) { return int(p) * kNumMemTags + int(t); }
  mutable std::mutex mu_;
  std::array<size_t, kNumMemTags * kNumPlaces> cur_{}, peak_{};
  std::array<size_t, kNumPlaces> cur_total_{}, peak_total_{};
  DeviceMemory* device_memory_ = nullptr;
};

// One tracked, zero-initialized allocation: 64-byte aligned host memory, or
// the tracker's DeviceMemory for a Place::device buffer when it has one.
// Movable, not copyable.
class Allocation {
 public:
  Allocation() = default;
  Allocation(MemoryTracker* tracker, MemTag tag, size_t bytes, Place place = Place::device);
  ~Allocation() { release(); }
  Allocation(Allocation&& o) noexcept { *this = std::move(o); }
  Allocation& operator=(Allocation&& o) noexcept;
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  MemTag tag() const { return tag_; }
  Place place() const { return place_; }
  void release();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  MemoryTracker* tracker_ = nullptr;
  DeviceMemory* device_ = nullptr;  // the memory ptr_ came from; null: host
  MemTag tag_ = MemTag::workspace;
  Place place_ = Place::device;
};

// A typed tracked array of n elements of T.
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(MemoryTracker* tracker, MemTag tag, size_t n, Place place = Place::device)
      : alloc_(tracker, tag, n * sizeof(T), place), n_(n) {}
  T* data() const { return static_cast<T*>(alloc_.data()); }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T& operator[](size_t i) const { return data()[i]; }
  std::span<T> span() const { return {data(), n_}; }
  T* begin() const { return data(); }
  T* end() const { return data() + n_; }
  MemTag tag() const { return alloc_.tag(); }
  Place place() const { return alloc_.place(); }
  void reset() { alloc_.release(); n_ = 0; }

 private:
  Allocation alloc_;
  size_t n_ = 0;
};

}  // namespace pb
