// safetensors writer and validating reader. The reader checks every number in
// the header against the file before any tensor is touched; sizes are
// computed with overflow checks, so a hostile header cannot cause an
// out-of-bounds read.
#include "harness/io/safetensors.h"

#include "harness/io/output_file.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <new>
#include <fstream>
#include <functional>
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
  write_output_file(path, serialize(), "safetensors");
}

// The 8-byte little-endian header length, checked against what follows it.
uint64_t SafetensorsFile::header_length(const char* first8, uint64_t file_size, const std::string& name) {
  const std::string where = "safetensors " + name + ": ";
  if (file_size < 8)
    throw InputError(where + "file too short (" + std::to_string(file_size) + " bytes; the header length alone takes 8)");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(first8[i])) << (8 * i);
  if (n > file_size - 8)
    throw InputError(where + "header length " + std::to_string(n) + " exceeds the " + std::to_string(file_size - 8) +
                     " bytes after it (truncated or corrupt)");
  if (n > kMaxHeader) throw InputError(where + "header length " + std::to_string(n) + " exceeds the 100 MiB limit");
  return n;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  const std::string where = "safetensors " + path + ": ";
  std::error_code ec;
  // A FIFO or a device would block or never end: only a regular file is read.
  if (!std::filesystem::is_regular_file(path, ec))
    throw InputError(where + (std::filesystem::exists(path, ec) ? "not a regular file" : "cannot open"));
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw InputError(where + "cannot open");
  const uint64_t size = uint64_t(f.tellg());
  f.seekg(0);
  // The header first, checked against the file's size, before the data is
  // read: a forged length or offset costs nothing.
  char first8[8] = {};
  f.read(first8, std::streamsize(std::min<uint64_t>(size, 8)));
  if (!f) throw InputError(where + "read error");
  const uint64_t n = header_length(first8, size, path);
  std::string header(size_t(n), '\0');
  f.read(header.data(), std::streamsize(n));
  if (!f) throw InputError(where + "read error");
  SafetensorsFile file = parse_header(header.data(), n, size - 8 - n, path);
  try {
    file.bytes_.resize(size_t(size));
  } catch (const std::bad_alloc&) {
    throw InputError(where + "its " + std::to_string(size) + " bytes do not fit in this machine's memory");
  }
  std::memcpy(file.bytes_.data(), first8, 8);
  std::memcpy(file.bytes_.data() + 8, header.data(), size_t(n));
  f.read(file.bytes_.data() + 8 + n, std::streamsize(size - 8 - n));
  if (!f) throw InputError(where + "read error");
  return file;
}

SafetensorsFile SafetensorsFile::parse(std::vector<char> bytes, std::string name) {
  char first8[8] = {};
  if (bytes.size() >= 8) std::memcpy(first8, bytes.data(), 8);  // shorter: header_length names it
  const uint64_t n = header_length(first8, bytes.size(), name);
  SafetensorsFile file = parse_header(bytes.data() + 8, n, bytes.size() - 8 - n, name);
  file.bytes_ = std::move(bytes);
  return file;
}

namespace {

// One header entry (a tensor's dtype, shape and offsets) checked against the
// data section's size.
TensorInfo tensor_entry(const std::string& key, const nlohmann::json& v, uint64_t data_size,
                        const std::function<void(const std::string&)>& fail) {
  const std::string t = "tensor '" + key + "': ";
  if (!v.is_object()) fail(t + "entry is not an object");
  TensorInfo ti;
  ti.name = key;
  const auto dtype = v.find("dtype");
  if (dtype == v.end() || !dtype->is_string()) fail(t + "missing string 'dtype'");
  const std::string dt = dtype->get<std::string>();
  if (!parse_st_dtype(dt, &ti.dtype)) fail(t + "unsupported dtype '" + dt + "' (supported: F64, F32, BF16, I64, I32)");
  const auto shape = v.find("shape");
  if (shape == v.end() || !shape->is_array()) fail(t + "missing array 'shape'");
  uint64_t count = 1;
  for (const auto& d : *shape) {
    if (!d.is_number_unsigned()) fail(t + "shape holds a non-integer or negative dimension");
    const uint64_t dim = d.get<uint64_t>();
    // Shape holds int64: after a 0 the count no longer bounds the next dimension.
    if (dim > uint64_t(INT64_MAX)) fail(t + "shape is too large");
    if (dim != 0 && count > (uint64_t(1) << 62) / dim) fail(t + "shape is too large");
    count *= dim;
    ti.shape.push_back(int64_t(dim));
  }
  const auto offsets = v.find("data_offsets");
  const nlohmann::json none;
  const nlohmann::json& off = offsets != v.end() ? *offsets : none;
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    fail(t + "'data_offsets' must be [begin, end] of non-negative integers");
  ti.begin = off[0].get<uint64_t>();
  ti.end = off[1].get<uint64_t>();
  if (ti.begin > ti.end) fail(t + "data_offsets begin " + std::to_string(ti.begin) + " > end " + std::to_string(ti.end));
  if (ti.end > data_size)
    fail(t + "data_offsets [" + std::to_string(ti.begin) + ", " + std::to_string(ti.end) +
         ") out of range: the data section has " + std::to_string(data_size) + " bytes");
  const uint64_t need = count * st_dtype_size(ti.dtype);
  if (ti.end - ti.begin != need)
    fail(t + "data_offsets span " + std::to_string(ti.end - ti.begin) + " bytes but " + dt + " " +
         shape_text(ti.shape) + " needs " + std::to_string(need));
  return ti;
}

}  // namespace

// The header is parsed as a stream of entries: each top-level entry is
// checked as soon as its object ends and then dropped (the parser callback
// returns false), so the parse is linear in the header and holds one entry
// at a time. (A whole-document parse into an insertion-ordered JSON object
// looked every key up in a vector: quadratic, 24 s at 200,000 entries.)
SafetensorsFile SafetensorsFile::parse_header(const char* header, uint64_t n, uint64_t data_size,
                                              const std::string& name) {
  const std::string where = "safetensors " + name + ": ";
  const std::function<void(const std::string&)> fail = [&](const std::string& what) { throw InputError(where + what); };
  SafetensorsFile file;
  file.name_ = name;
  file.data_start_ = 8 + n;
  bool root_object = false;  // the document is an object: its members are the entries
  std::string key;           // the entry being read
  using Event = nlohmann::json::parse_event_t;
  const nlohmann::json::parser_callback_t on_event = [&](int depth, Event event, nlohmann::json& parsed) {
    if (depth == 0 && event == Event::object_start) root_object = true;
    if (depth != 1 || !root_object) return true;
    switch (event) {
      case Event::key:
        key = parsed.get<std::string>();
        return true;
      case Event::value:  // a number, string, bool or null as an entry
      case Event::array_end:
        fail(key == "__metadata__" ? "__metadata__ is not an object" : "tensor '" + key + "': entry is not an object");
        return false;
      case Event::object_end:
        if (key == "__metadata__") {
          for (const auto& [mk, mv] : parsed.items()) {
            if (!mv.is_string()) fail("__metadata__ '" + mk + "' is not a string");
            file.metadata_[mk] = mv.get<std::string>();
          }
        } else {
          file.tensors_.push_back(tensor_entry(key, parsed, data_size, fail));
        }
        return false;  // checked: dropped from the document
      default:
        return true;
    }
  };
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(header, header + n, on_event);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    fail(std::string("header is not valid JSON: ") + e.what());
  }
  if (!h.is_object()) fail("header is not a JSON object");
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
  for (size_t i = 0; i < file.tensors_.size(); ++i)
    if (!file.index_.emplace(file.tensors_[i].name, i).second)
      fail("tensor '" + file.tensors_[i].name + "' appears twice in the header");
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
