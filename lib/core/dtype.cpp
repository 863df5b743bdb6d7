// The one place dtype conversions live (see core/dtype.h for the rules).
#include "core/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace rlx {
namespace {

// Storage type and canonical value access per dtype: floats go through f32,
// integers and bool through int64.
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
template <> struct El<DType::i32> {
  using T = int32_t;
  static constexpr bool integral = true;
  static int64_t get(T v) { return v; }
  static T put(int64_t v) { return (int32_t)(uint32_t)(uint64_t)v; }  // low 32 bits
};
template <> struct El<DType::i64> {
  using T = int64_t;
  static constexpr bool integral = true;
  static int64_t get(T v) { return v; }
  static T put(int64_t v) { return v; }
};
template <> struct El<DType::boolean> {
  using T = uint8_t;
  static constexpr bool integral = true;
  static int64_t get(T v) { return v != 0; }
  static T put(int64_t v) { return v != 0; }
};

template <> struct El<DType::i8> {
  using T = int8_t;
  static constexpr bool integral = true;
  static int64_t get(T v) { return v; }
  static T put(int64_t v) { return (int8_t)(uint8_t)(uint64_t)v; }  // low 8 bits
};
template <> struct El<DType::u8> {
  using T = uint8_t;
  static constexpr bool integral = true;
  static int64_t get(T v) { return v; }
  static T put(int64_t v) { return (uint8_t)(uint64_t)v; }  // low 8 bits
};

template <class I>
I float_to_int(float f) {
  if (f != f) return 0;
  constexpr double lo = (double)std::numeric_limits<I>::min(), hi = (double)std::numeric_limits<I>::max();
  if ((double)f <= lo) return std::numeric_limits<I>::min();
  if ((double)f >= hi) return std::numeric_limits<I>::max();
  return (I)f;  // truncation toward zero
}

template <DType F, DType To>
void convert_loop(const void* src, void* dst, int64_t n) {
  using S = typename El<F>::T;
  using D = typename El<To>::T;
  const S* s = static_cast<const S*>(src);
  D* d = static_cast<D*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (To == DType::boolean) {
      if constexpr (El<F>::integral) d[i] = El<F>::get(s[i]) != 0;
      else d[i] = El<F>::get(s[i]) != 0.f;
    } else if constexpr (!El<F>::integral && !El<To>::integral) {
      d[i] = El<To>::put(El<F>::get(s[i]));
    } else if constexpr (!El<F>::integral) {  // float -> integer
      d[i] = float_to_int<D>(El<F>::get(s[i]));
    } else if constexpr (!El<To>::integral) {  // integer -> float
      d[i] = El<To>::put((float)El<F>::get(s[i]));
    } else {
      d[i] = El<To>::put(El<F>::get(s[i]));
    }
  }
}

template <DType F>
void convert_from(const void* src, void* dst, DType to, int64_t n) {
  switch (to) {
    case DType::f32: return convert_loop<F, DType::f32>(src, dst, n);
    case DType::f16: return convert_loop<F, DType::f16>(src, dst, n);
    case DType::bf16: return convert_loop<F, DType::bf16>(src, dst, n);
    case DType::i32: return convert_loop<F, DType::i32>(src, dst, n);
    case DType::i64: return convert_loop<F, DType::i64>(src, dst, n);
    case DType::boolean: return convert_loop<F, DType::boolean>(src, dst, n);
    case DType::i8: return convert_loop<F, DType::i8>(src, dst, n);
    case DType::u8: return convert_loop<F, DType::u8>(src, dst, n);
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
    case DType::f32: return convert_from<DType::f32>(src, dst, to, n);
    case DType::f16: return convert_from<DType::f16>(src, dst, to, n);
    case DType::bf16: return convert_from<DType::bf16>(src, dst, to, n);
    case DType::i32: return convert_from<DType::i32>(src, dst, to, n);
    case DType::i64: return convert_from<DType::i64>(src, dst, to, n);
    case DType::boolean: return convert_from<DType::boolean>(src, dst, to, n);
    case DType::i8: return convert_from<DType::i8>(src, dst, to, n);
    case DType::u8: return convert_from<DType::u8>(src, dst, to, n);
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
    default: return float_to_int<int64_t>((float)element_as_double(data, t, i));
  }
}

}  // namespace rlx
