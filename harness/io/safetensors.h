// safetensors files (Hugging Face format): u64 little-endian header length N,
// N bytes of JSON header {"__metadata__": {str: str}, name: {"dtype",
// "shape", "data_offsets": [begin, end]}}, then the raw little-endian data,
// offsets relative to the data section.
// Invariants: the writer pads the header with spaces so N % 8 == 0 (data
// starts 8-byte aligned) and lays tensors out contiguously in insertion
// order; the reader accepts only files whose tensors tile the data section
// exactly (sorted by offset: no gap, no overlap, no trailing bytes, each span
// equal to dtype size x numel), as the reference implementation does; that
// also rejects duplicate names, which JSON parsing would silently merge.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "harness/dtype.h"
#include "harness/tensor.h"

namespace pb {

enum class StDType : uint8_t { F64, F32, BF16, I64, I32 };

std::string_view st_dtype_name(StDType t);
size_t st_dtype_size(StDType t);
bool parse_st_dtype(std::string_view s, StDType* out);
StDType st_dtype(DType t);

template <class T> constexpr StDType st_dtype_of();
template <> constexpr StDType st_dtype_of<double>() { return StDType::F64; }
template <> constexpr StDType st_dtype_of<float>() { return StDType::F32; }
template <> constexpr StDType st_dtype_of<bf16>() { return StDType::BF16; }
template <> constexpr StDType st_dtype_of<int64_t>() { return StDType::I64; }
template <> constexpr StDType st_dtype_of<int32_t>() { return StDType::I32; }

class SafetensorsWriter {
 public:
  // Copies `bytes` of data. std::invalid_argument if the name is empty,
  // "__metadata__" or already added, or bytes != dtype size x numel(shape).
  void add(std::string name, StDType dtype, Shape shape, const void* data, size_t bytes);
  template <class T>
  void add(std::string name, const T* data, Shape shape) {
    const size_t n = size_t(numel(shape));
    add(std::move(name), st_dtype_of<T>(), std::move(shape), data, n * sizeof(T));
  }
  template <class T>
  void add(std::string name, const std::vector<T>& v, Shape shape) {
    add(std::move(name), v.data(), std::move(shape));
  }
  void add(std::string name, const Tensor& t);  // host-readable tensor
  void set_metadata(std::string key, std::string value);

  // The padded JSON header and the whole file image.
  std::string header_json() const;
  std::string serialize() const;
  // Writes PATH.tmp then renames it over PATH, so a reader never sees a
  // half-written file. InputError naming the file on failure.
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    StDType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries_;
  std::vector<char> data_;
  std::map<std::string, std::string> metadata_;
};

struct TensorInfo {
  std::string name;
  StDType dtype = StDType::F32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // within the data section
  int64_t numel() const { return pb::numel(shape); }
};

class SafetensorsFile {
 public:
  // Reads and validates the whole file; InputError "safetensors FILE: <problem>".
  // The header is read and checked against the file's size first, so a
  // forged length, shape or offset is refused before the data is allocated;
  // a FIFO or a device is refused (only a regular file is read).
  static SafetensorsFile open(const std::string& path);
  static SafetensorsFile parse(std::vector<char> bytes, std::string name);

  const std::string& name() const { return name_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // offset order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(std::string_view tensor) const;
  // InputError if absent.
  const TensorInfo& info(std::string_view tensor) const;
  std::span<const char> raw(std::string_view tensor) const;
  // The values; InputError if the stored dtype is not T's.
  template <class T>
  std::vector<T> read(std::string_view tensor) const {
    const TensorInfo& ti = info(tensor);
    check_dtype(ti, st_dtype_of<T>());
    std::vector<T> out(size_t(ti.numel()));
    if (!out.empty()) std::memcpy(out.data(), bytes_.data() + data_start_ + ti.begin, out.size() * sizeof(T));
    return out;
  }

 private:
  static uint64_t header_length(const char* first8, uint64_t file_size, const std::string& name);
  // The header's n bytes, validated against a data section of data_size bytes.
  static SafetensorsFile parse_header(const char* header, uint64_t n, uint64_t data_size, const std::string& name);
  void check_dtype(const TensorInfo& ti, StDType want) const;
  std::string name_;
  std::vector<char> bytes_;
  size_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace pb
