// conv2d_integer_scaled on the CPU (compiled mode's int8 convolution of QDQ models):
//   y[n, m, oh, ow] = f32(sum_{c, kh, kw} (x - x_zp)(w[m] - w_zp[m])) * scale[m] [+ bias[m]]
// as one qgemm per image: A = the image's columns, one row per output pixel ([OH * OW][C * kH
// * kW] bytes, padding written as x_zp so that it contributes 0; channels-last for 16 or more
// channels, below), B = w^T ([C * kH * kW][M], packed once by a compiled plan), the float epilogue (scale per column, bias) in qgemm, and
// the [OH * OW][M] result transposed into NCHW. The integer sum is exact (qgemm.h); the one
// f32 rounding is float(acc) * scale [+ bias], as matmul_integer_scaled's.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/access.h"
#include "backends/cpu/ops_quant.h"
#include "backends/cpu/qgemm.h"
#include "backends/cpu/thread_pool.h"
#include "core/error.h"
#include "ir/spatial.h"

namespace rlx::cpu {

namespace {

ir::Conv2dGeom geom_of(const Kernel& k) {
  std::vector<Shape> ins{k.inputs[0].shape, k.inputs[1].shape};
  if (k.inputs.size() > 5) ins.push_back(k.inputs[5].shape);
  return ir::conv2d_geom(*k.node, ins, k.label);
}

int32_t int_at(const TensorRef& t, int64_t i) { return (int32_t)index_at(t, i); }

// With 16 or more input channels the columns are built channels-last: x is transposed once per
// call to [H * W][C] and each tap of a column row is one copy of C bytes (K ordered kh, kw, c);
// with fewer (a network's first layer) straight from NCHW (K ordered c, kh, kw), each tap a few
// bytes. The packed weight follows the same order.
bool channels_last(int64_t C) { return C >= 16; }

}  // namespace

std::shared_ptr<const PackedQB> pack_qconv_weight(const Kernel& k) {
  const Shape& w = k.inputs[1].shape;
  const int64_t M = w[0], C = w[1], KH = w[2], KW = w[3], K = C * KH * KW;
  std::vector<uint8_t> wt((size_t)(K * M));  // w^T: [K][M]
  const uint8_t* src = bytes(k.inputs[1]);
  const bool cl = channels_last(C);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw = 0; kw < KW; ++kw) {
          const int64_t kk = cl ? (kh * KW + kw) * C + c : (c * KH + kh) * KW + kw;
          wt[kk * M + m] = src[m * K + (c * KH + kh) * KW + kw];
        }
  return pack_qb(wt.data(), stored_dtype(k.inputs[1]) == DType::i8, K, M, M);
}

void run_qconv(const Kernel& k, const PackedQB* packed) {
  const ir::Conv2dGeom g = geom_of(k);
  std::shared_ptr<const PackedQB> own;
  if (!packed) packed = (own = pack_qconv_weight(k)).get();
  const int64_t M = g.M, K = g.C * g.kH * g.kW, P = g.OH * g.OW;
  const bool x_signed = stored_dtype(k.inputs[0]) == DType::i8;
  const int32_t zx = int_at(k.inputs[2], 0);
  std::vector<int32_t> zw((size_t)std::max<int64_t>(k.inputs[3].numel(), 1));
  for (size_t i = 0; i < zw.size(); ++i) zw[i] = int_at(k.inputs[3], (int64_t)i);
  const float* scale = reinterpret_cast<const float*>(bytes(k.inputs[4]));
  QEpilogue ep;
  ep.to_float = true;
  ep.b_scale = scale;
  ep.b_scale_per_col = k.inputs[4].numel() > 1;
  ep.bias = k.inputs.size() > 5 ? reinterpret_cast<const float*>(bytes(k.inputs[5])) : nullptr;
  // Per-call buffers that keep their pages between calls (a plan runs many times).
  thread_local std::vector<uint8_t> cols, xt;
  const bool cl = channels_last(g.C);
  if (cl && xt.size() < (size_t)(g.C * g.H * g.W)) xt.resize((size_t)(g.C * g.H * g.W));
  thread_local std::vector<float> acc;
  if (cols.size() < (size_t)(P * K)) cols.resize((size_t)(P * K));
  if (acc.size() < (size_t)(P * M)) acc.resize((size_t)(P * M));
  const uint8_t pad = (uint8_t)zx;  // the byte of x_zp (i8 or u8)
  const uint8_t* x = bytes(k.inputs[0]);
  float* y = reinterpret_cast<float*>(bytes(k.output));
  auto& pool = ThreadPool::global();
  uint8_t* cp = cols.data();
  float* ap = acc.data();
  for (int64_t n = 0; n < g.N; ++n) {
    const uint8_t* xn = x + n * g.C * g.H * g.W;
    if (cl) {
      // x [C][H * W] -> xt [H * W][C], in 16 x 16 tiles
      const int64_t HW = g.H * g.W, C = g.C;
      uint8_t* t = xt.data();
      pool.parallel_for((HW + 15) / 16, 4, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t q0 = b * 16, q1 = std::min(HW, q0 + 16);
          for (int64_t c0 = 0; c0 < C; c0 += 16) {
            const int64_t c1 = std::min(C, c0 + 16);
            for (int64_t q = q0; q < q1; ++q)
              for (int64_t c = c0; c < c1; ++c) t[q * C + c] = xn[c * HW + q];
          }
        }
      });
      // columns: row p = (oh, ow), entry (kh, kw, c): one copy of C bytes per tap
      pool.parallel_for(P, 8, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t oh = p / g.OW, ow = p % g.OW;
          uint8_t* row = cp + p * K;
          for (int64_t kh = 0; kh < g.kH; ++kh) {
            const int64_t ih = oh * g.sH - g.pt + kh * g.dH;
            for (int64_t kw = 0; kw < g.kW; ++kw) {
              const int64_t iw = ow * g.sW - g.pl + kw * g.dW;
              uint8_t* o = row + (kh * g.kW + kw) * C;
              if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) std::memset(o, pad, (size_t)C);
              else std::memcpy(o, t + (ih * g.W + iw) * C, (size_t)C);
            }
          }
        }
      });
    } else {
    // columns: row p = (oh, ow), entry (c, kh, kw)
    pool.parallel_for(P, 8, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t oh = p / g.OW, ow = p % g.OW;
        uint8_t* row = cp + p * K;
        const int64_t ih0 = oh * g.sH - g.pt, iw0 = ow * g.sW - g.pl;
        for (int64_t c = 0; c < g.C; ++c)
          for (int64_t kh = 0; kh < g.kH; ++kh) {
            const int64_t ih = ih0 + kh * g.dH;
            uint8_t* o = row + (c * g.kH + kh) * g.kW;
            if (ih < 0 || ih >= g.H) {
              for (int64_t kw = 0; kw < g.kW; ++kw) o[kw] = pad;
              continue;
            }
            const uint8_t* xr = xn + (c * g.H + ih) * g.W + iw0;
            // taps [lo, hi) fall inside the row; the others are padding (kernels are a few
            // bytes wide: plain loops, not memcpy calls)
            int64_t lo = 0, hi = g.kW;
            while (lo < hi && iw0 + lo * g.dW < 0) ++lo;
            while (hi > lo && iw0 + (hi - 1) * g.dW >= g.W) --hi;
            for (int64_t kw = 0; kw < lo; ++kw) o[kw] = pad;
            for (int64_t kw = lo; kw < hi; ++kw) o[kw] = xr[kw * g.dW];
            for (int64_t kw = hi; kw < g.kW; ++kw) o[kw] = pad;
          }
      }
    });
    }
    qgemm(P, cp, x_signed, K, &zx, false, *packed, zw.data(), zw.size() > 1, reinterpret_cast<int32_t*>(ap), M, ep);
    // [P][M] -> y[n] as [M][P], in 32 x 32 tiles
    float* yn = y + n * M * P;
    const int64_t mt = (M + 31) / 32;
    pool.parallel_for(mt, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t m0 = t * 32, m1 = std::min(M, m0 + 32);
        for (int64_t p0 = 0; p0 < P; p0 += 32) {
          const int64_t p1 = std::min(P, p0 + 32);
          for (int64_t m = m0; m < m1; ++m)
            for (int64_t p = p0; p < p1; ++p) yn[m * P + p] = ap[p * M + m];
        }
      }
    });
  }
  // The buffers keep their pages for the next call unless they are large (big images).
  if (cols.size() + xt.size() + acc.size() * sizeof(float) > ((size_t)64 << 20)) {
    std::vector<uint8_t>().swap(cols);
    std::vector<uint8_t>().swap(xt);
    std::vector<float>().swap(acc);
  }
}

}  // namespace rlx::cpu
