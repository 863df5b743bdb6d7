// f16 / bf16 right-hand operands read directly (see half_gemm.h). Three levels, each in
// functions compiled for its instruction set (target attributes) and chosen at run time.
#include "backends/cpu/half_gemm.h"

// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_ps in the reductions).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/thread_pool.h"
#include "core/error.h"

namespace rlx::cpu {
namespace {

// One product; every level reads its operands from here.
struct Job {
  int64_t M, N, K;
  const float* A32 = nullptr;     // A as f32 (row stride lda), for the conversion paths
  const uint16_t* A16 = nullptr;  // A as bf16 (row stride lda), for the vdpbf16ps path
  int64_t lda;
  const uint16_t* B;
  int64_t ldb;
  bool b_f16;  // else bf16
  bool b_trans;
  float* C;
  int64_t ldc;
};

// ------------------------------------------------------------------ plain
inline float half_value(uint16_t h, bool f16) { return f16 ? f16_to_f32(h) : bf16_to_f32(h); }

void plain_range(const Job& j, int64_t n0, int64_t n1) {
  for (int64_t m = 0; m < j.M; ++m) {
    const float* a = j.A32 + m * j.lda;
    float* c = j.C + m * j.ldc;
    if (j.b_trans) {
      for (int64_t n = n0; n < n1; ++n) {
        const uint16_t* b = j.B + n * j.ldb;
        float acc = 0.f;
        for (int64_t k = 0; k < j.K; ++k) acc += a[k] * half_value(b[k], j.b_f16);
        c[n] = acc;
      }
    } else {
      for (int64_t n = n0; n < n1; ++n) c[n] = 0.f;
      for (int64_t k = 0; k < j.K; ++k) {
        const uint16_t* b = j.B + k * j.ldb;
        const float av = a[k];
        for (int64_t n = n0; n < n1; ++n) c[n] += av * half_value(b[n], j.b_f16);
      }
    }
  }
}

// ------------------------------------------------------------------ AVX2 + FMA + F16C
#define RLX_T256 __attribute__((target("avx2,fma,f16c")))

template <bool F16>
RLX_T256 inline __m256 cvt8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (F16) return _mm256_cvtph_ps(h);
  else return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

RLX_T256 inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// C tile [MR x NR] of the linear layout: dot products along K.
template <bool F16, int MR, int NR>
RLX_T256 void nt256_tile(const Job& j, int64_t m0, int64_t n0) {
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int t = 0; t < NR; ++t) acc[i][t] = _mm256_setzero_ps();
  const float* a = j.A32 + m0 * j.lda;
  const uint16_t* b = j.B + n0 * j.ldb;
  int64_t k = 0;
  for (; k + 8 <= j.K; k += 8) {
    __m256 bv[NR];
    for (int t = 0; t < NR; ++t) bv[t] = cvt8<F16>(b + t * j.ldb + k);
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_loadu_ps(a + i * j.lda + k);
      for (int t = 0; t < NR; ++t) acc[i][t] = _mm256_fmadd_ps(av, bv[t], acc[i][t]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int t = 0; t < NR; ++t) {
      float s = hsum8(acc[i][t]);
      for (int64_t kk = k; kk < j.K; ++kk) s += a[i * j.lda + kk] * half_value(b[t * j.ldb + kk], F16);
      j.C[(m0 + i) * j.ldc + n0 + t] = s;
    }
}

template <bool F16, int NR>
RLX_T256 void nt256_rows(const Job& j, int64_t n0) {
  int64_t m = 0;
  for (; m + 2 <= j.M; m += 2) nt256_tile<F16, 2, NR>(j, m, n0);
  if (m < j.M) nt256_tile<F16, 1, NR>(j, m, n0);
}

// C rows [MR] x 16 columns of the [K, N] layout: rows of B along N.
template <bool F16, int MR>
RLX_T256 void nn256_block(const Job& j, int64_t m0, int64_t n0) {
  __m256 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < j.K; ++k) {
    const uint16_t* b = j.B + k * j.ldb + n0;
    const __m256 b0 = cvt8<F16>(b), b1 = cvt8<F16>(b + 8);
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_set1_ps(j.A32[(m0 + i) * j.lda + k]);
      acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    _mm256_storeu_ps(j.C + (m0 + i) * j.ldc + n0, acc[i][0]);
    _mm256_storeu_ps(j.C + (m0 + i) * j.ldc + n0 + 8, acc[i][1]);
  }
}

template <bool F16>
RLX_T256 void f16c_range(const Job& j, int64_t n0, int64_t n1) {
  int64_t n = n0;
  if (j.b_trans) {
    if (j.M == 1) {
      for (; n + 6 <= n1; n += 6) nt256_tile<F16, 1, 6>(j, 0, n);
    } else {
      for (; n + 4 <= n1; n += 4) nt256_rows<F16, 4>(j, n);
    }
    for (; n < n1; ++n) nt256_rows<F16, 1>(j, n);
    return;
  }
  for (; n + 16 <= n1; n += 16) {
    int64_t m = 0;
    for (; m + 4 <= j.M; m += 4) nn256_block<F16, 4>(j, m, n);
    for (; m < j.M; ++m) nn256_block<F16, 1>(j, m, n);
  }
  if (n < n1) {
    Job t = j;
    plain_range(t, n, n1);
  }
}

// ------------------------------------------------------------------ AVX-512 (+ BF16)
#define RLX_T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))

template <bool F16>
RLX_T512 inline __m512 cvt16(const uint16_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  if constexpr (F16) return _mm512_cvtph_ps(h);
  else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <bool F16>
RLX_T512 inline __m512 cvt16u(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (F16) return _mm512_cvtph_ps(h);
  else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <bool F16, int MR, int NR>
RLX_T512 void nt512_tile(const Job& j, int64_t m0, int64_t n0) {
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int t = 0; t < NR; ++t) acc[i][t] = _mm512_setzero_ps();
  const float* a = j.A32 + m0 * j.lda;
  const uint16_t* b = j.B + n0 * j.ldb;
  int64_t k = 0;
  for (; k + 16 <= j.K; k += 16) {  // full blocks: plain loads
    __m512 bv[NR];
    for (int t = 0; t < NR; ++t) bv[t] = cvt16u<F16>(b + t * j.ldb + k);
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_loadu_ps(a + i * j.lda + k);
      for (int t = 0; t < NR; ++t) acc[i][t] = _mm512_fmadd_ps(av, bv[t], acc[i][t]);
    }
  }
  if (k < j.K) {  // the tail, masked
    const __mmask16 mk = (__mmask16)((1u << (j.K - k)) - 1);
    __m512 bv[NR];
    for (int t = 0; t < NR; ++t) bv[t] = cvt16<F16>(b + t * j.ldb + k, mk);
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_maskz_loadu_ps(mk, a + i * j.lda + k);
      for (int t = 0; t < NR; ++t) acc[i][t] = _mm512_fmadd_ps(av, bv[t], acc[i][t]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int t = 0; t < NR; ++t) j.C[(m0 + i) * j.ldc + n0 + t] = _mm512_reduce_add_ps(acc[i][t]);
}

// bf16 x bf16 with vdpbf16ps: 32 products per instruction, pairs summed into f32 lanes.
template <int MR, int NR>
RLX_T512 void dp512_tile(const Job& j, int64_t m0, int64_t n0) {
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int t = 0; t < NR; ++t) acc[i][t] = _mm512_setzero_ps();
  const uint16_t* a = j.A16 + m0 * j.lda;
  const uint16_t* b = j.B + n0 * j.ldb;
  int64_t k = 0;
  for (; k + 32 <= j.K; k += 32) {  // full blocks: plain loads
    __m512bh bv[NR];
    for (int t = 0; t < NR; ++t) bv[t] = (__m512bh)_mm512_loadu_si512(b + t * j.ldb + k);
    for (int i = 0; i < MR; ++i) {
      const __m512bh av = (__m512bh)_mm512_loadu_si512(a + i * j.lda + k);
      for (int t = 0; t < NR; ++t) acc[i][t] = _mm512_dpbf16_ps(acc[i][t], av, bv[t]);
    }
  }
  if (k < j.K) {  // the tail, masked (zeros contribute nothing)
    const __mmask32 mk = (__mmask32)((1u << (j.K - k)) - 1);
    __m512bh bv[NR];
    for (int t = 0; t < NR; ++t) bv[t] = (__m512bh)_mm512_maskz_loadu_epi16(mk, b + t * j.ldb + k);
    for (int i = 0; i < MR; ++i) {
      const __m512bh av = (__m512bh)_mm512_maskz_loadu_epi16(mk, a + i * j.lda + k);
      for (int t = 0; t < NR; ++t) acc[i][t] = _mm512_dpbf16_ps(acc[i][t], av, bv[t]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int t = 0; t < NR; ++t) j.C[(m0 + i) * j.ldc + n0 + t] = _mm512_reduce_add_ps(acc[i][t]);
}

// Tiles over all rows of C for NR columns starting at n0 (MR 4, then the remainder).
template <int NR, class Tile4, class Tile3, class Tile2, class Tile1>
RLX_T512 inline void rows512(const Job& j, int64_t n0, Tile4 t4, Tile3 t3, Tile2 t2, Tile1 t1) {
  int64_t m = 0;
  for (; m + 4 <= j.M; m += 4) t4(j, m, n0);
  switch (j.M - m) {
    case 3: t3(j, m, n0); break;
    case 2: t2(j, m, n0); break;
    case 1: t1(j, m, n0); break;
    default: break;
  }
}

template <bool F16, int MR, bool FULL>
RLX_T512 void nn512_block(const Job& j, int64_t m0, int64_t n0, int64_t len) {
  const __mmask16 m0k = len >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << len) - 1);
  const __mmask16 m1k = len >= 32 ? (__mmask16)0xFFFF : len > 16 ? (__mmask16)((1u << (len - 16)) - 1) : 0;
  __m512 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < j.K; ++k) {
    const uint16_t* b = j.B + k * j.ldb + n0;
    __m512 b0, b1;
    if constexpr (FULL) b0 = cvt16u<F16>(b), b1 = cvt16u<F16>(b + 16);  // 32 columns: plain loads
    else b0 = cvt16<F16>(b, m0k), b1 = cvt16<F16>(b + 16, m1k);
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(j.A32[(m0 + i) * j.lda + k]);
      acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    _mm512_mask_storeu_ps(j.C + (m0 + i) * j.ldc + n0, m0k, acc[i][0]);
    _mm512_mask_storeu_ps(j.C + (m0 + i) * j.ldc + n0 + 16, m1k, acc[i][1]);
  }
}

template <bool F16>
RLX_T512 void avx512_range(const Job& j, int64_t n0, int64_t n1) {
  int64_t n = n0;
  if (j.b_trans && j.A16) {  // bf16 x bf16
    if (j.M == 1) {
      for (; n + 8 <= n1; n += 8) dp512_tile<1, 8>(j, 0, n);
    } else {
      for (; n + 4 <= n1; n += 4)
        rows512<4>(j, n, dp512_tile<4, 4>, dp512_tile<3, 4>, dp512_tile<2, 4>, dp512_tile<1, 4>);
    }
    for (; n < n1; ++n) rows512<1>(j, n, dp512_tile<4, 1>, dp512_tile<3, 1>, dp512_tile<2, 1>, dp512_tile<1, 1>);
    return;
  }
  if (j.b_trans) {
    if (j.M == 1) {
      for (; n + 8 <= n1; n += 8) nt512_tile<F16, 1, 8>(j, 0, n);
    } else {
      for (; n + 4 <= n1; n += 4)
        rows512<4>(j, n, nt512_tile<F16, 4, 4>, nt512_tile<F16, 3, 4>, nt512_tile<F16, 2, 4>, nt512_tile<F16, 1, 4>);
    }
    for (; n < n1; ++n)
      rows512<1>(j, n, nt512_tile<F16, 4, 1>, nt512_tile<F16, 3, 1>, nt512_tile<F16, 2, 1>, nt512_tile<F16, 1, 1>);
    return;
  }
  for (; n < n1; n += 32) {
    const int64_t len = std::min<int64_t>(32, n1 - n);
    int64_t m = 0;
    if (len == 32) {
      for (; m + 6 <= j.M; m += 6) nn512_block<F16, 6, true>(j, m, n, len);
      for (; m < j.M; ++m) nn512_block<F16, 1, true>(j, m, n, len);
    } else {
      for (; m + 6 <= j.M; m += 6) nn512_block<F16, 6, false>(j, m, n, len);
      for (; m < j.M; ++m) nn512_block<F16, 1, false>(j, m, n, len);
    }
  }
}

// ------------------------------------------------------------------ dispatch
bool cpu_has(HalfIsa isa) {
  switch (isa) {
    case HalfIsa::Plain: return true;
    case HalfIsa::F16C:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case HalfIsa::Avx512Bf16:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16") &&
             __builtin_cpu_supports("fma");
  }
  return false;
}

HalfIsa detect_best() {
  // RLX_CPU_ISA caps every kernel choice (isa.h): below AVX-512 the f16c level, at base the loops.
  HalfIsa cap = isa_avx512() ? HalfIsa::Avx512Bf16 : isa_avx2_fma() ? HalfIsa::F16C : HalfIsa::Plain;
  if (const char* e = std::getenv("RLX_HALF_ISA")) {
    const std::string s = e;
    if (s == "plain") cap = HalfIsa::Plain;
    else if (s == "f16c") cap = std::min(cap, HalfIsa::F16C);
  }
  for (int l = (int)cap; l > 0; --l)
    if (cpu_has((HalfIsa)l)) return (HalfIsa)l;
  return HalfIsa::Plain;
}

}  // namespace

bool half_isa_supported(HalfIsa isa) { return cpu_has(isa); }

HalfIsa half_isa_best() {
  static const HalfIsa best = detect_best();
  return best;
}

const char* half_isa_name(HalfIsa isa) {
  switch (isa) {
    case HalfIsa::Plain: return "plain";
    case HalfIsa::F16C: return "f16c";
    case HalfIsa::Avx512Bf16: return "avx512bf16";
  }
  return "?";
}

void half_gemm(int64_t M, int64_t N, int64_t K, const void* A, DType a_dt, int64_t lda, const uint16_t* B,
               DType b_dt, int64_t ldb, bool b_trans, float* C, int64_t ldc, HalfIsa isa, bool threaded) {
  if (!is_half(b_dt)) throw RuntimeError(std::string("internal: half_gemm with a ") + dtype_name(b_dt) + " B");
  if (!is_float(a_dt)) throw RuntimeError(std::string("internal: half_gemm with a ") + dtype_name(a_dt) + " A");
  if (!cpu_has(isa)) isa = half_isa_best();
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t m = 0; m < M; ++m) std::fill(C + m * ldc, C + m * ldc + N, 0.f);
    return;
  }
  // bf16 x bf16 with more than 16 rows: oneDNN's matmul (AMX tiles where the CPU has them:
  // 3.8 TFLOP/s against 0.43 for vdpbf16ps on the lent machine's Xeon, docs/benchmarks.md).
  // RLX_HALF_ISA below avx512bf16 or RLX_GEMM_DNNL=0 keep rlx's own kernels.
  if (threaded && isa == HalfIsa::Avx512Bf16 && a_dt == DType::bf16 && b_dt == DType::bf16 &&
      dnnl_bf16_gemm(M, N, K, static_cast<const uint16_t*>(A), lda, B, ldb, b_trans, C, ldc))
    return;
  Job j{M, N, K, nullptr, nullptr, lda, B, ldb, b_dt == DType::f16, b_trans, C, ldc};
  std::vector<float> a32;
  const bool dp = isa == HalfIsa::Avx512Bf16 && b_trans && a_dt == DType::bf16 && b_dt == DType::bf16;
  if (dp) {
    j.A16 = static_cast<const uint16_t*>(A);
  } else if (a_dt == DType::f32) {
    j.A32 = static_cast<const float*>(A);
  } else {  // half activations: widened once (exact), then the conversion paths
    a32.resize((size_t)(M * K));
    for (int64_t m = 0; m < M; ++m)
      convert_elements(static_cast<const uint16_t*>(A) + m * lda, a_dt, a32.data() + m * K, DType::f32, K);
    j.A32 = a32.data();
    j.lda = K;
  }
  auto range = [&](int64_t n0, int64_t n1) {
    switch (isa) {
      case HalfIsa::Avx512Bf16: return j.b_f16 ? avx512_range<true>(j, n0, n1) : avx512_range<false>(j, n0, n1);
      case HalfIsa::F16C: return j.b_f16 ? f16c_range<true>(j, n0, n1) : f16c_range<false>(j, n0, n1);
      case HalfIsa::Plain: return plain_range(j, n0, n1);
    }
  };
  if (!threaded) return range(0, N);
  // Split N over the threads in groups of 32 columns; at least ~64k multiply-adds a chunk.
  constexpr int64_t G = 32;
  const int64_t groups = (N + G - 1) / G;
  const int64_t grain = std::max<int64_t>(1, (int64_t)65536 / std::max<int64_t>(1, M * K * G));
  ThreadPool::global().parallel_for(groups, grain, [&](int64_t g0, int64_t g1) { range(g0 * G, std::min(N, g1 * G)); });
}

}  // namespace rlx::cpu
