// The one-row 4-bit product (a decode step's matmul_nbits, f32 activations) in exact integer
// arithmetic: see qgemm.h, nbits4_row1_bfp, for what it computes and how accurate it is.
//
// Activations. Per block of 32 (the weights' block), a = amax / 8323072 (127 * 65536) is the
// block's unit and X = round(x / a), clamped to +-8323072, a 24-bit integer: x as block floating
// point with the 24-bit significand of f32 (|x - X a| <= a / 2 + the rounding of 1 / a, about
// amax * 2^-23.9). X is split into three signed bytes, X = 65536 p1 + 256 p2 + p3 (balanced digits:
// p2, p3 in [-128, 127], so p1 in [-127, 127]), stored per 128-value group g as six runs of 64
// bytes: [g][piece][even k, odd k][64], byte m of a run being the piece of x[128 g + 2 m (+1)].
//
// Weights. The 64 bytes of a column's group g are 16 dword lanes; lane i holds k = 128 g + 8 i ..
// + 7 (one block: i / 4), the low nibbles the even k and the high nibbles the odd k, in the order
// of the activations' runs. Per lane, with vpdpbusd (4 u8 x s8 products added into int32):
//   s = ((q . p1) * 256 + q . p2) * 256 + q . p3 = sum over the lane's 8 k of q_k X_k, exactly
// (|s| <= 8 * 15 * 8323072 < 2^30). Per lane in f32: t += float(s) * (b * a) with b the block's
// weight scale; the zero points' part, sum_blocks b z (a sum X), is taken after the loop from
// the exact integer block sums, as nbits4_row1 takes it from f32 ones.
//
// Per 64 weight bytes: 6 vpdpbusd, 1 FMA and 1 multiply (the FMA pipes: 4 cycles on Zen 5) and an
// AND, a shift and an AND for the nibbles, 2 shifts and an add for the pieces, a conversion and a
// vpermps for the scales (the other pipes): 17 vector ops, against 26 for nbits4_row1_x8's f32
// path (each nibble shifted down, looked up in a 0..15 table and multiplied in f32).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cpu/qgemm.h"
#include "backends/cpu/thread_pool.h"

namespace rlx::cpu {

namespace {

constexpr float kXMax = 8323072.f;  // 127 * 65536

// A row's activations in the kernel's form (see above), reused across calls on a thread.
struct BfpRow {
  std::vector<int8_t> p;   // [groups][3][2][64]
  std::vector<float> la;   // [groups][16]: the lane's block unit a
  std::vector<float> as;   // [blocks]: a * sum X of the block (the x's as represented)
};

// false where a block holds a NaN or an infinity (the caller takes the f32 kernel).
__attribute__((target("avx512f,avx512bw,avx512vl"))) bool prepare(const float* x, int64_t K, BfpRow& r) {
  const int64_t groups = K / 128, kb = K / 32;
  r.p.resize((size_t)(groups * 384));
  r.la.resize((size_t)(groups * 16));
  r.as.resize((size_t)kb);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i c128 = _mm512_set1_epi32(128), c255 = _mm512_set1_epi32(255);
  const __m512 hi = _mm512_set1_ps(kXMax), lo = _mm512_set1_ps(-kXMax);
  for (int64_t b = 0; b < kb; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
    if (_mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q)) return false;  // NaN
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    if (!(amax <= 3.4e38f)) return false;  // infinity
    const float a = amax / kXMax, inv = amax > 0.f ? kXMax / amax : 0.f;
    const __m512 vi = _mm512_set1_ps(inv);
    const int64_t g = b / 4, q = b % 4;  // group, and the block's 16 bytes within each run
    __m512i sum = _mm512_setzero_si512();
    for (int par = 0; par < 2; ++par) {
      const __m512 v = _mm512_permutex2var_ps(v0, par ? odd : even, v1);
      __m512 s = _mm512_mul_ps(v, vi);
      s = _mm512_min_ps(_mm512_max_ps(s, lo), hi);
      const __m512i X = _mm512_cvt_roundps_epi32(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      sum = _mm512_add_epi32(sum, X);
      const __m512i p3 = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(X, c128), c255), c128);
      const __m512i Y = _mm512_srai_epi32(_mm512_sub_epi32(X, p3), 8);
      const __m512i p2 = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(Y, c128), c255), c128);
      const __m512i p1 = _mm512_srai_epi32(_mm512_sub_epi32(Y, p2), 8);
      int8_t* o = r.p.data() + g * 384 + par * 64 + q * 16;
      _mm_storeu_si128((__m128i*)o, _mm512_cvtepi32_epi8(p1));
      _mm_storeu_si128((__m128i*)(o + 128), _mm512_cvtepi32_epi8(p2));
      _mm_storeu_si128((__m128i*)(o + 256), _mm512_cvtepi32_epi8(p3));
    }
    r.as[b] = (float)_mm512_reduce_add_epi32(sum) * a;
    for (int i = 0; i < 4; ++i) r.la[g * 16 + q * 4 + i] = a;
  }
  return true;
}

// ((lo . p1e + hi . p1o) * 256 + lo . p2e + hi . p2o) * 256 + lo . p3e + hi . p3o per dword
// (vpdpbusd: u8 . s8, 4 products added into int32). One asm block: with the intrinsics GCC 12
// copied the accumulator to a new register around each vpdpbusd (as qgemm.cpp's dpbusd512 notes),
// and the copies took vector slots the kernel is bound by.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline __m512i chain(__m512i lo, __m512i hi, __m512i p1e,
                                                                                       __m512i p1o, __m512i p2e,
                                                                                       __m512i p2o, __m512i p3e,
                                                                                       __m512i p3o) {
  __m512i t;
  asm("vpxord %0, %0, %0\n\t"
      "vpdpbusd %3, %1, %0\n\t"
      "vpdpbusd %4, %2, %0\n\t"
      "vpslld $8, %0, %0\n\t"
      "vpdpbusd %5, %1, %0\n\t"
      "vpdpbusd %6, %2, %0\n\t"
      "vpslld $8, %0, %0\n\t"
      "vpdpbusd %7, %1, %0\n\t"
      "vpdpbusd %8, %2, %0"
      : "=&v"(t)
      : "v"(lo), "v"(hi), "v"(p1e), "v"(p1o), "v"(p2e), "v"(p2o), "v"(p3e), "v"(p3o));
  return t;
}

template <int NC>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void columns(const BfpRow& r, int64_t K,
                                                                               const uint8_t* B, const float* sc,
                                                                               const uint8_t* zp, int64_t zcols,
                                                                               int64_t n0, int64_t n1, float* C) {
  const int64_t kb = K / 32, groups = K / 128;
  const __m512i m15 = _mm512_set1_epi8(15);
  const __m512i quarter = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const int8_t* P = r.p.data();
  for (int64_t n = n0; n < n1; n += NC) {
    __m512 tot[NC];
    const uint8_t* col[NC];
    const float* s[NC];
    for (int c = 0; c < NC; ++c) tot[c] = _mm512_setzero_ps(), col[c] = B + (n + c) * kb * 16, s[c] = sc + (n + c) * kb;
    for (int64_t g = 0; g < groups; ++g) {
      // the next column group's weights and scales (a column is too short a stream for the
      // hardware prefetchers, as in nbits4_row1)
      for (int c = 0; c < NC; ++c) _mm_prefetch((const char*)(col[c] + NC * kb * 16 + g * 64), _MM_HINT_T0);
      if (g % 4 == 0)
        for (int c = 0; c < NC; ++c) _mm_prefetch((const char*)(s[c] + NC * kb + g * 4), _MM_HINT_T0);
      const int8_t* pg = P + g * 384;
      const __m512 la = _mm512_loadu_ps(r.la.data() + g * 16);
      const __m512i p1e = _mm512_loadu_si512(pg), p1o = _mm512_loadu_si512(pg + 64), p2e = _mm512_loadu_si512(pg + 128),
                    p2o = _mm512_loadu_si512(pg + 192), p3e = _mm512_loadu_si512(pg + 256), p3o = _mm512_loadu_si512(pg + 320);
      for (int c = 0; c < NC; ++c) {
        const __m512i x = _mm512_loadu_si512((const void*)(col[c] + g * 64));
        const __m512i lo = _mm512_and_si512(x, m15), hi = _mm512_and_si512(_mm512_srli_epi32(x, 4), m15);
        // ((q . p1) * 256 + q . p2) * 256 + q . p3, one chain
        const __m512i sx = chain(lo, hi, p1e, p1o, p2e, p2o, p3e, p3o);
        const __m512 bs = _mm512_permutexvar_ps(quarter, _mm512_castps128_ps512(_mm_loadu_ps(s[c] + g * 4)));
        tot[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sx), _mm512_mul_ps(bs, la), tot[c]);
      }
    }
    for (int c = 0; c < NC; ++c) {
      // sum_b b z (a sum X): 16 blocks a step, then the rest one by one
      const uint8_t* z = zp ? zp + (n + c) * zcols : nullptr;
      __m512 acc = _mm512_setzero_ps();
      int64_t b = 0;
      for (; b + 16 <= kb; b += 16) {
        __m512 zv = _mm512_set1_ps(8.f);
        if (z) {
          const __m128i by = _mm_loadl_epi64((const __m128i*)(z + b / 2));
          const __m128i l = _mm_and_si128(by, _mm_set1_epi8(15)), h = _mm_and_si128(_mm_srli_epi16(by, 4), _mm_set1_epi8(15));
          zv = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(l, h)));
        }
        acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(s[c] + b), zv), _mm512_loadu_ps(r.as.data() + b), acc);
      }
      float corr = _mm512_reduce_add_ps(acc);
      for (; b < kb; ++b) corr += s[c][b] * (float)(z ? (z[b / 2] >> ((b % 2) * 4)) & 15 : 8) * r.as[b];
      C[n + c] = _mm512_reduce_add_ps(tot[c]) - corr;
    }
  }
}

}  // namespace

bool nbits4_row1_bfp(const float* A, int64_t K, const uint8_t* B, const float* scales, const uint8_t* zp, int64_t N,
                     float* C, Threads th) {
  static const bool ok = qgemm_isa() == QIsa::Avx512Vnni && qisa_supported(QIsa::Avx512Vnni) && !std::getenv("RLX_NBITS_F32");
  if (!ok || K < 128 || K % 128 != 0 || N < 1) return false;
  thread_local BfpRow row;
  if (!prepare(A, K, row)) return false;
  const int64_t zcols = (K / 32 * 4 + 7) / 8;
  const BfpRow& r = row;
  auto body = [&](int64_t n0, int64_t n1) {
    const int64_t n8 = n0 + (n1 - n0) / 8 * 8;
    columns<8>(r, K, B, scales, zp, zcols, n0, n8, C);
    columns<1>(r, K, B, scales, zp, zcols, n8, n1, C);
  };
  if (th == Threads::Single) body(0, N);
  else ThreadPool::global().parallel_for(N, 16, body);
  return true;
}

}  // namespace rlx::cpu
