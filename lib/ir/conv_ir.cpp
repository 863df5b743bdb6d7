// Shape rules and geometry of the convolution family (see ir/spatial.h).
#include <algorithm>
#include <climits>
#include <cmath>

#include "core/error.h"
#include "ir/op_registry.h"
#include "ir/spatial.h"

namespace rlx::ir {

bool is_spatial(Op op) {
  return op == Op::Conv2d || op == Op::ConvTranspose2d || op == Op::MaxPool2d || op == Op::AvgPool2d ||
         op == Op::Conv3d || op == Op::ConvTranspose3d || op == Op::MaxPool3d || op == Op::AvgPool3d || op == Op::Resize;
}

int spatial_rank(Op op) {
  return op == Op::Conv3d || op == Op::ConvTranspose3d || op == Op::MaxPool3d || op == Op::AvgPool3d ? 3 : 2;
}

namespace {

// Every size and attribute entry stays below 2^31, so index arithmetic never overflows int64.
constexpr int64_t kMaxExtent = INT32_MAX;

[[noreturn]] void bad(const std::string& where, const std::string& what) { throw InputError(where + ": " + what); }

std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Reads a list attribute of exactly `count` entries, each >= lo.
std::vector<int64_t> ints_attr(const Node& n, const char* name, size_t count, int64_t lo, const std::string& where) {
  const auto& v = n.attrs.ints(name);
  if (v.size() != count)
    bad(where, std::string("attribute '") + name + "' must have " + std::to_string(count) + " entries, got " +
                   list_str(v));
  for (auto e : v)
    if (e < lo || e > kMaxExtent)
      bad(where, std::string("attribute '") + name + "' entries must be in [" + std::to_string(lo) + ", 2^31), got " +
                     list_str(v));
  return v;
}

int64_t ceil_div_pos(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Output length of a pooling window sweep (ONNX / PyTorch rule: with ceil_mode, a
// last window that would start past the input and its leading padding is dropped).
int64_t pool_out(int64_t in, int64_t pad0, int64_t pad1, int64_t ext, int64_t s, bool ceil_mode) {
  int64_t span = in + pad0 + pad1 - ext;
  int64_t out = (ceil_mode ? ceil_div_pos(span, s) : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + pad0) --out;
  return out;
}

}  // namespace

Conv2dGeom conv2d_geom(const Node& n, const std::vector<Shape>& ins, const std::string& where) {
  Conv2dGeom g;
  const int nd = spatial_rank(n.op);
  const size_t nds = (size_t)nd;
  g.nd = nd;
  const Shape& x = ins.at(0);
  if (x.size() != nds + 2)
    bad(where, nd == 3 ? "x must be [N, C, D, H, W] (rank 5), got " + shape_str(x)
                       : "x must be [N, C, H, W] (rank 4), got " + shape_str(x));
  for (const Shape& s : ins)
    for (auto d : s)
      if (d > kMaxExtent) bad(where, "dimension " + std::to_string(d) + " of " + shape_str(s) + " is too large (at most 2^31 - 1)");
  // Per spatial axis (the last nd of D, H, W): input, kernel, stride, dilation, pads.
  int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, st[3] = {1, 1, 1}, dl[3] = {1, 1, 1}, p0[3] = {0, 0, 0}, p1[3] = {0, 0, 0};
  int64_t out[3] = {1, 1, 1};
  const int a0 = 3 - nd;  // first active axis
  // "AxBxC" of the active axes of v
  auto dims = [&](const int64_t* v) {
    std::string s;
    for (int a = a0; a < 3; ++a) s += (a > a0 ? "x" : "") + std::to_string(v[a]);
    return s;
  };
  for (int a = 0; a < nd; ++a) in[a0 + a] = x[2 + a];
  g.N = x[0], g.C = x[1];
  auto stv = ints_attr(n, "strides", nds, 1, where);
  auto pads = ints_attr(n, "pads", 2 * nds, 0, where);
  for (int a = 0; a < nd; ++a) st[a0 + a] = stv[a], p0[a0 + a] = pads[a], p1[a0 + a] = pads[nds + a];
  const bool avg = n.op == Op::AvgPool2d || n.op == Op::AvgPool3d;
  if (!avg) {
    auto dv = ints_attr(n, "dilations", nds, 1, where);
    for (int a = 0; a < nd; ++a) dl[a0 + a] = dv[a];
  }
  int64_t ext[3];
  auto set_ext = [&] {
    for (int a = 0; a < 3; ++a) ext[a] = (k[a] - 1) * dl[a] + 1;
  };
  int64_t padded[3];
  for (int a = 0; a < 3; ++a) padded[a] = in[a] + p0[a] + p1[a];
  auto finish = [&] {
    g.D = in[0], g.H = in[1], g.W = in[2];
    g.kD = k[0], g.kH = k[1], g.kW = k[2];
    g.sD = st[0], g.sH = st[1], g.sW = st[2];
    g.dD = dl[0], g.dH = dl[1], g.dW = dl[2];
    g.pf = p0[0], g.pt = p0[1], g.pl = p0[2];
    g.pk = p1[0], g.pb = p1[1], g.pr = p1[2];
    g.OD = out[0], g.OH = out[1], g.OW = out[2];
  };
  const bool pool = avg || n.op == Op::MaxPool2d || n.op == Op::MaxPool3d;
  if (pool) {
    auto kv = ints_attr(n, "kernel", nds, 1, where);
    for (int a = 0; a < nd; ++a) k[a0 + a] = kv[a];
    set_ext();
    g.M = g.C;
    g.ceil_mode = n.attrs.b("ceil_mode");
    if (avg) g.count_include_pad = n.attrs.b("count_include_pad");
    for (int a = a0; a < 3; ++a)
      if (p0[a] >= ext[a] || p1[a] >= ext[a])
        bad(where, "pads " + list_str(pads) + " must each be smaller than the (dilated) window " + dims(ext) +
                       ", or a window could see only padding");
    for (int a = a0; a < 3; ++a)
      if (ext[a] > padded[a])
        bad(where, "the window " + dims(ext) + " is larger than the padded input " + dims(padded));
    for (int a = a0; a < 3; ++a) out[a] = pool_out(in[a], p0[a], p1[a], ext[a], st[a], g.ceil_mode);
    g.groups = g.C;
    g.Cg = g.Mg = 1;
    finish();
    return g;
  }
  // conv / conv_transpose
  if (ins.size() < 2) bad(where, "needs a weight input");
  const Shape& w = ins[1];
  if (w.size() != nds + 2) bad(where, "weight must have rank " + std::to_string(nd + 2) + ", got " + shape_str(w));
  const std::string kdims = nd == 3 ? "kD, kH, kW" : "kH, kW";
  g.groups = n.attrs.i("groups");
  if (g.groups < 1) bad(where, "groups must be >= 1, got " + std::to_string(g.groups));
  if (g.C % g.groups) bad(where, "input channels " + std::to_string(g.C) + " are not divisible by groups " +
                                     std::to_string(g.groups));
  g.Cg = g.C / g.groups;
  for (int a = 0; a < nd; ++a) k[a0 + a] = w[2 + a];
  for (int a = a0; a < 3; ++a)
    if (k[a] < 1) bad(where, "the kernel " + shape_str(w) + " is empty");
  set_ext();
  if (n.op == Op::Conv2d || n.op == Op::Conv3d || n.op == Op::Conv2dIntegerScaled) {
    g.M = w[0];
    if (g.M % g.groups) bad(where, "output channels " + std::to_string(g.M) + " (weight " + shape_str(w) +
                                       ") are not divisible by groups " + std::to_string(g.groups));
    if (w[1] != g.Cg)
      bad(where, "weight " + shape_str(w) + " must be [M, C/groups, " + kdims + "] = [" + std::to_string(g.M) + ", " +
                     std::to_string(g.Cg) + ", " + kdims + "] for x " + shape_str(x) + " and groups " + std::to_string(g.groups));
    g.Mg = g.M / g.groups;
    for (int a = a0; a < 3; ++a)
      if (ext[a] > padded[a])
        bad(where, "the kernel " + dims(ext) + " (with dilation) is larger than the padded input " + dims(padded));
    for (int a = a0; a < 3; ++a) out[a] = (padded[a] - ext[a]) / st[a] + 1;
  } else {
    if (w[0] != g.C)
      bad(where, "weight " + shape_str(w) + " must be [C, M/groups, " + kdims + "] with C = " + std::to_string(g.C) +
                     " (the channels of x " + shape_str(x) + ")");
    g.Mg = w[1];
    g.M = g.Mg * g.groups;
    auto op = ints_attr(n, "output_padding", nds, 0, where);
    for (int a = 0; a < nd; ++a)
      if (op[a] >= std::max(st[a0 + a], dl[a0 + a]))
        bad(where, "output_padding " + list_str(op) + " must be smaller than the stride or the dilation on each axis");
    bool empty = false;
    for (int a = 0; a < nd; ++a) {
      const int b = a0 + a;
      out[b] = st[b] * (in[b] - 1) + op[a] + ext[b] - p0[b] - p1[b];
      empty = empty || in[b] < 1 || out[b] < 1;
    }
    if (empty)
      bad(where, "the output would be " + dims(out) + " (the pads remove more than the transposed convolution produces)");
  }
  g.has_bias = ins.size() >= 3;
  if (g.has_bias && (ins[2].size() != 1 || ins[2][0] != g.M))
    bad(where, "bias must have shape [" + std::to_string(g.M) + "], got " + shape_str(ins[2]));
  finish();
  return g;
}

int64_t avg_pool_divisor(const Conv2dGeom& g, int64_t oh, int64_t ow) { return avg_pool_divisor(g, 0, oh, ow); }

int64_t avg_pool_divisor(const Conv2dGeom& g, int64_t od, int64_t oh, int64_t ow) {
  int64_t ds = od * g.sD - g.pf, hs = oh * g.sH - g.pt, ws = ow * g.sW - g.pl;
  if (g.count_include_pad) {
    int64_t de = std::min(ds + g.kD, g.D + g.pk), he = std::min(hs + g.kH, g.H + g.pb), we = std::min(ws + g.kW, g.W + g.pr);
    return (de - ds) * (he - hs) * (we - ws);
  }
  int64_t de = std::min(ds + g.kD, g.D), he = std::min(hs + g.kH, g.H), we = std::min(ws + g.kW, g.W);
  return (de - std::max<int64_t>(ds, 0)) * (he - std::max<int64_t>(hs, 0)) * (we - std::max<int64_t>(ws, 0));
}

ResizePlan resize_plan(const Node& n, const Shape& in, const Shape& out) {
  ResizePlan p;
  p.linear = n.attrs.s("mode") == "linear";
  const std::string& ct = n.attrs.s("coordinate_transformation_mode");
  const std::string& nm = n.attrs.s("nearest_mode");
  std::vector<double> scales;
  if (n.attrs.has("scales")) scales = n.attrs.floats("scales");
  const size_t r = in.size();
  p.axes.resize(r);
  for (size_t a = 0; a < r; ++a) {
    const int64_t L = in[a], O = out[a];
    const double s = a < scales.size() ? scales[a] : (L > 0 ? (double)O / (double)L : 1.0);
    ResizeAxis& ax = p.axes[a];
    ax.i0.resize(O);
    ax.i1.resize(O);
    ax.w.assign(O, 0.f);
    const bool interp = p.linear && a + 2 >= r;
    for (int64_t o = 0; o < O; ++o) {
      double x = (double)o, c;
      // As ONNX Runtime: an axis whose scale is 1 maps each output coordinate onto itself,
      // whatever the transform (tf_half_pixel_for_nn would otherwise shift it by half a pixel).
      if (s == 1.0) c = x;
      else if (ct == "asymmetric") c = x / s;
      else if (ct == "align_corners") c = O == 1 ? 0.0 : x * (double)(L - 1) / (double)(O - 1);
      else if (ct == "pytorch_half_pixel") c = O > 1 ? (x + 0.5) / s - 0.5 : 0.0;
      else if (ct == "tf_half_pixel_for_nn") c = (x + 0.5) / s;
      else c = (x + 0.5) / s - 0.5;  // half_pixel
      if (interp) {
        c = std::clamp(c, 0.0, (double)(L - 1));
        int64_t i0 = (int64_t)std::floor(c);
        ax.i0[o] = i0;
        ax.i1[o] = std::min<int64_t>(i0 + 1, L - 1);
        ax.w[o] = (float)(c - (double)i0);
      } else if (p.linear) {  // an axis linear mode does not resize: the identity
        ax.i0[o] = ax.i1[o] = o;
      } else {
        double f = std::floor(c), idx;
        if (nm == "floor") idx = f;
        else if (nm == "ceil") idx = std::ceil(c);
        else if (c - f == 0.5) idx = nm == "round_prefer_ceil" ? f + 1 : f;
        else idx = std::round(c);
        int64_t i = (int64_t)std::clamp(idx, 0.0, (double)(L - 1));
        ax.i0[o] = ax.i1[o] = i;
      }
    }
  }
  return p;
}

Shape infer_spatial(const Node& n, const std::vector<Shape>& ins, const std::string& where) {
  if (n.op != Op::Resize) {
    Conv2dGeom g = conv2d_geom(n, ins, where);
    if (g.nd == 3) return {g.N, g.M, g.OD, g.OH, g.OW};
    return {g.N, g.M, g.OH, g.OW};
  }
  const Shape& x = ins.at(0);
  const auto& sizes = n.attrs.ints("sizes");
  if (sizes.size() != x.size())
    bad(where, "sizes " + list_str(sizes) + " must have one entry per axis of x " + shape_str(x));
  for (size_t a = 0; a < x.size(); ++a) {
    if (sizes[a] < 0) bad(where, "sizes " + list_str(sizes) + " has a negative entry");
    if (x[a] == 0 && sizes[a] != 0) bad(where, "cannot resize the empty axis " + std::to_string(a) + " of " + shape_str(x));
  }
  if (n.attrs.has("scales")) {
    auto sc = n.attrs.floats("scales");
    if (sc.size() != x.size())
      bad(where, "scales must have one entry per axis of x " + shape_str(x) + ", got " + std::to_string(sc.size()));
    for (double s : sc)
      if (!(s > 0) || !std::isfinite(s)) bad(where, "scales must be positive, got " + std::to_string(s));
  }
  if (n.attrs.s("mode") == "linear")
    for (size_t a = 0; a + 2 < x.size(); ++a)
      if (sizes[a] != x[a])
        bad(where, "mode \"linear\" interpolates the last two axes only; axis " + std::to_string(a) + " of x " +
                       shape_str(x) + " must keep its size, sizes is " + list_str(sizes));
  return Shape(sizes.begin(), sizes.end());
}

double spatial_flops(const Node& n, const std::vector<Shape>& ins, const Shape& out) {
  double numel = (double)shape_numel(out);
  switch (n.op) {
    case Op::Conv2d: case Op::Conv3d: {
      const Shape& w = ins[1];
      return 2 * numel * (double)(shape_numel(w) / std::max<int64_t>(w[0], 1));
    }
    case Op::ConvTranspose2d: case Op::ConvTranspose3d: {
      const Shape& w = ins[1];
      return 2 * (double)shape_numel(ins[0]) * (double)(shape_numel(w) / std::max<int64_t>(w[0], 1));
    }
    case Op::MaxPool2d: case Op::AvgPool2d: case Op::MaxPool3d: case Op::AvgPool3d: {
      double win = 1;
      for (auto k : n.attrs.ints("kernel")) win *= (double)k;
      return numel * win;
    }
    case Op::Resize: return n.attrs.s("mode") == "linear" ? 7 * numel : 0;
    default: return 0;
  }
}

}  // namespace rlx::ir
