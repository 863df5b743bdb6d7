// matmul_nbits with f32 activations for any number of rows (qgemm.h, nbits_f32_blocked): the
// weights stay in their 4- or 8-bit form; each pool task takes a group of G output columns,
// expands their weights into a per-thread f32 panel [G][K] (reused across calls: no full f32
// copy of B, no fresh pages) and runs the f32 GEMM on that panel on its own thread.
//
// Each weight is w = float(q - z) * scale: the integer difference is exact, so the value is
// the same single rounding as the reference's (float(q) - float(z)) * scale, on every path.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/isa.h"
#include "backends/cpu/qgemm.h"
#include "backends/cpu/thread_pool.h"

namespace rlx::cpu {

namespace {

bool avx512_ok() { return isa_avx512_bw_vl(); }  // RLX_CPU_ISA caps it (isa.h)

// 4 bits, n values (n even) from n / 2 bytes, low nibble first.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void expand4_avx512(const uint8_t* p, int64_t n, int32_t z,
                                                                          float s, float* w) {
  const __m512i vz = _mm512_set1_epi32(z);
  const __m512 vs = _mm512_set1_ps(s);
  const __m128i lo4 = _mm_set1_epi16(0x000F);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    // 8 bytes -> 8 u16 lanes x = b; (x & 15) | ((x >> 4) << 8): bytes lo0 hi0 lo1 hi1 ...
    const __m128i x = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + j / 2)));
    const __m128i v = _mm_or_si128(_mm_and_si128(x, lo4), _mm_slli_epi16(_mm_srli_epi16(x, 4), 8));
    const __m512i q = _mm512_sub_epi32(_mm512_cvtepu8_epi32(v), vz);
    _mm512_storeu_ps(w + j, _mm512_mul_ps(_mm512_cvtepi32_ps(q), vs));
  }
  for (; j < n; j += 2) {
    const uint8_t b = p[j / 2];
    w[j] = (float)((int32_t)(b & 15) - z) * s;
    if (j + 1 < n) w[j + 1] = (float)((int32_t)(b >> 4) - z) * s;
  }
}

// One column of 4-bit weights into the task's buffer [K / 256][14][256] at w (its row of
// the first block): the same values as expand4_avx512, 16 at a time, in one function.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void expand4_col_blocked(const uint8_t* Bn, const float* sn,
                                                                               const uint8_t* zn, int64_t K,
                                                                               int64_t bs, float* w, int64_t stride) {
  const int64_t kb = (K + bs - 1) / bs, blob = bs / 2;
  const __m128i lo4 = _mm_set1_epi16(0x000F);
  for (int64_t blk = 0; blk < kb; ++blk) {
    const int64_t len = std::min(bs, K - blk * bs);
    const int32_t z = zn ? (int32_t)((zn[blk / 2] >> ((blk % 2) * 4)) & 15) : 8;
    const float s = sn[blk];
    const uint8_t* p = Bn + blk * blob;
    const __m512i vz = _mm512_set1_epi32(z);
    const __m512 vs = _mm512_set1_ps(s);
    int64_t j = 0;
    for (; j + 16 <= len; j += 16) {
      const int64_t k = blk * bs + j;
      const __m128i x = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + j / 2)));
      const __m128i v = _mm_or_si128(_mm_and_si128(x, lo4), _mm_slli_epi16(_mm_srli_epi16(x, 4), 8));
      const __m512i q = _mm512_sub_epi32(_mm512_cvtepu8_epi32(v), vz);
      _mm512_storeu_ps(w + (k / 256) * stride + k % 256, _mm512_mul_ps(_mm512_cvtepi32_ps(q), vs));
    }
    for (; j < len; ++j) {
      const int64_t k = blk * bs + j;
      w[(k / 256) * stride + k % 256] = (float)((int32_t)((p[j / 2] >> ((j % 2) * 4)) & 15) - z) * s;
    }
  }
}

void expand_plain(const uint8_t* p, int64_t n, int64_t bits, int32_t z, float s, float* w) {
  if (bits == 8) {
    for (int64_t j = 0; j < n; ++j) w[j] = (float)((int32_t)p[j] - z) * s;
    return;
  }
  for (int64_t j = 0; j < n; j += 2) {
    const uint8_t b = p[j / 2];
    w[j] = (float)((int32_t)(b & 15) - z) * s;
    if (j + 1 < n) w[j + 1] = (float)((int32_t)(b >> 4) - z) * s;
  }
}

// ---- AVX-512: the product computed as C^T = W A^T with rlx's own 14 x 32 micro-kernel ----
// The activations are packed once per call into panels of 32 rows, k-major ([panel][k][32],
// zero rows past M). A task takes 14 output columns at a time, expands their weights (all of
// K) into a per-thread buffer [K / 256][14][256] (contiguous along k, as they are stored), and
// for each activation panel accumulates the 14 x 32 tile: per k, two 64-byte loads of the
// panel and 14 broadcasts of weights (fixed offsets within a 256-value block). The tile is
// written into C transposed once it has all of K. So the weights are expanded once per call
// (not once per row), and nothing f32 of them outlives the task.
constexpr int64_t kNR = 14, kMW = 32, kKC = 256;
static_assert(kKC == 256, "expand4_col_blocked writes runs of 256");

__attribute__((target("avx512f"))) void micro_14x32t(const float* W, const float* P, int64_t kc, float* t, bool first) {
  __m512 c[kNR][2];
#pragma GCC unroll 14
  for (int i = 0; i < kNR; ++i) {
    c[i][0] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(t + i * kMW);
    c[i][1] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(t + i * kMW + 16);
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(P + k * kMW), b1 = _mm512_loadu_ps(P + k * kMW + 16);
#pragma GCC unroll 14
    for (int i = 0; i < kNR; ++i) {
      const __m512 av = _mm512_set1_ps(W[i * kKC + k]);
      c[i][0] = _mm512_fmadd_ps(av, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(av, b1, c[i][1]);
    }
  }
#pragma GCC unroll 14
  for (int i = 0; i < kNR; ++i) {
    _mm512_storeu_ps(t + i * kMW, c[i][0]);
    _mm512_storeu_ps(t + i * kMW + 16, c[i][1]);
  }
}

// Column group width: a panel of about 256 KiB (it stays in L2 while the GEMM reads it), a
// multiple of 16 columns, and at least 4 groups per thread where N allows.
int64_t group_width(int64_t K, int64_t N, int threads) {
  int64_t g = std::max<int64_t>(16, ((256 << 10) / (4 * std::max<int64_t>(K, 1))) / 16 * 16);
  const int64_t per = std::max<int64_t>(16, (N / (4 * std::max(threads, 1))) / 16 * 16);
  g = std::min(g, per);
  if (const char* e = std::getenv("RLX_NBITS_GROUP")) g = std::max<int64_t>(16, std::atoll(e) / 16 * 16);
  return std::min(g, std::max<int64_t>(N, 1));
}

}  // namespace

bool nbits_f32_blocked(int64_t M, const float* A, int64_t K, const uint8_t* B, const float* scales, const uint8_t* zp,
                       int64_t N, int64_t bits, int64_t bs, float* C, Threads th) {
  if ((bits != 4 && bits != 8) || M < 1 || K < 1 || N < 1 || bs < 1 || (bits == 4 && bs % 2 != 0)) return false;
  const int64_t kb = (K + bs - 1) / bs, blob = bs * bits / 8, zcols = (kb * bits + 7) / 8, per_byte = 8 / bits;
  const uint32_t mask = (1u << bits) - 1;
  const bool simd = bits == 4 && avx512_ok();
  // Column n's weights, k = 0..K-1, to dst(k) (contiguous within a run of `run` values; run is
  // K or kKC, a multiple of 16 like the block size, so no 16-value chunk straddles two runs).
  auto expand_col = [&](int64_t n, int64_t run, auto&& dst) {
    for (int64_t blk = 0; blk < kb; ++blk) {
      const int64_t len = std::min(bs, K - blk * bs);
      const int32_t z = zp ? (int32_t)((zp[n * zcols + blk / per_byte] >> ((blk % per_byte) * bits)) & mask)
                           : (int32_t)(1u << (bits - 1));
      const float s = scales[n * kb + blk];
      const uint8_t* p = B + (n * kb + blk) * blob;
      for (int64_t off = 0; off < len;) {
        const int64_t k = blk * bs + off, sub = std::min(len - off, run - k % run);
        if (simd) expand4_avx512(p + off / 2, sub, z, s, dst(k));
        else expand_plain(p + off * bits / 8, sub, bits, z, s, dst(k));
        off += sub;
      }
    }
  };
  if (avx512_ok() && M > 16 && !std::getenv("RLX_NBITS_OPENBLAS")) {
    const int64_t mpanels = (M + kMW - 1) / kMW, kblocks = (K + kKC - 1) / kKC, tiles = (N + kNR - 1) / kNR;
    thread_local std::vector<float> packed;
    if (packed.size() < (size_t)(mpanels * K * kMW)) packed.resize((size_t)(mpanels * K * kMW));
    float* P = packed.data();
    auto pack = [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t mp = j / kblocks, k0 = (j % kblocks) * kKC, k1 = std::min(K, k0 + kKC);
        const int64_t rows = std::min(kMW, M - mp * kMW);
        float* o = P + mp * K * kMW;
        for (int64_t k = k0; k < k1; ++k) std::fill(o + k * kMW + rows, o + (k + 1) * kMW, 0.f);
        for (int64_t r = 0; r < rows; ++r) {
          const float* a = A + (mp * kMW + r) * K;
          for (int64_t k = k0; k < k1; ++k) o[k * kMW + r] = a[k];
        }
      }
    };
    if (th == Threads::Single) pack(0, mpanels * kblocks);
    else ThreadPool::global().parallel_for(mpanels * kblocks, 1, pack);
    auto tile_body = [&](int64_t t0, int64_t t1) {
      thread_local std::vector<float> wbuf;
      if (wbuf.size() < (size_t)(kblocks * kNR * kKC)) wbuf.resize((size_t)(kblocks * kNR * kKC));
      alignas(64) float t[kNR * kMW];
      for (int64_t tile = t0; tile < t1; ++tile) {
        const int64_t n0 = tile * kNR, cols = std::min(kNR, N - n0);
        for (int64_t c = 0; c < kNR; ++c) {
          float* w = wbuf.data() + c * kKC;
          if (c < cols && simd)
            expand4_col_blocked(B + (n0 + c) * kb * blob, scales + (n0 + c) * kb, zp ? zp + (n0 + c) * zcols : nullptr,
                                K, bs, w, kNR * kKC);
          else if (c < cols)
            expand_col(n0 + c, kKC, [&](int64_t k) { return w + ((k / kKC) * kNR) * kKC + k % kKC; });
          else
            for (int64_t b = 0; b < kblocks; ++b) std::fill(w + b * kNR * kKC, w + b * kNR * kKC + kKC, 0.f);
        }
        for (int64_t mp = 0; mp < mpanels; ++mp) {
          for (int64_t b = 0; b < kblocks; ++b)
            micro_14x32t(wbuf.data() + b * kNR * kKC, P + (mp * K + b * kKC) * kMW, std::min(kKC, K - b * kKC), t,
                         b == 0);
          const int64_t rows = std::min(kMW, M - mp * kMW);
          for (int64_t r = 0; r < rows; ++r) {
            float* cr = C + (mp * kMW + r) * N + n0;
            for (int64_t c = 0; c < cols; ++c) cr[c] = t[c * kMW + r];
          }
        }
      }
    };
    if (th == Threads::Single) tile_body(0, tiles);
    else ThreadPool::global().parallel_for(tiles, 1, tile_body);
    // The packed activations keep their pages for the next call (a plan runs again) unless
    // they are large (long prefills): then they are given back.
    if (packed.size() * sizeof(float) > ((size_t)64 << 20)) std::vector<float>().swap(packed);
    return true;
  }
  const int threads = th == Threads::Pool ? ThreadPool::global().size() : 1;
  const int64_t G = group_width(K, N, threads), groups = (N + G - 1) / G;
  auto body = [&](int64_t g0, int64_t g1) {
    thread_local std::vector<float> panel;
    if (panel.size() < (size_t)(G * K)) panel.resize((size_t)(G * K));
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t n0 = g * G, cols = std::min(G, N - n0);
      for (int64_t c = 0; c < cols; ++c) {
        float* w = panel.data() + c * K;
        expand_col(n0 + c, K, [w](int64_t k) { return w + k; });
      }
      gemm(false, true, M, cols, K, 1.f, A, K, panel.data(), K, C + n0, N, {}, Threads::Single);
    }
  };
  if (th == Threads::Single || groups == 1) body(0, groups);
  else ThreadPool::global().parallel_for(groups, 1, body);
  return true;
}

}  // namespace rlx::cpu
