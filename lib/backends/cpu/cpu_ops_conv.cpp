// CPU kernels of the convolution family, NCHW (2-D) and NCDHW (3-D) f32, one code for both
// (a 2-D op is a 3-D one with D = kD = 1, ir/spatial.h):
//   conv2d, conv3d    im2col (vol2col) tiles + GEMM (1x1 stride-1 convs read x directly; on a 1x1 map the
//                     batch is one GEMM over the images),
//                     a direct loop for depthwise / one-channel-per-group convs
//   conv_transpose2d, conv_transpose3d  GEMM (Wᵀ·x) into columns, then col2im per output channel
//   max_pool2d, avg_pool2d, resize: direct loops; max_pool3d, avg_pool3d: separable (pool3d.h)
// Work is split over rlx's thread pool; each GEMM call is single-threaded.
#include "backends/cpu/cpu_ops_conv.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <immintrin.h>
#include <string>
#include <vector>

#include "backends/cpu/conv_temporal.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/pool3d.h"
#include "backends/cpu/thread_pool.h"
#include "core/error.h"
#include "ir/op_registry.h"
#include "ir/spatial.h"

namespace rlx::cpu {
namespace {

using ir::Op;

void parallel(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  ThreadPool::global().parallel_for(n, grain, fn);
}

// The one GEMM call of these kernels: row-major C[M, N] = op(A)[M, K] · B[K, N], op(A) = A or Aᵀ,
// on the calling thread (the callers parallelise over tiles), through the backend's GEMM interface.
void gemm(bool trans_a, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
          float* C, int64_t ldc) {
  cpu::gemm(trans_a, false, M, N, K, 1.f, A, lda, B, ldb, C, ldc, {}, Threads::Single);
}

ir::Conv2dGeom geom(const Kernel& k) {
  std::vector<Shape> ins;
  for (const auto& t : k.inputs) ins.push_back(t.shape);
  return ir::conv2d_geom(*k.node, ins, k.label);
}

// Range [lo, hi) of output positions o with 0 <= o * s + off < len.
inline void valid_range(int64_t off, int64_t s, int64_t len, int64_t n_out, int64_t& lo, int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + s - 1) / s;
  hi = len - 1 - off < 0 ? 0 : std::min(n_out, (len - 1 - off) / s + 1);
  if (hi < lo) hi = lo;
}

// ---------------- conv2d ----------------

// One output plane of a convolution whose groups have one input channel each
// (depthwise): y[oh, :] += w[kh, kw] * x[ih, ow * s + off], row by row.
void conv_direct_plane_base(const ir::Conv2dGeom& g, const float* x, const float* w, float bias, float* y) {
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    float* yr = y + oh * g.OW;
    std::fill(yr, yr + g.OW, bias);
    for (int64_t kh = 0; kh < g.kH; ++kh) {
      int64_t ih = oh * g.sH - g.pt + kh * g.dH;
      if (ih < 0 || ih >= g.H) continue;
      const float* xr = x + ih * g.W;
      for (int64_t kw = 0; kw < g.kW; ++kw) {
        const int64_t off = kw * g.dW - g.pl;
        const float wv = w[kh * g.kW + kw];
        int64_t lo, hi;
        valid_range(off, g.sW, g.W, g.OW, lo, hi);
        if (g.sW == 1) {
          const float* xs = xr + off;
          for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xs[ow];
        } else {
          for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[ow * g.sW + off];
        }
      }
    }
  }
}

// The same with AVX2 + FMA for stride 1 along W: the columns whose every tap lies inside the row
// are computed 16 (then 8) at a time with the sums in registers over all kH x kW taps (one store
// per output instead of one load and store per tap and output: the base loop's bound); the few
// columns at the edges take the scalar path. The recogniser's depthwise convs (3x3 and 5x5 on
// maps 80-160 wide) were a quarter of its CPU time on the base loop.
__attribute__((target("avx2,fma"))) void conv_direct_plane_avx2(const ir::Conv2dGeom& g, const float* x,
                                                                 const float* w, float bias, float* y) {
  // Interior columns [a, b): 0 <= ow - pl + kw dW <= W - 1 for every kw.
  const int64_t a = std::min<int64_t>(g.OW, g.pl);
  const int64_t last = g.W - 1 + g.pl - (g.kW - 1) * g.dW;
  const int64_t b = std::max<int64_t>(a, std::min<int64_t>(g.OW, last + 1));
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    float* yr = y + oh * g.OW;
    int64_t kh0 = 0, kh1 = g.kH;  // taps whose row is inside the input
    const int64_t ih0 = oh * g.sH - g.pt;
    while (kh0 < kh1 && ih0 + kh0 * g.dH < 0) ++kh0;
    while (kh1 > kh0 && ih0 + (kh1 - 1) * g.dH >= g.H) --kh1;
    auto scalar = [&](int64_t ow) {
      float acc = bias;
      for (int64_t kh = kh0; kh < kh1; ++kh) {
        const float* xr = x + (ih0 + kh * g.dH) * g.W;
        for (int64_t kw = 0; kw < g.kW; ++kw) {
          const int64_t iw = ow - g.pl + kw * g.dW;
          if (iw >= 0 && iw < g.W) acc += w[kh * g.kW + kw] * xr[iw];
        }
      }
      yr[ow] = acc;
    };
    for (int64_t ow = 0; ow < a; ++ow) scalar(ow);
    int64_t ow = a;
    for (; ow + 16 <= b; ow += 16) {
      __m256 s0 = _mm256_set1_ps(bias), s1 = s0;
      for (int64_t kh = kh0; kh < kh1; ++kh) {
        const float* xr = x + (ih0 + kh * g.dH) * g.W + ow - g.pl;
        const float* wr = w + kh * g.kW;
        for (int64_t kw = 0; kw < g.kW; ++kw) {
          const __m256 wv = _mm256_set1_ps(wr[kw]);
          const float* xs = xr + kw * g.dW;
          s0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xs), s0);
          s1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xs + 8), s1);
        }
      }
      _mm256_storeu_ps(yr + ow, s0);
      _mm256_storeu_ps(yr + ow + 8, s1);
    }
    for (; ow + 8 <= b; ow += 8) {
      __m256 s0 = _mm256_set1_ps(bias);
      for (int64_t kh = kh0; kh < kh1; ++kh) {
        const float* xr = x + (ih0 + kh * g.dH) * g.W + ow - g.pl;
        for (int64_t kw = 0; kw < g.kW; ++kw)
          s0 = _mm256_fmadd_ps(_mm256_set1_ps(w[kh * g.kW + kw]), _mm256_loadu_ps(xr + kw * g.dW), s0);
      }
      _mm256_storeu_ps(yr + ow, s0);
    }
    for (; ow < g.OW; ++ow) scalar(ow);
  }
}

void conv_direct_plane(const ir::Conv2dGeom& g, const float* x, const float* w, float bias, float* y) {
  if (g.sW == 1 && isa_avx2_fma()) conv_direct_plane_avx2(g, x, w, bias, y);
  else conv_direct_plane_base(g, x, w, bias, y);
}

// col[r, j] (row stride ld, default T) for rows r = (c, kd, kh, kw) of one group and output
// positions p0 + j, j < T (positions run over (od, oh, ow)).
void im2col_tile(const ir::Conv2dGeom& g, const float* xg, int64_t p0, int64_t T, float* col, int64_t ld = 0) {
  if (ld == 0) ld = T;
  const int64_t DHW = g.D * g.H * g.W, OHW = g.OH * g.OW;
  // The tile's output-row segments (fixed od, oh), the same for every row of col: found once.
  struct Seg {
    int64_t j, n, id0, ih0, ow0;  // columns [j, j + n); input depth and row of the first tap
  };
  thread_local std::vector<Seg> segs;
  segs.clear();
  for (int64_t j = 0; j < T;) {
    const int64_t p = p0 + j, od = p / OHW, oh = p % OHW / g.OW, ow0 = p % g.OW;
    const int64_t n = std::min(T - j, g.OW - ow0);
    segs.push_back({j, n, od * g.sD - g.pf, oh * g.sH - g.pt, ow0});
    j += n;
  }
  for (int64_t c = 0; c < g.Cg; ++c)
    for (int64_t kdh = 0; kdh < g.kD * g.kH; ++kdh)  // (kd, kh)
      for (int64_t kw = 0; kw < g.kW; ++kw) {
        const int64_t kd = kdh / g.kH, kh = kdh % g.kH;
        float* dst = col + ((c * g.kD * g.kH + kdh) * g.kW + kw) * ld;
        const float* xc = xg + c * DHW;
        const int64_t off = kw * g.dW - g.pl;
        int64_t lo, hi;  // output columns whose tap lies inside the input row
        valid_range(off, g.sW, g.W, g.OW, lo, hi);
        for (const Seg& sg : segs) {
          const int64_t id = sg.id0 + kd * g.dD, ih = sg.ih0 + kh * g.dH, ow0 = sg.ow0, seg = sg.n;
          float* d = dst + sg.j;
          if (id < 0 || id >= g.D || ih < 0 || ih >= g.H) {
            std::fill(d, d + seg, 0.f);
          } else {
            const float* xr = xc + (id * g.H + ih) * g.W;
            const int64_t a = std::clamp(lo, ow0, ow0 + seg), b = std::clamp(hi, a, ow0 + seg);
            std::fill(d, d + (a - ow0), 0.f);
            if (g.sW == 1) std::memcpy(d + (a - ow0), xr + a + off, (b - a) * 4);
            else for (int64_t ow = a; ow < b; ++ow) d[ow - ow0] = xr[ow * g.sW + off];
            std::fill(d + (b - ow0), d + seg, 0.f);
          }
        }
      }
}

}  // namespace

// epi (may be null): the fused consumer, run on each run of outputs [b, e) a task has just finished.
void run_conv(const Kernel& k, TensorPtr ptr, const SpanFn* epi) {
  const ir::Conv2dGeom g = geom(k);
  const float* x = ptr(k.inputs[0]);
  const float* w = ptr(k.inputs[1]);
  const float* bias = g.has_bias ? ptr(k.inputs[2]) : nullptr;
  float* y = ptr(k.output);
  // OHW and HW count every output / input position of a plane (OD·OH·OW and D·H·W in 3-D).
  const int64_t OHW = g.OD * g.OH * g.OW, HW = g.D * g.H * g.W, KK = g.kD * g.kH * g.kW, K = g.Cg * KK;
  if (g.N * g.M * OHW == 0) return;
  if (K > INT_MAX || OHW > INT_MAX || HW > INT_MAX)
    throw RuntimeError(k.label + ": convolution too large for the BLAS interface (32-bit sizes)");
  if (K == 0) {  // no input channels: the bias alone
    parallel(g.N * g.M, 1, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        std::fill(y + p * OHW, y + (p + 1) * OHW, bias ? bias[p % g.M] : 0.f);
        if (epi) (*epi)(p * OHW, (p + 1) * OHW);
      }
    });
    return;
  }
  if (g.Cg == 1 && g.nd == 2) {  // depthwise (and any one-channel-per-group conv): direct
    parallel(g.N * g.M, 1, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const int64_t n = p / g.M, m = p % g.M, c = m / g.Mg;
        conv_direct_plane(g, x + (n * g.C + c) * HW, w + m * KK, bias ? bias[m] : 0.f, y + p * OHW);
        if (epi) (*epi)(p * OHW, (p + 1) * OHW);
      }
    });
    return;
  }
  if (conv3d_temporal_applies(g)) {  // kD x 1 x 1: products over a slab of input planes, no im2col
    conv3d_temporal(g, x, w, bias, y, epi);
    return;
  }
  const bool pointwise = KK == 1 && g.sD == 1 && g.sH == 1 && g.sW == 1 && g.pf == 0 && g.pt == 0 && g.pl == 0 &&
                         g.pk == 0 && g.pb == 0 && g.pr == 0;
  if (pointwise && HW == 1 && g.groups == 1) {
    // A 1x1 map (squeeze-excitation blocks): per image a matrix-vector product, so the whole batch is
    // one product y[N, M] = x[N, C] · w[M, C]ᵀ (+ bias) that reads the weights once, not once per image.
    Epilogue ep;
    ep.bias = bias;
    if (epi)
      ep.custom = [epi, M = g.M](float*, int64_t, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
        for (int64_t m = m0; m < m1; ++m) (*epi)(m * M + n0, m * M + n1);
      };
    cpu::gemm(false, true, g.N, g.M, K, 1.f, x, K, w, K, y, g.M, ep, Threads::Pool);
    return;
  }
  if (g.nd == 3 && g.Mg * K * 4 > (int64_t(2) << 20) && K * OHW * 4 <= (int64_t(64) << 20)) {
    // Deep 3-D layers (a group's weights over 2 MiB: r3d_18's layers 3 and 4 have 7 and 28 MiB over
    // a few hundred positions): the tiles below would each stream all the weights again. One
    // vol2col of the whole plane (built in parallel by position ranges) and one product over
    // the pool read them once; the bias is added to each block as the product finishes it.
    // Measured on r3d_18 (8x112x112, 2 threads, same run): layers 3 and 4 in 0.3-0.5x the tiled
    // time; layer 2 (1.7 MiB of weights over 3136 positions) 1.7x slower this way, so it stays tiled.
    std::vector<float> col((size_t)(K * OHW));
    const int64_t threads = ThreadPool::global().size();
    const int64_t chunk = std::max<int64_t>(16, (OHW + 4 * threads - 1) / (4 * threads));
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        const float* xg = x + (n * g.C + grp * g.Cg) * HW;
        float* yg = y + (n * g.M + grp * g.Mg) * OHW;
        parallel((OHW + chunk - 1) / chunk, 1, [&](int64_t b, int64_t e) {
          for (int64_t t = b; t < e; ++t) {
            const int64_t p0 = t * chunk;
            im2col_tile(g, xg, p0, std::min(chunk, OHW - p0), col.data() + p0, OHW);
          }
        });
        Epilogue ep;
        if (bias || epi) {
          const float* bg = bias ? bias + grp * g.Mg : nullptr;
          const int64_t at = yg - y;
          ep.custom = [bg, epi, at](float* C, int64_t ldc, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
            for (int64_t m = m0; m < m1; ++m) {
              if (bg)
                for (float *p = C + m * ldc + n0, *pe = C + m * ldc + n1; p < pe; ++p) *p += bg[m];
              if (epi) (*epi)(at + m * ldc + n0, at + m * ldc + n1);
            }
          };
        }
        cpu::gemm(false, false, g.Mg, OHW, K, 1.f, w + grp * g.Mg * K, K, col.data(), OHW, yg, OHW, ep, Threads::Pool);
      }
    return;
  }
  // Tiles of T output positions: the im2col tile (K x T) stays near L2 size, and
  // there are enough tiles to keep every thread busy.
  const int64_t threads = ThreadPool::global().size();
  int64_t T = std::max<int64_t>(16, (int64_t)(1 << 17) / K / 16 * 16);
  T = std::min(T, OHW);
  const int64_t planes = g.N * g.groups;
  if (planes * ((OHW + T - 1) / T) < 2 * threads) {
    int64_t want = (2 * threads + planes - 1) / planes;
    T = std::max<int64_t>(std::min<int64_t>(16, OHW), ((OHW + want - 1) / want + 15) / 16 * 16);
    T = std::min(T, OHW);
  }
  const int64_t tiles = (OHW + T - 1) / T;
  parallel(planes * tiles, 1, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> col;
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / (g.groups * tiles), grp = (t / tiles) % g.groups, p0 = (t % tiles) * T;
      const int64_t tn = std::min(T, OHW - p0);
      const float* xg = x + (n * g.C + grp * g.Cg) * HW;
      float* yg = y + (n * g.M + grp * g.Mg) * OHW + p0;
      const float* B;
      int64_t ldb;
      if (pointwise) {
        B = xg + p0;
        ldb = HW;
      } else {
        if ((int64_t)col.size() < K * tn) col.resize(K * tn);
        im2col_tile(g, xg, p0, tn, col.data());
        B = col.data();
        ldb = tn;
      }
      gemm(false, g.Mg, tn, K, w + grp * g.Mg * K, K, B, ldb, yg, OHW);
      if (bias)  // per output channel (a row of this tile), added while the tile is in cache
        for (int64_t m = 0; m < g.Mg; ++m) {
          const float bm = bias[grp * g.Mg + m];
          for (float *p = yg + m * OHW, *pe = p + tn; p < pe; ++p) *p += bm;
        }
      if (epi)
        for (int64_t m = 0; m < g.Mg; ++m) (*epi)(yg - y + m * OHW, yg - y + m * OHW + tn);
    }
  });
}

namespace {

// ---------------- conv_transpose2d ----------------

void run_conv_transpose2d(const Kernel& k, TensorPtr ptr) {
  const ir::Conv2dGeom g = geom(k);
  const float* x = ptr(k.inputs[0]);
  const float* w = ptr(k.inputs[1]);
  const float* bias = g.has_bias ? ptr(k.inputs[2]) : nullptr;
  float* y = ptr(k.output);
  // Per plane: OHW output and HW input positions (OD·OH·OW and D·H·W in 3-D).
  const int64_t OHW = g.OD * g.OH * g.OW, HW = g.D * g.H * g.W, KK = g.kD * g.kH * g.kW, R = g.Mg * KK;
  if (g.N * g.M * OHW == 0) return;
  if (R > INT_MAX || HW > INT_MAX || (int64_t)R * HW > (int64_t)1 << 40)
    throw RuntimeError(k.label + ": transposed convolution too large for the BLAS interface (32-bit sizes)");
  // cols[(m, kd, kh, kw), i] = sum_c w[c, m, kd, kh, kw] x[c, i] for the group's channels c.
  std::vector<float> cols((size_t)R * HW);
  const int64_t threads = ThreadPool::global().size();
  const int64_t T = std::max<int64_t>(16, std::min<int64_t>(HW, (HW + 2 * threads - 1) / (2 * threads)));
  const int64_t tiles = (HW + T - 1) / T;
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const float* xg = x + (n * g.C + grp * g.Cg) * HW;
      const float* wg = w + grp * g.Cg * R;  // [Cg, R]
      if (g.Cg == 0) std::fill(cols.begin(), cols.end(), 0.f);
      else
        parallel(tiles, 1, [&](int64_t b, int64_t e) {
          for (int64_t t = b; t < e; ++t) {
            const int64_t i0 = t * T, tn = std::min(T, HW - i0);
            gemm(true, R, tn, g.Cg, wg, R, xg + i0, HW, cols.data() + i0, HW);
          }
        });
      // col2im: each output channel's plane gathers its own taps (no races).
      parallel(g.Mg, 1, [&](int64_t b, int64_t e) {
        for (int64_t m = b; m < e; ++m) {
          float* yp = y + (n * g.M + grp * g.Mg + m) * OHW;
          std::fill(yp, yp + OHW, bias ? bias[grp * g.Mg + m] : 0.f);
          for (int64_t kd = 0; kd < g.kD; ++kd)
            for (int64_t kh = 0; kh < g.kH; ++kh)
              for (int64_t kw = 0; kw < g.kW; ++kw) {
                const float* cr = cols.data() + (((m * g.kD + kd) * g.kH + kh) * g.kW + kw) * HW;
                const int64_t offw = kw * g.dW - g.pl;
                for (int64_t id = 0; id < g.D; ++id) {
                  const int64_t od = id * g.sD - g.pf + kd * g.dD;
                  if (od < 0 || od >= g.OD) continue;
                  for (int64_t ih = 0; ih < g.H; ++ih) {
                    const int64_t oh = ih * g.sH - g.pt + kh * g.dH;
                    if (oh < 0 || oh >= g.OH) continue;
                    float* yr = yp + (od * g.OH + oh) * g.OW;
                    const float* c = cr + (id * g.H + ih) * g.W;
                    for (int64_t iw = 0; iw < g.W; ++iw) {
                      const int64_t ow = iw * g.sW + offw;
                      if (ow >= 0 && ow < g.OW) yr[ow] += c[iw];
                    }
                  }
                }
              }
        }
      });
    }
}

// ---------------- pools ----------------

// Interior columns [ow_lo, ow_hi) of one output row of a max pool with stride 1 or 2 along W, 8
// at a time in AVX2 registers over all taps (the scalar loops below make one pass over the row
// per tap: GoogLeNet's max pools were a quarter of its time at 2.5 GFLOP/s). The same select as
// theirs: take x when x > acc or x is NaN (a NaN stays). Returns the first column not computed
// (the last chunks, where reading the stride-2 pair's second float would leave the row).
__attribute__((target("avx2"))) int64_t max_row_avx2(const ir::Conv2dGeom& g, const float* xp, int64_t ds, int64_t kd0,
                                                     int64_t kd1, int64_t hs, int64_t kh0, int64_t kh1, int64_t ow_lo,
                                                     int64_t ow_hi, float* yr) {
  auto fits = [&](int64_t o) { return (o + 7) * g.sW - g.pl + (g.kW - 1) * g.dW + (g.sW - 1) <= g.W - 1; };
  int64_t ow = ow_lo;
  for (bool last = false; !last; ow += 8) {
    if (ow + 8 > ow_hi) {  // the tail: one more chunk ending at ow_hi, overlapping the previous one
      if (ow >= ow_hi || ow_hi - 8 < ow_lo || !fits(ow_hi - 8)) break;
      ow = ow_hi - 8;
      last = true;
    }
    if (!fits(ow)) break;
    __m256 acc = _mm256_set1_ps(-INFINITY);
    for (int64_t kd = kd0; kd < kd1; ++kd)
      for (int64_t kh = kh0; kh < kh1; ++kh) {
        const float* xrow = xp + ((ds + kd * g.dD) * g.H + hs + kh * g.dH) * g.W + ow * g.sW - g.pl;
        for (int64_t kw = 0; kw < g.kW; ++kw) {
          const float* xr = xrow + kw * g.dW;
          __m256 v;
          if (g.sW == 1) {
            v = _mm256_loadu_ps(xr);
          } else {  // even elements of 16: [a0 a2 b0 b2 | a4 a6 b4 b6] -> [a0 a2 a4 a6 b0 b2 b4 b6]
            const __m256 e = _mm256_shuffle_ps(_mm256_loadu_ps(xr), _mm256_loadu_ps(xr + 8), 0x88);
            v = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8));
          }
          const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, acc, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
          acc = _mm256_blendv_ps(acc, v, take);
        }
      }
    _mm256_storeu_ps(yr + ow, acc);
  }
  return std::min(ow, ow_hi);
}

// Branch-free inner loops: max as a select (maxss) with NaN tracked on the side (a NaN in the
// window gives NaN, as ONNX Runtime), so random data costs no branch mispredictions.
template <bool IsMax>
void run_pool_t(const Kernel& k, TensorPtr ptr) {
  const ir::Conv2dGeom g = geom(k);
  const float* x = ptr(k.inputs[0]);
  float* y = ptr(k.output);
  const int64_t OHW = g.OH * g.OW, HW = g.H * g.W;
  // One task per (image, channel, output depth) row of planes (OD = 1 in 2-D).
  parallel(g.N * g.C * g.OD, 1, [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q) {
      const int64_t p = q / g.OD, od = q % g.OD;
      const float* xp = x + p * g.D * HW;
      float* yp = y + q * OHW;
      // Depth slices of the window inside the input: [kd0, kd1).
      const int64_t ds = od * g.sD - g.pf;
      const int64_t kd0 = ds >= 0 ? 0 : (-ds + g.dD - 1) / g.dD;
      int64_t kd1 = g.kD;
      while (kd1 > kd0 && ds + (kd1 - 1) * g.dD >= g.D) --kd1;
      // Output columns whose whole window lies inside the row: [ow_lo, ow_hi).
      const int64_t ow_lo = std::min<int64_t>(g.OW, (g.pl + g.sW - 1) / g.sW);
      const int64_t ow_hi = std::max<int64_t>(ow_lo, std::min<int64_t>(g.OW, g.W + g.pl - (g.kW - 1) * g.dW > 0
                                                                               ? (g.W + g.pl - (g.kW - 1) * g.dW - 1) / g.sW + 1
                                                                               : 0));
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        const int64_t hs = oh * g.sH - g.pt;
        const int64_t kh0 = hs >= 0 ? 0 : (-hs + g.dH - 1) / g.dH;
        int64_t kh1 = g.kH;
        while (kh1 > kh0 && hs + (kh1 - 1) * g.dH >= g.H) --kh1;
        float* yr = yp + oh * g.OW;
        const bool interior = IsMax && ow_hi > ow_lo && kh1 > kh0 && kd1 > kd0;
        if (interior) {  // interior columns: row-wise, branch-free
          int64_t start = ow_lo;
          if (IsMax && (g.sW == 1 || g.sW == 2) && isa_avx2_fma())
            start = max_row_avx2(g, xp, ds, kd0, kd1, hs, kh0, kh1, ow_lo, ow_hi, yr);
          float* acc = yr + start;
          const int64_t n = ow_hi - start;
          for (int64_t j = 0; j < n; ++j) acc[j] = -INFINITY;
          for (int64_t kd = kd0; kd < kd1; ++kd)
            for (int64_t kh = kh0; kh < kh1; ++kh)
              for (int64_t kw = 0; kw < g.kW; ++kw) {
                const float* xr = xp + ((ds + kd * g.dD) * g.H + hs + kh * g.dH) * g.W + start * g.sW - g.pl + kw * g.dW;
                if (g.sW == 1) {
                  for (int64_t j = 0; j < n; ++j) acc[j] = (xr[j] > acc[j] || xr[j] != xr[j]) ? xr[j] : acc[j];
                } else if (g.sW == 2) {
                  for (int64_t j = 0; j < n; ++j) acc[j] = (xr[2 * j] > acc[j] || xr[2 * j] != xr[2 * j]) ? xr[2 * j] : acc[j];
                } else {
                  const int64_t st = g.sW;
                  for (int64_t j = 0; j < n; ++j) acc[j] = (xr[st * j] > acc[j] || xr[st * j] != xr[st * j]) ? xr[st * j] : acc[j];
                }
              }
        }
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          if (interior && ow == ow_lo) {
            ow = ow_hi - 1;
            continue;
          }
          const int64_t ws = ow * g.sW - g.pl;
          const int64_t kw0 = ws >= 0 ? 0 : (-ws + g.dW - 1) / g.dW;
          int64_t kw1 = g.kW;
          while (kw1 > kw0 && ws + (kw1 - 1) * g.dW >= g.W) --kw1;
          float acc = IsMax ? -INFINITY : 0.f;
          bool nan = false;
          for (int64_t kd = kd0; kd < kd1; ++kd)
            for (int64_t kh = kh0; kh < kh1; ++kh) {
              const float* xr = xp + ((ds + kd * g.dD) * g.H + hs + kh * g.dH) * g.W + ws;
              for (int64_t kw = kw0; kw < kw1; ++kw) {
                const float v = xr[kw * g.dW];
                if constexpr (IsMax) {
                  acc = v > acc ? v : acc;
                  nan |= v != v;
                } else {
                  acc += v;
                }
              }
            }
          if constexpr (IsMax) yr[ow] = nan ? NAN : acc;
          else yr[ow] = acc / (float)ir::avg_pool_divisor(g, od, oh, ow);
        }
      }
    }
  });
}

void run_pool(const Kernel& k, TensorPtr ptr, bool is_max) {
  if (k.node->op == Op::MaxPool3d || k.node->op == Op::AvgPool3d)
    return pool3d_separable(geom(k), is_max, ptr(k.inputs[0]), ptr(k.output));
  if (is_max) run_pool_t<true>(k, ptr);
  else run_pool_t<false>(k, ptr);
}

// ---------------- resize ----------------

void run_resize(const Kernel& k, TensorPtr ptr) {
  const Shape& xs = k.inputs[0].shape;
  const Shape& ys = k.output.shape;
  const int64_t total = shape_numel(ys);
  if (total == 0) return;
  const ir::ResizePlan plan = ir::resize_plan(*k.node, xs, ys);
  const float* x = ptr(k.inputs[0]);
  float* y = ptr(k.output);
  const int r = (int)xs.size();
  if (r == 0) {
    y[0] = x[0];
    return;
  }
  const auto xst = contiguous_strides(xs);
  const int64_t OW = ys[r - 1], rows = total / OW;
  const ir::ResizeAxis& aw = plan.axes[r - 1];
  // The source offset of output row `row` (every axis but the last), for the first tap (or, along axis r-2 in
  // linear mode, both taps: o0 / o1 with weight wh).
  auto row_offsets = [&](int64_t row, int64_t& o0, int64_t& o1, float& wh) {
    o0 = o1 = 0;
    wh = 0.f;
    for (int a = r - 2; a >= 0; --a) {
      const int64_t c = row % ys[a];
      row /= ys[a];
      const ir::ResizeAxis& ax = plan.axes[a];
      o0 += ax.i0[c] * xst[a];
      o1 += (a == r - 2 ? ax.i1[c] : ax.i0[c]) * xst[a];
      if (a == r - 2) wh = ax.w[c];
    }
  };
  parallel(rows, 16, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t o0, o1;
      float wh;
      row_offsets(row, o0, o1, wh);
      float* yr = y + row * OW;
      if (!plan.linear) {
        const float* xr = x + o0;
        for (int64_t j = 0; j < OW; ++j) yr[j] = xr[aw.i0[j]];
        continue;
      }
      const float* x0 = x + o0;
      const float* x1 = x + o1;
      for (int64_t j = 0; j < OW; ++j) {
        const float ww = aw.w[j];
        const int64_t c0 = aw.i0[j], c1 = aw.i1[j];
        const float top = x0[c0] + ww * (x0[c1] - x0[c0]);
        const float bot = x1[c0] + ww * (x1[c1] - x1[c0]);
        yr[j] = top + wh * (bot - top);
      }
    }
  });
}

}  // namespace

void run_spatial(const Kernel& k, TensorPtr ptr) {
  switch (k.node->op) {
    case Op::Conv2d: case Op::Conv3d: run_conv(k, ptr, nullptr); return;
    case Op::ConvTranspose2d: case Op::ConvTranspose3d: run_conv_transpose2d(k, ptr); return;
    case Op::MaxPool2d: case Op::MaxPool3d: run_pool(k, ptr, true); return;
    case Op::AvgPool2d: case Op::AvgPool3d: run_pool(k, ptr, false); return;
    case Op::Resize: run_resize(k, ptr); return;
    default: break;
  }
  throw RuntimeError(k.label + ": not an op of the convolution family: " + ir::op_name(k.node->op));
}

}  // namespace rlx::cpu
