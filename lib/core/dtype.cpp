// The one place dtype conversions live (see core/dtype.h for the rules).
#include "core/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace rlx {
namespace {

// Storage type and canonical value access per dtype: f32/f16/bf16 go through f32, f64
// through double; integers and bool through int64 (u64 through uint64).
template <DType D> struct El;
template <> struct El<DType::f32> {
  using T = float;
  static constexpr bool integral = false;
  static float get(T v) { return v; }
  static T put(float v) { return v; }
};
template <> struct El<DType::f16> {
  using T = uint16_t;
  static constexpr bool integral = false;
  static float get(T v) { return f16_to_f32(v); }
  static T put(float v) { return f32_to_f16(v); }
};
template <> struct El<DType::bf16> {
  using T = uint16_t;
  static constexpr bool integral = false;
  static float get(T v) { return bf16_to_f32(v); }
  static T put(float v) { return f32_to_bf16(v); }
};
template <> struct El<DType::f64> {
  using T = double;
  static constexpr bool integral = false;
  static double get(T v) { return v; }
  static T put(double v) { return v; }
};
// Integers: put keeps the low bits of the two's complement value (the wrap of NumPy's astype).
template <DType D, class S>
struct IntEl {
  using T = S;
  static constexpr bool integral = true;
  static auto get(T v) {
    if constexpr (std::is_same_v<S, uint64_t>) return v;
    else return (int64_t)v;
  }
  static T put(int64_t v) { return (T)(uint64_t)v; }
};
template <> struct El<DType::i32> : IntEl<DType::i32, int32_t> {};
template <> struct El<DType::i64> : IntEl<DType::i64, int64_t> {};
template <> struct El<DType::i8> : IntEl<DType::i8, int8_t> {};
template <> struct El<DType::u8> : IntEl<DType::u8, uint8_t> {};
template <> struct El<DType::i16> : IntEl<DType::i16, int16_t> {};
template <> struct El<DType::u16> : IntEl<DType::u16, uint16_t> {};
template <> struct El<DType::u32> : IntEl<DType::u32, uint32_t> {};
template <> struct El<DType::u64> : IntEl<DType::u64, uint64_t> {};
template <> struct El<DType::boolean> {
  using T = uint8_t;
  static constexpr bool integral = true;
  static int64_t get(T v) { return v != 0; }
  static T put(int64_t v) { return v != 0; }
};

// Truncation toward zero, NaN -> 0, saturated to I's range (exact for every float: f32 and f16
// widen to double exactly).
template <class I>
I float_to_int(double f) {
  if (f != f) return 0;
  constexpr double lo = (double)std::numeric_limits<I>::min(), hi = (double)std::numeric_limits<I>::max();
  if (f <= lo) return std::numeric_limits<I>::min();
  if (f >= hi) return std::numeric_limits<I>::max();
  return (I)f;  // truncation toward zero
}

// d rounded to f32 "to odd" (toward zero, the last bit set when inexact): rounding that value
// to f16/bf16 (far fewer bits) to nearest even gives the correctly rounded result of d itself,
// with no double rounding.
float f64_to_f32_odd(double d) {
  float f = (float)d;
  if (d != d || (double)f == d) return f;
  if (std::fabs((double)f) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // toward zero (inf -> max)
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= 1;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <DType F, DType To>
void convert_loop(const void* src, void* dst, int64_t n) {
  using S = typename El<F>::T;
  using D = typename El<To>::T;
  const S* s = static_cast<const S*>(src);
  D* d = static_cast<D*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (To == DType::boolean) {
      d[i] = El<F>::get(s[i]) != 0;
    } else if constexpr (!El<F>::integral && !El<To>::integral) {
      if constexpr (To == DType::f64) d[i] = (double)El<F>::get(s[i]);
      else if constexpr (F != DType::f64) d[i] = El<To>::put(El<F>::get(s[i]));
      else if constexpr (To == DType::f32) d[i] = (float)s[i];  // one rounding, to nearest even
      else d[i] = El<To>::put(f64_to_f32_odd(s[i]));
    } else if constexpr (!El<F>::integral) {  // float -> integer
      d[i] = float_to_int<D>((double)El<F>::get(s[i]));
    } else if constexpr (!El<To>::integral) {  // integer -> float: one rounding from the exact value
      if constexpr (To == DType::f64) d[i] = (double)El<F>::get(s[i]);
      else d[i] = El<To>::put((float)El<F>::get(s[i]));
    } else {
      d[i] = El<To>::put((int64_t)El<F>::get(s[i]));
    }
  }
}

#define RLX_ALL_DTYPES(X) X(f32) X(f16) X(bf16) X(i32) X(i64) X(boolean) X(i8) X(u8) X(f64) X(i16) X(u16) X(u32) X(u64)

template <DType F>
void convert_from(const void* src, void* dst, DType to, int64_t n) {
  switch (to) {
#define RLX_TO(D) case DType::D: return convert_loop<F, DType::D>(src, dst, n);
    RLX_ALL_DTYPES(RLX_TO)
#undef RLX_TO
  }
}

}  // namespace

void convert_elements(const void* src, DType from, void* dst, DType to, int64_t n) {
  if (n <= 0) return;
  if (from == to) {
    if (src != dst) std::memmove(dst, src, (size_t)n * dtype_size(from));
    return;
  }
  switch (from) {
#define RLX_FROM(D) case DType::D: return convert_from<DType::D>(src, dst, to, n);
    RLX_ALL_DTYPES(RLX_FROM)
#undef RLX_FROM
  }
}

double element_as_double(const void* data, DType t, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(data) + (size_t)i * dtype_size(t);
  switch (t) {
    case DType::f32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::f16: { uint16_t v; std::memcpy(&v, p, 2); return f16_to_f32(v); }
    case DType::bf16: { uint16_t v; std::memcpy(&v, p, 2); return bf16_to_f32(v); }
    case DType::i32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::i64: { int64_t v; std::memcpy(&v, p, 8); return (double)v; }
    case DType::boolean: return *p != 0;
    case DType::i8: return (int8_t)*p;
    case DType::u8: return *p;
    case DType::f64: { double v; std::memcpy(&v, p, 8); return v; }
    case DType::i16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::u16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::u32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::u64: { uint64_t v; std::memcpy(&v, p, 8); return (double)v; }
  }
  return 0;
}

int64_t element_as_i64(const void* data, DType t, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(data) + (size_t)i * dtype_size(t);
  switch (t) {
    case DType::i32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::i64: { int64_t v; std::memcpy(&v, p, 8); return v; }
    case DType::boolean: return *p != 0;
    case DType::i8: return (int8_t)*p;
    case DType::u8: return *p;
    case DType::i16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::u16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::u32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::u64: { uint64_t v; std::memcpy(&v, p, 8); return (int64_t)v; }  // the bits (a wrap beyond 2^63)
    default: return float_to_int<int64_t>(element_as_double(data, t, i));
  }
}

}  // namespace rlx
