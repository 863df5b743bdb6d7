// cpu::gemm, gemm_batched, pack_b/gemm_packed against a plain double-precision reference loop
// written here: all transposes, M = 1..16 (the skinny kernels) and larger M (the library),
// odd sizes, K = 0, leading dimensions larger than the width, bias/residual/activation
// epilogues, batched with broadcast offsets, and packed vs not.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/thread_pool.h"

namespace {

using rlx::EwOp;
using rlx::cpu::Epilogue;

std::vector<float> rnd(size_t n, unsigned seed) {
  std::vector<float> v(n);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = (float)((seed >> 8) & 0xffff) / 32768.f - 1.f;
  }
  return v;
}

double act_ref(EwOp op, double x) {
  switch (op) {
    case EwOp::Relu: return x > 0 ? x : 0;
    case EwOp::Silu: return x / (1 + std::exp(-x));
    case EwOp::GeluErf: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case EwOp::GeluTanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case EwOp::Neg: return -x;
    default: ADD_FAILURE() << "no reference for this activation"; return 0;
  }
}

// Reference: C[m, n] = alpha * sum_k opA[m, k] opB[k, n] (+ bias[n]) (+ res[m, n]) then act.
std::vector<double> reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                              int64_t lda, const float* B, int64_t ldb, const Epilogue& ep) {
  std::vector<double> C(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        double a = ta ? A[k * lda + m] : A[m * lda + k];
        double b = tb ? B[n * ldb + k] : B[k * ldb + n];
        s += a * b;
      }
      s *= alpha;
      if (ep.bias) s += ep.bias[n];
      if (ep.residual) s += ep.residual[m * ep.ldr + n];
      if (ep.has_act) s = act_ref(ep.act, s);
      C[m * N + n] = s;
    }
  return C;
}

void expect_close(const std::vector<double>& want, const float* C, int64_t M, int64_t N, int64_t ldc, int64_t K,
                  const std::string& what) {
  // f32 accumulation over K terms of magnitude <= 1: error grows like sqrt(K) * eps.
  const double tol = 1e-5 * (1 + std::sqrt((double)K)) * 4;
  int bad = 0;
  for (int64_t m = 0; m < M && bad < 5; ++m)
    for (int64_t n = 0; n < N && bad < 5; ++n) {
      double w = want[m * N + n], g = C[m * ldc + n];
      if (!(std::fabs(w - g) <= tol * (1 + std::fabs(w)))) {
        ADD_FAILURE() << what << " at [" << m << "," << n << "]: want " << w << " got " << g;
        ++bad;
      }
    }
}

struct Case {
  int64_t M, N, K;
};

void run_case(bool ta, bool tb, Case c, float alpha, const Epilogue& ep_in, bool pad, const std::string& tag) {
  const int64_t M = c.M, N = c.N, K = c.K, extra = pad ? 3 : 0;
  const int64_t lda = (ta ? M : K) + extra, ldb = (tb ? K : N) + extra, ldc = N + extra;
  auto A = rnd((ta ? K : M) * lda + 1, 1 + M), B = rnd((tb ? N : K) * ldb + 1, 2 + N);
  std::vector<float> C(M * ldc + 1, 12345.f);
  auto want = reference(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, ep_in);
  rlx::cpu::gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, C.data(), ldc, ep_in);
  std::string what = tag + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " M=" + std::to_string(M) +
                     " N=" + std::to_string(N) + " K=" + std::to_string(K);
  expect_close(want, C.data(), M, N, ldc, K, what);
  // Padding columns of C are left alone.
  if (pad) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = N; n < ldc; ++n) ASSERT_EQ(C[m * ldc + n], 12345.f) << what << " wrote outside C";
  }
  // The same through a single thread.
  std::vector<float> C1(M * ldc + 1, 0.f);
  rlx::cpu::gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, C1.data(), ldc, ep_in, rlx::cpu::Threads::Single);
  expect_close(want, C1.data(), M, N, ldc, K, what + " single");
}

const Case kCases[] = {{1, 1, 1},   {1, 7, 5},    {1, 300, 1029}, {2, 65, 17},  {3, 129, 33}, {4, 64, 64},
                       {5, 131, 47}, {7, 250, 100}, {8, 31, 9},     {13, 77, 70}, {16, 200, 257}, {17, 33, 18},
                       {31, 300, 64}, {64, 130, 129}, {100, 257, 61}, {256, 96, 48}};

TEST(Gemm, AllTransposesAndSizes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& c : kCases) run_case(ta, tb, c, 1.f, {}, false, "plain");
}

TEST(Gemm, LeadingDimensionsAndAlpha) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& c : {Case{1, 40, 33}, Case{6, 70, 19}, Case{40, 150, 70}}) run_case(ta, tb, c, 0.375f, {}, true, "ld");
}

TEST(Gemm, KZeroGivesEpilogueOfZeros) {
  auto bias = rnd(50, 9);
  Epilogue ep;
  ep.bias = bias.data();
  for (const auto& c : {Case{1, 50, 0}, Case{9, 50, 0}, Case{40, 50, 0}}) {
    run_case(false, true, c, 1.f, {}, false, "k0");
    run_case(false, false, c, 1.f, ep, false, "k0 bias");
  }
}

TEST(Gemm, EmptyOutputsAreNoOps) {
  std::vector<float> C(4, 7.f);
  float a = 1, b = 1;
  rlx::cpu::gemm(false, false, 0, 4, 3, 1.f, &a, 3, &b, 4, C.data(), 4);
  rlx::cpu::gemm(false, false, 1, 0, 3, 1.f, &a, 3, &b, 1, C.data(), 1);
  for (float v : C) EXPECT_EQ(v, 7.f);
}

// Every epilogue stage at once: bias, residual (leading dimension ldr), then `act`.
Epilogue full_epilogue(const std::vector<float>& bias, const std::vector<float>& residual, int64_t ldr, EwOp act) {
  Epilogue ep;
  ep.bias = bias.data();
  ep.residual = residual.data();
  ep.ldr = ldr;
  ep.has_act = true;
  ep.act = act;
  return ep;
}

TEST(Gemm, Epilogues) {
  for (const auto& c : {Case{1, 70, 40}, Case{4, 129, 65}, Case{16, 64, 31}, Case{48, 300, 70}}) {
    auto bias = rnd(c.N, 3), res = rnd(c.M * (c.N + 5), 4);
    for (EwOp act : {EwOp::Relu, EwOp::Silu, EwOp::GeluErf, EwOp::GeluTanh, EwOp::Neg}) {
      Epilogue ep = full_epilogue(bias, res, c.N + 5, act);
      for (bool tb : {false, true}) run_case(false, tb, c, 1.f, ep, false, std::string("epilogue ") + rlx::ew_name(act));
    }
    Epilogue only_res;
    only_res.residual = res.data();
    only_res.ldr = c.N + 5;
    run_case(false, true, c, 1.f, only_res, false, "residual only");
    Epilogue only_bias;
    only_bias.bias = bias.data();
    run_case(true, true, c, 1.f, only_bias, false, "bias only");
  }
}

TEST(Gemm, BatchedWithBroadcastOffsets) {
  // 6 products; B broadcast over the first axis of a [2, 3] batch (b_off repeats), A not.
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& c : {Case{1, 20, 9}, Case{5, 33, 17}, Case{40, 70, 30}}) {
        const int64_t batches = 6, M = c.M, N = c.N, K = c.K;
        auto A = rnd(batches * M * K, 5), B = rnd(3 * K * N, 6);
        std::vector<int64_t> ao(batches), bo(batches);
        for (int64_t i = 0; i < batches; ++i) {
          ao[i] = i * M * K;
          bo[i] = (i % 3) * K * N;
        }
        std::vector<float> C(batches * M * N);
        rlx::cpu::gemm_batched(ta, tb, M, N, K, 1.f, A.data(), ta ? M : K, ao.data(), B.data(), tb ? K : N, bo.data(),
                               C.data(), N, M * N, batches);
        for (int64_t i = 0; i < batches; ++i) {
          auto want = reference(ta, tb, M, N, K, 1.f, A.data() + ao[i], ta ? M : K, B.data() + bo[i], tb ? K : N, {});
          expect_close(want, C.data() + i * M * N, M, N, N, K, "batch " + std::to_string(i));
        }
      }
}

TEST(Gemm, PackedMatchesUnpacked) {
  for (bool tb : {false, true})
    for (const auto& c : {Case{1, 100, 70}, Case{3, 64, 64}, Case{16, 129, 33}, Case{17, 50, 40}, Case{200, 300, 96}}) {
      const int64_t M = c.M, N = c.N, K = c.K, ldb = (tb ? K : N) + 2;
      auto A = rnd(M * K, 7), B = rnd((tb ? N : K) * ldb, 8), bias = rnd(N, 9);
      auto packed = rlx::cpu::pack_b(tb, K, N, B.data(), ldb);
      ASSERT_EQ(packed->K, K);
      ASSERT_EQ(packed->N, N);
      // A padded B is always copied (and reports its bytes).
      EXPECT_EQ(packed->bytes(), size_t(K * N * 4));
      Epilogue ep;
      ep.bias = bias.data();
      ep.has_act = true;
      ep.act = EwOp::Relu;
      std::vector<float> C(M * N);
      rlx::cpu::gemm_packed(M, A.data(), K, *packed, C.data(), N, ep);
      auto want = reference(false, tb, M, N, K, 1.f, A.data(), K, B.data(), ldb, ep);
      expect_close(want, C.data(), M, N, N, K, "packed tb=" + std::to_string(tb) + " M=" + std::to_string(M));
    }
}

// Packed for a known number of rows (compiled mode knows it): 1..16 rows get panels for the
// skinny kernel on AVX-512 (a zero-padded copy), and the same handle still serves more rows.
TEST(Gemm, PackedForSkinnyRows) {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && !std::getenv("RLX_CPU_ISA");
  for (bool tb : {false, true})
    for (const auto& c : {Case{1, 100, 70}, Case{2, 16, 1}, Case{3, 257, 33}, Case{5, 31, 100}, Case{8, 200, 64},
                          Case{9, 129, 17}, Case{16, 300, 130}}) {
      const int64_t M = c.M, N = c.N, K = c.K, ldb = (tb ? K : N) + 1;
      auto A = rnd(40 * K, 17), B = rnd((tb ? N : K) * ldb, 18), bias = rnd(N, 19), res = rnd(M * N, 20);
      auto packed = rlx::cpu::pack_b(tb, K, N, B.data(), ldb, M);
      const std::string tag = "panels tb=" + std::to_string(tb) + " M=" + std::to_string(M) + " N=" +
                              std::to_string(N) + " K=" + std::to_string(K);
      if (avx512) {
        EXPECT_NE(packed->panels, nullptr) << tag;
        EXPECT_EQ(packed->bytes(), size_t((N + 15) / 16 * 16 * K * 4)) << tag;
      }
      const Epilogue ep = full_epilogue(bias, res, N, EwOp::Silu);
      for (int64_t rows : {M, (int64_t)1, (int64_t)16, (int64_t)40}) {  // the rows packed for, and others
        std::vector<float> C(rows * (N + 3), 777.f);
        Epilogue e = ep;
        if (rows > M) e.residual = nullptr;  // res has M rows
        rlx::cpu::gemm_packed(rows, A.data(), K, *packed, C.data(), N + 3, e);
        auto want = reference(false, tb, rows, N, K, 1.f, A.data(), K, B.data(), ldb, e);
        expect_close(want, C.data(), rows, N, N + 3, K, tag + " rows=" + std::to_string(rows));
        for (int64_t m = 0; m < rows; ++m)
          for (int64_t n = N; n < N + 3; ++n) ASSERT_EQ(C[m * (N + 3) + n], 777.f) << tag << " wrote outside C";
      }
    }
}

// Packed for more than 16 rows: oneDNN's blocked layout where it loads (primitives for exactly
// M rows and C with leading dimension N; other calls fall back to OpenBLAS), else in place for
// OpenBLAS (no copy), or with RLX_GEMM_WIDE=1 on AVX-512 panels of 32 columns for rlx's large-M
// kernel, whose K blocks (256) accumulate into C: K up to 600 crosses them. ctest runs this
// with RLX_GEMM_DNNL=0 and RLX_GEMM_WIDE=1 too (gemm.cmake).
TEST(Gemm, PackedForManyRows) {
  __builtin_cpu_init();
  const char* wide_env = std::getenv("RLX_GEMM_WIDE");
  const bool wide = wide_env && std::string(wide_env) == "1" && __builtin_cpu_supports("avx512f") &&
                    !std::getenv("RLX_CPU_ISA");
  for (bool tb : {false, true})
    for (const auto& c : {Case{17, 33, 5}, Case{29, 64, 600}, Case{40, 100, 257}, Case{300, 70, 513}}) {
      const int64_t M = c.M, N = c.N, K = c.K, ldb = (tb ? K : N) + 1, ldc = N + 2;
      auto A = rnd(M * K, 41), B = rnd((tb ? N : K) * ldb, 42), bias = rnd(N, 43), res = rnd(M * N, 44);
      auto packed = rlx::cpu::pack_b(tb, K, N, B.data(), ldb, M);
      const std::string tag = "many rows tb=" + std::to_string(tb) + " M=" + std::to_string(M) + " N=" +
                              std::to_string(N) + " K=" + std::to_string(K);
      const bool dnnl = packed->layout().find("oneDNN") != std::string::npos;
      const char* dn = std::getenv("RLX_GEMM_DNNL");
      if (dn && std::string(dn) == "0") {
        EXPECT_FALSE(dnnl) << tag;
      }
      if (dnnl) {
        EXPECT_GE(packed->bytes(), size_t(K * N * 4)) << tag;  // the blocked copies
      } else if (wide) {
        ASSERT_NE(packed->wide, nullptr) << tag;
        EXPECT_EQ(packed->bytes(), size_t((N + 31) / 32 * 32 * K * 4)) << tag;
      } else {
        EXPECT_EQ(packed->wide, nullptr) << tag;
      }
      const Epilogue ep = full_epilogue(bias, res, N, EwOp::GeluTanh);
      std::vector<float> C(M * ldc, 555.f);
      rlx::cpu::gemm_packed(M, A.data(), K, *packed, C.data(), ldc, ep);
      expect_close(reference(false, tb, M, N, K, 1.f, A.data(), K, B.data(), ldb, ep), C.data(), M, N, ldc, K, tag);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = N; n < ldc; ++n) ASSERT_EQ(C[m * ldc + n], 555.f) << tag << " wrote outside C";
      // C with leading dimension N (what compiled plans write; oneDNN's primitive is made for it)
      std::vector<float> C1(M * N);
      rlx::cpu::gemm_packed(M, A.data(), K, *packed, C1.data(), N, ep);
      expect_close(reference(false, tb, M, N, K, 1.f, A.data(), K, B.data(), ldb, ep), C1.data(), M, N, N, K,
                   tag + " ldc=N");
      // and the same handle with few rows
      std::vector<float> C2(3 * N);
      rlx::cpu::gemm_packed(3, A.data(), K, *packed, C2.data(), N);
      expect_close(reference(false, tb, 3, N, K, 1.f, A.data(), K, B.data(), ldb, {}), C2.data(), 3, N, N, K,
                   tag + " 3 rows");
    }
}

// A custom epilogue sees every element of C exactly once, after the product.
TEST(Gemm, CustomEpilogueCoversEachBlockOnce) {
  for (const auto& c : {Case{1, 300, 64}, Case{16, 129, 33}, Case{64, 300, 96}, Case{300, 520, 64}}) {
    const int64_t M = c.M, N = c.N, K = c.K;
    auto A = rnd(M * K, 21), W = rnd(N * K, 22);
    std::vector<int> seen(M * N, 0);
    Epilogue ep;
    ep.custom = [&](float* C, int64_t ldc, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
      for (int64_t m = m0; m < m1; ++m)
        for (int64_t n = n0; n < n1; ++n) {
          seen[m * N + n]++;  // distinct elements per task: no race
          C[m * ldc + n] = 2.f * C[m * ldc + n] + 1.f;
        }
    };
    std::vector<float> C(M * N);
    rlx::cpu::gemm(false, true, M, N, K, 1.f, A.data(), K, W.data(), K, C.data(), N, ep);
    auto want = reference(false, true, M, N, K, 1.f, A.data(), K, W.data(), K, {});
    for (auto& w : want) w = 2 * w + 1;
    expect_close(want, C.data(), M, N, N, K, "custom M=" + std::to_string(M));
    for (int64_t i = 0; i < M * N; ++i) ASSERT_EQ(seen[i], 1) << "element " << i << " M=" << M;
    auto packed = rlx::cpu::pack_b(true, K, N, W.data(), K, M);
    std::fill(seen.begin(), seen.end(), 0);
    rlx::cpu::gemm_packed(M, A.data(), K, *packed, C.data(), N, ep);
    expect_close(want, C.data(), M, N, N, K, "custom packed M=" + std::to_string(M));
    for (int64_t i = 0; i < M * N; ++i) ASSERT_EQ(seen[i], 1) << "packed element " << i << " M=" << M;
  }
}

TEST(Gemm, PackingAContiguousWeightMakesNoCopy) {
  const int64_t N = 48, K = 40;
  auto W = rnd(N * K, 10), A = rnd(2 * K, 11);
  auto packed = rlx::cpu::pack_b(true, K, N, W.data(), K);
  EXPECT_EQ(packed->bytes(), 0u);
  EXPECT_EQ(packed->data, W.data());
  std::vector<float> C(2 * N);
  rlx::cpu::gemm_packed(2, A.data(), K, *packed, C.data(), N);
  expect_close(reference(false, true, 2, N, K, 1.f, A.data(), K, W.data(), K, {}), C.data(), 2, N, N, K, "alias");
}

TEST(Gemm, DescriptionNamesTheLibrary) {
  std::string d = rlx::cpu::gemm_description();
  EXPECT_NE(d.find("OpenBLAS"), std::string::npos) << d;
  EXPECT_EQ(d.find("unavailable"), std::string::npos) << d;
}

// The kernel set follows the CPU's features (checked here with the compiler's CPUID builtins),
// whatever OPENBLAS_CORETYPE the environment holds, and that variable is left as it was.
TEST(Gemm, OpenBlasKernelSetFollowsCpuFeatures) {
  if (std::getenv("RLX_OPENBLAS_CORETYPE")) GTEST_SKIP() << "RLX_OPENBLAS_CORETYPE forces a kernel set";
  const char* before = std::getenv("OPENBLAS_CORETYPE");
  std::string saved = before ? before : "";
  std::string d = rlx::cpu::gemm_description();  // loads OpenBLAS on first use
  const char* after = std::getenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(before != nullptr, after != nullptr);
  if (before && after) {
    EXPECT_EQ(saved, after);
  }
  __builtin_cpu_init();
  bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx512) EXPECT_NE(d.find("SkylakeX kernels"), std::string::npos) << d;
  else if (avx2) EXPECT_NE(d.find("Haswell kernels"), std::string::npos) << d;
  else EXPECT_NE(d.find("own detection"), std::string::npos) << d;
}

}  // namespace

// RLX_NUM_THREADS governs everything: the process has exactly the pool's threads (OpenBLAS,
// loaded by the first product, starts none of its own), and the blocks of a product (OpenBLAS
// path, skinny path, packed path) run on at most that many distinct threads. Counted, not timed.
// ctest runs this with RLX_NUM_THREADS=3 (gemm.cmake) as well as with the default.
namespace {
int process_threads() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) n += e.is_directory() ? 1 : 0;
  return n;
}
}  // namespace

TEST(Threads, NumThreadsGovernsGemmAndOwnKernels) {
  const int T = rlx::cpu::default_num_threads();
  if (const char* e = std::getenv("RLX_NUM_THREADS")) {
    EXPECT_EQ(T, std::atoi(e));
  }
  EXPECT_EQ(rlx::cpu::ThreadPool::global().size(), T);
  std::mutex mu;
  std::set<std::thread::id> ids;
  Epilogue ep;
  ep.custom = [&](float*, int64_t, int64_t, int64_t, int64_t, int64_t) {
    std::lock_guard<std::mutex> l(mu);
    ids.insert(std::this_thread::get_id());
  };
  const int64_t K = 512;
  auto A = rnd(256 * K, 31), W = rnd(2048 * K, 32);
  std::vector<float> C(256 * 2048);
  for (int rep = 0; rep < 3; ++rep) {
    rlx::cpu::gemm(false, true, 256, 2048, K, 1.f, A.data(), K, W.data(), K, C.data(), 2048, ep);  // OpenBLAS
    rlx::cpu::gemm(false, true, 4, 2048, K, 1.f, A.data(), K, W.data(), K, C.data(), 2048, ep);    // skinny
  }
  auto packed = rlx::cpu::pack_b(true, K, 2048, W.data(), K, 2);
  rlx::cpu::gemm_packed(2, A.data(), K, *packed, C.data(), 2048, ep);
  auto big = rlx::cpu::pack_b(true, K, 2048, W.data(), K, 256);  // oneDNN where it loads (OpenMP inside)
  rlx::cpu::gemm_packed(256, A.data(), K, *big, C.data(), 2048, ep);
  EXPECT_GE((int)ids.size(), 1);
  EXPECT_LE((int)ids.size(), T);
  // The caller plus T - 1 pool workers; OpenBLAS and oneDNN/OpenMP (loaded by now) added none.
  EXPECT_EQ(process_threads(), T) << rlx::cpu::gemm_description();
}

// A kernel's exception (a scratch allocation failing, an rlx error) reaches the caller of
// parallel_for, from whichever thread ran the chunk, and the pool stays usable; before, a throw
// on a worker thread ended the process with std::terminate.
TEST(Threads, ExceptionInAChunkReachesTheCaller) {
  rlx::cpu::ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  for (int thrower : {0, 1}) {  // 0: the chunk of the calling thread, 1: a worker's chunk
    std::mutex mu;
    std::condition_variable cv;
    std::set<std::thread::id> arrived;
    std::set<int64_t> ran;
    bool threw_on_worker = false;
    try {
      pool.parallel_for(64, 1, [&](int64_t b, int64_t e) {
        const bool on_worker = std::this_thread::get_id() != caller;
        std::unique_lock<std::mutex> l(mu);
        // Each thread's first chunk waits until both threads hold one (the caller blocked in
        // its chunk leaves the next chunk to the worker), so the chosen thread is the one
        // that throws.
        arrived.insert(std::this_thread::get_id());
        cv.notify_all();
        cv.wait_for(l, std::chrono::seconds(10), [&] { return arrived.size() == 2; });
        if ((thrower == 1) == on_worker) {
          threw_on_worker = on_worker;
          throw std::bad_alloc();
        }
        for (int64_t i = b; i < e; ++i) ran.insert(i);
      });
      ADD_FAILURE() << "no exception reached the caller";
    } catch (const std::bad_alloc&) {
      EXPECT_EQ(threw_on_worker, thrower == 1);
      EXPECT_EQ(arrived.size(), 2u);
    }
    EXPECT_LT(ran.size(), 64u);  // the failing chunk's indices never ran
  }
  // The pool runs the next job in full.
  std::atomic<int64_t> sum{0};
  pool.parallel_for(1000, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 999 * 1000 / 2);
}
