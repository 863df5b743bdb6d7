// cpu::qgemm (lib/backends/cpu/qgemm.h) against a plain int64 reference loop written here, on
// every instruction-set path this CPU runs (avx512vnni, avxvnni, avx2, base), bit for bit:
// u8/i8 on either side, zero points scalar / per row / per column (extremes included),
// adversarial values (all-255 activations, -128/+127 weights, the largest K the registry
// allows), odd sizes, leading dimensions past the width, the float epilogue, and one thread.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/qgemm.h"

namespace {

using namespace rlx::cpu;

uint32_t next(uint32_t& s) { return s = s * 1664525u + 1013904223u, s >> 8; }

struct Case {
  int64_t M, N, K;
  bool as, bs;          // A / B signed (i8)
  int zmode;            // 0 none, 1 scalar, 2 per row / per column
  int fill;             // 0 random, 1 extremes: A at its max, B at its min, zero points opposite
};

std::vector<int64_t> reference(const Case& c, const std::vector<uint8_t>& A, int64_t lda, const std::vector<uint8_t>& B,
                               const std::vector<int32_t>& za, const std::vector<int32_t>& zb) {
  std::vector<int64_t> y((size_t)(c.M * c.N));
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      int64_t acc = 0;
      const int64_t a0 = za.empty() ? 0 : za[za.size() == 1 ? 0 : m];
      const int64_t b0 = zb.empty() ? 0 : zb[zb.size() == 1 ? 0 : n];
      for (int64_t k = 0; k < c.K; ++k) {
        const int64_t a = c.as ? (int8_t)A[m * lda + k] : A[m * lda + k];
        const int64_t b = c.bs ? (int8_t)B[k * c.N + n] : B[k * c.N + n];
        acc += (a - a0) * (b - b0);
      }
      y[m * c.N + n] = acc;
    }
  return y;
}

void check(const Case& c, QIsa isa, unsigned seed, Threads th = Threads::Pool) {
  SCOPED_TRACE(std::string(qisa_name(isa)) + " M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) +
               " K=" + std::to_string(c.K) + " as=" + std::to_string(c.as) + " bs=" + std::to_string(c.bs) +
               " z=" + std::to_string(c.zmode) + " fill=" + std::to_string(c.fill));
  uint32_t s = seed;
  const int64_t lda = c.K + 3;
  std::vector<uint8_t> A((size_t)(c.M * lda)), B((size_t)(c.K * c.N));
  const uint8_t amax = c.as ? 0x7f : 0xff, amin = c.as ? 0x80 : 0x00;
  const uint8_t bmin = c.bs ? 0x80 : 0x00, bmax = c.bs ? 0x7f : 0xff;
  for (auto& v : A) v = c.fill ? amax : (uint8_t)next(s);
  for (auto& v : B) v = c.fill ? bmin : (uint8_t)next(s);
  if (c.fill == 2)  // alternate extremes
    for (size_t i = 0; i < B.size(); ++i) B[i] = (i % 3) ? bmin : bmax;
  std::vector<int32_t> za, zb;
  auto zval = [&](bool sgn, bool hi) -> int32_t {
    if (c.fill) return sgn ? (hi ? 127 : -128) : (hi ? 255 : 0);
    const uint8_t r = (uint8_t)next(s);
    return sgn ? (int32_t)(int8_t)r : (int32_t)r;
  };
  if (c.zmode == 1) za = {zval(c.as, false)}, zb = {zval(c.bs, true)};
  if (c.zmode == 2) {
    for (int64_t m = 0; m < c.M; ++m) za.push_back(zval(c.as, m % 2 == 0 ? false : true));
    for (int64_t n = 0; n < c.N; ++n) zb.push_back(zval(c.bs, n % 2 == 0));
  }
  const auto ref = reference(c, A, lda, B, za, zb);
  for (int64_t v : ref) ASSERT_TRUE(v >= INT32_MIN && v <= INT32_MAX) << "test case out of int32";
  auto pk = pack_qb(B.data(), c.bs, c.K, c.N, c.N);
  int blo = 255, bhi = -128;  // the range pack_qb reports (plan notes)
  for (uint8_t v : B) blo = std::min(blo, c.bs ? (int)(int8_t)v : (int)v), bhi = std::max(bhi, c.bs ? (int)(int8_t)v : (int)v);
  ASSERT_EQ(pk->bmin, blo);
  ASSERT_EQ(pk->bmax, bhi);
  const int64_t ldc = c.N + 5;
  std::vector<int32_t> C((size_t)(c.M * ldc), 0x5a5a5a5a);
  qgemm(c.M, A.data(), c.as, lda, za.empty() ? nullptr : za.data(), za.size() > 1, *pk,
        zb.empty() ? nullptr : zb.data(), zb.size() > 1, C.data(), ldc, {}, isa, th);
  for (int64_t m = 0; m < c.M; ++m) {
    for (int64_t n = 0; n < c.N; ++n) ASSERT_EQ(C[m * ldc + n], (int32_t)ref[m * c.N + n]) << "m=" << m << " n=" << n;
    for (int64_t n = c.N; n < ldc; ++n) ASSERT_EQ(C[m * ldc + n], 0x5a5a5a5a) << "wrote past N";
  }
  // The float epilogue: float(acc) * (a_scale * b_scale[n]) + bias[n], as cast/mul/add do.
  std::vector<float> bsc((size_t)c.N), bias((size_t)c.N);
  for (int64_t n = 0; n < c.N; ++n) bsc[n] = 0.001f * (float)(1 + n % 7), bias[n] = 0.5f - 0.01f * (float)n;
  const float asc = 0.037f;
  QEpilogue ep;
  ep.to_float = true;
  ep.a_scale = &asc;
  ep.b_scale = bsc.data();
  ep.b_scale_per_col = true;
  ep.bias = bias.data();
  qgemm(c.M, A.data(), c.as, lda, za.empty() ? nullptr : za.data(), za.size() > 1, *pk,
        zb.empty() ? nullptr : zb.data(), zb.size() > 1, C.data(), ldc, ep, isa, th);
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      float want = (float)(int32_t)ref[m * c.N + n] * (asc * bsc[n]);
      want += bias[n];
      float got;
      std::memcpy(&got, &C[m * ldc + n], 4);
      ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << "m=" << m << " n=" << n << " " << got << " vs " << want;
    }
}

std::vector<QIsa> isas() {
  std::vector<QIsa> r;
  for (QIsa i : {QIsa::Base, QIsa::Avx2, QIsa::AvxVnni, QIsa::Avx512Vnni})
    if (qisa_supported(i)) r.push_back(i);
  static bool said = false;
  if (!said) {
    said = true;
    std::printf("paths tested on this CPU:");
    for (QIsa i : r) std::printf(" %s", qisa_name(i));
    std::printf(" (default: %s)\n", qisa_name(qgemm_isa()));
  }
  return r;
}

TEST(Qgemm, OddSizesAllTypesAllZeroPoints) {
  unsigned seed = 1;
  for (QIsa isa : isas())
    for (int64_t M : {1, 2, 3, 5, 17, 70})
      for (int64_t N : {1, 15, 16, 17, 64, 65, 100})
        for (int64_t K : {1, 3, 4, 5, 64, 131})
          for (int t = 0; t < 4; ++t)
            for (int z = 0; z < 3; ++z) check({M, N, K, (t & 1) != 0, (t & 2) != 0, z, 0}, isa, ++seed);
}

TEST(Qgemm, Adversarial) {
  unsigned seed = 7;
  for (QIsa isa : isas())
    for (int fill : {1, 2})
      for (int t = 0; t < 4; ++t)
        for (int z = 0; z < 3; ++z) {
          check({5, 33, 129, (t & 1) != 0, (t & 2) != 0, z, fill}, isa, ++seed);
          check({70, 130, 771, (t & 1) != 0, (t & 2) != 0, z, fill}, isa, ++seed);
        }
}

// The registry's K limit with the largest terms: (255 - 0) * (-128 - 127) * 33025 is
// -2,147,450,625, just inside int32; intermediate sums wrap and the result is still exact.
TEST(Qgemm, LargestK) {
  for (QIsa isa : isas()) {
    check({2, 17, 33025, false, true, 1, 1}, isa, 3);
    check({3, 20, 33025, false, false, 2, 1}, isa, 4);
    check({1, 16, 33025, true, true, 1, 1}, isa, 5);
  }
}

TEST(Qgemm, SingleThreadAndDefaultIsa) {
  check({33, 47, 99, false, true, 2, 0}, QIsa::Base, 11, Threads::Single);
  check({33, 47, 99, true, false, 1, 0}, qgemm_isa(), 12, Threads::Single);
  check({128, 96, 768, false, true, 1, 0}, qgemm_isa(), 13);
}

}  // namespace

// matmul_nbits's decode kernel (4 bits, ORT's layout) against a double-precision loop over the
// dequantized weights: within f32 rounding of the sum of |terms|.
// Under RLX_CPU_ISA=avx2 / avxvnni (ctest's Qgemm.Isa_* runs) only one row with blocks of a multiple
// of 32 is taken (the AVX2 one-row kernel; with blocks of 32 and K a multiple of 128 the integer
// one, nbits4_row1_bfp, unless RLX_NBITS_F32: ctest's Nbits4.F32_avx2), and every other shape must
// be refused.
TEST(Nbits4, SmallMAgainstTheDequantizedProduct) {
  const bool avx512 = qisa_supported(QIsa::Avx512Vnni) && qgemm_isa() == QIsa::Avx512Vnni;
  if (!avx512 && (!qisa_supported(QIsa::Avx2) || qgemm_isa() == QIsa::Base)) GTEST_SKIP() << "needs AVX-512 or AVX2";
  uint32_t s = 99;
  // K 608, 640 and 1024 (19, 20 and 32 blocks of 32): the one-row kernels' zero-point sums over 16
  // blocks at a time and the rest one by one; N 17 and 40: its groups of 8 and 4 columns and the rest
  for (int64_t M : {1, 2, 3, 5, 16})
    for (int64_t K : {32, 96, 256, 608, 640, 1024})
      for (int64_t bs : {16, 32, 64})
        for (int64_t N : {1, 17, 40})
          for (bool with_zp : {false, true}) {
            const int64_t kb = (K + bs - 1) / bs, blob = bs / 2, zcols = (kb * 4 + 7) / 8;
            std::vector<uint8_t> B((size_t)(N * kb * blob)), zp((size_t)(N * zcols));
            std::vector<float> sc((size_t)(N * kb)), A((size_t)(M * K)), C((size_t)(M * N));
            for (auto& v : B) v = (uint8_t)next(s);
            for (auto& v : zp) v = (uint8_t)next(s);
            for (auto& v : sc) v = 0.01f + (float)(next(s) % 1000) * 1e-4f;
            for (auto& v : A) v = (float)((int)(next(s) % 2001) - 1000) * 1e-3f;
            const bool taken = nbits4_small_m(M, A.data(), K, B.data(), sc.data(), with_zp ? zp.data() : nullptr, N, bs, C.data());
            ASSERT_EQ(taken, avx512 || (M == 1 && bs % 32 == 0 && K % bs == 0)) << "M=" << M << " K=" << K << " bs=" << bs;
            if (!taken) continue;
            for (int64_t m = 0; m < M; ++m)
              for (int64_t n = 0; n < N; ++n) {
                double want = 0, mag = 0;
                for (int64_t k = 0; k < K; ++k) {
                  const int64_t b = k / bs, j = k % bs;
                  const int q = (B[(n * kb + b) * blob + j / 2] >> ((j % 2) * 4)) & 15;
                  const int z = with_zp ? (zp[n * zcols + b / 2] >> ((b % 2) * 4)) & 15 : 8;
                  const double t = (double)A[m * K + k] * (double)((float)(q - z) * sc[n * kb + b]);
                  want += t;
                  mag += std::abs(t);
                }
                ASSERT_NEAR(C[m * N + n], want, 1e-5 * mag + 1e-6)
                    << "M=" << M << " K=" << K << " bs=" << bs << " N=" << N << " zp=" << with_zp << " m=" << m << " n=" << n;
              }
          }
  // Shapes it does not take: K not a multiple of 16, more than 16 rows.
  std::vector<float> A(17 * 40), C(17 * 8), sc(8 * 3);
  std::vector<uint8_t> B(8 * 3 * 8);
  EXPECT_FALSE(nbits4_small_m(1, A.data(), 40, B.data(), sc.data(), nullptr, 8, 16, C.data()));
  EXPECT_FALSE(nbits4_small_m(17, A.data(), 32, B.data(), sc.data(), nullptr, 8, 16, C.data()));
}

// The one-row integer kernel (nbits4_row1_bfp: activations as 24-bit block floating point, exact
// vpdpbusd products) against a double-precision loop over the dequantized weights and the f32
// activations as given. Allowed: f32 rounding of the sum (1e-5 of the sum of |terms|) plus the
// representation's bound times |w|, per value 3 * 2^-24 |x| + half a unit (amax / 8323072 / 2;
// three f32 roundings of x and the integer's). (Dropping the last byte of X would miss by ~30x
// this.) Activations: random, blocks of zeros, blocks with one
// value 1e4 times the rest, tiny values (1e-30), values of one sign, a block below 2^-100 with
// denormals (refused: the f32 kernels' result is checked instead); N 1 (the one-column kernel
// alone), 8 (the 8-column kernel alone, its last group at the end of B), 9, 17 and 40; K from
// one group of 128 to 2176 (68 blocks: 16 zero-point blocks a step and the rest); zero points or the
// default 8. On every path: AVX-512 VNNI, and (ctest's Qgemm.Isa_avxvnni / Isa_avx2 runs) the
// 8-lane kernel with AVX-VNNI or with AVX2's vpmaddubsw + vpmaddwd; under RLX_CPU_ISA=base or
// RLX_NBITS_F32 it must refuse every shape (Qgemm.Isa_base, Nbits4.F32*). Where it runs, a NaN
// or an infinity among the activations is refused too (the f32 kernels take those rows:
// nbits4_small_m gives NaN there).
TEST(Nbits4, RowBfpAgainstTheDequantizedProduct) {
  __builtin_cpu_init();
  const bool runs = qgemm_isa() != QIsa::Base && __builtin_cpu_supports("fma") && !std::getenv("RLX_NBITS_F32");
  const int64_t width = qgemm_isa() == QIsa::Avx512Vnni ? 8 : 4;  // PackedNbits4's columns at once
  uint32_t s = 7;
  int checked = 0, packed_checked = 0;
  for (int64_t K : {128, 256, 640, 2176})
    for (int64_t N : {1, 8, 9, 17, 40})
      for (bool with_zp : {false, true})
        for (int fill = 0; fill < 5; ++fill) {
          const int64_t kb = K / 32, zcols = (kb * 4 + 7) / 8;
          std::vector<uint8_t> B((size_t)(N * kb * 16)), zp((size_t)(N * zcols));
          std::vector<float> sc((size_t)(N * kb)), A((size_t)K), C((size_t)N, -1.f);
          for (auto& v : B) v = (uint8_t)next(s);
          for (auto& v : zp) v = (uint8_t)next(s);
          for (auto& v : sc) v = 0.01f + (float)(next(s) % 1000) * 1e-4f;
          for (int64_t k = 0; k < K; ++k) {
            float v = (float)((int)(next(s) % 2001) - 1000) * 1e-3f;
            const int64_t b = k / 32;
            if (fill == 1 && b % 3 == 1) v = 0.f;                           // blocks of zeros
            if (fill == 2 && k % 32 == 5) v = b % 2 ? 1e4f : -1e4f;         // one outlier per block
            if (fill == 3) v = b % 2 ? std::fabs(v) * 1e-30f : -std::fabs(v);  // tiny; one sign
            if (fill == 4 && b == 1) v *= k % 2 ? 1e-36f : 1e-43f;          // below 2^-100, denormals
            A[(size_t)k] = v;
          }
          bool small = false;  // a block of values all below 2^-100, not all 0: refused
          for (int64_t b = 0; b < K / 32; ++b) {
            float m = 0;
            for (int64_t i = b * 32; i < b * 32 + 32; ++i) m = std::max(m, std::fabs(A[(size_t)i]));
            small |= m > 0 && m < 0x1p-100f;
          }
          const bool taken = nbits4_row1_bfp(A.data(), K, B.data(), sc.data(), with_zp ? zp.data() : nullptr, N, C.data());
          ASSERT_EQ(taken, runs && !small) << "K=" << K << " N=" << N << " fill=" << fill;
          // The interleaved copy (PackedNbits4): made wherever the integer kernel runs, W = 8 columns
          // with AVX-512 VNNI, 4 on the 8-lane paths, for N >= W; the same sums in the same order,
          // so the same bits, on the pool and on one thread.
          const auto pk = pack_nbits4_row1(B.data(), sc.data(), N, K);
          ASSERT_EQ(pk != nullptr, runs && N >= width) << "K=" << K << " N=" << N;
          if (pk) ASSERT_EQ(pk->W, width);
          if (pk && taken)
            for (Threads th : {Threads::Pool, Threads::Single}) {
              std::vector<float> C2((size_t)N, -2.f);
              ASSERT_TRUE(nbits4_row1_bfp(A.data(), K, B.data(), sc.data(), with_zp ? zp.data() : nullptr, N, C2.data(), th, pk.get()));
              for (int64_t n = 0; n < N; ++n)
                ASSERT_EQ(std::memcmp(&C2[(size_t)n], &C[(size_t)n], 4), 0)
                    << "packed: K=" << K << " N=" << N << " zp=" << with_zp << " fill=" << fill << " n=" << n << ": " << C2[(size_t)n]
                    << " against " << C[(size_t)n];
              ++packed_checked;
            }
          // refused: the f32 kernels (nbits4_small_m) must give the same product
          if (!taken && runs)
            ASSERT_TRUE(nbits4_small_m(1, A.data(), K, B.data(), sc.data(), with_zp ? zp.data() : nullptr, N, 32, C.data()));
          if (!taken && !runs) continue;
          for (int64_t n = 0; n < N; ++n) {
            double want = 0, mag = 0, rep = 0;
            for (int64_t k = 0; k < K; ++k) {
              const int64_t b = k / 32, j = k % 32;
              const int q = (B[(n * kb + b) * 16 + j / 2] >> ((j % 2) * 4)) & 15;
              const int z = with_zp ? (zp[n * zcols + b / 2] >> ((b % 2) * 4)) & 15 : 8;
              const double w = (double)((float)(q - z) * sc[n * kb + b]);
              double amax = 0;
              for (int64_t i = b * 32; i < b * 32 + 32; ++i) amax = std::max(amax, (double)std::fabs(A[(size_t)i]));
              want += (double)A[(size_t)k] * w;
              mag += std::abs((double)A[(size_t)k] * w);
              rep += std::abs(w) * (3 * std::ldexp(1.0, -24) * std::fabs(A[(size_t)k]) + 0.5001 * amax / 8323072.0);
            }
            ASSERT_NEAR(C[(size_t)n], want, 1e-5 * mag + rep + 1e-30)
                << "K=" << K << " N=" << N << " zp=" << with_zp << " fill=" << fill << " n=" << n;
            ++checked;
          }
        }
  if (!runs) return;
  EXPECT_GT(checked, 0);
  EXPECT_GT(packed_checked, 0);
  // refused: a NaN or an infinity in the row, K not a multiple of 128; nbits4_small_m then gives
  // the f32 kernels' NaN
  std::vector<float> A(256, 0.5f), C(8, 0.f), sc(8 * 8, 0.02f);
  std::vector<uint8_t> B(8 * 8 * 16, 0x37);
  A[200] = std::nanf("");
  EXPECT_FALSE(nbits4_row1_bfp(A.data(), 256, B.data(), sc.data(), nullptr, 8, C.data()));
  ASSERT_TRUE(nbits4_small_m(1, A.data(), 256, B.data(), sc.data(), nullptr, 8, 32, C.data()));
  for (float c : C) EXPECT_TRUE(std::isnan(c));
  A[200] = INFINITY;
  EXPECT_FALSE(nbits4_row1_bfp(A.data(), 256, B.data(), sc.data(), nullptr, 8, C.data()));
  A[200] = 0.5f;
  EXPECT_FALSE(nbits4_row1_bfp(A.data(), 192, B.data(), sc.data(), nullptr, 8, C.data()));
  EXPECT_TRUE(nbits4_row1_bfp(A.data(), 256, B.data(), sc.data(), nullptr, 8, C.data()));
}

// matmul_nbits with more than 16 rows (nbits_f32_blocked: the 14 x 32 AVX-512 kernel over weights
// expanded per task, or per-thread panels for OpenBLAS with RLX_NBITS_OPENBLAS=1 / without
// AVX-512) against a double-precision loop over the dequantized weights: 4 and 8 bits, zero
// points or none, K not a multiple of the block or of 16, blocks longer than the kernel's
// 256-value k runs, N not a multiple of 14, M not a multiple of 32, pool and single thread.
TEST(NbitsF32, ManyRowsAgainstTheDequantizedProduct) {
  struct Case { int64_t M, K, N, bits, bs; };
  const Case cases[] = {{17, 32, 1, 4, 16},   {33, 37, 15, 4, 16},  {70, 256, 29, 4, 32}, {40, 300, 40, 4, 64},
                        {64, 1024, 28, 4, 512}, {19, 600, 17, 4, 128}, {17, 48, 20, 8, 16},  {50, 520, 31, 8, 256}};
  uint32_t s = 7;
  for (const char* path : {"kernel", "openblas"}) {
    if (std::string(path) == "openblas") setenv("RLX_NBITS_OPENBLAS", "1", 1);
    for (const Case& c : cases)
      for (bool with_zp : {false, true})
        for (Threads th : {Threads::Pool, Threads::Single}) {
          const int64_t kb = (c.K + c.bs - 1) / c.bs, blob = c.bs * c.bits / 8, zcols = (kb * c.bits + 7) / 8;
          std::vector<uint8_t> B((size_t)(c.N * kb * blob)), zp((size_t)(c.N * zcols));
          std::vector<float> sc((size_t)(c.N * kb)), A((size_t)(c.M * c.K)), C((size_t)(c.M * c.N), NAN);
          for (auto& v : B) v = (uint8_t)next(s);
          for (auto& v : zp) v = (uint8_t)next(s);
          for (auto& v : sc) v = 0.01f + (float)(next(s) % 1000) * 1e-4f;
          for (auto& v : A) v = (float)((int)(next(s) % 2001) - 1000) * 1e-3f;
          ASSERT_TRUE(nbits_f32_blocked(c.M, A.data(), c.K, B.data(), sc.data(), with_zp ? zp.data() : nullptr, c.N,
                                        c.bits, c.bs, C.data(), th));
          const int mask = (1 << c.bits) - 1, per_byte = 8 / (int)c.bits;
          for (int64_t m = 0; m < c.M; ++m)
            for (int64_t n = 0; n < c.N; ++n) {
              double want = 0, mag = 0;
              for (int64_t k = 0; k < c.K; ++k) {
                const int64_t b = k / c.bs, j = k % c.bs;
                const int q = (B[(n * kb + b) * blob + j / per_byte] >> ((j % per_byte) * c.bits)) & mask;
                const int z = with_zp ? (zp[n * zcols + b / per_byte] >> ((b % per_byte) * c.bits)) & mask
                                      : 1 << (c.bits - 1);
                const double t = (double)A[m * c.K + k] * (double)((float)(q - z) * sc[n * kb + b]);
                want += t;
                mag += std::abs(t);
              }
              ASSERT_NEAR(C[m * c.N + n], want, 1e-5 * mag + 1e-6)
                  << path << " M=" << c.M << " K=" << c.K << " N=" << c.N << " bits=" << c.bits << " bs=" << c.bs
                  << " zp=" << with_zp << " m=" << m << " n=" << n;
            }
        }
    unsetenv("RLX_NBITS_OPENBLAS");
  }
  std::vector<float> A(32), C(2), sc(2);
  std::vector<uint8_t> B(32);
  EXPECT_FALSE(nbits_f32_blocked(1, A.data(), 32, B.data(), sc.data(), nullptr, 2, 2, 16, C.data()));  // 2 bits
}

// minmax_f32 (the whole-tensor min and max of dynamic quantization) against a plain loop, on
// lengths around the vector and chunk sizes, with the extremes at the ends, and NaN anywhere.
#include "backends/cpu/minmax.h"

TEST(MinMax, AgainstAPlainLoop) {
  uint32_t s = 5;
  for (int64_t n : {1, 2, 15, 16, 17, 63, 64, 65, 1000, 65535, 65536, 65537, 200003}) {
    std::vector<float> x((size_t)n);
    for (auto& v : x) v = (float)((int)(next(s) % 20001) - 10000) * 1e-3f;
    for (int where = 0; where < 3; ++where) {
      std::vector<float> y = x;
      const size_t at = where == 0 ? 0 : where == 1 ? (size_t)n - 1 : (size_t)n / 2;
      y[at] = where == 2 ? -1e30f : 1e30f;
      float lo = INFINITY, hi = -INFINITY;
      for (float v : y) lo = v < lo ? v : lo, hi = v > hi ? v : hi;
      for (Threads th : {Threads::Pool, Threads::Single}) {
        const Range r = minmax_f32(y.data(), n, th);
        ASSERT_EQ(r.min, lo) << "n=" << n << " at=" << at;
        ASSERT_EQ(r.max, hi) << "n=" << n << " at=" << at;
      }
      y[at] = NAN;
      const Range r = minmax_f32(y.data(), n);
      ASSERT_TRUE(std::isnan(r.min) && std::isnan(r.max)) << "NaN at " << at << " of " << n << " not propagated";
    }
  }
}

// matmul_nbits accuracy_level 4 (nbits4_int8): activations quantized per row and block to int8
// (scale max|a| / 127, a * (1 / scale) rounded to nearest even), exact integer block sums,
// block scales in f32. Checked against a reference written here (int64 block sums, double
// accumulation): bit-equal where every f32 operation is exact (power-of-two scales, activations
// on the int8 grid), within f32 rounding otherwise; the AVX-512 VNNI path bit-equal to the
// plain loops; and the distance to the f32 product bounded by the activations' rounding.
namespace {

struct N4 {
  int64_t M, K, N, bs;
  bool zp;
  std::vector<uint8_t> B, Z;
  std::vector<float> S, A;
};

int n4_q(const N4& c, int64_t n, int64_t k) {
  const int64_t kb = c.K / c.bs, j = k % c.bs;
  return (c.B[(n * kb + k / c.bs) * (c.bs / 2) + j / 2] >> ((j % 2) * 4)) & 15;
}
int n4_z(const N4& c, int64_t n, int64_t b) {
  const int64_t kb = c.K / c.bs, zcols = (kb * 4 + 7) / 8;
  return c.zp ? (c.Z[n * zcols + b / 2] >> ((b % 2) * 4)) & 15 : 8;
}

// The reference: returns C and, per element, the bound on |C - f32 product| from rounding the
// activations (half a step per value).
std::vector<double> n4_reference(const N4& c, std::vector<double>* bound = nullptr) {
  const int64_t kb = c.K / c.bs;
  std::vector<double> y((size_t)(c.M * c.N));
  if (bound) bound->assign(y.size(), 0.0);
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t b = 0; b < kb; ++b) {
      float amax = 0.f;
      for (int64_t k = b * c.bs; k < (b + 1) * c.bs; ++k) amax = std::max(amax, std::fabs(c.A[m * c.K + k]));
      const float sa = amax / 127.f, rec = sa != 0.f ? 1.f / sa : 0.f;
      std::vector<int64_t> qa((size_t)c.bs);
      for (int64_t j = 0; j < c.bs; ++j) qa[j] = std::max<int64_t>(-127, std::min<int64_t>(127, (int64_t)std::nearbyint(c.A[m * c.K + b * c.bs + j] * rec)));
      for (int64_t n = 0; n < c.N; ++n) {
        int64_t d = 0;
        double wabs = 0;
        for (int64_t j = 0; j < c.bs; ++j) {
          const int64_t w = n4_q(c, n, b * c.bs + j) - n4_z(c, n, b);
          d += qa[j] * w;
          wabs += std::abs((double)w);
        }
        const double sb = c.S[n * kb + b];
        y[m * c.N + n] += (double)d * ((double)sa * sb);
        if (bound) (*bound)[m * c.N + n] += wabs * sb * (0.5 * sa);
      }
    }
  return y;
}

N4 n4_case(uint32_t& s, int64_t M, int64_t K, int64_t N, int64_t bs, bool zp, bool exact) {
  N4 c{M, K, N, bs, zp, {}, {}, {}, {}};
  const int64_t kb = K / bs, zcols = (kb * 4 + 7) / 8;
  c.B.resize((size_t)(N * kb * bs / 2));
  c.Z.resize((size_t)(N * zcols));
  c.S.resize((size_t)(N * kb));
  c.A.resize((size_t)(M * K));
  for (auto& v : c.B) v = (uint8_t)next(s);
  for (auto& v : c.Z) v = (uint8_t)next(s);
  for (auto& v : c.S) v = exact ? std::ldexp(1.f, -(int)(next(s) % 2)) : 0.001f + (float)(next(s) % 1000) * 1e-5f;
  if (exact) {  // per block one value +-127 * 2^e, the rest integers * 2^e: the int8 grid exactly
    for (int64_t m = 0; m < M; ++m)
      for (int64_t b = 0; b < kb; ++b) {
        const float u = std::ldexp(1.f, -3 - (int)(next(s) % 3));
        for (int64_t j = 0; j < bs; ++j) c.A[m * K + b * bs + j] = u * (float)((int)(next(s) % 255) - 127);
        c.A[m * K + b * bs + (int64_t)(next(s) % bs)] = u * ((next(s) & 1) ? 127.f : -127.f);
      }
  } else {
    for (auto& v : c.A) v = (float)((int)(next(s) % 20001) - 10000) * 1e-4f;
    for (int64_t m = 0; m < M; ++m)  // one block of zeros: scale 0
      for (int64_t j = 0; j < bs; ++j) c.A[m * K + j] = 0.f;
  }
  return c;
}

std::vector<float> n4_run(const N4& c, bool vnni) {
  std::vector<float> y((size_t)(c.M * c.N), -1.f);
  EXPECT_TRUE(nbits4_int8(c.M, c.A.data(), c.K, c.B.data(), c.S.data(), c.zp ? c.Z.data() : nullptr, c.N, c.bs, y.data(),
                          vnni));
  return y;
}

}  // namespace

TEST(Nbits4Int8, ExactWhereEveryFloatOperationIs) {
  uint32_t s = 404;
  for (int64_t bs : {16, 32, 64, 256})
    for (int64_t M : {1, 3, 5})
      for (bool zp : {false, true}) {
        const N4 c = n4_case(s, M, 256, 37, bs, zp, true);
        const auto want = n4_reference(c);
        for (bool vnni : {false, true}) {
          const auto got = n4_run(c, vnni);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(got[i], (float)want[i]) << "bs=" << bs << " M=" << M << " zp=" << zp << " vnni=" << vnni << " i=" << i;
        }
      }
}

TEST(Nbits4Int8, RandomAgainstReferenceAndTheF32Product) {
  uint32_t s = 405;
  for (int64_t bs : {16, 32, 128})
    for (int64_t M : {1, 2, 4, 7})
      for (bool zp : {false, true}) {
        const N4 c = n4_case(s, M, 512, 45, bs, zp, false);
        std::vector<double> bound;
        const auto want = n4_reference(c, &bound);
        const auto base = n4_run(c, false), fast = n4_run(c, true);
        const int64_t kb = c.K / c.bs;
        for (int64_t m = 0; m < c.M; ++m)
          for (int64_t n = 0; n < c.N; ++n) {
            const size_t i = (size_t)(m * c.N + n);
            ASSERT_EQ(std::memcmp(&base[i], &fast[i], 4), 0) << "the paths differ at " << i << ": " << base[i] << " vs " << fast[i];
            double mag = 0, f32 = 0;  // the f32 product of the dequantized weights, in double
            for (int64_t k = 0; k < c.K; ++k) {
              const double w = (double)(n4_q(c, n, k) - n4_z(c, n, k / c.bs)) * c.S[n * kb + k / c.bs];
              mag += std::abs(w * c.A[m * c.K + k]);
              f32 += w * c.A[m * c.K + k];
            }
            ASSERT_NEAR(fast[i], want[i], 2e-6 * mag + 1e-6) << "bs=" << bs << " M=" << M << " zp=" << zp << " i=" << i;
            ASSERT_LE(std::abs(fast[i] - f32), bound[i] * 1.0001 + 2e-6 * mag + 1e-6) << "beyond the activation rounding";
          }
      }
  std::vector<float> A(100), C(4), S(4);
  std::vector<uint8_t> B(4 * 50);
  EXPECT_FALSE(nbits4_int8(1, A.data(), 100, B.data(), S.data(), nullptr, 2, 50, C.data()));  // K not a multiple of 128
}
