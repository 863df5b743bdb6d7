// rlx's exact 8-bit integer GEMM: see qgemm.h for the arithmetic and why it is exact.
#include "backends/cpu/qgemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "backends/cpu/isa.h"
#include "backends/cpu/nbits_row1.h"
#include "backends/cpu/thread_pool.h"

namespace rlx::cpu {

namespace {

bool cpu_has(QIsa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case QIsa::Base: return true;
    case QIsa::Avx2: return __builtin_cpu_supports("avx2");
    case QIsa::AvxVnni: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avxvnni");
    case QIsa::Avx512Vnni:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

constexpr int kPanel = 16;  // columns per packed panel

// vpdpbusd through inline asm with the accumulator tied to its register ("+v"): with the
// intrinsics GCC 12 copied every accumulator to a new register and back on every k step
// (32 extra moves and a stack spill per 16 products in the 4 x 4 tile). acc += u8(a) . s8(b).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline __m512i dpbusd512(__m512i acc, __m512i a,
                                                                                           __m512i b) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}
// AVX-VNNI: the VEX encoding ({vex}), which CPUs with AVX-VNNI but no AVX-512 decode.
__attribute__((target("avx2,avxvnni"))) inline __m256i dpbusd256(__m256i acc, __m256i a, __m256i b) {
  asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b));
  return acc;
}

// ---------------- kernels: raw dot products of packed rows and panels ----------------
// Each computes out[r][c] = sum_k A'[r][k] * B'[k][p0 * 16 + c] for r < mr (A' rows of K4 * 4
// u8, leading dimension lda) and NP panels starting at B (panel stride K4 * 64 bytes); out
// has leading dimension ldo and NP * 16 columns.

void tile_base(int mr, int np, const uint8_t* A, int64_t lda, const int8_t* B, int64_t K4, int64_t ps,
               int32_t* out, int64_t ldo, bool acc_in) {
  for (int r = 0; r < mr; ++r)
    for (int p = 0; p < np; ++p) {
      const int8_t* P = B + p * ps;
      for (int c = 0; c < kPanel; ++c) {
        uint32_t acc = acc_in ? (uint32_t)out[r * ldo + p * kPanel + c] : 0;  // wrapping, as vpdpbusd
        for (int64_t k = 0; k < K4; ++k)
          for (int j = 0; j < 4; ++j)
            acc += (uint32_t)((int32_t)A[r * lda + k * 4 + j] * (int32_t)P[k * 64 + c * 4 + j]);
        out[r * ldo + p * kPanel + c] = (int32_t)acc;
      }
    }
}

template <int MR, int NP>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void tile512(const uint8_t* A, int64_t lda,
                                                                               const int8_t* B, int64_t K4,
                                                                               int64_t ps, int32_t* out, int64_t ldo,
                                                                               bool acc_in) {
  __m512i acc[MR][NP];
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < NP; ++p)
      acc[r][p] = acc_in ? _mm512_loadu_si512(out + r * ldo + p * kPanel) : _mm512_setzero_si512();
  for (int64_t k = 0; k < K4; ++k) {
    __m512i b[NP];
    for (int p = 0; p < NP; ++p) b[p] = _mm512_loadu_si512(B + p * ps + k * 64);
    for (int r = 0; r < MR; ++r) {
      int32_t a4;
      std::memcpy(&a4, A + r * lda + k * 4, 4);
      const __m512i a = _mm512_set1_epi32(a4);
      for (int p = 0; p < NP; ++p) acc[r][p] = dpbusd512(acc[r][p], a, b[p]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < NP; ++p) _mm512_storeu_si512(out + r * ldo + p * kPanel, acc[r][p]);
}

// The full 4-row x 4-panel tile in one asm block (accumulators zmm0-15, B's 4 panel vectors
// zmm24-27, A's 4 broadcasts zmm28-31): with the k loop in C++ (tile512 above) GCC 12 kept
// copying accumulators between registers, 6 extra moves per 16 vpdpbusd.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void tile512_4x4(const uint8_t* A, int64_t lda,
                                                                                   const int8_t* B, int64_t K4,
                                                                                   int64_t ps, int32_t* out,
                                                                                   int64_t ldo, bool acc_in) {
  const int64_t lda3 = 3 * lda, ps3 = 3 * ps, ldo4 = ldo * 4, ldo43 = 3 * ldo4;
  int64_t k = K4;
  const uint8_t* a = A;
  const int8_t* b = B;
  const int64_t accin = acc_in ? 1 : 0;
  asm volatile(
      "test %[accin], %[accin]\n\t"
      "jz 2f\n\t"
      "vmovdqu32 (%[o]), %%zmm0\n\t"
      "vmovdqu32 64(%[o]), %%zmm1\n\t"
      "vmovdqu32 128(%[o]), %%zmm2\n\t"
      "vmovdqu32 192(%[o]), %%zmm3\n\t"
      "vmovdqu32 (%[o],%[ldo],1), %%zmm4\n\t"
      "vmovdqu32 64(%[o],%[ldo],1), %%zmm5\n\t"
      "vmovdqu32 128(%[o],%[ldo],1), %%zmm6\n\t"
      "vmovdqu32 192(%[o],%[ldo],1), %%zmm7\n\t"
      "vmovdqu32 (%[o],%[ldo],2), %%zmm8\n\t"
      "vmovdqu32 64(%[o],%[ldo],2), %%zmm9\n\t"
      "vmovdqu32 128(%[o],%[ldo],2), %%zmm10\n\t"
      "vmovdqu32 192(%[o],%[ldo],2), %%zmm11\n\t"
      "vmovdqu32 (%[o],%[ldo3],1), %%zmm12\n\t"
      "vmovdqu32 64(%[o],%[ldo3],1), %%zmm13\n\t"
      "vmovdqu32 128(%[o],%[ldo3],1), %%zmm14\n\t"
      "vmovdqu32 192(%[o],%[ldo3],1), %%zmm15\n\t"
      "jmp 3f\n\t"
      "2:\n\t"
      "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
      "vpxord %%zmm1, %%zmm1, %%zmm1\n\t"
      "vpxord %%zmm2, %%zmm2, %%zmm2\n\t"
      "vpxord %%zmm3, %%zmm3, %%zmm3\n\t"
      "vpxord %%zmm4, %%zmm4, %%zmm4\n\t"
      "vpxord %%zmm5, %%zmm5, %%zmm5\n\t"
      "vpxord %%zmm6, %%zmm6, %%zmm6\n\t"
      "vpxord %%zmm7, %%zmm7, %%zmm7\n\t"
      "vpxord %%zmm8, %%zmm8, %%zmm8\n\t"
      "vpxord %%zmm9, %%zmm9, %%zmm9\n\t"
      "vpxord %%zmm10, %%zmm10, %%zmm10\n\t"
      "vpxord %%zmm11, %%zmm11, %%zmm11\n\t"
      "vpxord %%zmm12, %%zmm12, %%zmm12\n\t"
      "vpxord %%zmm13, %%zmm13, %%zmm13\n\t"
      "vpxord %%zmm14, %%zmm14, %%zmm14\n\t"
      "vpxord %%zmm15, %%zmm15, %%zmm15\n\t"
      "3:\n\t"
      "test %[k], %[k]\n\t"
      "jz 4f\n\t"
      "1:\n\t"
      "vmovdqu64 (%[b]), %%zmm24\n\t"
      "vmovdqu64 (%[b],%[ps],1), %%zmm25\n\t"
      "vmovdqu64 (%[b],%[ps],2), %%zmm26\n\t"
      "vmovdqu64 (%[b],%[ps3],1), %%zmm27\n\t"
      "vpbroadcastd (%[a]), %%zmm28\n\t"
      "vpbroadcastd (%[a],%[lda],1), %%zmm29\n\t"
      "vpbroadcastd (%[a],%[lda],2), %%zmm30\n\t"
      "vpbroadcastd (%[a],%[lda3],1), %%zmm31\n\t"
      "vpdpbusd %%zmm24, %%zmm28, %%zmm0\n\t"
      "vpdpbusd %%zmm25, %%zmm28, %%zmm1\n\t"
      "vpdpbusd %%zmm26, %%zmm28, %%zmm2\n\t"
      "vpdpbusd %%zmm27, %%zmm28, %%zmm3\n\t"
      "vpdpbusd %%zmm24, %%zmm29, %%zmm4\n\t"
      "vpdpbusd %%zmm25, %%zmm29, %%zmm5\n\t"
      "vpdpbusd %%zmm26, %%zmm29, %%zmm6\n\t"
      "vpdpbusd %%zmm27, %%zmm29, %%zmm7\n\t"
      "vpdpbusd %%zmm24, %%zmm30, %%zmm8\n\t"
      "vpdpbusd %%zmm25, %%zmm30, %%zmm9\n\t"
      "vpdpbusd %%zmm26, %%zmm30, %%zmm10\n\t"
      "vpdpbusd %%zmm27, %%zmm30, %%zmm11\n\t"
      "vpdpbusd %%zmm24, %%zmm31, %%zmm12\n\t"
      "vpdpbusd %%zmm25, %%zmm31, %%zmm13\n\t"
      "vpdpbusd %%zmm26, %%zmm31, %%zmm14\n\t"
      "vpdpbusd %%zmm27, %%zmm31, %%zmm15\n\t"
      "add $64, %[b]\n\t"
      "add $4, %[a]\n\t"
      "dec %[k]\n\t"
      "jnz 1b\n\t"
      "4:\n\t"
      "vmovdqu32 %%zmm0, (%[o])\n\t"
      "vmovdqu32 %%zmm1, 64(%[o])\n\t"
      "vmovdqu32 %%zmm2, 128(%[o])\n\t"
      "vmovdqu32 %%zmm3, 192(%[o])\n\t"
      "vmovdqu32 %%zmm4, (%[o],%[ldo],1)\n\t"
      "vmovdqu32 %%zmm5, 64(%[o],%[ldo],1)\n\t"
      "vmovdqu32 %%zmm6, 128(%[o],%[ldo],1)\n\t"
      "vmovdqu32 %%zmm7, 192(%[o],%[ldo],1)\n\t"
      "vmovdqu32 %%zmm8, (%[o],%[ldo],2)\n\t"
      "vmovdqu32 %%zmm9, 64(%[o],%[ldo],2)\n\t"
      "vmovdqu32 %%zmm10, 128(%[o],%[ldo],2)\n\t"
      "vmovdqu32 %%zmm11, 192(%[o],%[ldo],2)\n\t"
      "vmovdqu32 %%zmm12, (%[o],%[ldo3],1)\n\t"
      "vmovdqu32 %%zmm13, 64(%[o],%[ldo3],1)\n\t"
      "vmovdqu32 %%zmm14, 128(%[o],%[ldo3],1)\n\t"
      "vmovdqu32 %%zmm15, 192(%[o],%[ldo3],1)\n\t"
      : [a] "+r"(a), [b] "+r"(b), [k] "+r"(k)
      : [lda] "r"(lda), [lda3] "r"(lda3), [ps] "r"(ps), [ps3] "r"(ps3), [o] "r"(out), [ldo] "r"(ldo4),
        [ldo3] "r"(ldo43), [accin] "r"(accin)
      : "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm24", "zmm25", "zmm26", "zmm27", "zmm28", "zmm29", "zmm30", "zmm31", "cc", "memory");
}

template <int MR, int NP>
__attribute__((target("avx2,avxvnni"))) void tilevnni(const uint8_t* A, int64_t lda, const int8_t* B, int64_t K4,
                                                        int64_t ps, int32_t* out, int64_t ldo, bool acc_in) {
  __m256i acc[MR][2 * NP];
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < 2 * NP; ++p)
      acc[r][p] = acc_in ? _mm256_loadu_si256((const __m256i*)(out + r * ldo + p * 8)) : _mm256_setzero_si256();
  for (int64_t k = 0; k < K4; ++k) {
    __m256i b[2 * NP];
    for (int p = 0; p < NP; ++p) {
      b[2 * p] = _mm256_loadu_si256((const __m256i*)(B + p * ps + k * 64));
      b[2 * p + 1] = _mm256_loadu_si256((const __m256i*)(B + p * ps + k * 64 + 32));
    }
    for (int r = 0; r < MR; ++r) {
      int32_t a4;
      std::memcpy(&a4, A + r * lda + k * 4, 4);
      const __m256i a = _mm256_set1_epi32(a4);
      for (int p = 0; p < 2 * NP; ++p) acc[r][p] = dpbusd256(acc[r][p], a, b[p]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < 2 * NP; ++p) _mm256_storeu_si256((__m256i*)(out + r * ldo + p * 8), acc[r][p]);
}

// AVX2: bytes widened to int16 and multiplied with vpmaddwd (exact; see qgemm.h). A panel's
// 4 columns x 4 k (16 bytes) widen to 16 int16; the row's 4 activations repeat in each 64 bits,
// so vpmaddwd gives 2 partial sums per column, added pairwise at the end.
template <int MR>
__attribute__((target("avx2"))) void tile_avx2(const uint8_t* A, int64_t lda, const int8_t* B, int64_t K4,
                                                int32_t* out, int64_t ldo, bool acc_in) {
  __m256i acc[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int g = 0; g < 4; ++g) acc[r][g] = _mm256_setzero_si256();
  for (int64_t k = 0; k < K4; ++k) {
    __m256i b[4];
    for (int g = 0; g < 4; ++g) b[g] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(B + k * 64 + g * 16)));
    for (int r = 0; r < MR; ++r) {
      int32_t a4;
      std::memcpy(&a4, A + r * lda + k * 4, 4);
      const __m256i a = _mm256_cvtepu8_epi16(_mm_set1_epi32(a4));
      for (int g = 0; g < 4; ++g) acc[r][g] = _mm256_add_epi32(acc[r][g], _mm256_madd_epi16(b[g], a));
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int h = 0; h < 2; ++h) {
      __m256i s = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[r][2 * h], acc[r][2 * h + 1]), 0xD8);
      if (acc_in) s = _mm256_add_epi32(s, _mm256_loadu_si256((const __m256i*)(out + r * ldo + h * 8)));
      _mm256_storeu_si256((__m256i*)(out + r * ldo + h * 8), s);
    }
}

// Rows mr <= MRmax, np panels (np == NPmax or 1).
constexpr int kMR512 = 4, kNP512 = 4, kMRvnni = 2, kNPvnni = 2, kMRavx2 = 2;

// K4 groups of 4 k from A and B (a K block: B's panels are ps bytes apart); acc_in: add to out.
void tile(QIsa isa, int mr, int np, const uint8_t* A, int64_t lda, const int8_t* B, int64_t K4, int64_t ps,
          int32_t* out, int64_t ldo, bool acc_in) {
  switch (isa) {
    case QIsa::Avx512Vnni:
#define RLX_T(R)                                                  \
  case R:                                                         \
    if (np == kNP512 && R == 4) tile512_4x4(A, lda, B, K4, ps, out, ldo, acc_in); \
    else if (np == kNP512) tile512<R, kNP512>(A, lda, B, K4, ps, out, ldo, acc_in); \
    else tile512<R, 1>(A, lda, B, K4, ps, out, ldo, acc_in);                  \
    return;
      switch (mr) { RLX_T(1) RLX_T(2) RLX_T(3) RLX_T(4) RLX_T(5) RLX_T(6) }
#undef RLX_T
      return;
    case QIsa::AvxVnni:
#define RLX_T(R)                                                    \
  case R:                                                           \
    if (np == kNPvnni) tilevnni<R, kNPvnni>(A, lda, B, K4, ps, out, ldo, acc_in); \
    else tilevnni<R, 1>(A, lda, B, K4, ps, out, ldo, acc_in);                   \
    return;
      switch (mr) { RLX_T(1) RLX_T(2) }
#undef RLX_T
      return;
    case QIsa::Avx2:
      if (mr == 2) tile_avx2<2>(A, lda, B, K4, out, ldo, acc_in);
      else tile_avx2<1>(A, lda, B, K4, out, ldo, acc_in);
      return;
    case QIsa::Base: tile_base(mr, np, A, lda, B, K4, ps, out, ldo, acc_in); return;
  }
}
int max_rows(QIsa isa) {
  return isa == QIsa::Avx512Vnni ? kMR512 : isa == QIsa::AvxVnni ? kMRvnni : isa == QIsa::Avx2 ? kMRavx2 : 4;
}
int max_panels(QIsa isa) { return isa == QIsa::Avx512Vnni ? kNP512 : isa == QIsa::AvxVnni ? kNPvnni : 1; }

// ---------------- the zero-point correction and the float epilogue ----------------
struct Finish {
  int64_t K;
  const int32_t* rs;   // [M] row sums of A'
  const int32_t* zam;  // [M] A's zero point (shifted)
  const int32_t* zbn;  // [N] B's zero point (shifted)
  const int32_t* un;   // [N] colsum(B') - K * zb'
  const QEpilogue* ep;
  const float* scale;  // [N] b_scale per column (to_float)
  const float* bias;   // [N] or null
};

// C[m, n0:n1] from the task's block S (its row m - m0 at S + (m - m0) * lds, column n0 first):
// the zero-point terms, and the float epilogue when asked; one pass from the block into C.
inline __attribute__((always_inline)) void finish_body(const Finish& f, const int32_t* S, int64_t lds, int32_t* C,
                                                        int64_t ldc, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const uint32_t* __restrict zb = (const uint32_t*)f.zbn + n0;
  const uint32_t* __restrict u = (const uint32_t*)f.un + n0;
  const int64_t w = n1 - n0;
  for (int64_t m = m0; m < m1; ++m) {
    const int32_t* __restrict s = S + (m - m0) * lds;
    int32_t* __restrict c = C + m * ldc + n0;
    const uint32_t rs = (uint32_t)f.rs[m], za = (uint32_t)f.zam[m];
    // sum (a - za)(b - zb) = dot - zb * rowsum(a) - za * (colsum(b) - K * zb), wrapping
    if (!f.ep->to_float) {
      for (int64_t n = 0; n < w; ++n) c[n] = (int32_t)((uint32_t)s[n] - zb[n] * rs - za * u[n]);
      continue;
    }
    // float(acc) * (a_scale * b_scale) [+ bias]: the f32 operations of cast, mul, add.
    const float as = f.ep->a_scale ? f.ep->a_scale[f.ep->a_scale_per_row ? m : 0] : 1.f;
    const float* __restrict sc = f.scale + n0;
    const float* __restrict bias = f.bias ? f.bias + n0 : nullptr;
    float* __restrict y = reinterpret_cast<float*>(c);
    if (bias) {
      for (int64_t n = 0; n < w; ++n) y[n] = (float)(int32_t)((uint32_t)s[n] - zb[n] * rs - za * u[n]) * (as * sc[n]) + bias[n];
    } else {
      for (int64_t n = 0; n < w; ++n) y[n] = (float)(int32_t)((uint32_t)s[n] - zb[n] * rs - za * u[n]) * (as * sc[n]);
    }
  }
}
__attribute__((target("avx2"))) void finish_avx2(const Finish& f, const int32_t* S, int64_t lds, int32_t* C, int64_t ldc,
                                                  int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  finish_body(f, S, lds, C, ldc, m0, m1, n0, n1);
}
void finish_base(const Finish& f, const int32_t* S, int64_t lds, int32_t* C, int64_t ldc, int64_t m0, int64_t m1,
                 int64_t n0, int64_t n1) {
  finish_body(f, S, lds, C, ldc, m0, m1, n0, n1);
}

// 16 4-bit values (8 bytes, low nibble first) minus the zero point, as f32.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 nib16(const uint8_t* p, __m512i z) {
  uint64_t b8;
  std::memcpy(&b8, p, 8);
  const __m128i x = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)b8));  // 8 x u16 bytes
  const __m128i lo = _mm_and_si128(x, _mm_set1_epi16(15));
  const __m128i hi = _mm_srli_epi16(x, 4);
  const __m128i v = _mm_or_si128(lo, _mm_slli_epi16(hi, 8));  // bytes: lo0 hi0 lo1 hi1 ...
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(v), z));
}

template <int R>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void nbits4_rows(const float* A, int64_t K, const uint8_t* B,
                                                                        const float* sc, const uint8_t* zp,
                                                                        int64_t zcols, int64_t n0, int64_t n1,
                                                                        int64_t bs, float* C, int64_t N) {
  const int64_t kb = (K + bs - 1) / bs, blob = bs / 2;
  for (int64_t n = n0; n < n1; ++n) {
    __m512 tot[R];
    for (int r = 0; r < R; ++r) tot[r] = _mm512_setzero_ps();
    const uint8_t* col = B + n * kb * blob;
    for (int64_t b = 0; b < kb; ++b) {
      const int32_t z = zp ? (zp[n * zcols + b / 2] >> ((b % 2) * 4)) & 15 : 8;
      const __m512i zv = _mm512_set1_epi32(z);
      __m512 d[R];
      for (int r = 0; r < R; ++r) d[r] = _mm512_setzero_ps();
      const int64_t k0 = b * bs, kn = std::min(bs, K - k0);
      for (int64_t j = 0; j < kn; j += 16) {
        const __m512 q = nib16(col + b * blob + j / 2, zv);
        for (int r = 0; r < R; ++r) d[r] = _mm512_fmadd_ps(_mm512_loadu_ps(A + r * K + k0 + j), q, d[r]);
      }
      const __m512 s = _mm512_set1_ps(sc[n * kb + b]);  // the block's scale, once per block
      for (int r = 0; r < R; ++r) tot[r] = _mm512_fmadd_ps(s, d[r], tot[r]);
    }
    for (int r = 0; r < R; ++r) C[r * N + n] = _mm512_reduce_add_ps(tot[r]);
  }
}

// Blocks of a multiple of 32: 16 bytes (32 values) per step, widened straight to 16 int32
// lanes of bytes; the low nibbles are the even k, the high ones the odd k, multiplied with the
// activations split once per call into even and odd halves (AE, AO: [R][K / 2]). The zero
// point leaves the inner loop: sum a (q - z) = sum a q - z * sum a (AS: [R][kb] block sums).
template <int R, int NC>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void nbits4_rows32(const float* AE, const float* AO,
                                                                          const float* AS, int64_t K,
                                                                          const uint8_t* B, const float* sc,
                                                                          const uint8_t* zp, int64_t zcols, int64_t n0,
                                                                          int64_t n1, int64_t bs, float* C, int64_t N) {
  // NC columns at a time: independent accumulator chains (one column alone is bound by the
  // latency of its per-block chain) and one load of the activations for all of them.
  const int64_t kb = K / bs, blob = bs / 2, K2 = K / 2;
  const __m512i m15 = _mm512_set1_epi32(15);
  for (int64_t n = n0; n < n1; n += NC) {
    __m512 tot[NC][R];
    float corr[NC][R];
    for (int c = 0; c < NC; ++c)
      for (int r = 0; r < R; ++r) tot[c][r] = _mm512_setzero_ps(), corr[c][r] = 0.f;
    for (int64_t b = 0; b < kb; ++b) {
      __m512 d[NC][R];
      for (int c = 0; c < NC; ++c)
        for (int r = 0; r < R; ++r) d[c][r] = _mm512_setzero_ps();
      for (int64_t j = 0; j < blob; j += 16) {
        const int64_t h = b * blob + j;  // index into the even / odd halves
        __m512 ae[R], ao[R];
        for (int r = 0; r < R; ++r) ae[r] = _mm512_loadu_ps(AE + r * K2 + h), ao[r] = _mm512_loadu_ps(AO + r * K2 + h);
        for (int c = 0; c < NC; ++c) {
          const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(B + (n + c) * kb * blob + h)));
          const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(x, m15));
          const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(x, 4));
          for (int r = 0; r < R; ++r) {
            d[c][r] = _mm512_fmadd_ps(ae[r], lo, d[c][r]);
            d[c][r] = _mm512_fmadd_ps(ao[r], hi, d[c][r]);
          }
        }
      }
      for (int c = 0; c < NC; ++c) {
        const float sb = sc[(n + c) * kb + b];
        const float z = (float)(zp ? (zp[(n + c) * zcols + b / 2] >> ((b % 2) * 4)) & 15 : 8);
        const __m512 s = _mm512_set1_ps(sb);  // the block's scale, once per block
        for (int r = 0; r < R; ++r) {
          tot[c][r] = _mm512_fmadd_ps(s, d[c][r], tot[c][r]);
          corr[c][r] += sb * z * AS[r * kb + b];
        }
      }
    }
    for (int c = 0; c < NC; ++c)
      for (int r = 0; r < R; ++r) C[r * N + n + c] = _mm512_reduce_add_ps(tot[c][r]) - corr[c][r];
  }
}

// One row (the decode step's gemv), blocks of a multiple of 32: per 16 weight bytes of a column,
// one widening to 16 int32 lanes, the low / high nibbles to f32 and two FMAs against the even /
// odd activations, and the block's scale applied to the block's partial sum with one FMA; no
// scalar work per block. The zero points leave the block loop altogether: sum_b s_b z_b AS_b is
// taken after it, 16 blocks per step (the packed nibbles widened in registers). NC columns at a
// time, each with its own accumulator chain. The low nibble becomes f32 by vpermps of a 0..15
// table (which reads only an index's low 4 bits: no mask, no conversion), the high one by a
// shift and a conversion. Measured on one core with the weights in cache (Zen 5, 2.7 MB):
// 33 GB/s of weights against 22 GB/s for nbits4_rows32<1, 4> (a scalar zero point and scale
// per block, mask + convert for both nibbles); 8 columns beat 4 and 2.
template <int NC>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void nbits4_row1(const float* AE, const float* AO, const float* AS,
                                                                        int64_t K, const uint8_t* B, const float* sc,
                                                                        const uint8_t* zp, int64_t zcols, int64_t n0,
                                                                        int64_t n1, int64_t bs, float* C) {
  const int64_t kb = K / bs, blob = bs / 2;
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t n = n0; n < n1; n += NC) {
    __m512 tot[NC];
    const uint8_t* col[NC];
    const float* s[NC];
    for (int c = 0; c < NC; ++c) tot[c] = _mm512_setzero_ps(), col[c] = B + (n + c) * kb * blob, s[c] = sc + (n + c) * kb;
    for (int64_t b = 0; b < kb; ++b) {
      __m512 d[NC];
      for (int c = 0; c < NC; ++c) d[c] = _mm512_setzero_ps();
      // The next group's weights and scales, one cache line per column as this group passes the
      // same offset: each column is a short stream (K / 2 bytes), too short for the hardware
      // prefetchers to lock on before it ends (from memory, one core: 19.5 GB/s without, 31 with;
      // prefetches never fault, so past the last column they cost nothing but the request).
      if ((b * blob) % 64 == 0) {
        for (int c = 0; c < NC; ++c) _mm_prefetch((const char*)(col[c] + NC * kb * blob + b * blob), _MM_HINT_T0);
        if (b % 16 == 0)
          for (int c = 0; c < NC; ++c) _mm_prefetch((const char*)(s[c] + NC * kb + b), _MM_HINT_T0);
      }
      for (int64_t j = 0; j < blob; j += 16) {
        const int64_t h = b * blob + j;
        const __m512 ae = _mm512_loadu_ps(AE + h), ao = _mm512_loadu_ps(AO + h);
        for (int c = 0; c < NC; ++c) {
          const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(col[c] + h)));
          const __m512 lo = _mm512_permutexvar_ps(x, iota);
          const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(x, 4));
          d[c] = _mm512_fmadd_ps(ae, lo, d[c]);
          d[c] = _mm512_fmadd_ps(ao, hi, d[c]);
        }
      }
      for (int c = 0; c < NC; ++c) tot[c] = _mm512_fmadd_ps(_mm512_set1_ps(s[c][b]), d[c], tot[c]);
    }
    for (int c = 0; c < NC; ++c)
      C[n + c] = _mm512_reduce_add_ps(tot[c]) - nbits4_zero_term(s[c], AS, zp ? zp + (n + c) * zcols : nullptr, kb);
  }
}

// nbits4_row1 for blocks of exactly 32 and K a multiple of 128: each 64 weight bytes (4 blocks)
// are one load of 16 dword lanes of 8 nibbles; nibble j of every lane (a shift by 4j) indexes
// the 0..15 table with vpermps, and multiplies the activations rearranged once per call so that
// A8[g][j][i] = a[128 g + 8 i + j]. No widening, no conversion; the four blocks' scales are one
// vpermps of 4 loaded floats. Zero points as nbits4_row1. Measured on one Zen 5 core (bench/
// nbits_gemv, the same minutes): 40 GB/s of weights in cache and 37 from memory, against 26 / 25
// for nbits4_row1 (per 16 bytes it spends 2.25 FMAs and no conversion or widening, against 3 FMAs,
// a widening and a conversion).
template <int NC>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void nbits4_row1_x8(const float* A8, const float* AS, int64_t K,
                                                                           const uint8_t* B, const float* sc,
                                                                           const uint8_t* zp, int64_t zcols, int64_t n0,
                                                                           int64_t n1, float* C) {
  const int64_t kb = K / 32, groups = K / 128;
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i quarter = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  for (int64_t n = n0; n < n1; n += NC) {
    __m512 tot[NC];
    const uint8_t* col[NC];
    const float* s[NC];
    for (int c = 0; c < NC; ++c) tot[c] = _mm512_setzero_ps(), col[c] = B + (n + c) * kb * 16, s[c] = sc + (n + c) * kb;
    for (int64_t g = 0; g < groups; ++g) {
      nbits4_prefetch_next_columns<NC>(col, s, kb, g);
      const float* a = A8 + g * 128;
      __m512i x[NC];
      __m512 d[NC];
      for (int c = 0; c < NC; ++c) x[c] = _mm512_loadu_si512((const void*)(col[c] + g * 64)), d[c] = _mm512_setzero_ps();
      for (int j = 0; j < 8; ++j) {
        const __m512 aj = _mm512_loadu_ps(a + 16 * j);
        for (int c = 0; c < NC; ++c) {
          d[c] = _mm512_fmadd_ps(aj, _mm512_permutexvar_ps(x[c], iota), d[c]);
          x[c] = _mm512_srli_epi32(x[c], 4);
        }
      }
      for (int c = 0; c < NC; ++c)
        tot[c] = _mm512_fmadd_ps(_mm512_permutexvar_ps(quarter, _mm512_castps128_ps512(_mm_loadu_ps(s[c] + g * 4))), d[c], tot[c]);
    }
    for (int c = 0; c < NC; ++c)
      C[n + c] = _mm512_reduce_add_ps(tot[c]) - nbits4_zero_term(s[c], AS, zp ? zp + (n + c) * zcols : nullptr, kb);
  }
}

// nbits4_row1 for CPUs with AVX2 + FMA but no AVX-512: 8 lanes, so per 16 weight bytes two
// 8-byte widenings to int32, the nibbles masked / shifted and converted (vpermps reads 3 index
// bits here, too few for a 16-entry table), four FMAs; the block's scale one broadcast FMA, the
// zero points summed after the block loop.
template <int NC>
__attribute__((target("avx2,fma"))) void nbits4_row1_avx2(const float* AE, const float* AO, const float* AS, int64_t K,
                                                          const uint8_t* B, const float* sc, const uint8_t* zp,
                                                          int64_t zcols, int64_t n0, int64_t n1, int64_t bs, float* C) {
  const int64_t kb = K / bs, blob = bs / 2;
  const __m256i m15 = _mm256_set1_epi32(15);
  for (int64_t n = n0; n < n1; n += NC) {
    __m256 tot[NC];
    for (int c = 0; c < NC; ++c) tot[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < kb; ++b) {
      __m256 d[NC];
      for (int c = 0; c < NC; ++c) d[c] = _mm256_setzero_ps();
      for (int64_t j = 0; j < blob; j += 8) {
        const int64_t h = b * blob + j;
        const __m256 ae = _mm256_loadu_ps(AE + h), ao = _mm256_loadu_ps(AO + h);
        for (int c = 0; c < NC; ++c) {
          const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(B + (n + c) * kb * blob + h)));
          d[c] = _mm256_fmadd_ps(ae, _mm256_cvtepi32_ps(_mm256_and_si256(x, m15)), d[c]);
          d[c] = _mm256_fmadd_ps(ao, _mm256_cvtepi32_ps(_mm256_srli_epi32(x, 4)), d[c]);
        }
      }
      for (int c = 0; c < NC; ++c) tot[c] = _mm256_fmadd_ps(_mm256_set1_ps(sc[(n + c) * kb + b]), d[c], tot[c]);
    }
    for (int c = 0; c < NC; ++c) {
      const uint8_t* z = zp ? zp + (n + c) * zcols : nullptr;
      const float* s = sc + (n + c) * kb;
      float corr = 0.f;
      for (int64_t b = 0; b < kb; ++b) corr += s[b] * (float)(z ? (z[b / 2] >> ((b % 2) * 4)) & 15 : 8) * AS[b];
      const __m128 q = _mm_add_ps(_mm256_castps256_ps128(tot[c]), _mm256_extractf128_ps(tot[c], 1));
      const __m128 p = _mm_add_ps(q, _mm_movehl_ps(q, q));
      C[n + c] = _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p))) - corr;
    }
  }
}

// The sum of n bytes (u8): vpsadbw against zero where AVX2 runs, else a plain loop.
__attribute__((target("avx2"))) int32_t byte_sum_avx2(const uint8_t* p, int64_t n) {
  __m256i acc = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    acc = _mm256_add_epi64(acc, _mm256_sad_epu8(_mm256_loadu_si256((const __m256i*)(p + i)), _mm256_setzero_si256()));
  alignas(32) int64_t l[4];
  _mm256_store_si256((__m256i*)l, acc);
  int64_t s = l[0] + l[1] + l[2] + l[3];
  for (; i < n; ++i) s += p[i];
  return (int32_t)s;
}
int32_t byte_sum(const uint8_t* p, int64_t n) {
  static const bool avx2 = cpu_has(QIsa::Avx2) && qgemm_isa() != QIsa::Base;
  if (avx2) return byte_sum_avx2(p, n);
  int32_t s = 0;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

}  // namespace

bool nbits4_small_m(int64_t M, const float* A, int64_t K, const uint8_t* B, const float* scales, const uint8_t* zp,
                    int64_t N, int64_t bs, float* C, Threads th, const PackedNbits4* pk) {
  const bool ok = isa_avx512_bw_vl();  // RLX_CPU_ISA caps both (isa.h)
  // Without AVX-512: one row (a decode step) on AVX2 + FMA, blocks a multiple of 32 (nbits4_row1_avx2).
  const bool avx2 = isa_avx2_fma();
  const bool row1_avx2 = !ok && avx2 && M == 1 && bs % 32 == 0 && K % bs == 0;
  if ((!ok && !row1_avx2) || M < 1 || M > 16 || K % 16 != 0 || bs % 16 != 0) return false;
  const int64_t kb = (K + bs - 1) / bs, zcols = (kb * 4 + 7) / 8;
  // one row of finite activations, blocks of 32, K a multiple of 128: in integer products
  // (nbits4_row1_bfp) with AVX-512 VNNI, or without AVX-512 with AVX-VNNI or AVX2 + FMA (where
  // AVX-512 runs without VNNI, its f32 nbits4_row1_x8 is faster than the 8-lane integer kernel)
  if ((ok ? qgemm_isa() == QIsa::Avx512Vnni : avx2) && M == 1 && bs == 32 && K % 128 == 0 &&
      nbits4_row1_bfp(A, K, B, scales, zp, N, C, th, pk))
    return true;
  if (bs % 32 == 0 && K % bs == 0) {
    // Activations split into even / odd k and block sums, once per call.
    const int64_t K2 = K / 2;
    std::vector<float> AE((size_t)(M * K2)), AO((size_t)(M * K2)), AS((size_t)(M * kb));
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t k = 0; k < K2; ++k) AE[m * K2 + k] = A[m * K + 2 * k], AO[m * K2 + k] = A[m * K + 2 * k + 1];
      for (int64_t b = 0; b < kb; ++b) {
        float t = 0.f;
        for (int64_t k = 0; k < bs; ++k) t += A[m * K + b * bs + k];
        AS[m * kb + b] = t;
      }
    }
    // one row, blocks of 32, K a multiple of 128: the activations as nbits4_row1_x8 reads them
    std::vector<float> A8;
    if (ok && M == 1 && bs == 32 && K % 128 == 0) {
      A8.resize((size_t)K);
      for (int64_t g = 0; g < K / 128; ++g)
        for (int j = 0; j < 8; ++j)
          for (int i = 0; i < 16; ++i) A8[g * 128 + j * 16 + i] = A[g * 128 + 8 * i + j];
    }
    if (row1_avx2) {
      auto body = [&](int64_t n0, int64_t n1) {
        const int64_t n4 = n0 + (n1 - n0) / 4 * 4;
        nbits4_row1_avx2<4>(AE.data(), AO.data(), AS.data(), K, B, scales, zp, zcols, n0, n4, bs, C);
        nbits4_row1_avx2<1>(AE.data(), AO.data(), AS.data(), K, B, scales, zp, zcols, n4, n1, bs, C);
      };
      if (th == Threads::Single) body(0, N);
      else ThreadPool::global().parallel_for(N, 16, body);
      return true;
    }
    auto body32 = [&](int64_t n0, int64_t n1) {
      for (int64_t m = 0; m < M; m += 4) {
        const int r = (int)std::min<int64_t>(4, M - m);
        const float *ae = AE.data() + m * K2, *ao = AO.data() + m * K2, *as = AS.data() + m * kb;
        float* c = C + m * N;
        // columns in groups (4 for one row, 2 for two), the rest one at a time
        const int64_t nc = r == 1 ? 4 : r == 2 ? 2 : 1, nm = n0 + (n1 - n0) / nc * nc;
        switch (r) {
          case 1: {
            // one row: 8 columns at a time, then 4, then one by one (nbits4_row1)
            const int64_t n8 = n0 + (n1 - n0) / 8 * 8, n4 = n8 + (n1 - n8) / 4 * 4;
            if (!A8.empty()) nbits4_row1_x8<8>(A8.data(), as, K, B, scales, zp, zcols, n0, n8, c);
            else nbits4_row1<8>(ae, ao, as, K, B, scales, zp, zcols, n0, n8, bs, c);
            nbits4_row1<4>(ae, ao, as, K, B, scales, zp, zcols, n8, n4, bs, c);
            nbits4_row1<1>(ae, ao, as, K, B, scales, zp, zcols, n4, n1, bs, c);
            break;
          }
          case 2:
            nbits4_rows32<2, 2>(ae, ao, as, K, B, scales, zp, zcols, n0, nm, bs, c, N);
            nbits4_rows32<2, 1>(ae, ao, as, K, B, scales, zp, zcols, nm, n1, bs, c, N);
            break;
          case 3: nbits4_rows32<3, 1>(ae, ao, as, K, B, scales, zp, zcols, n0, n1, bs, c, N); break;
          default: nbits4_rows32<4, 1>(ae, ao, as, K, B, scales, zp, zcols, n0, n1, bs, c, N); break;
        }
      }
    };
    if (th == Threads::Single) body32(0, N);
    else ThreadPool::global().parallel_for(N, 16, body32);
    return true;
  }
  auto body = [&](int64_t n0, int64_t n1) {
    for (int64_t m = 0; m < M; m += 4) {
      const int r = (int)std::min<int64_t>(4, M - m);
      const float* a = A + m * K;
      float* c = C + m * N;
      switch (r) {
        case 1: nbits4_rows<1>(a, K, B, scales, zp, zcols, n0, n1, bs, c, N); break;
        case 2: nbits4_rows<2>(a, K, B, scales, zp, zcols, n0, n1, bs, c, N); break;
        case 3: nbits4_rows<3>(a, K, B, scales, zp, zcols, n0, n1, bs, c, N); break;
        default: nbits4_rows<4>(a, K, B, scales, zp, zcols, n0, n1, bs, c, N); break;
      }
    }
  };
  if (th == Threads::Single) body(0, N);
  else ThreadPool::global().parallel_for(N, 16, body);
  return true;
}

bool qisa_supported(QIsa isa) { return cpu_has(isa); }

const char* qisa_name(QIsa isa) {
  switch (isa) {
    case QIsa::Avx512Vnni: return "avx512vnni";
    case QIsa::AvxVnni: return "avxvnni";
    case QIsa::Avx2: return "avx2";
    case QIsa::Base: return "base";
  }
  return "base";
}

QIsa qgemm_isa() {
  static const QIsa isa = [] {
    QIsa cap = QIsa::Avx512Vnni;
    if (const char* e = std::getenv("RLX_CPU_ISA")) {
      const std::string s = e;
      if (s == "base") cap = QIsa::Base;
      else if (s == "avx2") cap = QIsa::Avx2;
      else if (s == "avxvnni") cap = QIsa::AvxVnni;
    }
    for (int i = (int)cap; i > 0; --i)
      if (cpu_has((QIsa)i)) return (QIsa)i;
    return QIsa::Base;
  }();
  return isa;
}

namespace {

// Packs panels [p0, p1) of B: every byte of their [K4][16][4] blocks written (zeros past K and
// N), their column sums, and the range of the original values seen.
struct PackRange {
  int lo = 255, hi = -128;
};
void pack_panels_base(const uint8_t* B, bool b_signed, int64_t K, int64_t N, int64_t ldb, int64_t K4, int64_t p0,
                      int64_t p1, int8_t* D, int32_t* cs, PackRange* r) {
  const uint8_t flip = b_signed ? 0 : 0x80;  // u8 b -> s8 b - 128
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t n0 = p * kPanel, nc = std::min<int64_t>(kPanel, N - n0);
    int8_t* P = D + p * K4 * 64;
    std::memset(P, 0, (size_t)(K4 * 64));
    for (int64_t c = 0; c < kPanel; ++c) cs[n0 + c] = 0;
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t* row = B + k * ldb + n0;
      int8_t* dst = P + (k / 4) * 64 + (k % 4);
      for (int64_t c = 0; c < nc; ++c) {
        const int8_t v = (int8_t)(row[c] ^ flip);
        dst[c * 4] = v;
        cs[n0 + c] += v;
        const int o = b_signed ? (int)(int8_t)row[c] : (int)row[c];
        r->lo = std::min(r->lo, o);
        r->hi = std::max(r->hi, o);
      }
    }
  }
}

// Whole panels and whole groups of 4 k: 4 rows of 16 bytes transposed into 16 columns of 4
// bytes with byte and word unpacks; column sums with pmaddubsw against ones (pairs of s8
// values, |sum| <= 256: no saturation) and pmaddwd. The rest (a partial panel, K % 4) by the
// plain loop. Panels are taken 4 at a time so that each row read is one 64-byte line.
__attribute__((target("avx2"))) void pack_panels_avx2(const uint8_t* B, bool b_signed, int64_t K, int64_t N,
                                                       int64_t ldb, int64_t K4, int64_t p0, int64_t p1, int8_t* D,
                                                       int32_t* cs, PackRange* r) {
  const int64_t full = std::min(p1, N / kPanel);  // panels [p0, full) are whole
  if (p0 >= full || K < 4) return pack_panels_base(B, b_signed, K, N, ldb, K4, p0, p1, D, cs, r);
  const __m128i flip = _mm_set1_epi8(b_signed ? 0 : (char)0x80), ones8 = _mm_set1_epi8(1), ones16 = _mm_set1_epi16(1);
  const int64_t kf = K / 4 * 4;
  for (int64_t q0 = p0; q0 < full; q0 += 4) {
    const int64_t q1 = std::min(full, q0 + 4), np = q1 - q0;
    __m128i sum[4][4], mn = _mm_set1_epi8(127), mx = _mm_set1_epi8(-128);
    for (int64_t i = 0; i < np; ++i)
      for (int j = 0; j < 4; ++j) sum[i][j] = _mm_setzero_si128();
    for (int64_t k = 0; k < kf; k += 4) {
      for (int64_t i = 0; i < np; ++i) {
        const uint8_t* src = B + k * ldb + (q0 + i) * kPanel;
        __m128i x[4];
        for (int j = 0; j < 4; ++j) {
          x[j] = _mm_xor_si128(_mm_loadu_si128((const __m128i*)(src + j * ldb)), flip);
          mn = _mm_min_epi8(mn, x[j]);
          mx = _mm_max_epi8(mx, x[j]);
        }
        const __m128i a = _mm_unpacklo_epi8(x[0], x[1]), b = _mm_unpackhi_epi8(x[0], x[1]);
        const __m128i c = _mm_unpacklo_epi8(x[2], x[3]), d = _mm_unpackhi_epi8(x[2], x[3]);
        const __m128i o[4] = {_mm_unpacklo_epi16(a, c), _mm_unpackhi_epi16(a, c), _mm_unpacklo_epi16(b, d),
                              _mm_unpackhi_epi16(b, d)};
        int8_t* dst = D + (q0 + i) * K4 * 64 + (k / 4) * 64;
        for (int j = 0; j < 4; ++j) {
          _mm_storeu_si128((__m128i*)(dst + 16 * j), o[j]);
          sum[i][j] = _mm_add_epi32(sum[i][j], _mm_madd_epi16(_mm_maddubs_epi16(ones8, o[j]), ones16));
        }
      }
    }
    for (int64_t i = 0; i < np; ++i) {
      const int64_t n0 = (q0 + i) * kPanel;
      for (int j = 0; j < 4; ++j) _mm_storeu_si128((__m128i*)(cs + n0 + 4 * j), sum[i][j]);
      int8_t* P = D + (q0 + i) * K4 * 64;
      if (kf < K4 * 4) std::memset(P + (kf / 4) * 64, 0, 64);  // the last, partial group of k
      for (int64_t k = kf; k < K; ++k)
        for (int64_t c = 0; c < kPanel; ++c) {
          const uint8_t v0 = B[k * ldb + n0 + c];
          const int8_t v = (int8_t)(v0 ^ (b_signed ? 0 : 0x80));
          P[(k / 4) * 64 + c * 4 + (k % 4)] = v;
          cs[n0 + c] += v;
          const int o = b_signed ? (int)(int8_t)v0 : (int)v0;
          r->lo = std::min(r->lo, o);
          r->hi = std::max(r->hi, o);
        }
    }
    alignas(16) int8_t lo[16], hi[16];
    _mm_store_si128((__m128i*)lo, mn);
    _mm_store_si128((__m128i*)hi, mx);
    for (int j = 0; j < 16; ++j) {  // flipped values back to the original range
      r->lo = std::min(r->lo, (int)lo[j] + (b_signed ? 0 : 128));
      r->hi = std::max(r->hi, (int)hi[j] + (b_signed ? 0 : 128));
    }
  }
  if (full < p1) pack_panels_base(B, b_signed, K, N, ldb, K4, full, p1, D, cs, r);
}

}  // namespace

void pack_qb_into(PackedQB& pk, const uint8_t* B, bool b_signed, int64_t K, int64_t N, int64_t ldb, Threads th) {
  pk.K = K;
  pk.N = N;
  pk.K4 = (K + 3) / 4;
  pk.panels = (N + kPanel - 1) / kPanel;
  pk.b_signed = b_signed;
  // every byte is written below: a buffer too small is dropped first, not copied when it grows
  const size_t need = (size_t)(pk.panels * pk.K4 * 64), ncs = (size_t)(pk.panels * kPanel);
  if (pk.data.capacity() < need) std::vector<int8_t>().swap(pk.data);
  if (pk.colsum.capacity() < ncs) std::vector<int32_t>().swap(pk.colsum);
  pk.data.resize(need);
  pk.colsum.resize(ncs);
  const int64_t K4 = pk.K4;
  int8_t* D = pk.data.data();
  int32_t* cs = pk.colsum.data();
  static const bool avx2 = cpu_has(QIsa::Avx2) && qgemm_isa() != QIsa::Base;
  const int64_t blocks = (pk.panels + 3) / 4;  // 4 panels (64 columns) per task
  std::vector<PackRange> ranges((size_t)std::max<int64_t>(blocks, 1));
  auto body = [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t p0 = b * 4, p1 = std::min(pk.panels, p0 + 4);
      (avx2 ? pack_panels_avx2 : pack_panels_base)(B, b_signed, K, N, ldb, K4, p0, p1, D, cs, &ranges[b]);
    }
  };
  if (th == Threads::Single) body(0, blocks);
  else ThreadPool::global().parallel_for(blocks, std::max<int64_t>(1, 4096 / std::max<int64_t>(K, 1)), body);
  PackRange t;
  for (const PackRange& r : ranges) t.lo = std::min(t.lo, r.lo), t.hi = std::max(t.hi, r.hi);
  pk.bmin = K && N ? t.lo : 0;
  pk.bmax = K && N ? t.hi : 0;
}

std::shared_ptr<const PackedQB> pack_qb(const uint8_t* B, bool b_signed, int64_t K, int64_t N, int64_t ldb) {
  auto pk = std::make_shared<PackedQB>();
  pack_qb_into(*pk, B, b_signed, K, N, ldb);
  return pk;
}

void qgemm(int64_t M, const uint8_t* A, bool a_signed, int64_t lda, const int32_t* za, bool za_per_row,
           const PackedQB& B, const int32_t* zb, bool zb_per_col, int32_t* C, int64_t ldc, const QEpilogue& ep,
           QIsa isa, Threads th) {
  const int64_t K = B.K, N = B.N, K4 = B.K4, lp = K4 * 4, NP = B.panels * kPanel;
  if (M <= 0 || N <= 0) return;
  if (!cpu_has(isa)) isa = QIsa::Base;
  auto run = [&](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (th == Threads::Single || n <= 1) fn(0, n);
    else ThreadPool::global().parallel_for(n, grain, fn);
  };
  // A' rows (u8, padded to a multiple of 4 with zeros) and their sums; the zero points.
  // A u8 A whose rows are already a multiple of 4 long is read in place (only its row sums
  // are made); an i8 A is copied flipped, a ragged one padded.
  const bool in_place = !a_signed && K == lp;
  std::vector<uint8_t> Ap(in_place ? 0 : (size_t)(M * lp));
  std::vector<int32_t> rs((size_t)M), zam((size_t)M), zbn((size_t)NP, 0), un((size_t)NP, 0);
  const uint8_t flip = a_signed ? 0x80 : 0;  // i8 a -> u8 a + 128
  run(M, std::max<int64_t>(1, 65536 / std::max<int64_t>(lp, 1)), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const uint8_t* src = A + m * lda;
      int32_t s = 0;
      if (in_place) {
        s = byte_sum(src, K);
      } else {
        uint8_t* dst = Ap.data() + m * lp;
        for (int64_t k = 0; k < K; ++k) {
          dst[k] = src[k] ^ flip;
          s += dst[k];
        }
        for (int64_t k = K; k < lp; ++k) dst[k] = 0;
      }
      rs[m] = s;
      zam[m] = (za ? za[za_per_row ? m : 0] : 0) + (a_signed ? 128 : 0);
    }
  });
  const uint8_t* Aq = in_place ? A : Ap.data();
  const int64_t lda_q = in_place ? lda : lp;
  for (int64_t n = 0; n < N; ++n) {
    zbn[n] = (zb ? zb[zb_per_col ? n : 0] : 0) - (B.b_signed ? 0 : 128);
    un[n] = (int32_t)((uint32_t)B.colsum[n] - (uint32_t)K * (uint32_t)zbn[n]);
  }
  std::vector<float> bsc;
  if (ep.to_float) {
    bsc.assign((size_t)N, 1.f);
    if (ep.b_scale)
      for (int64_t n = 0; n < N; ++n) bsc[n] = ep.b_scale[ep.b_scale_per_col ? n : 0];
  }
  const Finish fin{K, rs.data(), zam.data(), zbn.data(), un.data(), &ep, bsc.data(), ep.bias};
  auto finish = isa == QIsa::Base ? finish_base : finish_avx2;

  // Tasks: row blocks x groups of panels. A group's panels stay in cache over its rows.
  const int mr = max_rows(isa), npm = max_panels(isa);
  const int64_t group = 4;  // panels per task
  const int64_t groups = (B.panels + group - 1) / group;
  const int64_t rb = M <= 64 ? M : 32;
  const int64_t rblocks = (M + rb - 1) / rb;
  // K in blocks of kKc so that a group's panel slices (4 x 16 x kKc bytes, 64 KB) stay in L2
  // while every row tile of the task passes over them (256, slices in L1, was measured slower:
  // the accumulators' extra loads and stores cost more than L2's loads); each task accumulates into its own block
  // buffer (full panels, so partial column panels need no special store) and copies it out.
  constexpr int64_t kKc = 1024;  // k per block (a multiple of 4)
  const int64_t ps = K4 * 64;
  run(groups * rblocks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<int32_t> blk((size_t)(rb * group * kPanel));
    const int64_t ldb = group * kPanel;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t g = t % groups, r0 = (t / groups) * rb, r1 = std::min(M, r0 + rb);
      const int64_t p0 = g * group, p1 = std::min(B.panels, p0 + group);
      for (int64_t k0 = 0; k0 < K4 || k0 == 0; k0 += kKc / 4) {
        const int64_t kn = std::min<int64_t>(kKc / 4, K4 - k0);
        for (int64_t p = p0; p < p1;) {
          const int np = p + npm <= p1 ? npm : 1;
          const int8_t* Bp = B.data.data() + p * ps + k0 * 64;
          for (int64_t r = r0; r < r1; r += mr) {
            const int m = (int)std::min<int64_t>(mr, r1 - r);
            tile(isa, m, np, Aq + r * lda_q + k0 * 4, lda_q, Bp, kn, ps, blk.data() + (r - r0) * ldb + (p - p0) * kPanel,
                 ldb, k0 > 0);
          }
          p += np;
        }
        if (K4 == 0) break;
      }
      const int64_t c0 = p0 * kPanel, c1 = std::min(N, p1 * kPanel);
      finish(fin, blk.data(), ldb, C, ldc, r0, r1, c0, c1);
    }
  });
}

}  // namespace rlx::cpu
