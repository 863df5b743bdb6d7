// Tensors larger than one storage-buffer binding (issue 30). A descriptor covers at most
// maxStorageBufferRange bytes (128 MiB on lavapipe and many mobile GPUs; RLX_VK_MAX_BINDING_BYTES
// can lower it for tests), while a buffer, and so a tensor, may be larger. Instead of teaching
// every shader to index across several descriptors, a kernel that touches such a tensor is cut
// into parts that each see views of at most view_budget() bytes, and every part is lowered by
// the ordinary kernels (the same shaders, tile choices and vector loads as any tensor that fits):
//   - strided copies (unary ops, cast, reshape, transpose, broadcast_to, narrow, concat, slice,
//     the widening of 2-byte and byte operands): boxes of the iteration space whose source and
//     destination footprints fit (split_strided, used by Lowering::strided);
//   - binary ops and fused elementwise kernels: slabs of the collapsed output (a run of whole
//     inner rows), each operand viewed over the slab or, where it broadcasts, whole;
//   - matmul/linear: blocks of rows of a and y; a weight [N, K] (linear, transpose_b) by blocks of
//     its rows (output columns; written straight into y when y has one row, else through an f32
//     scratch and a strided copy); a weight [K, N] by blocks of K, the partial products summed by
//     matmul_splitk (with the bias); batched products by batches;
//   - the convolution family, pools, norms, softmax and reductions that keep the leading axis:
//     by leading rows (images, rows); conv2d weights by output channels; embedding tables by rows.
// Whatever else is too large is refused, naming the tensor, its bytes and the limit.
// A kernel whose tensors all fit takes none of these paths (one check of its sizes).
#include <algorithm>
#include <deque>
#include <functional>

#include "backends/vulkan/ew_glsl.h"
#include "backends/vulkan/kernels.h"
#include "core/error.h"
#include "ir/op_registry.h"
#include "ir/spatial.h"

namespace rlx::vk {

using ir::Op;

uint64_t device_bytes(const DeviceCaps& c, const TensorRef& t) {
  return (uint64_t)std::max<int64_t>(0, t.numel()) * dtype_size(device_storage(c, t.dtype));
}

bool binds_whole(const DeviceCaps& c, const TensorRef& t) {
  const auto* vb = static_cast<const VulkanBuffer*>(t.buf);
  const uint64_t bytes = device_bytes(c, t);
  if (bytes == 0 || !vb || !vb->block) return true;
  const uint64_t start = vb->offset + t.offset, base = start / c.min_storage_align * c.min_storage_align;
  return (start + bytes + 3) / 4 * 4 - base <= c.max_binding_bytes;
}

uint64_t view_budget(const DeviceCaps& c) {
  const uint64_t slack = c.min_storage_align + 4;
  return c.max_binding_bytes > 2 * slack ? (c.max_binding_bytes - slack) / 16 * 16 : 16;
}

TensorRef view_of(const DeviceCaps& c, const TensorRef& t, int64_t elem, Shape shape) {
  TensorRef v = t;
  v.offset = t.offset + (size_t)elem * dtype_size(device_storage(c, t.dtype));
  v.shape = std::move(shape);
  return v;
}

namespace {

constexpr uint64_t kMaxParts = 1u << 16;  // more parts than this is refused (a limit set absurdly low)

[[noreturn]] void too_many(uint64_t n, const DeviceCaps& c) {
  throw RuntimeError("Vulkan executor: a tensor would need " + std::to_string(n) + " or more bindings of at most " +
                     std::to_string(c.max_binding_bytes) + " bytes; refusing (raise RLX_VK_MAX_BINDING_BYTES)");
}

}  // namespace

void split_strided(const DeviceCaps& c, const TensorRef& x, int64_t xextra, const std::vector<int64_t>& xs,
                   const TensorRef& y, int64_t yextra, const std::vector<int64_t>& ys, const std::vector<int64_t>& dims,
                   const EmitBox& emit) {
  const uint64_t budget = view_budget(c);
  const uint64_t esx = dtype_size(device_storage(c, x.dtype)), esy = dtype_size(device_storage(c, y.dtype));
  const size_t r = dims.size();
  uint64_t parts = 0;
  // [lo, hi] elements a box touches, relative to its first element.
  auto span = [&](const std::vector<int64_t>& s, const std::vector<int64_t>& ext, int64_t& lo, int64_t& hi) {
    lo = hi = 0;
    for (size_t d = 0; d < r; ++d) {
      const int64_t v = s[d] * (ext[d] - 1);
      (v < 0 ? lo : hi) += v;
    }
  };
  std::function<void(std::vector<int64_t>, std::vector<int64_t>)> box = [&](std::vector<int64_t> start,
                                                                             std::vector<int64_t> ext) {
    int64_t xlo, xhi, ylo, yhi;
    span(xs, ext, xlo, xhi);
    span(ys, ext, ylo, yhi);
    const double fx = double(xhi - xlo + 1) * esx / budget, fy = double(yhi - ylo + 1) * esy / budget;
    if (fx <= 1 && fy <= 1) {
      if (++parts > kMaxParts) too_many(parts, c);
      int64_t xb = xextra, yb = yextra;
      for (size_t d = 0; d < r; ++d) xb += start[d] * xs[d], yb += start[d] * ys[d];
      emit(view_of(c, x, xb + xlo, {xhi - xlo + 1}), -xlo, view_of(c, y, yb + ylo, {yhi - ylo + 1}), -ylo,
           Shape(ext.begin(), ext.end()));
      return;
    }
    // Halve the extent that contributes most to the footprint that is over.
    const std::vector<int64_t>& s = fx >= fy ? xs : ys;
    size_t best = r;
    int64_t most = 0;
    for (size_t d = 0; d < r; ++d) {
      const int64_t v = std::abs(s[d]) * (ext[d] - 1);
      if (ext[d] > 1 && (best == r || v > most)) best = d, most = v;
    }
    if (best == r) too_many(parts, c);  // one element over the budget: cannot happen with budget >= 16
    const int64_t h = ext[best] / 2;
    std::vector<int64_t> e1 = ext, s2 = start, e2 = ext;
    e1[best] = h;
    s2[best] += h;
    e2[best] = ext[best] - h;
    box(start, e1);
    box(s2, e2);
  };
  box(std::vector<int64_t>(r, 0), dims);
}

namespace {

// The parts of one kernel (see the file comment).
class Splitter {
 public:
  explicit Splitter(LowerCtx& L) : L_(L), k_(L.kernel()), c_(L.caps()), budget_(view_budget(c_)) {}

  bool run();

 private:
  const TensorRef& in(size_t i) const { return k_.inputs.at(i); }
  const TensorRef& out() const { return k_.output; }
  uint64_t es(const TensorRef& t) const { return dtype_size(device_storage(c_, t.dtype)); }
  bool fits(const TensorRef& t) const { return device_bytes(c_, t) <= budget_; }
  void count(uint64_t n) {
    parts_ += n;
    if (parts_ > kMaxParts) too_many(parts_, c_);
  }
  // A node like k_'s own with other attrs (sub-kernels of matmul with normalised transposes).
  const ir::Node* node_like(Op op, std::initializer_list<std::pair<const char*, ir::AttrValue>> attrs) {
    nodes_.emplace_back();
    ir::Node& n = nodes_.back();
    n.id = k_.node ? k_.node->id : std::string();
    n.op = op;
    for (const auto& [key, v] : attrs) n.attrs.values[key] = v;
    return &n;
  }
  Kernel sub(std::vector<TensorRef> inputs, TensorRef output, const ir::Node* node = nullptr) const {
    Kernel s = k_;
    if (node) s.node = node;
    s.inputs = std::move(inputs);
    s.output = std::move(output);
    return s;
  }

  std::string name_of(int i) const;  // i = -1: the output
  [[noreturn]] void refuse(const std::string& why = "") const;

  void elementwise();
  void rows(const std::vector<size_t>& per_row, bool flatten);
  void conv_channels();
  void embedding();
  void matmul(bool linear);
  void product2d(const TensorRef& A, const TensorRef& B, const TensorRef* bias, const TensorRef& Y, int64_t M,
                 int64_t N, int64_t K, bool ta, bool tb, bool linear);
  void sum_parts(const TensorRef& part, uint32_t nsplit, int64_t M, int64_t N, const TensorRef* bias,
                 const TensorRef& Y);

  LowerCtx& L_;
  const Kernel& k_;
  const DeviceCaps& c_;
  const uint64_t budget_;
  uint64_t parts_ = 0;
  std::deque<ir::Node> nodes_;  // alive while the parts are lowered (dispatches keep no node)
};

std::string Splitter::name_of(int i) const {
  std::string who = i < 0 ? "the output" : "input " + std::to_string(i);
  if (k_.node && k_.graph && !k_.fused) {
    const std::string& id =
        i < 0 ? k_.node->id
              : (size_t)i < k_.node->inputs.size() ? k_.graph->nodes.at(k_.node->inputs[i]).id : std::string();
    if (!id.empty()) who += " '" + printable(id) + "'";
  }
  const TensorRef& t = i < 0 ? out() : in(i);
  return who + " (" + shape_str(t.shape) + " " + dtype_name(t.dtype) + ", " + std::to_string(device_bytes(c_, t)) +
         " bytes on the device)";
}

void Splitter::refuse(const std::string& why) const {
  std::string what;
  int n = 0;
  for (int i = -1; i < (int)k_.inputs.size(); ++i) {
    const TensorRef& t = i < 0 ? out() : in(i);
    if (binds_whole(c_, t)) continue;
    what += (n++ ? ", " : "") + name_of(i);
  }
  std::string limit = std::to_string(c_.max_binding_bytes) + " bytes" +
                      (c_.binding_lowered ? " (RLX_VK_MAX_BINDING_BYTES; the device's maxStorageBufferRange is " +
                                                std::to_string(c_.max_storage_range) + ")"
                                          : " (maxStorageBufferRange of " + c_.name + ")");
  throw RuntimeError("Vulkan executor: kernel '" + k_.label + "': " + what + (n > 1 ? " exceed" : " exceeds") +
                     " the largest storage-buffer binding, " + limit + ", and " +
                     (k_.fused ? std::string("this fused kernel") : std::string("op ") + ir::op_name(k_.node->op)) +
                     " cannot be split over several bindings" + (why.empty() ? "" : " (" + why + ")") +
                     "; matmul, linear, embedding, elementwise ops, copies, convolutions, pools, norms, "
                     "softmax and reductions that keep the leading axis can");
}

bool Splitter::run() {
  bool over = !binds_whole(c_, out());
  for (const auto& t : k_.inputs) over = over || !binds_whole(c_, t);
  if (!over) return false;
  if (k_.fused) {
    elementwise();
    return true;
  }
  switch (k_.node->op) {
    // Lowered through Lowering::strided, which cuts its copies itself.
    case Op::Neg: case Op::Exp: case Op::Log: case Op::Sqrt: case Op::Rsqrt: case Op::Abs: case Op::Tanh:
    case Op::Sigmoid: case Op::Relu: case Op::Silu: case Op::Erf: case Op::Sin: case Op::Cos: case Op::Square:
    case Op::Gelu: case Op::Floor: case Op::Ceil: case Op::Round: case Op::Softplus: case Op::LogicalNot:
    case Op::Sign: case Op::Asin: case Op::Acos: case Op::Atan: case Op::Cast: case Op::Reshape: case Op::Transpose:
    case Op::BroadcastTo: case Op::Narrow: case Op::Concat: case Op::Slice:
      return false;
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow: case Op::Maximum: case Op::Minimum:
    case Op::SiluVjp: case Op::GeluVjp: case Op::Equal: case Op::Less: case Op::LessEqual: case Op::Greater:
    case Op::GreaterEqual: case Op::LogicalAnd: case Op::LogicalOr: case Op::LogicalXor: case Op::Mod:
      elementwise();
      return true;
    case Op::Matmul: matmul(false); return true;
    case Op::Linear: matmul(true); return true;
    case Op::Conv2d:
      if (!binds_whole(c_, in(1)) || (k_.inputs.size() >= 3 && !binds_whole(c_, in(2)))) conv_channels();
      else rows({0}, false);
      return true;
    case Op::ConvTranspose2d: case Op::MaxPool2d: case Op::AvgPool2d:
      rows({0}, false);
      return true;
    case Op::Embedding: embedding(); return true;
    case Op::Sum: case Op::Mean: case Op::Max: case Op::Min: case Op::Prod: {  // by rows of a kept leading axis
      const int64_t r = (int64_t)in(0).shape.size();
      bool lead = r < 2 || !k_.node->attrs.has("axes");
      if (!lead)
        for (int64_t a : k_.node->attrs.ints("axes")) lead = lead || (a % r + r) % r == 0;
      if (lead) refuse("a reduction over its leading axis");
      rows({0}, false);
      return true;
    }
    case Op::LayerNorm: case Op::RmsNorm: rows({0}, true); return true;
    case Op::LayerNormVjp: case Op::RmsNormVjp: rows({0, 1}, true); return true;
    case Op::Softmax: case Op::SoftmaxVjp: {
      const int r = (int)in(0).shape.size();
      if (r < 2 || (k_.node->attrs.i("axis") % r + r) % r == 0) refuse("softmax over the leading axis");
      rows(k_.node->op == Op::Softmax ? std::vector<size_t>{0} : std::vector<size_t>{0, 1}, false);
      return true;
    }
    default:
      refuse();
  }
}

// Slabs of the collapsed output: the dims after `a` whole, a chunk of dim `a`, one index of
// each dim before it. An operand that broadcasts along a dim is viewed with size 1 there.
void Splitter::elementwise() {
  const Shape& os = out().shape;
  const size_t n = k_.inputs.size();
  std::vector<Strides> st;
  for (const auto& t : k_.inputs) st.push_back(broadcast_strides(t.shape, os));
  st.push_back(contiguous_strides(os));
  const Collapsed cl = collapse(os, st);
  const std::vector<int64_t>& dims = cl.dims;
  const size_t r = dims.size();
  uint64_t maxes = es(out());
  for (const auto& t : k_.inputs) maxes = std::max(maxes, es(t));
  // The first dim whose inner slab fits, and how many of its rows a part takes.
  size_t a = 0;
  uint64_t inner = 1;
  for (size_t d = 0; d < r; ++d) inner *= (uint64_t)dims[d];
  for (a = 0; a < r; ++a) {
    inner /= (uint64_t)dims[a];
    if (inner * maxes <= budget_) break;
  }
  if (a == r) refuse("one element over the budget");
  const int64_t chunk = (int64_t)std::min<uint64_t>((uint64_t)dims[a], budget_ / (inner * maxes));
  uint64_t outer = 1;
  for (size_t d = 0; d < a; ++d) outer *= (uint64_t)dims[d];
  count(outer * (uint64_t)((dims[a] + chunk - 1) / chunk));
  auto view = [&](const TensorRef& t, const Strides& s, const std::vector<int64_t>& idx, int64_t c0, int64_t cn) {
    int64_t elem = 0;
    for (size_t d = 0; d < a; ++d) elem += idx[d] * s[d];
    elem += c0 * s[a];
    Shape sh = {s[a] ? cn : 1};
    for (size_t d = a + 1; d < r; ++d) sh.push_back(s[d] ? dims[d] : 1);
    return view_of(c_, t, elem, sh);
  };
  std::vector<int64_t> idx(a, 0);
  for (uint64_t o = 0; o < outer; ++o) {
    uint64_t rem = o;
    for (size_t d = a; d-- > 0;) idx[d] = (int64_t)(rem % (uint64_t)dims[d]), rem /= (uint64_t)dims[d];
    for (int64_t c0 = 0; c0 < dims[a]; c0 += chunk) {
      const int64_t cn = std::min(chunk, dims[a] - c0);
      std::vector<TensorRef> ins;
      for (size_t j = 0; j < n; ++j) ins.push_back(view(in(j), cl.strides[j], idx, c0, cn));
      L_.lower_sub(sub(std::move(ins), view(out(), cl.strides[n], idx, c0, cn)));
    }
  }
}

// By leading rows: the inputs at `per_row` and the output are cut along dim 0 (after merging
// every dim but the last into it with `flatten`, for the norms); the others go whole to every part.
void Splitter::rows(const std::vector<size_t>& per_row, bool flatten) {
  auto rows_of = [&](const Shape& s) -> int64_t {
    if (s.empty()) return 1;
    if (!flatten) return s[0];
    int64_t n = 1;
    for (size_t d = 0; d + 1 < s.size(); ++d) n *= s[d];
    return n;
  };
  auto row_shape = [&](const Shape& s) -> Shape {
    if (!flatten) return Shape(s.begin() + 1, s.end());
    return {s.empty() ? 1 : s.back()};
  };
  const int64_t R = rows_of(out().shape);
  if (out().shape.size() < (flatten ? 2u : 1u)) refuse("a single row");
  uint64_t row_bytes = device_bytes(c_, out()) / (uint64_t)std::max<int64_t>(1, R);
  for (size_t i = 0; i < k_.inputs.size(); ++i) {
    const bool cut = std::find(per_row.begin(), per_row.end(), i) != per_row.end();
    if (cut) {
      if (in(i).shape.size() < (flatten ? 2u : 1u) || rows_of(in(i).shape) != R) refuse("rows that do not match");
      row_bytes = std::max(row_bytes, device_bytes(c_, in(i)) / (uint64_t)std::max<int64_t>(1, R));
    } else if (!binds_whole(c_, in(i))) {
      refuse("its weight is larger than a binding");
    }
  }
  if (row_bytes > budget_) refuse("one row (image) alone is larger than a binding");
  const int64_t chunk = (int64_t)std::min<uint64_t>((uint64_t)R, budget_ / std::max<uint64_t>(1, row_bytes));
  count((uint64_t)((R + chunk - 1) / chunk));
  auto view = [&](const TensorRef& t, int64_t r0, int64_t rn) {
    const Shape rs = row_shape(t.shape);
    Shape sh = {rn};
    sh.insert(sh.end(), rs.begin(), rs.end());
    return view_of(c_, t, r0 * shape_numel(rs), sh);
  };
  for (int64_t r0 = 0; r0 < R; r0 += chunk) {
    const int64_t rn = std::min(chunk, R - r0);
    std::vector<TensorRef> ins = k_.inputs;
    for (size_t i : per_row) ins[i] = view(in(i), r0, rn);
    L_.lower_sub(sub(std::move(ins), view(out(), r0, rn)));
  }
}

// A conv2d weight larger than a binding: per image, blocks of whole groups of output channels
// (the weight's rows) with the input channels of their groups, or, where one group is too large
// (groups 1), blocks of one group's output channels, each a convolution of groups 1 over that
// group's input channels. y's channels of one image are contiguous.
void Splitter::conv_channels() {
  std::vector<Shape> shapes;
  for (const auto& t : k_.inputs) shapes.push_back(t.shape);
  const ir::Conv2dGeom g = ir::conv2d_geom(*k_.node, shapes, k_.label);
  const TensorRef &x = in(0), &w = in(1);
  const bool bias = k_.inputs.size() >= 3;
  const int64_t wrow = w.numel() / std::max<int64_t>(1, g.M);  // weight elements per output channel
  const uint64_t xgroup = (uint64_t)g.Cg * g.H * g.W * es(x);  // one group's inputs, one image
  const uint64_t chan = std::max({(uint64_t)wrow * es(w), (uint64_t)g.OH * g.OW * es(out()), (uint64_t)4});
  if (xgroup > budget_ || chan > budget_) refuse("one output channel or one group's input is larger than a binding");
  // Output channels per part: whole groups where a group fits, else a block of one group's.
  const uint64_t per_group = (uint64_t)g.Mg * chan;
  const int64_t gc =
      per_group <= budget_ ? std::min<int64_t>(g.groups, (int64_t)(budget_ / std::max(per_group, xgroup))) : 0;
  const int64_t mc = gc ? gc * g.Mg : std::min<int64_t>(g.Mg, (int64_t)(budget_ / chan));
  count((uint64_t)g.N * (uint64_t)((g.M + mc - 1) / mc));
  for (int64_t m0 = 0, mn = 0; m0 < g.M; m0 += mn) {
    // Parts never straddle a group: whole groups (gc), or blocks inside one group.
    mn = gc ? std::min(mc, g.M - m0) : std::min(mc, g.Mg - m0 % g.Mg);
    const int64_t g0 = m0 / g.Mg, gn = gc ? mn / g.Mg : 1;
    nodes_.push_back(*k_.node);
    nodes_.back().attrs.values["groups"] = gn;
    const ir::Node* node = &nodes_.back();
    for (int64_t n = 0; n < g.N; ++n) {
      std::vector<TensorRef> ins = {
          view_of(c_, x, (n * g.C + g0 * g.Cg) * g.H * g.W, {1, gn * g.Cg, g.H, g.W}),
          view_of(c_, w, m0 * wrow, {mn, w.shape[1], w.shape[2], w.shape[3]})};
      if (bias) ins.push_back(view_of(c_, in(2), m0, {mn}));
      L_.lower_sub(sub(std::move(ins), view_of(c_, out(), (n * g.M + m0) * g.OH * g.OW, {1, mn, g.OH, g.OW}), node));
    }
  }
}

// An embedding table (or its output) larger than a binding: y in row blocks, each by blocks of
// the table's rows; a part writes the rows of y whose index falls in its block (embedding.comp's
// vbase/vall), the first block also the zeros and the error of bad indices. 2-byte or byte
// tables and outputs go through f32 scratch per part (this kernel's own widening would copy
// the whole output after each part).
void Splitter::embedding() {
  const TensorRef &table = in(0), &idx = in(1);
  if (table.shape.size() != 2) refuse("a table of rank " + std::to_string(table.shape.size()));
  const int64_t V = table.shape[0], D = table.shape[1], R = D ? out().numel() / D : 0;
  const bool wide_t = storage_kind(c_, table.dtype) != 0, wide_y = storage_kind(c_, out().dtype) != 0;
  const uint64_t row_t = (uint64_t)D * std::max<uint64_t>(es(table), wide_t ? 4 : 0);
  const uint64_t row_y = (uint64_t)D * std::max<uint64_t>(es(out()), 4);
  if (row_t > budget_ || row_y > budget_ || !binds_whole(c_, idx))
    refuse("one row, or the indices, larger than a binding");
  const int64_t vc = std::min<int64_t>(V, (int64_t)(budget_ / row_t));
  const int64_t rc = std::min<int64_t>(R, (int64_t)(budget_ / row_y));
  count((uint64_t)((R + rc - 1) / rc) * (uint64_t)((V + vc - 1) / vc) * (wide_t ? 2 : 1) + (wide_y ? 1 : 0));
  for (int64_t r0 = 0; r0 < R; r0 += rc) {
    const int64_t rn = std::min(rc, R - r0);
    const TensorRef ix = view_of(c_, idx, r0, {rn});
    TensorRef y = view_of(c_, out(), r0 * D, {rn, D});
    if (wide_y) {
      y = L_.scratch(rn * D);
      y.shape = {rn, D};
    }
    for (int64_t v0 = 0; v0 < V; v0 += vc) {
      const int64_t vn = std::min(vc, V - v0);
      TensorRef t = view_of(c_, table, v0 * D, {vn, D});
      if (wide_t) {
        TensorRef s = L_.scratch(vn * D);
        s.shape = {vn, D};
        L_.strided(t, 0, {1}, s, 0, {1}, {vn * D}, kEwIdentity, 0);
        t = s;
      }
      Dispatch& d = L_.add("embedding", {});
      const uint32_t to = L_.read(d, t), io = L_.read(d, ix);
      L_.bind_error(d);
      const uint32_t yo = L_.write(d, y);
      d.push = {(uint32_t)(rn * D), (uint32_t)D, (uint32_t)vn, to, io, yo, L_.kernel_id(), (uint32_t)v0, (uint32_t)V};
      L_.grid(d, (uint64_t)rn * D, 256);
    }
    if (wide_y) L_.strided(y, 0, {1}, view_of(c_, out(), r0 * D, {rn * D}), 0, {1}, {rn * D}, kEwIdentity, 0);
  }
}

void Splitter::matmul(bool linear) {
  const TensorRef &A = in(0), &B = in(1);
  const TensorRef* bias = linear && k_.inputs.size() >= 3 ? &in(2) : nullptr;
  if (bias && !binds_whole(c_, *bias)) refuse("its bias is larger than a binding");
  if (linear) {
    const int64_t K = A.shape.empty() ? 1 : A.shape.back(), N = B.shape.at(0);
    const int64_t M = K ? A.numel() / K : 0;
    product2d(view_of(c_, A, 0, {M, K}), B, bias, view_of(c_, out(), 0, {M, N}), M, N, K, false, true, true);
    return;
  }
  bool ta = k_.node->attrs.b("transpose_a"), tb = k_.node->attrs.b("transpose_b");
  Shape as = A.shape, bs = B.shape;
  if (as.size() == 1) as = {1, as[0]}, ta = false;
  if (bs.size() == 1) bs = {bs[0], 1}, tb = false;
  const size_t ra = as.size(), rb = bs.size();
  const int64_t M = ta ? as[ra - 1] : as[ra - 2], K = ta ? as[ra - 2] : as[ra - 1], N = tb ? bs[rb - 2] : bs[rb - 1];
  const Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const int64_t nab = shape_numel(ab), nbb = shape_numel(bb);
  if (nab == 1 && nbb == 1) {
    product2d(view_of(c_, A, 0, ta ? Shape{K, M} : Shape{M, K}), view_of(c_, B, 0, tb ? Shape{N, K} : Shape{K, N}),
              nullptr, view_of(c_, out(), 0, {M, N}), M, N, K, ta, tb, false);
  } else if (nbb == 1 && !ta) {  // b is shared by every batch: one product of nab * M rows
    product2d(view_of(c_, A, 0, {nab * M, K}), view_of(c_, B, 0, tb ? Shape{N, K} : Shape{K, N}), nullptr,
              view_of(c_, out(), 0, {nab * M, N}), nab * M, N, K, false, tb, false);
  } else if (ab == bb) {  // batches of their own: as many whole batches per part as fit, else one each
    const uint64_t per = std::max({device_bytes(c_, A), device_bytes(c_, B), device_bytes(c_, out())}) / nab;
    const int64_t chunk =
        std::max<int64_t>(1, (int64_t)std::min<uint64_t>((uint64_t)nab, budget_ / std::max<uint64_t>(1, per)));
    count((uint64_t)((nab + chunk - 1) / chunk));
    const ir::Node* node = node_like(Op::Matmul, {{"transpose_a", ta}, {"transpose_b", tb}});
    for (int64_t b0 = 0; b0 < nab; b0 += chunk) {
      const int64_t bn = std::min(chunk, nab - b0);
      Shape sa = {bn, ta ? K : M, ta ? M : K}, sb = {bn, tb ? N : K, tb ? K : N};
      L_.lower_sub(sub({view_of(c_, A, b0 * M * K, sa), view_of(c_, B, b0 * K * N, sb)},
                       view_of(c_, out(), b0 * M * N, {bn, M, N}), node));
    }
  } else {
    refuse("batch dims broadcast between a and b");
  }
}

// y[M, N] = op(A) op(B) (+ bias) with 2-D views. Rows of A and y first (A [M, K] only); then a
// weight [N, K] (tb) by output columns, a weight [K, N] by blocks of K. Each part is lowered as
// an ordinary product (gemv, tiled, split-K or tensor cores as its shape says).
void Splitter::product2d(const TensorRef& A, const TensorRef& B, const TensorRef* bias, const TensorRef& Y, int64_t M,
                         int64_t N, int64_t K, bool ta, bool tb, bool linear) {
  auto node_for = [&](bool ta2, bool tb2, bool with_bias) {
    return linear && !ta2 && tb2 && with_bias ? k_.node
                                              : node_like(Op::Matmul, {{"transpose_a", ta2}, {"transpose_b", tb2}});
  };
  auto product = [&](const TensorRef& a, const TensorRef& b, const TensorRef* bi, const TensorRef& y, bool ta2,
                     bool tb2) {
    std::vector<TensorRef> ins = {a, b};
    if (bi) ins.push_back(*bi);
    L_.lower_sub(sub(std::move(ins), y, bi ? node_for(ta2, tb2, true) : node_for(ta2, tb2, false)));
  };
  const uint64_t esa = es(A), esb = es(B), esy = std::max<uint64_t>(es(Y), 4);
  const bool b_fits = (uint64_t)N * K * esb <= budget_;
  // K blocks of a [K, N] weight: kc rows of B per part (and kc rows of a transposed a).
  int64_t kc = K;
  if (!tb && !b_fits) {
    kc = (int64_t)(budget_ / ((uint64_t)N * esb));
    if (ta) kc = std::min<int64_t>(kc, (int64_t)(budget_ / ((uint64_t)M * esa)));
    if (kc < 1) refuse("one row of b is larger than a binding");
  }
  const int64_t nsplit = (K + kc - 1) / kc;
  // Bytes per row of a and y that a part must hold: y's row (in f32 where it goes through
  // scratch) for each of the nsplit partial products, a's row, and the block of a's columns
  // copied for a K block.
  uint64_t row = (uint64_t)N * esy * (uint64_t)nsplit;
  if (!ta) row = std::max(row, (uint64_t)K * esa);
  if (!ta && !tb && !b_fits) row = std::max(row, (uint64_t)kc * 4);
  if (row > budget_) refuse("one row of the product is larger than a binding");
  if (ta && ((uint64_t)M * row > budget_ || ((tb || b_fits) && (uint64_t)M * K * esa > budget_)))
    refuse("a transposed a: its rows are not cut");
  const int64_t mc = ta ? M : std::min<int64_t>(M, (int64_t)(budget_ / row));
  if (mc < M) {
    count((uint64_t)((M + mc - 1) / mc));
    for (int64_t m0 = 0; m0 < M; m0 += mc) {
      const int64_t mn = std::min(mc, M - m0);
      product2d(view_of(c_, A, m0 * K, {mn, K}), B, bias, view_of(c_, Y, m0 * N, {mn, N}), mn, N, K, false, tb,
                linear);
    }
    return;
  }
  if (b_fits) {  // only a or y was large, and they fit now
    product(A, B, bias, Y, ta, tb);
    return;
  }
  if (tb) {  // B [N, K]: nc of its rows per part, columns [n0, n0 + nc) of y
    const int64_t nc = std::max<int64_t>(
        1, (int64_t)std::min<uint64_t>((uint64_t)N, std::min(budget_ / ((uint64_t)K * esb),
                                                             M > 1 ? budget_ / ((uint64_t)M * 4) : (uint64_t)N)));
    count((uint64_t)((N + nc - 1) / nc) * (M > 1 ? 2 : 1));
    for (int64_t n0 = 0; n0 < N; n0 += nc) {
      const int64_t nn = std::min(nc, N - n0);
      const TensorRef b = view_of(c_, B, n0 * K, {nn, K});
      TensorRef bi;
      if (bias) bi = view_of(c_, *bias, n0, {nn});
      if (M == 1) {
        product(A, b, bias ? &bi : nullptr, view_of(c_, Y, n0, {1, nn}), ta, true);
      } else {  // y's columns are strided: the part's product in f32 scratch, then a strided copy
        TensorRef s = L_.scratch(M * nn);
        s.shape = {M, nn};
        product(A, b, bias ? &bi : nullptr, s, ta, true);
        L_.strided(s, 0, {nn, 1}, Y, n0, {N, 1}, {M, nn}, kEwIdentity, 0);
      }
    }
    return;
  }
  // B [K, N]: kc of its rows per part; a's matching columns (rows when ta); the partial
  // products into f32 scratch [nsplit, M, N], summed with the bias by matmul_splitk.
  count((uint64_t)nsplit * (M > 1 && !ta ? 2 : 1) + 1);
  TensorRef part = L_.scratch(nsplit * M * N);
  for (int64_t j = 0; j < nsplit; ++j) {
    const int64_t k0 = j * kc, kn = std::min(kc, K - k0);
    const TensorRef b = view_of(c_, B, k0 * N, {kn, N});
    TensorRef p = view_of(c_, part, j * M * N, {M, N});
    p.dtype = DType::f32;
    if (ta) {
      product(view_of(c_, A, k0 * M, {kn, M}), b, nullptr, p, true, false);
    } else if (M == 1) {
      product(view_of(c_, A, k0, {1, kn}), b, nullptr, p, false, false);
    } else {
      TensorRef s = L_.scratch(M * kn);
      s.shape = {M, kn};
      L_.strided(A, k0, {K, 1}, s, 0, {kn, 1}, {M, kn}, kEwIdentity, 0);
      product(s, b, nullptr, p, false, false);
    }
  }
  sum_parts(part, (uint32_t)nsplit, M, N, bias, Y);
}

void Splitter::sum_parts(const TensorRef& part, uint32_t nsplit, int64_t M, int64_t N, const TensorRef* bias,
                         const TensorRef& Y) {
  const uint32_t biask = bias ? storage_kind(c_, bias->dtype) : 0u, yk = storage_kind(c_, Y.dtype);
  TensorRef all = view_of(c_, part, 0, {(int64_t)nsplit * M * N});
  Dispatch& r = biask || yk ? L_.add("matmul_splitk.h16", {bias ? 1u : 0u, biask, yk})
                            : L_.add("matmul_splitk", {bias ? 1u : 0u});
  const uint32_t pr = L_.read(r, all);
  uint32_t bo = 0;
  if (bias) bo = L_.read(r, *bias);
  else {
    TensorRef none;  // no elements: bound as the dummy
    none.shape = {0};
    bo = L_.read(r, none);
  }
  const uint32_t yo = L_.write(r, Y);
  r.push = {(uint32_t)(M * N), (uint32_t)N, nsplit, pr, bo, yo};
  L_.grid(r, ((uint64_t)M * N + 3) / 4, 256);
}

}  // namespace

bool lower_split(LowerCtx& L) { return Splitter(L).run(); }

}  // namespace rlx::vk
