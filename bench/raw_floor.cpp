// raw_floor: the hardware floors the benchmark table is measured against, in the
// same process conditions as rlx (same OpenBLAS, same thread count):
//   sgemm  : cblas_sgemm on N x N f32 matrices (no rlx code in the loop)
//   copy   : a STREAM-like copy of B bytes (B/2 read + B/2 written), single- and
//            multi-threaded; the best gives the memory bandwidth
//   block  : the seven linear layers of bench/graphs/decoder_block.json as raw
//            cblas_sgemm calls (x · wᵀ, seq 256), and of decode_step.json as raw
//            cblas_sgemv calls (seq 1): the BLAS floor of those graphs
//   fma    : the cores' peak f32 FMA rate, AVX-512 (where the CPU has it) and AVX2 + FMA, one
//            thread and all threads: 12 independent accumulator registers, no memory traffic
//            (the compute roof a GEMM's GFLOP/s is compared with)
// Prints one JSON object on stdout.
//   raw_floor [--sgemm N] [--copy-bytes BYTES] [--reps R] [--threads T] [--no-block]
#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

float* alloc(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, 64, n * sizeof(float) + 64)) std::abort();
  return static_cast<float*>(p);
}

int threads_from_env() {
  for (const char* name : {"RLX_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
    if (const char* e = std::getenv(name))
      if (int n = std::atoi(e); n > 0) return n;
  return std::max(1u, std::thread::hardware_concurrency());
}

// Copies n floats with `threads` threads (each a contiguous slice, libc memcpy).
void par_copy(float* dst, const float* src, size_t n, int threads) {
  if (threads <= 1) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  std::vector<std::thread> ts;
  size_t chunk = (n + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    size_t b = std::min(n, t * chunk), e = std::min(n, b + chunk);
    ts.emplace_back([=] { std::memcpy(dst + b, src + b, (e - b) * 4); });
  }
  for (auto& t : ts) t.join();
}

// Peak FMA rate of one thread: `iters` x 12 independent vector FMAs (each 2 flops a lane), the
// accumulators named one by one so that they stay in registers (an array spills at -O2).
#define RLX_FMA12(F)                                                                                  \
  a0 = F(a0, m, c), a1 = F(a1, m, c), a2 = F(a2, m, c), a3 = F(a3, m, c), a4 = F(a4, m, c), a5 = F(a5, m, c), \
  a6 = F(a6, m, c), a7 = F(a7, m, c), a8 = F(a8, m, c), a9 = F(a9, m, c), a10 = F(a10, m, c), a11 = F(a11, m, c)
#define RLX_FMA_BODY(V, SET, F, ADD, LANES)                                                            \
  V m = SET(0.999999f), c = SET(1e-7f), a0 = SET(0), a1 = SET(1), a2 = SET(2), a3 = SET(3), a4 = SET(4), \
    a5 = SET(5), a6 = SET(6), a7 = SET(7), a8 = SET(8), a9 = SET(9), a10 = SET(10), a11 = SET(11);        \
  double t0 = now();                                                                                   \
  for (long i = 0; i < iters; ++i) RLX_FMA12(F);                                                       \
  double t = now() - t0;                                                                               \
  V s = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));                             \
  s = ADD(s, ADD(ADD(a8, a9), ADD(a10, a11)));                                                         \
  float v[LANES];                                                                                      \
  std::memcpy(v, &s, sizeof v);                                                                        \
  volatile float sink = v[0];                                                                          \
  (void)sink;                                                                                          \
  return 12.0 * LANES * 2 * (double)iters / t / 1e9

__attribute__((target("avx512f"))) double fma_avx512(long iters) {
  RLX_FMA_BODY(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, 16);
}
__attribute__((target("avx2,fma"))) double fma_avx2(long iters) {
  RLX_FMA_BODY(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, 8);
}

// The best of `reps` runs with `threads` threads each running f; the sum over threads (GFLOP/s).
double fma_peak(double (*f)(long), int threads, int reps) {
  const long iters = 20'000'000;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<double> g(threads);
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] { g[t] = f(iters); });
    for (auto& t : ts) t.join();
    double sum = 0;
    for (double x : g) sum += x;
    best = std::max(best, sum);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int N = 2048, reps = 10, threads = threads_from_env();
  bool block = true;
  size_t copy_bytes = size_t(4) * 1000 * 4096 * 4 * 2;  // the GELU chain: 65.5 MB read + 65.5 MB written
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--no-block") block = false;
    else if (a == "--sgemm" && v) N = std::atoi(argv[++i]);
    else if (a == "--copy-bytes" && v) copy_bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--reps" && v) reps = std::atoi(argv[++i]);
    else if (a == "--threads" && v) threads = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: raw_floor [--sgemm N] [--copy-bytes BYTES] [--reps R] [--threads T] [--no-block]\n");
      return 2;
    }
  }
  openblas_set_num_threads(threads);

  // ---- sgemm ----
  std::vector<double> gemm_ms;
  if (N > 0) {
    size_t nn = size_t(N) * N;
    float *A = alloc(nn), *B = alloc(nn), *C = alloc(nn);
    for (size_t i = 0; i < nn; ++i) {
      A[i] = (float)((i * 2654435761u) % 1000) / 1000.f - 0.5f;
      B[i] = (float)((i * 40503u) % 1000) / 1000.f - 0.5f;
    }
    for (int w = 0; w < 2; ++w)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.f, A, N, B, N, 0.f, C, N);
    for (int r = 0; r < reps; ++r) {
      double t0 = now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.f, A, N, B, N, 0.f, C, N);
      gemm_ms.push_back((now() - t0) * 1e3);
    }
    free(A);
    free(B);
    free(C);
  }

  // ---- copy bandwidth ----
  size_t n = copy_bytes / 8;  // floats per side
  float *src = alloc(n), *dst = alloc(n);
  for (size_t i = 0; i < n; ++i) src[i] = (float)i, dst[i] = 0.f;
  std::vector<int> thread_counts{1};
  if (threads > 1) thread_counts.push_back(threads);
  double best_gbps = 0;
  std::string copies;
  for (int t : thread_counts) {
    par_copy(dst, src, n, t);
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
      double t0 = now();
      par_copy(dst, src, n, t);
      ms.push_back((now() - t0) * 1e3);
    }
    double med = median(ms), gbps = (double)copy_bytes / (med * 1e-3) / 1e9;
    best_gbps = std::max(best_gbps, gbps);
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s{\"threads\": %d, \"median_ms\": %.4f, \"gbps\": %.3f}", copies.empty() ? "" : ", ",
                  t, med, gbps);
    copies += buf;
  }
  free(src);
  free(dst);

  // ---- the decoder block's linear layers: [out, in] weights, x [rows, in] ----
  const int lin[7][2] = {{1024, 1024}, {256, 1024}, {256, 1024}, {1024, 1024}, {2816, 1024}, {2816, 1024}, {1024, 2816}};
  double block_gemm_ms = 0, block_gemv_ms = 0, weight_bytes = 0;
  if (block) {
    const int rows = 256;
    for (const auto& l : lin) {
      const int O = l[0], I = l[1];
      weight_bytes += 4.0 * O * I;
      float *x = alloc(size_t(rows) * I), *w = alloc(size_t(O) * I), *y = alloc(size_t(rows) * O);
      for (size_t i = 0; i < size_t(rows) * I; ++i) x[i] = (float)(i % 13) * 0.01f;
      for (size_t i = 0; i < size_t(O) * I; ++i) w[i] = (float)(i % 7) * 0.01f;
      std::vector<double> a, b;
      for (int r = 0; r < reps + 2; ++r) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, O, I, 1.f, x, I, w, I, 0.f, y, O);
        double t1 = now();
        cblas_sgemv(CblasRowMajor, CblasNoTrans, O, I, 1.f, w, I, x, 1, 0.f, y, 1);
        double t2 = now();
        if (r >= 2) a.push_back((t1 - t0) * 1e3), b.push_back((t2 - t1) * 1e3);
      }
      block_gemm_ms += median(a);
      block_gemv_ms += median(b);
      free(x);
      free(w);
      free(y);
    }
  }

  // ---- peak FMA rates (best of the reps: the least disturbed run) ----
  const bool has512 = __builtin_cpu_supports("avx512f"), has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const double p512_1 = has512 ? fma_peak(fma_avx512, 1, reps) : 0, p512_n = has512 ? fma_peak(fma_avx512, threads, reps) : 0;
  const double p2_1 = has2 ? fma_peak(fma_avx2, 1, reps) : 0, p2_n = has2 ? fma_peak(fma_avx2, threads, reps) : 0;

  double gm = gemm_ms.empty() ? 0 : median(gemm_ms);
  double best_gemm = gemm_ms.empty() ? 0 : *std::min_element(gemm_ms.begin(), gemm_ms.end());
  std::printf("{\"threads\": %d, \"sgemm\": {\"n\": %d, \"median_ms\": %.4f, \"min_ms\": %.4f, \"gflops\": %.2f},\n"
              " \"copy\": {\"bytes\": %zu, \"runs\": [%s], \"best_gbps\": %.3f, \"floor_ms\": %.4f},\n"
              " \"decoder_linears\": {\"sgemm_seq256_ms\": %.4f, \"sgemv_seq1_ms\": %.4f, \"weight_bytes\": %.0f},\n"
              " \"fma_peak_gflops\": {\"avx512_1_thread\": %.1f, \"avx512_all_threads\": %.1f, \"avx2_1_thread\": %.1f, "
              "\"avx2_all_threads\": %.1f}}\n",
              threads, N, gm, best_gemm, gm > 0 ? 2.0 * N * N * (double)N / (gm * 1e-3) / 1e9 : 0.0, copy_bytes,
              copies.c_str(), best_gbps, (double)copy_bytes / (best_gbps * 1e9) * 1e3, block_gemm_ms, block_gemv_ms,
              weight_bytes, p512_1, p512_n, p2_1, p2_n);
  return 0;
}
