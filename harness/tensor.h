// A tensor: dtype + shape over one tracked allocation. Typed access checks the
// dtype, so a kernel can never read bf16 bits as float.
#pragma once
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/dtype.h"
#include "harness/memory.h"

namespace pb {

using Shape = std::vector<int64_t>;

inline int64_t numel(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>());
}
std::string shape_str(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  Tensor(MemoryTracker* tracker, MemTag tag, DType dtype, Shape shape, Place place = Place::device)
      : dtype_(dtype), shape_(std::move(shape)),
        alloc_(tracker, tag, size_t(pb::numel(shape_)) * dtype_size(dtype), place) {}

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return pb::numel(shape_); }
  size_t bytes() const { return alloc_.bytes(); }
  void* raw() const { return alloc_.data(); }
  MemTag tag() const { return alloc_.tag(); }

  template <class T> T* data() const {
    if (dtype_of<T>() != dtype_)
      throw std::logic_error("tensor is " + std::string(dtype_name(dtype_)) + ", accessed as " +
                             std::string(dtype_name(dtype_of<T>())));
    return static_cast<T*>(alloc_.data());
  }

 private:
  DType dtype_ = DType::f32;
  Shape shape_;
  Allocation alloc_;
};

}  // namespace pb
