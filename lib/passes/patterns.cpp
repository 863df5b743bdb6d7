// Compiled mode's pattern rewrites: the decomposed forms that exporters (torch.onnx, tf2onnx,
// paddle2onnx) write for operations rlx has fused kernels for, recognised on the IR after
// CSE/folding/simplification and rewritten into the registry's ops:
//
//   LayerNorm  (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) [* w] [+ b]  -> layer_norm
//   RMSNorm    x * 1/sqrt(mean(x^2) + eps) [* w]   (or x / sqrt(...))        -> rms_norm
//   GELU       x * 0.5 * (1 + erf(x / sqrt(2)))   (any association; x from a matrix product) -> gelu
//   bias       matmul(x, B) + b   (B a param or constant [K, N], b [N])      -> linear(x, B^T, b)
//              (B^T a copy made once; with OptOptions::transposed_linear off, only a B given
//              transposed becomes linear: matmul(x, B^T) + b -> linear(x, B, b))
//   attention  matmul(softmax(matmul(q, k^T) [/ c | * c] [+ mask]), v)       -> attention
//              (grouped-query k/v written as reshape/expand/reshape read the kv heads directly;
//               a constant causal mask becomes causal = true)
//   RoPE       x * cos + concat(-x[.., D/2:], x[.., :D/2]) * sin  (constant tables)  -> rope
//   conv       conv2d(x, W, b) followed by per-output-channel mul/add by constants (an
//              inference BatchNormalization as the importer writes it)          -> conv2d(x, W', b')
//   int8       matmul_integer(q, W, zq, zW) -> cast f32 -> mul(scale) [-> add(bias)], W a
//              param or constant matrix, scale a scalar or [N] (ONNX Runtime's dynamic
//              quantization, QLinearMatMul compositions)       -> matmul_integer_scaled
//   QDQ        matmul(dequantize(xq, sx, zx), dequantize(W, sw, zw)) [+ bias], x per tensor, W a
//              constant matrix per tensor or per column         -> matmul_integer_scaled(xq, W,
//              zx, zw, sx * sw, bias)  (one exact integer product, then one f32 rounding of
//              the scale: within f32 rounding of the dequantized product, not bit-equal)
//   QDQ conv   conv2d(dequantize(xq, sx, zx), dequantize(W, sw, zw) [, bias]), x per tensor, W a
//              constant [M, C, kH, kW] per tensor or per output channel, groups 1
//                                                       -> conv2d_integer_scaled(xq, W, zx, zw,
//              sx * sw, bias)  (the same exact integer sum and one f32 rounding of the scale)
//              All three only where the backend runs integer products (OptOptions::integer_gemm).
//
// Every rewrite checks dtypes (f32), axes, constants, shapes and that the nodes it absorbs are
// read by nothing else; anything that does not fit exactly stays as it was. The rewritten node
// keeps its id, so outputs and later nodes are unaffected. Weights derived from params (a
// transposed B, a conv weight scaled by BatchNorm) are graph nodes over params only: compiled
// mode computes them once when it builds the plan (Session::build_exec), never per run.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "ir/op_registry.h"
#include "passes/work.h"

namespace rlx::passes::detail {

using ir::Node;
using ir::Op;

namespace {

bool near(double a, double b, double rel = 1e-6) { return std::abs(a - b) <= rel * std::abs(b); }

struct Rewriter {
  Work& w;
  const OptOptions& o;
  OptStats& st;
  std::vector<std::vector<int>> users;
  std::vector<char> is_out, dead;
  std::map<std::string, int> counts;

  void index() {
    auto order = live_order(w);
    users.assign(w.nodes.size(), {});
    is_out.assign(w.nodes.size(), 0);
    dead.assign(w.nodes.size(), 1);
    for (int v : order) {
      dead[v] = 0;
      for (int u : w.nodes[v].inputs) users[u].push_back(v);
    }
    for (int x : w.outputs) is_out[x] = 1;
  }
  std::vector<int> order() { return live_order(w); }

  const Node& node(int i) const { return w.nodes[i]; }
  Op op(int i) const { return w.nodes[i].op; }
  const Shape& shape(int i) const { return w.shapes[i]; }
  int in(int i, int k) const { return w.nodes[i].inputs[k]; }
  bool f32(int i) const { return w.dtypes[i] == DType::f32; }
  // f32, f16 or bf16: the float dtypes whose fused kernels (layer_norm, rms_norm, gelu, linear)
  // take every operand in that dtype on both backends (the CPU through its f32 adapter or half
  // products; Vulkan natively for gelu and linear, widened to f32 scratch for the norms). A
  // --dtype f16/bf16 graph is converted before these passes run, so the norm, GELU and bias
  // rewrites match it too (attention only where the backend reads 2-byte q/k/v, see att()); become() refuses a
  // rewrite whose float operands are not all of the root's dtype.
  bool fl(int i) const { return w.dtypes[i] == DType::f32 || is_half(w.dtypes[i]); }
  bool leaf(int i) const { return op(i) == Op::Param || op(i) == Op::Constant; }
  // An attribute with its registry default when absent (graphs are loaded with defaults filled;
  // this keeps the matchers safe on any graph).
  bool flag(int i, const char* name) const { return w.nodes[i].attrs.has(name) && w.nodes[i].attrs.b(name); }
  std::vector<int64_t> perm_of(int i) const {
    const int r = (int)shape(in(i, 0)).size();
    std::vector<int64_t> p(r);
    if (w.nodes[i].attrs.has("perm")) p = w.nodes[i].attrs.ints("perm");
    else for (int k = 0; k < r; ++k) p[k] = r - 1 - k;
    for (auto& e : p) e = e < 0 ? e + r : e;
    return p;
  }

  // The live users of i.
  std::vector<int> live_users(int i) const {
    std::vector<int> r;
    for (int u : users[i])
      if (!dead[u] && std::find(r.begin(), r.end(), u) == r.end()) r.push_back(u);
    return r;
  }
  // The one node reading i (not an output), or -1.
  int sole_user(int i) const {
    if (is_out[i]) return -1;
    auto u = live_users(i);
    return u.size() == 1 ? u[0] : -1;
  }
  // Every node of `inner` other than `root` is read only by nodes of `inner` and is no output.
  bool exclusive(const std::vector<int>& inner, int root) const {
    for (int m : inner) {
      if (m == root) continue;
      if (is_out[m]) return false;
      for (int u : live_users(m))
        if (std::find(inner.begin(), inner.end(), u) == inner.end()) return false;
    }
    return true;
  }
  // A one-element float constant.
  bool scalar(int i, double* v = nullptr) const {
    const Node& n = w.nodes[i];
    if (n.op != Op::Constant || n.constant.numel() != 1 || !is_float(n.constant.dtype())) return false;
    if (v) *v = n.constant.at(0);
    return true;
  }
  // In an f16/bf16 graph the constant holds `want` rounded to its dtype (as --dtype's
  // conversion or a 16-bit exporter wrote it): compared against that rounding.
  bool scalar_is(int i, double want, double rel = 1e-6) const {
    double v;
    if (!scalar(i, &v)) return false;
    const DType dt = w.nodes[i].constant.dtype();
    return near(v, is_half(dt) ? (double)round_to_dtype((float)want, dt) : want, rel);
  }
  // Binary node i with operands matched in either order (commutative ops): a gets the one
  // that satisfies pred.
  template <class P>
  bool either(int i, Op want, P pred, int* a, int* b) const {
    if (op(i) != want || w.nodes[i].inputs.size() != 2) return false;
    int x = in(i, 0), y = in(i, 1);
    if (pred(x)) { *a = x; *b = y; return true; }
    if (pred(y)) { *a = y; *b = x; return true; }
    return false;
  }
  // mean over the last axis only, keepdims: returns its input or -1.
  int last_axis_mean(int i) const {
    if (op(i) != Op::Mean || !fl(i)) return -1;
    const Node& n = w.nodes[i];
    const int r = (int)shape(in(i, 0)).size();
    if (r < 1 || !n.attrs.has("axes") || !flag(i, "keepdims")) return -1;
    const auto& ax = n.attrs.ints("axes");
    if (ax.size() != 1 || (ax[0] < 0 ? ax[0] + r : ax[0]) != r - 1) return -1;
    return in(i, 0);
  }
  // t^2 written as pow(t, 2), mul(t, t) or square(t): returns t or -1.
  int squared(int i) const {
    if (op(i) == Op::Square) return in(i, 0);
    if (op(i) == Op::Pow && scalar_is(in(i, 1), 2.0, 0)) return in(i, 0);
    if (op(i) == Op::Mul && in(i, 0) == in(i, 1)) return in(i, 0);
    return -1;
  }
  // mean(t^2 over the last axis) + eps written out: a is the add node; returns t, sets eps.
  int mean_square_plus_eps(int a, double* eps, std::vector<int>* inner) const {
    int v, e;
    if (!either(a, Op::Add, [&](int k) { return scalar(k); }, &e, &v)) return -1;
    scalar(e, eps);
    if (*eps < 0) return -1;
    int p = last_axis_mean(v);
    if (p < 0) return -1;
    int t = squared(p);
    if (t < 0) return -1;
    inner->insert(inner->end(), {a, v, p});
    return t;
  }
  // 1/sqrt(a) written as rsqrt(a) or 1 / sqrt(a): returns a or -1.
  int reciprocal_sqrt(int r, std::vector<int>* inner) const {
    if (op(r) == Op::Rsqrt) {
      inner->push_back(r);
      return in(r, 0);
    }
    if (op(r) == Op::Div && scalar_is(in(r, 0), 1.0, 0) && op(in(r, 1)) == Op::Sqrt) {
      inner->insert(inner->end(), {r, in(r, 1)});
      return in(in(r, 1), 0);
    }
    return -1;
  }
  // y = num / sqrt(a) or num * 1/sqrt(a): returns a, sets num.
  int normalised(int y, int* num, std::vector<int>* inner) const {
    if (!fl(y)) return -1;
    if (op(y) == Op::Div && op(in(y, 1)) == Op::Sqrt) {
      *num = in(y, 0);
      inner->insert(inner->end(), {y, in(y, 1)});
      return in(in(y, 1), 0);
    }
    if (op(y) == Op::Mul)
      for (int k = 0; k < 2; ++k) {
        std::vector<int> tmp{y};
        int a = reciprocal_sqrt(in(y, k), &tmp);
        if (a >= 0) {
          *num = in(y, 1 - k);
          inner->insert(inner->end(), tmp.begin(), tmp.end());
          return a;
        }
      }
    return -1;
  }
  // A vector of D values broadcast along the last axis ([D] or [1, ..., 1, D]).
  bool last_axis_vector(int v, int64_t D) const {
    const Shape& s = shape(v);
    if (s.empty() || s.back() != D || !fl(v)) return false;
    for (size_t k = 0; k + 1 < s.size(); ++k)
      if (s[k] != 1) return false;
    return true;
  }

  // ---- building ----
  int add_node(Op op_, std::vector<int> inputs, ir::Attrs attrs, const std::string& id_base) {
    Node n;
    n.op = op_;
    n.id = id_base + "/rlx" + std::to_string(w.fresh++);
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    fill_defaults(n);
    Shape s;
    DType dt;
    if (!infer(n, &s, &dt)) throw Error(3, "internal: pattern rewrite built an invalid node " + n.id);
    n.dtype = dt;
    w.nodes.push_back(std::move(n));
    w.shapes.push_back(s);
    w.dtypes.push_back(dt);
    const int i = (int)w.nodes.size() - 1;
    users.emplace_back();
    is_out.push_back(0);
    dead.push_back(0);
    for (int u : w.nodes[i].inputs) users[u].push_back(i);
    // Over constants only: folded now (a node over params is computed once per compiled plan).
    bool all_const = true;
    for (int u : w.nodes[i].inputs) all_const = all_const && op(u) == Op::Constant;
    if (o.fold && all_const && shape_numel(s) <= o.max_fold_elements) {
      Tensor v = fold_node(w, i);
      Node& me = w.nodes[i];
      me.op = Op::Constant;
      me.inputs.clear();
      me.attrs = {};
      me.constant = std::move(v);
      me.param_name = me.id;
      me.has_decl_shape = true;
      me.decl_shape.clear();
      for (auto d : s) me.decl_shape.push_back({d, ""});
    }
    return i;
  }
  int reshape(int x, const Shape& s) {
    if (shape(x) == s) return x;
    ir::Attrs a;
    a.values["shape"] = std::vector<int64_t>(s.begin(), s.end());
    return add_node(Op::Reshape, {x}, a, node(x).id);
  }
  int constant(const Shape& s, const std::vector<float>& v) {
    int i = w.add_constant(Tensor::from_vector(s, v));
    users.emplace_back();
    is_out.push_back(0);
    dead.push_back(0);
    return i;
  }
  static void fill_defaults(Node& n) {
    for (const auto& spec : ir::op_info(n.op).attrs)
      if (!n.attrs.has(spec.name) && spec.default_value) n.attrs.values[spec.name] = *spec.default_value;
  }
  // The registry's shape rule for n over the current shapes.
  bool infer(const Node& n, Shape* s, DType* dt) const {
    ir::Graph g;
    ir::TypedShapes ts;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      Node leaf;
      leaf.op = Op::Input;
      leaf.id = "in" + std::to_string(k);
      leaf.dtype = w.dtypes[n.inputs[k]];
      g.nodes.push_back(leaf);
      ts.shapes.push_back(w.shapes[n.inputs[k]]);
      ts.dtypes.push_back(w.dtypes[n.inputs[k]]);
    }
    Node m = n;
    for (size_t k = 0; k < m.inputs.size(); ++k) m.inputs[k] = (int)k;
    g.nodes.push_back(m);
    ts.shapes.emplace_back();
    ts.dtypes.push_back(DType::f32);
    try {
      ir::infer_node(g, (int)m.inputs.size(), ts);
    } catch (const std::exception&) {
      return false;
    }
    *s = ts.shapes.back();
    *dt = ts.dtypes.back();
    return true;
  }
  // Node `root` becomes op(inputs, attrs) when the registry gives it the same shape and dtype.
  bool become(int root, Op op_, std::vector<int> inputs, ir::Attrs attrs, const std::vector<int>& absorbed,
              const char* kind) {
    Node n;
    n.op = op_;
    n.id = w.nodes[root].id;
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    fill_defaults(n);
    Shape s;
    DType dt;
    if (!infer(n, &s, &dt) || s != w.shapes[root] || dt != w.dtypes[root]) return false;
    // No mixed float dtypes: a fused op over half and f32 operands would round differently
    // from the graph it replaces (and not every kernel takes mixed operands).
    for (int u : n.inputs)
      if (is_float(w.dtypes[u]) && w.dtypes[u] != dt) return false;
    Node& me = w.nodes[root];
    me.op = n.op;
    me.inputs = n.inputs;
    me.attrs = n.attrs;
    for (int u : me.inputs) users[u].push_back(root);
    for (int m : absorbed)
      if (m != root) dead[m] = 1;
    counts[kind]++;
    st.patterns++;
    return true;
  }

  // ---------------------------------------------------------------- GELU
  // Factors of a product tree rooted at `root` (nested muls read only inside the tree).
  void factors(int i, int root, std::vector<int>* f, std::vector<int>* inner, int depth = 0) const {
    if (op(i) == Op::Mul && fl(i) && depth < 3 && (i == root || sole_user(i) >= 0)) {
      inner->push_back(i);
      factors(in(i, 0), root, f, inner, depth + 1);
      factors(in(i, 1), root, f, inner, depth + 1);
    } else {
      f->push_back(i);
    }
  }
  // x = matmul(a, B) + b (a bias the linear rewrite will absorb) or b + matmul(a, B).
  bool gemm_plus_bias(int x) const {
    for (int k = 0; k < 2; ++k)
      if (op(in(x, k)) == Op::Matmul && leaf(in(in(x, k), 1))) return true;
    return false;
  }
  bool gelu(int root) {
    if (op(root) != Op::Mul || !fl(root)) return false;
    std::vector<int> f, inner;
    factors(root, root, &f, &inner);
    if (f.size() != 3) return false;
    // One factor is 0.5, one is 1 + erf(x / sqrt 2), the third is x.
    auto half = std::find_if(f.begin(), f.end(), [&](int k) { return scalar_is(k, 0.5); });
    if (half == f.end()) return false;
    f.erase(half);
    for (int k = 0; k < 2; ++k) {
      int e = f[k], x = f[1 - k], er, one;
      if (!either(e, Op::Add, [&](int j) { return scalar_is(j, 1.0); }, &one, &er) || op(er) != Op::Erf) continue;
      int s = in(er, 0);
      bool ok = (op(s) == Op::Div && in(s, 0) == x && scalar_is(in(s, 1), std::sqrt(2.0))) ||
                (op(s) == Op::Mul && ((in(s, 0) == x && scalar_is(in(s, 1), std::sqrt(0.5))) ||
                                      (in(s, 1) == x && scalar_is(in(s, 0), std::sqrt(0.5)))));
      if (!ok || shape(x) != shape(root) || !fl(x)) continue;
      // Only where a matrix product makes x (a linear layer's activation, which the GEMM's
      // epilogue can apply): elsewhere the chain stays one fused elementwise kernel, which is
      // cheaper than rlx's gelu (gelu evaluates the erfc tail for x < 0 to stay accurate there).
      if (op(x) != Op::Matmul && op(x) != Op::Linear && !(op(x) == Op::Add && gemm_plus_bias(x))) continue;
      std::vector<int> all = inner;
      all.insert(all.end(), {e, er, s});
      if (!exclusive(all, root)) continue;
      ir::Attrs a;
      a.values["approximate"] = std::string("none");
      return become(root, Op::Gelu, {x}, a, all, "gelu");
    }
    return false;
  }

  // ---------------------------------------------------------------- LayerNorm / RMSNorm
  // Extends a norm ending at y with a following mul by a weight [D] and (want_bias) an add
  // of a bias [D]; returns the last node and sets *wt / *bs (or -1).
  int affine_tail(int y, bool want_bias, int* wt, int* bs, std::vector<int>* inner) {
    const int64_t D = shape(y).back();
    *wt = *bs = -1;
    int u = sole_user(y), v;
    if (u < 0 || !either(u, Op::Mul, [&](int k) { return k != y && last_axis_vector(k, D); }, wt, &v) ||
        shape(u) != shape(y)) {
      *wt = -1;
      return y;
    }
    inner->push_back(y);
    if (!want_bias) return u;
    int u2 = sole_user(u);
    if (u2 < 0 || !either(u2, Op::Add, [&](int k) { return k != u && last_axis_vector(k, D); }, bs, &v) ||
        shape(u2) != shape(u)) {
      *bs = -1;
      return u;
    }
    inner->push_back(u);
    return u2;
  }
  bool layer_norm(int y) {
    int num;
    std::vector<int> inner;
    int a = normalised(y, &num, &inner);
    if (a < 0 || op(num) != Op::Sub) return false;
    double eps;
    int t = mean_square_plus_eps(a, &eps, &inner);
    if (t != num) return false;
    int x = in(num, 0), m = in(num, 1);
    if (last_axis_mean(m) != x || !fl(x) || shape(x) != shape(y)) return false;
    inner.insert(inner.end(), {num, m});
    int wt, bs;
    int last = affine_tail(y, true, &wt, &bs, &inner);
    inner.push_back(last);
    if (!exclusive(inner, last)) return false;
    const int64_t D = shape(x).back();
    std::vector<int> ins{x};
    if (wt >= 0) ins.push_back(reshape(wt, {D}));
    if (bs >= 0) ins.push_back(reshape(bs, {D}));
    ir::Attrs at;
    at.values["eps"] = eps;
    return become(last, Op::LayerNorm, ins, at, inner, "layer_norm");
  }
  bool rms_norm(int y) {
    int x;
    std::vector<int> inner;
    int a = normalised(y, &x, &inner);
    if (a < 0) return false;
    double eps;
    int t = mean_square_plus_eps(a, &eps, &inner);
    if (t != x || !fl(x) || shape(x) != shape(y)) return false;
    int wt, bs;
    int last = affine_tail(y, false, &wt, &bs, &inner);
    inner.push_back(last);
    if (!exclusive(inner, last)) return false;
    std::vector<int> ins{x};
    if (wt >= 0) ins.push_back(reshape(wt, {shape(x).back()}));
    ir::Attrs at;
    at.values["eps"] = eps;
    return become(last, Op::RmsNorm, ins, at, inner, "rms_norm");
  }

  // ---------------------------------------------------------------- MatMul + bias
  bool linear(int root) {
    int mm, b;
    auto is_mm = [&](int k) {
      return op(k) == Op::Matmul && !flag(k, "transpose_a") && leaf(in(k, 1)) && shape(in(k, 1)).size() == 2;
    };
    if (!fl(root) || !either(root, Op::Add, is_mm, &mm, &b)) return false;
    const int x = in(mm, 0), B = in(mm, 1);
    const bool tb = flag(mm, "transpose_b");
    const int64_t N = shape(mm).back();
    if (!fl(mm) || !fl(x) || !fl(B) || shape(x).empty() || !last_axis_vector(b, N) || shape(root) != shape(mm))
      return false;
    if (!exclusive({mm, root}, root)) return false;
    if (!tb && !o.transposed_linear) return false;
    int W = B;  // linear reads its weight as [Out, In]
    if (!tb) {
      ir::Attrs t;
      t.values["perm"] = std::vector<int64_t>{1, 0};
      W = add_node(Op::Transpose, {B}, t, node(B).id + "/T");
    }
    return become(root, Op::Linear, {x, W, reshape(b, {N})}, {}, {mm, root}, "linear");
  }

  // ---------------------------------------------------------------- attention
  // k given as k^T [.., D, Sk]: k itself, reusing what the transpose read where possible.
  int untranspose(int kt) {
    const int r = (int)shape(kt).size();
    if (op(kt) == Op::Transpose) {
      std::vector<int64_t> p = perm_of(kt);
      if ((int)p.size() != r) return -1;
      std::swap(p[r - 1], p[r - 2]);
      bool ident = true;
      for (int k = 0; k < r; ++k) ident = ident && p[k] == k;
      if (ident) return in(kt, 0);
      ir::Attrs t;
      t.values["perm"] = p;
      return add_node(Op::Transpose, {in(kt, 0)}, t, node(kt).id);
    }
    std::vector<int64_t> p(r);
    for (int k = 0; k < r; ++k) p[k] = k;
    std::swap(p[r - 1], p[r - 2]);
    ir::Attrs t;
    t.values["perm"] = p;
    return add_node(Op::Transpose, {kt}, t, node(kt).id + "/T");
  }
  // Grouped-query k/v written as reshape [B,Hk,1,S,D] -> broadcast_to [B,Hk,n,S,D] -> reshape
  // [B,Hk*n,S,D]: returns the [B,Hk,S,D] tensor and sets *rep = n, else returns x (rep 1).
  int unrepeat(int x, int64_t* rep) const {
    *rep = 1;
    const Shape& s = shape(x);
    if (op(x) != Op::Reshape || s.size() != 4) return x;
    int bt = in(x, 0);
    if (op(bt) != Op::BroadcastTo) return x;
    int r1 = in(bt, 0);
    if (op(r1) != Op::Reshape) return x;
    int k0 = in(r1, 0);
    const Shape &s0 = shape(k0), &s1 = shape(r1), &sb = shape(bt);
    if (s0.size() != 4 || s1 != Shape{s0[0], s0[1], 1, s0[2], s0[3]} || sb.size() != 5 || sb[0] != s0[0] ||
        sb[1] != s0[1] || sb[3] != s0[2] || sb[4] != s0[3] || s != Shape{s0[0], s0[1] * sb[2], s0[2], s0[3]})
      return x;
    *rep = sb[2];
    return k0;
  }
  // A constant additive mask that is exactly the causal one (0 where key j <= query i + Sk - Sq,
  // a huge negative elsewhere) over [.., Sq, Sk] with leading ones.
  bool causal_constant(int m, int64_t Sq, int64_t Sk) const {
    const Node& n = node(m);
    const Shape& s = shape(m);
    if (n.op != Op::Constant || s.size() < 2 || s[s.size() - 2] != Sq || s.back() != Sk || Sk < Sq) return false;
    for (size_t k = 0; k + 2 < s.size(); ++k)
      if (s[k] != 1) return false;
    for (int64_t i = 0; i < Sq; ++i)
      for (int64_t j = 0; j < Sk; ++j) {
        const double v = n.constant.at(i * Sk + j);
        if (j <= i + (Sk - Sq) ? v != 0.0 : !(v <= -1e30)) return false;
      }
    return true;
  }
  // q k^T, optionally divided or multiplied by a scalar constant.
  bool scores_product(int a) const {
    if (op(a) == Op::Div && scalar(in(a, 1))) a = in(a, 0);
    else if (op(a) == Op::Mul && scalar(in(a, 1))) a = in(a, 0);
    else if (op(a) == Op::Mul && scalar(in(a, 0))) a = in(a, 1);
    return op(a) == Op::Matmul;
  }
  // The dtypes attention is fused in: f32, and f16/bf16 where the backend asks for it
  // (OptOptions::half_attention_f16/_bf16: Vulkan's ".h16" attention on a device without tensor
  // cores, and f16 on the tensor-core flash kernel where the device has VK_NV_cooperative_matrix).
  // Elsewhere a 16-bit graph keeps q k^T and p v as products around the softmax: on the H200
  // the scalar ".h16" attention (0.34 ms a layer of ViT-S/16 f16) loses to the unfused
  // tensor-core products (docs/benchmarks.md), and the CPU would widen q, k, v.
  bool att(int i) const {
    DType t = w.dtypes[i];
    return f32(i) || (t == DType::f16 && o.half_attention_f16) || (t == DType::bf16 && o.half_attention_bf16);
  }
  bool attention(int root) {
    if (op(root) != Op::Matmul || !att(root) || flag(root, "transpose_a") || flag(root, "transpose_b"))
      return false;
    int P = in(root, 0), V = in(root, 1);
    if (op(P) != Op::Softmax) return false;
    const int r = (int)shape(P).size();
    if (r != 4 && r != 3) return false;
    int64_t ax = node(P).attrs.has("axis") ? node(P).attrs.i("axis") : -1;
    if ((ax < 0 ? ax + r : ax) != r - 1) return false;
    std::vector<int> inner{root, P};
    int S = in(P, 0), mask = -1;
    if (op(S) == Op::Add) {  // + mask: the other operand of the add, f32, broadcast into the scores
      for (int k = 0; k < 2 && mask < 0; ++k) {
        int a = in(S, k), m = in(S, 1 - k);
        if (scores_product(a)) {
          if (!att(m) || shape(m).size() > (size_t)r || shape(S) != shape(a)) continue;
          inner.push_back(S);
          mask = m;
          S = a;
        }
      }
      if (mask < 0) return false;
    }
    double scale = 1.0, c;
    if (op(S) == Op::Div && scalar(in(S, 1), &c) && c != 0) {
      inner.push_back(S);
      scale = 1.0 / c;
      S = in(S, 0);
    } else if (op(S) == Op::Mul) {
      int a, b;
      if (!either(S, Op::Mul, [&](int k) { return scalar(k); }, &b, &a)) return false;
      scalar(b, &scale);
      inner.push_back(S);
      S = a;
    }
    if (op(S) != Op::Matmul || flag(S, "transpose_a")) return false;
    inner.push_back(S);
    int Q = in(S, 0), KT = in(S, 1);
    // A scale applied to q or k^T before the product (q * c, k^T * c, q / c: torch's
    // MultiheadAttention divides q by sqrt(head dim)) folds into the scale too.
    for (int* t : {&Q, &KT}) {
      int a, b;
      double c2;
      if (sole_user(*t) == S && either(*t, Op::Mul, [&](int k) { return scalar(k); }, &b, &a) && scalar(b, &c2) &&
          shape(a) == shape(*t)) {
        inner.push_back(*t);
        scale *= c2;
        *t = a;
      } else if (sole_user(*t) == S && op(*t) == Op::Div && scalar(in(*t, 1), &c2) && c2 != 0 &&
                 shape(in(*t, 0)) == shape(*t)) {
        inner.push_back(*t);
        scale /= c2;
        *t = in(*t, 0);
      }
    }
    const Shape &qs = shape(Q), &vs = shape(V), &ss = shape(S);
    if (!att(Q) || !att(KT) || !att(V) || qs.size() != (size_t)r || shape(KT).size() != (size_t)r ||
        vs.size() != (size_t)r)
      return false;
    // Same batch and head dims everywhere (no broadcasting in the products).
    for (int k = 0; k < r - 2; ++k)
      if (shape(KT)[k] != qs[k] || vs[k] != qs[k] || ss[k] != qs[k]) return false;
    const int64_t Sq = qs[r - 2], Sk = ss[r - 1];
    if (vs[r - 2] != Sk) return false;
    if (mask >= 0) {  // broadcasts into [.., Sq, Sk] without widening it
      const Shape& ms = shape(mask);
      for (size_t k = 0; k < ms.size(); ++k) {
        int64_t d = ss[ss.size() - ms.size() + k];
        if (ms[k] != 1 && ms[k] != d) return false;
      }
    }
    if (!exclusive(inner, root)) return false;
    int K = flag(S, "transpose_b") ? KT : untranspose(KT);
    if (K < 0) return false;
    int Vv = V;
    if (r == 4) {  // grouped-query attention reads the shared kv heads itself
      int64_t rk, rv;
      int k0 = unrepeat(K, &rk), v0 = unrepeat(V, &rv);
      if (rk > 1 && rk == rv) {
        K = k0;
        Vv = v0;
      }
    }
    ir::Attrs at;
    at.values["scale"] = scale;
    std::vector<int> ins{Q, K, Vv};
    if (mask >= 0 && causal_constant(mask, Sq, Sk)) at.values["causal"] = true;
    else if (mask >= 0) ins.push_back(mask);
    return become(root, Op::Attention, ins, at, inner, "attention");
  }

  // ---------------------------------------------------------------- RoPE (rotate_half)
  // Hugging Face's apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, rotate_half(x) =
  // concat(-x[..., D/2:], x[..., :D/2]), with cos/sin constant tables [.., S, D] (positions
  // from 0 folded by the importer). Becomes rope(x) (half-split) when the tables are exactly
  // rope's for some base: cos/sin(p * base^(-2i/D)), i = j mod D/2.
  bool table(int k, int64_t S, int64_t D, size_t r) const {
    const Shape& s = shape(k);
    if (op(k) != Op::Constant || !f32(k) || s.size() < 2 || s.size() > r || s[s.size() - 2] != S || s.back() != D)
      return false;
    for (size_t d = 0; d + 2 < s.size(); ++d)
      if (s[d] != 1) return false;
    return true;
  }
  int last_axis_of(int n) const {
    const int r = (int)shape(in(n, 0)).size();
    int64_t a = node(n).attrs.has("axis") ? node(n).attrs.i("axis") : 0;
    return (int)(a < 0 ? a + r : a) == r - 1 ? 1 : 0;
  }
  bool half_of(int n, int x, int64_t start, int64_t h) const {
    return op(n) == Op::Narrow && in(n, 0) == x && last_axis_of(n) && node(n).attrs.i("start") == start &&
           node(n).attrs.i("length") == h;
  }
  bool rope(int root) {
    if (op(root) != Op::Add || !f32(root)) return false;
    const Shape& xs = shape(root);
    const size_t r = xs.size();
    if (r < 2 || xs.back() % 2 || xs.back() == 0) return false;
    const int64_t D = xs.back(), S = xs[r - 2], h = D / 2;
    auto is_table = [&](int k) { return table(k, S, D, r); };
    for (int side = 0; side < 2; ++side) {
      int a = in(root, side), b = in(root, 1 - side), C, X, Sn, R;
      if (!either(a, Op::Mul, is_table, &C, &X) || !either(b, Op::Mul, is_table, &Sn, &R)) continue;
      if (shape(X) != xs || op(R) != Op::Concat || node(R).inputs.size() != 2 || !last_axis_of(R)) continue;
      int ng = in(R, 0), lo = in(R, 1);
      if (op(ng) != Op::Neg || !half_of(in(ng, 0), X, h, h) || !half_of(lo, X, 0, h)) continue;
      std::vector<int> inner{root, a, b, R, ng, in(ng, 0), lo};
      if (!exclusive(inner, root)) continue;
      // The frequencies: row p = 1, pair i = 1 gives base^(-2/D).
      const Tensor &ct = node(C).constant, &st = node(Sn).constant;
      double base = 10000.0;
      if (S >= 2 && h >= 2) {
        const double th = std::atan2(st.at(D + 1), ct.at(D + 1));
        if (!(th > 0 && th < 1)) continue;
        base = std::pow(th, -(double)D / 2.0);
      }
      bool ok = base > 1 && std::isfinite(base);
      for (int64_t p = 0; ok && p < S; ++p)
        for (int64_t j = 0; ok && j < D; ++j) {
          const double ang = (double)p * std::pow(base, -2.0 * (double)(j % h) / (double)D);
          const double tol = 1e-5 + 2e-7 * (double)p;
          ok = std::abs(ct.at(p * D + j) - std::cos(ang)) <= tol && std::abs(st.at(p * D + j) - std::sin(ang)) <= tol;
        }
      if (!ok) continue;
      ir::Attrs at;
      at.values["dims"] = D;
      at.values["base"] = base;
      return become(root, Op::Rope, {X}, at, inner, "rope");
    }
    return false;
  }

  // ---------------------------------------------------------------- conv + per-channel affine
  // A constant whose values vary at most along the channel axis (axis 1 of an NCHW result):
  // its per-channel values, or empty.
  std::vector<double> per_channel(int k, const Shape& out) const {
    const Node& n = node(k);
    const Shape& s = shape(k);
    if (n.op != Op::Constant || !is_float(n.constant.dtype()) || s.size() > out.size()) return {};
    const int64_t M = out[1];
    const size_t off = out.size() - s.size();
    int64_t along = 1;
    for (size_t d = 0; d < s.size(); ++d) {
      if (s[d] == 1) continue;
      if (d + off != 1 || s[d] != M) return {};
      along = M;
    }
    std::vector<double> v(M);
    for (int64_t c = 0; c < M; ++c) v[c] = n.constant.at(along == 1 ? 0 : c);
    return v;
  }
  bool conv_affine(int conv) {
    // conv2d or conv3d (the same weight layout [M, C/groups, k...]: one scale per leading row)
    const Op cop = op(conv);
    const size_t rank = cop == Op::Conv2d ? 4 : cop == Op::Conv3d ? 5 : 0;
    if (!rank || !f32(conv) || shape(conv).size() != rank) return false;
    const Shape& os = shape(conv);
    const int64_t M = os[1];
    std::vector<double> sc(M, 1.0), sh(M, 0.0);
    std::vector<int> inner{conv};
    int last = conv;
    bool scaled = false;
    for (;;) {
      int u = sole_user(last), other;
      if (u < 0 || !f32(u) || shape(u) != os) break;
      if (op(u) != Op::Mul && op(u) != Op::Add && op(u) != Op::Sub) break;
      other = in(u, 0) == last ? in(u, 1) : in(u, 0);
      if (other == last) break;
      if (op(u) == Op::Sub && in(u, 0) != last) break;  // c - x is not an affine of x with scale 1
      auto v = per_channel(other, os);
      if (v.empty()) break;
      for (int64_t c = 0; c < M; ++c) {
        if (op(u) == Op::Mul) {
          sc[c] *= v[c];
          sh[c] *= v[c];
        } else {
          sh[c] += op(u) == Op::Add ? v[c] : -v[c];
        }
      }
      scaled = scaled || op(u) == Op::Mul;
      inner.push_back(u);
      last = u;
    }
    if (last == conv || !exclusive(inner, last)) return false;
    const ir::Attrs conv_attrs = node(conv).attrs;
    const std::vector<int> conv_in = node(conv).inputs;
    int W = conv_in[1];
    const Shape ws = shape(W);
    if (!f32(W) || ws.size() != rank || ws[0] != M) return false;
    auto to_f = [](const std::vector<double>& d) { return std::vector<float>(d.begin(), d.end()); };
    Shape per_row(rank, 1);
    per_row[0] = M;
    if (scaled) W = add_node(Op::Mul, {W, constant(per_row, to_f(sc))}, {}, node(W).id + "/scaled");
    int bias;
    if (conv_in.size() == 3) {
      bias = conv_in[2];
      if (!f32(bias) || shape(bias) != Shape{M}) return false;
      if (scaled) bias = add_node(Op::Mul, {bias, constant({M}, to_f(sc))}, {}, node(bias).id + "/scaled");
      bias = add_node(Op::Add, {bias, constant({M}, to_f(sh))}, {}, node(conv_in[2]).id + "/shifted");
    } else {
      bias = constant({M}, to_f(sh));
    }
    return become(last, cop, {conv_in[0], W, bias}, conv_attrs, inner, cop == Op::Conv2d ? "conv2d+affine" : "conv3d+affine");
  }

  // ---------------------------------------------------------------- integer products
  bool byte_dtype(int i) const { return w.dtypes[i] == DType::u8 || w.dtypes[i] == DType::i8; }
  // A zero point for matmul_integer_scaled: the given one, or a constant 0 of dtype dt.
  int zero_point(int given, DType dt) {
    if (given >= 0) return given;
    int i = w.add_constant(Tensor::from_ints({}, {0}, dt));
    users.emplace_back();
    is_out.push_back(0);
    dead.push_back(0);
    return i;
  }
  // A scale that is a scalar or varies along the last axis only (N): reshaped to [] or [N].
  int scale_vector(int v, int64_t N) {
    const Shape& s = shape(v);
    if (!f32(v)) return -1;
    if (shape_numel(s) == 1) return reshape(v, {});
    if (!last_axis_vector(v, N)) return -1;
    return reshape(v, {N});
  }
  // matmul_integer -> cast f32 -> mul(scale) [-> add(bias)]
  bool integer_scaled(int mul) {
    if (!o.integer_gemm || op(mul) != Op::Mul || !f32(mul)) return false;
    int c = -1, sc = -1;
    for (int k = 0; k < 2 && c < 0; ++k)
      if (op(in(mul, k)) == Op::Cast && w.dtypes[in(mul, k)] == DType::f32 && op(in(in(mul, k), 0)) == Op::MatmulInteger)
        c = in(mul, k), sc = in(mul, 1 - k);
    if (c < 0) return false;
    const int mm = in(c, 0);
    const Node& m = node(mm);
    const int b = m.inputs[1];
    if (!leaf(b) || shape(b).size() != 2 || shape(in(mm, 0)).size() < 2 || shape(mul) != shape(mm)) return false;
    const int64_t N = shape(b)[1];
    std::vector<int> inner{mm, c, mul};
    int last = mul, bias = -1;
    if (int u = sole_user(mul); u >= 0 && op(u) == Op::Add && f32(u) && shape(u) == shape(mul)) {
      const int other = in(u, 0) == mul ? in(u, 1) : in(u, 0);
      if (other != mul && last_axis_vector(other, N)) bias = other, last = u, inner.push_back(u);
    }
    if (!exclusive(inner, last)) return false;
    const int s = scale_vector(sc, N);
    if (s < 0) return false;
    std::vector<int> ins{in(mm, 0), b, zero_point(m.inputs.size() > 2 ? m.inputs[2] : -1, w.dtypes[in(mm, 0)]),
                         zero_point(m.inputs.size() > 3 ? m.inputs[3] : -1, w.dtypes[b]), s};
    if (bias >= 0) ins.push_back(reshape(bias, {N}));
    return become(last, Op::MatmulIntegerScaled, ins, {}, inner, "matmul_integer_scaled");
  }
  // dequantize per tensor (x) or per tensor / per column (a constant [K, N] weight): its
  // (q, scale, zero point or -1), or q = -1.
  struct Dq { int q = -1, s = -1, z = -1; };
  Dq dequant(int d, bool weight) const {
    if (op(d) != Op::Dequantize || !f32(d)) return {};
    const Node& n = node(d);
    const int q = n.inputs[0], sc = n.inputs[1];
    if (!byte_dtype(q) || !f32(sc) || (n.attrs.has("block_size") && n.attrs.i("block_size") != 0)) return {};
    const int64_t sn = shape_numel(shape(sc));
    if (sn != 1) {
      const int r = (int)shape(q).size();
      const int64_t ax = n.attrs.has("axis") ? n.attrs.i("axis") : 1;
      if (!weight || r != 2 || (ax < 0 ? ax + r : ax) != 1 || shape(sc) != Shape{shape(q)[1]}) return {};
    }
    if (weight && (!leaf(q) || shape(q).size() != 2)) return {};
    return {q, sc, n.inputs.size() > 2 ? n.inputs[2] : -1};
  }
  // matmul(dequantize(xq), dequantize(const W)) [+ bias]
  bool qdq_matmul(int mm) {
    if (!o.integer_gemm || op(mm) != Op::Matmul || !f32(mm) || flag(mm, "transpose_a") || flag(mm, "transpose_b"))
      return false;
    const int dx = in(mm, 0), dw = in(mm, 1);
    const Dq x = dequant(dx, false), W = dequant(dw, true);
    if (x.q < 0 || W.q < 0 || shape(x.q).size() < 2 || shape(x.q).back() > 33025) return false;
    const int64_t N = shape(W.q)[1];
    std::vector<int> inner{dx, dw, mm};
    int last = mm, bias = -1;
    if (int u = sole_user(mm); u >= 0 && op(u) == Op::Add && f32(u) && shape(u) == shape(mm)) {
      const int other = in(u, 0) == mm ? in(u, 1) : in(u, 0);
      if (other != mm && last_axis_vector(other, N)) bias = other, last = u, inner.push_back(u);
    }
    if (!exclusive(inner, last)) return false;
    const int sx = reshape(x.s, {}), sw = shape_numel(shape(W.s)) == 1 ? reshape(W.s, {}) : W.s;
    const int s = add_node(Op::Mul, {sx, sw}, {}, node(mm).id + "/scale");
    std::vector<int> ins{x.q, W.q, zero_point(x.z, w.dtypes[x.q]), zero_point(W.z, w.dtypes[W.q]), s};
    if (bias >= 0) ins.push_back(reshape(bias, {N}));
    return become(last, Op::MatmulIntegerScaled, ins, {}, inner, "qdq matmul -> matmul_integer_scaled");
  }

  // conv2d(dequantize(xq), dequantize(const W) [, bias]): x per tensor, W [M, C, kH, kW] per
  // tensor or per output channel (axis 0), groups 1.
  bool qdq_conv(int cv) {
    if (!o.integer_gemm || op(cv) != Op::Conv2d || !f32(cv) || node(cv).attrs.i("groups") != 1) return false;
    const int dx = in(cv, 0), dw = in(cv, 1);
    const Dq x = dequant(dx, false);
    if (x.q < 0 || op(dw) != Op::Dequantize || !f32(dw)) return false;
    const Node& wn = node(dw);
    const int wq = wn.inputs[0], ws = wn.inputs[1], wz = wn.inputs.size() > 2 ? wn.inputs[2] : -1;
    if (!byte_dtype(wq) || !f32(ws) || !leaf(wq) || shape(wq).size() != 4 ||
        (wn.attrs.has("block_size") && wn.attrs.i("block_size") != 0))
      return false;
    const int64_t M = shape(wq)[0];
    const bool per_channel = shape_numel(shape(ws)) != 1;
    if (per_channel) {
      const int64_t ax = wn.attrs.has("axis") ? wn.attrs.i("axis") : 1;
      if ((ax < 0 ? ax + 4 : ax) != 0 || shape(ws) != Shape{M}) return false;
    }
    if (shape(x.q).size() != 4 || (x.z >= 0 && shape_numel(shape(x.z)) != 1)) return false;
    if (wz >= 0 && shape_numel(shape(wz)) != 1 && shape(wz) != Shape{M}) return false;
    const std::vector<int> cin = node(cv).inputs;
    if (cin.size() == 3 && (!f32(cin[2]) || shape(cin[2]) != Shape{M})) return false;
    std::vector<int> inner{dx, dw, cv};
    if (!exclusive(inner, cv)) return false;
    const ir::Attrs at = node(cv).attrs;
    const int sx = reshape(x.s, {}), sw = per_channel ? ws : reshape(ws, {});
    const int s = add_node(Op::Mul, {sx, sw}, {}, node(cv).id + "/scale");
    auto scalar_zp = [&](int z, DType dt) { return z >= 0 && shape_numel(shape(z)) == 1 ? reshape(z, {}) : zero_point(z, dt); };
    std::vector<int> ins{x.q, wq, scalar_zp(x.z, w.dtypes[x.q]), scalar_zp(wz, w.dtypes[wq]), s};
    if (cin.size() == 3) ins.push_back(cin[2]);
    return become(cv, Op::Conv2dIntegerScaled, ins, at, inner, "qdq conv2d -> conv2d_integer_scaled");
  }

  template <class F>
  void sweep(F f) {
    index();
    for (int v : order())
      if (!dead[v]) f(v);
  }
};

}  // namespace

void rewrite_patterns(Work& w, const OptOptions& o, OptStats& st) {
  Rewriter rw{w, o, st, {}, {}, {}, {}};
  rw.sweep([&](int v) { rw.integer_scaled(v) || rw.qdq_matmul(v) || rw.qdq_conv(v); });
  rw.sweep([&](int v) { rw.gelu(v); });
  rw.sweep([&](int v) { rw.layer_norm(v) || rw.rms_norm(v); });
  rw.sweep([&](int v) { rw.conv_affine(v); });
  rw.sweep([&](int v) { rw.rope(v); });
  rw.sweep([&](int v) { rw.attention(v); });
  rw.sweep([&](int v) { rw.linear(v); });
  std::string s;
  for (const auto& [k, n] : rw.counts) s += (s.empty() ? "" : ", ") + k + " " + std::to_string(n);
  st.pattern_kinds = s;
}

}  // namespace rlx::passes::detail
