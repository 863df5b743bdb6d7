// ONNX -> rlx IR, for concrete input shapes. Every ONNX node either folds on the host
// (exact int64/double values: shape arithmetic, constants) or is mapped onto registry ops by
// name, with shapes and dtypes checked by the registry's own inference as each node is added.
// This file drives the import (inputs, the node loop, outputs) and dispatches each node
// through the operator table, which the family files (elementwise.cpp, layout.cpp, ...) fill.
#include "onnx/importer.h"

namespace rlx::onnx {

// ---------- the helpers of importer.h too long to read inline ----------
const char* Importer::attr_type_name(int t) {
  switch (t) {
    case kAttrFloat: return "a float";
    case kAttrInt: return "an int";
    case kAttrString: return "a string";
    case kAttrTensor: return "a tensor";
    case kAttrGraph: return "a graph";
    case kAttrFloats: return "a list of floats";
    case kAttrInts: return "a list of ints";
    case kAttrStrings: return "a list of strings";
    case 9: return "a list of tensors";
    case 10: return "a list of graphs";
    case 11: return "a sparse tensor";
    case 12: return "a list of sparse tensors";
    case 13: return "a type";
    case 14: return "a list of types";
  }
  return "of an unknown type";
}

const Attribute* Importer::attr(const char* n, AttrType type) const {
  const Attribute* a = cur_->attr(n);
  if (a && a->type != 0 && a->type != type)  // 0: a writer that left the type unset and no value set
    fail(std::string("attribute '") + n + "' must be " + attr_type_name(type) + ", it is " + attr_type_name(a->type));
  return a;
}

std::shared_ptr<const Host> Importer::host_of(Val& v, int64_t limit) {
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

std::shared_ptr<const Host> Importer::value_of(size_t k) {
  if (!has_in(k)) return nullptr;
  auto h = host(k, L_.max_folded_elements);
  if (!h && in(k).input_value) {  // follows from graph inputs given by value: bind them (the cache keys on them)
    h = in(k).input_value;
    for (const auto& name : in(k).value_from) {
      auto iv = in_values_.find(name);
      if (iv == in_values_.end()) fail("internal: input '" + name + "' has no bound value");
      auto hv = host_from_tensor(iv->second);
      auto& dep = value_deps_[name];
      dep.clear();
      for (size_t j = 0; j < hv->size(); ++j) dep.push_back(hv->d(j));
    }
  }
  return h;
}

Val Importer::host_val(Shape s, int et, Host h) {
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
  v.defined = true;
  v.host = std::make_shared<Host>(std::move(h));
  return v;
}

int Importer::add_leaf(ir::Op op, const std::string& id_base, const Shape& s, DType dt) {
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

int Importer::add_multi(ir::Op op, std::vector<int> inputs, std::map<std::string, ir::AttrValue> attrs,
                        std::vector<std::shared_ptr<const ir::Graph>> bodies) {
  for (const auto& spec : ir::op_info(op).attrs)
    if (!attrs.count(spec.name) && spec.default_value) attrs[spec.name] = *spec.default_value;
  ir::Node n;
  n.id = fresh((cur_->name.empty() ? out_name() : cur_->name) + "/" + ir::op_name(op));
  n.op = op;
  n.inputs = std::move(inputs);
  n.attrs.values = std::move(attrs);
  n.bodies = std::move(bodies);
  const int c = (int)g_->nodes.size();
  g_->index[n.id] = c;
  g_->nodes.push_back(std::move(n));
  ts_.shapes.push_back({});
  ts_.dtypes.push_back(DType::f32);
  return c;
}

int Importer::add_result(int c, size_t k, const Shape& s, DType dt) {
  ir::Node r;
  r.id = fresh(cur_->outputs[k]);
  r.op = ir::Op::Result;
  r.inputs = {c};
  r.attrs.values["index"] = (int64_t)k;
  r.dtype = dt;
  r.has_decl_shape = true;
  for (auto d : s) r.decl_shape.push_back(ir::Dim{d, ""});
  const int idx = (int)g_->nodes.size();
  g_->index[r.id] = idx;
  g_->nodes.push_back(std::move(r));
  ts_.shapes.push_back(s);
  ts_.dtypes.push_back(dt);
  set_node(k, idx);
  return idx;
}

int Importer::materialize(Val& v, const std::string& name) {
  if (v.node >= 0) return v.node;
  if (!v.is_tensor())
    fail("'" + name + "' is " + v.kind_name() + " where a tensor is needed" +
         (v.seq ? " (SequenceAt or ConcatFromSequence reads a sequence's tensors)" : " (OptionalHasElement tells whether it has one)"));
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

Tensor Importer::host_tensor(const Shape& s, const Host& h, DType dt) {
  if (is_float(dt)) {  // from the double values: f64 exact, the others rounded once
    std::vector<double> fv(h.size());
    for (size_t k = 0; k < fv.size(); ++k) fv[k] = h.d(k);
    if ((int64_t)fv.size() != shape_numel(s)) throw InputError("internal: value count does not match shape");
    Tensor t(s, dt);
    convert_elements(fv.data(), DType::f64, t.mutable_raw(), dt, (int64_t)fv.size());
    return t;
  }
  std::vector<int64_t> iv(h.size());
  for (size_t k = 0; k < iv.size(); ++k) iv[k] = h.n(k);
  if (dt == DType::u64) {  // host integers hold u64 values as their bits
    if ((int64_t)iv.size() != shape_numel(s)) throw InputError("internal: value count does not match shape");
    Tensor t(s, dt);
    convert_elements(iv.data(), DType::i64, t.mutable_raw(), dt, (int64_t)iv.size());
    return t;
  }
  return Tensor::from_ints(s, iv, dt);
}

int Importer::emit(const std::string& opname, std::vector<int> inputs, std::map<std::string, ir::AttrValue> attrs,
    const std::string& id) {
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
  check_size(idx);
  return idx;
}

// Limits::max_tensor_elements (docs/onnx.md) holds for every value the graph computes, so
// an absurd Expand, Pad, Tile or --dim is refused at load by run, inspect and convert alike,
// not at allocation (exit 3) or never (convert would write it).
void Importer::check_size(int idx) const {
  const Shape& s = ts_.shapes[idx];
  int64_t n = 1;
  bool over = false;
  for (int64_t d : s) over = over || __builtin_mul_overflow(n, d, &n);
  if (!over && n <= L_.max_tensor_elements) return;
  const std::string what = g_->nodes[idx].op == ir::Op::Input ? "input '" + g_->nodes[idx].id + "'" : "result";
  const std::string msg = what + " of shape " + shape_str(s) + " has " + (over ? std::string("more elements than int64 can count") : std::to_string(n) + " elements") +
                          ", above the limit of " + std::to_string(L_.max_tensor_elements) + " (2^36) elements per tensor";
  if (g_->nodes[idx].op == ir::Op::Input) throw InputError(m_.file() + ": " + msg);
  fail(msg);
}

int Importer::concat_many(std::vector<int> xs, int64_t axis) {
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

Shape Importer::bcast(const Shape& a, const Shape& b, bool& ok) {
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

int64_t Importer::bidx(const Shape& s, const Shape& o, int64_t flat) {
  auto st = broadcast_strides(s, o);
  int64_t r = 0;
  for (size_t k = o.size(); k-- > 0;) {
    int64_t c = o[k] ? flat % o[k] : 0;
    flat = o[k] ? flat / o[k] : 0;
    r += c * st[k];
  }
  return r;
}

void Importer::fold_elementwise(int out_et, size_t arity, const std::function<void(const std::vector<const Host*>&, const std::vector<int64_t>&, Host&)>& f) {
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
// ---------- the operator table and the dispatch ----------
const std::vector<OpDef>& op_table() {
  static const std::vector<OpDef> table = [] {
    std::vector<OpDef> t;
    elementwise_ops(t);
    reduce_norm_ops(t);
    index_ops(t);
    linalg_ops(t);
    rnn_ops(t);
    layout_ops(t);
    values_ops(t);
    signal_ops(t);
    nn_ops(t);
    control_ops(t);
    sequence_ops(t);
    text_ops(t);
    dynamic_ops(t);
    training_ops(t);
    quant_ops(t);
    std::set<std::tuple<std::string, std::string, int>> seen;
    for (const auto& d : t)
      if (!seen.emplace(d.op_type, d.domain, d.since_version).second)
        throw std::logic_error(std::string("onnx operator table: ") + d.op_type + " (since " + std::to_string(d.since_version) + ") is registered twice");
    return t;
  }();
  return table;
}

namespace {
bool default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }
}  // namespace

void Importer::import_node() {
  const NodeDef& n = *cur_;
  const std::string domain = default_domain(n.domain) ? "" : n.domain;
  const int64_t version = m_.opset(domain);  // 0: the model imports no such domain
  if (version == 0 && domain.empty()) fail("the model imports no default-domain (ai.onnx) opset, and this node is of that domain");
  const OpDef* def = nullptr;
  for (const auto& d : op_table())
    if (d.op_type == n.op_type && d.domain == domain && d.since_version <= version &&
        (!def || d.since_version > def->since_version))
      def = &d;
  if (!domain.empty() && !def) {
    if (domain == "com.microsoft")
      unsupported("operator com.microsoft." + n.op_type + " (of ONNX Runtime's contrib ops rlx reads MatMulNBits, MatMulIntegerToFloat and DynamicQuantizeMatMul)");
    unsupported("operator domain '" + n.domain + "' (only the default ONNX domain, com.microsoft's quantized products and ai.onnx.preview.training's optimizers are supported)");
  }
  // Opsets 1 to 6 are read for the operators whose definition did not change up to opset 7
  // (GlobalAveragePool, Not, Softplus, ... and the activations' opset-6 forms); an operator
  // that changed between the model's opset and 7 (the `broadcast` attribute of Add, Cast's
  // string `to`, `consumed_inputs`, ...) is refused naming both, never read with the later meaning.
  // (The versions below are ONNX's own: each operator's new definitions at opsets 2 to 7.)
  if (domain.empty() && version < 7) {
    static const std::map<std::string, std::vector<int>> changed_by_7 = {
        {"Abs", {6}}, {"Add", {6, 7}}, {"And", {7}}, {"AveragePool", {7}}, {"BatchNormalization", {6, 7}}, {"Cast", {6}},
        {"Ceil", {6}}, {"Clip", {6}}, {"Concat", {4}}, {"Div", {6, 7}}, {"Dropout", {6, 7}}, {"Elu", {6}}, {"Equal", {7}},
        {"Exp", {6}}, {"Floor", {6}}, {"GRU", {3, 7}}, {"Gemm", {6, 7}}, {"GlobalLpPool", {2}}, {"Greater", {7}},
        {"HardSigmoid", {6}}, {"InstanceNormalization", {6}}, {"LSTM", {7}}, {"LeakyRelu", {6}}, {"Less", {7}}, {"Log", {6}},
        {"LpPool", {2}}, {"Max", {6}}, {"Mean", {6}}, {"Min", {6}}, {"Mul", {6, 7}}, {"Neg", {6}}, {"Or", {7}},
        {"PRelu", {6, 7}}, {"Pad", {2}}, {"Pow", {7}}, {"RNN", {7}}, {"Reciprocal", {6}}, {"Relu", {6}}, {"Reshape", {5}},
        {"Selu", {6}}, {"Sigmoid", {6}}, {"Split", {2}}, {"Sqrt", {6}}, {"Sub", {6, 7}}, {"Sum", {6}}, {"Tanh", {6}},
        {"Tile", {6}}, {"Upsample", {7}}, {"Xor", {7}}};
    auto it = changed_by_7.find(n.op_type);
    if (it != changed_by_7.end())
      for (int v : it->second)
        if (v > version)
          unsupported("operator " + n.op_type + " as defined at opset " + std::to_string(version) + " (the model's opset; it changed at opset " +
                      std::to_string(v) + ", and rlx implements " + n.op_type + " as defined from opset " + std::to_string(it->second.back()) + ")");
  }
  // Opsets 18 to 21 are read for the quantization operators; an operator whose semantics
  // changed in those opsets (axes as an input, new attributes or modes) is imported only by a
  // row written for that version, else refused naming the version, never read with the old
  // meaning. (Changes that only widen the element types need no new row.)
  // Attributes that became inputs: from the opset named, a node still carrying the old attribute
  // is malformed (ONNX's checker refuses it), and reading it as absent would silently change the
  // result (a ReduceSum with `axes` would reduce every axis): refused, naming both.
  if (domain.empty()) {
    static const std::map<std::string, std::vector<std::pair<std::string, int>>> moved = {
        {"ReduceSum", {{"axes", 13}}}, {"Squeeze", {{"axes", 13}}}, {"Unsqueeze", {{"axes", 13}}}, {"Split", {{"split", 13}}},
        {"Pad", {{"pads", 11}, {"value", 11}}}, {"Slice", {{"starts", 10}, {"ends", 10}, {"axes", 10}}}, {"TopK", {{"k", 10}}},
        {"Clip", {{"min", 11}, {"max", 11}}}, {"Dropout", {{"ratio", 12}}}, {"Upsample", {{"scales", 9}}},
        {"Reshape", {{"shape", 5}}}, {"ReduceMean", {{"axes", 18}}}, {"ReduceMax", {{"axes", 18}}},
        {"ReduceMin", {{"axes", 18}}}, {"ReduceProd", {{"axes", 18}}}, {"ReduceL1", {{"axes", 18}}},
        {"ReduceL2", {{"axes", 18}}}, {"ReduceLogSum", {{"axes", 18}}}, {"ReduceLogSumExp", {{"axes", 18}}},
        {"ReduceSumSquare", {{"axes", 18}}}};
    auto it = moved.find(n.op_type);
    if (it != moved.end())
      for (const auto& [attr, since] : it->second)
        if (version >= since && n.attr(attr))
          fail("attribute '" + attr + "' is not part of " + n.op_type + " at opset " + std::to_string(version) + " (from opset " +
               std::to_string(since) + " it is an input): a malformed model; give it as the node's input");
  }
  if (def && domain.empty() && version > 17) {
    static const std::map<std::string, std::vector<int>> changed = {
        {"Pad", {18, 19}}, {"ReduceL1", {18}}, {"ReduceL2", {18}}, {"ReduceLogSum", {18}}, {"ReduceLogSumExp", {18}},
        {"ReduceMax", {18}}, {"ReduceMean", {18}}, {"ReduceMin", {18}}, {"ReduceProd", {18}},
        {"ReduceSumSquare", {18}}, {"Resize", {18, 19}}, {"ScatterElements", {18}}, {"ScatterND", {18}},
        {"Split", {18}}, {"LpPool", {18}}, {"AveragePool", {19}}, {"GridSample", {20}}, {"DFT", {20}},
        {"GroupNormalization", {21}}};
    auto it = changed.find(n.op_type);
    if (it != changed.end())
      for (int v : it->second)
        if (v <= version && def->since_version < v)
          unsupported("operator " + n.op_type + " as of opset " + std::to_string(v) + " (the model imports opset " +
                      std::to_string(version) + "; rlx implements " + n.op_type + " as defined up to opset " + std::to_string(v - 1) + ")");
  }
  if (def && def->fold && def->fold(*this)) return;
  if (def && def->fold && !def->map)  // folded only (Range, a window): its inputs are data here
    throw NeedsValue(where() + ": unsupported: operator " + n.op_type + " with inputs known only at run time (it is folded when the "
                     "model is specialised: see docs/onnx.md)");
  if (!def || !def->map) unsupported("operator " + n.op_type + " (see docs/onnx.md for the supported set)");
  def->map(*this);
  if (def->fold) propagate_input_values(*def);
}

void Importer::propagate_input_values(const OpDef& def) {
  const NodeDef& n = *cur_;
  std::set<std::string> from;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    if (!has_in(k)) continue;
    Val& v = in(k);
    if (host(k)) continue;
    if (!v.input_value) return;
    from.insert(v.value_from.begin(), v.value_from.end());
  }
  if (from.empty()) return;
  // Run the fold with the bound values standing in as host values, on a copy of the state's
  // values; keep only its outputs (as input_value), never a node it might have emitted.
  std::map<std::string, Val> saved;
  for (size_t k = 0; k < n.inputs.size(); ++k)
    if (has_in(k) && !saved.count(n.inputs[k])) saved[n.inputs[k]] = in(k);
  std::map<std::string, Val> mapped;
  for (const auto& o : n.outputs)
    if (!o.empty() && vals_.count(o)) mapped[o] = vals_[o];
  const size_t nodes_before = g_->nodes.size();
  bool folded = false;
  for (auto& [name, v] : saved)
    if (!v.host && v.input_value) vals_[name].host = v.input_value;
  try {
    folded = def.fold(*this);
  } catch (const std::exception&) {  // a value the fold cannot take: the mapped node stands, without a known value
    folded = false;
  }
  std::map<std::string, Val> got;
  for (const auto& o : n.outputs)
    if (!o.empty() && vals_.count(o)) got[o] = vals_[o];
  for (auto& [name, v] : saved) vals_[name] = v;
  for (auto& [name, v] : got)
    if (!mapped.count(name)) vals_.erase(name);
  for (auto& [name, v] : mapped) vals_[name] = v;
  if (g_->nodes.size() != nodes_before) fail("internal: a fold emitted graph nodes");
  if (!folded) return;
  for (auto& [name, v] : got) {
    if (!v.host || !mapped.count(name)) continue;
    vals_[name].input_value = v.host;
    vals_[name].value_from = from;
  }
}

std::vector<Val> Importer::inline_graph(const GraphDef& sg, const std::vector<Val>& inputs) {
  const NodeDef* const holder = cur_;
  if (inputs.size() != sg.inputs.size())
    fail("subgraph '" + sg.name + "' has " + std::to_string(sg.inputs.size()) + " inputs, " + std::to_string(inputs.size()) + " given");
  // The names this graph defines hide the enclosing ones while it is imported.
  std::map<std::string, std::optional<Val>> hidden;
  auto hide = [&](const std::string& name) {
    if (name.empty() || hidden.count(name)) return;
    auto it = vals_.find(name);
    hidden[name] = it == vals_.end() ? std::nullopt : std::optional<Val>(it->second);
  };
  for (const auto& [name, td] : sg.inits) hide(name);
  for (const auto& vi : sg.inputs) hide(vi.name);
  for (const auto& n : sg.nodes)
    for (const auto& o : n.outputs) hide(o);
  for (const auto& [name, td] : sg.inits) {
    vals_[name] = init_val(td);
  }
  for (size_t k = 0; k < inputs.size(); ++k) vals_[sg.inputs[k].name] = inputs[k];
  std::vector<Val> outs;
  try {
    for (const auto& n : sg.nodes) {
      cur_ = &n;
      for (size_t k = 0; k < n.inputs.size(); ++k) if (has_in(k)) in(k);
      import_node();
    }
    cur_ = holder;
    for (const auto& o : sg.outputs) {
      auto it = vals_.find(o.name);
      if (it == vals_.end() || !it->second.defined) fail("subgraph '" + sg.name + "': output '" + o.name + "' is not produced by any node");
      outs.push_back(it->second);
    }
  } catch (...) {
    cur_ = holder;
    throw;
  }
  for (auto& [name, v] : hidden) {
    if (v) vals_[name] = *v;
    else vals_.erase(name);
  }
  return outs;
}


void Importer::finish_outputs() {
  cur_ = nullptr;
  std::set<int> used;
  for (const auto& o : m_.outputs()) {
    auto it = vals_.find(o.name);
    if (it == vals_.end() || !it->second.defined) fail("graph output '" + o.name + "' is not produced by any node");
    Val& v = it->second;
    if (v.none) continue;  // an optional without a value: no output (docs/onnx.md, "Sequences and optionals")
    if (v.seq) {  // a sequence: one output per element, "name.0", "name.1", ...
      std::vector<Val> elems = *v.seq;
      for (size_t j = 0; j < elems.size(); ++j) add_output(o.name + "." + std::to_string(j), elems[j], used);
      continue;
    }
    add_output(o.name, v, used);
  }
}

void Importer::add_output(const std::string& name, Val& v, std::set<int>& used) {
  int idx = materialize(v, name);
  if (g_->nodes[idx].id != name || used.count(idx)) {
    // An alias (Identity, a folded value materialised under another name, a repeated output):
    // give the output its own node under its ONNX name.
    if (g_->index.count(name)) {
      // the name belongs to another node: rename that node out of the way first
      int other = g_->index[name];
      std::string nid = fresh(name + "/alias");
      g_->index.erase(name);
      g_->nodes[other].id = nid;
      g_->index[nid] = other;
      if (params_.count(name)) { params_[nid] = params_[name]; params_.erase(name); g_->nodes[other].param_name = nid; }
    }
    std::map<std::string, ir::AttrValue> a{{"shape", std::vector<int64_t>(ts_.shapes[idx].begin(), ts_.shapes[idx].end())}};
    ir::Node nd;
    nd.id = name;
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

Val Importer::tensor_input(const std::string& name, const Shape& s, int et) {
  DType dt = to_dtype(et, m_.file() + ": input '" + name + "'");
  int idx = add_leaf(ir::Op::Input, name, s, dt);
  check_size(idx);
  if (g_->nodes[idx].id != name) throw InputError(m_.file() + ": input name '" + name + "' is used twice");
  Val v;
  v.defined = true;
  v.node = idx;
  v.shape = s;
  v.et = et;
  if (auto iv = in_values_.find(name); iv != in_values_.end() && iv->second.numel() <= Model::kMaxValueBoundElements &&
                                       iv->second.shape() == s) {
    v.input_value = host_from_tensor(iv->second);
    v.value_from = {name};
  }
  return v;
}

std::shared_ptr<Specialized> Importer::run() {
  g_ = std::make_shared<ir::Graph>();
  g_->file = m_.file();
  g_->name = m_.producer().empty() ? "onnx" : m_.producer();
  // Initializers first (as not-yet-materialised values), then inputs (which may override them).
  for (const auto& [name, td] : m_.initializers()) {
    vals_[name] = init_val(td);
  }
  // The given inputs bind their symbolic dimensions first, whatever their order in the model.
  for (const auto& vi : m_.inputs()) {
    auto it = in_shapes_.find(vi.name);
    if (it == in_shapes_.end() || !vi.has_shape || vi.type.kind != ValueKind::Tensor) continue;
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
    if (in_shapes_.count(vi.name) || m_.is_default_input(vi.name) || vi.type.kind != ValueKind::Tensor) continue;
    if (std::none_of(vi.dims.begin(), vi.dims.end(), [&](const ir::Dim& d) { return !d.symbol.empty() && !dims_.count(d.symbol); }))
      continue;
    unbound.insert(unbound.end(), vi.dims.begin(), vi.dims.end());
    names += (n_unbound++ ? ", '" : "'") + vi.name + "'";
  }
  if (n_unbound) ir::bind_dims(unbound, dims_, m_.file() + (n_unbound > 1 ? ": inputs " : ": input ") + names);
  for (const auto& vi : m_.inputs()) {
    if (vi.type.kind != ValueKind::Tensor) {
      vals_[vi.name] = sequence_input(vi);
      continue;
    }
    auto it = in_shapes_.find(vi.name);
    bool is_default = m_.is_default_input(vi.name);
    if (is_default && it == in_shapes_.end()) continue;  // the initializer's value stands
    Shape s;
    if (it != in_shapes_.end()) {
      s = it->second;
    } else {
      s = ir::bind_dims(vi.dims, dims_, m_.file());  // every symbol is bound by now
    }
    vals_[vi.name] = tensor_input(vi.name, s, vi.elem_type);
  }
  for (const auto& n : m_.nodes()) {
    cur_ = &n;
    for (size_t k = 0; k < n.inputs.size(); ++k) if (has_in(k)) in(k);  // defined before use (cycles, order)
    import_node();
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
    for (const auto& vi : inputs_) {
      known = known || vi.name == name;
      // a sequence's elements: "name.0", "name.1", ...
      if (vi.type.is_sequence() && name.size() > vi.name.size() + 1 && name.compare(0, vi.name.size(), vi.name) == 0 &&
          name[vi.name.size()] == '.' && name.find_first_not_of("0123456789", vi.name.size() + 1) == std::string::npos)
        known = true;
    }
    if (!known) {
      std::string names;
      for (const auto& vi : inputs_) if (!is_default_input(vi.name)) names += (names.empty() ? "" : ", ") + vi.name;
      throw InputError(file_ + ": the model has no input '" + name + "' (its inputs: " + names + ")");
    }
  }
  ImportState st(*this, input_shapes, dims, values);
  std::shared_ptr<const Specialized> sp = Importer(st).run();
  auto& entries = cache_[key];
  if (entries.empty()) {
    cache_order_.push_back(key);
    if (cache_order_.size() > kMaxCachedShapes) {
      cache_.erase(cache_order_.front());
      cache_order_.pop_front();
    }
  }
  entries.push_back(sp);
  specializations_++;
  return sp;
}

void Model::forget(const std::shared_ptr<const Specialized>& sp) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    auto& v = it->second;
    v.erase(std::remove(v.begin(), v.end(), sp), v.end());
    if (v.empty()) {
      cache_order_.erase(std::remove(cache_order_.begin(), cache_order_.end(), it->first), cache_order_.end());
      cache_.erase(it);
      return;
    }
  }
}

}  // namespace rlx::onnx
