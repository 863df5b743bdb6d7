// A 2-D convolution (groups 1) as a matrix product, so that it runs on the matmul kernels
// (tiled f32, tensor cores for f16/bf16) instead of conv2d.comp's direct loop (one invocation per
// output, ~0.75 TFLOP/s on an H200: docs/benchmarks.md, issue 30):
//   col [N*OH*OW, C*kH*kW]  = im2col(x)                     (shaders/im2col.comp)
//   t   [N*OH*OW, M]        = linear(col, w viewed [M, K], bias)
//   y   [N, M, OH*OW]       = t viewed [N, OH*OW, M], last two axes swapped (transpose2d.comp)
// col and t are scratch of the recorded stream, in x's and y's storage dtype.
// Where 16-bit products run on VK_NV_cooperative_matrix2 (matmul_cm2), each image's product is
// taken the other way round, straight into NCHW with neither t nor the transpose:
//   col [N, K, OH*OW]      = im2col(x)  (none for a 1x1 convolution of stride 1 without padding:
//                                        x itself is [N, C, H*W])
//   y[n] [M, OH*OW]        = w [M, K] . col[n] + bias per row   (one dispatch, z = n)
// Where the device runs the implicit product (kernels_conv_implicit.cpp: f16), col is never
// written: the product gathers its slices from x (RLX_VK_CONV=im2col: the route above, kept for
// comparing). Small outputs (OH*OW <= 196) take one product over the whole batch instead
// (kernels_conv_fold.cpp; RLX_VK_CONV=im2col, implicit or rows, or RLX_VK_CONV_FOLD=0: not;
// RLX_VK_CONV=fold: wherever it can run).
// product_epilogue_for (below) decides, for compiled plans, which consumer of a convolution or
// a linear layer the product takes over (ProductEpilogue, kernels.h).
#include <cstdlib>
#include <cstring>

#include "backends/vulkan/kernels.h"
#include "ir/spatial.h"

namespace rlx::vk {

static uint64_t cdiv(int64_t a, int64_t b) { return (uint64_t)((a + b - 1) / b); }

void add_im2col_h16(LowerCtx& L, const ir::Conv2dGeom& g, const TensorRef& x, const TensorRef& col, int64_t R,
                    int64_t K, uint32_t layout) {
  auto u = [](int64_t v) { return (uint32_t)v; };
  Dispatch& d = L.add("im2col.h16", {storage_kind(L.caps(), x.dtype), layout});
  const uint32_t xo = L.read(d, x), co = L.write(d, col);
  d.push = {u(R),    u(K),    u(g.C),  u(g.H),  u(g.W),  u(g.OH), u(g.OW), u(g.kH), u(g.kW),
            u(g.sH), u(g.sW), u(g.dH), u(g.dW), u(g.pt), u(g.pl), xo,      co};
  d.groups[0] = (uint32_t)((K + 31) / 32);
  d.groups[1] = (uint32_t)((R + 31) / 32);
}

// Runs `route(out, residual, act)` with the convolution's consumer folded in (executor.cpp's
// ProductEpilogue), where the consumer's tensors bind whole like y; else (or where that route does
// not take it) plainly into y. True where either lowered.
template <class Route>
static bool with_epilogue_or_plain(LowerCtx& L, const TensorRef& y, Route&& route) {
  const DeviceCaps& c = L.caps();
  ProductEpilogue* epi = L.product_epilogue();
  if (epi && binds_whole(c, epi->out) && (!epi->residual || binds_whole(c, *epi->residual)) &&
      route(epi->out, epi->residual, epi->act))
    return epi->done = true;
  return route(y, nullptr, 0u);
}

bool lower_conv_gemm(LowerCtx& L) {
  const Kernel& k = L.kernel();
  if (!k.node || k.node->op != ir::Op::Conv2d || k.inputs.size() < 2) return false;
  if (const char* e = std::getenv("RLX_VK_CONV"); e && std::strcmp(e, "direct") == 0) return false;
  const DeviceCaps& c = L.caps();
  std::vector<Shape> shapes;
  for (const auto& t : k.inputs) shapes.push_back(t.shape);
  const ir::Conv2dGeom g = ir::conv2d_geom(*k.node, shapes, k.label);
  if (g.nd != 2 || g.groups != 1) return false;
  const TensorRef &x = k.inputs[0], &w = k.inputs[1], &y = k.output;
  const uint32_t xk = storage_kind(c, x.dtype);
  if (xk != 0u && !is_kind16(xk)) return false;  // bytes: the direct loop widens them
  if (storage_kind(c, w.dtype) != xk || storage_kind(c, y.dtype) != xk) return false;
  if (g.has_bias && storage_kind(c, k.inputs[2].dtype) != xk) return false;
  const int64_t P = g.OH * g.OW, R = g.N * P, K = g.C * g.kH * g.kW, M = g.M;
  if (R == 0 || M == 0 || K == 0) return false;
  // Scratch larger than one binding, or a grid too large: the direct loop.
  const uint64_t es = xk ? 2 : 4, budget = view_budget(c);
  if (!binds_whole(c, x) || !binds_whole(c, w) || !binds_whole(c, y)) return false;
  if ((uint64_t)R * K * es > budget || (uint64_t)R * M * es > budget) {
    // f32: this route over groups of images whose im2col matrix and product fit, each a
    // convolution of its own (Keypoint R-CNN's head, [100, 512, 14, 14] by 3x3, has a 361 MB
    // matrix: lavapipe's 128 MiB binding left it to the direct loop at 0.5-0.9 GFLOP/s)
    const uint64_t per_image = (uint64_t)P * std::max(K, M) * es;
    if (xk != 0u || L.product_epilogue() || g.N < 2 || per_image > budget) return false;
    const int64_t nb = (int64_t)std::min<uint64_t>((uint64_t)g.N, budget / per_image);
    for (int64_t i0 = 0; i0 < g.N; i0 += nb) {
      const int64_t n = std::min(nb, g.N - i0);
      Kernel sub = k;
      sub.inputs[0] = view_of(c, x, i0 * g.C * g.H * g.W, {n, g.C, g.H, g.W});
      sub.output = view_of(c, y, i0 * M * P, {n, M, g.OH, g.OW});
      L.lower_sub(sub);
    }
    return true;
  }
  if (cdiv(K, 32) > c.max_groups[0] || cdiv(R, 32) > c.max_groups[1]) return false;
  if ((uint64_t)R > UINT32_MAX || (uint64_t)R * K > UINT32_MAX || x.numel() > UINT32_MAX) return false;

  auto scratch = [&](int64_t elems, DType dt, Shape shape) {
    TensorRef s = L.scratch(xk ? (elems + 1) / 2 : elems);
    s.dtype = dt;
    s.shape = std::move(shape);
    return s;
  };
  auto u = [](int64_t v) { return (uint32_t)v; };

  const char* route = std::getenv("RLX_VK_CONV");
  // Output positions per image (P) not a multiple of 8 put the product on matmul_cm2's clamped
  // loads (unaligned rows); ResNet-50's 14x14 and 7x7 layers still ran 3.13 ms on this route
  // against 3.21 ms on the row-major one (H200, f16, batch 32), before their ReLUs were folded
  // in. RLX_VK_CONV=rows: the row-major route (im2col rows, product, transpose back).
  const bool rows = route && std::strcmp(route, "rows") == 0;
  if (xk != 0u && c.cm2 && !rows && (uint64_t)g.N * M * P <= UINT32_MAX) {
    const bool direct = g.kH == 1 && g.kW == 1 && g.sH == 1 && g.sW == 1 && g.pt == 0 && g.pl == 0 &&
                        g.OH == g.H && g.OW == g.W;
    // The implicit product (kernels_conv_implicit.cpp): col's slices gathered from x inside the
    // product, no im2col matrix, where it measured faster (RLX_VK_CONV=implicit: wherever it
    // can run); RLX_VK_CONV=im2col: the im2col route below, for comparing.
    // Small outputs (14x14, 7x7): one product over the whole batch (kernels_conv_fold.cpp)
    // (RLX_VK_CONV=fold: wherever it can run)
    const bool fold_any = route && std::strcmp(route, "fold") == 0;
    if (!route || std::strcmp(route, "default") == 0 || fold_any) {
      const TensorRef* b = g.has_bias ? &k.inputs[2] : nullptr;
      if (with_epilogue_or_plain(L, y, [&](const TensorRef& out, const TensorRef* residual, uint32_t act) {
            return lower_conv_fold(L, g, x, w, b, out, residual, act, fold_any);
          }))
        return true;
    }
    if (!direct && !(route && std::strcmp(route, "im2col") == 0)) {
      const bool any = route && std::strcmp(route, "implicit") == 0;
      const TensorRef* b = g.has_bias ? &k.inputs[2] : nullptr;
      if (with_epilogue_or_plain(L, y, [&](const TensorRef& out, const TensorRef* residual, uint32_t act) {
            return lower_conv_implicit(L, g, x, w, b, out, residual, act, any);
          }))
        return true;
    }
    TensorRef col = x;
    if (!direct) {
      col = scratch(R * K, x.dtype, {g.N, K, P});
      add_im2col_h16(L, g, x, col, R, K, 1u);
    }
    const TensorRef wv = view_of(c, w, 0, {M, K});
    auto product = [&](const TensorRef& out, const TensorRef* residual, uint32_t act) {
      MatmulOperands mo{wv, col, g.has_bias ? &k.inputs[2] : nullptr, out, 0u, 0u, M, P, K};
      mo.batch = g.N;
      mo.bbat = K * P;
      mo.ybat = M * P;
      mo.bias_rows = true;
      mo.residual = residual;
      mo.act = act;
      // RLX_VK_CONV_1X1_TILE=WGxBMxBNxBK[xUNROLL]: the tile of the 1x1 stride-1 convolutions'
      // per-image products (tuning only; RLX_VK_CM2 sets every product's)
      if (const char* e = std::getenv("RLX_VK_CONV_1X1_TILE"); e && *e && direct) mo.tile = e;
      return lower_matmul_tensor_cores(L, mo);
    };
    if (with_epilogue_or_plain(L, y, product)) return true;
    if (!direct) L.drop_last();  // no tile fits: the row-major route below
  }
  const TensorRef col = scratch(R * K, x.dtype, {R, K});
  Dispatch& d = L.add(xk ? "im2col.h16" : "im2col", {xk});
  const uint32_t xo = L.read(d, x), co = L.write(d, col);
  d.push = {u(R),    u(K),    u(g.C),  u(g.H),  u(g.W),  u(g.OH), u(g.OW), u(g.kH), u(g.kW),
            u(g.sH), u(g.sW), u(g.dH), u(g.dW), u(g.pt), u(g.pl), xo,      co};
  d.groups[0] = (uint32_t)cdiv(K, 32);
  d.groups[1] = (uint32_t)cdiv(R, 32);

  ir::Node lin;
  lin.id = k.node->id;
  lin.op = ir::Op::Linear;
  const TensorRef t = scratch(R * M, y.dtype, {R, M});
  std::vector<TensorRef> ins = {col, view_of(c, w, 0, {M, K})};
  if (g.has_bias) ins.push_back(k.inputs[2]);
  Kernel sub = k;
  sub.node = &lin;
  sub.inputs = std::move(ins);
  sub.output = t;
  L.lower_sub(sub);

  ir::Node tr;
  tr.id = k.node->id;
  tr.op = ir::Op::Transpose;
  tr.attrs.values["perm"] = std::vector<int64_t>{0, 2, 1};
  Kernel back = k;
  back.node = &tr;
  back.inputs = {view_of(c, t, 0, {g.N, P, M})};
  back.output = view_of(c, y, 0, {g.N, M, P});
  L.lower_sub(back);
  return true;
}

}  // namespace rlx::vk

namespace rlx::vk {
namespace {

bool overlaps(const DeviceCaps& c, const TensorRef& a, const TensorRef& b) {
  if (!a.buf || a.buf != b.buf) return false;
  const uint64_t ae = a.offset + device_bytes(c, a), be = b.offset + device_bytes(c, b);
  return a.offset < be && b.offset < ae;
}
bool same(const DeviceCaps& c, const TensorRef& a, const TensorRef& b) {
  return a.buf == b.buf && a.offset == b.offset && a.dtype == b.dtype && device_bytes(c, a) == device_bytes(c, b);
}

// The input loaded by register `r` of `p`, or -1.
int loaded(const FusedProgram& p, int32_t r) {
  if (r < 0 || r >= (int32_t)p.code.size() || p.code[r].kind != FusedInstr::Load) return -1;
  return p.code[r].a;
}

}  // namespace

bool product_epilogue_for(const DeviceCaps& c, const std::vector<Kernel>& ks, size_t i, ProductEpilogue& epi) {
  const char* env = std::getenv("RLX_VK_EPILOGUE");
  if (env && *env == '0') return false;
  if (i + 1 >= ks.size() || !c.cm2) return false;
  const Kernel &k = ks[i], &f = ks[i + 1];
  if (!k.node || k.fused || (k.node->op != ir::Op::Conv2d && k.node->op != ir::Op::Linear) || k.graph_output)
    return false;
  // GELU folded into the product (matmul_cm2's ACT 2/3) made ViT-S/16's MLP products slower than
  // the gelu kernel it saved, every way tried (H200, f16, 12 fc1 products): applied per element
  // in the epilogue (RLX_VK_CM2_ACTS=0), 1.455 -> 2.012 ms in session 12 and device 4.99 -> 5.15
  // ms for the model in session 16; after the rounding, over the tile read back from y (ACTS 2,
  // the default for a folded GELU), fc1 + gelu 0.095 -> 0.122 ms a layer, device 4.96 -> 5.28 ms,
  // or staged in shared memory (ACTS 1) fc1 0.233 ms, device 6.76 ms (docs/benchmarks.md,
  // session 16). So only with RLX_VK_EPILOGUE=gelu, for measuring (`nogelu`, the default, never).
  const bool gelu = env && std::strcmp(env, "gelu") == 0;
  // The consumer: act(sum) or sum, sum being one input or the add of two (`ins`)
  auto act_of = [](EwOp op) { return op == EwOp::Relu ? 1u : op == EwOp::GeluErf ? 2u : op == EwOp::GeluTanh ? 3u : 0u; };
  std::vector<int> ins;
  uint32_t act = 0;
  if (!f.fused) {  // a lone node
    if (!f.node || (f.node->op == ir::Op::Gelu && !gelu)) return false;
    const ir::Op op = f.node->op;
    if ((op == ir::Op::Relu || op == ir::Op::Gelu) && f.inputs.size() == 1) {
      act = op == ir::Op::Relu ? 1u : f.node->attrs.s("approximate") == "tanh" ? 3u : 2u;
      ins = {0};
    } else if (op == ir::Op::Add && f.inputs.size() == 2) {
      ins = {0, 1};
    } else {
      return false;
    }
  } else {
    const FusedProgram& p = *f.fused;
    if (p.result < 0 || p.result >= (int)p.code.size()) return false;
    int32_t r = p.result;
    if (p.code[r].kind == FusedInstr::Unary) {
      act = act_of(p.code[r].op);
      if (!act || (act >= 2 && !gelu)) return false;
      r = p.code[r].a;
    }
    if (int a = loaded(p, r); a >= 0 && act) {
      ins = {a};
    } else if (r >= 0 && r < (int)p.code.size() && p.code[r].kind == FusedInstr::Binary && p.code[r].op == EwOp::Add) {
      ins = {loaded(p, p.code[r].a), loaded(p, p.code[r].b)};
      if (ins[0] < 0 || ins[1] < 0 || ins[0] == ins[1]) return false;
    } else {
      return false;
    }
  }
  if (f.inputs.size() != ins.size()) return false;
  // The consumer's operands and result all of one shape (no broadcasting) holding the product's
  // elements in its order: the product's shape, or a reshape of it (ViT's out projection
  // [S*B, E] read by the residual add as [B, S, E] once attention_views took the transpose).
  const bool as_product = shape_numel(f.output.shape) == shape_numel(k.output.shape);
  int from_conv = -1;
  for (int q : ins) {
    if (q >= (int)f.inputs.size() || f.inputs[q].shape != f.output.shape || f.inputs[q].dtype != k.output.dtype)
      return false;
    if (same(c, f.inputs[q], k.output)) from_conv = q;
  }
  if (from_conv < 0 || !as_product || f.output.dtype != k.output.dtype) return false;
  // Nothing else reads the convolution's result; the consumer's output is none of the
  // convolution's inputs (it is written a kernel earlier), and equals or misses the residual.
  // (The memory plan reuses bytes: a later kernel reads the convolution's value where it reads
  // bytes of it that no kernel since has overwritten.)
  std::vector<std::pair<uint64_t, uint64_t>> live = {{k.output.offset, k.output.offset + device_bytes(c, k.output)}};
  for (size_t j = i + 1; j < ks.size() && !live.empty(); ++j) {
    if (j > i + 1)
      for (const TensorRef& t : ks[j].inputs)
        for (const auto& [lo, hi] : live)
          if (t.buf == k.output.buf && t.offset < hi && lo < t.offset + device_bytes(c, t)) return false;
    const TensorRef& w = ks[j].output;
    if (w.buf != k.output.buf) continue;
    const uint64_t wl = w.offset, wh = w.offset + device_bytes(c, w);
    std::vector<std::pair<uint64_t, uint64_t>> rest;
    for (const auto& [lo, hi] : live) {
      if (lo < wl) rest.push_back({lo, std::min(hi, wl)});
      if (hi > wh) rest.push_back({std::max(lo, wh), hi});
    }
    live = std::move(rest);
  }
  for (const TensorRef& t : k.inputs)
    if (overlaps(c, t, f.output)) return false;
  const TensorRef* res = ins.size() == 2 ? &f.inputs[ins[0] == from_conv ? ins[1] : ins[0]] : nullptr;
  if (res && overlaps(c, *res, f.output) && !same(c, *res, f.output)) return false;
  if (res && overlaps(c, *res, k.output)) return false;
  epi.out = f.output;
  epi.residual = res;
  epi.act = act;
  epi.done = false;
  return true;
}

}  // namespace rlx::vk
