// ONNX -> rlx IR, for concrete input shapes. Every ONNX node either folds on the host
// (exact int64/double values: shape arithmetic, constants) or is mapped onto registry ops by
// name, with shapes and dtypes checked by the registry's own inference as each node is added.
// This file drives the import (inputs, the node loop, outputs) and dispatches each node
// through the operator table, which the family files (elementwise.cpp, layout.cpp, ...) fill.
#include "onnx/importer.h"

namespace rlx::onnx {

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
  const OpDef* def = nullptr;
  for (const auto& d : op_table())
    if (d.op_type == n.op_type && d.domain == domain && d.since_version <= m_.opset() &&
        (!def || d.since_version > def->since_version))
      def = &d;
  if (!domain.empty() && !def)
    unsupported("operator domain '" + n.domain + "' (only the default ONNX domain is supported)");
  if (def && def->fold && def->fold(*this)) return;
  if (!def || !def->map) unsupported("operator " + n.op_type + " (see docs/onnx.md for the supported set)");
  def->map(*this);
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
    for (const auto& vi : inputs_) known = known || vi.name == name;
    if (!known) {
      std::string names;
      for (const auto& vi : inputs_) if (!is_default_input(vi.name)) names += (names.empty() ? "" : ", ") + vi.name;
      throw InputError(file_ + ": the model has no input '" + name + "' (its inputs: " + names + ")");
    }
  }
  ImportState st(*this, input_shapes, dims, values);
  std::shared_ptr<const Specialized> sp = Importer(st).run();
  cache_[key].push_back(sp);
  specializations_++;
  return sp;
}

}  // namespace rlx::onnx