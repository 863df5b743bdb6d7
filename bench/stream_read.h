#pragma once
// The streaming read the benchmarks measure memory bandwidth with (bench/gemm_candidates.cpp's
// `bandwidth`, bench/nbits_gemv.cpp): sums n floats with 64-byte loads into 8 independent
// accumulators, so the loads, not the adds, bound it.
#include <immintrin.h>

#include <cstddef>

inline __attribute__((target("avx512f"))) float read_sum(const float* p, size_t n) {
  __m512 a[8];
  for (auto& v : a) v = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 128 <= n; i += 128)
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) a[j] = _mm512_add_ps(a[j], _mm512_loadu_ps(p + i + 16 * j));
  for (int j = 1; j < 8; ++j) a[0] = _mm512_add_ps(a[0], a[j]);
  float s = _mm512_reduce_add_ps(a[0]);
  for (; i < n; ++i) s += p[i];
  return s;
}
