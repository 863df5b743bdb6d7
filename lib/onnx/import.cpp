// ONNX -> rlx IR, for concrete input shapes. Every ONNX node either folds on the host
// (exact int64/double values: shape arithmetic, constants) or is mapped onto registry ops by
// name, with shapes and dtypes checked by the registry's own inference as each node is added.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>

#include "core/error.h"
#include "ir/loader.h"
#include "ir/op_registry.h"
#include "onnx/model.h"

namespace rlx::onnx {

namespace {

bool float_et(int et) { return et == kFloat || et == kDouble || et == kFloat16 || et == kBfloat16; }

int dtype_et(DType d) {
  switch (d) {
    case DType::f32: return kFloat;
    case DType::f16: return kFloat16;
    case DType::bf16: return kBfloat16;
    case DType::i32: return kInt32;
    case DType::i64: return kInt64;
    case DType::boolean: return kBool;
  }
  return kFloat;
}

// double -> int64, truncating, saturating, NaN -> 0: no undefined float-to-int conversion.
int64_t sat_i64(double x) {
  if (!(x == x)) return 0;
  if (x >= 9.2e18) return INT64_MAX;
  if (x <= -9.2e18) return INT64_MIN;
  return (int64_t)x;
}

// An exact host value: integers as int64, floating point as double.
struct Host {
  bool is_float = false;
  std::vector<int64_t> i;
  std::vector<double> f;
  size_t size() const { return is_float ? f.size() : i.size(); }
  double d(size_t k) const { return is_float ? f[k] : (double)i[k]; }
  int64_t n(size_t k) const { return is_float ? sat_i64(f[k]) : i[k]; }
};

struct Val {
  bool defined = false;
  int node = -1;  // graph node, once materialised
  Shape shape;
  int et = kFloat;
  std::shared_ptr<const Host> host;
  std::shared_ptr<TensorData> init;
  std::shared_ptr<const Host> input_value;  // a small graph input's value, used only where a constant is required
};

// The values of a host tensor (a given input) as exact host values.
std::shared_ptr<const Host> host_from_tensor(const Tensor& t) {
  auto h = std::make_shared<Host>();
  h->is_float = is_float(t.dtype());
  for (int64_t k = 0; k < t.numel(); ++k) {
    if (h->is_float) h->f.push_back(t.at(k));
    else h->i.push_back(t.int_at(k));
  }
  return h;
}

std::vector<int64_t> strides_of(const Shape& s) { return contiguous_strides(s); }

// The registry's list-of-doubles attribute type ('floats') arrives with the conv branch; until
// then AttrValue cannot hold one and the attribute is left out (resize then uses its sizes).
template <class V = ir::AttrValue>
void set_floats_attr(std::map<std::string, ir::AttrValue>& a, const char* op, const char* name, const std::vector<double>& v) {
  if constexpr (std::is_constructible_v<V, std::vector<double>>) {
    auto rop = ir::op_from_name(op);
    if (!rop) return;
    for (const auto& sp : ir::op_info(*rop).attrs)
      if (sp.name == name) a[name] = V(v);
  }
}

class Unsupported : public InputError {
 public:
  using InputError::InputError;
};

}  // namespace

class Importer {
 public:
  Importer(Model& m, const std::map<std::string, Shape>& shapes, const std::map<std::string, int64_t>& dims,
           const std::map<std::string, Tensor>& values)
      : m_(m), L_(m.limits()), in_shapes_(shapes), dims_(dims), in_values_(values) {}

  std::shared_ptr<Specialized> run();

 private:
  Model& m_;
  const Limits& L_;
  const std::map<std::string, Shape>& in_shapes_;
  std::map<std::string, int64_t> dims_;
  const std::map<std::string, Tensor>& in_values_;
  std::map<std::string, std::vector<double>> value_deps_;
  std::shared_ptr<ir::Graph> g_;
  ir::TypedShapes ts_;
  std::map<std::string, Tensor> params_;
  std::map<std::string, Val> vals_;
  const NodeDef* cur_ = nullptr;
  int fresh_ = 0;

  // ---------- messages ----------
  std::string where() const {
    if (!cur_) return m_.file();
    return m_.file() + ": node " + (cur_->name.empty() ? "#" + std::to_string(cur_->index) : "'" + cur_->name + "'") + " (" +
           cur_->op_type + ")";
  }
  [[noreturn]] void fail(const std::string& what) const { throw InputError(where() + ": " + what); }
  [[noreturn]] void unsupported(const std::string& what) const { throw Unsupported(where() + ": unsupported: " + what); }

  // ---------- attributes ----------
  const Attribute* attr(const char* n) const { return cur_->attr(n); }
  int64_t ai(const char* n, int64_t def) const {
    auto a = attr(n);
    return a ? a->i : def;
  }
  double af(const char* n, double def) const {
    auto a = attr(n);
    return a ? a->f : def;
  }
  std::string as(const char* n, const std::string& def) const {
    auto a = attr(n);
    return a ? a->s : def;
  }
  std::optional<std::vector<int64_t>> aints(const char* n) const {
    auto a = attr(n);
    if (!a) return std::nullopt;
    return a->ints;
  }

  // ---------- values ----------
  bool has_in(size_t k) const { return k < cur_->inputs.size() && !cur_->inputs[k].empty(); }
  Val& in(size_t k) {
    if (!has_in(k)) fail("input " + std::to_string(k) + " is required");
    auto it = vals_.find(cur_->inputs[k]);
    if (it == vals_.end() || !it->second.defined)
      fail("input '" + cur_->inputs[k] + "' is not produced by any earlier node (the graph is not in topological order, or has a cycle)");
    return it->second;
  }
  size_t rank(size_t k) { return in(k).shape.size(); }

  std::shared_ptr<const Host> host_of(Val& v, int64_t limit) {
    if (v.host) return v.host;
    if (!v.init || v.init->numel > limit) return nullptr;
    const TensorData& t = *v.init;
    auto h = std::make_shared<Host>();
    h->is_float = float_et(t.elem_type);
    if (t.raw) {
      const uint8_t* p = t.raw;
      for (int64_t k = 0; k < t.numel; ++k) {
        switch (t.elem_type) {
          case kFloat: { float x; std::memcpy(&x, p + 4 * k, 4); h->f.push_back(x); break; }
          case kDouble: { double x; std::memcpy(&x, p + 8 * k, 8); h->f.push_back(x); break; }
          case kFloat16: { uint16_t x; std::memcpy(&x, p + 2 * k, 2); h->f.push_back(f16_to_f32(x)); break; }
          case kBfloat16: { uint16_t x; std::memcpy(&x, p + 2 * k, 2); h->f.push_back(bf16_to_f32(x)); break; }
          case kInt64: case kUint64: { int64_t x; std::memcpy(&x, p + 8 * k, 8); h->i.push_back(x); break; }
          case kInt32: { int32_t x; std::memcpy(&x, p + 4 * k, 4); h->i.push_back(x); break; }
          case kUint32: { uint32_t x; std::memcpy(&x, p + 4 * k, 4); h->i.push_back(x); break; }
          case kInt16: { int16_t x; std::memcpy(&x, p + 2 * k, 2); h->i.push_back(x); break; }
          case kUint16: { uint16_t x; std::memcpy(&x, p + 2 * k, 2); h->i.push_back(x); break; }
          case kInt8: h->i.push_back((int8_t)p[k]); break;
          case kUint8: h->i.push_back(p[k]); break;
          case kBool: h->i.push_back(p[k] != 0); break;
          default: return nullptr;
        }
      }
    } else if (h->is_float) {
      h->f = t.floats;
    } else {
      h->i = t.ints;
    }
    v.host = h;
    return v.host;
  }
  // The host value of input k (a constant, an initializer or folded shape arithmetic), or null.
  std::shared_ptr<const Host> host(size_t k, int64_t limit = int64_t(1) << 16) {
    if (!has_in(k)) return nullptr;
    return host_of(in(k), limit);
  }
  std::shared_ptr<const Host> need_host(size_t k, const char* what) {
    if (!has_in(k)) fail(std::string(what) + " (input " + std::to_string(k) + ") is required");
    auto h = value_of(k);
    if (!h) unsupported(std::string(what) + " (input " + std::to_string(k) + " '" + cur_->inputs[k] + "') must be a constant or computable from shapes");
    return h;
  }
  // need_host for an input the operator defines as a scalar: exactly one element.
  std::shared_ptr<const Host> need_scalar(size_t k, const char* what) {
    auto h = need_host(k, what);
    if (h->size() != 1) fail(std::string(what) + " (input " + std::to_string(k) + ") must have one element, it has " + std::to_string(h->size()));
    return h;
  }
  // The known value of input k: folded/constant, or a small graph input bound by value.
  std::shared_ptr<const Host> value_of(size_t k) {
    if (!has_in(k)) return nullptr;
    auto h = host(k, L_.max_folded_elements);
    if (!h && in(k).input_value) {  // a graph input given by value: bind it (the cache keys on it)
      h = in(k).input_value;
      auto& dep = value_deps_[cur_->inputs[k]];
      dep.clear();
      for (size_t j = 0; j < h->size(); ++j) dep.push_back(h->d(j));
    }
    return h;
  }
  std::vector<int64_t> need_ints(size_t k, const char* what) {
    auto h = need_host(k, what);
    std::vector<int64_t> r;
    for (size_t j = 0; j < h->size(); ++j) r.push_back(h->n(j));
    return r;
  }
  bool all_host() {
    for (size_t k = 0; k < cur_->inputs.size(); ++k)
      if (has_in(k) && !host(k)) return false;
    return true;
  }

  void set_out(size_t k, Val v) {
    if (k >= cur_->outputs.size() || cur_->outputs[k].empty()) return;
    v.defined = true;
    if (v.host && (int64_t)v.host->size() != shape_numel(v.shape)) fail("internal: folded value size mismatch");
    vals_[cur_->outputs[k]] = std::move(v);
  }
  void set_node(size_t k, int node) {
    Val v;
    v.node = node;
    v.shape = ts_.shapes[node];
    v.et = dtype_et(ts_.dtypes[node]);
    set_out(k, v);
  }
  void set_host(size_t k, Shape s, int et, Host h) {
    if (shape_numel(s) > L_.max_folded_elements) unsupported("a folded constant of shape " + shape_str(s) + " is too large");
    Val v;
    v.shape = std::move(s);
    v.et = et;
    h.is_float = float_et(et);
    if (h.is_float) {
      if (h.f.empty() && !h.i.empty()) for (auto x : h.i) h.f.push_back((double)x);
      h.i.clear();
      if (et == kFloat) for (auto& x : h.f) x = (double)(float)x;
    } else {
      if (h.i.empty() && !h.f.empty()) for (auto x : h.f) h.i.push_back(sat_i64(x));
      h.f.clear();
      if (et == kInt32) for (auto& x : h.i) x = (int32_t)x;
      if (et == kBool) for (auto& x : h.i) x = x != 0;
    }
    v.host = std::make_shared<Host>(std::move(h));
    set_out(k, v);
  }

  std::string fresh(const std::string& base) {
    std::string id = base;
    while (g_->index.count(id)) id = base + "/rlx" + std::to_string(fresh_++);
    return id;
  }
  std::string out_name(size_t k = 0) const {
    return k < cur_->outputs.size() && !cur_->outputs[k].empty() ? cur_->outputs[k] : cur_->name + "/out";
  }

  int add_leaf(ir::Op op, const std::string& id_base, const Shape& s, DType dt) {
    ir::Node n;
    n.id = fresh(id_base);
    n.op = op;
    n.dtype = dt;
    n.has_decl_shape = true;
    for (auto d : s) n.decl_shape.push_back(ir::Dim{d, ""});
    n.param_name = n.id;
    int idx = (int)g_->nodes.size();
    g_->index[n.id] = idx;
    g_->nodes.push_back(std::move(n));
    ts_.shapes.push_back(s);
    ts_.dtypes.push_back(dt);
    return idx;
  }

  int materialize(Val& v, const std::string& name) {
    if (v.node >= 0) return v.node;
    if (v.init && !v.host) {
      DType dt = to_dtype(v.init->elem_type, where() + ": initializer '" + name + "'");
      int idx = add_leaf(ir::Op::Param, name, v.shape, dt);
      params_[g_->nodes[idx].id] = to_tensor(*v.init, m_.file() + ": initializer '" + name + "'");
      v.node = idx;
      return idx;
    }
    if (!v.host) fail("internal: value '" + name + "' has no definition");
    DType dt = to_dtype(v.et, where() + ": value '" + name + "'");
    int idx = add_leaf(ir::Op::Constant, name, v.shape, dt);
    g_->nodes[idx].constant = host_tensor(v.shape, *v.host, dt);
    v.node = idx;
    return idx;
  }
  int node(size_t k) { return materialize(in(k), cur_->inputs[k]); }
  int constant(const Shape& s, std::vector<double> vals, DType dt) {
    int idx = add_leaf(ir::Op::Constant, out_name() + "/const", s, dt);
    Host h;
    h.is_float = true;
    h.f = std::move(vals);
    g_->nodes[idx].constant = host_tensor(s, h, dt);
    return idx;
  }
  // A host value as a tensor of dt: integers stay exact (int64 beyond 2^24 included).
  static Tensor host_tensor(const Shape& s, const Host& h, DType dt) {
    if (is_float(dt)) {
      std::vector<float> fv(h.size());
      for (size_t k = 0; k < fv.size(); ++k) fv[k] = (float)h.d(k);
      return Tensor::from_vector(s, fv, dt);
    }
    std::vector<int64_t> iv(h.size());
    for (size_t k = 0; k < iv.size(); ++k) iv[k] = h.n(k);
    return Tensor::from_ints(s, iv, dt);
  }
  int scalar(double x, DType dt = DType::f32) { return constant({}, {x}, dt); }
  int scalar_like(double x, int node) { return scalar(x, is_float(ts_.dtypes[node]) ? ts_.dtypes[node] : DType::f32); }

  // Adds a registry op by name. Attributes are checked against the registry and defaults filled.
  int emit(const std::string& opname, std::vector<int> inputs, std::map<std::string, ir::AttrValue> attrs = {},
           const std::string& id = "") {
    auto op = ir::op_from_name(opname);
    if (!op) unsupported("needs the registry op '" + opname + "', which this build of rlx does not have yet");
    const ir::OpInfo& info = ir::op_info(*op);
    ir::Node n;
    n.id = fresh(id.empty() ? out_name() + "/" + opname : id);
    n.op = *op;
    n.inputs = std::move(inputs);
    if ((int)n.inputs.size() < info.min_inputs || (int)n.inputs.size() > info.max_inputs)
      fail("internal: registry op '" + opname + "' takes " + std::to_string(info.min_inputs) + ".." + std::to_string(info.max_inputs) + " inputs");
    for (auto& kv : attrs) {
      const std::string& k = kv.first;
      const ir::AttrValue& v = kv.second;
      auto spec = std::find_if(info.attrs.begin(), info.attrs.end(), [&k](const ir::AttrSpec& s) { return s.name == k; });
      if (spec == info.attrs.end()) unsupported("the registry op '" + opname + "' of this build has no attribute '" + k + "'");
      n.attrs.values[k] = v;
    }
    for (const auto& spec : info.attrs) {
      if (n.attrs.has(spec.name)) continue;
      if (spec.required) fail("internal: registry op '" + opname + "' needs attribute '" + spec.name + "'");
      if (spec.default_value) n.attrs.values[spec.name] = *spec.default_value;
    }
    int idx = (int)g_->nodes.size();
    g_->index[n.id] = idx;
    g_->nodes.push_back(std::move(n));
    ts_.shapes.emplace_back();
    ts_.dtypes.emplace_back();
    try {
      ir::infer_node(*g_, idx, ts_);
    } catch (const InputError& e) {
      fail(e.what());
    }
    return idx;
  }
  int reshape(int x, const Shape& s) {
    if (ts_.shapes[x] == s) return x;
    return emit("reshape", {x}, {{"shape", std::vector<int64_t>(s.begin(), s.end())}});
  }
  // x as shape s, under the ONNX node's output name.
  int reshape_out(int x, const Shape& s) {
    return emit("reshape", {x}, {{"shape", std::vector<int64_t>(s.begin(), s.end())}}, out_name());
  }
  int narrow(int x, int64_t axis, int64_t start, int64_t len) {
    return emit("narrow", {x}, {{"axis", axis}, {"start", start}, {"length", len}});
  }
  int clamp(int x, double lo, double hi, const std::string& id = "") {
    return emit("minimum", {emit("maximum", {x, scalar_like(lo, x)}), scalar_like(hi, x)}, {}, id);
  }
  // A constant of shape s (one axis not 1, of length n) holding 0, 1, ..., n - 1 along it.
  int positions(const Shape& s, DType dt = DType::i64) {
    std::vector<double> v(shape_numel(s));
    for (size_t t = 0; t < v.size(); ++t) v[t] = (double)t;
    return constant(s, v, dt);
  }
  // Activations of both the ONNX operators and the recurrent layers' activation lists.
  int leaky_relu(int x, double a, const std::string& id = "") {  // x where x >= 0, else a * x
    return emit(a <= 1 ? "maximum" : "minimum", {x, emit("mul", {x, scalar_like(a, x)})}, {}, id);
  }
  int hard_sigmoid(int x, double a, double b, const std::string& id = "") {
    return clamp(emit("add", {emit("mul", {x, scalar_like(a, x)}), scalar_like(b, x)}), 0, 1, id);
  }
  int softsign(int x, const std::string& id = "") {
    return emit("div", {x, emit("add", {scalar_like(1, x), emit("abs", {x})})}, {}, id);
  }
  // Opsets before 13 apply Softmax, LogSoftmax and Hardmax to the input seen as 2-D:
  // [prod(dims before axis a), prod(the rest)].
  int flatten_2d(int x, int a) {
    const Shape s = shp(x);
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < (int)s.size(); ++k) (k < a ? outer : inner) *= s[k];
    return reshape(x, {outer, inner});
  }
  int log_softmax(int x, int64_t ax) {  // stable: x - max - log(sum(exp(x - max)))
    std::map<std::string, ir::AttrValue> along{{"axes", std::vector<int64_t>{ax}}, {"keepdims", true}};
    int s = emit("sub", {x, emit("max", {x}, along)});
    return emit("sub", {s, emit("log", {emit("sum", {emit("exp", {s})}, along)})});
  }
  // ScatterND's shapes: data [d0..dr), indices [..., k], updates indices.shape[:-1] + data.shape[k:]. Returns k.
  int64_t scatter_nd_depth(const Shape& ds, const Shape& is, const Shape& us) {
    if (ds.empty()) fail("data must have rank >= 1");
    if (is.empty()) fail("indices must have rank >= 1");
    const int64_t k = is.back();
    if (k < 1 || k > (int64_t)ds.size())
      fail("the last dimension of indices (" + std::to_string(k) + ") must be between 1 and the rank of data (" + std::to_string(ds.size()) + ")");
    Shape want(is.begin(), is.end() - 1);
    want.insert(want.end(), ds.begin() + k, ds.end());
    if (us != want) fail("updates have shape " + shape_str(us) + ", expected " + shape_str(want));
    return k;
  }
  // Run-time scatters match output positions against update entries along axis 1 of the
  // boolean table `hit`. The last entry naming each position (i64) and whether any does.
  std::pair<int, int> last_match(int hit) {
    int hitf = cast(hit, DType::f32);
    int who = emit("argmax", {hitf}, {{"axis", (int64_t)1}, {"keepdims", false}, {"select_last_index", true}});
    int any = emit("greater", {emit("max", {hitf}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", false}}), scalar(0.5)});
    return {who, any};
  }
  // data + (or *) every update entry `hit` matches: upd and hit broadcast together, folded over axis 1.
  int fold_matches(int data, int hit, int upd, bool add) {
    int contrib = emit("where", {hit, upd, scalar(add ? 0 : 1, ts_.dtypes[data])});
    int folded = emit(add ? "sum" : "prod", {contrib}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", false}});
    return emit(add ? "add" : "mul", {data, folded});
  }
  // Concatenation of any number of nodes (the registry op takes at most 64 inputs).
  int concat_many(std::vector<int> xs, int64_t axis) {
    while (xs.size() > 1) {
      std::vector<int> next;
      for (size_t k = 0; k < xs.size(); k += 64) {
        std::vector<int> part(xs.begin() + k, xs.begin() + std::min(xs.size(), k + 64));
        next.push_back(part.size() == 1 ? part[0] : emit("concat", part, {{"axis", axis}}));
      }
      xs = std::move(next);
    }
    return xs.at(0);
  }
  // Row numbers of index tuples ([N, k] i64) into a tensor whose leading axes are `dims`: each
  // coordinate goes through a gather on its axis's positions 0..D-1 first, which wraps negative
  // values and reports one out of range (naming the node) as Gather does, even where the row
  // it would make exists. [N] i64.
  int tuple_rows(int tuples, const Shape& dims) {
    const int64_t n = shp(tuples)[0];
    int64_t stride = 1;
    for (auto d : dims) stride *= d;
    int lin = -1;
    for (size_t j = 0; j < dims.size(); ++j) {
      const int64_t D = dims[j];
      stride /= std::max<int64_t>(D, 1);
      int c = reshape(narrow(tuples, 1, (int64_t)j, 1), {n});
      c = emit("gather", {positions({D}), c}, {{"axis", (int64_t)0}});
      if (stride != 1) c = emit("mul", {c, scalar((double)stride, DType::i64)});
      lin = lin < 0 ? c : emit("add", {lin, c});
    }
    return lin;
  }
  int cast(int x, DType dt) {
    if (ts_.dtypes[x] == dt) return x;
    return emit("cast", {x}, {{"dtype", std::string(dtype_name(dt))}});
  }
  const Shape& shp(int node) const { return ts_.shapes[node]; }

  int axis_of(int64_t a, size_t r) {
    int64_t x = a < 0 ? a + (int64_t)r : a;
    if (x < 0 || x >= (int64_t)r) fail("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(r));
    return (int)x;
  }

  // ---------- host folding helpers ----------
  static Shape bcast(const Shape& a, const Shape& b, bool& ok) {
    size_t r = std::max(a.size(), b.size());
    Shape o(r);
    ok = true;
    for (size_t i = 0; i < r; ++i) {
      int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
      int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
      if (da != db && da != 1 && db != 1) ok = false;
      o[i] = da == 1 ? db : da;
    }
    return o;
  }
  // Index into a tensor of shape `s` broadcast to `o` for flat output index `flat`.
  static int64_t bidx(const Shape& s, const Shape& o, int64_t flat) {
    auto st = broadcast_strides(s, o);
    int64_t r = 0;
    for (size_t k = o.size(); k-- > 0;) {
      int64_t c = o[k] ? flat % o[k] : 0;
      flat = o[k] ? flat / o[k] : 0;
      r += c * st[k];
    }
    return r;
  }
  // Elementwise over broadcast host inputs.
  // Folds an elementwise node whose formula `f` reads its first `arity` inputs (at least).
  void fold_elementwise(int out_et, size_t arity, const std::function<void(const std::vector<const Host*>&, const std::vector<int64_t>&, Host&)>& f) {
    for (size_t k = 0; k < arity; ++k) in(k);  // "input k is required" rather than a read past the inputs
    std::vector<Val*> vs;
    std::vector<std::shared_ptr<const Host>> hs;
    Shape o;
    for (size_t k = 0; k < cur_->inputs.size(); ++k) {
      vs.push_back(&in(k));
      hs.push_back(host(k));
      bool ok;
      o = bcast(o, vs.back()->shape, ok);
      if (!ok) fail("cannot broadcast the input shapes");
    }
    int64_t n = shape_numel(o);
    if (n > L_.max_folded_elements) unsupported("folded result too large");
    Host h;
    std::vector<const Host*> hp;
    for (auto& x : hs) hp.push_back(x.get());
    std::vector<int64_t> idx(vs.size());
    for (int64_t j = 0; j < n; ++j) {
      for (size_t k = 0; k < vs.size(); ++k) idx[k] = bidx(vs[k]->shape, o, j);
      f(hp, idx, h);
    }
    set_host(0, o, out_et, std::move(h));
  }

  // Dropout is the identity only in inference: training_mode (opset 12+, an input) must be
  // absent or a known false; a random mask cannot be reproduced, so it is refused.
  void check_dropout_inference() {
    if (!has_in(2)) return;
    auto h = value_of(2);
    if (!h) unsupported("Dropout's training_mode (input 2) must be a constant false (inference only)");
    bool training = false;
    for (size_t k = 0; k < h->size(); ++k) training = training || h->n(k);
    if (!training) return;
    auto r = value_of(1);  // ratio 0 keeps every element even in training
    bool zero = r && r->size() == 1 && r->d(0) == 0;
    if (!zero) unsupported("Dropout with training_mode = true (inference only: the random mask cannot be reproduced)");
  }

  bool try_fold();
  void map_node();
  void recurrent();
  void einsum();
  // Slice's starts, ends, axes and steps (attributes before opset 10, inputs since), with the
  // defaults filled in (axes 0, 1, ...; steps 1) and their lengths checked.
  struct SliceArgs {
    std::vector<int64_t> st, en, ax, sp;
  };
  SliceArgs slice_args();
  void finish_outputs();

  // mapping helpers
  void unary(const char* op) { set_node(0, emit(op, {node(0)}, {}, out_name())); }
  void binary(const char* op) { set_node(0, emit(op, {node(0), node(1)}, {}, out_name())); }
  int reduce_node(const char* op, int x, const std::optional<std::vector<int64_t>>& axes, bool keep, const std::string& id = "") {
    std::map<std::string, ir::AttrValue> a{{"keepdims", keep}};
    if (axes) {
      if (axes->empty()) return x;
      a["axes"] = *axes;
    }
    return emit(op, {x}, a, id);
  }
  std::optional<std::vector<int64_t>> reduce_axes(bool input_form) {
    std::optional<std::vector<int64_t>> axes;
    if (input_form && has_in(1)) axes = need_ints(1, "axes");
    else if (!input_form) axes = aints("axes");
    if (axes && axes->empty()) axes.reset();
    if (!axes && ai("noop_with_empty_axes", 0)) axes = std::vector<int64_t>{};
    if (axes) {
      std::set<int64_t> seen;
      for (auto& a : *axes) {
        a = axis_of(a, rank(0));
        if (!seen.insert(a).second) fail("axes lists an axis twice");
      }
    }
    return axes;
  }
  int softmax_like(int x, int64_t axis_attr, bool log) {
    size_t r = shp(x).size();
    int a = axis_of(axis_attr, r);
    Shape orig = shp(x);
    bool flat = m_.opset() < 13 && a != (int)r - 1;
    int y = flat ? flatten_2d(x, a) : x;
    int ax = flat ? 1 : a;
    int out = log ? log_softmax(y, ax) : emit("softmax", {y}, {{"axis", (int64_t)ax}});
    return flat ? reshape(out, orig) : out;
  }
};

// ----------------------------------------------------------------------------------------
// Host folding: every op here computes exact values when all its inputs are known.
Importer::SliceArgs Importer::slice_args() {
  SliceArgs a;
  if (m_.opset() < 10) {
    a.st = aints("starts").value_or(std::vector<int64_t>{});
    a.en = aints("ends").value_or(std::vector<int64_t>{});
    a.ax = aints("axes").value_or(std::vector<int64_t>{});
  } else {
    a.st = need_ints(1, "starts");
    a.en = need_ints(2, "ends");
    if (has_in(3)) a.ax = need_ints(3, "axes");
    if (has_in(4)) a.sp = need_ints(4, "steps");
  }
  if (a.ax.empty())
    for (size_t k = 0; k < a.st.size(); ++k) a.ax.push_back((int64_t)k);
  if (a.sp.empty()) a.sp.assign(a.st.size(), 1);
  if (a.en.size() != a.st.size() || a.ax.size() != a.st.size() || a.sp.size() != a.st.size())
    fail("starts, ends, axes and steps differ in length");
  return a;
}

bool Importer::try_fold() {
  const std::string& op = cur_->op_type;
  static const std::set<std::string> foldable = {
      "Shape", "Size", "Constant", "Identity", "Cast", "CastLike", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice",
      "ConstantOfShape", "Range", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Where",
      "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Sqrt", "Floor", "Ceil", "Min", "Max", "Reshape", "Flatten", "Expand",
      "ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin", "Transpose", "Dropout", "Sign", "Reciprocal", "ScatterND", "EyeLike",
      "HannWindow", "HammingWindow", "BlackmanWindow"};
  if (!foldable.count(op)) return false;
  // Ops whose result depends only on shapes fold even when their data input is a runtime value.
  if (op == "Shape") {
    const Shape& s = in(0).shape;
    int64_t r = (int64_t)s.size(), st = ai("start", 0), en = ai("end", r);
    if (st < 0) st += r;
    if (en < 0) en += r;
    st = std::clamp<int64_t>(st, 0, r);
    en = std::clamp<int64_t>(en, 0, r);
    Host h;
    for (int64_t k = st; k < en; ++k) h.i.push_back(s[k]);
    set_host(0, {(int64_t)h.i.size()}, kInt64, h);
    return true;
  }
  if (op == "HannWindow" || op == "HammingWindow" || op == "BlackmanWindow") {
    // a0 - a1 cos(2 pi n / N') + a2 cos(4 pi n / N'), N' = N (periodic) or N - 1
    const int64_t N = need_scalar(0, "size")->n(0);
    if (N < 0) fail("size must not be negative, got " + std::to_string(N));
    if (N > L_.max_folded_elements) unsupported("a window of " + std::to_string(N) + " elements is too large to fold");
    const int et = (int)ai("output_datatype", kFloat);
    if (!float_et(et)) fail("output_datatype must be a floating-point type");
    const double a0 = op == "HannWindow" ? 0.5 : op == "HammingWindow" ? 25.0 / 46 : 0.42;
    const double a1 = op == "HannWindow" ? 0.5 : op == "HammingWindow" ? 21.0 / 46 : 0.5;
    const double a2 = op == "BlackmanWindow" ? 0.08 : 0.0;
    const double Np = ai("periodic", 1) ? (double)N : (double)N - 1;
    Host h;
    for (int64_t k = 0; k < N; ++k) {
      const double t = Np > 0 ? 2 * M_PI * (double)k / Np : 0;
      h.f.push_back(a0 - a1 * std::cos(t) + a2 * std::cos(2 * t));
    }
    set_host(0, {N}, et, h);
    return true;
  }
  if (op == "EyeLike") {  // ones on the k-th diagonal of a 2-D shape: depends on the shape alone
    const Shape& s = in(0).shape;
    if (s.size() != 2) fail("input must be 2-D, got " + shape_str(s));
    int et = (int)ai("dtype", in(0).et);
    to_dtype(et, where());  // a type rlx cannot hold is refused here
    const int64_t k = ai("k", 0);
    if (shape_numel(s) > L_.max_folded_elements) unsupported("EyeLike of shape " + shape_str(s) + " is too large to fold");
    Host h;
    h.i.assign(shape_numel(s), 0);
    for (int64_t r = 0; r < s[0]; ++r)
      if (r + k >= 0 && r + k < s[1]) h.i[r * s[1] + r + k] = 1;
    set_host(0, s, et, h);
    return true;
  }
  if (op == "Size") {
    Host h;
    h.i.push_back(shape_numel(in(0).shape));
    set_host(0, {}, kInt64, h);
    return true;
  }
  if (op == "Constant") {
    Host h;
    if (auto a = attr("value")) {
      if (!a->t) fail("attribute 'value' holds no tensor");
      Val v;
      v.init = a->t;
      auto hv = host_of(v, L_.max_folded_elements);
      if (!hv) {  // large constant: keep it as a tensor
        Val big;
        big.init = a->t;
        big.shape = a->t->shape;
        big.et = a->t->elem_type;
        set_out(0, big);
        return true;
      }
      set_host(0, a->t->shape, a->t->elem_type, *hv);
    } else if (auto a = attr("value_float")) { h.f = {a->f}; set_host(0, {}, kFloat, h); }
    else if (auto a = attr("value_floats")) { h.f = a->floats; set_host(0, {(int64_t)a->floats.size()}, kFloat, h); }
    else if (auto a = attr("value_int")) { h.i = {a->i}; set_host(0, {}, kInt64, h); }
    else if (auto a = attr("value_ints")) { h.i = a->ints; set_host(0, {(int64_t)a->ints.size()}, kInt64, h); }
    else unsupported("Constant without value, value_float(s) or value_int(s) (attribute '" + (cur_->attrs.empty() ? std::string("?") : cur_->attrs[0].name) + "')");
    return true;
  }
  if (op == "ConstantOfShape") {
    auto dims = need_ints(0, "the shape");
    Shape s(dims.begin(), dims.end());
    for (auto d : s) if (d < 0) fail("negative dimension in the shape");
    int64_t n = shape_numel(s);
    if (n < 0 || n > L_.max_folded_elements) unsupported("ConstantOfShape of shape " + shape_str(s) + " is too large to fold");
    Host h;
    int et = kFloat;
    double v = 0;
    if (auto a = attr("value")) {
      if (!a->t || a->t->numel != 1) fail("attribute 'value' must be a one-element tensor");
      Val tv;
      tv.init = a->t;
      auto hv = host_of(tv, 1);
      if (!hv) unsupported("value of element type " + std::string(elem_type_name(a->t->elem_type)));
      et = a->t->elem_type;
      v = hv->d(0);
    }
    if (float_et(et)) h.f.assign(n, v);
    else h.i.assign(n, sat_i64(v));
    set_host(0, s, et, h);
    return true;
  }
  if (op == "Range") {
    auto a = need_scalar(0, "start"), b = need_scalar(1, "limit"), c = need_scalar(2, "delta");
    int et = in(0).et;
    Host h;
    if (float_et(et)) {
      double st = a->d(0), lim = b->d(0), dl = c->d(0);
      if (dl == 0) fail("delta is 0");
      double cnt = std::max(0.0, std::ceil((lim - st) / dl));
      if (cnt > (double)L_.max_folded_elements) unsupported("Range too long to fold");
      for (int64_t k = 0; k < (int64_t)cnt; ++k) h.f.push_back(st + k * dl);
      set_host(0, {(int64_t)cnt}, et, h);
    } else {
      int64_t st = a->n(0), lim = b->n(0), dl = c->n(0);
      if (dl == 0) fail("delta is 0");
      double cnt = std::max(0.0, std::ceil(((double)lim - (double)st) / (double)dl));
      if (cnt > (double)L_.max_folded_elements) unsupported("Range too long to fold");
      for (int64_t k = 0; k < (int64_t)cnt; ++k) h.i.push_back(st + k * dl);
      set_host(0, {(int64_t)cnt}, et, h);
    }
    return true;
  }
  if (!all_host()) return false;
  if (cur_->inputs.empty()) return false;
  Val& x = in(0);
  auto hx = host(0);
  if (op == "Identity" || op == "Dropout") {
    if (op == "Dropout") check_dropout_inference();
    set_host(0, x.shape, x.et, *hx);
    return true;
  }
  if (op == "Cast" || op == "CastLike") {
    int to = op == "Cast" ? (int)ai("to", kFloat) : in(1).et;
    Host h = *hx;
    if (!float_et(to) && h.is_float) {
      h.i.clear();
      for (double v : h.f) h.i.push_back(sat_i64(v));
      h.f.clear();
      h.is_float = false;
    }
    set_host(0, x.shape, to, h);
    return true;
  }
  if (op == "Reshape" || op == "Flatten" || op == "Unsqueeze" || op == "Squeeze") return false;  // shape-only: handled by map (value stays host)
  if (op == "Gather") {
    auto idx = need_host(1, "indices");
    int a = axis_of(ai("axis", 0), x.shape.size());
    const Shape& ds = x.shape;
    Shape is = in(1).shape, os;
    for (int k = 0; k < a; ++k) os.push_back(ds[k]);
    for (auto d : is) os.push_back(d);
    for (size_t k = a + 1; k < ds.size(); ++k) os.push_back(ds[k]);
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < a; ++k) outer *= ds[k];
    for (size_t k = a + 1; k < ds.size(); ++k) inner *= ds[k];
    int64_t n = ds[a];
    Host h;
    h.is_float = hx->is_float;
    for (int64_t o = 0; o < outer; ++o)
      for (size_t j = 0; j < idx->size(); ++j) {
        int64_t t = idx->n(j);
        if (t < 0) t += n;
        if (t < 0 || t >= n) fail("index " + std::to_string(idx->n(j)) + " is out of range for axis of size " + std::to_string(n));
        for (int64_t i = 0; i < inner; ++i) {
          int64_t src = (o * n + t) * inner + i;
          if (h.is_float) h.f.push_back(hx->f[src]);
          else h.i.push_back(hx->i[src]);
        }
      }
    set_host(0, os, x.et, h);
    return true;
  }
  if (op == "Concat") {
    int a = axis_of(ai("axis", 0), x.shape.size());
    Shape os = x.shape;
    os[a] = 0;
    std::vector<Val*> vs;
    for (size_t k = 0; k < cur_->inputs.size(); ++k) {
      if (!has_in(k)) continue;
      vs.push_back(&in(k));
      if (vs.back()->shape.size() != os.size()) fail("inputs differ in rank");
      os[a] += vs.back()->shape[a];
    }
    int64_t outer = 1;
    for (int k = 0; k < a; ++k) outer *= os[k];
    Host h;
    h.is_float = float_et(x.et);
    for (int64_t o = 0; o < outer; ++o)
      for (size_t k = 0; k < vs.size(); ++k) {
        auto hk = host_of(*vs[k], L_.max_folded_elements);
        int64_t chunk = outer ? shape_numel(vs[k]->shape) / std::max<int64_t>(outer, 1) : 0;
        for (int64_t i = 0; i < chunk; ++i) {
          if (h.is_float) h.f.push_back(hk->d(o * chunk + i));
          else h.i.push_back(hk->n(o * chunk + i));
        }
      }
    set_host(0, os, x.et, h);
    return true;
  }
  if (op == "Slice") {
    auto [st, en, ax, sp] = slice_args();
    // The registry's slice semantics (clamping, negative steps), the same as the kernels'.
    ir::Attrs sa;
    sa.values = {{"starts", st}, {"ends", en}, {"axes", ax}, {"steps", sp}};
    std::string err;
    std::vector<ir::SliceAxis> plan = ir::slice_plan(sa, x.shape, &err);
    if (!err.empty()) fail(err);
    size_t r = x.shape.size();
    std::vector<int64_t> S(r), P(r);
    Shape os(r);
    for (size_t a = 0; a < r; ++a) S[a] = plan[a].start, P[a] = plan[a].step, os[a] = plan[a].len;
    auto ist = strides_of(x.shape);
    int64_t n = shape_numel(os);
    Host h;
    h.is_float = hx->is_float;
    for (int64_t j = 0; j < n; ++j) {
      int64_t rem = j, src = 0;
      for (size_t a = r; a-- > 0;) {
        int64_t c = rem % os[a];
        rem /= os[a];
        src += (S[a] + c * P[a]) * ist[a];
      }
      if (h.is_float) h.f.push_back(hx->f[src]);
      else h.i.push_back(hx->i[src]);
    }
    set_host(0, os, x.et, h);
    return true;
  }
  if (op == "Transpose") {
    size_t r = x.shape.size();
    std::vector<int64_t> perm = aints("perm").value_or(std::vector<int64_t>{});
    if (perm.empty()) for (size_t k = 0; k < r; ++k) perm.push_back((int64_t)(r - 1 - k));
    if (perm.size() != r) fail("perm has the wrong length");
    Shape os(r);
    for (size_t k = 0; k < r; ++k) os[k] = x.shape[axis_of(perm[k], r)];
    auto ist = strides_of(x.shape);
    Host h;
    h.is_float = hx->is_float;
    int64_t n = shape_numel(os);
    for (int64_t j = 0; j < n; ++j) {
      int64_t rem = j, src = 0;
      for (size_t k = r; k-- > 0;) {
        int64_t c = rem % os[k];
        rem /= os[k];
        src += c * ist[perm[k]];
      }
      if (h.is_float) h.f.push_back(hx->f[src]);
      else h.i.push_back(hx->i[src]);
    }
    set_host(0, os, x.et, h);
    return true;
  }
  if (op == "Expand") {
    auto dims = need_ints(1, "shape");
    bool ok;
    Shape os = bcast(x.shape, Shape(dims.begin(), dims.end()), ok);
    if (!ok) fail("cannot expand " + shape_str(x.shape) + " to " + shape_str(Shape(dims.begin(), dims.end())));
    Host h;
    h.is_float = hx->is_float;
    int64_t n = shape_numel(os);
    if (n > L_.max_folded_elements) return false;
    for (int64_t j = 0; j < n; ++j) {
      int64_t s = bidx(x.shape, os, j);
      if (h.is_float) h.f.push_back(hx->f[s]);
      else h.i.push_back(hx->i[s]);
    }
    set_host(0, os, x.et, h);
    return true;
  }
  if (op == "ScatterND") {
    // output = data; output[indices[i]] (op)= updates[i] for each index tuple i, in order.
    // Swin Transformer's shifted-window mask is built this way from shapes alone.
    const Shape& ds = x.shape;
    const Shape& is = in(1).shape;
    auto idx = host(1);
    auto up = host(2);
    const int64_t k = scatter_nd_depth(ds, is, in(2).shape);
    const std::string red = as("reduction", "none");
    if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min")
      unsupported("ScatterND reduction \"" + red + "\"");
    int64_t slice = 1;
    for (size_t a = k; a < ds.size(); ++a) slice *= ds[a];
    const int64_t tuples = shape_numel(is) / k;
    auto st = strides_of(ds);
    auto combine = [&red](auto a, auto b) -> decltype(a) {
      return red == "add" ? a + b : red == "mul" ? a * b : red == "max" ? std::max(a, b) : red == "min" ? std::min(a, b) : b;
    };
    Host h = *hx;
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = 0;
      for (int64_t a = 0; a < k; ++a) {
        int64_t v = idx->n(t * k + a);
        if (v < 0) v += ds[a];
        if (v < 0 || v >= ds[a])
          fail("index " + std::to_string(idx->n(t * k + a)) + " is out of range for axis " + std::to_string(a) +
               " of size " + std::to_string(ds[a]));
        off += v * st[a];
      }
      for (int64_t e = 0; e < slice; ++e) {
        const int64_t o = off + e, u = t * slice + e;
        if (h.is_float) h.f[o] = combine(h.f[o], up->d(u));
        else h.i[o] = combine(h.i[o], up->n(u));
      }
    }
    set_host(0, ds, x.et, h);
    return true;
  }
  if (op.rfind("Reduce", 0) == 0) {
    if (x.shape.size() > 1) return false;  // only 0-D/1-D shape vectors fold here
    Host h;
    bool fl = hx->is_float;
    double acc = op == "ReduceProd" ? 1 : op == "ReduceSum" ? 0 : op == "ReduceMax" ? -INFINITY : INFINITY;
    for (size_t k = 0; k < hx->size(); ++k) {
      double v = hx->d(k);
      if (op == "ReduceProd") acc *= v;
      else if (op == "ReduceSum") acc += v;
      else if (op == "ReduceMax") acc = std::max(acc, v);
      else acc = std::min(acc, v);
    }
    bool keep = ai("keepdims", 1);
    if (fl) h.f.push_back(acc);
    else h.i.push_back(sat_i64(acc));
    set_host(0, keep && !x.shape.empty() ? Shape{1} : Shape{}, x.et, h);
    return true;
  }
  // Elementwise.
  const bool fl = float_et(x.et);
  auto un = [&](std::function<double(double)> ff, std::function<int64_t(int64_t)> fi) {
    fold_elementwise(x.et, 1, [&](const std::vector<const Host*>& hs, const std::vector<int64_t>& ix, Host& out) {
      if (fl) out.f.push_back(ff(hs[0]->d(ix[0])));
      else out.i.push_back(fi(hs[0]->n(ix[0])));
    });
  };
  auto bin = [&](std::function<double(double, double)> ff, std::function<int64_t(int64_t, int64_t)> fi, int out_et) {
    fold_elementwise(out_et, 2, [&](const std::vector<const Host*>& hs, const std::vector<int64_t>& ix, Host& out) {
      if (fl) {
        double r = ff(hs[0]->d(ix[0]), hs[1]->d(ix[1]));
        if (float_et(out_et)) out.f.push_back(r); else out.i.push_back(sat_i64(r));
      } else {
        out.i.push_back(fi(hs[0]->n(ix[0]), hs[1]->n(ix[1])));
      }
    });
  };
  if (op == "Neg") { un([](double a) { return -a; }, [](int64_t a) { return -a; }); return true; }
  if (op == "Abs") { un([](double a) { return std::fabs(a); }, [](int64_t a) { return a < 0 ? -a : a; }); return true; }
  if (op == "Sign") { un([](double a) { return (double)((a > 0) - (a < 0)); }, [](int64_t a) { return (int64_t)((a > 0) - (a < 0)); }); return true; }
  if (op == "Sqrt") { if (!fl) return false; un([](double a) { return std::sqrt(a); }, nullptr); return true; }
  if (op == "Reciprocal") { if (!fl) return false; un([](double a) { return 1.0 / a; }, nullptr); return true; }
  if (op == "Floor") { un([](double a) { return std::floor(a); }, [](int64_t a) { return a; }); return true; }
  if (op == "Ceil") { un([](double a) { return std::ceil(a); }, [](int64_t a) { return a; }); return true; }
  if (op == "Not") { un(nullptr, [](int64_t a) { return (int64_t)!a; }); return true; }
  if (op == "Add") { bin(std::plus<double>(), std::plus<int64_t>(), x.et); return true; }
  if (op == "Sub") { bin(std::minus<double>(), std::minus<int64_t>(), x.et); return true; }
  if (op == "Mul") { bin(std::multiplies<double>(), std::multiplies<int64_t>(), x.et); return true; }
  if (op == "Div") {
    if (!fl) {
      auto hb = need_host(1, "B");
      for (size_t k = 0; k < hb->size(); ++k) if (hb->n(k) == 0) fail("integer division by zero");
    }
    bin([](double a, double b) { return a / b; }, [](int64_t a, int64_t b) { return a / b; }, x.et);  // C++ truncates like ONNX
    return true;
  }
  if (op == "Mod") {
    bool fm = ai("fmod", 0);
    if (!fl) {
      auto hb = need_host(1, "B");
      for (size_t k = 0; k < hb->size(); ++k) if (hb->n(k) == 0) fail("integer modulo by zero");
    }
    bin([fm](double a, double b) { double r = std::fmod(a, b); if (!fm && r != 0 && ((r < 0) != (b < 0))) r += b; return r; },
        [fm](int64_t a, int64_t b) { int64_t r = a % b; if (!fm && r != 0 && ((r < 0) != (b < 0))) r += b; return r; }, x.et);
    return true;
  }
  auto cmp = [&](std::function<bool(double, double)> f) {
    fold_elementwise(kBool, 2, [&](const std::vector<const Host*>& hs, const std::vector<int64_t>& ix, Host& out) {
      bool r = (hs[0]->is_float || hs[1]->is_float) ? f(hs[0]->d(ix[0]), hs[1]->d(ix[1]))
                                                   : f((double)hs[0]->n(ix[0]), (double)hs[1]->n(ix[1]));
      if (!hs[0]->is_float && !hs[1]->is_float) {
        int64_t a = hs[0]->n(ix[0]), b = hs[1]->n(ix[1]);  // exact for large int64
        r = f(a < b ? -1.0 : a > b ? 1.0 : 0.0, 0.0);
      }
      out.i.push_back(r);
    });
  };
  if (op == "Equal") { cmp([](double a, double b) { return a == b; }); return true; }
  if (op == "Less") { cmp([](double a, double b) { return a < b; }); return true; }
  if (op == "Greater") { cmp([](double a, double b) { return a > b; }); return true; }
  if (op == "LessOrEqual") { cmp([](double a, double b) { return a <= b; }); return true; }
  if (op == "GreaterOrEqual") { cmp([](double a, double b) { return a >= b; }); return true; }
  if (op == "And" || op == "Or") {
    bool isand = op == "And";
    fold_elementwise(kBool, 2, [&](const std::vector<const Host*>& hs, const std::vector<int64_t>& ix, Host& out) {
      bool a = hs[0]->n(ix[0]) != 0, b = hs[1]->n(ix[1]) != 0;
      out.i.push_back(isand ? (a && b) : (a || b));
    });
    return true;
  }
  if (op == "Where") {
    int et = in(1).et;
    fold_elementwise(et, 3, [&](const std::vector<const Host*>& hs, const std::vector<int64_t>& ix, Host& out) {
      const Host* pick = hs[0]->n(ix[0]) ? hs[1] : hs[2];
      int64_t k = hs[0]->n(ix[0]) ? ix[1] : ix[2];
      if (float_et(et)) out.f.push_back(pick->d(k)); else out.i.push_back(pick->n(k));
    });
    return true;
  }
  if (op == "Min" || op == "Max") {
    bool mx = op == "Max";
    fold_elementwise(x.et, 1, [&](const std::vector<const Host*>& hs, const std::vector<int64_t>& ix, Host& out) {
      if (fl) {
        double r = hs[0]->d(ix[0]);
        for (size_t k = 1; k < hs.size(); ++k) r = mx ? std::max(r, hs[k]->d(ix[k])) : std::min(r, hs[k]->d(ix[k]));
        out.f.push_back(r);
      } else {
        int64_t r = hs[0]->n(ix[0]);
        for (size_t k = 1; k < hs.size(); ++k) r = mx ? std::max(r, hs[k]->n(ix[k])) : std::min(r, hs[k]->n(ix[k]));
        out.i.push_back(r);
      }
    });
    return true;
  }
  return false;
}

// ----------------------------------------------------------------------------------------
// RNN, GRU and LSTM, unrolled over the sequence (its length is known once the model is
// specialised to the input shapes): the input projection of every step is one product, then
// each step is a product with the recurrence weights and the gate arithmetic.
void Importer::recurrent() {
  const std::string& op = cur_->op_type;
  const int G = op == "RNN" ? 1 : op == "GRU" ? 3 : 4;  // gates
  const std::string dir = as("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
    fail("direction must be forward, reverse or bidirectional, got \"" + dir + "\"");
  const int D = dir == "bidirectional" ? 2 : 1;
  const bool layout1 = ai("layout", 0) != 0;
  int X = node(0), W = node(1), R = node(2);
  if (!float_et(in(0).et)) fail("X must be a floating-point tensor");
  if (shp(X).size() != 3) fail("X must be 3-D, got " + shape_str(shp(X)));
  if (layout1) X = emit("transpose", {X}, {{"perm", std::vector<int64_t>{1, 0, 2}}});
  const int64_t S = shp(X)[0], B = shp(X)[1], I = shp(X)[2];
  const int64_t Hn = shp(R).size() == 3 ? shp(R)[2] : -1;
  const int64_t H = ai("hidden_size", Hn);
  if (H <= 0) fail("hidden_size must be positive");
  if (shp(W) != Shape{D, G * H, I}) fail("W has shape " + shape_str(shp(W)) + ", expected " + shape_str(Shape{D, G * H, I}));
  if (shp(R) != Shape{D, G * H, H}) fail("R has shape " + shape_str(shp(R)) + ", expected " + shape_str(Shape{D, G * H, H}));
  if (S == 0) fail("the sequence is empty");
  if (has_in(4)) {  // sequence_lens: only the full length is supported
    auto lens = value_of(4);
    if (!lens) unsupported("sequence_lens (input 4) must be known when the model is loaded");
    for (size_t k = 0; k < lens->size(); ++k)
      if (lens->n(k) != S) unsupported("sequence_lens other than the full sequence length " + std::to_string(S) + " (got " + std::to_string(lens->n(k)) + ")");
  }
  const bool lbr = op == "GRU" && ai("linear_before_reset", 0) != 0;
  const bool input_forget = op == "LSTM" && ai("input_forget", 0) != 0;
  const std::vector<std::string> defaults = op == "RNN" ? std::vector<std::string>{"Tanh"}
                                            : op == "GRU" ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                          : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  const size_t per = defaults.size();
  std::vector<std::string> acts;
  std::vector<double> alphas, betas;
  if (auto a = attr("activations")) acts = a->strings;
  if (auto a = attr("activation_alpha")) alphas = a->floats;
  if (auto a = attr("activation_beta")) betas = a->floats;
  if (acts.empty()) for (int d = 0; d < D; ++d) acts.insert(acts.end(), defaults.begin(), defaults.end());
  if (acts.size() != per * D)
    fail("activations lists " + std::to_string(acts.size()) + " functions, expected " + std::to_string(per * D));
  auto clip = attr("clip");
  const DType dt = ts_.dtypes[X];
  auto act = [&](size_t k, int x) {
    if (clip) x = clamp(x, -clip->f, clip->f);
    const std::string& f = acts[k];
    auto alpha = [&](double def) { return k < alphas.size() ? alphas[k] : def; };
    auto beta = [&](double def) { return k < betas.size() ? betas[k] : def; };
    if (f == "Sigmoid") return emit("sigmoid", {x});
    if (f == "Tanh") return emit("tanh", {x});
    if (f == "Relu") return emit("relu", {x});
    if (f == "Softplus") return emit("softplus", {x});
    if (f == "Softsign") return softsign(x);
    if (f == "Affine") return emit("add", {emit("mul", {x, scalar_like(alpha(1.0), x)}), scalar_like(beta(0.0), x)});
    if (f == "LeakyRelu") return leaky_relu(x, alpha(0.01));
    if (f == "ScaledTanh") return emit("mul", {emit("tanh", {emit("mul", {x, scalar_like(beta(1.0), x)})}), scalar_like(alpha(1.0), x)});
    if (f == "HardSigmoid") return hard_sigmoid(x, alpha(0.2), beta(0.5));
    unsupported("activation function \"" + f + "\"");
  };
  auto state = [&](size_t k, int d) {  // initial_h / initial_c of direction d, or zeros
    if (has_in(k)) {
      int v = node(k);
      if (shp(v) != Shape{D, B, H}) fail("input " + std::to_string(k) + " has shape " + shape_str(shp(v)) + ", expected " + shape_str(Shape{D, B, H}));
      return reshape(narrow(v, 0, d, 1), {B, H});
    }
    return constant({B, H}, std::vector<double>(B * H, 0.0), dt);
  };
  const int xs = reshape(X, {S * B, I});
  std::vector<int> Ys, Hs, Cs;
  for (int d = 0; d < D; ++d) {
    const bool rev = dir == "reverse" || d == 1;
    const size_t a0 = per * d;
    int Wd = reshape(narrow(W, 0, d, 1), {G * H, I}), Rd = reshape(narrow(R, 0, d, 1), {G * H, H});
    int Wb = -1, Rb = -1;
    if (has_in(3)) {
      int Bv = node(3);
      if (shp(Bv) != Shape{D, 2 * G * H}) fail("B has shape " + shape_str(shp(Bv)) + ", expected " + shape_str(Shape{D, 2 * G * H}));
      int Bd = reshape(narrow(Bv, 0, d, 1), {2 * G * H});
      Wb = narrow(Bd, 0, 0, G * H);
      Rb = narrow(Bd, 0, G * H, G * H);
    }
    // Every step's input projection (and, but for GRU's candidate gate, the recurrence bias) at once.
    int xb = Wb;
    if (Rb >= 0 && op != "GRU") xb = emit("add", {Wb, Rb});
    int XW = reshape(xb >= 0 ? emit("linear", {xs, Wd, xb}) : emit("linear", {xs, Wd}), {S, B, G * H});
    int P = -1;
    if (op == "LSTM" && has_in(7)) {
      P = node(7);
      if (shp(P) != Shape{D, 3 * H}) fail("P has shape " + shape_str(shp(P)) + ", expected " + shape_str(Shape{D, 3 * H}));
      P = reshape(narrow(P, 0, d, 1), {3 * H});
    }
    int h = state(5, d), c = op == "LSTM" ? state(6, d) : -1;
    std::vector<int> ys(S);
    for (int64_t step = 0; step < S; ++step) {
      const int64_t t = rev ? S - 1 - step : step;
      int xw = reshape(narrow(XW, 0, t, 1), {B, G * H});
      if (op == "RNN") {
        h = act(a0, emit("add", {xw, emit("linear", {h, Rd})}));  // both biases are in xw
      } else if (op == "GRU") {
        // gates z, r, h; the recurrence product with its bias
        int hr = Rb >= 0 ? emit("linear", {h, Rd, Rb}) : emit("linear", {h, Rd});
        int z = act(a0, emit("add", {narrow(xw, 1, 0, H), narrow(hr, 1, 0, H)}));
        int r = act(a0, emit("add", {narrow(xw, 1, H, H), narrow(hr, 1, H, H)}));
        int cand;
        if (lbr) {
          cand = emit("add", {narrow(xw, 1, 2 * H, H), emit("mul", {r, narrow(hr, 1, 2 * H, H)})});
        } else {
          int Rh = narrow(Rd, 0, 2 * H, H);
          int rh = emit("mul", {r, h});
          cand = emit("add", {narrow(xw, 1, 2 * H, H), Rb >= 0 ? emit("linear", {rh, Rh, narrow(Rb, 0, 2 * H, H)}) : emit("linear", {rh, Rh})});
        }
        int hh = act(a0 + 1, cand);
        // (1 - z) * hh + z * h  =  hh + z * (h - hh)
        h = emit("add", {hh, emit("mul", {z, emit("sub", {h, hh})})});
      } else {
        // gates i, o, f, c
        int gates = emit("add", {xw, emit("linear", {h, Rd})});
        auto gate = [&](int k) { return narrow(gates, 1, k * H, H); };
        auto peep = [&](int g, int k, int cell) { return P >= 0 ? emit("add", {g, emit("mul", {narrow(P, 0, k * H, H), cell})}) : g; };
        int i = act(a0, peep(gate(0), 0, c));
        int f = input_forget ? emit("sub", {scalar_like(1, i), i}) : act(a0, peep(gate(2), 2, c));
        int cc = act(a0 + 1, gate(3));
        c = emit("add", {emit("mul", {f, c}), emit("mul", {i, cc})});
        int o = act(a0, peep(gate(1), 1, c));
        h = emit("mul", {o, act(a0 + 2, c)});
      }
      ys[t] = reshape(h, {1, 1, B, H});
    }
    Ys.push_back(concat_many(ys, 0));
    Hs.push_back(reshape(h, {1, B, H}));
    if (c >= 0) Cs.push_back(reshape(c, {1, B, H}));
  }
  int Y = D == 1 ? Ys[0] : emit("concat", {Ys[0], Ys[1]}, {{"axis", (int64_t)1}});
  int Yh = D == 1 ? Hs[0] : emit("concat", {Hs[0], Hs[1]}, {{"axis", (int64_t)0}});
  int Yc = Cs.empty() ? -1 : D == 1 ? Cs[0] : emit("concat", {Cs[0], Cs[1]}, {{"axis", (int64_t)0}});
  if (layout1) {
    Y = emit("transpose", {Y}, {{"perm", std::vector<int64_t>{2, 0, 1, 3}}});
    Yh = emit("transpose", {Yh}, {{"perm", std::vector<int64_t>{1, 0, 2}}});
    if (Yc >= 0) Yc = emit("transpose", {Yc}, {{"perm", std::vector<int64_t>{1, 0, 2}}});
  }
  set_node(0, Y);
  set_node(1, Yh);
  if (Yc >= 0) set_node(2, Yc);
}

// ----------------------------------------------------------------------------------------
// Einsum as sums, transposes, reshapes and batched products: operands are contracted pairwise,
// left to right; each pair becomes one matmul over [batch..., left, contracted] x
// [batch..., contracted, right].
void Importer::einsum() {
  std::string eq;
  for (char ch : as("equation", "")) if (ch != ' ') eq += ch;
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  {
    std::string lhs = eq.substr(0, arrow), t;
    for (char ch : lhs) {
      if (ch == ',') { terms.push_back(t); t.clear(); } else t += ch;
    }
    terms.push_back(t);
  }
  const size_t n = cur_->inputs.size();
  if (terms.size() != n) fail("the equation has " + std::to_string(terms.size()) + " operand(s), the node " + std::to_string(n));
  // Labels: letters; the ellipsis's dims become the characters '0'..'9', right-aligned.
  std::vector<std::string> labels(n);
  std::vector<int> xs(n);
  size_t ell = 0;
  for (size_t k = 0; k < n; ++k) {
    xs[k] = node(k);
    const std::string& t = terms[k];
    const size_t dots = t.find("...");
    const size_t explicit_n = t.size() - (dots == std::string::npos ? 0 : 3);
    const size_t r = shp(xs[k]).size();
    if (r < explicit_n || (dots == std::string::npos && r != explicit_n))
      fail("operand " + std::to_string(k) + " has rank " + std::to_string(r) + ", the term '" + t + "' does not fit it");
    if (dots != std::string::npos) ell = std::max(ell, r - explicit_n);
  }
  if (ell > 10) unsupported("Einsum with more than 10 dimensions under the ellipsis");
  auto ell_labels = [&](size_t cnt) { std::string e; for (size_t j = ell - cnt; j < ell; ++j) e += (char)('0' + j); return e; };
  for (size_t k = 0; k < n; ++k) {
    const std::string& t = terms[k];
    const size_t dots = t.find("...");
    const std::string given = dots == std::string::npos ? t : t.substr(0, dots) + t.substr(dots + 3);
    for (char ch : given)
      if (!std::isalpha((unsigned char)ch)) fail(std::string("the equation has an invalid index '") + ch + "' (indices are letters)");
    std::string l = dots == std::string::npos ? t : t.substr(0, dots) + ell_labels(shp(xs[k]).size() - (t.size() - 3)) + t.substr(dots + 3);
    for (size_t a = 0; a < l.size(); ++a)
      if (l.find(l[a], a + 1) != std::string::npos)
        unsupported(std::string("Einsum with a repeated index within one operand ('") + l[a] + "': a diagonal)");
    labels[k] = l;
  }
  std::string out;
  if (arrow != std::string::npos) {
    std::string o = eq.substr(arrow + 2);
    const size_t dots = o.find("...");
    for (char ch : dots == std::string::npos ? o : o.substr(0, dots) + o.substr(dots + 3))
      if (!std::isalpha((unsigned char)ch)) fail(std::string("the equation has an invalid output index '") + ch + "' (indices are letters)");
    out = dots == std::string::npos ? o : o.substr(0, dots) + ell_labels(ell) + o.substr(dots + 3);
  } else {  // implicit: the ellipsis, then the indices that appear once, in alphabetical order
    std::map<char, int> count;
    for (const auto& l : labels) for (char ch : l) count[ch]++;
    out = ell_labels(ell);
    for (auto [ch, c] : count) if (c == 1 && !std::isdigit((unsigned char)ch)) out += ch;
  }
  std::map<char, int64_t> size;
  for (size_t k = 0; k < n; ++k)
    for (size_t a = 0; a < labels[k].size(); ++a) {
      const int64_t d = shp(xs[k])[a];
      auto [it, fresh] = size.emplace(labels[k][a], d);
      if (!fresh && it->second != d) {
        if (it->second == 1) it->second = d;
        else if (d != 1) fail(std::string("index '") + labels[k][a] + "' has sizes " + std::to_string(it->second) + " and " + std::to_string(d));
      }
    }
  for (char ch : out) if (!size.count(ch)) fail(std::string("the output index '") + ch + "' appears in no operand");
  auto has = [](const std::string& l, char ch) { return l.find(ch) != std::string::npos; };
  // Sums out the labels of x that `keep` does not list; returns x and its labels.
  auto sum_out = [&](int x, std::string l, const std::string& keep) {
    std::vector<int64_t> axes;
    std::string kept;
    for (size_t a = 0; a < l.size(); ++a) {
      if (has(keep, l[a])) kept += l[a];
      else axes.push_back((int64_t)a);
    }
    if (!axes.empty()) x = emit("sum", {x}, {{"axes", axes}, {"keepdims", false}});
    return std::make_pair(x, kept);
  };
  auto sizes = [&](const std::string& l) {
    Shape s;
    for (char ch : l) s.push_back(size[ch]);
    return s;
  };
  auto permute = [&](int x, const std::string& from, const std::string& to) {
    if (from == to) return x;
    std::vector<int64_t> perm;
    for (char ch : to) perm.push_back((int64_t)from.find(ch));
    return emit("transpose", {x}, {{"perm", perm}});
  };
  int x = xs[0];
  std::string lx = labels[0];
  for (size_t k = 1; k <= n; ++k) {
    // Labels still needed after this step: the output's and the remaining operands'.
    std::string later = out;
    for (size_t j = k + 1; j < n; ++j) later += labels[j];
    if (k == n) {  // one operand left: sum and order
      auto [y, ly] = sum_out(x, lx, out);
      return set_node(0, reshape_out(permute(y, ly, out), sizes(out)));
    }
    auto [a, la] = sum_out(x, lx, later + labels[k]);
    auto [b, lb] = sum_out(xs[k], labels[k], later + la);
    std::string batch, left, right, con;
    for (char ch : la) (has(lb, ch) ? (has(later, ch) ? batch : con) : left) += ch;
    for (char ch : lb) if (!has(la, ch)) right += ch;
    auto prod = [&](const std::string& l) { int64_t p = 1; for (char ch : l) p *= size[ch]; return p; };
    auto dims = [&](int v, const std::string& lv, const std::string& ls) {  // v's own sizes of labels ls
      std::vector<int64_t> r;
      for (char ch : ls) r.push_back(shp(v)[lv.find(ch)]);
      return r;
    };
    for (char ch : con)
      if (shp(a)[la.find(ch)] != shp(b)[lb.find(ch)]) unsupported(std::string("Einsum broadcasting the summed index '") + ch + "'");
    std::vector<int64_t> sa = dims(a, la, batch), sb = dims(b, lb, batch);
    sa.push_back(prod(left));
    sa.push_back(prod(con));
    sb.push_back(prod(con));
    sb.push_back(prod(right));
    int am = emit("reshape", {permute(a, la, batch + left + con)}, {{"shape", sa}});
    int bm = emit("reshape", {permute(b, lb, batch + con + right)}, {{"shape", sb}});
    int y = emit("matmul", {am, bm});
    lx = batch + left + right;
    x = reshape(y, sizes(lx));
  }
}

// ----------------------------------------------------------------------------------------
// Mapping onto registry ops.
void Importer::map_node() {
  const NodeDef& n = *cur_;
  const std::string& op = n.op_type;
  const int64_t opset = m_.opset();
  if (!n.domain.empty() && n.domain != "ai.onnx")
    unsupported("operator domain '" + n.domain + "' (only the default ONNX domain is supported)");
  for (size_t k = 1; k < n.outputs.size(); ++k) {
    // Extra outputs are mapped only where listed below; others must be unused.
    (void)k;
  }

  // ---- elementwise ----
  static const std::map<std::string, const char*> unary_ops = {
      {"Neg", "neg"}, {"Exp", "exp"}, {"Log", "log"}, {"Sqrt", "sqrt"}, {"Tanh", "tanh"}, {"Erf", "erf"},
      {"Sigmoid", "sigmoid"}, {"Relu", "relu"}, {"Abs", "abs"}, {"Sin", "sin"}, {"Cos", "cos"}, {"Floor", "floor"},
      {"Ceil", "ceil"}, {"Round", "round"}, {"Sign", "sign"}, {"Not", "logical_not"}};
  static const std::map<std::string, const char*> binary_ops = {
      {"Add", "add"}, {"Sub", "sub"}, {"Mul", "mul"}, {"Pow", "pow"},
      {"Equal", "equal"}, {"Less", "less"}, {"Greater", "greater"}, {"LessOrEqual", "less_equal"},
      {"GreaterOrEqual", "greater_equal"}, {"And", "logical_and"}, {"Or", "logical_or"}, {"Xor", "logical_xor"}};
  if (auto it = unary_ops.find(op); it != unary_ops.end()) return unary(it->second);
  if (auto it = binary_ops.find(op); it != binary_ops.end()) {
    if ((op == "Add" || op == "Sub" || op == "Mul") && in(0).et != in(1).et && !(float_et(in(0).et) && float_et(in(1).et)))
      fail("inputs have different element types");
    return binary(it->second);
  }
  if (op == "Div") {
    int d = emit("div", {node(0), node(1)}, {}, float_et(in(0).et) ? out_name() : "");
    if (!float_et(in(0).et)) d = emit("cast", {d}, {{"dtype", std::string(dtype_name(to_dtype(in(0).et, where())))}}, out_name());
    return set_node(0, d);
  }
  if (op == "Mod") return set_node(0, emit("mod", {node(0), node(1)}, {{"fmod", (bool)ai("fmod", 0)}}, out_name()));
  if (op == "Reciprocal") { int x = node(0); return set_node(0, emit("div", {scalar_like(1, x), x}, {}, out_name())); }
  if (op == "Softplus") {
    if (ir::op_from_name("softplus")) return unary("softplus");
    int x = node(0);  // max(x,0) + log(1 + exp(-|x|)), stable
    int t = emit("log", {emit("add", {scalar_like(1, x), emit("exp", {emit("neg", {emit("abs", {x})})})})});
    return set_node(0, emit("add", {emit("relu", {x}), t}, {}, out_name()));
  }
  if (op == "LeakyRelu") {
    int x = node(0);
    return set_node(0, leaky_relu(x, af("alpha", 0.01), out_name()));
  }
  if (op == "Elu") {
    int x = node(0);
    double a = af("alpha", 1.0);
    int neg = emit("mul", {scalar_like(a, x), emit("sub", {emit("exp", {emit("minimum", {x, scalar_like(0, x)})}), scalar_like(1, x)})});
    return set_node(0, emit("add", {emit("relu", {x}), neg}, {}, out_name()));
  }
  if (op == "HardSigmoid" || op == "HardSwish") {
    int x = node(0);
    double a = op == "HardSwish" ? 1.0 / 6 : af("alpha", 0.2), b = op == "HardSwish" ? 0.5 : af("beta", 0.5);
    int y = hard_sigmoid(x, a, b, op == "HardSigmoid" ? out_name() : "");
    if (op == "HardSwish") y = emit("mul", {x, y}, {}, out_name());
    return set_node(0, y);
  }
  if (op == "RNN" || op == "GRU" || op == "LSTM") return recurrent();
  if (op == "Einsum") return einsum();
  if (op == "ReverseSequence") {
    // y[t, b] = x[len[b] - 1 - t, b] for t < len[b], else x[t, b]: a gather_elements along the
    // time axis (a length beyond the axis is an index error there).
    int x = node(0);
    const Shape xs = shp(x);
    if (xs.size() < 2) fail("the input must have rank >= 2, got " + shape_str(xs));
    const int ta = axis_of(ai("time_axis", 0), xs.size()), ba = axis_of(ai("batch_axis", 1), xs.size());
    if (ta + ba != 1) fail("time_axis and batch_axis must be 0 and 1 in some order");
    const int64_t T = xs[ta], B = xs[ba];
    int lens = cast(node(1), DType::i64);
    if (shp(lens) != Shape{B}) fail("sequence_lens has shape " + shape_str(shp(lens)) + ", expected [" + std::to_string(B) + "]");
    Shape lt(2, 1), tt(2, 1);
    lt[ba] = B;
    tt[ta] = T;
    lens = reshape(lens, lt);
    int t = positions(tt);
    int src = emit("where", {emit("less", {t, lens}), emit("sub", {emit("sub", {lens, scalar(1, DType::i64)}), t}), t});  // [T, B] or [B, T]
    Shape s2 = {xs[0], xs[1]};
    for (size_t k = 2; k < xs.size(); ++k) s2.push_back(1);
    src = emit("broadcast_to", {reshape(src, s2)}, {{"shape", std::vector<int64_t>(xs.begin(), xs.end())}});
    return set_node(0, emit("gather_elements", {x, src}, {{"axis", (int64_t)ta}}, out_name()));
  }
  if (op == "IsNaN") {  // NaN is the one value not equal to itself
    int x = node(0);
    if (!float_et(in(0).et)) fail("the input must be floating point");
    return set_node(0, emit("logical_not", {emit("equal", {x, x})}, {}, out_name()));
  }
  if (op == "IsInf") {  // |x| above the type's largest finite value (no infinite constant needed); NaN is not
    int x = node(0);
    if (!float_et(in(0).et)) fail("the input must be floating point");
    const DType dt = ts_.dtypes[x];
    const double big = dt == DType::f16 ? 65504.0 : dt == DType::bf16 ? 3.3895313892515355e38 : 3.4028234663852886e38;
    const bool pos = ai("detect_positive", 1) != 0, neg = ai("detect_negative", 1) != 0;
    int inf = emit("greater", {emit("abs", {x}), scalar_like(big, x)}, {}, pos && neg ? out_name() : "");
    if (pos && neg) return set_node(0, inf);
    if (!pos && !neg) return set_node(0, emit("logical_and", {inf, emit("logical_not", {inf})}, {}, out_name()));
    int side = emit(pos ? "greater" : "less", {x, scalar_like(0, x)});
    return set_node(0, emit("logical_and", {inf, side}, {}, out_name()));
  }
  if (op == "PRelu") {  // x where x >= 0, else slope * x (slope broadcasts to x)
    int x = node(0);
    return set_node(0, emit("where", {emit("less", {x, scalar_like(0, x)}), emit("mul", {x, node(1)}), x}, {}, out_name()));
  }
  if (op == "Selu" || op == "Celu") {
    // Selu: gamma * (max(x, 0) + alpha * (exp(min(x, 0)) - 1)); Celu: max(x, 0) + alpha * (exp(min(x, 0) / alpha) - 1)
    int x = node(0);
    const bool selu = op == "Selu";
    double a = af("alpha", selu ? 1.67326319217681884765625 : 1.0);
    if (!selu && a == 0) fail("alpha must not be 0");
    int neg = emit("minimum", {x, scalar_like(0, x)});
    if (!selu) neg = emit("div", {neg, scalar_like(a, x)});
    int e = emit("mul", {scalar_like(a, x), emit("sub", {emit("exp", {neg}), scalar_like(1, x)})});
    int y = emit("add", {emit("relu", {x}), e}, {}, selu ? "" : out_name());
    if (selu) y = emit("mul", {y, scalar_like(af("gamma", 1.05070102214813232421875), x)}, {}, out_name());
    return set_node(0, y);
  }
  if (op == "ThresholdedRelu") {
    int x = node(0);
    return set_node(0, emit("where", {emit("greater", {x, scalar_like(af("alpha", 1.0), x)}), x, scalar_like(0, x)}, {}, out_name()));
  }
  if (op == "Shrink") {  // x - bias where x > lambd, x + bias where x < -lambd, else 0
    int x = node(0);
    double b = af("bias", 0.0), l = af("lambd", 0.5);
    int lo = emit("where", {emit("less", {x, scalar_like(-l, x)}), emit("add", {x, scalar_like(b, x)}), scalar_like(0, x)});
    return set_node(0, emit("where", {emit("greater", {x, scalar_like(l, x)}), emit("sub", {x, scalar_like(b, x)}), lo}, {}, out_name()));
  }
  if (op == "Softsign") return set_node(0, softsign(node(0), out_name()));
  if (op == "Tan") {
    int x = node(0);
    return set_node(0, emit("div", {emit("sin", {x}), emit("cos", {x})}, {}, out_name()));
  }
  if (op == "Sinh" || op == "Cosh") {  // (exp(x) -/+ exp(-x)) / 2
    int x = node(0);
    int ep = emit("exp", {x}), en = emit("exp", {emit("neg", {x})});
    return set_node(0, emit("mul", {emit(op == "Sinh" ? "sub" : "add", {ep, en}), scalar_like(0.5, x)}, {}, out_name()));
  }
  if (op == "Asinh") {  // sign(x) * log(|x| + sqrt(x^2 + 1)): no cancellation for negative x
    int x = node(0), ax = emit("abs", {x});
    int l = emit("log", {emit("add", {ax, emit("sqrt", {emit("add", {emit("square", {x}), scalar_like(1, x)})})})});
    return set_node(0, emit("mul", {emit("sign", {x}), l}, {}, out_name()));
  }
  if (op == "Acosh") {  // log(x + sqrt(x^2 - 1))
    int x = node(0);
    return set_node(0, emit("log", {emit("add", {x, emit("sqrt", {emit("sub", {emit("square", {x}), scalar_like(1, x)})})})}, {}, out_name()));
  }
  if (op == "Atanh") {  // log((1 + x) / (1 - x)) / 2
    int x = node(0), one = scalar_like(1, x);
    int r = emit("div", {emit("add", {one, x}), emit("sub", {one, x})});
    return set_node(0, emit("mul", {emit("log", {r}), scalar_like(0.5, x)}, {}, out_name()));
  }
  if (op == "Hardmax") {  // 1 at the first maximum along the axis, 0 elsewhere
    int x = node(0);
    const Shape s = shp(x);
    int a = axis_of(ai("axis", opset < 13 ? 1 : -1), s.size());
    int xv = x;
    if (opset < 13) xv = flatten_2d(x, a), a = 1;
    const Shape vs = shp(xv);  // a copy: emit() grows the shape table
    int am = emit("argmax", {xv}, {{"axis", (int64_t)a}, {"keepdims", true}});
    Shape is(vs.size(), 1);
    is[a] = vs[a];
    int y = cast(emit("equal", {am, positions(is)}), ts_.dtypes[x]);
    return set_node(0, reshape_out(y, s));
  }
  if (op == "NegativeLogLikelihoodLoss" || op == "SoftmaxCrossEntropyLoss") {
    // loss[n, d..] = -x[n, target[n, d..], d..] * weight[target] (0 where target == ignore_index),
    // x = log_softmax(scores, axis 1) for SoftmaxCrossEntropyLoss; reduced by none, sum or mean
    // (mean: over the weights of the counted targets).
    const bool sce = op == "SoftmaxCrossEntropyLoss";
    int x = node(0), t = node(1);
    const Shape xs = shp(x), ts = shp(t);
    if (xs.size() < 2) fail("the input must be [N, C, ...], got " + shape_str(xs));
    Shape want = xs;
    want.erase(want.begin() + 1);
    if (ts != want) fail("the target has shape " + shape_str(ts) + ", expected " + shape_str(want));
    if (!is_integer(ts_.dtypes[t])) fail("the target must hold integers");
    const std::string red = as("reduction", "mean");
    if (red != "none" && red != "sum" && red != "mean") fail("reduction must be none, sum or mean, got \"" + red + "\"");
    const int64_t C = xs[1];
    int logp = x;
    if (sce) logp = log_softmax(x, 1);
    t = cast(t, DType::i64);
    int valid = -1;
    if (auto ig = attr("ignore_index")) {
      valid = emit("logical_not", {emit("equal", {t, scalar((double)ig->i, DType::i64)})});
      t = emit("where", {valid, t, scalar(0, DType::i64)});
    }
    Shape t1 = ts;
    t1.insert(t1.begin() + 1, 1);
    int picked = reshape(emit("gather_elements", {logp, reshape(t, t1)}, {{"axis", (int64_t)1}}), ts);  // range-checked
    int w = -1;  // per-element weight, or none (all 1)
    if (has_in(2)) {
      int wv = node(2);
      if (shp(wv) != Shape{C}) fail("the weights have shape " + shape_str(shp(wv)) + ", expected [" + std::to_string(C) + "]");
      w = emit("gather", {wv, t}, {{"axis", (int64_t)0}});
    }
    if (valid >= 0) w = emit("where", {valid, w >= 0 ? w : scalar_like(1, x), scalar_like(0, x)});
    int loss = emit("neg", {w >= 0 ? emit("mul", {picked, w}) : picked});
    std::vector<int64_t> all;
    for (size_t k = 0; k < ts.size(); ++k) all.push_back((int64_t)k);
    std::map<std::string, ir::AttrValue> every{{"axes", all}, {"keepdims", false}};
    int y = loss;
    if (red == "sum") y = emit("sum", {loss}, every);
    if (red == "mean") {
      if (w < 0) y = emit("mean", {loss}, every);
      else y = emit("div", {emit("sum", {loss}, every), emit("sum", {emit("broadcast_to", {w}, {{"shape", std::vector<int64_t>(ts.begin(), ts.end())}})}, every)});
    }
    set_node(0, reshape_out(y, shp(y)));
    if (sce) set_node(1, logp);
    return;
  }
  if (op == "GridSample") {
    // Sampling points from the grid, unnormalised per align_corners; each of the (1 or 4)
    // neighbours is a gather_elements over the flattened H*W axis, masked to zero outside the
    // image (padding zeros) or taken from clamped points (padding border).
    int x = node(0), grid = node(1);
    const Shape xs = shp(x), gs = shp(grid);
    if (xs.size() != 4) fail("X must be 4-D [N, C, H, W], got " + shape_str(xs));
    if (gs.size() != 4 || gs[0] != xs[0] || gs[3] != 2) fail("grid must be [N, H_out, W_out, 2], got " + shape_str(gs));
    const std::string mode = as("mode", "bilinear"), pad = as("padding_mode", "zeros");
    if (mode != "bilinear" && mode != "nearest") unsupported("GridSample mode \"" + mode + "\"");
    if (pad != "zeros" && pad != "border") unsupported("GridSample padding_mode \"" + pad + "\"");
    const bool ac = ai("align_corners", 0) != 0;
    const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], P = gs[1] * gs[2];
    int xf = reshape(x, {N, C, H * W});
    auto coord = [&](int64_t k, int64_t D) {  // grid component k, in pixels
      int g = reshape(narrow(grid, 3, k, 1), {N, P});
      int u = ac ? emit("mul", {emit("add", {g, scalar_like(1, g)}), scalar_like((double)(D - 1) / 2, g)})
                 : emit("mul", {emit("sub", {emit("mul", {emit("add", {g, scalar_like(1, g)}), scalar_like((double)D, g)}), scalar_like(1, g)}), scalar_like(0.5, g)});
      return pad == "border" ? clamp(u, 0, (double)(D - 1)) : u;
    };
    auto sample = [&](int xi, int yi) {  // whole-pixel positions [N, P] -> values [N, C, P]
      int valid = emit("logical_and", {emit("logical_and", {emit("greater_equal", {xi, scalar_like(0, xi)}), emit("less_equal", {xi, scalar_like((double)(W - 1), xi)})}),
                                       emit("logical_and", {emit("greater_equal", {yi, scalar_like(0, yi)}), emit("less_equal", {yi, scalar_like((double)(H - 1), yi)})})});
      int lin = cast(emit("add", {emit("mul", {clamp(yi, 0, (double)(H - 1)), scalar_like((double)W, yi)}), clamp(xi, 0, (double)(W - 1))}), DType::i64);
      lin = emit("broadcast_to", {reshape(lin, {N, 1, P})}, {{"shape", std::vector<int64_t>{N, C, P}}});
      int v = emit("gather_elements", {xf, lin}, {{"axis", (int64_t)2}});
      return emit("where", {reshape(valid, {N, 1, P}), v, scalar_like(0, v)});
    };
    int ux = coord(0, W), uy = coord(1, H);
    int y;
    if (mode == "nearest") {
      y = sample(emit("round", {ux}), emit("round", {uy}));
    } else {
      int x0 = emit("floor", {ux}), y0 = emit("floor", {uy});
      int x1 = emit("add", {x0, scalar_like(1, x0)}), y1 = emit("add", {y0, scalar_like(1, y0)});
      int wx1 = emit("sub", {ux, x0}), wy1 = emit("sub", {uy, y0});
      int wx0 = emit("sub", {scalar_like(1, wx1), wx1}), wy0 = emit("sub", {scalar_like(1, wy1), wy1});
      auto term = [&](int xi, int yi, int wx, int wy) { return emit("mul", {sample(xi, yi), reshape(emit("mul", {wx, wy}), {N, 1, P})}); };
      y = emit("add", {emit("add", {term(x0, y0, wx0, wy0), term(x1, y0, wx1, wy0)}), emit("add", {term(x0, y1, wx0, wy1), term(x1, y1, wx1, wy1)})});
    }
    return set_node(0, reshape_out(y, {N, C, gs[1], gs[2]}));
  }
  if (op == "LRN") {
    // y = x / (bias + alpha / size * (sum of x^2 over the `size` channels around c))^beta; the
    // channel window sum as an average pool over [C, H*W] that counts the zero padding.
    int x = node(0);
    const Shape s = shp(x);
    if (s.size() < 3) fail("input must be at least 3-D [N, C, ...], got " + shape_str(s));
    const int64_t size = ai("size", 0);
    if (size < 1) fail("size must be a positive integer, got " + std::to_string(size));
    const double alpha = af("alpha", 1e-4), beta = af("beta", 0.75), bias = af("bias", 1.0);
    int64_t rest = 1;
    for (size_t k = 2; k < s.size(); ++k) rest *= s[k];
    const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
    int sq = reshape(emit("square", {x}), {s[0], 1, s[1], rest});
    int avg = emit("avg_pool2d", {sq}, {{"kernel", std::vector<int64_t>{size, 1}}, {"pads", std::vector<int64_t>{lo, 0, hi, 0}},
                                        {"count_include_pad", true}});
    int den = emit("add", {emit("mul", {reshape(avg, s), scalar_like(alpha, x)}), scalar_like(bias, x)});
    return set_node(0, emit("div", {x, emit("pow", {den, scalar_like(beta, x)})}, {}, out_name()));
  }
  if (op == "OneHot") {  // values[1] where the (wrapped) index equals the position along `axis`, else values[0]
    int idx = node(0);
    auto depth_h = need_scalar(1, "depth");
    const int64_t depth = depth_h->n(0);
    if (depth < 1) fail("depth must be positive, got " + std::to_string(depth));
    const Shape is = shp(idx);
    const int r = (int)is.size() + 1;
    const int a = axis_of(ai("axis", -1), r);
    if (float_et(in(0).et)) idx = emit("floor", {idx});  // float indices are truncated, as ONNX Runtime does
    const DType it = is_float(ts_.dtypes[idx]) ? ts_.dtypes[idx] : DType::i64;
    idx = cast(idx, it);
    // negative indices count from the end: i + depth where i < 0
    idx = emit("where", {emit("less", {idx, scalar(0, it)}), emit("add", {idx, scalar((double)depth, it)}), idx});
    Shape us = is;
    us.insert(us.begin() + a, 1);
    Shape ps(r, 1);
    ps[a] = depth;
    int hit = emit("equal", {reshape(idx, us), positions(ps, it)});
    int vals = node(2);
    if (shape_numel(shp(vals)) != 2) fail("values must have two elements [off, on], got " + shape_str(shp(vals)));
    vals = reshape(vals, {2});
    auto pick = [&](int64_t k) { return reshape(narrow(vals, 0, k, 1), {}); };
    return set_node(0, emit("where", {hit, pick(1), pick(0)}, {}, out_name()));
  }
  if (op == "MeanVarianceNormalization") {  // (x - mean) / (sqrt(mean(x^2) - mean^2) + 1e-9), as ONNX's function body
    int x = node(0);
    std::vector<int64_t> axes = aints("axes").value_or(std::vector<int64_t>{0, 2, 3});
    for (auto& v : axes) v = axis_of(v, shp(x).size());
    int mu = reduce_node("mean", x, axes, true);
    int var = emit("sub", {reduce_node("mean", emit("square", {x}), axes, true), emit("square", {mu})});
    int sd = emit("add", {emit("sqrt", {var}), scalar_like(1e-9, x)});
    return set_node(0, emit("div", {emit("sub", {x, mu}), sd}, {}, out_name()));
  }
  if (op == "DepthToSpace" || op == "SpaceToDepth") {
    int x = node(0);
    const Shape& s = shp(x);
    if (s.size() != 4) fail("input must be 4-D [N, C, H, W], got " + shape_str(s));
    const int64_t b = ai("blocksize", 0);
    if (b < 1) fail("blocksize must be a positive integer, got " + std::to_string(b));
    const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
    if (op == "DepthToSpace") {
      if (C % (b * b)) fail("channels (" + std::to_string(C) + ") must be a multiple of blocksize^2 (" + std::to_string(b * b) + ")");
      const std::string mode = as("mode", "DCR");
      if (mode != "DCR" && mode != "CRD") fail("mode must be DCR or CRD, got \"" + mode + "\"");
      const bool dcr = mode == "DCR";
      int r = reshape(x, dcr ? Shape{N, b, b, C / (b * b), H, W} : Shape{N, C / (b * b), b, b, H, W});
      int t = emit("transpose", {r}, {{"perm", dcr ? std::vector<int64_t>{0, 3, 4, 1, 5, 2} : std::vector<int64_t>{0, 1, 4, 2, 5, 3}}});
      return set_node(0, reshape_out(t, {N, C / (b * b), H * b, W * b}));
    }
    if (H % b || W % b) fail("height and width (" + std::to_string(H) + ", " + std::to_string(W) + ") must be multiples of blocksize " + std::to_string(b));
    int r = reshape(x, {N, C, H / b, b, W / b, b});
    int t = emit("transpose", {r}, {{"perm", std::vector<int64_t>{0, 3, 5, 1, 2, 4}}});
    return set_node(0, reshape_out(t, {N, C * b * b, H / b, W / b}));
  }
  if (op == "Clip") {
    int x = node(0);
    int lo = -1, hi = -1;
    if (opset < 11) {
      if (attr("min")) lo = scalar_like(af("min", 0), x);
      if (attr("max")) hi = scalar_like(af("max", 0), x);
    } else {
      if (has_in(1)) lo = reshape(node(1), {});
      if (has_in(2)) hi = reshape(node(2), {});
    }
    int y = x;
    if (lo >= 0) y = emit("maximum", {y, lo}, {}, hi < 0 ? out_name() : "");
    if (hi >= 0) y = emit("minimum", {y, hi}, {}, out_name());
    return set_node(0, y);
  }
  if (op == "Where") return set_node(0, emit("where", {node(0), node(1), node(2)}, {}, out_name()));
  if (op == "Cast" || op == "CastLike") {
    int to = op == "Cast" ? (int)ai("to", 0) : in(1).et;
    DType dt = to_dtype(to, where() + ": attribute 'to'");
    int x = node(0);
    if (ts_.dtypes[x] == dt) return set_node(0, x);
    return set_node(0, emit("cast", {x}, {{"dtype", std::string(dtype_name(dt))}}, out_name()));
  }
  if (op == "Sum" || op == "Max" || op == "Min" || op == "Mean") {
    const char* b = op == "Max" ? "maximum" : op == "Min" ? "minimum" : "add";
    int y = node(0);
    size_t cnt = 0;
    for (size_t k = 0; k < n.inputs.size(); ++k) if (has_in(k)) cnt++;
    for (size_t k = 1; k < n.inputs.size(); ++k)
      if (has_in(k)) y = emit(b, {y, node(k)}, {}, (k + 1 == n.inputs.size() && op != "Mean") ? out_name() : "");
    if (op == "Mean") y = emit("mul", {y, scalar_like(1.0 / (double)cnt, y)}, {}, out_name());
    return set_node(0, y);
  }
  if (op == "Identity" || op == "Dropout") {
    if (op == "Dropout") check_dropout_inference();
    if (n.outputs.size() > 1 && !n.outputs[1].empty()) {
      // Dropout's mask in inference: all true.
      Host h;
      h.i.assign(shape_numel(in(0).shape), 1);
      set_host(1, in(0).shape, kBool, h);
    }
    Val v = in(0);
    return set_out(0, v);
  }

  // ---- reductions ----
  if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd" ||
      op == "ReduceSumSquare" || op == "ReduceL2" || op == "ReduceL1" || op == "ReduceLogSumExp" || op == "ReduceLogSum") {
    bool input_form = (op == "ReduceSum" && opset >= 13);
    auto axes = reduce_axes(input_form);
    bool keep = ai("keepdims", 1);
    int x = node(0);
    if (axes && axes->empty()) return set_node(0, x);
    if (op == "ReduceSum") return set_node(0, reduce_node("sum", x, axes, keep, out_name()));
    if (op == "ReduceMean") return set_node(0, reduce_node("mean", x, axes, keep, out_name()));
    if (op == "ReduceMax") return set_node(0, reduce_node("max", x, axes, keep, out_name()));
    if (op == "ReduceMin") return set_node(0, reduce_node("min", x, axes, keep, out_name()));
    if (op == "ReduceProd") return set_node(0, reduce_node("prod", x, axes, keep, out_name()));
    if (op == "ReduceL1") return set_node(0, reduce_node("sum", emit("abs", {x}), axes, keep, out_name()));
    if (op == "ReduceSumSquare") return set_node(0, reduce_node("sum", emit("square", {x}), axes, keep, out_name()));
    if (op == "ReduceL2") return set_node(0, emit("sqrt", {reduce_node("sum", emit("square", {x}), axes, keep)}, {}, out_name()));
    if (op == "ReduceLogSum") return set_node(0, emit("log", {reduce_node("sum", x, axes, keep)}, {}, out_name()));
    if (op == "ReduceLogSumExp") {
      int mk = reduce_node("max", x, axes, true);
      int s = reduce_node("sum", emit("exp", {emit("sub", {x, mk})}), axes, true);
      int y = emit("add", {emit("log", {s}), mk});
      if (!keep) {
        Shape o;
        std::set<int64_t> ax;
        if (axes) ax.insert(axes->begin(), axes->end());
        for (size_t k = 0; k < shp(x).size(); ++k) if (axes && !ax.count((int64_t)k)) o.push_back(shp(x)[k]);
        y = reshape(y, o);
      }
      return set_node(0, y);
    }
  }
  if (op == "ArgMax" || op == "ArgMin")
    return set_node(0, emit(op == "ArgMax" ? "argmax" : "argmin", {node(0)},
                            {{"axis", ai("axis", 0)}, {"keepdims", (bool)ai("keepdims", 1)}, {"select_last_index", (bool)ai("select_last_index", 0)}},
                            out_name()));
  if (op == "CumSum") {
    auto ax = need_ints(1, "axis");
    if (ax.size() != 1) fail("axis must hold one value");
    return set_node(0, emit("cumsum", {node(0)}, {{"axis", ax[0]}, {"exclusive", (bool)ai("exclusive", 0)}, {"reverse", (bool)ai("reverse", 0)}}, out_name()));
  }
  if (op == "TopK") {
    int64_t k = opset < 10 ? ai("k", 1) : need_ints(1, "k").at(0);
    std::map<std::string, ir::AttrValue> a{{"k", k}, {"axis", ai("axis", -1)}, {"largest", (bool)ai("largest", 1)}, {"sorted", (bool)ai("sorted", 1)}};
    int x = node(0);
    auto av = a;
    av["select"] = std::string("values");
    set_node(0, emit("topk", {x}, av, out_name(0)));
    if (n.outputs.size() > 1 && !n.outputs[1].empty()) {
      a["select"] = std::string("indices");
      set_node(1, emit("topk", {x}, a, out_name(1)));
    }
    return;
  }

  // ---- linear algebra ----
  if (op == "MatMul") {
    int a = node(0), b = node(1);
    Shape sa = shp(a), sb = shp(b);
    if (sa.empty() || sb.empty()) fail("MatMul operands must have rank >= 1");
    bool a1 = sa.size() == 1, b1 = sb.size() == 1;
    if (a1) a = reshape(a, {1, sa[0]});
    if (b1) b = reshape(b, {sb[0], 1});
    int y = emit("matmul", {a, b}, {}, (a1 || b1) ? "" : out_name());
    if (a1 || b1) {
      Shape o = shp(y);
      if (b1) o.pop_back();
      if (a1) o.erase(o.end() - (b1 ? 1 : 2));
      y = emit("reshape", {y}, {{"shape", std::vector<int64_t>(o.begin(), o.end())}}, out_name());
    }
    return set_node(0, y);
  }
  if (op == "Gemm") {
    int a = node(0), b = node(1);
    bool ta = ai("transA", 0), tb = ai("transB", 0);
    double alpha = af("alpha", 1.0), beta = af("beta", 1.0);
    if (shp(a).size() != 2 || shp(b).size() != 2) fail("Gemm needs 2-D A and B");
    bool has_c = has_in(2) && beta != 0;
    int64_t N = tb ? shp(b)[0] : shp(b)[1];
    if (!ta && tb && alpha == 1 && has_c && beta == 1 && (shp(node(2)) == Shape{N})) {
      return set_node(0, emit("linear", {a, b, node(2)}, {}, out_name()));
    }
    int y = emit("matmul", {a, b}, {{"transpose_a", ta}, {"transpose_b", tb}}, !has_c && alpha == 1 ? out_name() : "");
    if (alpha != 1) y = emit("mul", {y, scalar(alpha)}, {}, !has_c ? out_name() : "");
    if (has_c) {
      int c = node(2);
      if (beta != 1) c = emit("mul", {c, scalar(beta)});
      y = emit("add", {y, c}, {}, out_name());
    }
    return set_node(0, y);
  }

  // ---- normalisation ----
  if (op == "Softmax" || op == "LogSoftmax") {
    int64_t axis = ai("axis", opset < 13 ? 1 : -1);
    int y = softmax_like(node(0), axis, op == "LogSoftmax");
    return set_node(0, y);
  }
  if (op == "LayerNormalization") {
    int x = node(0);
    Shape s = shp(x);
    int a = axis_of(ai("axis", -1), s.size());
    double eps = af("epsilon", 1e-5);
    int64_t inner = 1, outer = 1;
    for (size_t k = 0; k < s.size(); ++k) ((int)k < a ? outer : inner) *= s[k];
    int w = has_in(1) ? node(1) : -1, b = has_in(2) ? node(2) : -1;
    bool stats = false;
    for (size_t k = 1; k < n.outputs.size(); ++k) stats = stats || !n.outputs[k].empty();
    if (stats) {  // Mean and InvStdDev asked for too: the decomposed form, in f32
      if (ts_.dtypes[x] != DType::f32) unsupported("LayerNormalization's Mean/InvStdDev outputs for a non-float32 input");
      int x2 = reshape(x, {outer, inner});
      std::map<std::string, ir::AttrValue> ax{{"axes", std::vector<int64_t>{1}}, {"keepdims", true}};
      int mu = emit("mean", {x2}, ax);
      int d = emit("sub", {x2, mu});
      int var = emit("mean", {emit("square", {d})}, ax);
      int inv = emit("div", {scalar(1.0), emit("sqrt", {emit("add", {var, scalar(eps)})})});
      int y = reshape(emit("mul", {d, inv}), s);
      if (w >= 0) y = emit("mul", {y, w});
      if (b >= 0) y = emit("add", {y, b});
      Shape st(s.begin(), s.begin() + a);
      st.resize(s.size(), 1);
      set_node(0, y);
      if (n.outputs.size() > 1 && !n.outputs[1].empty()) set_node(1, reshape(mu, st));
      if (n.outputs.size() > 2 && !n.outputs[2].empty()) set_node(2, reshape(inv, st));
      return;
    }
    if (a == (int)s.size() - 1 && (w < 0 || shp(w) == Shape{inner}) && (b < 0 || shp(b) == Shape{inner})) {
      std::vector<int> ins{x};
      if (w >= 0) ins.push_back(w);
      if (b >= 0) {
        if (w < 0) ins.push_back(constant({inner}, std::vector<double>(inner, 1.0), DType::f32));
        ins.push_back(b);
      }
      return set_node(0, emit("layer_norm", ins, {{"eps", eps}}, out_name()));
    }
    int y = reshape(emit("layer_norm", {reshape(x, {outer, inner})}, {{"eps", eps}}), s);
    if (w >= 0) y = emit("mul", {y, w});
    if (b >= 0) y = emit("add", {y, b});
    return set_node(0, y);
  }
  if (op == "BatchNormalization") {
    if (ai("training_mode", 0)) unsupported("BatchNormalization attribute 'training_mode' = 1 (inference only)");
    for (size_t k = 1; k < n.outputs.size(); ++k)
      if (!n.outputs[k].empty()) unsupported("BatchNormalization's running mean/var outputs (training only)");
    int x = node(0);
    Shape s = shp(x);
    if (s.size() < 2) fail("X must have rank >= 2");
    int64_t C = s[1];
    double eps = af("epsilon", 1e-5);
    Shape cs{C};
    for (size_t k = 2; k < s.size(); ++k) cs.push_back(1);
    auto hs = host(1, L_.max_folded_elements), hb = host(2, L_.max_folded_elements), hm = host(3, L_.max_folded_elements),
         hv = host(4, L_.max_folded_elements);
    if (hs && hb && hm && hv) {  // fold into one scale and shift per channel
      const std::pair<const Host*, const char*> params[] = {{hs.get(), "scale"}, {hb.get(), "B"}, {hm.get(), "input_mean"}, {hv.get(), "input_var"}};
      for (const auto& [h, name] : params)
        if ((int64_t)h->size() != C)
          fail(std::string(name) + " has " + std::to_string(h->size()) + " elements; X has " + std::to_string(C) + " channels");
      std::vector<double> sc(C), sh(C);
      for (int64_t c = 0; c < C; ++c) {
        sc[c] = (double)(float)(hs->d(c) / std::sqrt(hv->d(c) + eps));
        sh[c] = hb->d(c) - hm->d(c) * sc[c];
      }
      int y = emit("mul", {x, constant(cs, sc, DType::f32)});
      return set_node(0, emit("add", {y, constant(cs, sh, DType::f32)}, {}, out_name()));
    }
    int sc = emit("div", {reshape(node(1), cs), emit("sqrt", {emit("add", {reshape(node(4), cs), scalar(eps)})})});
    int y = emit("mul", {emit("sub", {x, reshape(node(3), cs)}), sc});
    return set_node(0, emit("add", {y, reshape(node(2), cs)}, {}, out_name()));
  }
  if (op == "InstanceNormalization") {
    int x = node(0);
    Shape s = shp(x);
    if (s.size() < 3) fail("X must have rank >= 3");
    int64_t sp = 1;
    for (size_t k = 2; k < s.size(); ++k) sp *= s[k];
    int y = reshape(emit("layer_norm", {reshape(x, {s[0], s[1], sp})}, {{"eps", af("epsilon", 1e-5)}}), s);
    Shape cs{s[1]};
    for (size_t k = 2; k < s.size(); ++k) cs.push_back(1);
    y = emit("mul", {y, reshape(node(1), cs)});
    return set_node(0, emit("add", {y, reshape(node(2), cs)}, {}, out_name()));
  }

  // ---- shape ops (also keep host values host) ----
  auto keep_host_reshape = [&](const Shape& o) {
    Val& x = in(0);
    if (auto h = host(0, L_.max_folded_elements); h && shape_numel(o) <= L_.max_folded_elements) {
      set_host(0, o, x.et, *h);
      return;
    }
    set_node(0, emit("reshape", {node(0)}, {{"shape", std::vector<int64_t>(o.begin(), o.end())}}, out_name()));
  };
  if (op == "Reshape") {
    Shape s = in(0).shape;
    std::vector<int64_t> t = opset < 5 ? aints("shape").value_or(std::vector<int64_t>{}) : need_ints(1, "the target shape");
    bool allowzero = ai("allowzero", 0);
    int neg = -1;
    Shape given;  // the entries other than -1
    for (size_t k = 0; k < t.size(); ++k) {
      if (t[k] == 0 && !allowzero) {
        if (k >= s.size()) fail("shape entry 0 copies a dimension the input does not have");
        t[k] = s[k];
      }
      if (t[k] == -1) {
        if (neg >= 0) fail("more than one -1 in the shape");
        neg = (int)k;
      } else if (t[k] < 0) fail("negative dimension in the shape");
      else given.push_back(t[k]);
    }
    const int64_t known = shape_numel(given);
    if (known < 0) fail("the target shape " + shape_str(Shape(t.begin(), t.end())) + " has more elements than int64 can count");
    int64_t total = shape_numel(s);
    if (neg >= 0) {
      if (known == 0 || total % known) fail("cannot reshape " + shape_str(s) + " to " + shape_str(Shape(t.begin(), t.end())));
      t[neg] = total / known;
    }
    if (shape_numel(Shape(t.begin(), t.end())) != total) fail("cannot reshape " + shape_str(s) + " to " + shape_str(Shape(t.begin(), t.end())));
    return keep_host_reshape(Shape(t.begin(), t.end()));
  }
  if (op == "Flatten") {
    Shape s = in(0).shape;
    int64_t a = ai("axis", 1);
    if (a < 0) a += (int64_t)s.size();
    if (a < 0 || a > (int64_t)s.size()) fail("axis out of range");
    int64_t o = 1, i = 1;
    for (int64_t k = 0; k < (int64_t)s.size(); ++k) (k < a ? o : i) *= s[k];
    return keep_host_reshape({o, i});
  }
  if (op == "Squeeze" || op == "Unsqueeze") {
    Shape s = in(0).shape;
    std::optional<std::vector<int64_t>> axes;
    if (opset >= 13) { if (has_in(1)) axes = need_ints(1, "axes"); }
    else axes = aints("axes");
    Shape o;
    if (op == "Squeeze") {
      std::set<int> ax;
      if (axes) for (auto a : *axes) {
        int k = axis_of(a, s.size());
        if (s[k] != 1) fail("cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(s[k]));
        ax.insert(k);
      }
      for (size_t k = 0; k < s.size(); ++k)
        if (axes ? !ax.count((int)k) : s[k] != 1) o.push_back(s[k]);
    } else {
      if (!axes) fail("Unsqueeze needs axes");
      size_t r = s.size() + axes->size();
      std::set<int> ax;
      for (auto a : *axes) if (!ax.insert(axis_of(a, r)).second) fail("axes lists an axis twice");
      size_t j = 0;
      for (size_t k = 0; k < r; ++k) o.push_back(ax.count((int)k) ? 1 : s[j++]);
    }
    return keep_host_reshape(o);
  }
  if (op == "Transpose") {
    std::map<std::string, ir::AttrValue> a;
    if (auto p = aints("perm")) a["perm"] = *p;
    return set_node(0, emit("transpose", {node(0)}, a, out_name()));
  }
  if (op == "Concat") {
    std::vector<int> ins;
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (has_in(k) && shape_numel(in(k).shape) > 0) ins.push_back(node(k));
    if (ins.empty()) ins.push_back(node(0));
    int a = axis_of(ai("axis", 0), shp(ins[0]).size());
    if (ins.size() == 1) return set_node(0, ins[0]);
    return set_node(0, emit("concat", ins, {{"axis", (int64_t)a}}, out_name()));
  }
  if (op == "Expand") {
    auto dims = need_ints(1, "shape");
    bool ok;
    Shape o = bcast(in(0).shape, Shape(dims.begin(), dims.end()), ok);
    if (!ok) fail("cannot expand " + shape_str(in(0).shape) + " to " + shape_str(Shape(dims.begin(), dims.end())));
    int x = node(0);
    if (shp(x) == o) return set_node(0, x);
    return set_node(0, emit("broadcast_to", {x}, {{"shape", std::vector<int64_t>(o.begin(), o.end())}}, out_name()));
  }
  if (op == "Tile") {
    auto rep = need_ints(1, "repeats");
    int x = node(0);
    Shape s = shp(x);
    if (rep.size() != s.size()) fail("repeats has " + std::to_string(rep.size()) + " entries for rank " + std::to_string(s.size()));
    Shape a, b, o;
    for (size_t k = 0; k < s.size(); ++k) {
      if (rep[k] < 0) fail("negative repeat");
      a.push_back(1); a.push_back(s[k]);
      b.push_back(rep[k]); b.push_back(s[k]);
      o.push_back(rep[k] * s[k]);
    }
    int y = emit("broadcast_to", {reshape(x, a)}, {{"shape", std::vector<int64_t>(b.begin(), b.end())}});
    return set_node(0, emit("reshape", {y}, {{"shape", std::vector<int64_t>(o.begin(), o.end())}}, out_name()));
  }
  if (op == "Split") {
    int x = node(0);
    Shape s = shp(x);
    int a = axis_of(ai("axis", 0), s.size());
    std::vector<int64_t> parts;
    if (opset >= 13) { if (has_in(1)) parts = need_ints(1, "split"); }
    else parts = aints("split").value_or(std::vector<int64_t>{});
    size_t no = n.outputs.size();
    if (parts.empty()) {
      if (s[a] % (int64_t)no) fail("axis of size " + std::to_string(s[a]) + " does not split evenly into " + std::to_string(no));
      parts.assign(no, s[a] / (int64_t)no);
    }
    if (parts.size() != no) fail("split has " + std::to_string(parts.size()) + " entries for " + std::to_string(no) + " outputs");
    int64_t st = 0;
    for (size_t k = 0; k < no; ++k) {
      if (parts[k] < 0 || st + parts[k] > s[a]) fail("split sizes exceed the axis");
      if (!n.outputs[k].empty())
        set_node(k, emit("narrow", {x}, {{"axis", (int64_t)a}, {"start", st}, {"length", parts[k]}}, out_name(k)));
      st += parts[k];
    }
    if (st != s[a]) fail("split sizes sum to " + std::to_string(st) + ", the axis has " + std::to_string(s[a]));
    return;
  }
  if (op == "Slice") {
    auto [st, en, ax, sp] = slice_args();
    int x = node(0);
    Shape s = shp(x);
    bool unit = std::all_of(sp.begin(), sp.end(), [](int64_t p) { return p == 1; });
    if (!unit) {
      for (auto& a : ax) a = axis_of(a, s.size());
      return set_node(0, emit("slice", {x}, {{"starts", st}, {"ends", en}, {"axes", ax}, {"steps", sp}}, out_name()));
    }
    int y = x;
    for (size_t k = 0; k < st.size(); ++k) {
      int a = axis_of(ax[k], s.size());
      int64_t d = s[a], b = st[k], e = en[k];
      if (b < 0) b += d;
      if (e < 0) e += d;
      b = std::clamp<int64_t>(b, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
      int64_t len = std::max<int64_t>(0, e - b);
      if (b == 0 && len == d) continue;
      y = emit("narrow", {y}, {{"axis", (int64_t)a}, {"start", b}, {"length", len}});
    }
    if (y == x) return set_node(0, x);
    return set_node(0, y);
  }
  if (op == "Gather") {
    int64_t a0 = ai("axis", 0);
    Val& d = in(0);
    int a = axis_of(a0, d.shape.size());
    auto hi = host(1, L_.max_folded_elements);
    if (hi && hi->size() == 1) {  // one index: a narrow, then drop (or keep) the axis
      int64_t t = hi->n(0), D = d.shape[a];
      if (t < 0) t += D;
      if (t < 0 || t >= D) fail("index " + std::to_string(hi->n(0)) + " is out of range for an axis of size " + std::to_string(D));
      int y = emit("narrow", {node(0)}, {{"axis", (int64_t)a}, {"start", t}, {"length", (int64_t)1}});
      Shape o;
      for (size_t k = 0; k < d.shape.size(); ++k) {
        if ((int)k == a) { for (auto q : in(1).shape) o.push_back(q); continue; }
        o.push_back(d.shape[k]);
      }
      return set_node(0, emit("reshape", {y}, {{"shape", std::vector<int64_t>(o.begin(), o.end())}}, out_name()));
    }
    if (a == 0 && d.shape.size() == 2 && is_integer(to_dtype(in(1).et, where())))
      return set_node(0, emit("embedding", {node(0), node(1)}, {}, out_name()));
    return set_node(0, emit("gather", {node(0), node(1)}, {{"axis", (int64_t)a}}, out_name()));
  }
  if (op == "GatherND") {
    // Each index tuple becomes one row number into data viewed as [batch * rows, slice...].
    int data = node(0), idx = node(1);
    const Shape ds = shp(data), is = shp(idx);
    if (!is_integer(ts_.dtypes[idx])) fail("indices must be integers");
    if (is.empty()) fail("indices must have rank >= 1");
    const int64_t q = (int64_t)is.size(), r = (int64_t)ds.size(), k = is.back(), b = ai("batch_dims", 0);
    if (b < 0 || b >= std::min(q, r)) fail("batch_dims " + std::to_string(b) + " must be below the ranks of data and indices");
    if (k < 1 || b + k > r)
      fail("the last dimension of indices (" + std::to_string(k) + ") must be between 1 and the rank of data less batch_dims (" + std::to_string(r - b) + ")");
    int64_t B = 1, rows = 1, nT = 1;
    for (int64_t j = 0; j < b; ++j) {
      if (ds[j] != is[j]) fail("batch dimension " + std::to_string(j) + " is " + std::to_string(ds[j]) + " in data and " + std::to_string(is[j]) + " in indices");
      B *= ds[j];
    }
    for (int64_t j = b; j < b + k; ++j) rows *= ds[j];
    for (int64_t j = b; j < q - 1; ++j) nT *= is[j];
    int lin = reshape(tuple_rows(reshape(cast(idx, DType::i64), {B * nT, k}), Shape(ds.begin() + b, ds.begin() + b + k)), {B, nT});
    if (b > 0) {
      std::vector<double> base(B);
      for (int64_t t = 0; t < B; ++t) base[t] = (double)(t * rows);
      lin = emit("add", {lin, constant({B, 1}, base, DType::i64)});
    }
    Shape flat{B * rows}, out(is.begin(), is.end() - 1);
    flat.insert(flat.end(), ds.begin() + b + k, ds.end());
    out.insert(out.end(), ds.begin() + b + k, ds.end());
    int y = emit("gather", {reshape(data, flat), reshape(lin, {B * nT})}, {{"axis", (int64_t)0}});
    return set_node(0, reshape_out(y, out));
  }
  if (op == "ScatterElements" || op == "Scatter") {
    // out = data, then out[c with c[axis] = indices[c]] (op)= updates[c] for every position c of
    // indices. Along the axis, each output position p is matched against the J index entries
    // of its line: a [.., J, P, ..] table; none takes the last entry naming p (as ONNX Runtime
    // applies them in order), add and mul fold all of them in.
    int data = node(0), idx = node(1), upd = node(2);
    const Shape ds = shp(data), is = shp(idx), us = shp(upd);
    const int r = (int)ds.size();
    if (r == 0) fail("data must have rank >= 1");
    if (!is_integer(ts_.dtypes[idx])) fail("indices must be integers");
    if (is.size() != ds.size()) fail("indices " + shape_str(is) + " must have the rank of data " + shape_str(ds));
    if (us != is) fail("updates have shape " + shape_str(us) + ", expected the indices' " + shape_str(is));
    if (ts_.dtypes[upd] != ts_.dtypes[data]) fail("updates and data differ in element type");
    const int a = axis_of(ai("axis", 0), r);
    for (int d = 0; d < r; ++d)
      if (d != a && is[d] != ds[d])
        unsupported("ScatterElements whose indices cover part of data across the axis (indices " + shape_str(is) + ", data " +
                    shape_str(ds) + ", axis " + std::to_string(a) + ")");
    const std::string red = op == "Scatter" ? "none" : as("reduction", "none");
    if (red != "none" && red != "add" && red != "mul") unsupported("ScatterElements reduction \"" + red + "\"");
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < a; ++d) outer *= ds[d];
    for (int d = a + 1; d < r; ++d) inner *= ds[d];
    const int64_t J = is[a], P = ds[a];
    if (J == 0 || shape_numel(ds) == 0) return set_node(0, reshape_out(data, ds));
    if ((double)outer * J * P * inner > (double)(int64_t(1) << 26))
      unsupported("ScatterElements with a match table of " + std::to_string(outer * J * P * inner) + " entries (more than 2^26)");
    // Positions: each index range-checked and wrapped through a gather on 0..P-1.
    int at = emit("gather", {positions({P}), reshape(cast(idx, DType::i64), {outer * J * inner})}, {{"axis", (int64_t)0}});
    int hit = emit("equal", {reshape(at, {outer, J, 1, inner}), positions({1, 1, P, 1})});  // [outer, J, P, inner]
    int d3 = reshape(data, {outer, P, inner});
    int y;
    if (red == "none") {
      auto [who, any] = last_match(hit);  // [outer, P, inner]
      int picked = emit("gather_elements", {reshape(upd, {outer, J, inner}), who}, {{"axis", (int64_t)1}});
      y = emit("where", {any, picked, d3});
    } else {
      y = fold_matches(d3, hit, reshape(upd, {outer, J, 1, inner}), red == "add");
    }
    return set_node(0, reshape_out(y, ds));
  }
  if (op == "ScatterND") {
    // Values known only at run time (a KV cache written at a position): each row of data viewed
    // as [rows, slice...] takes the slice of the last update tuple that names it, else keeps its
    // own. The row-by-tuple match table is rows x tuples booleans.
    int data = node(0), idx = node(1), upd = node(2);
    const Shape ds = shp(data), is = shp(idx);
    const int64_t k = scatter_nd_depth(ds, is, shp(upd));
    if (!is_integer(ts_.dtypes[idx])) fail("indices must be integers");
    if (ts_.dtypes[upd] != ts_.dtypes[data]) fail("updates and data differ in element type");
    const std::string red = as("reduction", "none");
    if (red != "none" && red != "add" && red != "mul")
      unsupported("ScatterND reduction \"" + red + "\" on values known only at run time (it is folded when data, indices "
                  "and updates are all known when the model is loaded)");
    int64_t rows = 1, T = 1, sl = 1;
    for (int64_t j = 0; j < k; ++j) rows *= ds[j];
    for (size_t j = 0; j + 1 < is.size(); ++j) T *= is[j];
    for (size_t j = k; j < ds.size(); ++j) sl *= ds[j];
    if (T == 0 || rows == 0) return set_node(0, reshape_out(data, ds));
    // none: a rows x tuples match table; add and mul also spread the slices over it.
    const double table = (double)rows * (double)T * (red == "none" ? 1.0 : (double)sl);
    if (table > (double)(int64_t(1) << 26))
      unsupported("ScatterND on values known only at run time with " + std::to_string(rows) + " rows and " + std::to_string(T) +
                  " update tuples (the match table would exceed 2^26 entries)");
    int lin = tuple_rows(reshape(cast(idx, DType::i64), {T, k}), Shape(ds.begin(), ds.begin() + k));
    int hit = emit("equal", {positions({rows, 1}), reshape(lin, {1, T})});  // [rows, T]
    if (red != "none")  // data + sum (or * prod) over the tuples naming each row
      return set_node(0, reshape_out(fold_matches(reshape(data, {rows, sl}), reshape(hit, {rows, T, 1}), reshape(upd, {1, T, sl}), red == "add"), ds));
    auto [who, any] = last_match(hit);
    Shape slice(ds.begin() + k, ds.end()), flat{rows}, upd_rows{T}, mask(1 + slice.size(), 1);
    flat.insert(flat.end(), slice.begin(), slice.end());
    upd_rows.insert(upd_rows.end(), slice.begin(), slice.end());
    mask[0] = rows;
    int picked = emit("gather", {reshape(upd, upd_rows), who}, {{"axis", (int64_t)0}});
    int y = emit("where", {reshape(any, mask), picked, reshape(data, flat)});
    return set_node(0, reshape_out(y, ds));
  }
  if (op == "GatherElements") {
    int a = axis_of(ai("axis", 0), rank(0));
    return set_node(0, emit("gather_elements", {node(0), node(1)}, {{"axis", (int64_t)a}}, out_name()));
  }
  if (op == "Pad") {
    std::string mode = as("mode", "constant");
    if (mode != "constant" && mode != "reflect" && mode != "edge") unsupported("Pad attribute 'mode' = \"" + mode + "\"");
    std::vector<int64_t> pads;
    double value = 0;
    if (opset < 11) {
      pads = aints("pads").value_or(std::vector<int64_t>{});
      value = af("value", 0);
    } else {
      pads = need_ints(1, "pads");
      if (has_in(2)) value = need_scalar(2, "constant_value")->d(0);
      if (has_in(3)) unsupported("Pad with an 'axes' input");
    }
    if (pads.size() != 2 * rank(0)) fail("pads has " + std::to_string(pads.size()) + " entries for rank " + std::to_string(rank(0)));
    if (std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; })) return set_node(0, node(0));
    return set_node(0, emit("pad", {node(0)}, {{"pads", pads}, {"mode", mode}, {"value", value}}, out_name()));
  }
  if (op == "Trilu") {
    int64_t k = has_in(1) ? need_ints(1, "k").at(0) : 0;
    return set_node(0, emit("trilu", {node(0)}, {{"upper", (bool)ai("upper", 1)}, {"k", k}}, out_name()));
  }

  // ---- convolution family ----
  if (op == "Conv" || op == "ConvTranspose" || op == "MaxPool" || op == "AveragePool") {
    int x = node(0);
    Shape s = shp(x);
    size_t sd = s.size() >= 2 ? s.size() - 2 : 0;
    if (sd != 1 && sd != 2) unsupported(op + " on " + std::to_string(sd) + "-D data (1-D and 2-D are supported)");
    if (op == "MaxPool" && n.outputs.size() > 1 && !n.outputs[1].empty()) unsupported("MaxPool's Indices output");
    if (ai("storage_order", 0)) unsupported("MaxPool attribute 'storage_order' = 1");
    bool conv = op == "Conv" || op == "ConvTranspose";
    int w = conv ? node(1) : -1;
    Shape ksz;
    if (conv) { Shape ws = shp(w); ksz.assign(ws.begin() + 2, ws.end()); }
    else ksz = Shape(aints("kernel_shape").value_or(std::vector<int64_t>{}));
    if (auto k = aints("kernel_shape")) ksz = Shape(k->begin(), k->end());
    if (ksz.size() != sd) fail("kernel_shape has " + std::to_string(ksz.size()) + " entries for " + std::to_string(sd) + "-D data");
    auto get = [&](const char* nm, int64_t def, size_t cnt) {
      auto v = aints(nm).value_or(std::vector<int64_t>(cnt, def));
      if (v.size() != cnt) fail(std::string("attribute '") + nm + "' has " + std::to_string(v.size()) + " entries, expected " + std::to_string(cnt));
      return v;
    };
    auto strides = get("strides", 1, sd), dil = get("dilations", 1, sd), pads = get("pads", 0, 2 * sd);
    std::string ap = as("auto_pad", "NOTSET");
    if (ap == "VALID") std::fill(pads.begin(), pads.end(), 0);
    else if ((ap == "SAME_UPPER" || ap == "SAME_LOWER") && op != "ConvTranspose") {
      for (size_t k = 0; k < sd; ++k) {
        int64_t in_d = s[2 + k], out_d = (in_d + strides[k] - 1) / strides[k];
        int64_t total = std::max<int64_t>(0, (out_d - 1) * strides[k] + (ksz[k] - 1) * dil[k] + 1 - in_d);
        pads[k] = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
        pads[k + sd] = total - pads[k];
      }
    } else if (ap != "NOTSET" && !(op == "ConvTranspose" && (ap == "SAME_UPPER" || ap == "SAME_LOWER"))) {
      unsupported(op + " attribute 'auto_pad' = \"" + ap + "\"");
    }
    std::vector<int64_t> op_pad;
    if (op == "ConvTranspose") {
      op_pad = get("output_padding", 0, sd);
      // output_shape or auto_pad SAME_*: pads generated as the ONNX spec says; a negative end
      // pad (an output longer than the full transposed convolution) is output padding.
      auto osh = aints("output_shape");
      if (osh || ap == "SAME_UPPER" || ap == "SAME_LOWER") {
        std::vector<int64_t> want(sd);
        if (osh && osh->size() != sd && osh->size() != sd + 2)
          fail("attribute 'output_shape' has " + std::to_string(osh->size()) + " entries for " + std::to_string(sd) + "-D data");
        for (size_t k = 0; k < sd; ++k) {
          want[k] = osh ? (*osh)[osh->size() - sd + k] : s[2 + k] * strides[k];
          int64_t full = strides[k] * (s[2 + k] - 1) + op_pad[k] + (ksz[k] - 1) * dil[k] + 1, total = full - want[k];
          int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // floor(total / 2)
          int64_t start = ap == "SAME_UPPER" ? half : total - half, end = total - start;
          if (end < 0) {
            op_pad[k] -= end;
            end = 0;
          }
          if (start < 0 || want[k] <= 0)
            unsupported("ConvTranspose attribute 'output_shape' = " + std::to_string(want[k]) + " on axis " + std::to_string(k) +
                        " (the transposed convolution gives " + std::to_string(full) + ")");
          pads[k] = start;
          pads[k + sd] = end;
        }
      }
    }
    // 1-D data as 2-D with H = 1.
    if (sd == 1) {
      x = reshape(x, {s[0], s[1], 1, s[2]});
      if (conv) { Shape ws = shp(w); w = reshape(w, {ws[0], ws[1], 1, ws[2]}); }
      ksz.insert(ksz.begin(), 1);
      strides.insert(strides.begin(), 1);
      dil.insert(dil.begin(), 1);
      pads = {0, pads[0], 0, pads[1]};
    }
    std::vector<int64_t> p4{pads[0], pads[1], pads[2], pads[3]};  // [top, left, bottom, right]
    int y;
    std::string id = sd == 1 ? "" : out_name();
    if (op == "Conv") {
      std::vector<int> ins{x, w};
      if (has_in(2)) ins.push_back(node(2));
      y = emit("conv2d", ins, {{"strides", strides}, {"pads", p4}, {"dilations", dil}, {"groups", ai("group", 1)}}, id);
    } else if (op == "ConvTranspose") {
      if (sd == 1) op_pad.insert(op_pad.begin(), 0);
      std::vector<int> ins{x, w};
      if (has_in(2)) ins.push_back(node(2));
      y = emit("conv_transpose2d", ins, {{"strides", strides}, {"pads", p4}, {"dilations", dil}, {"groups", ai("group", 1)}, {"output_padding", op_pad}}, id);
    } else if (op == "MaxPool") {
      y = emit("max_pool2d", {x}, {{"kernel", std::vector<int64_t>(ksz.begin(), ksz.end())}, {"strides", strides}, {"pads", p4}, {"dilations", dil}, {"ceil_mode", (bool)ai("ceil_mode", 0)}}, id);
    } else {
      if (std::any_of(dil.begin(), dil.end(), [](int64_t d) { return d != 1; })) unsupported("AveragePool attribute 'dilations' != 1");
      y = emit("avg_pool2d", {x}, {{"kernel", std::vector<int64_t>(ksz.begin(), ksz.end())}, {"strides", strides}, {"pads", p4}, {"ceil_mode", (bool)ai("ceil_mode", 0)}, {"count_include_pad", (bool)ai("count_include_pad", 0)}}, id);
    }
    if (sd == 1) {
      Shape o = shp(y);
      y = emit("reshape", {y}, {{"shape", std::vector<int64_t>{o[0], o[1], o[3]}}}, out_name());
    }
    return set_node(0, y);
  }
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
    std::vector<int64_t> axes;
    for (size_t k = 2; k < rank(0); ++k) axes.push_back((int64_t)k);
    return set_node(0, reduce_node(op == "GlobalAveragePool" ? "mean" : "max", node(0), axes, true, out_name()));
  }
  if (op == "Resize" || op == "Upsample") {
    std::string mode = as("mode", "nearest");
    if (mode != "nearest" && mode != "linear") unsupported(op + " attribute 'mode' = \"" + mode + "\"");
    std::string ctm = as("coordinate_transformation_mode", op == "Upsample" || opset < 11 ? "asymmetric" : "half_pixel");
    static const std::set<std::string> ctms = {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn"};
    if (!ctms.count(ctm)) unsupported(op + " attribute 'coordinate_transformation_mode' = \"" + ctm + "\"");
    std::string nm = as("nearest_mode", opset < 11 ? "floor" : "round_prefer_floor");
    if (op == "Upsample" || opset < 11) nm = "floor";
    if (ai("exclude_outside", 0)) unsupported(op + " attribute 'exclude_outside' = 1");
    Shape s = in(0).shape;
    std::vector<double> scales;
    std::vector<int64_t> sizes;
    size_t si = op == "Upsample" ? 1 : opset < 11 ? 1 : 2, zi = 3;
    if (op == "Upsample" && opset < 9) { for (double v : attr("scales") ? attr("scales")->floats : std::vector<double>{}) scales.push_back(v); }
    else if (has_in(si) && shape_numel(in(si).shape) > 0) { auto h = need_host(si, "scales"); for (size_t k = 0; k < h->size(); ++k) scales.push_back(h->d(k)); }
    if (op == "Resize" && opset >= 11 && has_in(zi) && shape_numel(in(zi).shape) > 0) sizes = need_ints(zi, "sizes");
    if (sizes.empty()) {
      if (scales.size() != s.size()) fail("scales has " + std::to_string(scales.size()) + " entries for rank " + std::to_string(s.size()));
      for (size_t k = 0; k < s.size(); ++k) sizes.push_back(sat_i64(std::floor((double)s[k] * (double)(float)scales[k])));
    } else {
      if (sizes.size() != s.size()) fail("sizes has the wrong length");
      scales.clear();
    }
    std::map<std::string, ir::AttrValue> a{{"sizes", sizes}, {"mode", mode}, {"coordinate_transformation_mode", ctm}, {"nearest_mode", nm}};
    if (!scales.empty()) set_floats_attr(a, "resize", "scales", scales);
    return set_node(0, emit("resize", {node(0)}, a, out_name()));
  }

  unsupported("operator " + op + " (see docs/onnx.md for the supported set)");
}

void Importer::finish_outputs() {
  cur_ = nullptr;
  std::set<int> used;
  for (const auto& o : m_.outputs()) {
    auto it = vals_.find(o.name);
    if (it == vals_.end() || !it->second.defined) fail("graph output '" + o.name + "' is not produced by any node");
    Val& v = it->second;
    int idx = materialize(v, o.name);
    if (g_->nodes[idx].id != o.name || used.count(idx)) {
      // An alias (Identity, a folded value materialised under another name, a repeated output):
      // give the output its own node under its ONNX name.
      if (g_->index.count(o.name)) {
        // the name belongs to another node: rename that node out of the way first
        int other = g_->index[o.name];
        std::string nid = fresh(o.name + "/alias");
        g_->index.erase(o.name);
        g_->nodes[other].id = nid;
        g_->index[nid] = other;
        if (params_.count(o.name)) { params_[nid] = params_[o.name]; params_.erase(o.name); g_->nodes[other].param_name = nid; }
      }
      std::map<std::string, ir::AttrValue> a{{"shape", std::vector<int64_t>(ts_.shapes[idx].begin(), ts_.shapes[idx].end())}};
      ir::Node nd;
      nd.id = o.name;
      nd.op = ir::Op::Reshape;
      nd.inputs = {idx};
      nd.attrs.values["shape"] = std::get<std::vector<int64_t>>(a["shape"]);
      int k = (int)g_->nodes.size();
      g_->index[nd.id] = k;
      g_->nodes.push_back(std::move(nd));
      ts_.shapes.push_back(ts_.shapes[idx]);
      ts_.dtypes.push_back(ts_.dtypes[idx]);
      idx = k;
    }
    used.insert(idx);
    g_->outputs.push_back(idx);
  }
}

std::shared_ptr<Specialized> Importer::run() {
  g_ = std::make_shared<ir::Graph>();
  g_->file = m_.file();
  g_->name = m_.producer().empty() ? "onnx" : m_.producer();
  // Initializers first (as not-yet-materialised values), then inputs (which may override them).
  for (const auto& [name, td] : m_.initializers()) {
    Val v;
    v.defined = true;
    v.init = td;
    v.shape = td->shape;
    v.et = td->elem_type;
    vals_[name] = v;
  }
  // The given inputs bind their symbolic dimensions first, whatever their order in the model.
  for (const auto& vi : m_.inputs()) {
    auto it = in_shapes_.find(vi.name);
    if (it == in_shapes_.end() || !vi.has_shape) continue;
    const Shape& s = it->second;
    if (s.size() != vi.dims.size())
      throw InputError(m_.file() + ": input '" + vi.name + "' has rank " + std::to_string(vi.dims.size()) + ", got a tensor of shape " + shape_str(s));
    for (size_t k = 0; k < s.size(); ++k) {
      const auto& d = vi.dims[k];
      if (d.symbol.empty()) {
        if (d.value != s[k])
          throw InputError(m_.file() + ": input '" + vi.name + "' needs dimension " + std::to_string(k) + " = " + std::to_string(d.value) + ", got a tensor of shape " + shape_str(s));
      } else {
        auto [p, fresh] = dims_.emplace(d.symbol, s[k]);
        if (!fresh && p->second != s[k])
          throw InputError(m_.file() + ": input '" + vi.name + "': dimension '" + d.symbol + "' is " + std::to_string(s[k]) + " here but " + std::to_string(p->second) + " elsewhere");
      }
    }
  }
  // Every dimension still unknown is named in one error (ir::bind_dims), so a model with
  // several (batch, sequence, past length) needs one more try, not one per dimension.
  std::vector<ir::Dim> unbound;
  std::string names;
  int n_unbound = 0;
  for (const auto& vi : m_.inputs()) {
    if (in_shapes_.count(vi.name) || m_.is_default_input(vi.name)) continue;
    if (std::none_of(vi.dims.begin(), vi.dims.end(), [&](const ir::Dim& d) { return !d.symbol.empty() && !dims_.count(d.symbol); }))
      continue;
    unbound.insert(unbound.end(), vi.dims.begin(), vi.dims.end());
    names += (n_unbound++ ? ", '" : "'") + vi.name + "'";
  }
  if (n_unbound) ir::bind_dims(unbound, dims_, m_.file() + (n_unbound > 1 ? ": inputs " : ": input ") + names);
  for (const auto& vi : m_.inputs()) {
    auto it = in_shapes_.find(vi.name);
    bool is_default = m_.is_default_input(vi.name);
    if (is_default && it == in_shapes_.end()) continue;  // the initializer's value stands
    Shape s;
    if (it != in_shapes_.end()) {
      s = it->second;
    } else {
      s = ir::bind_dims(vi.dims, dims_, m_.file());  // every symbol is bound by now
    }
    DType dt = to_dtype(vi.elem_type, m_.file() + ": input '" + vi.name + "'");
    int idx = add_leaf(ir::Op::Input, vi.name, s, dt);
    if (g_->nodes[idx].id != vi.name) throw InputError(m_.file() + ": input name '" + vi.name + "' is used twice");
    Val v;
    v.defined = true;
    v.node = idx;
    v.shape = s;
    v.et = vi.elem_type;
    if (auto iv = in_values_.find(vi.name); iv != in_values_.end() && iv->second.numel() <= Model::kMaxValueBoundElements &&
                                            iv->second.shape() == s)
      v.input_value = host_from_tensor(iv->second);
    vals_[vi.name] = v;
  }
  for (const auto& n : m_.nodes()) {
    cur_ = &n;
    for (size_t k = 0; k < n.inputs.size(); ++k) if (has_in(k)) in(k);  // defined before use (cycles, order)
    if (!try_fold()) map_node();
    for (const auto& o : n.outputs)
      if (!o.empty() && !vals_.count(o)) {
        // an optional output this mapping does not produce: poison it so a use is reported
      }
  }
  finish_outputs();
  auto sp = std::make_shared<Specialized>();
  sp->graph = g_;
  sp->params = std::move(params_);
  sp->dims = dims_;
  sp->value_deps = value_deps_;
  return sp;
}

std::shared_ptr<const Specialized> Model::specialize(const std::map<std::string, Shape>& input_shapes,
                                                     const std::map<std::string, int64_t>& dims,
                                                     const std::map<std::string, Tensor>& values) {
  std::string key;
  for (const auto& [k, s] : input_shapes) key += k + "=" + shape_str(s) + ";";
  key += "|";
  for (const auto& [k, v] : dims) key += k + "=" + std::to_string(v) + ";";
  std::lock_guard<std::mutex> lock(mu_);
  auto value_matches = [&](const Specialized& sp) {
    for (const auto& [name, want] : sp.value_deps) {
      auto v = values.find(name);
      if (v == values.end()) return false;
      auto h = host_from_tensor(v->second);
      if (h->size() != want.size()) return false;
      for (size_t k = 0; k < want.size(); ++k)
        if (h->d(k) != want[k]) return false;
    }
    return true;
  };
  if (auto it = cache_.find(key); it != cache_.end())
    for (const auto& sp : it->second)
      if (value_matches(*sp)) return sp;
  for (const auto& [name, s] : input_shapes) {
    bool known = false;
    for (const auto& vi : inputs_) known = known || vi.name == name;
    if (!known) {
      std::string names;
      for (const auto& vi : inputs_) if (!is_default_input(vi.name)) names += (names.empty() ? "" : ", ") + vi.name;
      throw InputError(file_ + ": the model has no input '" + name + "' (its inputs: " + names + ")");
    }
  }
  Importer imp(*this, input_shapes, dims, values);
  std::shared_ptr<const Specialized> sp = imp.run();
  cache_[key].push_back(sp);
  specializations_++;
  return sp;
}

}  // namespace rlx::onnx
