#pragma once
// Element types of the graph format. A tensor holds its values in its dtype:
// f32 4 bytes, f16/bf16 2 (IEEE half / bfloat16 bits), i32 4, i64 8, bool 1 (0 or 1),
// i8/u8 1 (quantized values); f64 8, i16/u16 2, u32 4, u64 8 (ONNX models only: the graph
// format's JSON does not name them, docs/graph-format.md).
// Every conversion between dtypes goes through convert_elements (core/dtype.cpp).
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace rlx {

enum class DType : uint8_t { f32, f16, bf16, i32, i64, boolean, i8, u8, f64, i16, u16, u32, u64 };

// What kind of number a dtype holds.
enum class DClass : uint8_t { Float, Signed, Unsigned, Bool };

// One row per dtype: everything the graph format, the file readers and writers, the `--input`
// spec parser and the importers need to know about it. Adding a dtype is adding a row (plus
// its kernels). i8/u8 are storage types for quantized values: data-movement ops, cast and the
// quantization ops take them; arithmetic refuses them (docs/graph-format.md, compute rules).
struct DTypeTraits {
  DType dtype;
  const char* name;         // in the graph format and in messages
  uint8_t bytes;            // per element
  DClass cls;
  int64_t min, max;         // the integer range (bool: 0..1; floats: unused, 0..0)
  const char* safetensors;  // the safetensors dtype code
  const char* npy;          // the npy descr (little-endian)
  int onnx;                 // the ONNX TensorProto element type
  bool json;                // named by the graph format (JSON graphs); the others come from ONNX models
};

inline constexpr DTypeTraits kDTypeTable[] = {
    {DType::f32, "f32", 4, DClass::Float, 0, 0, "F32", "<f4", 1, true},
    {DType::f16, "f16", 2, DClass::Float, 0, 0, "F16", "<f2", 10, true},
    {DType::bf16, "bf16", 2, DClass::Float, 0, 0, "BF16", "", 16, true},  // npy has no bfloat16
    {DType::i32, "i32", 4, DClass::Signed, INT32_MIN, INT32_MAX, "I32", "<i4", 6, true},
    {DType::i64, "i64", 8, DClass::Signed, INT64_MIN, INT64_MAX, "I64", "<i8", 7, true},
    {DType::boolean, "bool", 1, DClass::Bool, 0, 1, "BOOL", "|b1", 9, true},
    {DType::i8, "i8", 1, DClass::Signed, -128, 127, "I8", "|i1", 3, true},
    {DType::u8, "u8", 1, DClass::Unsigned, 0, 255, "U8", "|u1", 2, true},
    {DType::f64, "f64", 8, DClass::Float, 0, 0, "F64", "<f8", 11, false},
    {DType::i16, "i16", 2, DClass::Signed, INT16_MIN, INT16_MAX, "I16", "<i2", 5, false},
    {DType::u16, "u16", 2, DClass::Unsigned, 0, UINT16_MAX, "U16", "<u2", 4, false},
    {DType::u32, "u32", 4, DClass::Unsigned, 0, UINT32_MAX, "U32", "<u4", 12, false},
    // u64's range is given as [0, 2^63 - 1]: values written as text (constants, --input) stop
    // there; tensors read from files and computed values use all 64 bits.
    {DType::u64, "u64", 8, DClass::Unsigned, 0, INT64_MAX, "U64", "<u8", 13, false},
};
inline constexpr int kNumDTypes = (int)(sizeof(kDTypeTable) / sizeof(kDTypeTable[0]));

inline const DTypeTraits& dtype_traits(DType t) { return kDTypeTable[(int)t]; }

inline const char* dtype_name(DType t) { return (int)t < kNumDTypes ? kDTypeTable[(int)t].name : "?"; }

inline std::optional<DType> parse_dtype(std::string_view s) {
  for (const auto& r : kDTypeTable)
    if (s == r.name) return r.dtype;
  return std::nullopt;
}
// The dtypes the graph format's JSON names (a JSON graph's `dtype` and cast's attribute): every
// row but the ONNX-only ones (f64, i16, u16, u32, u64).
inline std::optional<DType> parse_json_dtype(std::string_view s) {
  auto t = parse_dtype(s);
  if (t && !dtype_traits(*t).json) return std::nullopt;
  return t;
}
// The dtype of a safetensors code / npy descr / ONNX element type, if rlx has one.
inline std::optional<DType> dtype_from_safetensors(std::string_view s) {
  for (const auto& r : kDTypeTable)
    if (s == r.safetensors) return r.dtype;
  return std::nullopt;
}
inline std::optional<DType> dtype_from_onnx(int code) {
  for (const auto& r : kDTypeTable)
    if (code == r.onnx) return r.dtype;
  return std::nullopt;
}
// All dtype names, "f32, f16, ..." (for messages and docs).
inline std::string dtype_names() {
  std::string r;
  for (const auto& d : kDTypeTable) r += (r.empty() ? "" : ", ") + std::string(d.name);
  return r;
}

// The dtypes a JSON graph may name, "f32, f16, ..." (for the loader's messages).
inline std::string json_dtype_names() {
  std::string r;
  for (const auto& d : kDTypeTable)
    if (d.json) r += (r.empty() ? "" : ", ") + std::string(d.name);
  return r;
}

inline bool is_float(DType t) { return dtype_traits(t).cls == DClass::Float; }
// Signed or unsigned integers (i8, u8, i16, u16, i32, u32, i64, u64), not bool.
inline bool is_integer(DType t) {
  const DClass c = dtype_traits(t).cls;
  return c == DClass::Signed || c == DClass::Unsigned;
}
inline bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }
// The 8-bit quantized storage types: moved, cast and (de)quantized, never computed on.
inline bool is_quant_storage(DType t) { return t == DType::i8 || t == DType::u8; }
// Whether the integer value v fits dtype t's range (floats: always).
inline bool fits_dtype(int64_t v, DType t) {
  const auto& r = dtype_traits(t);
  return r.cls == DClass::Float || (v >= r.min && v <= r.max);
}

inline size_t dtype_size(DType t) { return dtype_traits(t).bytes; }

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
    case DType::f32: case DType::f64: return v;
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
    case DType::i8: case DType::u8: case DType::i16: case DType::u16: case DType::u32: case DType::u64: {
      // truncation toward zero, saturated to the range
      if (v != v) return 0.f;
      const auto& r = dtype_traits(t);
      if (v <= (float)r.min) return (float)r.min;
      if (v >= (float)r.max) return (float)r.max;
      return (float)(int64_t)v;
    }
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
    // The range from the traits table; max + 1 is a power of two (2^63 for i64, exact in double).
    const auto& r = dtype_traits(t);
    if (!std::isfinite(v) || v != std::trunc(v) || v < (double)r.min || v >= (double)r.max + 1.0)
      return "is not an integer in range [" + std::to_string(r.min) + ", " + std::to_string(r.max) + "]";
    return "";
  }
  if (t == DType::f64) return "";
  // 0x1.ffffffp127 is where rounding to f32 gives infinity.
  if (std::isfinite(v) && std::fabs(v) >= 0x1.ffffffp127) return "is out of range for f32";
  return "";
}

// Converts `n` elements of dtype `from` at `src` into dtype `to` at `dst` (host memory,
// native byte order; src and dst must not overlap unless from == to). The rules (the
// values `cast` produces, and what NumPy's astype gives where it is defined):
//   float -> float    f32 -> f16/bf16, f64 -> f32/f16/bf16 round to nearest even, once (overflow
//                     -> inf); widening is exact
//   float -> integer  truncation toward zero, NaN -> 0, saturated to the integer's range
//   integer -> float  nearest representable value (exact for |v| <= 2^24 in f32, 2^53 in f64)
//   i64 -> i32        keeps the low 32 bits (two's complement wrap, as NumPy and ONNX Runtime)
//   integer -> narrower integer  keeps the low bits (the same wrap: i64 -> i8/u8/i16/u16/u32,
//                     u64 <-> i64 reinterpret; float -> integer saturates, above)
//   any -> bool       value != 0 (NaN -> true);  bool -> any: 0 or 1
void convert_elements(const void* src, DType from, void* dst, DType to, int64_t n);
// Element `i` of an array of dtype `t`, as double (exact for every dtype but i64/u64 beyond 2^53)
// and as int64 (floats truncated toward zero and saturated, NaN -> 0; integers exact).
double element_as_double(const void* data, DType t, int64_t i);
int64_t element_as_i64(const void* data, DType t, int64_t i);

}  // namespace rlx
