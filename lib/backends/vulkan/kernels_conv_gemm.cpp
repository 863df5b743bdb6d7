// A 2-D convolution (groups 1) as a matrix product, so that it runs on the matmul kernels
// (tiled f32, tensor cores for f16/bf16) instead of conv2d.comp's direct loop (one invocation per
// output, ~0.75 TFLOP/s on an H200: docs/benchmarks.md, issue 30):
//   col [N*OH*OW, C*kH*kW]  = im2col(x)                     (shaders/im2col.comp)
//   t   [N*OH*OW, M]        = linear(col, w viewed [M, K], bias)
//   y   [N, M, OH*OW]       = t viewed [N, OH*OW, M], last two axes swapped (transpose2d.comp)
// col and t are scratch of the recorded stream, in x's and y's storage dtype.
#include <cstdlib>
#include <cstring>

#include "backends/vulkan/kernels.h"
#include "ir/spatial.h"

namespace rlx::vk {

static uint64_t cdiv(int64_t a, int64_t b) { return (uint64_t)((a + b - 1) / b); }

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
  const uint64_t es = xk ? 2 : 4;
  if ((uint64_t)R * K * es > view_budget(c) || (uint64_t)R * M * es > view_budget(c)) return false;
  if (!binds_whole(c, x) || !binds_whole(c, w) || !binds_whole(c, y)) return false;
  if (cdiv(K, 32) > c.max_groups[0] || cdiv(R, 32) > c.max_groups[1]) return false;
  if ((uint64_t)R > UINT32_MAX || (uint64_t)R * K > UINT32_MAX || x.numel() > UINT32_MAX) return false;

  auto scratch = [&](int64_t elems, DType dt, Shape shape) {
    TensorRef s = L.scratch(xk ? (elems + 1) / 2 : elems);
    s.dtype = dt;
    s.shape = std::move(shape);
    return s;
  };
  const TensorRef col = scratch(R * K, x.dtype, {R, K});
  Dispatch& d = L.add(xk ? "im2col.h16" : "im2col", {xk});
  const uint32_t xo = L.read(d, x), co = L.write(d, col);
  auto u = [](int64_t v) { return (uint32_t)v; };
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
