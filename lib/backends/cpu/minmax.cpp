// One-pass min and max of a contiguous f32 run: see minmax.h.
#include "backends/cpu/minmax.h"

#include <immintrin.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/isa.h"
#include "backends/cpu/thread_pool.h"

namespace rlx::cpu {

namespace {

struct Part {
  float mn = INFINITY, mx = -INFINITY;
  bool nan = false;
};

Part run_base(const float* x, int64_t n) {
  Part p;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    p.nan = p.nan || v != v;
    p.mn = v < p.mn ? v : p.mn;
    p.mx = v > p.mx ? v : p.mx;
  }
  return p;
}

// 4 vectors of 16 lanes: independent min/max chains; NaN lanes noted by an unordered compare
// (vminps/vmaxps would drop them depending on the operand order).
__attribute__((target("avx512f"))) Part run_avx512(const float* x, int64_t n) {
  __m512 mn[4], mx[4];
  __mmask16 bad = 0;
  for (int j = 0; j < 4; ++j) mn[j] = _mm512_set1_ps(INFINITY), mx[j] = _mm512_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (int j = 0; j < 4; ++j) {
      const __m512 v = _mm512_loadu_ps(x + i + 16 * j);
      bad |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      mn[j] = _mm512_min_ps(mn[j], v);
      mx[j] = _mm512_max_ps(mx[j], v);
    }
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    bad |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    mn[0] = _mm512_min_ps(mn[0], v);
    mx[0] = _mm512_max_ps(mx[0], v);
  }
  Part p = run_base(x + i, n - i);
  for (int j = 1; j < 4; ++j) mn[0] = _mm512_min_ps(mn[0], mn[j]), mx[0] = _mm512_max_ps(mx[0], mx[j]);
  p.mn = std::fmin(p.mn, _mm512_reduce_min_ps(mn[0]));
  p.mx = std::fmax(p.mx, _mm512_reduce_max_ps(mx[0]));
  p.nan = p.nan || bad != 0;
  return p;
}

__attribute__((target("avx2"))) Part run_avx2(const float* x, int64_t n) {
  __m256 mn[4], mx[4], bad = _mm256_setzero_ps();
  for (int j = 0; j < 4; ++j) mn[j] = _mm256_set1_ps(INFINITY), mx[j] = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int j = 0; j < 4; ++j) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * j);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      mn[j] = _mm256_min_ps(mn[j], v);
      mx[j] = _mm256_max_ps(mx[j], v);
    }
  Part p = run_base(x + i, n - i);
  alignas(32) float a[8], b[8];
  for (int j = 1; j < 4; ++j) mn[0] = _mm256_min_ps(mn[0], mn[j]), mx[0] = _mm256_max_ps(mx[0], mx[j]);
  _mm256_store_ps(a, mn[0]);
  _mm256_store_ps(b, mx[0]);
  for (int j = 0; j < 8; ++j) p.mn = std::fmin(p.mn, a[j]), p.mx = std::fmax(p.mx, b[j]);
  p.nan = p.nan || _mm256_movemask_ps(bad) != 0;
  return p;
}

using RunFn = Part (*)(const float*, int64_t);
RunFn pick() {
  if (isa_avx512()) return run_avx512;  // RLX_CPU_ISA caps the choice (isa.h)
  if (isa_avx2_fma()) return run_avx2;
  return run_base;
}

}  // namespace

Range minmax_f32(const float* x, int64_t n, Threads th) {
  static const RunFn fn = pick();
  constexpr int64_t kChunk = 1 << 16;  // 256 KB of f32 per task
  const int64_t nch = std::max<int64_t>(1, (n + kChunk - 1) / kChunk);
  std::vector<Part> parts((size_t)nch);
  auto body = [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t b = c * kChunk;
      parts[c] = fn(x + b, std::max<int64_t>(0, std::min(kChunk, n - b)));
    }
  };
  if (th == Threads::Single || nch == 1) body(0, nch);
  else ThreadPool::global().parallel_for(nch, 1, body);
  Part t;
  for (const Part& p : parts) t.nan = t.nan || p.nan, t.mn = std::fmin(t.mn, p.mn), t.mx = std::fmax(t.mx, p.mx);
  if (t.nan) return {NAN, NAN};
  return {t.mn, t.mx};
}

}  // namespace rlx::cpu
