// The CPU backend's GEMM (see gemm.h): OpenBLAS loaded with its kernel set chosen from the
// CPU's features, rlx's thread pool around it, and rlx's own skinny kernels for M <= 16.
#include "backends/cpu/gemm.h"

#include <cblas.h>
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/dnnl_api.h"
#include "backends/cpu/fast_math.h"
#include "backends/cpu/host_memory.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/thread_pool.h"
#include "core/error.h"

namespace rlx::cpu {
namespace {

// ---------------- OpenBLAS, loaded after its kernel set is chosen ----------------
// OpenBLAS (a DYNAMIC_ARCH build, as Debian's) picks its kernels once, in its library
// constructor, from OPENBLAS_CORETYPE or else from its own table of known processors. So rlx
// does not link it: it sets OPENBLAS_CORETYPE from the CPU's feature bits (never from a model
// list) and only then dlopens it. An OPENBLAS_CORETYPE inherited from the environment is NOT
// used for this load: it is a process-wide setting often made for other programs (this
// project's shared machine sets Haswell for everything, which leaves the AVX-512 units idle:
// 2.2x slower on 2048^3, docs/benchmarks.md). RLX_OPENBLAS_CORETYPE forces a kernel set.
// The environment is restored after the load, so child processes see what the user set.
struct Blas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_dgemm) dgemm = nullptr;  // f64 products (dgemm below)
  void (*set_num_threads)(int) = nullptr;
  char* (*get_corename)() = nullptr;
  std::string asked;  // the coretype rlx asked for ("" = OpenBLAS's own detection)
  bool forced = false;  // asked comes from RLX_OPENBLAS_CORETYPE
  std::string error;
};

// Cooperlake's single-precision kernels are SkylakeX's (it only adds bf16 ones), and 0.3.21
// does not accept "Cooperlake" as a name: every AVX-512 processor gets SkylakeX.
// RLX_CPU_ISA, when set: the widest instruction set rlx's kernels may use (tests force the
// narrow paths with it on any machine). "" when unset.
std::string isa_cap() {
  const char* e = std::getenv("RLX_CPU_ISA");
  return e ? e : "";
}

const char* coretype_from_features() {
  // A cap below AVX-512 gives OpenBLAS the kernels of that class too: Haswell's (AVX2 + FMA),
  // or Prescott's (SSE2/SSE3, what any x86-64 runs) for "base".
  const std::string cap = isa_cap();
  if (cap == "base") return "Prescott";
  __builtin_cpu_init();
  if ((cap == "avx2" || cap == "avxvnni") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return "Haswell";
  // __builtin_cpu_supports checks CPUID and that the OS saves the AVX-512 / AVX state (XCR0).
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;  // older processors: OpenBLAS's own detection
}

const Blas& blas() {
  static Blas b = [] {
    Blas r;
    const char* forced = std::getenv("RLX_OPENBLAS_CORETYPE");
    const char* want = forced && *forced ? forced : coretype_from_features();
    r.forced = forced && *forced;
    const char* inherited = std::getenv("OPENBLAS_CORETYPE");
    std::string saved = inherited ? inherited : "";
    if (want) {
      setenv("OPENBLAS_CORETYPE", want, 1);
      r.asked = want;
    } else {
      unsetenv("OPENBLAS_CORETYPE");
    }
    // OpenBLAS starts its own threads in its constructor (one per core less one) unless
    // OPENBLAS_NUM_THREADS says 1: rlx's pool does the threading, so it starts none.
    const char* nt = std::getenv("OPENBLAS_NUM_THREADS");
    std::string saved_nt = nt ? nt : "";
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    void* h = nullptr;
    for (const char* name : {"libopenblas.so.0", "libopenblas.so"})
      if ((h = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    // leave the environment as it was found
    if (inherited) setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
    else unsetenv("OPENBLAS_CORETYPE");
    if (nt) setenv("OPENBLAS_NUM_THREADS", saved_nt.c_str(), 1);
    else unsetenv("OPENBLAS_NUM_THREADS");
    if (!h) {
      r.error = std::string("cannot load OpenBLAS (libopenblas.so.0; run scripts/setup.sh): ") + dlerror();
      return r;
    }
    r.sgemm = reinterpret_cast<decltype(&cblas_sgemm)>(dlsym(h, "cblas_sgemm"));
    r.dgemm = reinterpret_cast<decltype(&cblas_dgemm)>(dlsym(h, "cblas_dgemm"));
    r.set_num_threads = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"));
    r.get_corename = reinterpret_cast<char* (*)()>(dlsym(h, "openblas_get_corename"));
    if (!r.sgemm || !r.set_num_threads) {
      r.error = "the loaded OpenBLAS lacks cblas_sgemm/openblas_set_num_threads";
      r.sgemm = nullptr;
      return r;
    }
    // rlx's pool does the threading: OpenBLAS runs single-threaded inside its tasks.
    r.set_num_threads(1);
    return r;
  }();
  return b;
}

decltype(&cblas_sgemm) sgemm_fn() {
  const Blas& b = blas();
  if (!b.sgemm) throw RuntimeError(b.error);
  return b.sgemm;
}

decltype(&cblas_dgemm) dgemm_fn() {
  const Blas& b = blas();
  if (!b.sgemm) throw RuntimeError(b.error);
  if (!b.dgemm) throw RuntimeError("the loaded OpenBLAS lacks cblas_dgemm (needed for f64 products)");
  return b.dgemm;
}

int blas_int(int64_t v) {
  if (v > INT32_MAX) throw RuntimeError("matrix dimension " + std::to_string(v) + " is too large for BLAS");
  return (int)v;
}

bool use_avx512() {
  static const bool yes = [] {
    const std::string cap = isa_cap();
    if (cap == "base" || cap == "avx2" || cap == "avxvnni") return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return yes;
}
// RLX_GEMM_WIDE=1: products with more than 16 rows and a prepacked weight use rlx's kernel
// (wide_gemm) instead of OpenBLAS. (Experimental: off by default until measured faster.)
bool wide_enabled() {
  static const bool yes = [] {
    const char* e = std::getenv("RLX_GEMM_WIDE");
    return e && std::string(e) == "1";
  }();
  return yes;
}
bool use_avx2() {
  static const bool yes = [] {
    if (isa_cap() == "base") return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0;
  }();
  return yes;
}

// ---------------- epilogue ----------------
float act_one(EwOp op, float x) {
  switch (op) {
    case EwOp::Relu: return x > 0.f ? x : (x != x ? x : 0.f);
    default: return ew_apply(op, x);
  }
}

// Applies the epilogue to C[m0:m1, n0:n1] (a block one task just computed).
void apply_epilogue(const Epilogue& ep, float* C, int64_t ldc, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (!ep.any() || n1 <= n0) return;
  const int64_t w = n1 - n0;
  for (int64_t m = m0; m < m1; ++m) {
    float* __restrict c = C + m * ldc + n0;
    if (ep.bias) {
      const float* __restrict b = ep.bias + n0;
      for (int64_t j = 0; j < w; ++j) c[j] += b[j];
    }
    if (ep.residual) {
      const float* __restrict r = ep.residual + m * ep.ldr + n0;
      for (int64_t j = 0; j < w; ++j) c[j] += r[j];
    }
    if (!ep.has_act) continue;
    switch (ep.act) {
      case EwOp::Relu:
        for (int64_t j = 0; j < w; ++j) c[j] = c[j] > 0.f ? c[j] : (c[j] != c[j] ? c[j] : 0.f);
        break;
      case EwOp::Silu: for (int64_t j = 0; j < w; ++j) c[j] = c[j] * fm_sigmoid(c[j]); break;
      case EwOp::GeluErf: for (int64_t j = 0; j < w; ++j) c[j] = fm_gelu_erf(c[j]); break;
      case EwOp::GeluTanh: for (int64_t j = 0; j < w; ++j) c[j] = fm_gelu_tanh(c[j]); break;
      case EwOp::Sigmoid: for (int64_t j = 0; j < w; ++j) c[j] = fm_sigmoid(c[j]); break;
      case EwOp::Tanh: for (int64_t j = 0; j < w; ++j) c[j] = fm_tanh(c[j]); break;
      default:
        for (int64_t j = 0; j < w; ++j) c[j] = act_one(ep.act, c[j]);
    }
  }
  if (ep.custom) ep.custom(C, ldc, m0, m1, n0, n1);
}

void parallel(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn, Threads th) {
  if (th == Threads::Single) fn(0, n);
  else ThreadPool::global().parallel_for(n, grain, fn);
}

// ---------------- skinny kernels (M <= 16) ----------------
// dot: C[m, n] = alpha * sum_k A[m, k] W[n, k]   (W is N x K: a linear's weight, streamed once)
// axpy: C[m, :] = alpha * sum_k A[m, k] B[k, :]  (B is K x N)
// Both compute columns [n0, n1) of all M rows; callers split N over threads.

void dot_scalar(int64_t M, int64_t n0, int64_t n1, int64_t K, float alpha, const float* A, int64_t lda, const float* W,
                int64_t ldw, float* C, int64_t ldc) {
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t m = 0; m < M; ++m) {
      double s = 0;  // (scalar fallback: accuracy over speed)
      for (int64_t k = 0; k < K; ++k) s += (double)A[m * lda + k] * W[n * ldw + k];
      C[m * ldc + n] = alpha * (float)s;
    }
}

void axpy_scalar(int64_t M, int64_t n0, int64_t n1, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m) {
    float* c = C + m * ldc;
    for (int64_t n = n0; n < n1; ++n) c[n] = 0.f;
    for (int64_t k = 0; k < K; ++k) {
      float a = alpha * A[m * lda + k];
      const float* b = B + k * ldb;
      for (int64_t n = n0; n < n1; ++n) c[n] += a * b[n];
    }
  }
}

// The SIMD kernels work on tiles of MB rows of A x NB columns of C with MB and NB known at
// compile time, so that the accumulators stay in registers (GCC at -O2 does not fully unroll
// loops over runtime-sized tiles: an earlier version kept them on the stack and read weights
// at 7 GB/s on one core). Column tails reuse the tile with pointers clamped to the last valid
// column and store only the valid part.

// dot tile: C[m0 + i, n + j] = alpha * A[m0 + i, :] . W[n + j, :], i < MB, j < nb <= NB.
template <int MB, int NB>
__attribute__((target("avx512f"))) void dot512_tile(const float* A, int64_t lda, const float* W, int64_t ldw, int64_t n,
                                                    int nb, int64_t K, float alpha, float* C, int64_t ldc) {
  const int64_t Kv = K & ~int64_t(15);
  const __mmask16 tail = (__mmask16)((1u << (K - Kv)) - 1);
  const float* w[NB];
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) w[j] = W + (n + std::min(j, nb - 1)) * ldw;
  __m512 acc[MB][NB];
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < Kv; k += 16) {
    __m512 wv[NB];
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) wv[j] = _mm512_loadu_ps(w[j] + k);
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) {
      const __m512 av = _mm512_loadu_ps(A + i * lda + k);
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_fmadd_ps(av, wv[j], acc[i][j]);
    }
  }
  if (tail) {
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) {
      const __m512 av = _mm512_maskz_loadu_ps(tail, A + i * lda + Kv);
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j)
        acc[i][j] = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(tail, w[j] + Kv), acc[i][j]);
    }
  }
  for (int i = 0; i < MB; ++i)
    for (int j = 0; j < nb; ++j) C[i * ldc + n + j] = alpha * _mm512_reduce_add_ps(acc[i][j]);
}

template <int MB, int NB>
__attribute__((target("avx512f"))) void dot512_rows(const float* A, int64_t lda, const float* W, int64_t ldw,
                                                    int64_t n0, int64_t n1, int64_t K, float alpha, float* C,
                                                    int64_t ldc) {
  for (int64_t n = n0; n < n1; n += NB)
    dot512_tile<MB, NB>(A, lda, W, ldw, n, (int)std::min<int64_t>(NB, n1 - n), K, alpha, C, ldc);
}

__attribute__((target("avx512f"))) void dot_avx512(int64_t M, int64_t n0, int64_t n1, int64_t K, float alpha,
                                                   const float* A, int64_t lda, const float* W, int64_t ldw, float* C,
                                                   int64_t ldc) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) dot512_rows<4, 4>(A + m * lda, lda, W, ldw, n0, n1, K, alpha, C + m * ldc, ldc);
  switch (M - m) {
    case 3: dot512_rows<3, 4>(A + m * lda, lda, W, ldw, n0, n1, K, alpha, C + m * ldc, ldc); break;
    case 2: dot512_rows<2, 8>(A + m * lda, lda, W, ldw, n0, n1, K, alpha, C + m * ldc, ldc); break;
    case 1: dot512_rows<1, 8>(A + m * lda, lda, W, ldw, n0, n1, K, alpha, C + m * ldc, ldc); break;
    default: break;
  }
}

__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

template <int MB, int NB>
__attribute__((target("avx2,fma"))) void dot256_tile(const float* A, int64_t lda, const float* W, int64_t ldw, int64_t n,
                                                     int nb, int64_t K, float alpha, float* C, int64_t ldc) {
  const int64_t Kv = K & ~int64_t(7);
  const float* w[NB];
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) w[j] = W + (n + std::min(j, nb - 1)) * ldw;
  __m256 acc[MB][NB];
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < Kv; k += 8) {
    __m256 wv[NB];
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) wv[j] = _mm256_loadu_ps(w[j] + k);
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) {
      const __m256 av = _mm256_loadu_ps(A + i * lda + k);
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_fmadd_ps(av, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MB; ++i)
    for (int j = 0; j < nb; ++j) {
      float s = hsum256(acc[i][j]);
      for (int64_t k = Kv; k < K; ++k) s += A[i * lda + k] * w[j][k];
      C[i * ldc + n + j] = alpha * s;
    }
}

template <int MB, int NB>
__attribute__((target("avx2,fma"))) void dot256_rows(const float* A, int64_t lda, const float* W, int64_t ldw,
                                                     int64_t n0, int64_t n1, int64_t K, float alpha, float* C,
                                                     int64_t ldc) {
  for (int64_t n = n0; n < n1; n += NB)
    dot256_tile<MB, NB>(A, lda, W, ldw, n, (int)std::min<int64_t>(NB, n1 - n), K, alpha, C, ldc);
}

__attribute__((target("avx2,fma"))) void dot_avx2(int64_t M, int64_t n0, int64_t n1, int64_t K, float alpha,
                                                  const float* A, int64_t lda, const float* W, int64_t ldw, float* C,
                                                  int64_t ldc) {
  int64_t m = 0;
  for (; m + 2 <= M; m += 2) dot256_rows<2, 4>(A + m * lda, lda, W, ldw, n0, n1, K, alpha, C + m * ldc, ldc);
  if (m < M) dot256_rows<1, 4>(A + m * lda, lda, W, ldw, n0, n1, K, alpha, C + m * ldc, ldc);
}

// axpy tile: C[m0 + i, n : n + 64] = alpha * sum_k A[m0 + i, k] B[k, n : n + 64] (masked to w).
template <int MB>
__attribute__((target("avx512f"))) void axpy512_tile(const float* A, int64_t lda, const float* B, int64_t ldb, int64_t n,
                                                     int64_t w, int64_t K, float alpha, float* C, int64_t ldc) {
  __mmask16 mk[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) mk[j] = (__mmask16)((1u << std::clamp<int64_t>(w - 16 * j, 0, 16)) - 1);
  __m512 acc[MB][4];
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* b = B + k * ldb + n;
    __m512 bv[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) bv[j] = _mm512_maskz_loadu_ps(mk[j], b + 16 * j);
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) {
      const __m512 av = _mm512_set1_ps(A[i * lda + k]);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j)
      _mm512_mask_storeu_ps(C + i * ldc + n + 16 * j, mk[j], _mm512_mul_ps(al, acc[i][j]));
}

__attribute__((target("avx512f"))) void axpy_avx512(int64_t M, int64_t n0, int64_t n1, int64_t K, float alpha,
                                                    const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                                                    int64_t ldc) {
  for (int64_t n = n0; n < n1; n += 64) {
    const int64_t w = std::min<int64_t>(64, n1 - n);
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) axpy512_tile<4>(A + m * lda, lda, B, ldb, n, w, K, alpha, C + m * ldc, ldc);
    switch (M - m) {
      case 3: axpy512_tile<3>(A + m * lda, lda, B, ldb, n, w, K, alpha, C + m * ldc, ldc); break;
      case 2: axpy512_tile<2>(A + m * lda, lda, B, ldb, n, w, K, alpha, C + m * ldc, ldc); break;
      case 1: axpy512_tile<1>(A + m * lda, lda, B, ldb, n, w, K, alpha, C + m * ldc, ldc); break;
      default: break;
    }
  }
}

template <int MB>
__attribute__((target("avx2,fma"))) void axpy256_tile(const float* A, int64_t lda, const float* B, int64_t ldb, int64_t n,
                                                      int64_t K, float alpha, float* C, int64_t ldc) {
  __m256 acc[MB][4];
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* b = B + k * ldb + n;
    __m256 bv[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) bv[j] = _mm256_loadu_ps(b + 8 * j);
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) {
      const __m256 av = _mm256_set1_ps(A[i * lda + k]);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  const __m256 al = _mm256_set1_ps(alpha);
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(C + i * ldc + n + 8 * j, _mm256_mul_ps(al, acc[i][j]));
}

__attribute__((target("avx2,fma"))) void axpy_avx2(int64_t M, int64_t n0, int64_t n1, int64_t K, float alpha,
                                                   const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                                                   int64_t ldc) {
  int64_t n = n0;
  for (; n + 32 <= n1; n += 32) {
    int64_t m = 0;
    for (; m + 2 <= M; m += 2) axpy256_tile<2>(A + m * lda, lda, B, ldb, n, K, alpha, C + m * ldc, ldc);
    if (m < M) axpy256_tile<1>(A + m * lda, lda, B, ldb, n, K, alpha, C + m * ldc, ldc);
  }
  if (n < n1) axpy_scalar(M, n, n1, K, alpha, A, lda, B, ldb, C, ldc);
}

// ---------------- skinny kernel over packed panels (PackedB::panels) ----------------
// C[m0 + i, 16 (p + j) + c] = alpha * sum_k A[m0 + i, k] P[p + j][k][c]: MB rows of A times NB
// panels, MB * NB accumulators in registers, one 64-byte load of each panel per k and A's
// value broadcast from memory. No horizontal sums (the dot kernel needs one per output).
constexpr int64_t kPanel = 16;

template <int MB, int NB>
__attribute__((target("avx512f"))) void panel512_tile(const float* A, int64_t lda, const float* P, int64_t K,
                                                      int64_t p, int64_t N, float alpha, float* C, int64_t ldc) {
  __m512 acc[MB][NB];
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_setzero_ps();
  const float* w[NB];
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) w[j] = P + (p + j) * K * kPanel;
  for (int64_t k = 0; k < K; ++k) {
    __m512 wv[NB];
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) wv[j] = _mm512_load_ps(w[j] + k * kPanel);
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) {
      const __m512 av = _mm512_set1_ps(A[i * lda + k]);
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_fmadd_ps(av, wv[j], acc[i][j]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) {
    const int64_t c0 = (p + j) * kPanel;
    const int64_t valid = std::clamp<int64_t>(N - c0, 0, kPanel);
    const __mmask16 mk = (__mmask16)((1u << valid) - 1);
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) _mm512_mask_storeu_ps(C + i * ldc + c0, mk, _mm512_mul_ps(al, acc[i][j]));
  }
}

template <int MB>
__attribute__((target("avx512f"))) void panel512_block(const float* A, int64_t lda, const float* P, int64_t K,
                                                       int64_t p, int64_t np, int64_t N, float alpha, float* C,
                                                       int64_t ldc) {
  constexpr int NB = MB <= 3 ? 8 : MB == 4 ? 6 : MB <= 6 ? 4 : 3;
  int64_t j = 0;
  for (; j + NB <= np; j += NB) panel512_tile<MB, NB>(A, lda, P, K, p + j, N, alpha, C, ldc);
  for (; j < np; ++j) panel512_tile<MB, 1>(A, lda, P, K, p + j, N, alpha, C, ldc);
}

__attribute__((target("avx512f"))) void panel_avx512(int64_t M, const float* A, int64_t lda, const float* P, int64_t K,
                                                     int64_t p0, int64_t p1, int64_t N, float alpha, float* C,
                                                     int64_t ldc) {
  // Groups of up to 8 panels (128 columns); each group runs every row block.
  for (int64_t p = p0; p < p1; p += 8) {
    const int64_t np = std::min<int64_t>(8, p1 - p);
    for (int64_t m = 0; m < M; m += 8) {
      const float* a = A + m * lda;
      float* c = C + m * ldc;
      switch (std::min<int64_t>(8, M - m)) {
        case 1: panel512_block<1>(a, lda, P, K, p, np, N, alpha, c, ldc); break;
        case 2: panel512_block<2>(a, lda, P, K, p, np, N, alpha, c, ldc); break;
        case 3: panel512_block<3>(a, lda, P, K, p, np, N, alpha, c, ldc); break;
        case 4: panel512_block<4>(a, lda, P, K, p, np, N, alpha, c, ldc); break;
        case 5: panel512_block<5>(a, lda, P, K, p, np, N, alpha, c, ldc); break;
        case 6: panel512_block<6>(a, lda, P, K, p, np, N, alpha, c, ldc); break;
        case 7: panel512_block<7>(a, lda, P, K, p, np, N, alpha, c, ldc); break;
        default: panel512_block<8>(a, lda, P, K, p, np, N, alpha, c, ldc); break;
      }
    }
  }
}

void skinny_panels(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* P, float* C,
                   int64_t ldc, const Epilogue& ep, Threads th) {
  const int64_t panels = (N + kPanel - 1) / kPanel;
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, kPanel * K));
  parallel(panels, grain, [&](int64_t p0, int64_t p1) {
    panel_avx512(M, A, lda, P, K, p0, p1, N, alpha, C, ldc);
    apply_epilogue(ep, C, ldc, 0, M, p0 * kPanel, std::min(N, p1 * kPanel));
  }, th);
}

using SkinnyFn = void (*)(int64_t, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float*, int64_t);

// M <= 16, A not transposed (M x K). Splits N over threads in units of `unit` columns.
void skinny(bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
            int64_t ldb, float* C, int64_t ldc, const Epilogue& ep, Threads th) {
  SkinnyFn f;
  int64_t unit;
  if (trans_b) {
    f = use_avx512() ? dot_avx512 : use_avx2() ? dot_avx2 : dot_scalar;
    unit = 8;
  } else {
    f = use_avx512() ? axpy_avx512 : use_avx2() ? axpy_avx2 : axpy_scalar;
    unit = 64;
  }
  const int64_t units = (N + unit - 1) / unit;
  // At least ~256 KiB of weights per task: smaller pieces are not worth waking a thread for.
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, unit * K));
  parallel(units, grain, [&](int64_t u0, int64_t u1) {
    const int64_t n0 = u0 * unit, n1 = std::min(N, u1 * unit);
    f(M, n0, n1, K, alpha, A, lda, B, ldb, C, ldc);
    apply_epilogue(ep, C, ldc, 0, M, n0, n1);
  }, th);
}

constexpr int64_t kSkinnyM = 16;

// ---------------- large-M kernel over prepacked weights (PackedB::wide) ----------------
// C = A op(B) for M > 16 with op(B) prepacked once into panels of 32 columns, k-major
// ([panel][k][32], zero-padded), so no call repacks the weights (OpenBLAS repacks B on every
// call: 16% of the decoder block's time in a profile). A is packed per call into row blocks
// of 14 ([block][k][14]); the micro-kernel keeps 14 x 32 accumulators in 28 registers and
// reads per k two 64-byte loads of the panel and 14 broadcasts of A. K is blocked by 256 so a
// block of A stays in L2 and a panel's slice in L1.
constexpr int64_t kWide = 32, kMR = 14;
int64_t kc_block() {
  static const int64_t v = [] {
    const char* e = std::getenv("RLX_GEMM_KC");
    return e ? std::max<int64_t>(16, std::atoll(e)) : int64_t(256);
  }();
  return v;
}

__attribute__((target("avx512f"))) void micro_14x32(const float* Ap, const float* P, int64_t kc, float* C,
                                                    int64_t ldc, int rows, __mmask16 m0, __mmask16 m1, bool acc) {
  __m512 c[kMR][2];
#pragma GCC unroll 14
  for (int i = 0; i < kMR; ++i) c[i][0] = c[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(P + k * kWide), b1 = _mm512_load_ps(P + k * kWide + 16);
    const float* a = Ap + k * kMR;
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) {
      const __m512 av = _mm512_set1_ps(a[i]);
      c[i][0] = _mm512_fmadd_ps(av, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(av, b1, c[i][1]);
    }
  }
  for (int i = 0; i < rows; ++i) {
    float* ci = C + i * ldc;
    if (acc) {
      c[i][0] = _mm512_add_ps(c[i][0], _mm512_maskz_loadu_ps(m0, ci));
      c[i][1] = _mm512_add_ps(c[i][1], _mm512_maskz_loadu_ps(m1, ci + 16));
    }
    _mm512_mask_storeu_ps(ci, m0, c[i][0]);
    _mm512_mask_storeu_ps(ci + 16, m1, c[i][1]);
  }
}

void wide_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* P, float* C, int64_t ldc,
               const Epilogue& ep, Threads th) {
  const int64_t blocks = (M + kMR - 1) / kMR, panels = (N + kWide - 1) / kWide;
  // A packed once per call: [block][k][14], rows past M zero.
  size_t cap = 0;
  const size_t an = (size_t)(blocks * kMR * K);
  std::unique_ptr<float, std::function<void(float*)>> Ap(static_cast<float*>(host_alloc(an * 4, &cap)),
                                                          [cap](float* q) { host_free(q, cap); });
  parallel(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float* o = Ap.get() + b * kMR * K;
      for (int64_t k = 0; k < K; ++k)
        for (int64_t i = 0; i < kMR; ++i) {
          const int64_t m = b * kMR + i;
          o[k * kMR + i] = m < M ? A[m * lda + k] : 0.f;
        }
    }
  }, th);
  const float* ap = Ap.get();
  parallel(panels, 1, [&](int64_t p0, int64_t p1) {
    const int64_t KC = kc_block();
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
      const int64_t kc = std::min(KC, K - k0);
      const bool last = k0 + kc >= K;
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t n0 = p * kWide, w = std::min(kWide, N - n0);
        const __mmask16 m0 = (__mmask16)((1u << std::min<int64_t>(16, w)) - 1);
        const __mmask16 m1 = (__mmask16)((1u << std::clamp<int64_t>(w - 16, 0, 16)) - 1);
        const float* panel = P + (p * K + k0) * kWide;
        for (int64_t b = 0; b < blocks; ++b)
          micro_14x32(ap + (b * K + k0) * kMR, panel, kc, C + b * kMR * ldc + n0, ldc,
                      (int)std::min(kMR, M - b * kMR), m0, m1, k0 > 0);
        if (last) apply_epilogue(ep, C, ldc, 0, M, n0, n0 + w);
      }
    }
  }, th);
}

void gemm_impl(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float* C, int64_t ldc, const Epilogue& ep, Threads th) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t m = 0; m < M; ++m) std::fill(C + m * ldc, C + m * ldc + N, 0.f);
    apply_epilogue(ep, C, ldc, 0, M, 0, N);
    return;
  }
  if (M <= kSkinnyM) {
    if (!ta) return skinny(tb, M, N, K, alpha, A, lda, B, ldb, C, ldc, ep, th);
    // op(A) = A^T: a small copy (M x K) makes it row-major.
    std::vector<float> at(M * K);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t m = 0; m < M; ++m) at[m * K + k] = A[k * lda + m];
    return skinny(tb, M, N, K, alpha, at.data(), K, B, ldb, C, ldc, ep, th);
  }
  auto sgemm = sgemm_fn();
  auto call = [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    if (m1 <= m0 || n1 <= n0) return;
    const float* a = ta ? A + m0 : A + m0 * lda;
    const float* b = tb ? B + n0 * ldb : B + n0;
    sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, blas_int(m1 - m0),
          blas_int(n1 - n0), blas_int(K), alpha, a, blas_int(lda), b, blas_int(ldb), 0.f, C + m0 * ldc + n0,
          blas_int(ldc));
    apply_epilogue(ep, C, ldc, m0, m1, n0, n1);
  };
  const int T = th == Threads::Single ? 1 : ThreadPool::global().size();
  // Small products are not worth splitting.
  if (T == 1 || 2.0 * M * N * K < 4e6) return call(0, M, 0, N);
  // Split N where each part keeps >= 64 columns (each task packs its slice of B once and
  // all of A); else split M (each task packs all of B).
  if (N / T >= 64) {
    const int64_t part = ((N + T - 1) / T + 15) / 16 * 16;
    ThreadPool::global().parallel_for(T, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) call(0, M, std::min(N, t * part), std::min(N, (t + 1) * part));
    });
  } else {
    const int64_t part = ((M + T - 1) / T + 7) / 8 * 8;
    ThreadPool::global().parallel_for(T, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) call(std::min(M, t * part), std::min(M, (t + 1) * part), 0, N);
    });
  }
}

}  // namespace

bool isa_avx2_fma() { return use_avx2(); }
bool isa_avx512() { return use_avx512(); }
bool isa_avx512_bw_vl() {
  static const bool yes = use_avx512() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return yes;
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float* C, int64_t ldc, const Epilogue& ep, Threads th) {
  gemm_impl(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, C, ldc, ep, th);
}

void gemm_batched(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const int64_t* a_off, const float* B, int64_t ldb, const int64_t* b_off, float* C, int64_t ldc,
                  int64_t c_stride, int64_t batches) {
  const int T = ThreadPool::global().size();
  if (batches >= T && 2.0 * M * N * K < 64e6) {
    ThreadPool::global().parallel_for(batches, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i)
        gemm_impl(ta, tb, M, N, K, alpha, A + a_off[i], lda, B + b_off[i], ldb, C + i * c_stride, ldc, {},
                  Threads::Single);
    });
    return;
  }
  for (int64_t i = 0; i < batches; ++i)
    gemm_impl(ta, tb, M, N, K, alpha, A + a_off[i], lda, B + b_off[i], ldb, C + i * c_stride, ldc, {}, Threads::Pool);
}

// ---------------- oneDNN over prepacked weights (RLX_GEMM_DNNL=0 turns it off) ----------------
// Debian's oneDNN 2.6 is loaded with dlopen (no link dependency; absent: OpenBLAS as before).
// Its matmul primitive reads weights reordered once into its blocked layout. It runs inside
// rlx's pool: the weight is cut into column slices, one primitive per slice, and each pool
// task runs its slices with OpenMP set to one thread (Debian builds oneDNN with OpenMP), so no
// second pool runs beside rlx's. The epilogue follows each slice.
namespace {
using Dnnl = DnnlApi;

// oneDNN as loaded, whatever RLX_GEMM_DNNL says (the convolutions have their own switch).
const Dnnl& dnnl_loaded() {
  static Dnnl d = [] {
    Dnnl r;
    // RLX_CPU_ISA caps oneDNN's code generation too (its own ONEDNN_MAX_CPU_ISA, unless the user
    // set that); "base" is below oneDNN's floor (SSE4.1), so OpenBLAS runs those products.
    const std::string cap = isa_cap();
    if (cap == "base") {
      r.why = "off: RLX_CPU_ISA=base";
      return r;
    }
    if ((cap == "avx2" || cap == "avxvnni") && !std::getenv("ONEDNN_MAX_CPU_ISA") && !std::getenv("DNNL_MAX_CPU_ISA"))
      setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
    r.h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!r.h) {
      r.why = "oneDNN not found (libdnnl.so.2; `apt-get install libdnnl2` for faster products of more than 16 rows)";
      return r;
    }
    auto sym = [&](auto& f, const char* name) { f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(r.h, name)); };
    sym(r.engine_create, "dnnl_engine_create");
    sym(r.stream_create, "dnnl_stream_create");
    sym(r.stream_wait, "dnnl_stream_wait");
    sym(r.stream_destroy, "dnnl_stream_destroy");
    sym(r.md_by_strides, "dnnl_memory_desc_init_by_strides");
    sym(r.md_by_tag, "dnnl_memory_desc_init_by_tag");
    sym(r.matmul_desc_init, "dnnl_matmul_desc_init");
    sym(r.conv_desc, "dnnl_dilated_convolution_forward_desc_init");
    sym(r.pd_query, "dnnl_primitive_desc_query");
    sym(r.attr_create, "dnnl_primitive_attr_create");
    sym(r.attr_set_scratchpad_mode, "dnnl_primitive_attr_set_scratchpad_mode");
    sym(r.attr_destroy, "dnnl_primitive_attr_destroy");
    sym(r.attr_set_post_ops, "dnnl_primitive_attr_set_post_ops");
    sym(r.post_ops_create, "dnnl_post_ops_create");
    sym(r.post_ops_destroy, "dnnl_post_ops_destroy");
    sym(r.post_ops_append_eltwise, "dnnl_post_ops_append_eltwise");
    sym(r.mem_set_handle, "dnnl_memory_set_data_handle");
    r.post_ops_ok = r.attr_destroy && r.attr_set_post_ops && r.post_ops_create && r.post_ops_destroy && r.post_ops_append_eltwise;
    sym(r.pd_create, "dnnl_primitive_desc_create");
    sym(r.pd_query_md, "dnnl_primitive_desc_query_md");
    sym(r.pd_destroy, "dnnl_primitive_desc_destroy");
    sym(r.prim_create, "dnnl_primitive_create");
    sym(r.prim_destroy, "dnnl_primitive_destroy");
    sym(r.execute, "dnnl_primitive_execute");
    sym(r.mem_create, "dnnl_memory_create");
    sym(r.mem_destroy, "dnnl_memory_destroy");
    sym(r.reorder_pd, "dnnl_reorder_primitive_desc_create");
    sym(r.md_size, "dnnl_memory_desc_get_size");
    r.omp_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    if (!r.omp_threads) r.omp_threads = reinterpret_cast<void (*)(int)>(dlsym(r.h, "omp_set_num_threads"));
    r.ok = r.engine_create && r.stream_create && r.stream_wait && r.stream_destroy && r.md_by_strides && r.md_by_tag &&
           r.matmul_desc_init && r.pd_create && r.pd_query_md && r.pd_destroy && r.prim_create && r.prim_destroy &&
           r.execute && r.mem_create && r.mem_destroy && r.reorder_pd && r.md_size && r.omp_threads && r.conv_desc && r.pd_query &&
           r.attr_create && r.attr_set_scratchpad_mode && r.engine_create(&r.engine, dnnl_cpu, 0) == dnnl_success &&
           r.attr_create(&r.user_scratchpad) == dnnl_success &&
           r.attr_set_scratchpad_mode(r.user_scratchpad, dnnl_scratchpad_mode_user) == dnnl_success;
    if (!r.ok) r.why = "oneDNN failed to start (an entry point, its CPU engine or its attributes missing)";
    return r;
  }();
  return d;
}

// oneDNN for the products: as loaded, unless RLX_GEMM_DNNL=0.
const Dnnl& dnnl() {
  static Dnnl d = [] {
    const char* e = std::getenv("RLX_GEMM_DNNL");
    if (e && std::string(e) == "0") {
      Dnnl r;
      r.why = "off: RLX_GEMM_DNNL=0";
      return r;
    }
    return dnnl_loaded();
  }();
  return d;
}

// One column slice [n0, n1) of a weight: its primitive for `rows` rows and its packed weights.
struct DnnlSlice {
  int64_t n0 = 0, n1 = 0;
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_desc_t src_md{}, dst_md{};
  dnnl_memory_t weights = nullptr;
  size_t bytes = 0;
  DnnlScratch scratch;
};
}  // namespace

struct PackedB::DnnlPack {
  int64_t rows = 0;
  std::vector<DnnlSlice> slices;
  ~DnnlPack() {
    const Dnnl& d = dnnl();
    for (auto& s : slices) {
      if (s.prim) d.prim_destroy(s.prim);
      if (s.weights) d.mem_destroy(s.weights);
    }
  }
};

namespace {
// Null when oneDNN is unavailable or refuses the shape.
std::shared_ptr<PackedB::DnnlPack> dnnl_pack(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb,
                                             int64_t rows, int64_t ldc) {
  const Dnnl& d = dnnl();
  if (!d.ok) return nullptr;
  auto pack = std::make_shared<PackedB::DnnlPack>();
  pack->rows = rows;
  const int T = ThreadPool::global().size();
  // Slices of at most 512 columns (the epilogue's block stays in L2), at least one per thread.
  int64_t slices = std::max<int64_t>(T, (N + 511) / 512);
  slices = (slices + T - 1) / T * T;
  const int64_t per = std::max<int64_t>(16, ((N + slices - 1) / slices + 15) / 16 * 16);
  d.omp_threads(1);  // the reorders below run on this thread alone: OpenMP starts no team
  dnnl_stream_t st = nullptr;
  if (d.stream_create(&st, d.engine, dnnl_stream_default_flags) != dnnl_success) return nullptr;
  bool ok = true;
  for (int64_t n0 = 0; n0 < N && ok; n0 += per) {
    DnnlSlice sl;
    sl.n0 = n0;
    sl.n1 = std::min(N, n0 + per);
    const int64_t nt = sl.n1 - n0;
    dnnl_dims_t a_dims = {rows, K}, a_str = {K, 1}, w_dims = {K, nt}, c_dims = {rows, nt}, c_str = {ldc, 1};
    dnnl_dims_t w_str = {trans_b ? 1 : ldb, trans_b ? ldb : 1};  // op(B)[k, n] address
    dnnl_memory_desc_t w_any{}, w_user{};
    ok = d.md_by_strides(&sl.src_md, 2, a_dims, dnnl_f32, a_str) == dnnl_success &&
         d.md_by_strides(&sl.dst_md, 2, c_dims, dnnl_f32, c_str) == dnnl_success &&
         d.md_by_tag(&w_any, 2, w_dims, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
         d.md_by_strides(&w_user, 2, w_dims, dnnl_f32, w_str) == dnnl_success;
    dnnl_matmul_desc_t md{};
    dnnl_primitive_desc_t pd = nullptr, rpd = nullptr;
    ok = ok && d.matmul_desc_init(&md, &sl.src_md, &w_any, nullptr, &sl.dst_md) == dnnl_success &&
         d.pd_create(&pd, &md, d.user_scratchpad, d.engine, nullptr) == dnnl_success;
    const dnnl_memory_desc_t* wmd = ok ? d.pd_query_md(pd, dnnl_query_weights_md, 0) : nullptr;
    dnnl_memory_t user = nullptr;
    dnnl_primitive_t reorder = nullptr;
    const float* wsrc = trans_b ? B + n0 * ldb : B + n0;
    ok = ok && wmd && d.mem_create(&sl.weights, wmd, d.engine, DNNL_MEMORY_ALLOCATE) == dnnl_success &&
         d.mem_create(&user, &w_user, d.engine, const_cast<float*>(wsrc)) == dnnl_success &&
         d.reorder_pd(&rpd, &w_user, d.engine, wmd, d.engine, nullptr) == dnnl_success &&
         d.prim_create(&reorder, rpd) == dnnl_success;
    if (ok) {
      dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, sl.weights}};
      ok = d.execute(reorder, st, 2, args) == dnnl_success && d.stream_wait(st) == dnnl_success;
      sl.bytes = d.md_size(wmd);
    }
    ok = ok && d.prim_create(&sl.prim, pd) == dnnl_success;
    if (ok) sl.scratch = dnnl_scratch_of(d, pd);
    if (reorder) d.prim_destroy(reorder);
    if (rpd) d.pd_destroy(rpd);
    if (pd) d.pd_destroy(pd);
    if (user) d.mem_destroy(user);
    pack->slices.push_back(sl);  // destroyed with the pack, even when incomplete
  }
  d.stream_destroy(st);
  return ok ? pack : nullptr;
}

// False when oneDNN failed at run time (the caller then runs OpenBLAS).
bool dnnl_run(const PackedB::DnnlPack& pk, const float* A, float* C, const Epilogue& ep, Threads th) {
  const Dnnl& d = dnnl();
  std::atomic<bool> failed{false};
  parallel((int64_t)pk.slices.size(), 1, [&](int64_t s0, int64_t s1) {
    d.omp_threads(1);  // this pool thread's OpenMP team: itself
    dnnl_stream_t st = nullptr;
    if (d.stream_create(&st, d.engine, dnnl_stream_default_flags) != dnnl_success) {
      failed = true;
      return;
    }
    for (int64_t i = s0; i < s1 && !failed; ++i) {
      const DnnlSlice& sl = pk.slices[i];
      dnnl_memory_t src = nullptr, dst = nullptr, scr = dnnl_scratch_memory(d, sl.scratch);
      bool ok = d.mem_create(&src, &sl.src_md, d.engine, const_cast<float*>(A)) == dnnl_success &&
                d.mem_create(&dst, &sl.dst_md, d.engine, C + sl.n0) == dnnl_success && (scr || !sl.scratch.bytes);
      if (ok) {
        dnnl_exec_arg_t args[4] = {
            {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, sl.weights}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scr}};
        ok = d.execute(sl.prim, st, scr ? 4 : 3, args) == dnnl_success && d.stream_wait(st) == dnnl_success;
      }
      for (dnnl_memory_t m : {src, dst, scr})
        if (m) d.mem_destroy(m);
      if (!ok) failed = true;
      else apply_epilogue(ep, C, sl.dst_md.format_desc.blocking.strides[0], 0, pk.rows, sl.n0, sl.n1);
    }
    d.stream_destroy(st);
  }, th);
  return !failed;
}
}  // namespace

DnnlScratch dnnl_scratch_of(const DnnlApi& d, const_dnnl_primitive_desc_t pd) {
  DnnlScratch s;
  if (const dnnl_memory_desc_t* md = d.pd_query_md(pd, dnnl_query_scratchpad_md, 0)) {
    s.md = *md;
    s.bytes = d.md_size(md);
  }
  return s;
}

dnnl_memory_t dnnl_scratch_memory(const DnnlApi& d, const DnnlScratch& s) {
  if (s.bytes == 0) return nullptr;
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < s.bytes + 64) buf.resize(s.bytes + 64);
  void* p = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
  dnnl_memory_t m = nullptr;
  if (d.mem_create(&m, &s.md, d.engine, p) != dnnl_success) return nullptr;
  return m;
}

const DnnlApi& dnnl_api() { return dnnl_loaded(); }

// ---------------- bf16 x bf16 products through oneDNN (AMX where the CPU has it) ----------------
// Neither operand is packed: the weights md has the caller's strides, so one primitive per
// (shape, strides) serves every call and every data pointer. Primitives are cached (they are
// independent of the data); each pool task runs its column slices with a one-thread OpenMP team,
// as dnnl_run does, so oneDNN starts no threads of its own.
namespace {
struct Bf16Key {
  int64_t M, nt, K, lda, ldb, ldc;
  bool trans_b;
  bool operator<(const Bf16Key& o) const {
    return std::tie(M, nt, K, lda, ldb, ldc, trans_b) < std::tie(o.M, o.nt, o.K, o.lda, o.ldb, o.ldc, o.trans_b);
  }
};
struct Bf16Prim {
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_desc_t src_md{}, w_md{}, dst_md{};
  DnnlScratch scratch;
};

// The primitive for one slice shape, made once (null when oneDNN refuses it).
const Bf16Prim* bf16_prim(const Bf16Key& key) {
  static std::mutex mu;
  // Never destroyed (primitives outlive static destructors; still reachable for LeakSanitizer).
  static auto* cache = new std::map<Bf16Key, Bf16Prim>;
  std::lock_guard<std::mutex> l(mu);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second.prim ? &it->second : nullptr;
  const Dnnl& d = dnnl();
  Bf16Prim p;
  dnnl_dims_t a_dims = {key.M, key.K}, a_str = {key.lda, 1}, w_dims = {key.K, key.nt}, c_dims = {key.M, key.nt},
              c_str = {key.ldc, 1};
  dnnl_dims_t w_str = {key.trans_b ? 1 : key.ldb, key.trans_b ? key.ldb : 1};
  dnnl_matmul_desc_t md{};
  dnnl_primitive_desc_t pd = nullptr;
  d.omp_threads(1);
  bool ok = d.md_by_strides(&p.src_md, 2, a_dims, dnnl_bf16, a_str) == dnnl_success &&
            d.md_by_strides(&p.w_md, 2, w_dims, dnnl_bf16, w_str) == dnnl_success &&
            d.md_by_strides(&p.dst_md, 2, c_dims, dnnl_f32, c_str) == dnnl_success &&
            d.matmul_desc_init(&md, &p.src_md, &p.w_md, nullptr, &p.dst_md) == dnnl_success &&
            d.pd_create(&pd, &md, d.user_scratchpad, d.engine, nullptr) == dnnl_success &&
            d.prim_create(&p.prim, pd) == dnnl_success;
  if (ok) p.scratch = dnnl_scratch_of(d, pd);
  if (pd) d.pd_destroy(pd);
  if (!ok) p.prim = nullptr;
  auto& slot = (*cache)[key] = p;
  return slot.prim ? &slot : nullptr;
}
}  // namespace

bool dnnl_bf16_gemm(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
                    bool trans_b, float* C, int64_t ldc) {
  const Dnnl& d = dnnl();
  if (!d.ok || M <= 16 || N <= 0 || K <= 0) return false;
  const int T = ThreadPool::global().size();
  // Slices of at most 512 columns, a multiple of 16, at least one per thread (as dnnl_pack).
  int64_t slices = std::max<int64_t>(T, (N + 511) / 512);
  slices = (slices + T - 1) / T * T;
  const int64_t per = std::max<int64_t>(16, ((N + slices - 1) / slices + 15) / 16 * 16);
  const int64_t count = (N + per - 1) / per;
  // Every slice but the last has the same shape: at most two primitives per product.
  const Bf16Prim* full = bf16_prim({M, per, K, lda, ldb, ldc, trans_b});
  const int64_t tail = N - (count - 1) * per;
  const Bf16Prim* last = tail == per ? full : bf16_prim({M, tail, K, lda, ldb, ldc, trans_b});
  if (!full || !last) return false;
  std::atomic<bool> failed{false};
  parallel(count, 1, [&](int64_t s0, int64_t s1) {
    d.omp_threads(1);
    dnnl_stream_t st = nullptr;
    if (d.stream_create(&st, d.engine, dnnl_stream_default_flags) != dnnl_success) {
      failed = true;
      return;
    }
    for (int64_t i = s0; i < s1 && !failed; ++i) {
      const Bf16Prim& p = i + 1 == count ? *last : *full;
      const int64_t n0 = i * per;
      const uint16_t* w = trans_b ? B + n0 * ldb : B + n0;
      dnnl_memory_t src = nullptr, wm = nullptr, dst = nullptr, scr = dnnl_scratch_memory(d, p.scratch);
      bool ok = d.mem_create(&src, &p.src_md, d.engine, const_cast<uint16_t*>(A)) == dnnl_success &&
                d.mem_create(&wm, &p.w_md, d.engine, const_cast<uint16_t*>(w)) == dnnl_success &&
                d.mem_create(&dst, &p.dst_md, d.engine, C + n0) == dnnl_success && (scr || !p.scratch.bytes);
      if (ok) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scr}};
        ok = d.execute(p.prim, st, scr ? 4 : 3, args) == dnnl_success && d.stream_wait(st) == dnnl_success;
      }
      for (dnnl_memory_t m : {src, wm, dst, scr})
        if (m) d.mem_destroy(m);
      if (!ok) failed = true;
    }
    d.stream_destroy(st);
  }, Threads::Pool);
  return !failed;
}

// Layout choice, measured (README, Dependencies; docs/benchmarks.md, GEMM candidates):
// OpenBLAS packs B itself on every call and offers no pre-packed sgemm entry point; its speed
// on x * W^T is the same with W as N x K ("T") or K x N ("N"). So for its rows (> 16) the
// packed form is op(B) as N x K contiguous: a linear's weight (already N x K, contiguous) is
// used in place with no copy; a K x N matrix is transposed once. For 1..16 rows on AVX-512
// the skinny panel kernel reads panels made here (a copy), which beat the dot kernel that
// streams an N x K weight row by row.
namespace {
// From the executor's host allocator: 64-byte aligned, large blocks on transparent huge pages
// (a packed copy is tens of MiB; 4 KiB page faults cost microseconds each on a VM).
std::shared_ptr<float> alloc_floats(size_t n, int64_t K, int64_t N) {
  size_t cap = 0;
  std::shared_ptr<float> p(static_cast<float*>(host_alloc(n * 4, &cap)), [cap](float* q) { host_free(q, cap); });
  if (!p)
    throw RuntimeError("out of host memory packing a " + std::to_string(K) + "x" + std::to_string(N) + " weight");
  return p;
}

// op(B) (K x N; B is N x K when trans_b) cut into ceil(N / W) panels of W columns, each stored
// k-major ([panel][k][W], zero-padded past N): the layout of the skinny (W = 16) and large-M
// (W = 32) AVX-512 kernels. *floats receives the copy's size.
std::shared_ptr<float> pack_panels(int64_t W, bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb,
                                   size_t* floats) {
  const int64_t panels = (N + W - 1) / W;
  *floats = (size_t)(panels * K * W);
  std::shared_ptr<float> owned = alloc_floats(*floats, K, N);
  float* d = owned.get();
  ThreadPool::global().parallel_for(panels, 1, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      float* o = d + q * K * W;
      const int64_t valid = std::min(W, N - q * W);
      if (!trans_b) {  // rows of B are the panel's rows: contiguous copies
        for (int64_t k = 0; k < K; ++k) {
          std::memcpy(o + k * W, B + k * ldb + q * W, valid * 4);
          std::fill(o + k * W + valid, o + (k + 1) * W, 0.f);
        }
        continue;
      }
      // B is N x K: column c of the panel is row q * W + c of B, read sequentially.
      if (valid < W) std::fill(o, o + K * W, 0.f);
      // In k-blocks of 64, so the part of the panel being written stays in L1.
      for (int64_t k0 = 0; k0 < K; k0 += 64) {
        const int64_t k1 = std::min(K, k0 + 64);
        for (int64_t c = 0; c < valid; ++c) {
          const float* b = B + (q * W + c) * ldb;
          for (int64_t k = k0; k < k1; ++k) o[k * W + c] = b[k];
        }
      }
    }
  });
  return owned;
}
}  // namespace

std::shared_ptr<const PackedB> pack_b(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb, int64_t rows) {
  auto p = std::make_shared<PackedB>();
  p->K = K;
  p->N = N;
  p->trans = true;
  p->ld = K;
  // Calls with a row count the packed layout is not for read the caller's B as it is.
  auto keep_b = [&] {
    p->data = B;
    p->trans = trans_b;
    p->ld = ldb;
  };
  if (rows >= 1 && rows <= kSkinnyM && use_avx512() && K > 0 && N > 0) {
    p->owned_ = pack_panels(kPanel, trans_b, K, N, B, ldb, &p->owned_floats_);
    p->panels = p->owned_.get();
    keep_b();
    return p;
  }
  if (rows > kSkinnyM && K > 0 && N > 0 && N <= INT32_MAX && dnnl().ok) {
    // (the C leading dimension is fixed in the primitive: compiled plans write C with ld N)
    if (auto pk = dnnl_pack(trans_b, K, N, B, ldb, rows, N)) {
      for (const auto& sl : pk->slices) p->dnnl_bytes_ += sl.bytes;
      p->dnnl_ = std::move(pk);
      keep_b();
      return p;
    }
  }
  if (rows > kSkinnyM && use_avx512() && K > 0 && N > 0 && wide_enabled()) {
    p->owned_ = pack_panels(kWide, trans_b, K, N, B, ldb, &p->owned_floats_);
    p->wide = p->owned_.get();
    keep_b();
    return p;
  }
  if (trans_b && ldb == K) {
    p->data = B;
    return p;
  }
  size_t n = (size_t)std::max<int64_t>(K * N, 1);
  p->owned_ = alloc_floats(n, K, N);
  p->owned_floats_ = n;
  float* d = p->owned_.get();
  ThreadPool::global().parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t j = n0; j < n1; ++j)
      for (int64_t k = 0; k < K; ++k) d[j * K + k] = trans_b ? B[j * ldb + k] : B[k * ldb + j];
  });
  p->data = d;
  return p;
}

bool prepack_pays(int64_t rows) {
  if (rows > kSkinnyM && dnnl().ok) return true;
  if (rows < 1 || !use_avx512()) return false;
  return rows <= kSkinnyM || wide_enabled();
}

std::string PackedB::layout() const {
  if (panels) return "panels of 16 columns for the skinny avx512 kernel (M <= 16)";
  if (wide) return "panels of 32 columns for rlx's avx512 kernel (M > 16)";
  if (dnnl_) return "oneDNN's blocked layout, " + std::to_string(dnnl_->slices.size()) + " column slices (M = " +
                    std::to_string(dnnl_->rows) + ")";
  return owned_ ? "N x K copy (transposed once)" : "in place, no copy (OpenBLAS reads it as N x K)";
}

void gemm_packed(int64_t M, const float* A, int64_t lda, const PackedB& B, float* C, int64_t ldc, const Epilogue& ep,
                 Threads th) {
  if (B.panels && M >= 1 && M <= kSkinnyM) return skinny_panels(M, B.N, B.K, 1.f, A, lda, B.panels, C, ldc, ep, th);
  if (B.wide && M > kSkinnyM) return wide_gemm(M, B.N, B.K, A, lda, B.wide, C, ldc, ep, th);
  if (B.dnnl_ && M == B.dnnl_->rows && ldc == B.N && lda == B.K && dnnl_run(*B.dnnl_, A, C, ep, th)) return;
  gemm_impl(false, B.trans, M, B.N, B.K, 1.f, A, lda, B.data, B.ld, C, ldc, ep, th);
}

std::string gemm_description() {
  const Blas& b = blas();
  std::string s;
  if (!b.sgemm) {
    s = "OpenBLAS unavailable";
  } else {
    s = "OpenBLAS";
    if (b.get_corename) s += std::string(" ") + b.get_corename() + " kernels";
    s += b.forced              ? " (RLX_OPENBLAS_CORETYPE)"
         : b.asked.empty()     ? " (OpenBLAS's own detection)"
         : !isa_cap().empty()  ? " (chosen from CPU features, capped by RLX_CPU_ISA=" + isa_cap() + ")"
                               : " (chosen from CPU features)";
  }
  s += std::string(", skinny M<=16: ") + (use_avx512() ? "avx512" : use_avx2() ? "avx2" : "x86-64");
  const Dnnl& d = dnnl();
  s += d.ok ? ", prepacked M>16: oneDNN matmul"
            : ", prepacked M>16: OpenBLAS in place (" + (d.why.empty() ? std::string("oneDNN failed to start") : d.why) + ")";
  return s;
}

// ---------------- f64 ----------------
void dgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
           int64_t ldb, double* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t m = 0; m < M; ++m) std::fill(C + m * ldc, C + m * ldc + N, 0.0);
    return;
  }
  auto f = dgemm_fn();
  auto call = [&](int64_t m0, int64_t m1) {
    if (m1 <= m0) return;
    f(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, blas_int(m1 - m0), blas_int(N),
      blas_int(K), 1.0, ta ? A + m0 : A + m0 * lda, blas_int(lda), B, blas_int(ldb), 0.0, C + m0 * ldc, blas_int(ldc));
  };
  const int T = ThreadPool::global().size();
  if (T == 1 || 2.0 * M * N * K < 4e6 || M < 2 * T) return call(0, M);
  const int64_t part = (M + T - 1) / T;  // rows per task; each task reads all of B
  ThreadPool::global().parallel_for(T, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) call(std::min(M, t * part), std::min(M, (t + 1) * part));
  });
}

}  // namespace rlx::cpu
