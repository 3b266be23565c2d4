// Element types of parabench tensors: fp64 (the truth), fp32, and bf16 storage.
// Invariant: bf16 is storage only; arithmetic on it happens in fp32 (acc_t<bf16>
// is float), and float -> bf16 rounds to nearest even, so every kernel, the
// reference and every backend round identically.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace pb {

enum class DType : uint8_t { f64, f32, bf16 };

struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(from_float(f)) {}
  explicit bf16(double d) : bits(from_float(static_cast<float>(d))) {}
  explicit operator float() const { return std::bit_cast<float>(uint32_t(bits) << 16); }
  explicit operator double() const { return double(float(*this)); }
  static uint16_t from_float(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return uint16_t((u + rounding_bias) >> 16);
  }
  friend bool operator==(bf16 a, bf16 b) { return a.bits == b.bits; }
};

// Accumulation/compute type for a storage type.
template <class T> struct acc_type { using type = T; };
template <> struct acc_type<bf16> { using type = float; };
template <class T> using acc_t = typename acc_type<T>::type;

// Converts between any of the storage types (through the compute type).
template <class To, class From> inline To cast(From x) {
  if constexpr (std::is_same_v<To, From>) return x;
  else if constexpr (std::is_same_v<To, bf16>) return bf16(static_cast<float>(static_cast<double>(x)));
  else if constexpr (std::is_same_v<From, bf16>) return static_cast<To>(static_cast<float>(x));
  else return static_cast<To>(x);
}

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }

inline constexpr size_t dtype_size(DType t) { return t == DType::f64 ? 8 : t == DType::f32 ? 4 : 2; }
inline std::string_view dtype_name(DType t) {
  return t == DType::f64 ? "fp64" : t == DType::f32 ? "fp32" : "bf16";
}
// safetensors spelling: F64, F32, BF16.
inline std::string_view dtype_safetensors_name(DType t) {
  return t == DType::f64 ? "F64" : t == DType::f32 ? "F32" : "BF16";
}
// Parses "fp64"/"f64"/"float64", "fp32"/..., "bf16". Returns false on anything else.
bool parse_dtype(std::string_view s, DType* out);

// Machine epsilon (unit roundoff * 2) of a storage type.
inline constexpr double dtype_eps(DType t) {
  return t == DType::f64 ? 2.220446049250313e-16 : t == DType::f32 ? 1.1920928955078125e-07 : 0.0078125;
}

// Calls f(T{}) with T the C++ type of dtype t.
template <class F> decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f64: return f(double{});
    case DType::f32: return f(float{});
    default: return f(bf16{});
  }
}

}  // namespace pb
