// Kernels over the blocked channel layout (blocked_ops.h says what and when).
#include "backends/cpu/blocked_ops.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/dnnl_conv.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/thread_pool.h"

namespace rlx::cpu {

using ir::Op;

int64_t blocked_block() { return isa_avx512() ? 16 : 8; }

std::string blocked_kind(const Kernel& k) {
  if (k.fused || !k.node || k.output.dtype != DType::f32 || k.output.shape.size() != 4) return "";
  for (const auto& t : k.inputs)
    if (t.dtype != DType::f32 || t.shape.size() != 4) return "";
  const Shape& ys = k.output.shape;
  switch (k.node->op) {
    case Op::MaxPool2d: case Op::AvgPool2d:
      return k.inputs.size() == 1 ? "pool" : "";
    case Op::Pad: {  // a constant spatial pad (inception_v3's before its average pools)
      const auto& pads = k.node->attrs.ints("pads");
      const std::string mode = k.node->attrs.has("mode") ? k.node->attrs.s("mode") : "constant";
      if (k.inputs.size() != 1 || mode != "constant" || pads.size() != 8 || pads[0] || pads[1] || pads[4] || pads[5])
        return "";
      for (auto p : pads)
        if (p < 0) return "";
      // The fill lands in padding channels too: only a finite one where there are any.
      if (k.inputs[0].shape[1] % blocked_block() && !std::isfinite(k.node->attrs.f("value"))) return "";
      return "pad";
    }
    case Op::Concat: {
      int64_t axis = k.node->attrs.i("axis");
      if (axis < 0) axis += 4;
      if (axis != 1 || k.inputs_in_output) return "";
      for (const auto& t : k.inputs)
        if (t.shape[0] != ys[0] || t.shape[2] != ys[2] || t.shape[3] != ys[3] || t.shape[1] % blocked_block()) return "";
      return "concat";
    }
    case Op::Mean: {
      if (k.inputs.size() != 1 || !k.node->attrs.has("axes")) return "";
      std::vector<char> red(4, 0);
      for (auto a : k.node->attrs.ints("axes")) {
        if (a < -4 || a > 3) return "";
        red[a < 0 ? a + 4 : a] = 1;
      }
      const Shape& xs = k.inputs[0].shape;
      if (red[0] || red[1] || !red[2] || !red[3] || ys[0] != xs[0] || ys[1] != xs[1] || k.output.numel() != xs[0] * xs[1])
        return "";
      return "mean";
    }
    default: return "";
  }
}

bool blocked_finite(const FusedProgram& p) {
  for (const auto& in : p.code) {
    switch (in.kind) {
      case FusedInstr::Load: break;
      case FusedInstr::Const:
        if (!std::isfinite(in.imm)) return false;
        break;
      case FusedInstr::Unary:
        switch (in.op) {
          case EwOp::Neg: case EwOp::Relu: case EwOp::Abs: case EwOp::Tanh: case EwOp::Sigmoid: case EwOp::Floor:
          case EwOp::Ceil: case EwOp::Round: case EwOp::Sign: break;
          default: return false;
        }
        break;
      case FusedInstr::Binary:
        switch (in.op) {
          case EwOp::Add: case EwOp::Sub: case EwOp::Mul: case EwOp::Maximum: case EwOp::Minimum: break;
          default: return false;
        }
        break;
    }
  }
  return true;
}

namespace {

// Rows [r0, r1) of window positions o * s - pad + r * d inside [0, len): the first and one past
// the last window tap that lies inside.
inline void taps(int64_t o, int64_t s, int64_t pad, int64_t d, int64_t k, int64_t len, int64_t& t0, int64_t& t1) {
  const int64_t st = o * s - pad;
  t0 = st >= 0 ? 0 : (-st + d - 1) / d;
  t1 = k;
  while (t1 > t0 && st + (t1 - 1) * d >= len) --t1;
}

// One output row (OW pixels of one block) of a pool; B lanes per pixel.
__attribute__((target("avx512f"))) void pool_row16(const ir::Conv2dGeom& g, bool is_max, const float* xb, int64_t oh,
                                                   float* yr) {
  int64_t kh0, kh1;
  taps(oh, g.sH, g.pt, g.dH, g.kH, g.H, kh0, kh1);
  const int64_t hs = oh * g.sH - g.pt;
  for (int64_t ow = 0; ow < g.OW; ++ow) {
    int64_t kw0, kw1;
    taps(ow, g.sW, g.pl, g.dW, g.kW, g.W, kw0, kw1);
    const int64_t ws = ow * g.sW - g.pl;
    __m512 acc = is_max ? _mm512_set1_ps(-INFINITY) : _mm512_setzero_ps();
    for (int64_t kh = kh0; kh < kh1; ++kh) {
      const float* xr = xb + ((hs + kh * g.dH) * g.W + ws) * 16;
      for (int64_t kw = kw0; kw < kw1; ++kw) {
        const __m512 v = _mm512_loadu_ps(xr + kw * g.dW * 16);
        if (is_max) {  // (v > acc || v is NaN) ? v : acc, as rlx's NCHW kernel
          const __mmask16 m = _mm512_cmp_ps_mask(v, acc, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
          acc = _mm512_mask_mov_ps(acc, m, v);
        } else {
          acc = _mm512_add_ps(acc, v);
        }
      }
    }
    if (!is_max) acc = _mm512_div_ps(acc, _mm512_set1_ps((float)ir::avg_pool_divisor(g, oh, ow)));
    _mm512_storeu_ps(yr + ow * 16, acc);
  }
}

void pool_row(const ir::Conv2dGeom& g, bool is_max, int64_t B, const float* xb, int64_t oh, float* yr) {
  int64_t kh0, kh1;
  taps(oh, g.sH, g.pt, g.dH, g.kH, g.H, kh0, kh1);
  const int64_t hs = oh * g.sH - g.pt;
  for (int64_t ow = 0; ow < g.OW; ++ow) {
    int64_t kw0, kw1;
    taps(ow, g.sW, g.pl, g.dW, g.kW, g.W, kw0, kw1);
    const int64_t ws = ow * g.sW - g.pl;
    float* acc = yr + ow * B;
    for (int64_t j = 0; j < B; ++j) acc[j] = is_max ? -INFINITY : 0.f;
    for (int64_t kh = kh0; kh < kh1; ++kh)
      for (int64_t kw = kw0; kw < kw1; ++kw) {
        const float* v = xb + ((hs + kh * g.dH) * g.W + ws + kw * g.dW) * B;
        for (int64_t j = 0; j < B; ++j) acc[j] = is_max ? ((v[j] > acc[j] || v[j] != v[j]) ? v[j] : acc[j]) : acc[j] + v[j];
      }
    if (!is_max) {
      const float div = (float)ir::avg_pool_divisor(g, oh, ow);
      for (int64_t j = 0; j < B; ++j) acc[j] /= div;
    }
  }
}

}  // namespace

void blocked_pool(const ir::Conv2dGeom& g, bool is_max, const float* x, float* y) {
  const int64_t B = blocked_block(), CB = blocked_padded(g.C) / B, HW = g.H * g.W, OHW = g.OH * g.OW;
  ThreadPool::global().parallel_for(g.N * CB * g.OH, 4, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t oh = r % g.OH, blk = r / g.OH;  // blk: n * CB + cb
      const float* xb = x + blk * HW * B;
      float* yr = y + (blk * OHW + oh * g.OW) * B;
      if (B == 16) pool_row16(g, is_max, xb, oh, yr);
      else pool_row(g, is_max, B, xb, oh, yr);
    }
  });
}

void blocked_pad(const float* x, int64_t N, int64_t C, int64_t H, int64_t W, int64_t pt, int64_t pl, int64_t OH,
                 int64_t OW, float value, float* y) {
  const int64_t B = blocked_block(), CB = blocked_padded(C) / B;
  ThreadPool::global().parallel_for(N * CB * OH, 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t oh = r % OH, blk = r / OH, h = oh - pt;
      float* yr = y + (blk * OH + oh) * OW * B;
      if (h < 0 || h >= H) {
        std::fill(yr, yr + OW * B, value);
        continue;
      }
      std::fill(yr, yr + pl * B, value);
      std::memcpy(yr + pl * B, x + (blk * H + h) * W * B, (size_t)(W * B) * sizeof(float));
      std::fill(yr + (pl + W) * B, yr + OW * B, value);
    }
  });
}

void blocked_concat(const std::vector<const float*>& xs, const std::vector<int64_t>& cs, int64_t N, int64_t HW, float* y) {
  int64_t CT = 0;
  std::vector<int64_t> at;
  for (int64_t c : cs) {
    at.push_back(CT);
    CT += c;
  }
  const int64_t S = (int64_t)xs.size();
  ThreadPool::global().parallel_for(N * S, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / S, i = t % S;
      std::memcpy(y + (n * CT + at[i]) * HW, xs[i] + n * cs[i] * HW, (size_t)(cs[i] * HW) * sizeof(float));
    }
  });
}

namespace {
// acc[j] = the sum over HW pixels of lane j of one 16-channel block, in double (as the loop below).
__attribute__((target("avx512f"))) void block_sum16(const float* xb, int64_t HW, double* acc) {
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  for (int64_t p = 0; p < HW; ++p) {
    const __m512 v = _mm512_loadu_ps(xb + p * 16);
    lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
  }
  _mm512_storeu_pd(acc, lo);
  _mm512_storeu_pd(acc + 8, hi);
}
}  // namespace

void blocked_mean_hw(const float* x, int64_t N, int64_t C, int64_t HW, float* y) {
  const int64_t B = blocked_block(), CB = blocked_padded(C) / B;
  // At least 4096 pixels a chunk: a small map is summed on one thread (no hand-off).
  ThreadPool::global().parallel_for(N * CB, std::max<int64_t>(1, 4096 / std::max<int64_t>(HW, 1)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / CB, cb = t % CB;
      const float* xb = x + t * HW * B;
      double acc[16] = {};
      if (B == 16)
        block_sum16(xb, HW, acc);
      else
        for (int64_t p = 0; p < HW; ++p)
          for (int64_t j = 0; j < B; ++j) acc[j] += xb[p * B + j];
      for (int64_t j = 0; j < B && cb * B + j < C; ++j) y[n * C + cb * B + j] = (float)(HW ? acc[j] / (double)HW : NAN);
    }
  });
}

void blocked_to_nchw(const float* x, int64_t N, int64_t C, int64_t HW, float* y) {
  const int64_t B = blocked_block(), CP = blocked_padded(C), CB = CP / B;
  ThreadPool::global().parallel_for(N * CB, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / CB, cb = t % CB;
      dnnl_from_blocked(x + (n * CP + cb * B) * HW, std::min(B, C - cb * B), HW, B, y + (n * C + cb * B) * HW);
    }
  });
}

}  // namespace rlx::cpu
