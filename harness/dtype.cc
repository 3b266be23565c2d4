#include "harness/dtype.h"

namespace pb {

bool parse_dtype(std::string_view s, DType* out) {
  if (s == "fp64" || s == "f64" || s == "float64" || s == "F64") { *out = DType::f64; return true; }
  if (s == "fp32" || s == "f32" || s == "float32" || s == "F32") { *out = DType::f32; return true; }
  if (s == "bf16" || s == "bfloat16" || s == "BF16") { *out = DType::bf16; return true; }
  return false;
}

}  // namespace pb
