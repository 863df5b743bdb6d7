// Helpers shared by every rlx compute shader, and by the fused elementwise
// kernels generated at run time. Defines the functions that the GLSL forms of
// lib/ir/elementwise.def call. Include it after the `local_size` layout.
//
// Accuracy targets match the CPU executor (libm): erf and tanh within ~1 ulp,
// NaN propagating max/min, C semantics for pow.

float rlx_nan() { return uintBitsToFloat(0x7fc00000u); }
float rlx_inf() { return uintBitsToFloat(0x7f800000u); }

// Flat index of this invocation in a 1-D grid laid out over (x, y) work groups.
uint rlx_global_index() {
  return (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
}
// Flat index of this work group in a grid laid out over (x, y).
uint rlx_group_index() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

// erf with max error ~1 ulp (N. Juffa's single-precision minimax approximation).
float rlx_erf(float a) {
  float t = abs(a);
  float s = a * a;
  float r;
  if (t > 0.927734375) {
    r = fma(-1.72853470e-5, t, 3.83197126e-4);
    float u = fma(-3.88396438e-3, t, 2.42546219e-2);
    r = fma(r, s, u);
    r = fma(r, t, -1.06777877e-1);
    r = fma(r, t, -6.34846687e-1);
    r = fma(r, t, -1.28717512e-1);
    r = fma(r, t, -t);
    r = 1.0 - exp(r);
    r = a < 0.0 ? -r : r;
  } else {
    r = -5.96761703e-4;
    r = fma(r, s, 4.99119423e-3);
    r = fma(r, s, -2.67681349e-2);
    r = fma(r, s, 1.12819925e-1);
    r = fma(r, s, -3.76125336e-1);
    r = fma(r, s, 1.28379166e-1);
    r = fma(r, a, a);
  }
  return r;
}

// tanh: Taylor series near 0 (no cancellation), exp(-2|x|) form elsewhere
// (never overflows: exact +-1 for large |x|). Max error ~2 ulp.
float rlx_tanh(float x) {
  float ax = abs(x);
  if (ax < 0.55) {
    float s = x * x;
    float r = 5.900274409e-4;
    r = fma(r, s, -1.455834387e-3);
    r = fma(r, s, 3.592128036e-3);
    r = fma(r, s, -8.863235530e-3);
    r = fma(r, s, 2.186948854e-2);
    r = fma(r, s, -5.396825397e-2);
    r = fma(r, s, 1.333333333e-1);
    r = fma(r, s, -3.333333333e-1);
    return fma(x * s, r, x);
  }
  if (isnan(x)) return x;
  float e = exp(-2.0 * ax);
  float t = (1.0 - e) / (1.0 + e);
  return x < 0.0 ? -t : t;
}

float rlx_gelu_erf(float x) { return 0.5 * x * (1.0 + rlx_erf(x * 0.70710678118654752)); }
float rlx_gelu_tanh(float x) { return 0.5 * x * (1.0 + rlx_tanh(0.79788456080286536 * (x + 0.044715 * x * x * x))); }

float rlx_max(float a, float b) { return (isnan(a) || isnan(b)) ? rlx_nan() : max(a, b); }
float rlx_min(float a, float b) { return (isnan(a) || isnan(b)) ? rlx_nan() : min(a, b); }

// pow with C99 semantics (negative bases with integral exponents, zeros, ones),
// exact repeated multiplication for small integral exponents.
float rlx_pow(float a, float b) {
  if (b == 0.0 || a == 1.0) return 1.0;
  if (isnan(a) || isnan(b)) return rlx_nan();
  bool b_int = b == trunc(b);
  if (b_int && abs(b) <= 64.0) {
    uint e = uint(abs(b));
    float base = a, r = 1.0;
    while (e != 0u) {
      if ((e & 1u) != 0u) r *= base;
      base *= base;
      e >>= 1;
    }
    return b < 0.0 ? 1.0 / r : r;
  }
  if (a == -1.0 && isinf(b)) return 1.0;
  if (b == 0.5 && a >= 0.0) return sqrt(a);
  if (a < 0.0 && !b_int) return rlx_nan();
  float r = exp2(b * log2(abs(a)));
  bool odd = b_int && abs(b) < 16777216.0 && (uint(abs(b)) & 1u) == 1u;
  return (a < 0.0 && odd) ? -r : r;
}

// softplus as max(x, 0) + log1p(exp(-|x|)); log1p(u) = log(w) * u / (w - 1) with w = 1 + u
// keeps its accuracy for tiny u (GLSL has no log1p).
float rlx_softplus(float x) {
  float u = exp(-abs(x));
  float w = 1.0 + u;
  float l = w == 1.0 ? u : log(w) * u / (w - 1.0);
  return max(x, 0.0) + l;
}
float rlx_sign(float x) { return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : x); }
// C fmod: a - trunc(a / b) * b, exact (fma) once the quotient is right; the quotient from a
// division of a few ulp is corrected by one step. Division by zero gives NaN.
float rlx_fmod(float a, float b) {
  if (b == 0.0 || isnan(a) || isnan(b) || isinf(a)) return rlx_nan();
  if (isinf(b)) return a;
  float q = trunc(a / b);
  float r = fma(-q, b, a);
  float ab = abs(b);
  if (abs(r) >= ab) r = fma(-sign(r) * sign(b), b, r);
  if (r != 0.0 && (r < 0.0) != (a < 0.0)) r += (a < 0.0 ? -ab : ab);
  return r;
}
// ONNX Mod with fmod=0: the remainder takes the divisor's sign.
float rlx_mod(float a, float b) {
  float r = rlx_fmod(a, b);
  return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r;
}

float rlx_silu_vjp(float dy, float x) {
  float s = 1.0 / (1.0 + exp(-x));
  return dy * s * (1.0 + x * (1.0 - s));
}
float rlx_gelu_erf_vjp(float dy, float x) {
  float cdf = 0.5 * (1.0 + rlx_erf(x * 0.70710678118654752));
  float pdf = exp(-0.5 * x * x) * 0.39894228040143268;
  return dy * (cdf + x * pdf);
}
float rlx_gelu_tanh_vjp(float dy, float x) {
  const float k = 0.79788456080286536, c = 0.044715;
  float t = rlx_tanh(k * (x + c * x * x * x));
  return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x));
}

// Rounding of `cast` (core/dtype.h round_to_dtype): 0 f32, 1 f16, 2 bf16, 3 integer, 4 bool,
// 5 i8, 6 u8 (from floats), 7 i8, 8 u8 (from integers).
float rlx_round_f16(float f) {
  uint x = floatBitsToUint(f);
  uint sgn = x & 0x80000000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return f;
  if (ax >= 0x477ff000u) return uintBitsToFloat(sgn | 0x7f800000u);
  if (ax < 0x38800000u) {  // f16 subnormal: multiples of 2^-24, ties to even
    float q = roundEven(uintBitsToFloat(ax) * 16777216.0);
    return uintBitsToFloat(sgn | floatBitsToUint(q * 5.9604644775390625e-8));
  }
  uint rem = ax & 0x1fffu, base = ax & ~0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (ax & 0x2000u) != 0u)) base += 0x2000u;
  return uintBitsToFloat(sgn | base);
}
float rlx_round_bf16(float f) {
  uint x = floatBitsToUint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return f;
  x += 0x7fffu + ((x >> 16) & 1u);
  return uintBitsToFloat(x & 0xffff0000u);
}
float rlx_round(float v, uint mode) {
  if (mode == 1u) return rlx_round_f16(v);
  if (mode == 2u) return rlx_round_bf16(v);
  // integer: truncation toward zero (floats >= 2^23 and inf are already integral); NaN -> 0
  if (mode == 3u) return isnan(v) ? 0.0 : trunc(v);
  if (mode == 4u) return v != 0.0 ? 1.0 : 0.0;
  // i8 / u8 from a float: truncated, saturated (5, 6); from an integer: the low 8 bits (7, 8)
  if (mode == 5u) return isnan(v) ? 0.0 : clamp(trunc(v), -128.0, 127.0);
  if (mode == 6u) return isnan(v) ? 0.0 : clamp(trunc(v), 0.0, 255.0);
  if (mode == 7u) { float w = v - 256.0 * floor(v / 256.0); return w >= 128.0 ? w - 256.0 : w; }
  if (mode == 8u) return v - 256.0 * floor(v / 256.0);
  return v;
}

// 16-bit storage (f16 and bf16 tensors held in 2 bytes on the device, read and written as
// uint16_t bit patterns): exact widening to f32, and narrowing rounded to nearest even
// (the same rounding as rlx_round / core/dtype.h). Integer arithmetic only, so they behave
// the same on every device whatever its float controls.
float rlx_h2f(uint h) {
  // Zeros and subnormals by hand (a driver may flush f16 subnormals in unpackHalf2x16); normal
  // numbers, infinities and NaNs through the hardware conversion (exact: f32 holds every f16).
  if ((h & 0x7c00u) == 0u) return uintBitsToFloat(((h & 0x8000u) << 16) | floatBitsToUint(float(h & 0x3ffu) * 5.9604644775390625e-8));
  return unpackHalf2x16(h).x;
}
// Without branches (selects only: a branchy form inlined into attention's stores made its f16
// variant 2.9x slower than bf16 on the H200). Normal range: the exponent rebiased and the 13
// dropped bits rounded to nearest even in one integer add (a carry into the exponent is right, up
// to infinity from 65520 on); below 2^-14: the subnormal's multiple of 2^-24, rounded by roundEven.
uint rlx_f2h(float f) {
  uint x = floatBitsToUint(f);
  uint s = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  uint nrm = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;  // wraps mod 2^32: (a - (112 << 23) + 0xfff + odd) >> 13
  uint sub = uint(roundEven(uintBitsToFloat(min(a, 0x38800000u)) * 16777216.0));
  uint r = a < 0x38800000u ? sub : nrm;
  r = a >= 0x47800000u ? (a > 0x7f800000u ? 0x7e00u : 0x7c00u) : r;  // NaN (quiet, as core/dtype.h), overflow, inf
  return s | r;
}
float rlx_bf2f(uint h) { return uintBitsToFloat(h << 16); }
uint rlx_f2bf(float f) {
  uint x = floatBitsToUint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40u;  // NaN stays NaN (quiet)
  return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
}
// Storage kinds (spec constants *DT of the ".h16" shader variants): 0 f32, 1 f16, 2 bf16.
float rlx_from16(uint kind, uint h) { return kind == 2u ? rlx_bf2f(h) : rlx_h2f(h); }
uint rlx_to16(uint kind, float f) { return kind == 2u ? rlx_f2bf(f) : rlx_f2h(f); }
// Both 2-byte values of a 32-bit word (the low half first), widened exactly by integer arithmetic
// and selects (no conversion instruction, no branch): for kernels that stage pairs of halves.
// f16: the exponent rebiased by 112 (by 224 for inf / NaN); zeros and subnormals as
// (2^-14 + m 2^-24) - 2^-14, exact in f32 and never an f32 denormal.
vec2 rlx_from16x2(uint kind, uint w) {
  if (kind == 2u) return vec2(uintBitsToFloat(w << 16), uintBitsToFloat(w & 0xffff0000u));
  uvec2 h = uvec2(w & 0xffffu, w >> 16), a = h & 0x7fffu;
  uvec2 bits = (a << 13) + 0x38000000u;
  bits += mix(uvec2(0u), uvec2(0x38000000u), greaterThanEqual(a, uvec2(0x7c00u)));
  vec2 f = mix(uintBitsToFloat(bits), uintBitsToFloat(bits + 0x00800000u) - 6.103515625e-05, lessThan(a, uvec2(0x0400u)));
  return uintBitsToFloat(floatBitsToUint(f) | ((h & 0x8000u) << 16));
}

// Loads and stores of a tensor whose storage kind is a spec constant, for shaders built both
// plain (f32 only) and as ".h16": `a32` is the tensor's float[] view, `a16` its uint16_t[] view
// of the same binding (declared only under RLX_HALF). 2-byte values are widened exactly and
// results rounded once to nearest even (rlx_to16). With kind 0 (always, in the plain build) they
// are plain f32 accesses.
#ifdef RLX_HALF
#define RLX_LD(kind, a32, a16, i) ((kind) != 0u ? rlx_from16((kind), uint(a16[i])) : a32[i])
#define RLX_ST(kind, a32, a16, i, v) { if ((kind) != 0u) a16[i] = uint16_t(rlx_to16((kind), (v))); else a32[i] = (v); }
#else
#define RLX_LD(kind, a32, a16, i) (a32[i])
#define RLX_ST(kind, a32, a16, i, v) { a32[i] = (v); }
#endif

// 8-bit storage (i8/u8 tensors held as raw bytes, 4 to a 32-bit word, little-endian, as on the
// host): kernels bind such a tensor as uint[] and index it in bytes; no 8-bit storage feature is
// needed. Storage kinds 3 i8, 4 u8 (the *DT spec constants beside 0 f32, 1 f16, 2 bf16).
// Element `i` (a byte index) out of the word holding it, widened exactly to f32.
float rlx_b2f(uint kind, uint word, uint i) {
  uint b = (word >> ((i & 3u) * 8u)) & 0xffu;
  return kind == 3u ? float(int(b << 24) >> 24) : float(b);
}
// The byte stored for an integral value already in the dtype's range (the low 8 bits).
uint rlx_f2b(float v) { return uint(int(v)) & 0xffu; }
// A byte store is two atomics on the word holding it (clear the byte, then set it): invocations
// that write neighbouring bytes of one word never lose each other's bytes, whatever the kernel's
// write pattern (a plain store of a read-modified word would race). Used as
// RLX_STORE8(buffer_array, byte_index, float_value), buffer_array a uint[] without writeonly.
#define RLX_STORE8(arr, bi, v) { uint rlx_sh_ = ((bi) & 3u) * 8u, rlx_w_ = (bi) >> 2; atomicAnd(arr[rlx_w_], ~(0xffu << rlx_sh_)); atomicOr(arr[rlx_w_], rlx_f2b(v) << rlx_sh_); }
