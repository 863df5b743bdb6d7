// Lowering of the ONNX-style ops on Vulkan: min/prod reductions (reduce_ext.comp), where
// (where.comp), argmax/argmin/cumsum/topk (axis_op.comp), gather/gather_elements
// (gather.comp, out-of-range indices reported through the error flag), slice (the strided
// copy of unary.comp), pad (pad.comp) and trilu (trilu.comp). Values are f32 on the device,
// except i8/u8 (bytes), which where, gather/gather_elements, slice and pad read and write
// directly (storage kinds 3/4); the other ops here see them widened to f32 (kernels.cpp).
#include <algorithm>
#include <cstring>

#include "backends/vulkan/ew_glsl.h"
#include "backends/vulkan/kernels.h"
#include "core/error.h"
#include "ir/op_registry.h"

namespace rlx::vk {
namespace {

using ir::Op;

void push_array(Dispatch& d, const std::vector<int64_t>& v, size_t n) {
  for (size_t i = 0; i < n; ++i) d.push.push_back(i < v.size() ? (uint32_t)v[i] : 0u);
}

int axis_attr(const Kernel& k, const char* name, int rank) {
  int64_t a = k.node->attrs.i(name);
  return (int)(a < 0 ? a + rank : a);
}



void check_u32(LowerCtx& L, int64_t n) {
  if (n >= ((int64_t)1 << 32)) L.fail("a tensor of " + std::to_string(n) + " elements is too large for 32-bit indexing");
}

// One pass of min (op 0) / prod (op 1) of x over rd/rs (groups of reduced dims) for each of the
// nout outputs kd/ks, over chunks of `chunk` reduced elements, into y[output * nchunks + chunk]:
// an invocation per chunk (reduce_ext.comp), or with `wg` a work group of 256 per chunk
// (reduce_ext_wg.comp, whose chunk is wg_chunk()).
void reduce_ext_pass(LowerCtx& L, uint32_t op, const TensorRef& x, const TensorRef& y, const Strides& kd,
                     const Strides& ks, const Strides& rd, const Strides& rs, int64_t nout, int64_t nred, int64_t chunk,
                     bool wg = false) {
  const int64_t nchunks = chunk > 0 ? (nred + chunk - 1) / chunk : 1;  // nred 0: one empty chunk, the identity
  std::vector<uint32_t> spec = {(uint32_t)kd.size(), (uint32_t)rd.size(), op};
  if (wg) spec.push_back((uint32_t)(chunk / 256));
  Dispatch& d = L.add(wg ? "reduce_ext_wg" : "reduce_ext", spec);
  uint32_t xo = L.read(d, x), yo = L.write(d, y);
  d.push = {(uint32_t)nout, (uint32_t)nred, xo, yo};
  push_array(d, kd, 4);
  push_array(d, ks, 4);
  push_array(d, rd, 4);
  push_array(d, rs, 4);
  if (!wg) d.push.push_back((uint32_t)chunk);
  d.push.push_back((uint32_t)nchunks);
  if (wg) L.grid(d, (uint64_t)(nout * nchunks) * 256, 256);
  else L.grid(d, (uint64_t)(nout * nchunks), 64);
}

// min (OP 0) / prod (OP 1) over axes: one invocation per output; over more than kMaxWalk reduced
// elements, by kernels.h's long route: one invocation (serial, reduce_ext.comp) or one work
// group (wg, reduce_ext_wg.comp) per (output, chunk of serial_chunk() or wg_chunk()), then the
// chunks' results reduced the same way until one per output is left.
void min_prod(LowerCtx& L) {
  const Kernel& k = L.kernel();
  const TensorRef& x = k.inputs[0];
  const Shape& xs = x.shape;
  auto [kd, ks, rd, rs, last_reduced] = reduce_groups(xs, k.node->attrs);
  if (kd.size() > 4 || rd.size() > 4) L.fail("more than 4 kept or reduced dim groups after collapsing");
  int64_t nout = k.output.numel(), nred = shape_numel(Shape(rd.begin(), rd.end()));
  if (nout == 0) return;
  check_u32(L, x.numel());
  const uint32_t op = k.node->op == Op::Min ? 0u : 1u;
  if (nred <= long_from()) return reduce_ext_pass(L, op, x, k.output, kd, ks, rd, rs, nout, nred, nred);
  const bool wg = long_wg(L.caps());
  const int64_t chunk = wg ? wg_chunk(L.caps(), false) : serial_chunk();
  auto pass = [&](const TensorRef& in, const TensorRef& out, const Strides& kdim, const Strides& kstr,
                  const Strides& rdim, const Strides& rstr, int64_t len) {
    reduce_ext_pass(L, op, in, out, kdim, kstr, rdim, rstr, nout, len, wg ? chunk : std::min(len, chunk), wg);
  };
  int64_t n = (nred + chunk - 1) / chunk;
  check_u32(L, nout * n);
  TensorRef part = L.scratch(nout * n);
  pass(x, part, kd, ks, rd, rs, nred);
  while (true) {  // part: [nout, n], reduced along its rows
    const int64_t m = (n + chunk - 1) / chunk;
    const TensorRef next = m == 1 ? k.output : L.scratch(nout * m);
    pass(part, next, {nout}, {n}, {n}, {1}, n);
    if (m == 1) return;
    part = next;
    n = m;
  }
}

void where(LowerCtx& L) {
  const Kernel& k = L.kernel();
  const Shape& os = k.output.shape;
  if (k.output.numel() == 0) return;
  check_u32(L, k.output.numel());
  Collapsed c = collapse(os, {broadcast_strides(k.inputs[0].shape, os), broadcast_strides(k.inputs[1].shape, os),
                              broadcast_strides(k.inputs[2].shape, os)});
  if (c.dims.size() > 6) L.fail("where over more than 6 dims after collapsing");
  const DeviceCaps& caps = L.caps();
  Dispatch& d = L.add("where", {(uint32_t)c.dims.size(), storage_kind(caps, k.inputs[0].dtype),
                                storage_kind(caps, k.inputs[1].dtype), storage_kind(caps, k.inputs[2].dtype),
                                storage_kind(caps, k.output.dtype)});
  uint32_t co = L.read(d, k.inputs[0]), xo = L.read(d, k.inputs[1]), yo = L.read(d, k.inputs[2]);
  uint32_t oo = L.write(d, k.output);
  d.push = {(uint32_t)k.output.numel(), co, xo, yo, oo};
  push_array(d, c.dims, 6);
  for (int j = 0; j < 3; ++j) push_array(d, c.strides[j], 6);
  L.grid(d, k.output.numel(), 256);
}

// argmax (0), argmin (1), cumsum (2): one invocation per line along the axis; topk (3): one per
// element, which walks the line. Lines longer than kMaxWalk: kernels_long.cpp.
void axis_op(LowerCtx& L, uint32_t op) {
  const Kernel& k = L.kernel();
  const TensorRef& x = k.inputs[0];
  const auto& a = k.node->attrs;
  Axis3 v = around(x.shape, axis_attr(k, "axis", (int)x.shape.size()));
  int64_t lines = v.outer * v.inner, K = 0;
  uint32_t flags = 0;
  switch (op) {
    case 0: case 1: flags = a.b("select_last_index") ? 1u : 0u; break;
    case 2: flags = (a.b("exclusive") ? 1u : 0u) | (a.b("reverse") ? 2u : 0u); break;
    case 3:
      K = a.i("k");
      flags = (a.b("largest") ? 1u : 0u) | (a.s("select") == "indices" ? 2u : 0u);
      break;
  }
  if (lines == 0 || k.output.numel() == 0) return;
  check_u32(L, x.numel());
  if (v.len > (op == 3 ? kMaxWalk : long_from())) return lower_axis_long(L, op, v, K, flags);
  Dispatch& d = L.add("axis_op", {op});
  uint32_t xo = L.read(d, x), yo = L.write(d, k.output);
  d.push = {(uint32_t)lines, (uint32_t)v.len, (uint32_t)v.inner, (uint32_t)K, xo, yo, flags};
  if (op == 3) {  // topk: one invocation per element, which writes itself at its rank
    check_u32(L, lines * v.len);
    L.grid(d, lines * v.len, 64);
  } else {
    L.grid(d, lines, 64);
  }
}

// gather (MODE 0) and gather_elements (MODE 1); bad indices set the error flag.
void gather(LowerCtx& L, bool elements) {
  const Kernel& k = L.kernel();
  const TensorRef &data = k.inputs[0], &idx = k.inputs[1];
  const int r = (int)data.shape.size(), axis = axis_attr(k, "axis", r);
  const int64_t n = k.output.numel();
  if (n == 0) return;
  check_u32(L, n);
  check_u32(L, data.numel());
  Axis3 v = around(data.shape, axis);
  const DeviceCaps& caps = L.caps();
  Dispatch& d = L.add("gather", {elements ? 1u : 0u, (uint32_t)r, storage_kind(caps, data.dtype),
                                 storage_kind(caps, idx.dtype), storage_kind(caps, k.output.dtype)});
  uint32_t dof = L.read(d, data), io = L.read(d, idx);
  L.bind_error(d);
  uint32_t yo = L.write(d, k.output);
  d.push = {(uint32_t)n, (uint32_t)v.len, dof, io, yo, L.kernel_id(), (uint32_t)idx.numel(), (uint32_t)v.inner,
            (uint32_t)axis};
  if (elements) {
    push_array(d, idx.shape, 8);
    push_array(d, contiguous_strides(data.shape), 8);
  }
  L.grid(d, n, 256);
}

void slice(LowerCtx& L) {
  const Kernel& k = L.kernel();
  const Shape& xs = k.inputs[0].shape;
  std::string err;
  auto plan = ir::slice_plan(k.node->attrs, xs, &err);
  if (!err.empty()) L.fail(err);
  Strides cs = contiguous_strides(xs), st(xs.size());
  int64_t base = 0;
  for (size_t d = 0; d < xs.size(); ++d) {
    base += plan[d].start * cs[d];
    st[d] = plan[d].step * cs[d];
  }
  check_u32(L, k.inputs[0].numel());
  // Negative strides wrap in the shader's 32-bit arithmetic and land on the right element.
  L.strided(k.inputs[0], base, st, k.output, 0, contiguous_strides(k.output.shape), k.output.shape, kEwIdentity, 0);
}

void pad(LowerCtx& L) {
  const Kernel& k = L.kernel();
  const TensorRef& x = k.inputs[0];
  const int r = (int)x.shape.size();
  if (r > 8) L.fail("pad supports rank <= 8");
  const int64_t n = k.output.numel();
  if (n == 0) return;
  check_u32(L, n);
  const std::string& mode = k.node->attrs.s("mode");
  uint32_t m = mode == "constant" ? 0u : mode == "edge" ? 1u : 2u;
  const auto& pads = k.node->attrs.ints("pads");
  Dispatch& d = L.add("pad", {(uint32_t)std::max(r, 1), m, storage_kind(L.caps(), x.dtype),
                              storage_kind(L.caps(), k.output.dtype)});
  // An empty input (padded with constants only) binds the dummy buffer.
  uint32_t xo = L.read(d, x), yo = L.write(d, k.output);
  d.push = {(uint32_t)n, xo, yo, f2u((float)k.node->attrs.f("value"))};
  Shape od = k.output.shape, id = x.shape;
  std::vector<int64_t> begin(pads.begin(), pads.begin() + r);
  if (r == 0) od = id = {1}, begin = {0};
  push_array(d, od, 8);
  push_array(d, id, 8);
  push_array(d, begin, 8);
  L.grid(d, n, 256);
}

void trilu(LowerCtx& L) {
  const Kernel& k = L.kernel();
  const Shape& xs = k.inputs[0].shape;
  const int64_t n = k.output.numel();
  if (n == 0) return;
  check_u32(L, n);
  Dispatch& d = L.add("trilu", {});
  uint32_t xo = L.read(d, k.inputs[0]), yo = L.write(d, k.output);
  d.push = {(uint32_t)n, (uint32_t)xs[xs.size() - 2], (uint32_t)xs.back(), (uint32_t)(int32_t)std::clamp<int64_t>(k.node->attrs.i("k"), -(1 << 30), 1 << 30),
            k.node->attrs.b("upper") ? 1u : 0u, xo, yo};
  L.grid(d, n, 256);
}

}  // namespace

bool lower_index_op(LowerCtx& L) {
  const Kernel& k = L.kernel();
  if (!k.node) return false;
  switch (k.node->op) {
    case Op::Min: case Op::Prod: min_prod(L); return true;
    case Op::Where: where(L); return true;
    case Op::ArgMax: axis_op(L, 0); return true;
    case Op::ArgMin: axis_op(L, 1); return true;
    case Op::CumSum: axis_op(L, 2); return true;
    case Op::TopK: axis_op(L, 3); return true;
    case Op::Gather: gather(L, false); return true;
    case Op::GatherElements: gather(L, true); return true;
    case Op::Slice: slice(L); return true;
    case Op::Pad: pad(L); return true;
    case Op::Trilu: trilu(L); return true;
    default: return false;
  }
}

}  // namespace rlx::vk
