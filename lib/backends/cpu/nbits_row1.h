#pragma once
// Pieces shared by the one-row 4-bit kernels (MatMulNBits, blocks of 32): the f32 kernel
// (qgemm.cpp) and the integer ones (nbits_row1_bfp.cpp).
#include <immintrin.h>

#include <cstdint>

namespace rlx::cpu {

// Before group g (128 weights: 64 bytes a column) of columns col[0..NC): the same group of the
// next NC columns, and every 4th group their next 4 scales. A column is too short a stream for
// the hardware prefetchers.
template <int NC>
inline void nbits4_prefetch_next_columns(const uint8_t* const (&col)[NC], const float* const (&s)[NC], int64_t kb, int64_t g) {
  for (int c = 0; c < NC; ++c) _mm_prefetch((const char*)(col[c] + NC * kb * 16 + g * 64), _MM_HINT_T0);
  if (g % 4 == 0)
    for (int c = 0; c < NC; ++c) _mm_prefetch((const char*)(s[c] + NC * kb + g * 4), _MM_HINT_T0);
}

// sum_b s_b z_b AS_b of one column (z: its packed zero points, null for the default 8): the
// zero points' part of a one-row 4-bit product, 16 blocks per step, then the rest one by one.
// The column's scale of block b is s[(b / 4) * GS + b % 4]: GS 4 for a column's own run of
// scales (ONNX's layout), 32 for the interleaved copy of PackedNbits4 (qgemm.h).
template <int GS = 4>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline float nbits4_zero_term(const float* s, const float* AS,
                                                                                  const uint8_t* z, int64_t kb) {
  auto scale = [&](int64_t b) { return s[(b / 4) * GS + b % 4]; };
  __m512 acc = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 16 <= kb; b += 16) {
    __m512 sv;
    if constexpr (GS == 4) {
      sv = _mm512_loadu_ps(s + b);
    } else {
      const float* q = s + (b / 4) * GS;
      sv = _mm512_insertf32x4(_mm512_castps128_ps512(_mm_loadu_ps(q)), _mm_loadu_ps(q + GS), 1);
      sv = _mm512_insertf32x4(sv, _mm_loadu_ps(q + 2 * GS), 2);
      sv = _mm512_insertf32x4(sv, _mm_loadu_ps(q + 3 * GS), 3);
    }
    __m512 zv = _mm512_set1_ps(8.f);
    if (z) {
      const __m128i by = _mm_loadl_epi64((const __m128i*)(z + b / 2));
      const __m128i l = _mm_and_si128(by, _mm_set1_epi8(15)), hh = _mm_and_si128(_mm_srli_epi16(by, 4), _mm_set1_epi8(15));
      zv = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(l, hh)));
    }
    acc = _mm512_fmadd_ps(_mm512_mul_ps(sv, zv), _mm512_loadu_ps(AS + b), acc);
  }
  float corr = _mm512_reduce_add_ps(acc);
  for (; b < kb; ++b) corr += scale(b) * (float)(z ? (z[b / 2] >> ((b % 2) * 4)) & 15 : 8) * AS[b];
  return corr;
}

}  // namespace rlx::cpu
