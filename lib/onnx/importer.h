#pragma once
// The ONNX importer's shared machinery (internal to lib/onnx): the state of one
// specialisation, the helpers every operator mapping uses (inputs, attributes, host values,
// emitting registry ops), and the operator table the mappings register into.
//
// Operators live in one file per family (elementwise.cpp, layout.cpp, nn.cpp, ...). Each file
// defines a struct deriving from Importer whose member functions map one operator (map_X) or
// fold it on the host (fold_X), and one function `<family>_ops` that appends its OpDef rows;
// op_table() (importer.cpp) calls every family's function once. See docs/onnx.md.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "ir/loader.h"
#include "ir/op_registry.h"
#include "onnx/model.h"

namespace rlx::onnx {

inline bool float_et(int et) { return et == kFloat || et == kDouble || et == kFloat16 || et == kBfloat16; }

inline int dtype_et(DType d) { return dtype_traits(d).onnx; }

// double -> int64, truncating, saturating, NaN -> 0: no undefined float-to-int conversion.
inline int64_t sat_i64(double x) {
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
  // The value when it follows from small graph inputs given by value (the input itself, or
  // host arithmetic over it: Equal(sr, 16000)), used only where a constant is required; the
  // specialisation then depends on those inputs' values (`value_from`, by input name).
  std::shared_ptr<const Host> input_value;
  std::set<std::string> value_from;
  // A sequence (ONNX sequence type): its elements, each a tensor value, known at specialisation
  // (a sequence's length is part of the specialisation, as a shape is); `et` is their element type.
  std::shared_ptr<const std::vector<Val>> seq;
  // An optional: `none` when it holds no value (then `inner` says whether it would hold a tensor
  // or a sequence); otherwise the other fields describe its value.
  bool optional = false, none = false;
  ValueKind inner = ValueKind::Tensor;
  bool is_tensor() const { return !seq && !none; }
  const char* kind_name() const { return none ? "an optional without a value" : seq ? "a sequence" : optional ? "an optional" : "a tensor"; }
};

// An initializer as a not-yet-materialised value.
inline Val init_val(const std::shared_ptr<TensorData>& td) {
  Val v;
  v.defined = true;
  v.init = td;
  v.shape = td->shape;
  v.et = td->elem_type;
  return v;
}

// The values of a host tensor (a given input) as exact host values.
inline std::vector<int64_t> strides_of(const Shape& s) { return contiguous_strides(s); }

// The block [start, start + len) along `axis` of a host value of shape s (Split's and
// SplitToSequence's folds of shape vectors).
inline Host host_slice(const Host& x, const Shape& s, size_t axis, int64_t start, int64_t len) {
  int64_t outer = 1, inner = 1;
  for (size_t k = 0; k < axis; ++k) outer *= s[k];
  for (size_t k = axis + 1; k < s.size(); ++k) inner *= s[k];
  Host h;
  h.is_float = x.is_float;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < len * inner; ++j) {
      const int64_t src = (o * s[axis] + start) * inner + j;
      if (h.is_float) h.f.push_back(x.f[src]);
      else h.i.push_back(x.i[src]);
    }
  return h;
}

inline std::shared_ptr<const Host> host_from_tensor(const Tensor& t) {
  auto h = std::make_shared<Host>();
  h->is_float = is_float(t.dtype());
  for (int64_t k = 0; k < t.numel(); ++k) {
    if (h->is_float) h->f.push_back(t.at(k));
    else h->i.push_back(t.int_at(k));
  }
  return h;
}

class Unsupported : public InputError {
 public:
  using InputError::InputError;
};
// Unsupported because a value the mapping needs as a constant (a shape, sizes, starts) is data
// here: a run-time control body may be imported when it runs, with that value known (control.cpp).
class NeedsValue : public Unsupported {
 public:
  using Unsupported::Unsupported;
};

// Everything one specialisation builds: the graph, its parameters, and the value of every
// ONNX name seen so far. An Importer (or a family's mapping struct) is a view onto it.
struct ImportState {
  ImportState(Model& m, const std::map<std::string, Shape>& shapes, const std::map<std::string, int64_t>& dims,
              const std::map<std::string, Tensor>& values)
      : m(m), in_shapes(shapes), dims(dims), in_values(values) {}
  Model& m;
  const std::map<std::string, Shape>& in_shapes;
  std::map<std::string, int64_t> dims;
  const std::map<std::string, Tensor>& in_values;
  std::map<std::string, std::vector<double>> value_deps;
  std::shared_ptr<ir::Graph> g;
  ir::TypedShapes ts;
  std::map<std::string, Tensor> params;
  std::map<std::string, Val> vals;
  const NodeDef* cur = nullptr;  // the node being imported
  int fresh = 0;
};

class Importer {
 public:
  explicit Importer(ImportState& s)
      : st_(s), m_(s.m), L_(s.m.limits()), in_shapes_(s.in_shapes), dims_(s.dims), in_values_(s.in_values),
        value_deps_(s.value_deps), g_(s.g), ts_(s.ts), params_(s.params), vals_(s.vals), cur_(s.cur), fresh_(s.fresh) {}

  // Imports every node (through op_table()) and returns the specialised graph.
  std::shared_ptr<Specialized> run();

  ImportState& st_;
  Model& m_;
  const Limits& L_;
  const std::map<std::string, Shape>& in_shapes_;
  std::map<std::string, int64_t>& dims_;
  const std::map<std::string, Tensor>& in_values_;
  std::map<std::string, std::vector<double>>& value_deps_;
  std::shared_ptr<ir::Graph>& g_;
  ir::TypedShapes& ts_;
  std::map<std::string, Tensor>& params_;
  std::map<std::string, Val>& vals_;
  const NodeDef*& cur_;
  int& fresh_;

  // ---------- messages ----------
  std::string where() const {
    if (!cur_) return m_.file();
    return m_.file() + ": node " + (cur_->name.empty() ? "#" + std::to_string(cur_->index) : "'" + cur_->name + "'") + " (" +
           cur_->op_type + ")";
  }
  [[noreturn]] void fail(const std::string& what) const { throw InputError(where() + ": " + what); }
  [[noreturn]] void unsupported(const std::string& what) const { throw Unsupported(where() + ": unsupported: " + what); }

  // ---------- attributes: the binder ----------
  // A mapping reads an attribute by name and the type ONNX declares for it; one of another
  // type (Softmax's axis as a string or a float) is refused, exit 2, naming the node, the
  // operator and the attribute, rather than read as the default. (An attribute given twice on
  // a node is refused when the file is parsed.) ai, af, as and aints are attr() for int,
  // float, string and ints.
  enum AttrType : int { kAttrFloat = 1, kAttrInt = 2, kAttrString = 3, kAttrTensor = 4, kAttrGraph = 5,
                        kAttrFloats = 6, kAttrInts = 7, kAttrStrings = 8, kAttrTypeProto = 13 };
  static const char* attr_type_name(int t);
  // The attribute `n` of the current node, or null; of another type than `type`: refused.
  const Attribute* attr(const char* n, AttrType type) const;
  int64_t ai(const char* n, int64_t def) const {
    auto a = attr(n, kAttrInt);
    return a ? a->i : def;
  }
  double af(const char* n, double def) const {
    auto a = attr(n, kAttrFloat);
    return a ? a->f : def;
  }
  std::string as(const char* n, const std::string& def) const {
    auto a = attr(n, kAttrString);
    return a ? a->s : def;
  }
  std::optional<std::vector<int64_t>> aints(const char* n) const {
    auto a = attr(n, kAttrInts);
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

  std::shared_ptr<const Host> host_of(Val& v, int64_t limit);
  // The host value of input k (a constant, an initializer or folded shape arithmetic), or null.
  std::shared_ptr<const Host> host(size_t k, int64_t limit = int64_t(1) << 16) {
    if (!has_in(k)) return nullptr;
    return host_of(in(k), limit);
  }
  std::shared_ptr<const Host> need_host(size_t k, const char* what) {
    if (!has_in(k)) fail(std::string(what) + " (input " + std::to_string(k) + ") is required");
    auto h = value_of(k);
    if (!h)
      throw NeedsValue(where() + ": unsupported: " + what + " (input " + std::to_string(k) + " '" + cur_->inputs[k] +
                       "') must be a constant or computable from shapes");
    return h;
  }
  // need_host for an input the operator defines as a scalar: exactly one element.
  std::shared_ptr<const Host> need_scalar(size_t k, const char* what) {
    auto h = need_host(k, what);
    if (h->size() != 1) fail(std::string(what) + " (input " + std::to_string(k) + ") must have one element, it has " + std::to_string(h->size()));
    return h;
  }
  // The known value of input k: folded/constant, or a small graph input bound by value.
  std::shared_ptr<const Host> value_of(size_t k);
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
  void set_host(size_t k, Shape s, int et, Host h) { set_out(k, host_val(std::move(s), et, std::move(h))); }
  // A value known on the host, its numbers held as the element type et holds them.
  Val host_val(Shape s, int et, Host h);

  std::string fresh(const std::string& base) {
    std::string id = base;
    while (g_->index.count(id)) id = base + "/rlx" + std::to_string(fresh_++);
    return id;
  }
  std::string out_name(size_t k = 0) const {
    return k < cur_->outputs.size() && !cur_->outputs[k].empty() ? cur_->outputs[k] : cur_->name + "/out";
  }

  int add_leaf(ir::Op op, const std::string& id_base, const Shape& s, DType dt);
  // A node with several outputs (control flow, host steps), named after the ONNX node, with the
  // registry's defaults for the attributes it lacks; its outputs are read through result nodes
  // (add_result).
  int add_multi(ir::Op op, std::vector<int> inputs, std::map<std::string, ir::AttrValue> attrs,
                std::vector<std::shared_ptr<const ir::Graph>> bodies = {});
  // The `result` node reading output k of multi-output node `c`, bound to the ONNX output k.
  int add_result(int c, size_t k, const Shape& s, DType dt);

  int materialize(Val& v, const std::string& name);
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
  static Tensor host_tensor(const Shape& s, const Host& h, DType dt);
  int scalar(double x, DType dt = DType::f32) { return constant({}, {x}, dt); }
  int scalar_like(double x, int node) { return scalar(x, is_float(ts_.dtypes[node]) ? ts_.dtypes[node] : DType::f32); }

  // Adds a registry op by name. Attributes are checked against the registry and defaults filled.
  int emit(const std::string& opname, std::vector<int> inputs, std::map<std::string, ir::AttrValue> attrs = {},
           const std::string& id = "");
  // Refuses a value above Limits::max_tensor_elements, naming the node (or the input).
  void check_size(int idx) const;
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
    // Built on the host as doubles: bounded like an inline constant (found by fuzz_onnx_struct:
    // OneHot with a depth near 2^56 asked for a constant of that many values).
    const int64_t n = shape_numel(s);
    if (n > (int64_t(1) << 24))
      fail("needs a constant of shape " + shape_str(s) + " (" + std::to_string(n) + " values), above the limit of 16777216 (2^24)");
    std::vector<double> v(n);
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
  // Concatenation of any number of nodes (the registry op takes at most 64 inputs).
  int concat_many(std::vector<int> xs, int64_t axis);
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
  static Shape bcast(const Shape& a, const Shape& b, bool& ok);
  // Index into a tensor of shape `s` broadcast to `o` for flat output index `flat`.
  static int64_t bidx(const Shape& s, const Shape& o, int64_t flat);
  // Elementwise over broadcast host inputs.
  // Folds an elementwise node whose formula `f` reads its first `arity` inputs (at least).
  void fold_elementwise(int out_et, size_t arity, const std::function<void(const std::vector<const Host*>&, const std::vector<int64_t>&, Host&)>& f);

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
  // True when every input is known on the host (and there is one): the folds of computed
  // values need that; those of shapes and constants do not.
  bool inputs_known() { return all_host() && !cur_->inputs.empty(); }

  // The current node, through its OpDef (or refused by name).
  void import_node();
  // After a node was mapped (not folded) with inputs that are all known on the host or bound
  // by value: its fold run on those values gives its outputs' input_value.
  void propagate_input_values(const struct OpDef& def);
  // Imports a subgraph's nodes into this graph (an If branch chosen at specialisation): its
  // inputs bound to `inputs`, its initializers as values, outer names as they stand; returns
  // its outputs' values. The names it defines are restored afterwards (scoping).
  std::vector<Val> inline_graph(const GraphDef& g, const std::vector<Val>& inputs);
  void finish_outputs();
  // One graph output `name` for the tensor value v (its own node under that name).
  void add_output(const std::string& name, Val& v, std::set<int>& used);
  // A graph input's value: a tensor input node, bound by value when small and given so.
  Val tensor_input(const std::string& name, const Shape& s, int et);
  // A sequence or optional graph input (sequence.cpp): its elements "name.0", "name.1", ... as
  // tensor inputs; an optional not given has no value.
  Val sequence_input(const ValueInfo& vi);
};

// ---------- the operator table ----------
// One row per ONNX operator (and domain, and first opset handled). A node is imported by the
// row of its op_type and domain with the highest since_version not above the version the
// model imports of that domain (Model::opset(domain)):
// `fold` first, if any (true: its outputs are set as host values), else `map`. A row without
// `map` refuses what it cannot fold as an unknown operator would be. maps_to/required/notes are
// the row of docs/onnx.md (`rlx onnx-ops`); a later row for another opset may leave them null.
using MapFn = void (*)(Importer&);
using FoldFn = bool (*)(Importer&);
struct OpDef {
  const char* op_type;
  const char* domain;  // "" = the default domain (ai.onnx)
  int since_version;
  MapFn map;
  FoldFn fold;
  const char* maps_to;   // registry ops used, or "folded"
  const char* required;  // registry ops without which the mapping cannot run (space separated)
  const char* notes;
};

// map<&Family::map_X> and fold<&Family::fold_X>: a family's member function as a table entry
// (a Family is constructed over the importer's state for each node).
template <class M> struct member_of;
template <class C, class R> struct member_of<R (C::*)()> { using type = C; };
template <auto fn> void map(Importer& b) {
  typename member_of<decltype(fn)>::type f(b.st_);
  (f.*fn)();
}
template <auto fn> bool fold(Importer& b) {
  typename member_of<decltype(fn)>::type f(b.st_);
  return (f.*fn)();
}

// One per family file, called once from op_table(): append that family's rows.
void elementwise_ops(std::vector<OpDef>& t);
void layout_ops(std::vector<OpDef>& t);
void index_ops(std::vector<OpDef>& t);
void reduce_norm_ops(std::vector<OpDef>& t);
void linalg_ops(std::vector<OpDef>& t);
void rnn_ops(std::vector<OpDef>& t);
void nn_ops(std::vector<OpDef>& t);
void values_ops(std::vector<OpDef>& t);
void signal_ops(std::vector<OpDef>& t);
void control_ops(std::vector<OpDef>& t);
void dynamic_ops(std::vector<OpDef>& t);
void training_ops(std::vector<OpDef>& t);
void sequence_ops(std::vector<OpDef>& t);
void text_ops(std::vector<OpDef>& t);
// TopK whose k is known only at run time (dynamic.cpp): a host step of a data-dependent size.
void map_topk_dynamic(Importer& b);
// ScatterElements as a host step (dynamic.cpp), where the match table of index.cpp's mapping would be too large.
void map_scatter_elements_step(Importer& b);
void quant_ops(std::vector<OpDef>& t);
// Every family's rows, in that order (docs/onnx.md lists them so); built once.
const std::vector<OpDef>& op_table();

}  // namespace rlx::onnx
