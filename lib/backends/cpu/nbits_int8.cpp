// matmul_nbits with accuracy_level 4 (ONNX Runtime's CompInt8): see qgemm.h, nbits4_int8.
//
// Layout of the computation (the same on every path, so that the AVX-512 VNNI kernel and the
// plain loops give bit-identical results): K in chunks of 128 values = 64 weight bytes of a
// column; a chunk's 16 "lanes" each take 4 consecutive bytes (8 consecutive k, all in one
// block since blocks are >= 16 values). Per lane, exactly in int32:
//   d = sum over its bytes (lo nibble * qa[even k] + hi nibble * qa[odd k]) - z(block) * S
// where S is the block's activation sum qa in the block's first lane and 0 in the others.
// Per lane in f32: t = fma(float(d), sa(block) * sb(block), t), chunk after chunk; the 16
// lanes are then added as (l + l+8), (+4), (+2), (+1) halvings.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/qgemm.h"
#include "backends/cpu/thread_pool.h"

namespace rlx::cpu {

namespace {

constexpr int kLanes = 16;
constexpr int64_t kChunk = 128;  // k values per chunk (64 bytes of a column)

// Per row: the quantized activations split into even / odd k per chunk, and per chunk the
// lanes' activation scale and block sums.
struct QRow {
  std::vector<int8_t> qe, qo;   // [chunks][64]
  std::vector<float> sa;        // [chunks][16]
  std::vector<int32_t> sum;     // [chunks][16]
};

void quantize_rows(int64_t M, const float* A, int64_t K, int64_t bs, std::vector<QRow>& rows) {
  const int64_t chunks = K / kChunk, kb = K / bs;
  rows.resize((size_t)M);
  std::vector<int8_t> q((size_t)K);
  std::vector<float> sab((size_t)kb);
  std::vector<int32_t> sumb((size_t)kb);
  for (int64_t m = 0; m < M; ++m) {
    const float* a = A + m * K;
    for (int64_t b = 0; b < kb; ++b) {
      float amax = 0.f;
      for (int64_t k = b * bs; k < (b + 1) * bs; ++k) amax = std::max(amax, std::fabs(a[k]));
      // ONNX Runtime's QuantizeARow_CompInt8: scale amax / 127, values times its reciprocal,
      // rounded to nearest even
      const float s = amax / 127.f, rec = s != 0.f ? 1.f / s : 0.f;
      int32_t t = 0;
      for (int64_t k = b * bs; k < (b + 1) * bs; ++k) {
        float v = std::nearbyint(a[k] * rec);
        v = std::min(127.f, std::max(-127.f, v));
        q[k] = (int8_t)(int32_t)v;
        t += q[k];
      }
      sab[b] = s;
      sumb[b] = t;
    }
    QRow& r = rows[m];
    r.qe.resize((size_t)(chunks * 64));
    r.qo.resize((size_t)(chunks * 64));
    r.sa.resize((size_t)(chunks * kLanes));
    r.sum.resize((size_t)(chunks * kLanes));
    for (int64_t c = 0; c < chunks; ++c) {
      for (int64_t i = 0; i < 64; ++i) r.qe[c * 64 + i] = q[c * kChunk + 2 * i], r.qo[c * 64 + i] = q[c * kChunk + 2 * i + 1];
      for (int L = 0; L < kLanes; ++L) {
        const int64_t k0 = c * kChunk + 8 * L, b = k0 / bs;
        r.sa[c * kLanes + L] = sab[b];
        r.sum[c * kLanes + L] = k0 % bs == 0 ? sumb[b] : 0;
      }
    }
  }
}

inline int zero_point(const uint8_t* zp, int64_t zcols, int64_t n, int64_t b) {
  return zp ? (zp[n * zcols + b / 2] >> ((b % 2) * 4)) & 15 : 8;
}

float reduce16(const float* t) {
  float h8[8], h4[4], h2[2];
  for (int i = 0; i < 8; ++i) h8[i] = t[i] + t[i + 8];
  for (int i = 0; i < 4; ++i) h4[i] = h8[i] + h8[i + 4];
  for (int i = 0; i < 2; ++i) h2[i] = h4[i] + h4[i + 2];
  return h2[0] + h2[1];
}

// reduce16 in registers, the same additions in the same order (halves of 8, 4, 2, 1).
__attribute__((target("avx512f"))) inline float reduce16_512(__m512 t) {
  const __m256 h8 = _mm256_add_ps(_mm512_castps512_ps256(t), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t), 1)));
  const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
  const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));  // [h4[0] + h4[2], h4[1] + h4[3], ...]
  return _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
}

// The plain loops (every CPU; RLX_CPU_ISA below avx512vnni).
void columns_base(const std::vector<QRow>& rows, int64_t K, const uint8_t* B, const float* sc, const uint8_t* zp,
                  int64_t zcols, int64_t n0, int64_t n1, int64_t bs, float* C, int64_t N) {
  const int64_t chunks = K / kChunk, kb = K / bs, blob = bs / 2;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* col = B + n * kb * blob;
    for (size_t m = 0; m < rows.size(); ++m) {
      const QRow& r = rows[m];
      float t[kLanes] = {};
      for (int64_t c = 0; c < chunks; ++c)
        for (int L = 0; L < kLanes; ++L) {
          int32_t d = 0;
          for (int i = 4 * L; i < 4 * L + 4; ++i) {
            const uint8_t x = col[c * 64 + i];
            d += (x & 15) * r.qe[c * 64 + i] + (x >> 4) * r.qo[c * 64 + i];
          }
          const int64_t b = (c * kChunk + 8 * L) / bs;
          d -= zero_point(zp, zcols, n, b) * r.sum[c * kLanes + L];
          t[L] = std::fma((float)d, r.sa[c * kLanes + L] * sc[n * kb + b], t[L]);
        }
      C[m * N + n] = reduce16(t);
    }
  }
}

// AVX-512 VNNI: 64 weight bytes per step, nibbles as the u8 operand of vpdpbusd against the
// s8 activations; the lanes' block zero points and scales expanded from the block's values.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void columns_vnni(
    const QRow* rows, int64_t K, const uint8_t* B, const float* sc, const uint8_t* zp, int64_t zcols, int64_t n0,
    int64_t n1, int64_t bs, float* C, int64_t N) {
  const int64_t chunks = K / kChunk, kb = K / bs, blob = bs / 2;
  const int nb = (int)std::max<int64_t>(1, kChunk / bs);  // blocks per chunk
  const int bshift = __builtin_ctzll((unsigned long long)bs);
  // lane -> block within the chunk
  alignas(64) int32_t off[kLanes];
  for (int L = 0; L < kLanes; ++L) off[L] = bs <= kChunk ? (int)(8 * L / bs) : 0;
  const __m512i offv = _mm512_load_si512(off), m15 = _mm512_set1_epi8(15);
  const __mmask16 sbmask = (__mmask16)((1u << nb) - 1);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* col = B + n * kb * blob;
    __m512 t[R];
    for (int r = 0; r < R; ++r) t[r] = _mm512_setzero_ps();
    const uint8_t* zrow = zp ? zp + n * zcols : nullptr;
    const float* srow = sc + n * kb;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t b0 = (c * kChunk) >> bshift;  // the chunk's first block (bs a power of 2)
      const __m512i x = _mm512_loadu_si512(col + c * 64);
      const __m512i lo = _mm512_and_si512(x, m15), hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), m15);
      // the lanes' zero points: the nibbles of the chunk's blocks, shifted out lane by lane
      __m512i z = _mm512_set1_epi32(8);
      if (zp) {
        uint32_t zw = 0;
        const int64_t at = b0 >> 1;
        if (at + 4 <= zcols) std::memcpy(&zw, zrow + at, 4);
        else std::memcpy(&zw, zrow + at, (size_t)(zcols - at));
        const __m512i sh = _mm512_slli_epi32(_mm512_add_epi32(offv, _mm512_set1_epi32((int)(b0 & 1))), 2);
        z = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)zw), sh), _mm512_set1_epi32(15));
      }
      const __m512 sb = _mm512_permutexvar_ps(offv, _mm512_maskz_loadu_ps(sbmask, srow + b0));
      for (int r = 0; r < R; ++r) {
        const QRow& q = rows[r];
        __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(q.qe.data() + c * 64));
        d = _mm512_dpbusd_epi32(d, hi, _mm512_loadu_si512(q.qo.data() + c * 64));
        d = _mm512_sub_epi32(d, _mm512_mullo_epi32(z, _mm512_loadu_si512(q.sum.data() + c * kLanes)));
        const __m512 s = _mm512_mul_ps(_mm512_loadu_ps(q.sa.data() + c * kLanes), sb);
        t[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, t[r]);
      }
    }
    for (int r = 0; r < R; ++r) C[r * N + n] = reduce16_512(t[r]);
  }
}

bool vnni_ok() {
  static const bool ok = [] {
    if (qgemm_isa() != QIsa::Avx512Vnni) return false;  // RLX_CPU_ISA caps it
    return qisa_supported(QIsa::Avx512Vnni);
  }();
  return ok;
}

}  // namespace

bool nbits4_int8_supported(int64_t K, int64_t bs) {
  return K > 0 && bs >= 16 && (bs & (bs - 1)) == 0 && K % bs == 0 && K % kChunk == 0;
}

bool nbits4_int8(int64_t M, const float* A, int64_t K, const uint8_t* B, const float* scales, const uint8_t* zp,
                 int64_t N, int64_t bs, float* C, bool vnni, Threads th) {
  if (!nbits4_int8_supported(K, bs) || M < 1) return false;
  const int64_t kb = K / bs, zcols = (kb * 4 + 7) / 8;
  std::vector<QRow> rows;
  quantize_rows(M, A, K, bs, rows);
  const bool fast = vnni && vnni_ok();
  auto body = [&](int64_t n0, int64_t n1) {
    if (!fast) {
      columns_base(rows, K, B, scales, zp, zcols, n0, n1, bs, C, N);
      return;
    }
    for (int64_t m = 0; m < M; m += 4) {
      const int r = (int)std::min<int64_t>(4, M - m);
      const QRow* q = rows.data() + m;
      float* c = C + m * N;
      switch (r) {
        case 1: columns_vnni<1>(q, K, B, scales, zp, zcols, n0, n1, bs, c, N); break;
        case 2: columns_vnni<2>(q, K, B, scales, zp, zcols, n0, n1, bs, c, N); break;
        case 3: columns_vnni<3>(q, K, B, scales, zp, zcols, n0, n1, bs, c, N); break;
        default: columns_vnni<4>(q, K, B, scales, zp, zcols, n0, n1, bs, c, N); break;
      }
    }
  };
  if (th == Threads::Single) body(0, N);
  else ThreadPool::global().parallel_for(N, 16, body);
  return true;
}

}  // namespace rlx::cpu
