// Fuzz target: the safetensors reader (harness/io/safetensors.h
// SafetensorsFile::parse, what SafetensorsFile::open runs on a file's bytes).
// Only pb::InputError may leave it. On a file it accepts, every promise of the
// header is checked: tensors tile the data section in offset order, each span
// is dtype size x numel with non-negative dimensions, every byte of every
// tensor is readable through raw() and read<T>() (ASan sees any overrun), a
// read with the wrong type is an InputError; and writing the tensors back with
// SafetensorsWriter gives a file that reads to the same tensors and metadata.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/io/safetensors.h"
#include "harness/status.h"
#include "suites/fuzz/fuzz_check.h"

namespace {

template <class T>
size_t read_count(const pb::SafetensorsFile& f, const std::string& name) {
  const std::vector<T> v = f.read<T>(name);
  return v.size();
}

size_t read_as_stored(const pb::SafetensorsFile& f, const pb::TensorInfo& ti) {
  switch (ti.dtype) {
    case pb::StDType::F64: return read_count<double>(f, ti.name);
    case pb::StDType::F32: return read_count<float>(f, ti.name);
    case pb::StDType::BF16: return read_count<pb::bf16>(f, ti.name);
    case pb::StDType::I64: return read_count<int64_t>(f, ti.name);
    case pb::StDType::I32: return read_count<int32_t>(f, ti.name);
  }
  return 0;
}

bool wrong_type_refused(const pb::SafetensorsFile& f, const pb::TensorInfo& ti) {
  try {
    if (ti.dtype == pb::StDType::F32) (void)f.read<double>(ti.name);
    else (void)f.read<float>(ti.name);
  } catch (const pb::InputError&) {
    return true;
  }
  return false;
}

void check_writer_round_trip(const pb::SafetensorsFile& f) {
  pb::SafetensorsWriter w;
  for (const auto& ti : f.tensors()) {
    if (ti.name.empty()) return;  // the reader takes any JSON key, the writer refuses ""
    const auto raw = f.raw(ti.name);
    w.add(ti.name, ti.dtype, ti.shape, raw.data(), raw.size());
  }
  for (const auto& [k, v] : f.metadata()) w.set_metadata(k, v);
  const std::string image = w.serialize();
  const pb::SafetensorsFile g = pb::SafetensorsFile::parse(std::vector<char>(image.begin(), image.end()), "<written>");
  PB_FUZZ_CHECK(g.metadata() == f.metadata(), w.header_json());
  PB_FUZZ_CHECK(g.tensors().size() == f.tensors().size(), w.header_json());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const pb::TensorInfo &a = f.tensors()[i], &b = g.tensors()[i];
    PB_FUZZ_CHECK(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.begin == b.begin && a.end == b.end,
                  a.name + " vs " + b.name);
    const auto ra = f.raw(a.name), rb = g.raw(b.name);
    PB_FUZZ_CHECK(std::equal(ra.begin(), ra.end(), rb.begin(), rb.end()), a.name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<char> bytes(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size);
  pb::SafetensorsFile f;
  try {
    f = pb::SafetensorsFile::parse(std::move(bytes), "fuzz.safetensors");
  } catch (const pb::InputError&) {
    return 0;
  }
  uint64_t at = 0, header = 0;
  for (int i = 0; i < 8; ++i) header |= uint64_t(data[i]) << (8 * i);
  for (const auto& ti : f.tensors()) {
    PB_FUZZ_CHECK(ti.begin == at && ti.end >= ti.begin, ti.name);
    at = ti.end;
    for (int64_t d : ti.shape) PB_FUZZ_CHECK(d >= 0, ti.name + ": dimension " + std::to_string(d));
    PB_FUZZ_CHECK(uint64_t(ti.numel()) * pb::st_dtype_size(ti.dtype) == ti.end - ti.begin, ti.name);
    PB_FUZZ_CHECK(f.contains(ti.name) && &f.info(ti.name) == &ti, ti.name);
    const auto raw = f.raw(ti.name);
    unsigned sum = 0;
    for (char c : raw) sum += uint8_t(c);
    volatile unsigned sink = sum;
    (void)sink;
    PB_FUZZ_CHECK(read_as_stored(f, ti) == size_t(ti.numel()), ti.name);
    PB_FUZZ_CHECK(wrong_type_refused(f, ti), ti.name);
  }
  PB_FUZZ_CHECK(8 + header + at == size, "the tensors do not cover the data section");
  check_writer_round_trip(f);
  return 0;
}
