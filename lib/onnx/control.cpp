// Control flow: If, Loop and Scan. An If whose condition is known when the model is
// specialised (a constant, shape arithmetic, or a small input bound by value) is folded: the
// chosen branch is imported inline, its outputs become the If's outputs, and the node
// disappears (docs/ir-design.md section 3, "Folding"). Otherwise each body is imported as its
// own rlx graph (inputs: the ONNX body inputs, then the captured outer values, which are
// appended to the control node's inputs), and each ONNX output is read through a `result`
// node that declares its type; the session runs the node as a host step (lib/runtime/control.h).
#include "onnx/importer.h"

namespace rlx::onnx {

namespace {

// A body input of at most this many elements is bound by value when the body is imported for
// the values given at run time (its import reads only those it needs).
constexpr int64_t kMaxBodyValueElements = 4096;

// What importing a body again needs (at run time, for other input values or sizes).
struct BodySource {
  std::weak_ptr<Model> model;
  std::shared_ptr<const GraphDef> sg;
  std::string name, where;               // the rlx graph's name; the control node, for messages
  std::map<std::string, Val> host_caps;  // captured outer values known on the host
  std::vector<std::string> caps;         // captured outer names passed as inputs (after its own)
  std::map<std::string, int64_t> dims;   // the enclosing graph's dims and sizes
};

struct BodyGraph {
  std::shared_ptr<ir::Graph> g;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  std::map<std::string, std::vector<double>> outer_deps;  // the enclosing graph's inputs whose values it read
};

Tensor tensor_of(const Host& h, const Shape& s, DType dt) {
  if (!h.is_float) return Tensor::from_ints(s, h.i, dt);
  std::vector<float> f(h.f.begin(), h.f.end());
  return Tensor::from_vector(s, f, dt);
}

// Imports the body. `types`: every input (its own, then the captures). With `outer` (the
// captures' values in the enclosing graph, at specialisation) a capture given by value stays
// known inside (`values`: the enclosing graph's inputs given by value); without it the body's
// inputs in `values` of at most kMaxBodyValueElements are bound by value, and the graph's
// value_deps say which values it read. `keep`: the small input values a re-import for other
// data-dependent sizes (ir::Graph::resize) binds. A graph made with inputs bound by value, or
// with data-dependent nodes, gets `respecialize` and `resize`: the same import for other values
// or sizes.
BodyGraph import_body_graph(Model& m, const std::shared_ptr<const BodySource>& src, const std::vector<std::pair<Shape, DType>>& types,
                            const std::map<std::string, Val>* outer, const std::map<std::string, Tensor>& values,
                            const std::map<std::string, Tensor>& keep, const std::map<std::string, int64_t>& dims) {
  const GraphDef& sg = *src->sg;
  const bool by_value = outer == nullptr;
  if (types.size() != sg.inputs.size() + src->caps.size())
    throw InputError(src->where + ": the body '" + sg.name + "' takes " + std::to_string(sg.inputs.size() + src->caps.size()) +
                     " inputs, " + std::to_string(types.size()) + " given");
  std::map<std::string, Shape> no_shapes;
  ImportState bs(m, no_shapes, dims, values);
  bs.g = std::make_shared<ir::Graph>();
  bs.g->file = m.file();
  bs.g->name = src->name;
  Importer bi(bs);
  auto add_input = [&](const std::string& name, const Shape& s, DType dt) {
    int idx = bi.add_leaf(ir::Op::Input, name, s, dt);
    Val v;
    v.defined = true;
    v.node = idx;
    v.shape = s;
    v.et = dtype_et(dt);
    if (by_value)
      if (auto it = values.find(name); it != values.end() && it->second.shape() == s && it->second.numel() <= kMaxBodyValueElements) {
        v.input_value = host_from_tensor(it->second);
        v.value_from = {name};
      }
    return v;
  };
  for (const auto& [name, v] : src->host_caps) bs.vals[name] = v;
  for (size_t k = 0; k < sg.inputs.size(); ++k) {
    bs.vals[sg.inputs[k].name] = add_input(sg.inputs[k].name, types[k].first, types[k].second);
    if (bi.g_->nodes.back().id != sg.inputs[k].name)
      throw InputError(src->where + ": the body '" + sg.name + "' lists input '" + sg.inputs[k].name + "' twice");
  }
  for (size_t k = 0; k < src->caps.size(); ++k) {
    const std::string& name = src->caps[k];
    const auto& [shape, dt] = types[sg.inputs.size() + k];
    Val v = add_input(name, shape, dt);
    if (outer) {
      const Val& o = outer->at(name);
      v.input_value = o.input_value;  // a small input given by value stays known inside
      v.value_from = o.value_from;
    }
    if (!bs.vals.count(name)) bs.vals[name] = v;
  }
  for (const auto& [name, td] : sg.inits) bs.vals[name] = init_val(td);
  for (const auto& n : sg.nodes) {
    bi.cur_ = &n;
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (bi.has_in(k)) bi.in(k);
    bi.import_node();
  }
  bi.cur_ = nullptr;
  BodyGraph b;
  b.g = bs.g;
  for (const auto& o : sg.outputs) {
    auto it = bs.vals.find(o.name);
    if (it == bs.vals.end() || !it->second.defined)
      throw InputError(src->where + ": the body '" + sg.name + "': output '" + o.name + "' is not produced by any node");
    int idx = bi.materialize(it->second, o.name);
    if (std::find(b.g->outputs.begin(), b.g->outputs.end(), idx) != b.g->outputs.end())  // one value output twice: an alias
      idx = bi.emit("reshape", {idx}, {{"shape", std::vector<int64_t>(bs.ts.shapes[idx].begin(), bs.ts.shapes[idx].end())}}, o.name + "/again");
    b.g->outputs.push_back(idx);
    b.shapes.push_back(bs.ts.shapes[idx]);
    b.dtypes.push_back(bs.ts.dtypes[idx]);
  }
  // The body's own initializers become constants (a body has no parameters of its own).
  for (auto& nd : b.g->nodes)
    if (nd.op == ir::Op::Param) {
      nd.op = ir::Op::Constant;
      nd.constant = bs.params.at(nd.id);
    }
  if (by_value) b.g->value_deps = bs.value_deps;
  else b.outer_deps = bs.value_deps;
  bool dynamic = false;
  for (const auto& nd : b.g->nodes) dynamic = dynamic || ir::data_dependent_results(nd.op);
  if (by_value || dynamic) {
    std::map<std::string, Tensor> small;  // what a re-import for other sizes binds (never a large tensor)
    for (const auto& [name, t] : keep)
      if (t.numel() <= kMaxBodyValueElements) small.emplace(name, t);
    // the same import for other input values (their shapes give the types) or sizes
    auto again = [src](const std::vector<std::pair<Shape, DType>>* types, const std::map<std::string, Tensor>& vals,
                       const std::map<std::string, int64_t>& d) {
      auto model = src->model.lock();
      if (!model) throw RuntimeError(src->where + ": internal: the model of body '" + src->name + "' is gone");
      const GraphDef& sg = *src->sg;
      std::vector<std::pair<Shape, DType>> ts;
      if (types) ts = *types;
      else {
        std::vector<std::string> names;
        for (const auto& in : sg.inputs) names.push_back(in.name);
        names.insert(names.end(), src->caps.begin(), src->caps.end());
        for (const auto& name : names) {
          auto it = vals.find(name);
          if (it == vals.end()) throw RuntimeError(src->where + ": internal: no value for input '" + name + "' of body '" + src->name + "'");
          ts.push_back({it->second.shape(), it->second.dtype()});
        }
      }
      return import_body_graph(*model, src, ts, nullptr, vals, vals, d).g;
    };
    if (by_value)
      b.g->respecialize = [again, src](const std::map<std::string, Tensor>& vals) {
        return std::shared_ptr<const ir::Graph>(again(nullptr, vals, src->dims));
      };
    b.g->resize = [again, types, small, dims](const std::map<std::string, int64_t>& sizes) {
      std::map<std::string, int64_t> d = dims;
      for (const auto& [k, v] : sizes) d[k] = v;
      return std::make_pair(std::shared_ptr<const ir::Graph>(again(&types, small, d)), std::map<std::string, Tensor>());
    };
  }
  return b;
}

struct Control : Importer {
  using Importer::Importer;

  const GraphDef& body(const char* name) {
    auto a = attr(name, kAttrGraph);
    if (!a || !a->g) fail(std::string("attribute '") + name + "' (a graph) is required");
    return *a->g;
  }

  bool fold_If() {
    auto c = value_of(0);
    if (!c) return false;
    if (c->size() != 1) fail("the condition must have one element, it has " + std::to_string(c->size()));
    const bool then = c->d(0) != 0;
    const GraphDef& g = body(then ? "then_branch" : "else_branch");
    body(then ? "else_branch" : "then_branch");  // both branches are required
    if (g.outputs.size() < cur_->outputs.size())
      fail(std::string(then ? "then_branch" : "else_branch") + " has " + std::to_string(g.outputs.size()) + " outputs, the node " +
           std::to_string(cur_->outputs.size()));
    if (!g.inputs.empty()) fail("a branch takes no inputs, '" + g.name + "' has " + std::to_string(g.inputs.size()));
    std::vector<Val> outs = inline_graph(g, {});
    for (size_t k = 0; k < cur_->outputs.size(); ++k) set_out(k, outs[k]);
    return true;
  }

  // ---------- run-time control flow ----------
  // A body imported as its own graph (import_body_graph below): inputs (shape, ONNX element
  // type) named as the subgraph's inputs, then one input per capture (the outer values it
  // reads that are not known on the host; those known are constants inside it).
  using Body = BodyGraph;

  // The outer names the bodies read that must be passed at run time (not host-known), in
  // first-use order over all the bodies.
  std::vector<std::string> captures_of(const std::vector<const GraphDef*>& gs) {
    std::vector<std::string> r;
    std::set<std::string> seen;
    for (const GraphDef* g : gs)
      for (const auto& name : g->captures) {
        auto it = vals_.find(name);
        if (it == vals_.end() || !it->second.defined) fail("a body reads '" + name + "', which is not defined before this node");
        if (it->second.host) continue;
        if (seen.insert(name).second) r.push_back(name);
      }
    return r;
  }

  // Input k's value where known now (a constant, folded, or from inputs given by value), for a
  // body's provisional import only: unlike value_of, the specialisation does not depend on it
  // (the body is imported again for the values it is given at run time).
  std::shared_ptr<const Host> provisional_value(size_t k) {
    if (auto h = host(k, kMaxBodyValueElements)) return h;
    return has_in(k) ? in(k).input_value : nullptr;
  }

  std::shared_ptr<const GraphDef> body_ptr(const char* name) {
    auto a = attr(name, kAttrGraph);
    if (!a || !a->g) fail(std::string("attribute '") + name + "' (a graph) is required");
    return a->g;
  }

  // `in_types`: the body's own inputs. Imported as the enclosing graph's other nodes are (a
  // capture given by value stays known inside). If that import needs a value that is data (a
  // Slice start or a Resize size computed from the iteration number: "must be a constant or
  // computable from shapes"), the body is imported again with its small inputs bound by value
  // (`provisional`: the values known now, such as the iteration number 0 of a Loop's first
  // iteration), and the runtime imports it again for each other value it is given
  // (ir::Graph::respecialize).
  Body import_body(const std::shared_ptr<const GraphDef>& sgp, const std::vector<std::pair<Shape, DType>>& in_types,
                   const std::vector<std::string>& caps, const std::map<std::string, Tensor>& provisional = {},
                   bool deferrable = false, bool defer = false) {
    const GraphDef& sg = *sgp;
    if (sg.inputs.size() != in_types.size())
      fail("the body '" + sg.name + "' has " + std::to_string(sg.inputs.size()) + " inputs, " + std::to_string(in_types.size()) + " expected");
    auto src = std::make_shared<BodySource>();
    src->model = m_.weak_from_this();
    src->sg = sgp;
    src->name = (cur_->name.empty() ? cur_->op_type : cur_->name) + "/" + (sg.name.empty() ? "body" : sg.name);
    src->where = where();
    src->caps = caps;
    src->dims = dims_;
    for (const auto& name : sg.captures) {
      const Val& o = vals_.at(name);
      if (o.host) {
        Val v = o;
        v.node = -1;
        v.init = nullptr;
        src->host_caps[name] = v;
      }
    }
    std::vector<std::pair<Shape, DType>> types = in_types;
    std::map<std::string, Val> outer;
    std::map<std::string, Tensor> known = provisional;  // the captures' values known now
    for (const auto& name : caps) {
      const Val& o = vals_.at(name);
      types.push_back({o.shape, to_dtype(o.et, where() + ": value '" + name + "'")});
      outer[name] = o;
      if (o.input_value && !known.count(name)) known[name] = tensor_of(*o.input_value, o.shape, types.back().second);
    }
    if (!defer) try {
      Body b = import_body_graph(m_, src, types, &outer, in_values_, known, dims_);
      for (auto& [k, v] : b.outer_deps) value_deps_[k] = v;
      return b;
    } catch (const Unsupported& e) {
      try {
        return import_body_graph(m_, src, types, nullptr, known, known, dims_);
      } catch (const NeedsValue&) {  // (a value known only when it runs: deferred where that is possible)
        if (!deferrable) throw e;
      } catch (const Unsupported&) {
        throw e;
      }
    }
    {
      // Values known only at run time (a Resize size gathered from a captured tensor computed
      // from the data): the body is imported when it runs, for the values it is given. Until
      // then it is a placeholder (its inputs, no outputs), never run itself.
      Body b;
      b.g = std::make_shared<ir::Graph>();
      b.g->file = m_.file();
      b.g->name = src->name;
      std::map<std::string, Shape> no_shapes;
      std::map<std::string, Tensor> no_values;
      ImportState ps(m_, no_shapes, dims_, no_values);
      ps.g = b.g;
      Importer pi(ps);
      for (size_t k = 0; k < types.size(); ++k)
        pi.add_leaf(ir::Op::Input, k < sg.inputs.size() ? sg.inputs[k].name : caps[k - sg.inputs.size()], types[k].first, types[k].second);
      b.g->respecialize = [src](const std::map<std::string, Tensor>& vals) {
        auto model = src->model.lock();
        if (!model) throw RuntimeError(src->where + ": internal: the model of body '" + src->name + "' is gone");
        std::vector<std::pair<Shape, DType>> ts;
        std::vector<std::string> names;
        for (const auto& in : src->sg->inputs) names.push_back(in.name);
        names.insert(names.end(), src->caps.begin(), src->caps.end());
        for (const auto& name : names) {
          auto it = vals.find(name);
          if (it == vals.end()) throw RuntimeError(src->where + ": internal: no value for input '" + name + "' of body '" + src->name + "'");
          ts.push_back({it->second.shape(), it->second.dtype()});
        }
        return std::shared_ptr<const ir::Graph>(import_body_graph(*model, src, ts, nullptr, vals, vals, src->dims).g);
      };
      return b;
    }
  }

  // The control node, its captures appended, and one result node per ONNX output.
  void emit_control(ir::Op op, std::vector<int> inputs, const std::vector<std::string>& caps, std::map<std::string, ir::AttrValue> attrs,
                    std::vector<std::shared_ptr<const ir::Graph>> bodies, const std::vector<Shape>& shapes, const std::vector<DType>& dtypes) {
    for (const auto& name : caps) inputs.push_back(materialize(vals_.at(name), name));
    attrs["num_captures"] = (int64_t)caps.size();
    const int c = add_multi(op, std::move(inputs), std::move(attrs), std::move(bodies));
    for (size_t k = 0; k < cur_->outputs.size(); ++k) {
      if (cur_->outputs[k].empty()) continue;
      if (k >= shapes.size()) fail("output " + std::to_string(k) + " has no value in the body");
      add_result(c, k, shapes[k], dtypes[k]);
    }
  }

  void map_If() {
    auto tgp = body_ptr("then_branch"), egp = body_ptr("else_branch");
    const GraphDef &tg = *tgp, &eg = *egp;
    if (rank(0) > 0 && shape_numel(in(0).shape) != 1) fail("the condition must have one element, it has shape " + shape_str(in(0).shape));
    int cond = node(0);
    auto caps = captures_of({&tg, &eg});
    Body tb = import_body(tgp, {}, caps), eb = import_body(egp, {}, caps);
    if (tb.shapes.size() < cur_->outputs.size() || eb.shapes.size() < cur_->outputs.size())
      fail("a branch has fewer outputs than the node");
    for (size_t k = 0; k < cur_->outputs.size(); ++k)
      if (tb.shapes[k] != eb.shapes[k] || tb.dtypes[k] != eb.dtypes[k])
        unsupported("the condition is known only at run time and the branches give output " + std::to_string(k) + " different types (" +
                    shape_str(tb.shapes[k]) + " " + dtype_name(tb.dtypes[k]) + " and " + shape_str(eb.shapes[k]) + " " +
                    dtype_name(eb.dtypes[k]) + "): a data-dependent shape");
    emit_control(ir::Op::If, {cond}, caps, {}, {tb.g, eb.g}, tb.shapes, tb.dtypes);
  }

  // A loop that carries a sequence or an optional is unrolled when the model is specialised (a
  // sequence's length is part of the specialisation): the body imported once per iteration, with
  // the iteration number and the condition known, as long as the trip count or the body's
  // condition says so; scan outputs are stacked. Other loops run as a host step (map_Loop).
  static constexpr int64_t kMaxUnrolled = 4096;
  bool fold_Loop() {
    const size_t nc = cur_->inputs.size() < 2 ? 0 : cur_->inputs.size() - 2;
    bool carries_sequence = false;
    for (size_t k = 0; k < nc; ++k) carries_sequence = carries_sequence || (has_in(2 + k) && (in(2 + k).seq || in(2 + k).optional));
    if (!carries_sequence) return false;
    const GraphDef& bg = body("body");
    auto known = [&](size_t k, const char* what) -> std::optional<int64_t> {
      if (!has_in(k)) return std::nullopt;
      auto h = value_of(k);
      if (!h || h->size() != 1)
        unsupported(std::string("a loop carrying a sequence is unrolled when the model is specialised, and needs ") + what +
                    " known then (a constant, shape arithmetic or a small input given by value)");
      return h->n(0);
    };
    const std::optional<int64_t> trips = known(0, "its trip count M");
    bool cond = known(1, "its condition").value_or(1) != 0;
    std::vector<Val> carried;
    for (size_t k = 0; k < nc; ++k) {
      if (!has_in(2 + k)) fail("loop-carried input " + std::to_string(k) + " is missing");
      carried.push_back(in(2 + k));
    }
    auto host_scalar = [](int et, int64_t x) {
      Val v;
      v.defined = true;
      v.et = et;
      auto h = std::make_shared<Host>();
      h->i = {x};
      v.host = h;
      return v;
    };
    std::vector<std::vector<Val>> scans;
    for (int64_t i = 0; cond && (!trips || i < *trips); ++i) {
      if (i >= kMaxUnrolled)
        unsupported("a loop carrying a sequence runs more than " + std::to_string(kMaxUnrolled) + " iterations (it is unrolled when the model is specialised)");
      std::vector<Val> ins{host_scalar(kInt64, i), host_scalar(kBool, 1)};
      ins.insert(ins.end(), carried.begin(), carried.end());
      std::vector<Val> outs = inline_graph(bg, ins);
      if (g_->nodes.size() > L_.max_nodes) fail("unrolled, the graph grows past " + std::to_string(L_.max_nodes) + " nodes");
      if (outs.size() < 1 + nc) fail("the body has " + std::to_string(outs.size()) + " outputs, it needs the condition and " + std::to_string(nc) + " carried values");
      auto c = host_of(outs[0], 1);
      if (!c || c->size() != 1) unsupported("a loop carrying a sequence needs the body's condition known when the model is specialised");
      cond = c->d(0) != 0;
      for (size_t k = 0; k < nc; ++k) carried[k] = outs[1 + k];
      if (scans.empty()) scans.resize(outs.size() - 1 - nc);
      for (size_t k = 0; k < scans.size(); ++k) scans[k].push_back(outs[1 + nc + k]);
    }
    for (size_t k = 0; k < nc; ++k) set_out(k, carried[k]);
    for (size_t k = 0; k < scans.size() && nc + k < cur_->outputs.size(); ++k) {
      std::vector<int> xs;
      for (size_t j = 0; j < scans[k].size(); ++j) {
        int x = materialize(scans[k][j], out_name(nc + k) + "/" + std::to_string(j));
        Shape sh = shp(x);
        sh.insert(sh.begin(), 1);
        xs.push_back(reshape(x, sh));
      }
      set_node(nc + k, concat_many(xs, 0));
    }
    if (scans.empty() && cur_->outputs.size() > nc)
      unsupported("scan outputs of a loop carrying a sequence that runs no iteration (their shapes are unknown)");
    return true;
  }

  void map_Loop() {
    auto bgp = body_ptr("body");
    const GraphDef& bg = *bgp;
    const size_t nc = cur_->inputs.size() < 2 ? 0 : cur_->inputs.size() - 2;
    for (size_t k = 0; k < 2; ++k)
      if (has_in(k) && shape_numel(in(k).shape) != 1)
        fail(std::string(k == 0 ? "the trip count M" : "the condition") + " must have one element, it has shape " + shape_str(in(k).shape));
    std::optional<int64_t> trips;
    int M;
    if (has_in(0)) {
      if (auto h = value_of(0)) {
        if (h->size() != 1) fail("M must have one element");
        trips = h->n(0);
        M = constant({}, {(double)*trips}, DType::i64);
      } else {
        M = cast(node(0), DType::i64);
      }
    } else {
      M = constant({}, {9.2e18}, DType::i64);
    }
    int cond = has_in(1) ? cast(node(1), DType::boolean) : constant({}, {1}, DType::boolean);
    std::vector<int> ins{M, cond};
    std::vector<std::pair<Shape, DType>> types{{{}, DType::i64}, {{}, DType::boolean}};
    for (size_t k = 0; k < nc; ++k) {
      if (!has_in(2 + k)) fail("loop-carried input " + std::to_string(k) + " is missing");
      int x = node(2 + k);
      ins.push_back(x);
      types.push_back({shp(x), ts_.dtypes[x]});
    }
    auto caps = captures_of({&bg});
    // the values the first iteration gets, where known now: the iteration number 0, the
    // condition, carried values known on the host
    std::map<std::string, Tensor> first;
    if (bg.inputs.size() == types.size()) {
      first[bg.inputs[0].name] = Tensor::from_ints({}, {0}, DType::i64);
      first[bg.inputs[1].name] = Tensor::from_ints({}, {1}, DType::boolean);
      for (size_t k = 0; k < nc; ++k)
        if (auto h = provisional_value(2 + k)) first[bg.inputs[2 + k].name] = tensor_of(*h, types[2 + k].first, types[2 + k].second);
    }
    // (a body without scan outputs may wait for run time: its results are the carried values)
    Body b = import_body(bgp, types, caps, first, bg.outputs.size() == 1 + nc);
    bool grows = false;  // a carried value that changes shape (a Concat that appends a row per iteration)
    for (size_t k = 0; k < nc && k + 1 < b.shapes.size(); ++k) grows = grows || b.shapes[1 + k] != types[2 + k].first;
    if (grows && bg.outputs.size() == 1 + nc) b = import_body(bgp, types, caps, first, true, true);
    if (b.g->outputs.empty() && b.g->respecialize) {
      // Imported when it runs: the carried values may change shape from one iteration to the
      // next (a Concat that grows them), so their shapes after the loop are observed at run
      // time, each dimension under its own key, and the rest of the graph is made for them
      // (as for a data-dependent node: docs/onnx.md, "Data-dependent output shapes").
      const std::string key = "size:" + out_name(0);
      std::vector<Shape> shapes;
      std::vector<DType> dtypes;
      for (size_t k = 0; k < nc; ++k) {
        Shape sh = types[2 + k].first;
        for (size_t d = 0; d < sh.size(); ++d) {
          auto it = dims_.find(key + ":" + std::to_string(k) + ":" + std::to_string(d));
          if (it == dims_.end()) continue;
          if (it->second < 0) fail("the size " + std::to_string(it->second) + " recorded for this node is negative");
          sh[d] = it->second;
          g_->sizes[it->first] = it->second;
        }
        shapes.push_back(sh);
        dtypes.push_back(types[2 + k].second);
      }
      emit_control(ir::Op::Loop, ins, caps, {{"num_carried", (int64_t)nc}, {"size_key", key}}, {b.g}, shapes, dtypes);
      return;
    }
    if (b.shapes.size() < 1 + nc) fail("the body has " + std::to_string(b.shapes.size()) + " outputs, it needs the condition and " + std::to_string(nc) + " carried values");
    std::vector<Shape> shapes;
    std::vector<DType> dtypes;
    for (size_t k = 0; k < nc; ++k) {
      if (b.shapes[1 + k] != types[2 + k].first || b.dtypes[1 + k] != types[2 + k].second)
        unsupported("loop-carried value " + std::to_string(k) + " changes type in the body (" + shape_str(types[2 + k].first) + " to " +
                    shape_str(b.shapes[1 + k]) + "): a data-dependent shape");
      shapes.push_back(b.shapes[1 + k]);
      dtypes.push_back(b.dtypes[1 + k]);
    }
    for (size_t k = 1 + nc; k < b.shapes.size(); ++k) {
      if (!trips)
        unsupported("scan outputs of a loop whose trip count M is known only at run time: a data-dependent shape");
      Shape s = b.shapes[k];
      s.insert(s.begin(), std::max<int64_t>(*trips, 0));
      shapes.push_back(s);
      dtypes.push_back(b.dtypes[k]);
    }
    emit_control(ir::Op::Loop, ins, caps, {{"num_carried", (int64_t)nc}}, {b.g}, shapes, dtypes);
  }

  // An attribute listing one axis (normalised against ranks) or one direction (0 or 1) per
  // scan input or output; all 0 when absent.
  std::vector<int64_t> scan_list(const char* name, int64_t n, bool axes, const std::vector<int>& ranks) {
    std::vector<int64_t> v = aints(name).value_or(std::vector<int64_t>((size_t)n, 0));
    if ((int64_t)v.size() != n) fail(std::string("attribute '") + name + "' has " + std::to_string(v.size()) + " entries, " + std::to_string(n) + " expected");
    for (size_t k = 0; k < v.size(); ++k) {
      if (axes) v[k] = axis_of(v[k], (size_t)ranks[k]);
      else if (v[k] != 0 && v[k] != 1) fail(std::string("attribute '") + name + "' holds " + std::to_string(v[k]) + " (0 or 1)");
    }
    return v;
  }

  void map_Scan() {
    const int64_t nscan = ai("num_scan_inputs", -1);
    const int64_t nin = (int64_t)cur_->inputs.size();
    if (nscan < 1 || nscan > nin) fail("num_scan_inputs must be between 1 and the number of inputs (" + std::to_string(nin) + ")");
    std::vector<int> ins, in_ranks;
    for (int64_t k = 0; k < nin; ++k) {
      int x = node(k);
      ins.push_back(x);
      if (k >= nin - nscan) in_ranks.push_back((int)shp(x).size());
    }
    scan(ins, nscan, scan_list("scan_input_axes", nscan, true, in_ranks), scan_list("scan_input_directions", nscan, false, {}), true);
  }

  // Opset 8's Scan: input 0 is the optional sequence_lens, every state and scan input has a
  // leading batch axis (the scan axis is 1), `directions` reverses scan inputs, and scan
  // outputs are [batch, steps, ...]. Run as one opset-9 scan per batch entry (narrowed out of
  // each input), the results stacked back along the batch axis; sequence_lens must give every
  // entry the full length (unequal lengths are refused).
  void map_Scan8() {
    const int64_t nscan = ai("num_scan_inputs", -1);
    const int64_t nin = (int64_t)cur_->inputs.size() - 1;
    if (nscan < 1 || nscan > nin) fail("num_scan_inputs must be between 1 and the number of inputs after sequence_lens (" + std::to_string(nin) + ")");
    std::vector<int> ins;
    for (int64_t k = 0; k < nin; ++k) {
      int x = node((size_t)k + 1);
      const Shape& s = shp(x);
      if (s.size() < (k >= nin - nscan ? 2u : 1u))
        fail("input " + std::to_string(k + 1) + " has shape " + shape_str(s) + "; opset 8's Scan needs a batch axis" + (k >= nin - nscan ? " and a sequence axis" : ""));
      if (!ins.empty() && s[0] != shp(ins[0])[0])
        fail("input " + std::to_string(k + 1) + " has batch size " + std::to_string(s[0]) + ", input 1 " + std::to_string(shp(ins[0])[0]));
      ins.push_back(x);
    }
    const int64_t B = shp(ins[0])[0], L = shp(ins[(size_t)(nin - nscan)])[1];
    if (B > kMaxUnrolled) unsupported("opset 8's Scan over a batch of " + std::to_string(B) + " (at most " + std::to_string(kMaxUnrolled) + ": one scan per batch entry)");
    if (has_in(0)) {
      auto h = need_host(0, "sequence_lens");
      if ((int64_t)h->size() != B) fail("sequence_lens has " + std::to_string(h->size()) + " entries for a batch of " + std::to_string(B));
      for (size_t b = 0; b < h->size(); ++b)
        if (h->n(b) != L) unsupported("sequence_lens " + std::to_string(h->n(b)) + " for batch entry " + std::to_string(b) + " (every entry must have the full length " + std::to_string(L) + ")");
    }
    const std::vector<int64_t> dirs = scan_list("directions", nscan, false, {});
    std::vector<std::vector<int>> outs(cur_->outputs.size());
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int> one;
      for (int x : ins) {
        Shape s = shp(x);
        s.erase(s.begin());
        one.push_back(reshape(narrow(x, 0, b, 1), s));
      }
      scan(one, nscan, std::vector<int64_t>((size_t)nscan, 0), dirs, false);
      for (size_t k = 0; k < outs.size(); ++k)
        if (!cur_->outputs[k].empty()) outs[k].push_back(vals_.at(cur_->outputs[k]).node);
    }
    for (size_t k = 0; k < outs.size(); ++k) {
      if (cur_->outputs[k].empty()) continue;
      std::vector<int> parts;
      Shape s = shp(outs[k][0]);
      s.insert(s.begin(), 1);
      for (int r : outs[k]) parts.push_back(reshape(r, s));
      s[0] = B;
      set_node(k, emit("reshape", {concat_many(parts, 0)}, {{"shape", std::vector<int64_t>(s.begin(), s.end())}}, out_name(k)));
    }
  }

  // One opset-9 scan over ins (states, then nscan scan inputs) with the given input axes and
  // directions; output axes and directions from the node's attributes when `out_attrs`, else 0.
  void scan(const std::vector<int>& ins, int64_t nscan, const std::vector<int64_t>& in_axes, const std::vector<int64_t>& in_dirs, bool out_attrs) {
    auto bgp = body_ptr("body");
    const GraphDef& bg = *bgp;
    const int64_t nin = (int64_t)ins.size(), nstate = nin - nscan;
    std::vector<std::pair<Shape, DType>> types;
    int64_t L = -1;
    for (int64_t k = 0; k < nin; ++k) {
      Shape s = shp(ins[k]);
      if (k >= nstate) {
        const int64_t ax = in_axes[k - nstate];
        if (L >= 0 && s[ax] != L) fail("the scan inputs have different lengths along their scan axes");
        L = s[ax];
        s.erase(s.begin() + ax);
      }
      types.push_back({s, ts_.dtypes[ins[k]]});
    }
    auto caps = captures_of({&bg});
    std::map<std::string, Tensor> first;  // the states' values known now (opset 9+: ins are the node's inputs)
    if (out_attrs && bg.inputs.size() == types.size())
      for (int64_t k = 0; k < nstate; ++k)
        if (auto h = provisional_value(k)) first[bg.inputs[k].name] = tensor_of(*h, types[k].first, types[k].second);
    Body b = import_body(bgp, types, caps, first);
    const int64_t nout = (int64_t)b.shapes.size() - nstate;
    if (nout < 0) fail("the body has fewer outputs than states");
    std::vector<int> out_ranks;
    for (int64_t k = 0; k < nout; ++k) out_ranks.push_back((int)b.shapes[nstate + k].size() + 1);
    auto out_axes = out_attrs ? scan_list("scan_output_axes", nout, true, out_ranks) : std::vector<int64_t>((size_t)nout, 0);
    auto out_dirs = out_attrs ? scan_list("scan_output_directions", nout, false, {}) : std::vector<int64_t>((size_t)nout, 0);
    std::vector<Shape> shapes;
    std::vector<DType> dtypes;
    for (int64_t k = 0; k < nstate; ++k) {
      if (b.shapes[k] != types[k].first || b.dtypes[k] != types[k].second)
        unsupported("scan state " + std::to_string(k) + " changes type in the body: a data-dependent shape");
      shapes.push_back(b.shapes[k]);
      dtypes.push_back(b.dtypes[k]);
    }
    for (int64_t k = 0; k < nout; ++k) {
      Shape s = b.shapes[nstate + k];
      s.insert(s.begin() + out_axes[k], L);
      shapes.push_back(s);
      dtypes.push_back(b.dtypes[nstate + k]);
    }
    emit_control(ir::Op::Scan, ins, caps,
                 {{"num_scan_inputs", nscan}, {"scan_input_axes", in_axes}, {"scan_input_directions", in_dirs},
                  {"scan_output_axes", out_axes}, {"scan_output_directions", out_dirs}},
                 {b.g}, shapes, dtypes);
  }
};

}  // namespace

void control_ops(std::vector<OpDef>& t) {
  using F = Control;
  t.insert(t.end(), {
      {"If", "", 1, map<&F::map_If>, fold<&F::fold_If>, "if, result (or folded)", "if result",
       "folded when the condition is known at specialisation (a constant, shape arithmetic, or a small input given by value: "
       "the plan is then specialised for that value): the chosen branch is imported inline. Otherwise a host step picks the "
       "branch at run time; both branches must then give each output the same shape and dtype"},
      {"Loop", "", 1, map<&F::map_Loop>, fold<&F::fold_Loop>, "loop, result", "loop result",
       "a host step runs the body (planned once per input signature, never unrolled) while i < M and cond; scan outputs need M "
       "known at specialisation, and a loop that stops early with scan outputs is refused at run time. A body whose sizes follow "
       "from values (the iteration number, a carried or captured value) is imported again per value (cached); without scan outputs "
       "its carried values may change shape (the graph after the loop is made for the observed shapes). "
       "A loop carrying a sequence or optional is unrolled at specialisation (M or the body's condition known then; at most 4096 iterations)"},
      {"Scan", "", 9, map<&F::map_Scan>, nullptr, "scan, result", "scan result",
       "opset 9+ form (no batch axis); axes and directions of inputs and outputs; a host step runs the body per slice; a body "
       "whose sizes follow from its states' values is imported again per value (cached)"},
      {"Scan", "", 8, map<&F::map_Scan8>, nullptr, "scan, result, concat", "scan result",
       "opset 8 form (a batch axis): one opset-9 scan per batch entry, stacked; directions; sequence_lens must give every entry the full length"},
  });
}

}  // namespace rlx::onnx
