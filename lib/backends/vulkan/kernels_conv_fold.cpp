// A 2-D convolution (groups 1, f16/bf16) as one matrix product with the batch folded into its
// columns, for small outputs (ResNet-50's 14x14 and 7x7 layers, 256-2048 channels), on tensor
// cores through VK_NV_cooperative_matrix2:
//   col [K, N*P]  = im2col(x)                          (im2col.comp, KP = 2; P = OH*OW)
//   t   [M, N*P]  = w [M, K] . col + bias              (matmul_cm2, rounded to x's type; split
//                                                        over K where its tiles are few: f32
//                                                        partials [S, M, N*P], no bias)
//   y   [N, M, P] = act(sum_s t_s (+ bias) + residual)  (conv_fold_out.comp)
// or, where the product is not split, y = act(w . col + bias + residual) written by the product
// itself into NCHW (matmul_cm2's YFOLD; session 16, docs/benchmarks.md).
// Unsplit, a folded residual is added to the rounded product and rounded again, as the add
// kernel it replaces would.
// The per-image products of kernels_conv_gemm.cpp have only P = 196 or 49 columns each, so
// their 128- or 64-wide tiles run 23% past the edge and each image's product is small; here the
// product has N*P columns (6272 or 1568 at batch 32) and the tile choice of a plain product.
// RLX_VK_CONV_FOLD=P: outputs of at most P positions take this route (0: none; RLX_VK_CONV=fold:
// every convolution it can run, for tests and comparing). Figures:
// docs/benchmarks.md, session 14.
#include <cstdlib>
#include <string>

#include "backends/vulkan/kernels.h"
#include "ir/spatial.h"

namespace rlx::vk {

bool lower_conv_fold(LowerCtx& L, const ir::Conv2dGeom& g, const TensorRef& x, const TensorRef& w,
                     const TensorRef* bias, const TensorRef& y, const TensorRef* residual, uint32_t act,
                     bool any_shape) {
  const DeviceCaps& c = L.caps();
  const uint32_t xk = storage_kind(c, x.dtype);
  if (!c.cm2 || !is_kind16(xk) || act > 1u) return false;
  const int64_t P = g.OH * g.OW, R = g.N * P, K = g.C * g.kH * g.kW, M = g.M;
  long max_p = 196;
  if (const char* e = std::getenv("RLX_VK_CONV_FOLD"); e && *e) max_p = std::atol(e);
  if (!any_shape && (P > max_p || g.N < 2)) return false;  // one image: the per-image route is the same product
  // A 1x1 convolution of stride 1 without padding: the per-image products read x itself, here x
  // is copied into col first, which costs more than the product saves where x is much larger
  // than y (K > 2M). On the H200 ResNet-50's 2048 -> 512 reductions at 7x7 measured slower
  // folded (0.069 -> 0.078 ms), 1024 -> 256 at 14x14 the same (0.058-0.065 against 0.062), and
  // 1024 -> 512 at 14x14 (0.129 -> 0.088) and the 256 -> 1024 and 512 -> 2048 expansions
  // faster. RLX_VK_CONV_FOLD_DIRECT=0: none of them, =1: all of them (comparing).
  const bool direct = g.kH == 1 && g.kW == 1 && g.sH == 1 && g.sW == 1 && g.pt == 0 && g.pl == 0 && g.OH == g.H &&
                      g.OW == g.W;
  const char* de = std::getenv("RLX_VK_CONV_FOLD_DIRECT");
  const int fold_direct = de && *de ? std::atoi(de) : -1;
  if (!any_shape && direct && (fold_direct == 0 || (fold_direct < 0 && K > 2 * M))) return false;
  const uint64_t es = 2;
  if ((uint64_t)R * K * es > view_budget(c) || (uint64_t)R * M * 4 > view_budget(c)) return false;
  if ((uint64_t)R * K > UINT32_MAX || (uint64_t)R * M > UINT32_MAX || x.numel() > UINT32_MAX) return false;
  const uint32_t biask = bias ? storage_kind(c, bias->dtype) : 0u;
  if (bias && biask > 2u) return false;
  auto u = [](int64_t v) { return (uint32_t)v; };
  auto cdiv = [](uint64_t a, uint64_t b) { return (a + b - 1) / b; };
  if (cdiv(K, 32) > c.max_groups[0] || cdiv(R, 32) > c.max_groups[1]) return false;

  TensorRef col = L.scratch((R * K + 1) / 2);
  col.dtype = x.dtype;
  col.shape = {K, R};
  add_im2col_h16(L, g, x, col, R, K, 2u);

  const TensorRef wv = view_of(c, w, 0, {M, K});
  std::string tile = "256x128x128x64";  // (below)
  if (const char* e = std::getenv("RLX_VK_CONV_FOLD_TILE"); e && *e) tile = e;
  // The product writes y itself (NCHW: matmul_cm2's YFOLD, each tile stored once per image its
  // columns reach), with the bias, the residual and the ReLU, where it is not split over K: no t,
  // no conv_fold_out. RLX_VK_CONV_FOLD_NCHW=0: always through t (session 14); =2: never split,
  // so always straight into y (comparing).
  const char* ne = std::getenv("RLX_VK_CONV_FOLD_NCHW");
  const int nchw = ne && *ne ? std::atoi(ne) : 1;
  const char* t32e = std::getenv("RLX_VK_CONV_FOLD_T32");
  const bool t32 = t32e && *t32e == '1';
  if (nchw > 0 && !t32) {
    MatmulOperands md{wv, col, bias, y, 0u, 0u, M, R, K};
    md.bias_rows = true;
    md.residual = residual;
    md.act = act;
    md.fold_p = P;
    md.fold_unsplit = nchw == 2;
    md.tile = tile;
    if (lower_matmul_tensor_cores(L, md)) return true;
  }

  // t in x's 16-bit type with the bias added by the product, unless it is split over K (f32
  // partials, the bias added by conv_fold_out); RLX_VK_CONV_FOLD_T32=1: always f32, for comparing
  TensorRef t = L.scratch(t32 ? M * R : (M * R + 1) / 2);
  t.dtype = t32 ? DType::f32 : x.dtype;
  t.shape = {M, R};
  TensorRef part;
  uint32_t nsplit = 0;
  MatmulOperands mo{wv, col, t32 ? nullptr : bias, t, 0u, 0u, M, R, K};
  mo.bias_rows = true;
  mo.partials = &part;
  mo.nsplit = &nsplit;
  // 128x128 tiles, 64-deep slices, split over K towards ~120 work groups (kernels_coopmat.cpp):
  // on the H200 these beat the shape-picked 64x64 tiles (layer 3's 3x3 0.131 -> 0.117 ms,
  // layer 4's 0.136 -> 0.101), 128x256 ones, 32-deep slices and no split (docs/benchmarks.md,
  // session 14). RLX_VK_CONV_FOLD_TILE=WGxBMxBNxBK[xUNROLL]: another, for tuning.
  mo.tile = tile;
  if (!lower_matmul_tensor_cores(L, mo)) {
    L.drop_last();  // the im2col
    return false;
  }
  const uint32_t yk = storage_kind(c, y.dtype);
  const bool tsum = t32 || nsplit > 1;  // f32 partials, bias still to add
  Dispatch& o = L.add("conv_fold_out.h16",
                      {bias && tsum ? 1u : 0u, biask, yk, residual ? 1u : 0u, act, tsum ? 0u : storage_kind(c, t.dtype)});
  const uint32_t to = L.read(o, part);
  const uint32_t bo = bias && tsum ? L.read(o, *bias) : (L.bind_dummy(o), 0u);
  const uint32_t yo = L.write(o, y);
  const uint32_t ro = residual ? L.read(o, *residual) : (L.bind_dummy(o), 0u);
  o.push = {u(R * M), u(M), u(P), u(R), nsplit, to, bo, yo, ro};
  L.grid(o, (uint64_t)R * M, 256);
  return true;
}

}  // namespace rlx::vk
