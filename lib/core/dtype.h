#pragma once
// Element types of the graph format. A tensor holds its values in its dtype:
// f32 4 bytes, f16/bf16 2 (IEEE half / bfloat16 bits), i32 4, i64 8, bool 1 (0 or 1).
// Every conversion between dtypes goes through convert_elements (core/dtype.cpp).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace rlx {

enum class DType : uint8_t { f32, f16, bf16, i32, i64, boolean };

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::boolean: return "bool";
  }
  return "?";
}

inline std::optional<DType> parse_dtype(std::string_view s) {
  if (s == "f32") return DType::f32;
  if (s == "f16") return DType::f16;
  if (s == "bf16") return DType::bf16;
  if (s == "i32") return DType::i32;
  if (s == "i64") return DType::i64;
  if (s == "bool") return DType::boolean;
  return std::nullopt;
}

inline bool is_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }
inline bool is_integer(DType t) { return t == DType::i32 || t == DType::i64; }
inline bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::i64: return 8;
    case DType::boolean: return 1;
  }
  return 4;
}

// ---- half-precision conversions (round to nearest even) ----
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) { man <<= 1; exp--; }
      man &= 0x3ff;
      bits = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
  if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  // overflow -> inf
  if (absx < 0x38800000u) {  // subnormal or zero in f16
    if (absx < 0x33000000u) return (uint16_t)sign;
    uint32_t e = absx >> 23, m = (absx & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;  // 14 - (e - 112)
    uint32_t half = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t h = ((absx >> 13) - ((127 - 15) << 10));
  uint32_t rem = absx & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

inline float bf16_to_f32(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);  // quiet NaN
  uint32_t lsb = (x >> 16) & 1;
  x += 0x7fff + lsb;
  return (uint16_t)(x >> 16);
}

// Rounds an f32 value to what a tensor of dtype `t` can hold (the value `cast` produces).
inline float round_to_dtype(float v, DType t) {
  switch (t) {
    case DType::f32: return v;
    case DType::f16: return f16_to_f32(f32_to_f16(v));
    case DType::bf16: return bf16_to_f32(f32_to_bf16(v));
    case DType::i32: case DType::i64: {
      if (v != v) return 0.f;
      // Every float of magnitude >= 2^23 is already an integer; (int64_t)v would be undefined
      // from 2^63 on (e.g. an i64 value just below 2^63 rounds up to 2^63 as f32, or inf).
      if (!(v > -0x1p23f && v < 0x1p23f)) return v;
      return (float)(int64_t)v;  // truncation toward zero, as NumPy's astype
    }
    case DType::boolean: return v != 0.f ? 1.f : 0.f;
  }
  return v;
}

// The rule for a value written as text (an inline --input SPEC, a graph constant's value):
// integer dtypes take integers in their range (i32 [-2^31, 2^31), i64 [-2^63, 2^63)), float
// dtypes any value that does not overflow f32 (infinities and NaN as such). Nothing is
// saturated or rounded into range. Returns "" or why `v` does not fit, e.g. "is not an
// integer in range" (the message's subject is the caller's: "i32 value '3e9' ...").
inline std::string literal_value_problem(double v, DType t) {
  if (is_integer(t)) {
    const double limit = t == DType::i32 ? 0x1p31 : 0x1p63;
    if (!std::isfinite(v) || v != std::trunc(v) || v < -limit || v >= limit) return "is not an integer in range";
    return "";
  }
  // 0x1.ffffffp127 is where rounding to f32 gives infinity.
  if (std::isfinite(v) && std::fabs(v) >= 0x1.ffffffp127) return "is out of range for f32";
  return "";
}

// Converts `n` elements of dtype `from` at `src` into dtype `to` at `dst` (host memory,
// native byte order; src and dst must not overlap unless from == to). The rules (the
// values `cast` produces, and what NumPy's astype gives where it is defined):
//   float -> float    f32 -> f16/bf16 round to nearest even (overflow -> inf); widening is exact
//   float -> integer  truncation toward zero, NaN -> 0, saturated to the integer's range
//   integer -> float  nearest representable value (exact for |v| <= 2^24 in f32)
//   i64 -> i32        keeps the low 32 bits (two's complement wrap, as NumPy and ONNX Runtime)
//   any -> bool       value != 0 (NaN -> true);  bool -> any: 0 or 1
void convert_elements(const void* src, DType from, void* dst, DType to, int64_t n);
// Element `i` of an array of dtype `t`, as double (exact for every dtype but i64 beyond 2^53)
// and as int64 (floats truncated toward zero and saturated, NaN -> 0; integers exact).
double element_as_double(const void* data, DType t, int64_t i);
int64_t element_as_i64(const void* data, DType t, int64_t i);

}  // namespace rlx
