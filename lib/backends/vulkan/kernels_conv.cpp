// Vulkan lowering of the convolution family: conv2d / conv_transpose2d and their 3-D
// forms (shaders/conv2d.comp), max_pool2d / avg_pool2d and 3d (pool2d.comp) and resize
// (resize.comp). Geometry comes from ir/spatial.h, as on the CPU (2-D: D = kD = 1).
#include <cstring>

#include "backends/vulkan/kernels.h"
#include "core/error.h"
#include "ir/op_registry.h"
#include "ir/spatial.h"

namespace rlx::vk {
namespace {

using ir::Op;

uint32_t u(int64_t v) { return (uint32_t)v; }

[[noreturn]] void fail(const Kernel& k, const std::string& what) {
  throw RuntimeError("Vulkan executor: kernel '" + k.label + "': " + what);
}

ir::Conv2dGeom geom(const Kernel& k) {
  std::vector<Shape> ins;
  for (const auto& t : k.inputs) ins.push_back(t.shape);
  return ir::conv2d_geom(*k.node, ins, k.label);
}

void conv(const SpatialLowering& s, std::vector<Dispatch>& out, bool transpose) {
  const Kernel& k = s.k;
  const ir::Conv2dGeom g = geom(k);
  const int64_t n = k.output.numel();
  if (n == 0) return;
  if (n > UINT32_MAX || k.inputs[0].numel() > UINT32_MAX) fail(k, "tensor too large for 32-bit indexing");
  Dispatch d;
  d.shader = "conv2d";
  d.spec = {transpose ? 1u : 0u, g.has_bias ? 1u : 0u};
  uint32_t xo = s.bind(d, k.inputs[0], false), wo = s.bind(d, k.inputs[1], false);
  uint32_t bo = 0;
  if (g.has_bias) bo = s.bind(d, k.inputs[2], false);
  else d.bindings.push_back(s.env.dummy);
  uint32_t yo = s.bind(d, k.output, true);
  d.push = {u(n),    u(g.C),  u(g.H),  u(g.W),  u(g.M),  u(g.OH), u(g.OW), u(g.kH), u(g.kW), u(g.sH), u(g.sW),
            u(g.dH), u(g.dW), u(g.pt), u(g.pl), u(g.Cg), u(g.Mg), xo,      wo,      bo,      yo,
            u(g.D),  u(g.OD), u(g.kD), u(g.sD), u(g.dD), u(g.pf)};
  s.grid(d, (uint64_t)n, 256);
  out.push_back(std::move(d));
}

void pool(const SpatialLowering& s, std::vector<Dispatch>& out, bool is_max) {
  const Kernel& k = s.k;
  const ir::Conv2dGeom g = geom(k);
  const int64_t n = k.output.numel();
  if (n == 0) return;
  if (n > UINT32_MAX || k.inputs[0].numel() > UINT32_MAX) fail(k, "tensor too large for 32-bit indexing");
  Dispatch d;
  // f16/bf16 x and y: the ".h16" variant reads and writes them as they are (kernels.cpp's
  // native16; before, each was widened into f32 scratch and rounded back: three passes, ResNet-50's
  // max-pool 0.155 ms at batch 32 on the H200). A 2-D window of at most 64 taps is unrolled.
  const uint32_t xk = storage_kind(s.env.dev.caps, k.inputs[0].dtype);
  if (xk != storage_kind(s.env.dev.caps, k.output.dtype) || xk > 2u) fail(k, "pool: x and y of one float dtype");
  const bool unroll = g.D == 1 && g.kD == 1 && g.OD == 1 && g.pf == 0 && g.kH * g.kW <= 64;
  d.shader = xk ? "pool2d.h16" : "pool2d";
  d.spec = {is_max ? 0u : 1u, xk, unroll ? u(g.kH) : 0u, unroll ? u(g.kW) : 0u};
  uint32_t xo = s.bind(d, k.inputs[0], false), yo = s.bind(d, k.output, true);
  d.push = {u(n),    u(g.H),  u(g.W),  u(g.OH), u(g.OW), u(g.kH), u(g.kW), u(g.sH),
            u(g.sW), u(g.dH), u(g.dW), u(g.pt), u(g.pl), u(g.pb), u(g.pr), g.count_include_pad ? 1u : 0u,
            xo,      yo,      u(g.D),  u(g.OD), u(g.kD), u(g.sD), u(g.dD), u(g.pf), u(g.pk)};
  s.grid(d, (uint64_t)n, 256);
  out.push_back(std::move(d));
}

void resize(const SpatialLowering& s, std::vector<Dispatch>& out) {
  const Kernel& k = s.k;
  const Shape& xs = k.inputs[0].shape;
  const Shape& ys = k.output.shape;
  const int64_t n = k.output.numel();
  if (n == 0) return;
  if (xs.size() > 8) fail(k, "resize supports at most 8 axes on Vulkan");
  if (n > UINT32_MAX || k.inputs[0].numel() > UINT32_MAX) fail(k, "tensor too large for 32-bit indexing");
  const ir::ResizePlan plan = ir::resize_plan(*k.node, xs, ys);
  const size_t r = xs.size();
  std::vector<uint32_t> tab(std::max<size_t>(r, 1), 0u);
  for (size_t a = 0; a < r; ++a) {
    tab[a] = (uint32_t)tab.size();
    const auto& ax = plan.axes[a];
    for (size_t o = 0; o < ax.i0.size(); ++o) {
      uint32_t wbits;
      std::memcpy(&wbits, &ax.w[o], 4);
      tab.push_back(u(ax.i0[o]));
      tab.push_back(u(ax.i1[o]));
      tab.push_back(wbits);
    }
  }
  const VulkanBuffer& tb = s.env.const_table(tab);
  TensorRef tref{const_cast<VulkanBuffer*>(&tb), 0, {(int64_t)tab.size()}, DType::f32};
  Dispatch d;
  d.shader = "resize";
  d.spec = {plan.linear ? 1u : 0u};
  uint32_t xo = s.bind(d, k.inputs[0], false), to = s.bind(d, tref, false), yo = s.bind(d, k.output, true);
  d.push = {u(n), u(r), xo, to, yo};
  auto xst = contiguous_strides(xs);
  for (size_t a = 0; a < 8; ++a) d.push.push_back(a < r ? u(ys[a]) : 1u);
  for (size_t a = 0; a < 8; ++a) d.push.push_back(a < r ? u(xst[a]) : 0u);
  s.grid(d, (uint64_t)n, 256);
  out.push_back(std::move(d));
}

}  // namespace

void lower_spatial(const SpatialLowering& s, std::vector<Dispatch>& out) {
  switch (s.k.node->op) {
    case Op::Conv2d: case Op::Conv3d: conv(s, out, false); return;
    case Op::ConvTranspose2d: case Op::ConvTranspose3d: conv(s, out, true); return;
    case Op::MaxPool2d: case Op::MaxPool3d: pool(s, out, true); return;
    case Op::AvgPool2d: case Op::AvgPool3d: pool(s, out, false); return;
    case Op::Resize: resize(s, out); return;
    default: fail(s.k, std::string("not an op of the convolution family: ") + ir::op_name(s.k.node->op));
  }
}

}  // namespace rlx::vk
