// Separable 3-D pooling (pool3d.h). s3d's max pools (1x3x3 stride 2 and 3x3x3 stride 1 and 2
// over 28x28 to 112x112 maps) were 16% of its time in the direct loop, which reads
// kD kH kW = 27 values per output: here a window costs kD + kH + kW passes over rows that stay
// in L1 (one input plane's W-pooled rows, then the planes of one task's output depths).
#include "backends/cpu/pool3d.h"

#include <algorithm>
#include <cmath>
#include <immintrin.h>
#include <vector>

#include "backends/cpu/isa.h"
#include "backends/cpu/thread_pool.h"

namespace rlx::cpu {
namespace {

// The combine of both passes: max takes v when v > acc or v is NaN (a NaN stays, as in the
// direct loop and ONNX Runtime); average sums.
template <bool IsMax>
inline float comb(float acc, float v) {
  if constexpr (IsMax) return (v > acc || v != v) ? v : acc;
  else return acc + v;
}

// dst[j] = src[j s] (first) or comb(dst[j], src[j s]), j < n. Reads nothing past src[(n - 1) s].
template <bool IsMax>
void pass_base(float* dst, const float* src, int64_t s, int64_t n, bool first) {
  if (first) {
    for (int64_t j = 0; j < n; ++j) dst[j] = src[j * s];
  } else if (s == 1) {
    for (int64_t j = 0; j < n; ++j) dst[j] = comb<IsMax>(dst[j], src[j]);
  } else {
    for (int64_t j = 0; j < n; ++j) dst[j] = comb<IsMax>(dst[j], src[j * s]);
  }
}

template <bool IsMax>
__attribute__((target("avx2"))) inline void pass8(float* dst, const float* src, int64_t s, bool first) {
  __m256 v;
  if (s == 1) {
    v = _mm256_loadu_ps(src);
  } else {  // even elements of 16: [a0 a2 b0 b2 | a4 a6 b4 b6] -> [a0 a2 a4 a6 b0 b2 b4 b6]
    const __m256 e = _mm256_shuffle_ps(_mm256_loadu_ps(src), _mm256_loadu_ps(src + 8), 0x88);
    v = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8));
  }
  if (!first) {
    const __m256 a = _mm256_loadu_ps(dst);
    if constexpr (IsMax) {
      const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, a, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      v = _mm256_blendv_ps(a, v, take);
    } else {
      v = _mm256_add_ps(a, v);
    }
  }
  _mm256_storeu_ps(dst, v);
}

// The same 8 at a time for strides 1 and 2 (a stride-2 chunk reads one float past its last
// element, so its vector loop stops one element earlier). Max ends with one chunk overlapping
// the previous one (a max of a value already taken changes nothing); average's tail is scalar.
template <bool IsMax>
__attribute__((target("avx2"))) void pass_avx2(float* dst, const float* src, int64_t s, int64_t n, bool first) {
  if (s != 1 && s != 2) return pass_base<IsMax>(dst, src, s, n, first);
  const int64_t lim = s == 1 ? n : n - 1;  // chunks [j, j + 8) with j + 8 <= lim
  int64_t j = 0;
  for (; j + 8 <= lim; j += 8) pass8<IsMax>(dst + j, src + j * s, s, first);
  if (j == n) return;
  if (IsMax && lim >= 8) {
    pass8<IsMax>(dst + lim - 8, src + (lim - 8) * s, s, first);
    j = lim;
  }
  for (; j < n; ++j) dst[j] = first ? src[j * s] : comb<IsMax>(dst[j], src[j * s]);
}

template <bool IsMax>
struct Pool3d {
  const ir::Conv2dGeom& g;
  bool avx;
  int64_t ow_lo = 0, ow_hi = 0;  // output columns whose whole window lies inside the row
  int64_t oh_lo = 0, oh_hi = 0;  // output rows whose whole window lies inside the plane
  static constexpr float kIdent = IsMax ? -INFINITY : 0.f;

  Pool3d(const ir::Conv2dGeom& geo, bool use_avx) : g(geo), avx(use_avx) {
    ow_lo = std::min<int64_t>(g.OW, (g.pl + g.sW - 1) / g.sW);
    const int64_t last = g.W - 1 + g.pl - (g.kW - 1) * g.dW;  // the last window start inside the row
    ow_hi = std::clamp<int64_t>(last >= 0 ? last / g.sW + 1 : 0, ow_lo, g.OW);
    oh_lo = std::min<int64_t>(g.OH, (g.pt + g.sH - 1) / g.sH);
    const int64_t lasth = g.H - 1 + g.pt - (g.kH - 1) * g.dH;
    oh_hi = std::clamp<int64_t>(lasth >= 0 ? lasth / g.sH + 1 : 0, oh_lo, g.OH);
  }
  void pass(float* dst, const float* src, int64_t s, int64_t n, bool first) const {
    if (avx) pass_avx2<IsMax>(dst, src, s, n, first);
    else pass_base<IsMax>(dst, src, s, n, first);
  }
  // Column ow of one input row pooled along W, the window clipped to the row.
  float col_w(const float* xr, int64_t ow) const {
    const int64_t ws = ow * g.sW - g.pl;
    float acc = kIdent;
    for (int64_t kw = 0; kw < g.kW; ++kw) {
      const int64_t iw = ws + kw * g.dW;
      if (iw >= 0 && iw < g.W) acc = comb<IsMax>(acc, xr[iw]);
    }
    return acc;
  }
  // One input row (W floats) pooled along W into OW floats.
  void row_w(const float* xr, float* out) const {
    for (int64_t ow = 0; ow < ow_lo; ++ow) out[ow] = col_w(xr, ow);
    if (ow_hi > ow_lo)
      for (int64_t kw = 0; kw < g.kW; ++kw)
        pass(out + ow_lo, xr + ow_lo * g.sW - g.pl + kw * g.dW, g.sW, ow_hi - ow_lo, kw == 0);
    for (int64_t ow = ow_hi; ow < g.OW; ++ow) out[ow] = col_w(xr, ow);
  }
  // Output row oh of a plane pooled along H from the W-pooled rows rw (row stride OW).
  void row_h(const float* rw, int64_t oh, float* d) const {
    bool first = true;
    for (int64_t kh = 0; kh < g.kH; ++kh) {
      const int64_t h = oh * g.sH - g.pt + kh * g.dH;
      if (h < 0 || h >= g.H) continue;
      pass(d, rw + h * g.OW, 1, g.OW, first);
      first = false;
    }
    if (first) std::fill(d, d + g.OW, kIdent);
  }
  // One input plane (H x W) pooled along W into rw (H x OW), then along H into dst (OH x OW).
  // Where W = sW OW (s3d's maps), output position j of the plane reads input j sW - pl + kw dW
  // across rows too, so the interior is pooled in one pass per tap over the whole plane and
  // only the edge columns (which read across a row's end there) are redone per row; with
  // sH = 1 the interior rows likewise take one pass per tap (maps of 7 to 56 columns spent
  // most of their time entering and leaving passes of one row).
  void plane_hw(const float* xp, float* rw, float* dst) const {
    if (g.W == g.sW * g.OW && ow_hi > ow_lo) {
      const int64_t n = (g.H - 1) * g.OW + ow_hi - ow_lo;
      for (int64_t kw = 0; kw < g.kW; ++kw) pass(rw + ow_lo, xp + ow_lo * g.sW - g.pl + kw * g.dW, g.sW, n, kw == 0);
      for (int64_t h = 0; h < g.H; ++h) {
        const float* xr = xp + h * g.W;
        float* out = rw + h * g.OW;
        for (int64_t ow = 0; ow < ow_lo; ++ow) out[ow] = col_w(xr, ow);
        for (int64_t ow = ow_hi; ow < g.OW; ++ow) out[ow] = col_w(xr, ow);
      }
    } else {
      for (int64_t h = 0; h < g.H; ++h) row_w(xp + h * g.W, rw + h * g.OW);
    }
    if (g.sH == 1 && oh_hi > oh_lo) {
      for (int64_t oh = 0; oh < oh_lo; ++oh) row_h(rw, oh, dst + oh * g.OW);
      for (int64_t kh = 0; kh < g.kH; ++kh)
        pass(dst + oh_lo * g.OW, rw + (oh_lo - g.pt + kh * g.dH) * g.OW, 1, (oh_hi - oh_lo) * g.OW, kh == 0);
      for (int64_t oh = oh_hi; oh < g.OH; ++oh) row_h(rw, oh, dst + oh * g.OW);
    } else {
      for (int64_t oh = 0; oh < g.OH; ++oh) row_h(rw, oh, dst + oh * g.OW);
    }
  }
  // Output depths [od0, od1) of one (image, channel) volume.
  void run(const float* xv, float* yv, int64_t od0, int64_t od1, std::vector<float>& rw, std::vector<float>& rh) const {
    const int64_t HW = g.H * g.W, OHW = g.OH * g.OW;
    rw.resize((size_t)(g.H * g.OW));
    if (g.kD == 1) {  // output depth od reads input depth od sD - pf alone: pooled into y directly
      for (int64_t od = od0; od < od1; ++od) {
        const int64_t d = od * g.sD - g.pf;
        if (d >= 0 && d < g.D) plane_hw(xv + d * HW, rw.data(), yv + od * OHW);
        else std::fill(yv + od * OHW, yv + (od + 1) * OHW, kIdent);
      }
    } else {
      const int64_t dlo = std::max<int64_t>(0, od0 * g.sD - g.pf);
      const int64_t dhi = std::min<int64_t>(g.D, (od1 - 1) * g.sD - g.pf + (g.kD - 1) * g.dD + 1);
      rh.resize((size_t)(std::max<int64_t>(dhi - dlo, 1) * OHW));
      for (int64_t d = dlo; d < dhi; ++d) plane_hw(xv + d * HW, rw.data(), rh.data() + (d - dlo) * OHW);
      for (int64_t od = od0; od < od1; ++od) {
        float* yo = yv + od * OHW;
        bool first = true;
        for (int64_t kd = 0; kd < g.kD; ++kd) {
          const int64_t d = od * g.sD - g.pf + kd * g.dD;
          if (d < 0 || d >= g.D) continue;
          pass(yo, rh.data() + (d - dlo) * OHW, 1, OHW, first);
          first = false;
        }
        if (first) std::fill(yo, yo + OHW, kIdent);
      }
    }
    if constexpr (!IsMax)
      for (int64_t od = od0; od < od1; ++od)
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          float* yr = yv + (od * g.OH + oh) * g.OW;
          for (int64_t ow = 0; ow < g.OW; ++ow) yr[ow] /= (float)ir::avg_pool_divisor(g, od, oh, ow);
        }
  }
};

template <bool IsMax>
void pool3d_t(const ir::Conv2dGeom& g, const float* x, float* y) {
  const int64_t NC = g.N * g.C, DHW = g.D * g.H * g.W, OV = g.OD * g.OH * g.OW;
  if (NC * OV == 0) return;
  const Pool3d<IsMax> p(g, isa_avx2_fma());
  // Tasks: whole volumes, or (with few of them) runs of output depths, so every thread has work.
  const int64_t want = 4 * (int64_t)ThreadPool::global().size();
  const int64_t pieces = NC >= want ? 1 : std::min<int64_t>(g.OD, (want + NC - 1) / NC);
  const int64_t run = (g.OD + pieces - 1) / pieces, chunks = (g.OD + run - 1) / run;
  ThreadPool::global().parallel_for(NC * chunks, 1, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> rw, rh;
    for (int64_t t = b; t < e; ++t) {
      const int64_t v = t / chunks, od0 = t % chunks * run;
      p.run(x + v * DHW, y + v * OV, od0, std::min(g.OD, od0 + run), rw, rh);
    }
  });
}

}  // namespace

void pool3d_separable(const ir::Conv2dGeom& g, bool is_max, const float* x, float* y) {
  if (is_max) pool3d_t<true>(g, x, y);
  else pool3d_t<false>(g, x, y);
}

}  // namespace rlx::cpu
