// The one-row 4-bit product (a decode step's matmul_nbits, f32 activations) in exact integer
// arithmetic: see qgemm.h, nbits4_row1_bfp, for what it computes and how accurate it is.
//
// Activations. Per block of 32 (the weights' block), a = amax / 8323072 (127 * 65536) is the
// block's unit and X = round(x * fl(1 / a)), clamped to +-8323072, a 24-bit integer: x as block
// floating point with the 24-bit significand of f32. |x - X a| <= 3 * 2^-24 |x| + a / 2 (three f32
// roundings: of 1 / a, of x / a, of a; and half a unit), i.e. <= 1.8e-7 |x| + 6.0e-8 amax. X is split into three signed bytes, X = 65536 p1 + 256 p2 + p3 (balanced digits:
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
// AND, a shift and an AND for the nibbles, 2 shifts between the pieces, a conversion and a vpermps
// for the scales (the other pipes): 15 vector ops, against 26 for nbits4_row1_x8's f32 path (each
// nibble shifted down, looked up in a 0..15 table and multiplied in f32). Measured 5.1 cycles.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cpu/host_memory.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/nbits_row1.h"
#include "backends/cpu/qgemm.h"
#include "backends/cpu/thread_pool.h"

namespace rlx::cpu {

namespace {

constexpr float kXMax = 8323072.f;  // 127 * 65536
// The least nonzero block max taken: below it the unit amax / kXMax would not be a normal float
// (and 1 / unit overflows below ~2.4e-32); such rows (every |x| of a block under 7.9e-31) go to
// the f32 kernels.
constexpr float kMinMax = 0x1p-100f;

// A row's activations in the kernel's form (see above), reused across calls on a thread.
struct BfpRow {
  std::vector<int8_t> p;   // [groups][3][2][64]
  std::vector<float> la;   // [groups][16]: the lane's block unit a
  std::vector<float> as;   // [blocks]: a * sum X of the block (the x's as represented)
};

// false where a block holds a NaN or an infinity, or its max |x| is nonzero and below kMinMax
// (the caller takes the f32 kernel).
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
    if (!(amax <= 3.4e38f) || (amax > 0.f && amax < kMinMax)) return false;  // infinity, or too small
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

// NC columns from n0 (to n1) at a time. Packed: the weights are PackedNbits4's copy (NC = 8, n0 a
// multiple of 8): column c's group g at B + n * kb * 16 + g * 512 + c * 64, its 4 scales at
// sc + n * kb + g * 32 + c * 4, so that a thread reads one sequential stream of weights and one of
// scales; else ONNX's layout (column n's groups one after the other, its scales likewise).
template <int NC, bool Packed = false>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void columns(const BfpRow& r, int64_t K,
                                                                               const uint8_t* B, const float* sc,
                                                                               const uint8_t* zp, int64_t zcols,
                                                                               int64_t n0, int64_t n1, float* C) {
  static_assert(!Packed || NC == 8, "the packed layout interleaves 8 columns");
  const int64_t kb = K / 32, groups = K / 128;
  const int64_t gstride = Packed ? 8 * 64 : 64, cstride = Packed ? 64 : kb * 16;  // bytes
  const int64_t sgstride = Packed ? 8 * 4 : 4, scstride = Packed ? 4 : kb;       // floats
  const __m512i m15 = _mm512_set1_epi8(15);
  const __m512i quarter = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const int8_t* P = r.p.data();
  for (int64_t n = n0; n < n1; n += NC) {
    __m512 tot[NC];
    const uint8_t* col[NC];
    const float* s[NC];
    for (int c = 0; c < NC; ++c) tot[c] = _mm512_setzero_ps(), col[c] = B + n * kb * 16 + c * cstride, s[c] = sc + n * kb + c * scstride;
    for (int64_t g = 0; g < groups; ++g) {
      if constexpr (Packed) {
        // 8 groups (4 KiB) ahead in the stream: the distance that read fastest (bench/nbits_gemv)
        for (int c = 0; c < NC; ++c) _mm_prefetch((const char*)(col[c] + (g + 8) * gstride), _MM_HINT_T0);
        _mm_prefetch((const char*)(s[0] + (g + 8) * sgstride), _MM_HINT_T0);
        _mm_prefetch((const char*)(s[0] + (g + 8) * sgstride + 16), _MM_HINT_T0);
      } else {
        nbits4_prefetch_next_columns<NC>(col, s, kb, g);
      }
      const int8_t* pg = P + g * 384;
      const __m512 la = _mm512_loadu_ps(r.la.data() + g * 16);
      const __m512i p1e = _mm512_loadu_si512(pg), p1o = _mm512_loadu_si512(pg + 64), p2e = _mm512_loadu_si512(pg + 128),
                    p2o = _mm512_loadu_si512(pg + 192), p3e = _mm512_loadu_si512(pg + 256), p3o = _mm512_loadu_si512(pg + 320);
      for (int c = 0; c < NC; ++c) {
        const __m512i x = _mm512_loadu_si512((const void*)(col[c] + g * gstride));
        const __m512i lo = _mm512_and_si512(x, m15), hi = _mm512_and_si512(_mm512_srli_epi32(x, 4), m15);
        // ((q . p1) * 256 + q . p2) * 256 + q . p3, one chain
        const __m512i sx = chain(lo, hi, p1e, p1o, p2e, p2o, p3e, p3o);
        const __m512 bs = _mm512_permutexvar_ps(quarter, _mm512_castps128_ps512(_mm_loadu_ps(s[c] + g * sgstride)));
        tot[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sx), _mm512_mul_ps(bs, la), tot[c]);
      }
    }
    for (int c = 0; c < NC; ++c) {
      // sum_b b z (a sum X): the scales just streamed, from the cache
      C[n + c] = _mm512_reduce_add_ps(tot[c]) -
                 nbits4_zero_term<Packed ? 32 : 4>(s[c], r.as.data(), zp ? zp + (n + c) * zcols : nullptr, kb);
    }
  }
}

// ---- 8 lanes (no AVX-512): the same activations, lanes, integer sums and scaling ----

// prepare() with AVX2: the same X (vcvtps2dq rounds to nearest even, as above), digits, layout.
__attribute__((target("avx2,fma"))) bool prepare_avx2(const float* x, int64_t K, BfpRow& r) {
  const int64_t groups = K / 128, kb = K / 32;
  r.p.resize((size_t)(groups * 384));
  r.la.resize((size_t)(groups * 16));
  r.as.resize((size_t)kb);
  const __m256 sign = _mm256_set1_ps(-0.f), hi = _mm256_set1_ps(kXMax), lo = _mm256_set1_ps(-kXMax);
  const __m256i c128 = _mm256_set1_epi32(128), c255 = _mm256_set1_epi32(255);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // bytes of A0-3, A4-7, B0-3, B4-7
  for (int64_t b = 0; b < kb; ++b) {
    __m256 v[4], m = _mm256_setzero_ps();
    int nan = 0;
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
      nan |= _mm256_movemask_ps(_mm256_cmp_ps(v[i], v[i], _CMP_UNORD_Q));
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
    }
    if (nan) return false;
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    const float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    if (!(amax <= 3.4e38f) || (amax > 0.f && amax < kMinMax)) return false;  // infinity, or too small
    const float a = amax / kXMax, inv = amax > 0.f ? kXMax / amax : 0.f;
    const __m256 vi = _mm256_set1_ps(inv);
    const int64_t g = b / 4, q = b % 4;
    __m256i sum = _mm256_setzero_si256();
    for (int par = 0; par < 2; ++par) {
      __m256i P[3][2];
      for (int half = 0; half < 2; ++half) {
        // 8 even (odd) values of v[2 half], v[2 half + 1], in order
        const __m256 e = par ? _mm256_shuffle_ps(v[2 * half], v[2 * half + 1], _MM_SHUFFLE(3, 1, 3, 1))
                             : _mm256_shuffle_ps(v[2 * half], v[2 * half + 1], _MM_SHUFFLE(2, 0, 2, 0));
        const __m256 w = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
        const __m256i X = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(w, vi), lo), hi));
        sum = _mm256_add_epi32(sum, X);
        const __m256i p3 = _mm256_sub_epi32(_mm256_and_si256(_mm256_add_epi32(X, c128), c255), c128);
        const __m256i Y = _mm256_srai_epi32(_mm256_sub_epi32(X, p3), 8);
        const __m256i p2 = _mm256_sub_epi32(_mm256_and_si256(_mm256_add_epi32(Y, c128), c255), c128);
        P[0][half] = _mm256_srai_epi32(_mm256_sub_epi32(Y, p2), 8);
        P[1][half] = p2;
        P[2][half] = p3;
      }
      int8_t* o = r.p.data() + g * 384 + par * 64 + q * 16;
      for (int piece = 0; piece < 3; ++piece) {
        const __m256i w16 = _mm256_packs_epi32(P[piece][0], P[piece][1]);  // values in [-128, 127]: exact
        const __m256i w8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w16, w16), order);
        _mm_storeu_si128((__m128i*)(o + 128 * piece), _mm256_castsi256_si128(w8));
      }
    }
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    r.as[b] = (float)_mm_cvtsi128_si32(s4) * a;
    for (int i = 0; i < 4; ++i) r.la[g * 16 + q * 4 + i] = a;
  }
  return true;
}

// acc + u8(a) . s8(b) per dword: AVX-VNNI's vpdpbusd (VEX; inline asm, so that the functions are
// compiled for AVX2 + FMA alone and the compiler never emits AVX-VNNI in the AVX2 path), or AVX2's
// vpmaddubsw (pairs into int16: |2 * 15 * 128| < 2^15, no saturation) and vpmaddwd against ones
// (pairs into int32): the same sum.
template <bool Vnni>
__attribute__((target("avx2,fma"))) inline __m256i dp256(__m256i acc, __m256i a, __m256i b) {
  if constexpr (Vnni) {
    asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b));
    return acc;
  } else {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)));
  }
}

// columns() in 8 lanes: a group's 64 bytes as two halves of 32 (lanes 0-7: blocks 0 and 1 of the
// group, lanes 8-15: blocks 2 and 3). Packed: PackedNbits4's copy interleaving 4 columns (NC = 4,
// n0 a multiple of 4): column c's group g at B + n * kb * 16 + g * 256 + c * 64, its scales at
// sc + n * kb + g * 16 + c * 4.
template <int NC, bool Vnni, bool Packed = false>
__attribute__((target("avx2,fma"))) void columns256(const BfpRow& r, int64_t K, const uint8_t* B,
                                                             const float* sc, const uint8_t* zp, int64_t zcols,
                                                             int64_t n0, int64_t n1, float* C) {
  static_assert(!Packed || NC == 4, "the 8-lane kernel's packed layout interleaves 4 columns");
  const int64_t kb = K / 32, groups = K / 128;
  const int64_t gstride = Packed ? 4 * 64 : 64, cstride = Packed ? 64 : kb * 16;  // bytes
  const int64_t sgstride = Packed ? 4 * 4 : 4, scstride = Packed ? 4 : kb;       // floats
  const __m256i m15 = _mm256_set1_epi8(15);
  const __m256i pair[2] = {_mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3)};
  const int8_t* P = r.p.data();
  for (int64_t n = n0; n < n1; n += NC) {
    __m256 tot[NC][2];
    const uint8_t* col[NC];
    const float* s[NC];
    for (int c = 0; c < NC; ++c)
      tot[c][0] = tot[c][1] = _mm256_setzero_ps(), col[c] = B + n * kb * 16 + c * cstride, s[c] = sc + n * kb + c * scstride;
    for (int64_t g = 0; g < groups; ++g) {
      if constexpr (Packed) {  // 8 groups (2 KiB) ahead in the stream
        for (int c = 0; c < NC; ++c) _mm_prefetch((const char*)(col[c] + (g + 8) * gstride), _MM_HINT_T0);
        _mm_prefetch((const char*)(s[0] + (g + 8) * sgstride), _MM_HINT_T0);
      } else {
        nbits4_prefetch_next_columns<NC>(col, s, kb, g);
      }
      for (int half = 0; half < 2; ++half) {
        const int8_t* pg = P + g * 384 + half * 32;
        const __m256 la = _mm256_loadu_ps(r.la.data() + g * 16 + half * 8);
        __m256i p[6];
        for (int i = 0; i < 6; ++i) p[i] = _mm256_loadu_si256((const __m256i*)(pg + 64 * i));
        for (int c = 0; c < NC; ++c) {
          const __m256i x = _mm256_loadu_si256((const __m256i*)(col[c] + g * gstride + half * 32));
          const __m256i lo = _mm256_and_si256(x, m15), hi = _mm256_and_si256(_mm256_srli_epi32(x, 4), m15);
          __m256i t = dp256<Vnni>(dp256<Vnni>(_mm256_setzero_si256(), lo, p[0]), hi, p[1]);
          t = dp256<Vnni>(dp256<Vnni>(_mm256_slli_epi32(t, 8), lo, p[2]), hi, p[3]);
          t = dp256<Vnni>(dp256<Vnni>(_mm256_slli_epi32(t, 8), lo, p[4]), hi, p[5]);
          const __m256 bs = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(s[c] + g * sgstride)), pair[half]);
          tot[c][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(bs, la), tot[c][half]);
        }
      }
    }
    for (int c = 0; c < NC; ++c) {
      // sum_b b z (a sum X): 8 blocks a step, then the rest one by one; block b's scale at
      // s[c][(b / 4) * sgstride + b % 4]
      const uint8_t* z = zp ? zp + (n + c) * zcols : nullptr;
      __m256 acc = _mm256_setzero_ps();
      int64_t b = 0;
      for (; b + 8 <= kb; b += 8) {
        __m256 zv = _mm256_set1_ps(8.f);
        if (z) {
          uint32_t w;
          std::memcpy(&w, z + b / 2, 4);
          const __m128i by = _mm_cvtsi32_si128((int)w);
          const __m128i l = _mm_and_si128(by, _mm_set1_epi8(15)), h = _mm_and_si128(_mm_srli_epi16(by, 4), _mm_set1_epi8(15));
          zv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(l, h)));
        }
        const float* sb = s[c] + (b / 4) * sgstride;
        const __m256 sv = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(sb)), _mm_loadu_ps(sb + sgstride), 1);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(sv, zv), _mm256_loadu_ps(r.as.data() + b), acc);
      }
      __m128 q = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
      q = _mm_add_ps(q, _mm_movehl_ps(q, q));
      float corr = _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
      for (; b < kb; ++b)
        corr += s[c][(b / 4) * sgstride + b % 4] * (float)(z ? (z[b / 2] >> ((b % 2) * 4)) & 15 : 8) * r.as[b];
      const __m256 t8 = _mm256_add_ps(tot[c][0], tot[c][1]);
      __m128 u = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
      u = _mm_add_ps(u, _mm_movehl_ps(u, u));
      C[n + c] = _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u))) - corr;
    }
  }
}

// Which kernel: 0 none (the f32 kernels), 1 AVX2 + FMA, 2 AVX-VNNI, 3 AVX-512 VNNI; RLX_CPU_ISA
// caps it (qgemm_isa), RLX_NBITS_F32 turns it off.
int bfp_level() {
  static const int level = [] {
    if (std::getenv("RLX_NBITS_F32")) return 0;
    __builtin_cpu_init();
    switch (qgemm_isa()) {
      case QIsa::Avx512Vnni: return 3;
      case QIsa::AvxVnni: return __builtin_cpu_supports("fma") ? 2 : 0;
      case QIsa::Avx2: return __builtin_cpu_supports("fma") ? 1 : 0;
      case QIsa::Base: return 0;
    }
    return 0;
  }();
  return level;
}

}  // namespace

std::shared_ptr<const PackedNbits4> pack_nbits4_row1(const uint8_t* B, const float* scales, int64_t N, int64_t K) {
  const int level = bfp_level();
  const int64_t W = level == 3 ? 8 : 4;  // the columns each kernel takes at once
  if (level == 0 || K < 128 || K % 128 != 0 || N < W) return nullptr;
  // AVX-512 without VNNI: nbits4_small_m takes the f32 nbits4_row1_x8 there, on ONNX's layout
  if (level != 3 && isa_avx512_bw_vl()) return nullptr;
  auto pk = std::make_shared<PackedNbits4>();
  const int64_t kb = K / 32, groups = K / 128, blocks = N / W;
  pk->N = N;
  pk->K = K;
  pk->W = W;
  pk->NW = blocks * W;
  // host memory of the executor's kind (page-aligned blocks of their own, huge pages where the
  // kernel gives them), not the malloc heap: the copy lives as long as the model
  const size_t wbytes = (size_t)(pk->NW * kb * 16);
  size_t cap = 0;
  auto* mem = static_cast<uint8_t*>(host_alloc(wbytes + (size_t)(pk->NW * kb) * 4, &cap));
  if (!mem) return nullptr;  // no memory for the copy: ONNX's layout is read
  pk->mem = std::shared_ptr<uint8_t>(mem, [cap](uint8_t* p) { host_free(p, cap); });
  pk->nbytes = wbytes + (size_t)(pk->NW * kb) * 4;
  uint8_t* pb = mem;
  float* ps = reinterpret_cast<float*>(mem + wbytes);
  pk->b = pb;
  pk->s = ps;
  ThreadPool::global().parallel_for(blocks, 8, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk)
      for (int64_t c = 0; c < W; ++c) {
        const int64_t n = blk * W + c;
        for (int64_t g = 0; g < groups; ++g) {
          std::memcpy(pb + blk * W * kb * 16 + g * W * 64 + c * 64, B + n * kb * 16 + g * 64, 64);
          std::memcpy(ps + blk * W * kb + g * W * 4 + c * 4, scales + n * kb + g * 4, 16);
        }
      }
  });
  return pk;
}

bool nbits4_row1_bfp(const float* A, int64_t K, const uint8_t* B, const float* scales, const uint8_t* zp, int64_t N,
                     float* C, Threads th, const PackedNbits4* pk) {
  const int level = bfp_level();
  if (level == 0 || K < 128 || K % 128 != 0 || N < 1) return false;
  if (pk && (pk->W != (level == 3 ? 8 : 4) || pk->N != N || pk->K != K)) pk = nullptr;
  thread_local BfpRow row;
  if (!(level == 3 ? prepare(A, K, row) : prepare_avx2(A, K, row))) return false;
  const int64_t zcols = (K / 32 * 4 + 7) / 8;
  const BfpRow& r = row;
  auto body = [&](int64_t n0, int64_t n1) {
    const int64_t n8 = n0 + (n1 - n0) / 8 * 8, n4 = n0 + (n1 - n0) / 4 * 4;
    if (pk) {
      // the packed copy's whole groups of W in [n0, n1), ONNX's layout for the columns around them
      const int64_t W = pk->W, p0 = std::min((n0 + W - 1) / W * W, n1), p1 = std::max(p0, std::min(n1, pk->NW) / W * W);
      if (level == 3) {
        columns<1>(r, K, B, scales, zp, zcols, n0, p0, C);
        columns<8, true>(r, K, pk->b, pk->s, zp, zcols, p0, p1, C);
        columns<1>(r, K, B, scales, zp, zcols, p1, n1, C);
      } else if (level == 2) {
        columns256<1, true>(r, K, B, scales, zp, zcols, n0, p0, C);
        columns256<4, true, true>(r, K, pk->b, pk->s, zp, zcols, p0, p1, C);
        columns256<1, true>(r, K, B, scales, zp, zcols, p1, n1, C);
      } else {
        columns256<1, false>(r, K, B, scales, zp, zcols, n0, p0, C);
        columns256<4, false, true>(r, K, pk->b, pk->s, zp, zcols, p0, p1, C);
        columns256<1, false>(r, K, B, scales, zp, zcols, p1, n1, C);
      }
    } else if (level == 3) {
      columns<8>(r, K, B, scales, zp, zcols, n0, n8, C);
      columns<1>(r, K, B, scales, zp, zcols, n8, n1, C);
    } else if (level == 2) {
      columns256<4, true>(r, K, B, scales, zp, zcols, n0, n4, C);
      columns256<1, true>(r, K, B, scales, zp, zcols, n4, n1, C);
    } else {
      columns256<4, false>(r, K, B, scales, zp, zcols, n0, n4, C);
      columns256<1, false>(r, K, B, scales, zp, zcols, n4, n1, C);
    }
  };
  if (th == Threads::Single) body(0, N);
  else ThreadPool::global().parallel_for(N, 16, body);
  return true;
}

}  // namespace rlx::cpu
