#pragma once
// Vectorisable f32 transcendental functions for the CPU executor's block loops.
// Branch-free (selects, no calls) so that GCC auto-vectorises the loops (this needs
// -fno-trapping-math, set for the CPU executor's sources). The fm_* functions are
// always inlined so that a caller compiled for AVX2 (cpu_fused.cpp) gets them in AVX2.
// Accuracy (checked against float64 in tests/test_cpu_math.cpp):
//   exp: < 2 ulp;  erf (relative): < 4.5e-7;  erfc (relative): < 3e-7;  tanh: < 3e-7 relative.
#include <cmath>
#include <cstdint>
#include <cstring>

namespace rlx::cpu {

#define RLX_FM inline __attribute__((always_inline))

RLX_FM float fm_exp(float x) {
  // exp(x) = 2^n * exp(r), r = x - n ln2, |r| <= ln2/2.
  const float hi = 88.7228391f, lo = -103.972084f;
  float xc = x > hi ? hi : (x < lo ? lo : x);
  xc = x == x ? xc : 0.0f;  // NaN: (int32_t)n below would be undefined (the result is x anyway)
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = xc - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // scale by 2^n in two steps so that n down to -150 and up to 128 stay exact
  int32_t ni = (int32_t)n;
  int32_t n1 = ni / 2, n2 = ni - n1;
  int32_t b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  float res = p * s1 * s2;
  res = x > hi ? INFINITY : res;
  res = x < lo ? 0.0f : res;
  return x != x ? x : res;
}

// Numerical Recipes' Chebyshev fit: erfc(z) = t exp(-z^2 + P(t)), t = 1/(1 + z/2), z >= 0,
// relative error ~1.2e-7. Returns P(t).
RLX_FM float fm_erfc_poly(float t) {
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return p;
}

// erfc(a / sqrt(2)) for a >= 0, keeping relative accuracy in the far tail: the
// exponent -a^2/2 is never rounded as a whole. With ah = a with its low 12
// mantissa bits cleared, ah^2/2 is exact and exp(-a^2/2 + p) is evaluated as
// exp(-ah^2/2) * exp(p - (a - ah)(a + ah)/2).
RLX_FM float fm_erfc_scaled_tail(float a) {
  float z = a * 0.70710678118654752f;
  float t = 1.0f / (1.0f + 0.5f * z);
  float p = fm_erfc_poly(t);
  uint32_t bits;
  std::memcpy(&bits, &a, 4);
  bits &= 0xfffff000u;
  float ah;
  std::memcpy(&ah, &bits, 4);
  float d = 0.5f * (a - ah) * (a + ah);
  return t * fm_exp(-0.5f * ah * ah) * fm_exp(p - d);
}

RLX_FM float fm_erf(float x) {
  // erf(x) = x P(x^2) / Q(x^2) on [-4, 4] (the rational fit of Eigen's fast float erf):
  // no exp and no 1 - erfc cancellation, so it is relative-accurate near zero and
  // about 3x cheaper than an erfc-based form. Beyond |x| = 3.8, erf is +-1 within
  // 1.1e-7. Relative error < 3.3e-7 evaluated with FMA (the AVX2 clones), < 4.5e-7 without.
  float xc = x > 4.0f ? 4.0f : (x < -4.0f ? -4.0f : x);
  float x2 = xc * xc;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 - 2.10102402082508e-06f;
  p = p * x2 - 5.69250639462346e-05f;
  p = p * x2 - 7.34990630326855e-04f;
  p = p * x2 - 2.95459980854025e-03f;
  p = p * x2 - 1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 - 2.13374055278905e-04f;
  q = q * x2 - 1.68282697438203e-03f;
  q = q * x2 - 7.37332916720468e-03f;
  q = q * x2 - 1.42647390514189e-02f;
  float r = (xc * p) / q;
  float one = x < 0 ? -1.0f : 1.0f;
  r = std::fabs(x) > 3.8f ? one : r;
  return x != x ? x : r;
}

RLX_FM float fm_tanh(float x) {
  float ax = std::fabs(x);
  float x2 = x * x;
  float s = -1382.0f / 155925.0f;
  s = s * x2 + 62.0f / 2835.0f;
  s = s * x2 - 17.0f / 315.0f;
  s = s * x2 + 2.0f / 15.0f;
  s = s * x2 - 1.0f / 3.0f;
  float small = x + x * x2 * s;
  float e = fm_exp(2.0f * (ax < 20.f ? ax : 20.f));
  float big = 1.0f - 2.0f / (e + 1.0f);
  big = x < 0 ? -big : big;
  float r = ax < 0.3f ? small : big;
  return x != x ? x : r;
}

RLX_FM float fm_sigmoid(float x) { return 1.0f / (1.0f + fm_exp(-x)); }

RLX_FM float fm_gelu_erf(float x) {
  // 0.5 x (1 + erf(x/√2)); for x < 0 use erfc to avoid cancellation.
  float z = x * 0.70710678118654752f;
  float pos = 1.0f + fm_erf(z);
  float neg = fm_erfc_scaled_tail(-x);
  return 0.5f * x * (x >= 0 ? pos : neg);
}

RLX_FM float fm_gelu_tanh(float x) {
  // 0.5 x (1 + tanh(u)) = x * sigmoid(2u): accurate for negative u too.
  float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return x * fm_sigmoid(2.0f * u);
}

#define RLX_FAST_LOOP(name, f)                                                  \
  inline void name(const float* __restrict x, float* __restrict r, int64_t n) { \
    for (int64_t j = 0; j < n; ++j) r[j] = f(x[j]);                             \
  }
RLX_FAST_LOOP(fast_exp, fm_exp)
RLX_FAST_LOOP(fast_erf, fm_erf)
RLX_FAST_LOOP(fast_tanh, fm_tanh)
RLX_FAST_LOOP(fast_sigmoid, fm_sigmoid)
RLX_FAST_LOOP(fast_gelu_erf, fm_gelu_erf)
RLX_FAST_LOOP(fast_gelu_tanh, fm_gelu_tanh)
inline void fast_silu(const float* __restrict x, float* __restrict r, int64_t n) {
  for (int64_t j = 0; j < n; ++j) r[j] = x[j] * fm_sigmoid(x[j]);
}
#undef RLX_FAST_LOOP

}  // namespace rlx::cpu
