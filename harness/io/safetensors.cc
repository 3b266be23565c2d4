// safetensors writer and validating reader. The reader checks every number in
// the header against the file before any tensor is touched; sizes are
// computed with overflow checks, so a hostile header cannot cause an
// out-of-bounds read.
#include "harness/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "harness/status.h"

namespace pb {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; add byte swapping");

namespace {

using Json = nlohmann::ordered_json;
constexpr uint64_t kMaxHeader = 100u << 20;  // the reference implementation's limit

void put_u64_le(std::string* s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s->push_back(char(uint8_t(v >> (8 * i))));
}

std::string shape_text(const Shape& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) t += ", ";
    t += std::to_string(s[i]);
  }
  return t + "]";
}

}  // namespace

std::string_view st_dtype_name(StDType t) {
  switch (t) {
    case StDType::F64: return "F64";
    case StDType::F32: return "F32";
    case StDType::BF16: return "BF16";
    case StDType::I64: return "I64";
    case StDType::I32: return "I32";
  }
  return "?";
}

size_t st_dtype_size(StDType t) {
  switch (t) {
    case StDType::F64: case StDType::I64: return 8;
    case StDType::F32: case StDType::I32: return 4;
    case StDType::BF16: return 2;
  }
  return 0;
}

bool parse_st_dtype(std::string_view s, StDType* out) {
  for (StDType t : {StDType::F64, StDType::F32, StDType::BF16, StDType::I64, StDType::I32})
    if (st_dtype_name(t) == s) {
      *out = t;
      return true;
    }
  return false;
}

StDType st_dtype(DType t) {
  return t == DType::f64 ? StDType::F64 : t == DType::f32 ? StDType::F32 : StDType::BF16;
}

void SafetensorsWriter::add(std::string name, StDType dtype, Shape shape, const void* data, size_t bytes) {
  if (name.empty() || name == "__metadata__") throw std::invalid_argument("safetensors: invalid tensor name '" + name + "'");
  for (const auto& e : entries_)
    if (e.name == name) throw std::invalid_argument("safetensors: tensor '" + name + "' added twice");
  for (int64_t d : shape)
    if (d < 0) throw std::invalid_argument("safetensors: tensor '" + name + "' has a negative dimension");
  if (bytes != size_t(numel(shape)) * st_dtype_size(dtype))
    throw std::invalid_argument("safetensors: tensor '" + name + "': " + std::to_string(bytes) + " bytes for " +
                                std::string(st_dtype_name(dtype)) + " " + shape_text(shape));
  const uint64_t begin = data_.size();
  data_.insert(data_.end(), static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  entries_.push_back({std::move(name), dtype, std::move(shape), begin, data_.size()});
}

void SafetensorsWriter::add(std::string name, const Tensor& t) {
  add(std::move(name), st_dtype(t.dtype()), t.shape(), t.raw(), t.bytes());
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

std::string SafetensorsWriter::header_json() const {
  Json h = Json::object();
  if (!metadata_.empty()) h["__metadata__"] = metadata_;
  for (const auto& e : entries_)
    h[e.name] = {{"dtype", st_dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

std::string SafetensorsWriter::serialize() const {
  const std::string header = header_json();
  std::string out;
  out.reserve(8 + header.size() + data_.size());
  put_u64_le(&out, header.size());
  out += header;
  out.append(data_.data(), data_.size());
  return out;
}

void SafetensorsWriter::write(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  const std::string image = serialize();
  // A failed write or rename leaves neither a torn file nor the temporary.
  auto fail = [&](const std::string& why) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw InputError("safetensors " + path + ": " + why);
  };
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw InputError("safetensors " + path + ": cannot open " + tmp + " for writing");
    f.write(image.data(), std::streamsize(image.size()));
    f.flush();
    if (!f) fail("write to " + tmp + " failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("cannot rename " + tmp + ": " + ec.message());
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw InputError("safetensors " + path + ": cannot open");
  std::vector<char> bytes(size_t(f.tellg()));
  f.seekg(0);
  f.read(bytes.data(), std::streamsize(bytes.size()));
  if (!f) throw InputError("safetensors " + path + ": read error");
  return parse(std::move(bytes), path);
}

SafetensorsFile SafetensorsFile::parse(std::vector<char> bytes, std::string name) {
  const std::string where = "safetensors " + name + ": ";
  auto fail = [&](const std::string& what) { throw InputError(where + what); };
  if (bytes.size() < 8)
    fail("file too short (" + std::to_string(bytes.size()) + " bytes; the header length alone takes 8)");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
  if (n > bytes.size() - 8)
    fail("header length " + std::to_string(n) + " exceeds the " + std::to_string(bytes.size() - 8) +
         " bytes after it (truncated or corrupt)");
  if (n > kMaxHeader) fail("header length " + std::to_string(n) + " exceeds the 100 MiB limit");
  Json h;
  try {
    h = Json::parse(bytes.begin() + 8, bytes.begin() + 8 + long(n));
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    fail(std::string("header is not valid JSON: ") + e.what());
  }
  if (!h.is_object()) fail("header is not a JSON object");

  SafetensorsFile file;
  file.name_ = std::move(name);
  file.data_start_ = 8 + n;
  const uint64_t data_size = bytes.size() - file.data_start_;
  for (const auto& [key, v] : h.items()) {
    if (key == "__metadata__") {
      if (!v.is_object()) fail("__metadata__ is not an object");
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) fail("__metadata__ '" + mk + "' is not a string");
        file.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string t = "tensor '" + key + "': ";
    if (!v.is_object()) fail(t + "entry is not an object");
    TensorInfo ti;
    ti.name = key;
    if (!v.contains("dtype") || !v["dtype"].is_string()) fail(t + "missing string 'dtype'");
    const std::string dt = v["dtype"].get<std::string>();
    if (!parse_st_dtype(dt, &ti.dtype)) fail(t + "unsupported dtype '" + dt + "' (supported: F64, F32, BF16, I64, I32)");
    if (!v.contains("shape") || !v["shape"].is_array()) fail(t + "missing array 'shape'");
    uint64_t count = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) fail(t + "shape holds a non-integer or negative dimension");
      const uint64_t dim = d.get<uint64_t>();
      // Shape holds int64: after a 0 the count no longer bounds the next dimension.
      if (dim > uint64_t(INT64_MAX)) fail(t + "shape is too large");
      if (dim != 0 && count > (uint64_t(1) << 62) / dim) fail(t + "shape is too large");
      count *= dim;
      ti.shape.push_back(int64_t(dim));
    }
    const auto& off = v.contains("data_offsets") ? v["data_offsets"] : Json();
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(t + "'data_offsets' must be [begin, end] of non-negative integers");
    ti.begin = off[0].get<uint64_t>();
    ti.end = off[1].get<uint64_t>();
    if (ti.begin > ti.end) fail(t + "data_offsets begin " + std::to_string(ti.begin) + " > end " + std::to_string(ti.end));
    if (ti.end > data_size)
      fail(t + "data_offsets [" + std::to_string(ti.begin) + ", " + std::to_string(ti.end) + ") out of range: the data section has " +
           std::to_string(data_size) + " bytes");
    const uint64_t need = count * st_dtype_size(ti.dtype);
    if (ti.end - ti.begin != need)
      fail(t + "data_offsets span " + std::to_string(ti.end - ti.begin) + " bytes but " + dt + " " + shape_text(ti.shape) +
           " needs " + std::to_string(need));
    file.tensors_.push_back(std::move(ti));
  }
  std::stable_sort(file.tensors_.begin(), file.tensors_.end(),
                   [](const TensorInfo& a, const TensorInfo& b) { return std::pair(a.begin, a.end) < std::pair(b.begin, b.end); });
  uint64_t at = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& ti : file.tensors_) {
    if (ti.begin < at) fail("tensors '" + prev->name + "' and '" + ti.name + "' overlap");
    if (ti.begin > at)
      fail("gap of " + std::to_string(ti.begin - at) + " bytes before tensor '" + ti.name + "' (data must be contiguous)");
    at = ti.end;
    prev = &ti;
  }
  if (at != data_size)
    fail("tensors use " + std::to_string(at) + " of the " + std::to_string(data_size) + " data bytes (trailing bytes)");
  for (size_t i = 0; i < file.tensors_.size(); ++i) file.index_[file.tensors_[i].name] = i;
  file.bytes_ = std::move(bytes);
  return file;
}

bool SafetensorsFile::contains(std::string_view tensor) const { return index_.find(tensor) != index_.end(); }

const TensorInfo& SafetensorsFile::info(std::string_view tensor) const {
  const auto it = index_.find(tensor);
  if (it == index_.end()) throw InputError("safetensors " + name_ + ": no tensor named '" + std::string(tensor) + "'");
  return tensors_[it->second];
}

std::span<const char> SafetensorsFile::raw(std::string_view tensor) const {
  const TensorInfo& ti = info(tensor);
  return {bytes_.data() + data_start_ + ti.begin, size_t(ti.end - ti.begin)};
}

void SafetensorsFile::check_dtype(const TensorInfo& ti, StDType want) const {
  if (ti.dtype != want)
    throw InputError("safetensors " + name_ + ": tensor '" + ti.name + "' is " + std::string(st_dtype_name(ti.dtype)) +
                     ", read as " + std::string(st_dtype_name(want)));
}

}  // namespace pb
