#include "backends/vulkan/kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backends/vulkan/ew_glsl.h"
#include "core/error.h"
#include "ir/op_registry.h"

namespace rlx::vk {

Collapsed collapse(const Shape& shape, const std::vector<Strides>& ops) {
  Collapsed c;
  c.strides.resize(ops.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !c.dims.empty();
    for (size_t o = 0; o < ops.size() && merge; ++o) merge = c.strides[o].back() == ops[o][d] * shape[d];
    if (merge) {
      c.dims.back() *= shape[d];
      for (size_t o = 0; o < ops.size(); ++o) c.strides[o].back() = ops[o][d];
    } else {
      c.dims.push_back(shape[d]);
      for (size_t o = 0; o < ops.size(); ++o) c.strides[o].push_back(ops[o][d]);
    }
  }
  if (c.dims.empty()) {
    c.dims = {1};
    for (auto& s : c.strides) s = {0};
  }
  return c;
}

ReduceGroups reduce_groups(const Shape& xs, const ir::Attrs& attrs) {
  const int r = (int)xs.size();
  std::vector<bool> red(r, !attrs.has("axes"));
  if (attrs.has("axes"))
    for (int64_t a : attrs.ints("axes")) red[(a % r + r) % r] = true;
  struct G { int64_t size, stride; bool reduced; };
  std::vector<G> gs;
  Strides cs = contiguous_strides(xs);
  for (int d = 0; d < r; ++d) {
    if (xs[d] == 1) continue;
    if (!gs.empty() && gs.back().reduced == red[d]) {
      gs.back().size *= xs[d];
      gs.back().stride = cs[d];
    } else {
      gs.push_back({xs[d], cs[d], red[d]});
    }
  }
  ReduceGroups g;
  for (const auto& x : gs) {
    (x.reduced ? g.rd : g.kd).push_back(x.size);
    (x.reduced ? g.rs : g.ks).push_back(x.stride);
  }
  if (g.rd.empty()) g.rd = {1}, g.rs = {0};
  g.last_reduced = !gs.empty() && gs.back().reduced;
  return g;
}

namespace {

using ir::Op;

constexpr uint32_t kMaxRank = 8;
constexpr uint32_t kWgSpecId = 10;  // constant_id of local_size_x in the row shaders

uint32_t ceil_div(uint64_t a, uint64_t b) { return (uint32_t)((a + b - 1) / b); }


Strides scaled(Strides s, int64_t f) {
  for (auto& v : s) v *= f;
  return s;
}

uint32_t round_mode(DType t) {
  switch (t) {
    case DType::f32: return 0;
    case DType::f16: return 1;
    case DType::bf16: return 2;
    case DType::i32: case DType::i64: return 3;
    case DType::boolean: return 4;
    case DType::i8: return 5;
    case DType::u8: return 6;
    // ONNX-only dtypes: the executor refuses them when planning (VulkanExecutor::dtype_refusal)
    case DType::f64: case DType::i16: case DType::u16: case DType::u32: case DType::u64: return 3;
  }
  return 0;
}
// A cast from an integer dtype into i8/u8 keeps the low 8 bits (core/dtype.h), from a float it
// truncates and saturates.
uint32_t cast_mode(DType from, DType to) {
  const uint32_t m = round_mode(to);
  return (m == 5 || m == 6) && !is_float(from) ? m + 2 : m;
}

std::vector<uint32_t> with_wg(std::vector<uint32_t> spec, uint32_t wg) {
  spec.resize(kWgSpecId + 1, 0);
  spec[kWgSpecId] = wg;
  return spec;
}

// Builds the dispatches of one kernel.
class Lowering : public LowerCtx {
 public:
  Lowering(LowerEnv& env, const Kernel& k, uint32_t id, int depth = 0, ProductEpilogue* epi = nullptr)
      : env_(env), k_(k), id_(id), depth_(depth), epi_(epi) {}
  ProductEpilogue* product_epilogue() override { return epi_; }

  std::vector<Dispatch> run();
  const Kernel& kernel() const override { return k_; }
  uint32_t kernel_id() const override { return id_; }
  const DeviceCaps& caps() const override { return env_.dev.caps; }
  void bind_error(Dispatch& d) override { d.bindings.push_back(env_.error); }
  void drop_last() override { ds_.pop_back(); }
  void lower_sub(const Kernel& sub) override {
    if (depth_ >= 8) fail("internal: splitting a kernel over bindings did not converge");
    for (Dispatch& d : Lowering(env_, sub, id_).run()) ds_.push_back(std::move(d));
  }

 private:
  const ir::Attrs& attrs() const { return k_.node->attrs; }
  const TensorRef& in(size_t i) const { return k_.inputs.at(i); }
  const TensorRef& out() const { return k_.output; }
  [[noreturn]] void fail(const std::string& what) const {
    throw RuntimeError("Vulkan executor: kernel '" + k_.label + "': " + what);
  }

  Dispatch& add(std::string shader, std::vector<uint32_t> spec) {
    ds_.emplace_back();
    ds_.back().shader = std::move(shader);
    ds_.back().spec = std::move(spec);
    return ds_.back();
  }
  // Binds `t`; returns the element offset of its first element in the binding.
  uint32_t bind(Dispatch& d, const TensorRef& t, bool write);
  uint32_t read(Dispatch& d, const TensorRef& t) { return bind(d, t, false); }
  uint32_t write(Dispatch& d, const TensorRef& t) { return bind(d, t, true); }
  void bind_dummy(Dispatch& d) override { d.bindings.push_back(env_.dummy); }
  TensorRef scratch(int64_t floats) override { return env_.scratch(floats); }
  // One invocation per item over a (x, y) grid of `wg`-sized groups.
  void grid(Dispatch& d, uint64_t items, uint32_t wg);
  // A row shader's reduction flavour.
  std::string row_shader(const char* name) const {
    return std::string(name) + (env_.dev.caps.subgroup_arithmetic ? ".sg" : "");
  }
  // Work-group size for rows of `len` elements: a power of two, >= 32, giving
  // each invocation about 16 elements (enough loads in flight to reach ~3 TB/s
  // on an H100); at most 1024 with subgroup reductions, 256 with the
  // shared-memory tree.
  uint32_t row_wg(int64_t len) const {
    const DeviceCaps& c = env_.dev.caps;
    uint32_t cap = c.subgroup_arithmetic ? std::min<uint32_t>(1024, c.max_wg_invocations) : 256;
    uint32_t wg = 32;
    while (wg < cap && (int64_t)wg * 16 < len) wg *= 2;
    return wg;
  }
  // Row elements each invocation keeps in registers (rows longer than 32 per
  // invocation are re-read from memory instead).
  static uint32_t row_cache(int64_t len, uint32_t wg) {
    uint32_t c = 1;
    while (c < 32 && (int64_t)c * wg < len) c *= 2;
    return c;
  }
  static void push_array(Dispatch& d, const std::vector<int64_t>& v, size_t n) {
    for (size_t i = 0; i < n; ++i) d.push.push_back(i < v.size() ? (uint32_t)v[i] : 0u);
  }

  void strided(const TensorRef& x, int64_t xextra, const Strides& xs, const TensorRef& y, int64_t yextra,
               const Strides& ys, const Shape& iter, uint32_t op, uint32_t round);
  bool unary_vec(const TensorRef& x, int64_t xextra, const TensorRef& y, int64_t yextra, int64_t n, uint32_t op,
                 uint32_t dt);
  void strided_one(const TensorRef& x, int64_t xextra, const Collapsed& c, const TensorRef& y, int64_t yextra,
                   uint32_t op, uint32_t round);
  void unary(uint32_t op, uint32_t round);
  void binary(EwOp op);
  void transpose();
  void narrow();
  void concat();
  void reduce(uint32_t op);
  void softmax(uint32_t mode);
  void norm(uint32_t mode);
  bool norm_rows(uint32_t mode, int64_t D, int64_t rows, bool has_w, bool has_b, uint32_t xk, uint32_t wk, uint32_t bk,
                 uint32_t yk);
  void matmul(bool linear);
  void embedding();
  void rope();
  void attention();
  void attention_views();
  void fused();
  // f16/bf16 (2-byte storage) for ops whose shaders read and write f32 only: the 2-byte
  // inputs are widened into f32 scratch, the op runs on f32, and its result is rounded into
  // the 2-byte output (one conversion dispatch per such tensor).
  uint32_t kind(const TensorRef& t) const { return storage_kind(env_.dev.caps, t.dtype); }
  // i8/u8 (byte storage) likewise for ops whose shaders do not read bytes (native8()).
  bool touches(bool (*cls)(uint32_t)) const {
    if (cls(kind(k_.output))) return true;
    for (const auto& t : k_.inputs)
      if (cls(kind(t))) return true;
    return false;
  }
  bool native16() const;
  bool native8() const;
  std::vector<Dispatch> widened(bool w16, bool w8);

  LowerEnv& env_;
  const Kernel& k_;
  uint32_t id_;
  int depth_ = 0;  // parts of a kernel split over bindings are lowered one level down
  ProductEpilogue* epi_ = nullptr;  // the consumer a convolution may fold in (lower_kernel)
  bool in_split_ = false;  // binding the boxes of a strided copy split over bindings
  std::vector<Dispatch> ds_;
};

uint32_t Lowering::bind(Dispatch& d, const TensorRef& t, bool write) {
  const auto* vb = static_cast<const VulkanBuffer*>(t.buf);
  int64_t n = t.numel();
  if (n < 0) fail("tensor shape " + shape_str(t.shape) + " overflows");
  if (n == 0 || !vb || !vb->block) {
    if (n > 0) fail("tensor " + shape_str(t.shape) + " bound to an empty buffer");
    d.bindings.push_back(env_.dummy);
    return 0;
  }
  // Elements of the device storage dtype (f32, 2 bytes for f16/bf16 with 16-bit storage, 1 byte
  // for i8/u8); offsets in bytes.
  const DeviceCaps& caps = env_.dev.caps;
  const uint64_t es = dtype_size(device_storage(caps, t.dtype));
  if (t.offset % es != 0 || t.offset + (uint64_t)n * es > vb->capacity)
    fail("tensor " + shape_str(t.shape) + " at byte offset " + std::to_string(t.offset) + " overruns its buffer of " +
         std::to_string(vb->capacity) + " bytes");
  VkDeviceSize start = vb->offset + t.offset, bytes = (VkDeviceSize)n * es;
  VkDeviceSize base = start / caps.min_storage_align * caps.min_storage_align;
  // Shaders index 16-bit and 8-bit tensors through 32-bit words (uint[]), so the range covers
  // the whole last word: it stays inside the memory block, whose allocations are rounded up to
  // the pool's alignment (>= 256 bytes, MemoryPool), and the bytes past the tensor are never used.
  VkDeviceSize range = (start + bytes + 3) / 4 * 4 - base;
  if (range > caps.max_binding_bytes)  // the parts of lower_split() always fit: an internal tensor
    fail("a tensor of " + std::to_string(bytes) + " bytes " + shape_str(t.shape) +
         " exceeds the largest storage-buffer binding (" + std::to_string(caps.max_binding_bytes) + " bytes on " +
         caps.name + (caps.binding_lowered ? ", lowered by RLX_VK_MAX_BINDING_BYTES" : "") + ")");
  Binding b;
  b.buffer = vb->block->buffer;
  b.offset = base;
  b.range = range;
  // Parts of a kernel split over bindings (issue 30) are views next to each other: their hazards
  // are tracked over the whole descriptor range, as the validation layer sees them, so that two
  // parts whose aligned-down ranges share a few bytes are ordered by a barrier.
  const bool whole = depth_ > 0 || in_split_;
  b.lo = whole ? base : start;
  b.hi = whole ? base + range : start + bytes;
  b.write = write;
  d.bindings.push_back(b);
  return (uint32_t)((start - base) / es);
}

void Lowering::grid(Dispatch& d, uint64_t items, uint32_t wg) {
  uint64_t groups = std::max<uint64_t>(1, (items + wg - 1) / wg);
  const auto& mg = env_.dev.caps.max_groups;
  uint32_t x = (uint32_t)std::min<uint64_t>(groups, mg[0]);
  uint64_t y = (groups + x - 1) / x;
  if (y > mg[1]) fail("too many work groups (" + std::to_string(groups) + ")");
  d.groups[0] = x;
  d.groups[1] = (uint32_t)y;
  d.groups[2] = 1;
}

// ------------------------------------------------------------ elementwise & copies

void Lowering::strided(const TensorRef& x, int64_t xextra, const Strides& xs, const TensorRef& y, int64_t yextra,
                       const Strides& ys, const Shape& iter, uint32_t op, uint32_t round) {
  int64_t n = shape_numel(iter);
  if (n == 0) return;
  Collapsed c = collapse(iter, {xs, ys});
  const DeviceCaps& caps = env_.dev.caps;
  if (binds_whole(caps, x) && binds_whole(caps, y)) return strided_one(x, xextra, c, y, yextra, op, round);
  // A side larger than one binding: boxes of the iteration whose footprints fit (issue 30).
  const bool was = in_split_;
  in_split_ = true;
  split_strided(caps, x, xextra, c.strides[0], y, yextra, c.strides[1], c.dims,
                [&](const TensorRef& bx, int64_t bxe, const TensorRef& by, int64_t bye, const Shape& box) {
                  strided_one(bx, bxe, collapse(box, {c.strides[0], c.strides[1]}), by, bye, op, round);
                });
  in_split_ = was;
}

void Lowering::strided_one(const TensorRef& x, int64_t xextra, const Collapsed& c, const TensorRef& y, int64_t yextra,
                           uint32_t op, uint32_t round) {
  int64_t n = 1;
  for (int64_t d : c.dims) n *= d;
  if (c.dims.size() > kMaxRank) fail("more than 8 dims after collapsing");
  uint32_t xk = kind(x), yk = kind(y);
  if (op != kEwIdentity && round == 0 && xk == yk && is_kind16(xk) && c.dims.size() == 1 && c.strides[0][0] == 1 &&
      c.strides[1][0] == 1 && unary_vec(x, xextra, y, yextra, n, op, xk))
    return;
  Dispatch& d = add(is_kind16(xk) || is_kind16(yk) ? "unary.h16" : "unary",
                    {(uint32_t)c.dims.size(), op, round, kEwPerInvocation, xk, yk});
  uint32_t xo = read(d, x) + (uint32_t)xextra, yo = write(d, y) + (uint32_t)yextra;
  d.push = {(uint32_t)n, xo, yo, 0};
  push_array(d, c.dims, 8);
  push_array(d, c.strides[0], 8);
  push_array(d, c.strides[1], 8);
  grid(d, (n + kEwPerInvocation - 1) / kEwPerInvocation, kEwGroup);
}

// A unary op over a contiguous run of 2-byte values as unary_vec.comp (16-byte loads and stores of
// 8 values) where x and y start at multiples of 8 elements; false (nothing added) otherwise.
// RLX_VK_UNARY_VEC=0 keeps unary.comp (comparison), =1 the integer f16 conversions (below).
bool Lowering::unary_vec(const TensorRef& x, int64_t xextra, const TensorRef& y, int64_t yextra, int64_t n,
                         uint32_t op, uint32_t dt) {
  const char* e = std::getenv("RLX_VK_UNARY_VEC");
  if (e && *e == '0') return false;
  if (n <= 0 || n > (int64_t)UINT32_MAX - 8) return false;
  constexpr uint32_t kVpt = 2;  // 16-byte vectors per invocation
  // f16 through the conversion instructions (unpackHalf2x16 / packHalf2x16) rather than the
  // integer forms (RLX_VK_UNARY_VEC=1, session 14's): the same bits (VulkanHalf's test, lavapipe
  // and the H200), ViT-S/16 f16's device time 0.08-0.15 ms lower on the H200 (docs/benchmarks.md,
  // session 16).
  const bool hw = dt == 1 && !(e && *e == '1');
  Dispatch& d = add("unary_vec", {op, dt, kVpt, hw ? 1u : 0u});
  const uint64_t xo = read(d, x) + (uint64_t)xextra, yo = write(d, y) + (uint64_t)yextra;
  if (xo % 8 || yo % 8 || xo + n > UINT32_MAX || yo + n > UINT32_MAX) {
    drop_last();
    return false;
  }
  d.push = {(uint32_t)n, (uint32_t)xo, (uint32_t)yo};
  grid(d, ((uint64_t)n / 8 + kVpt - 1) / kVpt, kEwGroup);
  return true;
}

void Lowering::unary(uint32_t op, uint32_t round) {
  Strides s = {1};
  strided(in(0), 0, s, out(), 0, s, {out().numel()}, op, round);
}

void Lowering::binary(EwOp op) {
  const Shape& os = out().shape;
  Collapsed c = collapse(os, {broadcast_strides(in(0).shape, os), broadcast_strides(in(1).shape, os),
                              contiguous_strides(os)});
  if (c.dims.size() > kMaxRank) fail("more than 8 dims after collapsing");
  uint32_t ak = kind(in(0)), bk = kind(in(1)), yk = kind(out());
  Dispatch& d = ak || bk || yk ? add("binary.h16", {(uint32_t)c.dims.size(), (uint32_t)op, kEwPerInvocation, ak, bk, yk})
                               : add("binary", {(uint32_t)c.dims.size(), (uint32_t)op, kEwPerInvocation});
  uint32_t ao = read(d, in(0)), bo = read(d, in(1)), yo = write(d, out());
  d.push = {(uint32_t)out().numel(), ao, bo, yo};
  push_array(d, c.dims, 8);
  push_array(d, c.strides[0], 8);
  push_array(d, c.strides[1], 8);
  grid(d, (out().numel() + kEwPerInvocation - 1) / kEwPerInvocation, kEwGroup);
}

void Lowering::transpose() {
  const Shape& xs = in(0).shape;
  int r = (int)xs.size();
  std::vector<int64_t> perm;
  if (attrs().has("perm")) perm = attrs().ints("perm");
  else
    for (int i = r - 1; i >= 0; --i) perm.push_back(i);
  for (auto& p : perm) p = (p + r) % r;
  // Batched 2-D case (after dropping size-1 dims and merging dims that stay adjacent):
  // [B, R, C] -> [B, C, R], e.g. a matrix transpose or NCHW -> NHWC. A tiled kernel keeps
  // reads and writes coalesced; other permutations keep the innermost axis, or are rare,
  // and go through the strided copy.
  std::vector<std::pair<int, int>> groups;  // input dim ranges, in output order
  for (int d = 0; d < r; ++d) {
    int p = (int)perm[d];
    if (xs[p] == 1) continue;
    if (!groups.empty()) {
      int last = groups.back().second, q = last + 1;
      while (q < p && xs[q] == 1) ++q;  // size-1 dims in between do not break adjacency
      if (q == p) {
        groups.back().second = p;
        continue;
      }
    }
    groups.push_back({p, p});
  }
  auto size_of = [&](std::pair<int, int> g) {
    int64_t n = 1;
    for (int i = g.first; i <= g.second; ++i) n *= xs[i];
    return n;
  };
  bool tiled = false;
  int64_t B = 1, R = 0, C = 0;
  if (groups.size() == 2 && groups[0].first > groups[1].first) {
    R = size_of(groups[1]), C = size_of(groups[0]), tiled = true;
  } else if (groups.size() == 3 && groups[0].first < groups[2].first && groups[2].first < groups[1].first) {
    B = size_of(groups[0]), R = size_of(groups[2]), C = size_of(groups[1]), tiled = true;
  }
  const auto& mg = env_.dev.caps.max_groups;
  // f32, or f16/bf16 in and out alike (the ".h16" variant: a pure copy, no rounding)
  const uint32_t xk = kind(in(0));
  if (tiled && (xk == 0u || (is_kind16(xk) && kind(out()) == xk)) && binds_whole(env_.dev.caps, in(0)) &&
      binds_whole(env_.dev.caps, out()) && ceil_div(C, 32) <= mg[0] && ceil_div(R, 32) <= mg[1] &&
      (uint64_t)B <= mg[2]) {
    Dispatch& d = xk ? add("transpose2d.h16", {xk}) : add("transpose2d", {});
    uint32_t xo = read(d, in(0)), yo = write(d, out());
    d.push = {(uint32_t)R, (uint32_t)C, xo, yo};
    d.groups[0] = (uint32_t)ceil_div(C, 32);
    d.groups[1] = (uint32_t)ceil_div(R, 32);
    d.groups[2] = (uint32_t)B;
    return;
  }
  Strides cs = contiguous_strides(xs), src(r);
  for (int d = 0; d < r; ++d) src[d] = cs[perm[d]];
  strided(in(0), 0, src, out(), 0, contiguous_strides(out().shape), out().shape, kEwIdentity, 0);
}

void Lowering::narrow() {
  const Shape& xs = in(0).shape;
  int axis = (int)((attrs().i("axis") + (int64_t)xs.size()) % (int64_t)xs.size());
  int64_t start = attrs().i("start");
  if (start < 0) start += xs[axis];
  Strides cs = contiguous_strides(xs);
  strided(in(0), start * cs[axis], cs, out(), 0, contiguous_strides(out().shape), out().shape, kEwIdentity, 0);
}

void Lowering::concat() {
  const Shape& os = out().shape;
  int r = (int)os.size();
  int axis = (int)((attrs().i("axis") % r + r) % r);
  Strides ocs = contiguous_strides(os);
  int64_t pos = 0;
  for (size_t j = 0; j < k_.inputs.size(); ++j) {
    const auto& x = k_.inputs[j];
    // already in place (an in-place append, Session::set_append_storage): only the rest is written
    if (!(j < 32 && (k_.inputs_in_output >> j & 1)))
      strided(x, 0, contiguous_strides(x.shape), out(), pos * ocs[axis], ocs, x.shape, kEwIdentity, 0);
    pos += x.shape[axis];
  }
}

// ------------------------------------------------------------ reductions and rows

void Lowering::reduce(uint32_t op) {
  auto [kd, ks, rd, rs, group_per_output] = reduce_groups(in(0).shape, attrs());
  if (kd.size() > 4 || rd.size() > 4) fail("more than 8 dims after collapsing");
  int64_t nout = out().numel(), nred = 1;
  for (int64_t v : rd) nred *= v;
  uint32_t wg = group_per_output ? row_wg(nred) : 256;
  Dispatch& d = add(row_shader("reduce"), with_wg({(uint32_t)kd.size(), (uint32_t)rd.size(), op,
                                                   group_per_output ? 0u : 1u}, wg));
  uint32_t xo = read(d, in(0)), yo = write(d, out());
  d.push = {(uint32_t)nout, (uint32_t)nred, xo, yo};
  push_array(d, kd, 4);
  push_array(d, ks, 4);
  push_array(d, rd, 4);
  push_array(d, rs, 4);
  if (group_per_output) grid(d, (uint64_t)nout * wg, wg);
  else grid(d, nout, wg);
}

// mode 0 softmax(axis), 1 scaled_masked_softmax, 2 softmax_vjp(dy, y; axis)
void Lowering::softmax(uint32_t mode) {
  const Shape& xs = in(0).shape;
  int r = (int)xs.size();
  if (r == 0) fail("softmax of a scalar");
  int axis = r - 1;
  if (mode != 1) axis = (int)((attrs().i("axis") % r + r) % r);
  int64_t len = xs[axis], inner = 1;
  for (int d = axis + 1; d < r; ++d) inner *= xs[d];
  int64_t rows = in(0).numel() / std::max<int64_t>(1, len);
  bool causal = mode == 1 && attrs().b("causal");
  uint32_t wg = row_wg(len);
  // 2-byte x / y (the ".h16" variant): each read and written in its own storage
  const uint32_t xk = kind(in(0)), x2k = kind(mode == 2 ? in(1) : in(0)), yk = kind(out());
  const bool half = is_kind16(xk) || is_kind16(x2k) || is_kind16(yk);
  Dispatch& d = add(row_shader("softmax") + (half ? ".h16" : ""),
                    with_wg({mode, causal ? 1u : 0u, row_cache(len, wg), xk, x2k, yk}, wg));
  uint32_t xo = read(d, in(0));
  uint32_t x2o = read(d, mode == 2 ? in(1) : in(0));
  uint32_t yo = write(d, out());
  float scale = mode == 1 ? (float)attrs().f("scale") : 1.0f;
  uint32_t tq = r >= 2 ? (uint32_t)xs[r - 2] : 1u;
  d.push = {(uint32_t)rows, (uint32_t)len, (uint32_t)inner, xo, x2o, yo, f2u(scale), tq};
  grid(d, (uint64_t)rows * wg, wg);
}

// mode 0 layer_norm, 1 rms_norm, 2 layer_norm_vjp(dy, x), 3 rms_norm_vjp(dy, x)
void Lowering::norm(uint32_t mode) {
  bool vjp = mode >= 2;
  const TensorRef& x = vjp ? in(1) : in(0);
  int64_t D = x.shape.empty() ? 1 : x.shape.back();
  int64_t rows = D ? x.numel() / D : 0;
  bool has_w = !vjp && k_.inputs.size() >= 2, has_b = mode == 0 && k_.inputs.size() >= 3;
  uint32_t wg = row_wg(D);
  // 2-byte operands (the ".h16" variant): each read and written in its own storage
  const uint32_t xk = kind(in(0)), wk = vjp || has_w ? kind(in(1)) : 0u, bk = has_b ? kind(in(2)) : 0u,
                 yk = kind(out());
  const bool half = is_kind16(xk) || is_kind16(wk) || is_kind16(bk) || is_kind16(yk);
  if (!vjp && is_kind16(xk) && is_kind16(yk) && norm_rows(mode, D, rows, has_w, has_b, xk, wk, bk, yk)) return;
  Dispatch& d = add(row_shader("norm") + (half ? ".h16" : ""),
                    with_wg({mode, has_w ? 1u : 0u, has_b ? 1u : 0u, row_cache(D, wg), xk, wk, bk, yk}, wg));
  uint32_t xo = read(d, in(0));
  uint32_t wo = vjp ? read(d, in(1)) : has_w ? read(d, in(1)) : (bind_dummy(d), 0u);
  uint32_t bo = has_b ? read(d, in(2)) : (bind_dummy(d), 0u);
  uint32_t yo = write(d, out());
  d.push = {(uint32_t)rows, (uint32_t)D, xo, wo, bo, yo, f2u((float)attrs().f("eps"))};
  grid(d, (uint64_t)rows * wg, wg);
}

// layer_norm / rms_norm with 2-byte x and y as norm_rows.comp (one subgroup per row, several rows
// per work group, 8-byte loads and stores) where rows are 4·n elements, n <= 16 per subgroup
// lane, and x and y start at multiples of 4 elements; false (nothing added) otherwise.
// RLX_VK_NORM_ROWS=0 keeps norm.comp (comparison).
bool Lowering::norm_rows(uint32_t mode, int64_t D, int64_t rows, bool has_w, bool has_b, uint32_t xk, uint32_t wk,
                         uint32_t bk, uint32_t yk) {
  const DeviceCaps& c = env_.dev.caps;
  if (const char* e = std::getenv("RLX_VK_NORM_ROWS"); e && *e == '0') return false;
  const uint32_t sgs = c.subgroup_size;
  if (!c.subgroup_arithmetic || sgs == 0 || D <= 0 || D % 4 || rows <= 0) return false;
  const uint64_t ch = ((uint64_t)D / 4 + sgs - 1) / sgs;
  if (ch > 16) return false;
  const uint32_t wg = std::max<uint32_t>(sgs, std::min<uint32_t>(256, c.max_wg_invocations) / sgs * sgs);
  Dispatch& d = add("norm_rows", with_wg({mode, has_w ? 1u : 0u, has_b ? 1u : 0u, (uint32_t)ch, xk, wk, bk, yk}, wg));
  uint32_t xo = read(d, in(0));
  uint32_t wo = has_w ? read(d, in(1)) : (bind_dummy(d), 0u);
  uint32_t bo = has_b ? read(d, in(2)) : (bind_dummy(d), 0u);
  uint32_t yo = write(d, out());
  if (xo % 4 || yo % 4) {
    drop_last();
    return false;
  }
  d.push = {(uint32_t)rows, (uint32_t)D, xo, wo, bo, yo, f2u((float)attrs().f("eps"))};
  grid(d, ((uint64_t)rows + wg / sgs - 1) / (wg / sgs) * wg, wg);
  return true;
}

// ------------------------------------------------------------ matrix products

void Lowering::matmul(bool linear) {
  const TensorRef &A = in(0), &B = in(1);
  const TensorRef* bias = linear && k_.inputs.size() >= 3 ? &in(2) : nullptr;
  bool ta = false, tb = linear;
  int64_t M, N, K;
  Collapsed batch;  // output batch dims with a/b/y strides (elements)
  if (linear) {
    K = A.shape.empty() ? 1 : A.shape.back();
    M = K ? A.numel() / K : out().numel() / std::max<int64_t>(1, B.shape[0]);
    N = B.shape[0];
    batch = collapse({}, {{}, {}, {}});
  } else {
    ta = attrs().b("transpose_a");
    tb = attrs().b("transpose_b");
    Shape as = A.shape, bs = B.shape;
    if (as.size() == 1) as = {1, as[0]}, ta = false;
    if (bs.size() == 1) bs = {bs[0], 1}, tb = false;
    size_t ra = as.size(), rb = bs.size();
    M = ta ? as[ra - 1] : as[ra - 2];
    K = ta ? as[ra - 2] : as[ra - 1];
    N = tb ? bs[rb - 2] : bs[rb - 1];
    Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
    size_t rr = std::max(ab.size(), bb.size());
    Shape ob(rr);
    for (size_t i = 0; i < rr; ++i) {
      int64_t da = i + ab.size() >= rr ? ab[i + ab.size() - rr] : 1;
      int64_t db = i + bb.size() >= rr ? bb[i + bb.size() - rr] : 1;
      ob[i] = da == 1 ? db : da;
    }
    batch = collapse(ob, {scaled(broadcast_strides(ab, ob), M * K), scaled(broadcast_strides(bb, ob), K * N),
                          scaled(contiguous_strides(ob), M * N)});
    // b shared by every batch of an untransposed a ([B, M, K] . [K, N], a transformer's
    // projections): one product of B * M rows, which the tensor-core and split-K paths take.
    if (!ta && shape_numel(bb) == 1 && shape_numel(ab) > 1) {
      M *= shape_numel(ab);
      batch = collapse({}, {{}, {}, {}});
    }
  }
  // Few rows (decode, M <= 16): gemv. Else matmul_tiled with 8x8 results per invocation:
  // 128x256 tiles when both sides are large and the device allows 512 invocations, 128x128,
  // then 64x64 or 32x128 when M is small; BK 8 (on the H100, BK 8 beat 16 and 32 by 1.6x at
  // every tile size: smaller tiles in shared memory let more work groups share an SM).
  // When the tiles give fewer than kSplitTarget work groups and K is long, K is split and
  // a second dispatch sums the partial products. Measured figures: docs/benchmarks.md.
  const DeviceCaps& caps = env_.dev.caps;
  // f16/bf16 operands in 2-byte storage: the ".h16" tiled kernel (widens on load, f32
  // products, one rounding into y's dtype); f16 x f16 on tensor cores where the device has them.
  const uint32_t ak = kind(A), bk = kind(B), biask = bias ? kind(*bias) : 0u, yk = kind(out());
  const bool half = ak || bk || biask || yk;
  bool no_batch_dims = batch.dims.size() == 1 && batch.dims[0] == 1;
  if (half && ak == bk && no_batch_dims && M > 16) {
    // A consumer folded in (ProductEpilogue), where its tensors bind whole
    if (epi_ && binds_whole(caps, epi_->out) && (!epi_->residual || binds_whole(caps, *epi_->residual))) {
      MatmulOperands mo{A, B, bias, epi_->out, ta ? 1u : 0u, tb ? 1u : 0u, M, N, K};
      mo.residual = epi_->residual;
      mo.act = epi_->act;
      if (lower_matmul_tensor_cores(*this, mo)) {
        epi_->done = true;
        return;
      }
    }
    if (lower_matmul_tensor_cores(*this, {A, B, bias, out(), ta ? 1u : 0u, tb ? 1u : 0u, M, N, K})) return;
  }
  bool gemv = M <= 16;
  uint32_t BM = 128, BN = 128, BK = 8, TM = 8, TN = 8, DB = 1, wg, ROWS = M <= 8 ? 4 : 2;
  if (M < 64) {
    BM = 32, TM = 4, TN = 4;
  } else {
    // The largest tile that still gives enough work groups once split-K (below) has done
    // what K allows: big tiles reuse more of each load, but a few of them leave SMs idle
    // (the d-1024 decoder's linears, M 256, K 1024, ran 3x faster on 64x64 tiles).
    int64_t batches = 1;
    for (int64_t d : batch.dims) batches *= d;
    auto enough = [&](uint32_t bm, uint32_t bn) {
      uint64_t t = (uint64_t)ceil_div(M, bm) * ceil_div(N, bn) * batches;
      uint64_t split = batches == 1 ? std::max<uint64_t>(1, (uint64_t)K / 512) : 1;
      return t * std::min<uint64_t>(split, t >= 32 ? 4 : 8) >= 128;
    };
    bool wide_ok = caps.max_wg_invocations >= 512 && 2ull * (128 + 256) * BK * 4 <= caps.max_shared_bytes;
    if (M >= 128 && N >= 256 && wide_ok && enough(128, 256)) BN = 256;
    else if (M < 128 || N < 128 || !enough(128, 128)) BM = BN = 64, TM = TN = 4;
    // 2-byte operands (the ".h16" variant): on the H100 some 8x8-per-invocation tilings ran
    // 12-25x slower than their f32 twins (128x128 for the decoder's N 14336 linears, every 8x8
    // tiling of an untransposed 4096^3 product), not understood yet; a transposed b (linear
    // weights) on 128x256 tiles was fine (the decoder's linears in 7.2 ms), and 64x64x16 tiles
    // of 4x4 were sane everywhere (4096^3 in 6.0 ms), so those take the rest.
    if (half && !(BN == 256 && tb)) BM = BN = 64, BK = 16, TM = TN = 4;
  }
  if (const char* e = std::getenv("RLX_VK_MATMUL")) {  // benchmarking: "BMxBNxBKxTMxTN[xDB]"
    int got = std::sscanf(e, "%ux%ux%ux%ux%ux%u", &BM, &BN, &BK, &TM, &TN, &DB);
    if (got < 5 || BM % (TM * 4) || BN % (TN * 4) || BK % 4 || (TM != 4 && TM != 8) || (TN != 4 && TN != 8))
      fail("RLX_VK_MATMUL must be BMxBNxBKxTMxTN[xDB] with TM, TN in {4, 8}, BM % 4TM = BN % 4TN = BK % 4 = 0");
  }
  while (BK > 8 && 2ull * (BM + BN) * BK * 4 > caps.max_shared_bytes) BK /= 2;
  uint64_t gx, gy = 1;
  std::string shader = half ? "matmul_tiled.h16" : "matmul_tiled";
  auto kinds = [&](Dispatch& d, uint32_t y_kind) {
    if (!half) return;
    d.spec.resize(17, 0);
    d.spec[13] = ak;
    d.spec[14] = bk;
    d.spec[15] = biask;
    d.spec[16] = y_kind;
  };
  uint32_t nsplit = 1, kchunk = (uint32_t)K, gcols = 32;
  if (gemv) {
    wg = 256;
    shader = row_shader("gemv") + (half ? ".h16" : "");
    // b [K, N]: COLS columns per work group, K split over wg / COLS slices; fewer columns
    // (more slices) when N is small, so that some 64 work groups share the weight's reads.
    gcols = 32;
    while (gcols > 8 && ceil_div(N, gcols) < 64) gcols /= 2;
    uint64_t groups = tb ? ceil_div(N, ROWS) : ceil_div(N, gcols);
    gx = std::min<uint64_t>(groups, caps.max_groups[0]);
    gy = ceil_div(groups, gx);
  } else {
    wg = (BM / TM) * (BN / TN);
    if (wg > caps.max_wg_invocations) fail("matmul tile needs more invocations than the device allows");
    gy = ceil_div(M, BM);
    gx = ceil_div(N, BN);
    bool one = batch.dims.size() == 1 && batch.dims[0] == 1;
    // Split-K aims at about kSplitTarget work groups in all (several resident per SM on a
    // 132-SM H100), at most 4-way unless the tiles are very few, chunks at least kMinChunk deep.
    // On the H100 this picked the best of 1/2/4/8-way for every linear of the d-4096 decoder.
    constexpr uint64_t kSplitTarget = 1024, kMinChunk = 512;
    uint64_t tiles = gx * gy;
    if (one && 4 * tiles <= kSplitTarget && (uint64_t)K >= 2 * kMinChunk) {
      uint64_t want = 1;
      while (2 * want * tiles <= kSplitTarget) want *= 2;
      if (tiles >= 32) want = std::min<uint64_t>(want, 4);
      want = std::min<uint64_t>(want, (uint64_t)K / kMinChunk);
      if (const char* e = std::getenv("RLX_VK_SPLITK")) want = std::max(1, std::atoi(e));
      kchunk = (uint32_t)(ceil_div(ceil_div(K, want), BK) * BK);
      nsplit = (uint32_t)ceil_div(K, kchunk);
      // The partial products must fit one binding (issue 30).
      if ((uint64_t)nsplit * M * N * 4 > view_budget(caps)) nsplit = 1, kchunk = (uint32_t)K;
    }
  }
  const auto& mg = caps.max_groups;
  if (gx > mg[0] || gy > mg[1]) fail("matrix too large for one dispatch");

  if (nsplit > 1) {  // split-K: partial products into scratch, then their sum
    TensorRef part = env_.scratch((int64_t)nsplit * M * N);
    bool vec = K % 4 == 0 && (ta ? M : K) % 4 == 0 && (tb ? K : N) % 4 == 0 && N % 4 == 0;
    Dispatch& d = add(shader, with_wg({BM, BN, BK, TM, TN, ta, tb, 0u, 0u, 0u}, wg));
    d.spec.resize(13, 0);
    d.spec[11] = 1;
    d.spec[12] = DB;
    uint32_t ao = read(d, A), bo = read(d, B);
    bind_dummy(d);
    uint32_t po = write(d, part);
    d.spec[9] = vec && ao % 4 == 0 && bo % 4 == 0 && po % 4 == 0;
    kinds(d, 0u);
    d.push = {(uint32_t)M, (uint32_t)N, (uint32_t)K, ao, bo, 0u, po, 0u, 0, 0, 0, 0, 0, 0, 0, 0, 0, kchunk};
    d.groups[0] = (uint32_t)gx;
    d.groups[1] = (uint32_t)gy;
    d.groups[2] = nsplit;
    Dispatch& r = half ? add("matmul_splitk.h16", {bias ? 1u : 0u, biask, yk}) : add("matmul_splitk", {bias ? 1u : 0u});
    uint32_t pr = read(r, part), biaso = bias ? read(r, *bias) : (bind_dummy(r), 0u), yo = write(r, out());
    r.push = {(uint32_t)(M * N), (uint32_t)N, nsplit, pr, biaso, yo};
    grid(r, ceil_div(M * N, 4), 256);
    return;
  }

  // Up to 3 inner batch dims are walked in the shader; outer ones (rare) by dispatches.
  size_t nb = batch.dims.size(), inner_from = nb > 3 ? nb - 3 : 0;
  bool no_batch = batch.dims.size() == 1 && batch.dims[0] == 1;
  uint32_t NB = no_batch ? 0u : (uint32_t)(nb - inner_from);
  int64_t inner = 1, outer = 1;
  for (size_t i = 0; i < nb; ++i) (i < inner_from ? outer : inner) *= no_batch ? 1 : batch.dims[i];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t oa = 0, ob = 0, oy = 0, rem = o;
    for (int i = (int)inner_from - 1; i >= 0; --i) {
      int64_t c = rem % batch.dims[i];
      rem /= batch.dims[i];
      oa += c * batch.strides[0][i];
      ob += c * batch.strides[1][i];
      oy += c * batch.strides[2][i];
    }
    for (int64_t z0 = 0; z0 < inner; z0 += mg[2]) {
      Dispatch& d = add(shader, gemv ? with_wg({(uint32_t)M, ta, tb, bias ? 1u : 0u, NB, ROWS}, wg)
                                     : with_wg({BM, BN, BK, TM, TN, ta, tb, bias ? 1u : 0u, NB, 0u}, wg));
      uint32_t ao = read(d, A) + (uint32_t)oa, bo = read(d, B) + (uint32_t)ob;
      uint32_t biaso = bias ? read(d, *bias) : (bind_dummy(d), 0u);
      uint32_t yo = write(d, out()) + (uint32_t)oy;
      d.push = {(uint32_t)M, (uint32_t)N, (uint32_t)K, ao, bo, biaso, yo, (uint32_t)z0};
      std::vector<int64_t> bd, sa, sb;
      bool vec = ao % 4 == 0 && bo % 4 == 0 && yo % 4 == 0 && (ta ? M : K) % 4 == 0 && (tb ? K : N) % 4 == 0 &&
                 N % 4 == 0;
      for (size_t i = inner_from; i < nb && !no_batch; ++i) {
        bd.push_back(batch.dims[i]);
        sa.push_back(batch.strides[0][i]);
        sb.push_back(batch.strides[1][i]);
        vec = vec && sa.back() % 4 == 0 && sb.back() % 4 == 0;
      }
      if (!gemv) {
        d.spec[9] = vec;
        d.spec.resize(13, 0);
        d.spec[12] = DB;
        kinds(d, yk);
      } else {
        if (half) {  // gemv.h16: storage kinds at constant ids 6..9
          d.spec[6] = ak;
          d.spec[7] = bk;
          d.spec[8] = biask;
          d.spec[9] = yk;
        }
        d.spec.resize(12, 0);
        d.spec[11] = gcols;
      }
      push_array(d, bd, 3);
      push_array(d, sa, 3);
      push_array(d, sb, 3);
      if (!gemv) d.push.push_back(K);  // kchunk (unused without split)
      d.groups[0] = (uint32_t)gx;
      d.groups[1] = (uint32_t)gy;
      d.groups[2] = (uint32_t)std::min<int64_t>(inner - z0, mg[2]);
    }
  }
}

// ------------------------------------------------------------ gather, rope, attention

void Lowering::embedding() {
  const TensorRef &table = in(0), &idx = in(1);
  int64_t D = table.shape.size() >= 2 ? table.shape[1] : 1, V = table.shape.empty() ? 0 : table.shape[0];
  Dispatch& d = add("embedding", {});
  uint32_t to = read(d, table), io = read(d, idx);
  d.bindings.push_back(env_.error);
  uint32_t yo = write(d, out());
  d.push = {(uint32_t)out().numel(), (uint32_t)D, (uint32_t)V, to, io, yo, id_, 0u, (uint32_t)V};
  grid(d, out().numel(), 256);
}

void Lowering::rope() {
  const TensorRef& x = in(0);
  size_t r = x.shape.size();
  if (r < 2) fail("rope needs x of rank >= 2 ([..., S, D])");
  int64_t S = x.shape[r - 2], D = x.shape[r - 1];
  int64_t dims = attrs().has("dims") ? attrs().i("dims") : D;
  bool offset_input = k_.inputs.size() >= 2;
  const VulkanBuffer& table = env_.rope_table(dims, attrs().f("base"), attrs().f("scale"));
  TensorRef tref{const_cast<VulkanBuffer*>(&table), 0, {std::max<int64_t>(1, dims)}, DType::f32};
  const uint32_t xk = kind(x), yk = kind(out());
  Dispatch& d = add(is_kind16(xk) || is_kind16(yk) ? "rope.h16" : "rope",
                    {attrs().b("traditional") ? 1u : 0u, offset_input ? 1u : 0u, xk, yk});
  uint32_t xo = read(d, x), fo = read(d, tref);
  uint32_t oo = offset_input ? read(d, in(1)) : (bind_dummy(d), 0u);
  uint32_t yo = write(d, out());
  d.push = {(uint32_t)x.numel(), (uint32_t)S, (uint32_t)D, (uint32_t)dims, xo, fo, oo, yo,
            (uint32_t)(int32_t)attrs().i("offset")};
  grid(d, x.numel(), 256);
}

// An attention with `views` (compiled mode's attention_views pass): the tensor-core kernel
// reads q, k, v and writes o at their strides; elsewhere q, k, v are copied into contiguous f32
// scratch, the contiguous kernels run on them, and o is copied out to its strides.
void Lowering::attention_views() {
  std::string err;
  const ir::AttentionViews av = ir::attention_views(attrs(), &err);
  if (!err.empty()) fail(err);
  if (k_.inputs.size() != 3) fail("attention with views takes no mask");
  const int64_t B = av.B, H = av.H, Sq = av.Sq, Sk = av.Sk, D = av.D, Dv = av.Dv;
  const float scale = attrs().has("scale") ? (float)attrs().f("scale") : 1.0f / std::sqrt((float)D);
  const uint32_t causal = attrs().b("causal") ? 1u : 0u;
  auto at = [&](int k) {  // operand k from its view's first element
    TensorRef t = in(k);
    t.offset += (size_t)av.off[k] * dtype_size(device_storage(env_.dev.caps, t.dtype));
    t.shape = {av.extent(k) - av.off[k]};
    return t;
  };
  const TensorRef q = at(0), kk = at(1), v = at(2);
  if (lower_attention_tensor_cores(*this, {q, kk, v, nullptr, out(), B, H, H, Sq, Sk, D, Dv, scale, 0u, causal, 0, 0, 0, 0,
                                           {{av.stride[0][0], av.stride[0][1], av.stride[0][2]},
                                            {av.stride[1][0], av.stride[1][1], av.stride[1][2]},
                                            {av.stride[2][0], av.stride[2][1], av.stride[2][2]},
                                            {av.stride[3][0], av.stride[3][1], av.stride[3][2]}},
                                           true}))
    return;
  auto box = [&](int k, int64_t S, int64_t W) {
    TensorRef s = env_.scratch(std::max<int64_t>(1, B * H * S * W));
    s.shape = {B, H, S, W};
    strided(k == 0 ? q : k == 1 ? kk : v, 0, {av.stride[k][0], av.stride[k][1], av.stride[k][2], 1}, s, 0,
            contiguous_strides(s.shape), s.shape, kEwIdentity, 0);
    return s;
  };
  Kernel sub = k_;
  sub.inputs = {box(0, Sq, D), box(1, Sk, D), box(2, Sk, Dv)};
  sub.output = env_.scratch(std::max<int64_t>(1, B * H * Sq * Dv));
  sub.output.shape = {B, H, Sq, Dv};
  ir::Node plain = *k_.node;  // the contiguous attention over the copies
  plain.attrs.values.erase("views");
  plain.attrs.values.erase("out_shape");
  plain.attrs.values["scale"] = (double)scale;
  sub.node = &plain;
  for (Dispatch& d : Lowering(env_, sub, id_).run()) ds_.push_back(std::move(d));
  strided(sub.output, 0, contiguous_strides(sub.output.shape), out(), 0,
          {av.stride[3][0], av.stride[3][1], av.stride[3][2], 1}, sub.output.shape, kEwIdentity, 0);
}

void Lowering::attention() {
  if (attrs().has("views")) return attention_views();
  const TensorRef &q = in(0), &kk = in(1), &v = in(2);
  size_t r = q.shape.size();
  if (r < 2 || r > 4 || kk.shape.size() != r || v.shape.size() != r) fail("attention needs q, k, v of rank 2, 3 or 4");
  auto dim = [&](const Shape& s, int from_end) { return (int)r - from_end >= 0 ? s[r - from_end] : (int64_t)1; };
  int64_t B = r == 4 ? q.shape[0] : 1;
  int64_t Hq = r >= 3 ? dim(q.shape, 3) : 1, Hkv = r >= 3 ? dim(kk.shape, 3) : 1;
  int64_t Sq = dim(q.shape, 2), Sk = dim(kk.shape, 2), D = dim(q.shape, 1), Dv = dim(v.shape, 1);
  if (Hkv == 0 || Hq % Hkv) fail("query heads must be a multiple of key/value heads");
  float scale = attrs().has("scale") ? (float)attrs().f("scale") : 1.0f / std::sqrt((float)std::max<int64_t>(1, D));
  bool has_mask = k_.inputs.size() >= 4;
  uint32_t mask_kind = !has_mask ? 0u : in(3).dtype == DType::boolean ? 2u : 1u;
  Strides ms = has_mask ? broadcast_strides(in(3).shape, {B, Hq, Sq, Sk}) : Strides{0, 0, 0, 0};
  // f16 q/k/v on a device with tensor cores: their flash kernel (kernels_coopmat.cpp)
  if (lower_attention_tensor_cores(*this, {q, kk, v, has_mask ? &in(3) : nullptr, out(), B, Hq, Hkv, Sq, Sk, D, Dv,
                                           scale, mask_kind, attrs().b("causal") ? 1u : 0u, ms[0], ms[1], ms[2],
                                           ms[3],
                                           {{Hq * Sq * D, Sq * D, D},
                                            {Hkv * Sk * D, Sk * D, D},
                                            {Hkv * Sk * Dv, Sk * Dv, Dv},
                                            {Hq * Sq * Dv, Sq * Dv, Dv}},
                                           false}))
    return;
  // Many query rows (prefill): the register-tiled kernel, 64 rows per work group.
  // Else 16 rows per work group; with few work groups (decode) the keys are
  // split over more groups and the partial results combined.
  uint64_t nrows = (uint64_t)(Hq / Hkv) * Sq;
  bool tiled = nrows >= 64;
  const uint32_t BR = tiled ? 64 : 16, BC = 32;
  uint64_t qblocks = ceil_div(nrows, BR), groups = (uint64_t)B * Hkv * qblocks;
  uint32_t nsplit = 1, kchunk = (uint32_t)Sk;
  if (!tiled && groups < 256 && Sk >= 256) {  // aim at ~2048 work groups of >= 1 key block each
    nsplit = (uint32_t)std::min<uint64_t>(ceil_div(2048, groups), ceil_div(Sk, BC));
    kchunk = ceil_div(ceil_div(Sk, nsplit), BC) * BC;
    nsplit = ceil_div(Sk, kchunk);
  }
  bool split = nsplit > 1;
  TensorRef part;
  if (split) part = env_.scratch((int64_t)B * Hq * Sq * nsplit * (Dv + 2));
  // 64 staged v columns need 33 KiB of shared memory; 32 fit in 32 KiB.
  uint32_t vc = env_.dev.caps.max_shared_bytes >= 34 * 1024 ? 64 : 32;
  // 2-byte q/k/v/mask/o (the ".h16" variants): widened as they are staged, o rounded once on
  // store (a split's partial results stay f32 scratch, rounded by attention_combine)
  const uint32_t qk = kind(q), kk_ = kind(kk), vk = kind(v), mk = has_mask ? kind(in(3)) : 0u, ok = kind(out());
  const bool half = is_kind16(qk) || is_kind16(kk_) || is_kind16(vk) || is_kind16(mk) || is_kind16(ok);
  const std::string h16 = half ? ".h16" : "";
  std::vector<uint32_t> spec = {(uint32_t)D, (uint32_t)Dv, vc, qk, kk_, vk, mk, split ? 0u : ok, 0u};
  Dispatch& d = add((tiled ? std::string("attention_tiled") : env_.dev.caps.cpu ? "attention.cpu" : "attention") + h16,
                    spec);
  uint32_t qo = read(d, q), ko = read(d, kk), vo = read(d, v);
  // q, k, v all 2-byte, at even offsets with even head dims: staged two values per 32-bit load
  if (is_kind16(qk) && is_kind16(kk_) && is_kind16(vk) && D % 2 == 0 && Dv % 2 == 0 && qo % 2 == 0 && ko % 2 == 0 &&
      vo % 2 == 0)
    d.spec[8] = 1;
  uint32_t mo = has_mask ? read(d, in(3)) : (bind_dummy(d), 0u);
  uint32_t oo = write(d, split ? part : out());
  d.push = {(uint32_t)Sq, (uint32_t)Sk, (uint32_t)Hq, (uint32_t)(Hq / Hkv), (uint32_t)Hkv, qo, ko, vo, mo, oo,
            f2u(scale), (uint32_t)ms[0], (uint32_t)ms[1], (uint32_t)ms[2], (uint32_t)ms[3], kchunk, nsplit,
            mask_kind, attrs().b("causal") ? 1u : 0u, split ? 1u : 0u};
  const auto& mg = env_.dev.caps.max_groups;
  d.groups[0] = (uint32_t)qblocks;
  d.groups[1] = (uint32_t)Hkv;
  d.groups[2] = (uint32_t)(B * nsplit);
  if (qblocks > mg[0] || Hkv > mg[1] || (uint64_t)B * nsplit > mg[2]) fail("attention too large for one dispatch");
  if (!split) return;
  Dispatch& c = is_kind16(ok) ? add("attention_combine.h16", {ok}) : add("attention_combine", {});
  uint32_t po = read(c, part), yo = write(c, out());
  c.push = {(uint32_t)out().numel(), (uint32_t)Dv, nsplit, po, yo};
  grid(c, out().numel(), 256);
}

// ------------------------------------------------------------ fused elementwise

void Lowering::fused() {
  const FusedProgram& p = *k_.fused;
  const Shape& os = out().shape;
  size_t n = k_.inputs.size();
  std::vector<Strides> ops;
  for (const auto& t : k_.inputs) ops.push_back(broadcast_strides(t.shape, os));
  ops.push_back(contiguous_strides(os));
  Collapsed c = collapse(os, ops);
  FusedLayout layout;
  layout.rank = (uint32_t)c.dims.size();
  for (size_t j = 0; j < n; ++j) {
    uint32_t m = 0;
    for (size_t dd = 0; dd < c.dims.size(); ++dd)
      if (c.strides[j][dd] != 0) m |= 1u << dd;
    layout.varies.push_back(m);
  }
  for (const auto& t : k_.inputs) layout.kinds.push_back(kind(t));
  layout.kinds.push_back(kind(out()));
  const DeviceCaps& caps = env_.dev.caps;
  if (layout.rank > kMaxRank) fail("more than 8 dims after collapsing");
  if (n + 1 > caps.max_storage_bindings || fused_push_words(n, layout.rank) * 4 > kPushBytes)
    fail("a fused kernel with " + std::to_string(n) + " inputs over " + std::to_string(layout.rank) +
         " dims needs more bindings or push constants than the device allows; the fusion pass must split it "
         "(at most " + std::to_string(std::min<int64_t>(caps.max_storage_bindings - 1, kPushBytes / 4 - 2 - kMaxRank)) +
         " inputs are always accepted)");
  Dispatch& d = add(env_.fused.shader(p, layout), {});
  std::vector<uint32_t> offs;
  for (const auto& t : k_.inputs) offs.push_back(read(d, t));
  offs.push_back(write(d, out()));
  d.push = {(uint32_t)out().numel()};
  push_array(d, c.dims, layout.rank);
  d.push.insert(d.push.end(), offs.begin(), offs.end());
  grid(d, (out().numel() + kEwPerInvocation - 1) / kEwPerInvocation, kEwGroup);
}

bool Lowering::native16() const {
  if (k_.fused) return true;
  switch (k_.node->op) {
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow: case Op::Maximum: case Op::Minimum:
    case Op::SiluVjp: case Op::GeluVjp: case Op::Equal: case Op::Less: case Op::LessEqual: case Op::Greater:
    case Op::GreaterEqual: case Op::LogicalAnd: case Op::LogicalOr: case Op::LogicalXor: case Op::Mod: case Op::BitShift:
    case Op::Neg: case Op::Exp: case Op::Log: case Op::Sqrt: case Op::Rsqrt: case Op::Abs: case Op::Tanh:
    case Op::Sigmoid: case Op::Relu: case Op::Silu: case Op::Erf: case Op::Sin: case Op::Cos: case Op::Square:
    case Op::Gelu: case Op::Floor: case Op::Ceil: case Op::Round: case Op::Softplus: case Op::LogicalNot:
    case Op::Sign: case Op::Asin: case Op::Acos: case Op::Atan: case Op::Cast: case Op::Reshape: case Op::Transpose: case Op::BroadcastTo: case Op::Narrow:
    case Op::Concat: case Op::Matmul: case Op::Linear:
      return true;
    case Op::Softmax: case Op::ScaledMaskedSoftmax: case Op::SoftmaxVjp: case Op::LayerNorm: case Op::RmsNorm:
    case Op::LayerNormVjp: case Op::RmsNormVjp: case Op::Rope: case Op::Attention:
    case Op::MaxPool2d: case Op::AvgPool2d: case Op::MaxPool3d: case Op::AvgPool3d:  // pool2d.h16
      return !widen16_forced();
    default:
      return false;
  }
}

bool Lowering::native8() const {
  // Fused programs never see integers (the fusion pass leaves integer nodes unfused); were one
  // to, widening keeps it correct.
  if (k_.fused) return false;
  switch (k_.node->op) {
    case Op::Neg: case Op::Exp: case Op::Log: case Op::Sqrt: case Op::Rsqrt: case Op::Abs: case Op::Tanh:
    case Op::Sigmoid: case Op::Relu: case Op::Silu: case Op::Erf: case Op::Sin: case Op::Cos: case Op::Square:
    case Op::Gelu: case Op::Floor: case Op::Ceil: case Op::Round: case Op::Softplus: case Op::LogicalNot:
    case Op::Sign: case Op::Cast: case Op::Reshape: case Op::Transpose: case Op::BroadcastTo: case Op::Narrow:
    case Op::Concat: case Op::Quantize: case Op::Dequantize: case Op::MatmulInteger: case Op::MatmulNbits:
    case Op::Where: case Op::Gather: case Op::GatherElements: case Op::Slice: case Op::Pad:
      return true;
    default:
      return false;
  }
}

std::vector<Dispatch> Lowering::widened(bool w16, bool w8) {
  Kernel kk = k_;
  auto f32_scratch = [&](const TensorRef& t) {
    TensorRef s = env_.scratch(std::max<int64_t>(1, t.numel()));
    s.shape = t.shape;
    s.dtype = DType::f32;
    return s;
  };
  const Strides one = {1};
  auto widen = [&](const TensorRef& t) { return (w16 && is_kind16(kind(t))) || (w8 && is_kind8(kind(t))); };
  for (auto& t : kk.inputs) {
    if (!widen(t)) continue;
    TensorRef s = f32_scratch(t);
    strided(t, 0, one, s, 0, one, {t.numel()}, kEwIdentity, 0);
    t = s;
  }
  bool narrow_out = widen(k_.output);
  if (narrow_out) kk.output = f32_scratch(k_.output);
  for (Dispatch& d : Lowering(env_, kk, id_).run()) ds_.push_back(std::move(d));
  if (narrow_out) strided(kk.output, 0, one, k_.output, 0, one, {k_.output.numel()}, kEwIdentity, 0);
  return std::move(ds_);
}

std::vector<Dispatch> Lowering::run() {
  if (!k_.fused && !k_.node) fail("kernel has neither a node nor a fused program");
  in_split_ = true;  // what lower_split() binds itself is tracked over whole descriptor ranges
  const bool split = lower_split(*this);  // a tensor larger than one binding
  in_split_ = false;
  if (split) return std::move(ds_);
  // Convolutions on the matmul kernels, 2-byte operands included (before they would be widened).
  if (!k_.fused && k_.node && k_.node->op == Op::Conv2d && lower_conv_gemm(*this)) return std::move(ds_);
  const bool w16 = touches(is_kind16) && !native16(), w8 = touches(is_kind8) && !native8();
  if (w16 || w8) return widened(w16, w8);
  if (k_.fused) {
    fused();
    return std::move(ds_);
  }
  if (!k_.node) fail("kernel has neither a node nor a fused program");
  Op op = k_.node->op;
  switch (op) {
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow: case Op::Maximum: case Op::Minimum:
    case Op::SiluVjp: case Op::GeluVjp: case Op::Equal: case Op::Less: case Op::LessEqual: case Op::Greater:
    case Op::GreaterEqual: case Op::LogicalAnd: case Op::LogicalOr: case Op::LogicalXor: case Op::Mod: case Op::BitShift:
      binary(ir::node_ew_op(*k_.node));
      break;
    case Op::Neg: case Op::Exp: case Op::Log: case Op::Sqrt: case Op::Rsqrt: case Op::Abs: case Op::Tanh:
    case Op::Sigmoid: case Op::Relu: case Op::Silu: case Op::Erf: case Op::Sin: case Op::Cos: case Op::Square:
    case Op::Gelu: case Op::Floor: case Op::Ceil: case Op::Round: case Op::Softplus: case Op::LogicalNot:
    case Op::Sign: case Op::Asin: case Op::Acos: case Op::Atan:
      unary((uint32_t)ir::node_ew_op(*k_.node), 0);
      break;
    case Op::Cast: {
      auto t = parse_dtype(attrs().s("dtype"));
      if (!t) fail("unknown dtype " + attrs().s("dtype"));
      unary(kEwIdentity, cast_mode(in(0).dtype, *t));
      break;
    }
    case Op::Reshape: unary(kEwIdentity, 0); break;
    case Op::Transpose: transpose(); break;
    case Op::BroadcastTo:
      strided(in(0), 0, broadcast_strides(in(0).shape, out().shape), out(), 0, contiguous_strides(out().shape),
              out().shape, kEwIdentity, 0);
      break;
    case Op::Narrow: narrow(); break;
    case Op::Concat: concat(); break;
    case Op::Sum: reduce(0); break;
    case Op::Mean: reduce(1); break;
    case Op::Max: reduce(2); break;
    case Op::Softmax: softmax(0); break;
    case Op::ScaledMaskedSoftmax: softmax(1); break;
    case Op::SoftmaxVjp: softmax(2); break;
    case Op::LayerNorm: norm(0); break;
    case Op::RmsNorm: norm(1); break;
    case Op::LayerNormVjp: norm(2); break;
    case Op::RmsNormVjp: norm(3); break;
    case Op::Matmul: matmul(false); break;
    case Op::Linear: matmul(true); break;
    case Op::Embedding: embedding(); break;
    case Op::Rope: rope(); break;
    case Op::Attention: attention(); break;
    case Op::Conv2d: case Op::ConvTranspose2d: case Op::MaxPool2d: case Op::AvgPool2d: case Op::Resize:
    case Op::Conv3d: case Op::ConvTranspose3d: case Op::MaxPool3d: case Op::AvgPool3d:
      lower_spatial({env_, k_, [this](Dispatch& d, const TensorRef& t, bool w) { return bind(d, t, w); },
                     [this](Dispatch& d, uint64_t items, uint32_t wg) { grid(d, items, wg); }},
                    ds_);
      break;
    case Op::Input: case Op::Param: case Op::Constant:
      fail(std::string("leaf op '") + ir::op_name(op) + "' cannot be launched");
    default:
      if (!lower_index_op(*this) && !lower_quant_op(*this)) fail(std::string("the Vulkan executor cannot run op ") + ir::op_name(op));
  }
  return std::move(ds_);
}

}  // namespace

bool widen16_forced() {
  static const bool on = [] {
    const char* e = std::getenv("RLX_VK_WIDEN16");
    return e && std::strcmp(e, "1") == 0;
  }();
  return on;
}

std::vector<Dispatch> lower_kernel(LowerEnv& env, const Kernel& k, uint32_t kernel_id, ProductEpilogue* epi) {
  return Lowering(env, k, kernel_id, 0, epi).run();
}

}  // namespace rlx::vk
