#include "ir/loader.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "io/file.h"
#include "io/json.h"
#include "ir/op_registry.h"

namespace rlx::ir {

using json = nlohmann::json;

namespace {

// " (f64 is a dtype of ONNX models only ...)" for a dtype rlx has but the graph format does not name.
std::string onnx_only_note(const json& v) {
  if (!v.is_string() || !parse_dtype(v.get<std::string>())) return "";
  return " (" + v.get<std::string>() + " is a dtype of ONNX models only: the graph format does not name it)";
}

struct Ctx {
  std::string file;
  const LoadLimits& limits;
  int depth = 0;             // of the graph being read (0: the file's graph; bodies below)
  size_t* total = nullptr;   // nodes read so far, bodies included
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw InputError(file + ": " + (where.empty() ? "" : where + ": ") + what);
  }
};

std::string where_node(size_t idx, const std::string& id, const std::string& op = "") {
  std::string w = "nodes[" + std::to_string(idx) + "]";
  if (!id.empty()) w = "node '" + printable(id) + "'" + (op.empty() ? "" : " (" + op + ")") + " at " + w;
  return w;
}

const char* json_type(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer: case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "a list";
    case json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

bool json_int(const json& v, int64_t& out) {
  // is_number_integer() is also true for unsigned values: test unsigned first, or
  // 18446744073709551615 would read as -1.
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > (uint64_t)INT64_MAX) return false;
    out = (int64_t)u;
    return true;
  }
  if (v.is_number_integer()) {
    out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::floor(d) != d || std::fabs(d) > 9.0e15) return false;
    out = (int64_t)d;
    return true;
  }
  return false;
}

AttrValue parse_attr(const Ctx& c, const std::string& where, const AttrSpec& spec, const json& v) {
  auto bad = [&](const std::string& expected) -> AttrValue {
    c.fail(where, "attribute '" + spec.name + "' must be " + expected + ", got " + json_type(v) + " " + io::json_excerpt(v));
  };
  int64_t iv;
  switch (spec.type) {
    case AttrType::Int:
      if (v.is_number_unsigned() && !json_int(v, iv)) return bad("an integer below 2^63");
      if (v.is_boolean() || !json_int(v, iv)) return bad("an integer");
      return iv;
    case AttrType::Float:
      if (!v.is_number()) return bad("a number");
      if (!std::isfinite(v.get<double>())) return bad("a finite number");
      return v.get<double>();
    case AttrType::Bool:
      if (!v.is_boolean()) return bad("true or false");
      return v.get<bool>();
    case AttrType::String: {
      if (!v.is_string()) return bad("a string");
      std::string s = v.get<std::string>();
      if (!spec.choices.empty() && std::find(spec.choices.begin(), spec.choices.end(), s) == spec.choices.end()) {
        std::string opts;
        for (auto& o : spec.choices) opts += (opts.empty() ? "\"" : ", \"") + o + "\"";
        c.fail(where, "attribute '" + spec.name + "' is \"" + s + "\"; expected one of " + opts);
      }
      return s;
    }
    case AttrType::Dtype: {
      if (!v.is_string() || !parse_json_dtype(v.get<std::string>()))
        return bad("a dtype (" + json_dtype_names() + ")" + onnx_only_note(v));
      return v.get<std::string>();
    }
    case AttrType::Floats: {
      if (!v.is_array()) return bad("a list of numbers");
      if (v.size() > c.limits.max_rank) c.fail(where, "attribute '" + spec.name + "' has more than " + std::to_string(c.limits.max_rank) + " entries");
      std::vector<double> r;
      for (const auto& e : v) {
        if (!e.is_number() || !std::isfinite(e.get<double>())) return bad("a list of finite numbers");
        r.push_back(e.get<double>());
      }
      return r;
    }
    case AttrType::Ints: {
      if (!v.is_array()) return bad("a list of integers");
      if (v.size() > c.limits.max_rank) c.fail(where, "attribute '" + spec.name + "' has more than " + std::to_string(c.limits.max_rank) + " entries");
      std::vector<int64_t> r;
      for (const auto& e : v) {
        if (e.is_boolean() || !json_int(e, iv)) return bad("a list of integers");
        r.push_back(iv);
      }
      return r;
    }
  }
  return bad("valid");
}

// Flattens a (nested) constant value in row-major order, checking it matches `shape`.
void flatten_value(const Ctx& c, const std::string& where, const json& v, const Shape& shape, size_t depth,
                   std::vector<const json*>& out) {
  if (depth == shape.size()) {
    if (!v.is_boolean() && !v.is_number()) c.fail(where, "value entries must be numbers, got " + std::string(json_type(v)));
    out.push_back(&v);
    return;
  }
  if (!v.is_array() || (int64_t)v.size() != shape[depth])
    c.fail(where, "value does not match shape " + shape_str(shape) + " at nesting level " + std::to_string(depth) +
                      " (expected a list of " + std::to_string(shape[depth]) + ")");
  for (const auto& e : v) flatten_value(c, where, e, shape, depth + 1, out);
}

// A constant's values in its dtype, by the rule of inline --input values
// (literal_value_problem): an integer that does not fit i32/i64 or a float that overflows f32
// is refused, never saturated. Integers are kept exactly (an i64 beyond 2^24 is not rounded
// through f32); true/false are 1/0.
Tensor constant_tensor(const Ctx& c, const std::string& where, const Shape& s, DType dt,
                       const std::vector<const json*>& leaves, bool fill) {
  auto problem = [&](const json& e, const std::string& why) {
    c.fail(where, (is_integer(dt) ? std::string(dtype_name(dt)) + " value " : std::string("value ")) + io::json_excerpt(e) + " " + why);
  };
  if (is_integer(dt)) {
    std::vector<int64_t> ints;
    ints.reserve(leaves.size());
    for (const json* e : leaves) {
      int64_t iv = 0;
      if (e->is_boolean()) iv = e->get<bool>();
      else if (e->is_number_integer() && json_int(*e, iv)) {  // exact, also beyond 2^53
        if (!fits_dtype(iv, dt)) problem(*e, literal_value_problem((double)iv, dt));
      } else if (std::string why = literal_value_problem(e->get<double>(), dt); !why.empty()) problem(*e, why);
      else iv = (int64_t)e->get<double>();
      ints.push_back(iv);
    }
    if (fill) ints.assign((size_t)shape_numel(s), ints.at(0));
    return Tensor::from_ints(s, ints, dt);
  }
  std::vector<float> vals;
  vals.reserve(leaves.size());
  for (const json* e : leaves) {
    if (e->is_boolean()) { vals.push_back(e->get<bool>() ? 1.f : 0.f); continue; }
    const double v = e->get<double>();
    if (std::string why = literal_value_problem(v, dt); !why.empty()) problem(*e, why);
    if (dt == DType::boolean && v != 0 && v != 1) problem(*e, "is not 0, 1, true or false (the dtype is bool)");
    vals.push_back((float)v);
  }
  if (fill) vals.assign((size_t)shape_numel(s), vals.at(0));
  return Tensor::from_vector(s, vals, dt);  // stored in the node's dtype (as `cast` rounds)
}

void parse_shape(const Ctx& c, const std::string& where, const json& js, bool allow_symbols, Node& n) {
  if (!js.is_array()) c.fail(where, "shape must be a list, got " + std::string(json_type(js)));
  if (js.size() > c.limits.max_rank) c.fail(where, "shape has rank " + std::to_string(js.size()) + "; at most " + std::to_string(c.limits.max_rank) + " is supported");
  n.decl_shape.clear();
  for (const auto& d : js) {
    Dim dim;
    int64_t v;
    if (d.is_string()) {
      if (!allow_symbols) c.fail(where, "symbolic dimension \"" + d.get<std::string>() + "\" is only allowed on input nodes");
      dim.symbol = d.get<std::string>();
      if (dim.symbol.empty()) c.fail(where, "a symbolic dimension needs a name");
    } else if (!d.is_boolean() && json_int(d, v)) {
      if (v < 0) c.fail(where, "shape has a negative dimension " + std::to_string(v));
      dim.value = v;
    } else {
      c.fail(where, "shape entries must be non-negative integers or symbol names, got " + io::json_excerpt(d));
    }
    n.decl_shape.push_back(dim);
  }
  n.has_decl_shape = true;
  Shape concrete;
  for (auto& d : n.decl_shape) concrete.push_back(d.symbol.empty() ? d.value : 1);
  if (shape_numel(concrete) < 0) c.fail(where, "shape element count overflows");
}

Graph read_graph(const Ctx& c, const json& root, const std::string& where);

Node parse_node(const Ctx& c, size_t idx, const json& jn) {
  if (!jn.is_object()) c.fail(where_node(idx, ""), "a node must be an object, got " + std::string(json_type(jn)));
  Node n;
  n.json_index = (int)idx;
  if (!jn.contains("id") || !jn["id"].is_string() || jn["id"].get<std::string>().empty())
    c.fail(where_node(idx, ""), "every node needs a non-empty string \"id\"");
  n.id = jn["id"].get<std::string>();
  if (!jn.contains("op") || !jn["op"].is_string()) c.fail(where_node(idx, n.id), "needs a string \"op\"");
  std::string opname = jn["op"].get<std::string>();
  auto op = op_from_name(opname);
  if (!op) c.fail(where_node(idx, n.id), "unknown op " + io::quoted_excerpt(opname) + " (see docs/graph-format.md for the list)");
  n.op = *op;
  const OpInfo& info = op_info(n.op);
  std::string where = where_node(idx, n.id, opname);
  static const std::set<std::string> keys = {"id", "op", "inputs", "attrs", "shape", "dtype", "name", "value", "doc", "comment", "bodies"};
  for (auto it = jn.begin(); it != jn.end(); ++it)
    if (!keys.count(it.key())) c.fail(where, "unknown field " + io::quoted_excerpt(it.key()));

  bool leaf = info.category == Category::Leaf;
  const bool tuple = info.category == Category::Control && n.op != Op::Result && !data_dependent_results(n.op);
  if (jn.contains("bodies") && !tuple) c.fail(where, "\"bodies\" is only allowed on if, loop and scan nodes");
  if (tuple) {
    const size_t want = n.op == Op::If ? 2 : 1;
    if (!jn.contains("bodies") || !jn["bodies"].is_array() || jn["bodies"].size() != want)
      c.fail(where, "needs \"bodies\": a list of " + std::to_string(want) + (want == 1 ? " graph" : " graphs (then, else)"));
    if (c.depth + 1 > c.limits.max_body_depth)
      c.fail(where, "bodies are nested " + std::to_string(c.depth + 1) + " deep, above the limit of " + std::to_string(c.limits.max_body_depth));
    for (size_t k = 0; k < want; ++k) {
      Ctx bc = c;
      bc.depth = c.depth + 1;
      auto body = std::make_shared<Graph>(read_graph(bc, jn["bodies"][k], where + ": bodies[" + std::to_string(k) + "]"));
      n.bodies.push_back(std::move(body));
    }
  }
  if (n.op == Op::Result && (!jn.contains("shape") || !jn.contains("dtype")))
    c.fail(where, "a result declares its \"shape\" and \"dtype\"");
  if (jn.contains("dtype")) {
    if (!jn["dtype"].is_string() || !parse_json_dtype(jn["dtype"].get<std::string>()))
      c.fail(where, "dtype must be one of " + json_dtype_names() + "; got " + io::json_excerpt(jn["dtype"]) +
                        onnx_only_note(jn["dtype"]));
    n.dtype = *parse_dtype(jn["dtype"].get<std::string>());
  }
  if (jn.contains("shape")) parse_shape(c, where, jn["shape"], n.op == Op::Input, n);
  else if (leaf) c.fail(where, "\"shape\" is required on " + opname + " nodes");
  if (jn.contains("name")) {
    if (!jn["name"].is_string()) c.fail(where, "\"name\" must be a string");
    n.param_name = jn["name"].get<std::string>();
  }
  if (n.param_name.empty()) n.param_name = n.id;
  if (jn.contains("value") && n.op != Op::Constant) c.fail(where, "\"value\" is only allowed on constant nodes");
  if (n.op == Op::Constant) {
    if (!jn.contains("value")) c.fail(where, "constant nodes need a \"value\"");
    Shape s;
    for (auto& d : n.decl_shape) s.push_back(d.value);
    int64_t count = shape_numel(s);
    if (count < 0 || (size_t)count > c.limits.max_constant_elements)
      c.fail(where, "constant has " + std::to_string(count) + " elements; at most " + std::to_string(c.limits.max_constant_elements) + " are supported inline (use a param)");
    std::vector<const json*> leaves;
    const json& v = jn["value"];
    bool fill = false;
    if (v.is_number() || v.is_boolean()) {
      leaves.push_back(&v);  // a scalar fills the shape
      fill = true;
    } else if (v.is_array() && s.size() > 1 && (int64_t)v.size() == count &&
               std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_number() || e.is_boolean(); })) {
      flatten_value(c, where, v, Shape{count}, 0, leaves);  // a flat row-major list is accepted too
    } else {
      flatten_value(c, where, v, s, 0, leaves);
    }
    n.constant = constant_tensor(c, where, s, n.dtype, leaves, fill);
  }

  if (jn.contains("inputs")) {
    const json& ins = jn["inputs"];
    if (!ins.is_array()) c.fail(where, "\"inputs\" must be a list of node ids");
    for (const auto& e : ins)
      if (!e.is_string()) c.fail(where, "\"inputs\" must be a list of node ids, found " + io::json_excerpt(e));
  }
  size_t nin = jn.contains("inputs") ? jn["inputs"].size() : 0;
  if ((int)nin < info.min_inputs || (int)nin > info.max_inputs) {
    std::string want = info.min_inputs == info.max_inputs ? std::to_string(info.min_inputs)
                                                          : std::to_string(info.min_inputs) + " to " + std::to_string(info.max_inputs);
    c.fail(where, "takes " + want + " input" + (info.max_inputs == 1 ? "" : "s") + ", got " + std::to_string(nin));
  }

  // Attributes: check names and types, then fill defaults.
  if (jn.contains("attrs")) {
    const json& ja = jn["attrs"];
    if (!ja.is_object()) c.fail(where, "\"attrs\" must be an object");
    for (auto it = ja.begin(); it != ja.end(); ++it) {
      auto spec = std::find_if(info.attrs.begin(), info.attrs.end(), [&](const AttrSpec& s) { return s.name == it.key(); });
      if (spec == info.attrs.end()) {
        std::string known;
        for (auto& s : info.attrs) known += (known.empty() ? "" : ", ") + s.name;
        c.fail(where, "unknown attribute " + io::quoted_excerpt(it.key()) + (known.empty() ? " (this op takes none)" : " (known: " + known + ")"));
      }
      n.attrs.values[spec->name] = parse_attr(c, where, *spec, it.value());
    }
  }
  for (const auto& spec : info.attrs) {
    if (n.attrs.has(spec.name)) continue;
    if (spec.required) c.fail(where, "attribute \"" + spec.name + "\" is required");
    if (spec.default_value) n.attrs.values[spec.name] = *spec.default_value;
  }
  return n;
}

// A control node agrees with its bodies: the body inputs are the op's own body inputs and the
// captures; a result reads an existing result of its node.
void check_control(const Ctx& c, const Graph& g, int i, const std::string& w) {
  const Node& n = g.nodes[i];
  if (op_info(n.op).category != Category::Control) return;
  const std::string where = w + where_node(i, n.id, op_name(n.op));
  auto results = [&](const Node& ctl) -> int64_t {
    if (int r = data_dependent_results(ctl.op)) return r;
    const Graph& b = *ctl.bodies.at(0);
    if (ctl.op == Op::Loop) return (int64_t)b.outputs.size() - 1;
    return (int64_t)b.outputs.size();
  };
  if (n.op == Op::Result) {
    const Node& ctl = g.nodes[n.inputs[0]];
    if (op_info(ctl.op).category != Category::Control || ctl.op == Op::Result)
      c.fail(where, "a result reads an if, loop or scan node, not '" + ctl.id + "' (" + op_name(ctl.op) + ")");
    int64_t k = n.attrs.i("index"), have = results(ctl);
    if (k < 0 || k >= have) c.fail(where, "index " + std::to_string(k) + ", but '" + ctl.id + "' has " + std::to_string(have) + " results");
    for (const auto& d : n.decl_shape)
      if (!d.symbol.empty()) c.fail(where, "a result's shape is concrete");
    return;
  }
  if (data_dependent_results(n.op)) return;  // no bodies; arity checked by the registry
  const int64_t nin = (int64_t)n.inputs.size(), ncap = n.attrs.i("num_captures");
  if (ncap < 0 || ncap > nin) c.fail(where, "num_captures is " + std::to_string(ncap) + " with " + std::to_string(nin) + " inputs");
  int64_t own = nin - ncap;  // the node's inputs before the captures
  int64_t body_in = ncap, min_out = 0;
  if (n.op == Op::If) {
    if (own != 1) c.fail(where, "takes the condition and its captures: " + std::to_string(nin) + " inputs with num_captures " + std::to_string(ncap));
  } else if (n.op == Op::Loop) {
    const int64_t nc = n.attrs.i("num_carried");
    if (nc < 0 || own != 2 + nc) c.fail(where, "takes M, cond, num_carried values and the captures: " + std::to_string(nin) + " inputs");
    body_in = nin;  // iteration number, condition, carried values, captures
    min_out = 1 + nc;
  } else {
    const int64_t ns = n.attrs.i("num_scan_inputs");
    if (ns < 1 || ns > own) c.fail(where, "num_scan_inputs is " + std::to_string(ns) + " with " + std::to_string(own) + " inputs before the captures");
    body_in = nin;
    min_out = own - ns;
  }
  for (size_t k = 0; k < n.bodies.size(); ++k) {
    const Graph& b = *n.bodies[k];
    const int64_t got = (int64_t)b.inputs_of_kind(Op::Input).size();
    if (got != body_in)
      c.fail(where, "bodies[" + std::to_string(k) + "] has " + std::to_string(got) + " inputs, the node gives it " + std::to_string(body_in));
    if ((int64_t)b.outputs.size() < min_out)
      c.fail(where, "bodies[" + std::to_string(k) + "] has " + std::to_string(b.outputs.size()) + " outputs, at least " + std::to_string(min_out) + " needed");
    if (n.op == Op::If && k == 1 && b.outputs.size() != n.bodies[0]->outputs.size())
      c.fail(where, "the two bodies have different numbers of outputs");
  }
}

// The nodes and outputs of a graph object: the file's top level, or a control node's body
// (`where` names it; a body is {"name"?, "nodes", "outputs"}).
Graph read_graph(const Ctx& c, const json& root, const std::string& where) {
  const std::string w = where.empty() ? "" : where + ": ";
  const LoadLimits& limits = c.limits;
  if (!where.empty()) {
    if (!root.is_object()) c.fail(where, "a body is an object with \"nodes\" and \"outputs\"");
    for (auto it = root.begin(); it != root.end(); ++it)
      if (it.key() != "nodes" && it.key() != "outputs" && it.key() != "name" && it.key() != "doc")
        c.fail(where, "unknown field \"" + it.key() + "\" in a body");
    if (!root.contains("nodes") || !root["nodes"].is_array()) c.fail(where, "\"nodes\" must be a list");
    if (!root.contains("outputs") || !root["outputs"].is_array() || root["outputs"].empty())
      c.fail(where, "\"outputs\" must be a non-empty list of node ids");
  }
  const json& jnodes = root["nodes"];
  *c.total += jnodes.size();
  if (*c.total > limits.max_nodes)
    c.fail(w + "nodes", "the graph has " + std::to_string(*c.total) + " nodes (bodies included); the limit is " + std::to_string(limits.max_nodes));

  Graph g;
  g.file = c.file;
  if (root.contains("name") && root["name"].is_string()) g.name = root["name"].get<std::string>();

  // Parse nodes in file order, then order them topologically.
  std::vector<Node> parsed;
  std::map<std::string, size_t> by_id;
  for (size_t i = 0; i < jnodes.size(); ++i) {
    Node n = parse_node(c, i, jnodes[i]);
    auto [it, fresh] = by_id.emplace(n.id, i);
    if (!fresh) c.fail(w + where_node(i, n.id), "duplicate id (first defined at nodes[" + std::to_string(it->second) + "])");
    parsed.push_back(std::move(n));
  }
  std::vector<std::vector<size_t>> deps(parsed.size());
  for (size_t i = 0; i < parsed.size(); ++i) {
    if (!jnodes[i].contains("inputs")) continue;
    for (const auto& e : jnodes[i]["inputs"]) {
      std::string src = e.get<std::string>();
      auto it = by_id.find(src);
      if (it == by_id.end())
        c.fail(w + where_node(i, parsed[i].id, op_name(parsed[i].op)), "input \"" + src + "\" is not a node of this graph");
      deps[i].push_back(it->second);
    }
  }
  // Kahn's algorithm, stable with respect to file order.
  std::vector<int> indeg(parsed.size(), 0);
  std::vector<std::vector<size_t>> users(parsed.size());
  for (size_t i = 0; i < parsed.size(); ++i)
    for (size_t d : deps[i]) {
      users[d].push_back(i);
      indeg[i]++;
    }
  std::vector<size_t> order, ready;
  for (size_t i = parsed.size(); i-- > 0;)
    if (indeg[i] == 0) ready.push_back(i);
  while (!ready.empty()) {
    size_t i = ready.back();
    ready.pop_back();
    order.push_back(i);
    for (auto it = users[i].rbegin(); it != users[i].rend(); ++it)
      if (--indeg[*it] == 0) ready.push_back(*it);
  }
  if (order.size() != parsed.size()) {
    // Walk dependencies among the unplaced nodes until one repeats: it is on a cycle.
    size_t cur = 0;
    while (indeg[cur] == 0) cur++;
    std::vector<bool> seen(parsed.size(), false);
    while (!seen[cur]) {
      seen[cur] = true;
      for (size_t d : deps[cur])
        if (indeg[d] != 0) { cur = d; break; }
    }
    c.fail(w + where_node(cur, parsed[cur].id, op_name(parsed[cur].op)), "the graph has a cycle through this node");
  }
  std::vector<int> new_index(parsed.size());
  for (size_t k = 0; k < order.size(); ++k) new_index[order[k]] = (int)k;
  for (size_t k = 0; k < order.size(); ++k) {
    size_t i = order[k];
    Node n = std::move(parsed[i]);
    for (size_t d : deps[i]) n.inputs.push_back(new_index[d]);
    g.index[n.id] = (int)k;
    g.nodes.push_back(std::move(n));
  }
  std::set<std::string> outs;
  for (const auto& o : root["outputs"]) {
    if (!o.is_string()) c.fail(w + "outputs", "entries must be node ids, got " + io::json_excerpt(o));
    int k = g.find(o.get<std::string>());
    if (k < 0) c.fail(w + "outputs", "\"" + o.get<std::string>() + "\" is not a node of this graph");
    if (!outs.insert(o.get<std::string>()).second) c.fail(w + "outputs", "\"" + o.get<std::string>() + "\" is listed twice");
    g.outputs.push_back(k);
  }
  if (root.contains("name") && root["name"].is_string()) g.name = root["name"].get<std::string>();
  for (int i = 0; i < (int)g.nodes.size(); ++i) {
    if (!where.empty() && g.nodes[i].op == Op::Param)
      c.fail(w + where_node(i, g.nodes[i].id, "param"), "a body holds no params: capture the weight (an input of the body), or make it a constant");
    check_control(c, g, i, w);
  }
  return g;
}

}  // namespace

bool has_symbolic_dims(const Graph& g) {
  for (const auto& n : g.nodes)
    for (const auto& d : n.decl_shape)
      if (!d.symbol.empty()) return true;
  return false;
}

Shape bind_dims(const std::vector<Dim>& decl, const std::map<std::string, int64_t>& bound, const std::string& what) {
  Shape shape;
  std::vector<std::string> missing;
  for (const auto& d : decl) {
    if (d.symbol.empty()) {
      shape.push_back(d.value);
    } else if (auto it = bound.find(d.symbol); it != bound.end()) {
      shape.push_back(it->second);
    } else if (std::find(missing.begin(), missing.end(), d.symbol) == missing.end()) {
      missing.push_back(d.symbol);
    }
  }
  if (missing.empty()) return shape;
  std::string names, flags;
  for (const auto& m : missing) names += (names.empty() ? "'" : ", '") + m + "'", flags += " --dim " + m + "=N";
  const bool many = missing.size() > 1;
  throw InputError(what + (many ? ": dimensions " : ": dimension ") + names + (many ? " are symbolic; give their sizes with" : " is symbolic; give its size with") + flags);
}

Graph load_graph_text(const std::string& text, const std::string& file_name, const LoadLimits& limits) {
  Ctx c{file_name, limits};
  if (!text.empty() && (text[0] == 0x08 || text.find('\0') != std::string::npos) && text.find_first_not_of(" \t\r\n") != std::string::npos &&
      text[text.find_first_not_of(" \t\r\n")] != '{')
    c.fail("", "this is a binary file (an ONNX model?), not an rlx JSON graph: run an ONNX model directly "
               "(rlx run model.onnx) or convert it (rlx convert model.onnx -o graph.json)");
  json root;
  try {
    root = io::parse_untrusted_json(text, file_name);
  } catch (const json::parse_error& e) {
    // e.byte is the 1-based byte offset; report a line and column.
    size_t line = 1, col = 1;
    for (size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') { line++; col = 1; } else { col++; }
    }
    c.fail("", "not valid JSON at line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + e.what());
  } catch (const json::exception& e) {
    // e.g. out_of_range 406 "number overflow parsing '1e999'": no position is reported.
    c.fail("", std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object()) c.fail("", "the top level must be an object with \"format\", \"version\", \"nodes\", \"outputs\"");
  if (!root.contains("format") || root["format"] != "rlx.graph")
    c.fail("format", "expected \"format\": \"rlx.graph\"" + (root.contains("format") ? ", got " + io::json_excerpt(root["format"]) : std::string()));
  int64_t version = 0;
  if (!root.contains("version") || !json_int(root["version"], version))
    c.fail("version", "\"version\" is required (an integer)");
  if (version != 1) c.fail("version", "unsupported version " + std::to_string(version) + "; this rlx reads version 1");
  if (!root.contains("nodes") || !root["nodes"].is_array()) c.fail("nodes", "\"nodes\" must be a list");
  if (!root.contains("outputs") || !root["outputs"].is_array() || root["outputs"].empty())
    c.fail("outputs", "\"outputs\" must be a non-empty list of node ids");
  size_t total = 0;
  c.total = &total;
  Graph g = read_graph(c, root, "");
  // Without symbolic dimensions every shape is known now: check the whole graph before anything runs.
  if (!has_symbolic_dims(g)) {
    std::map<std::string, Shape> in;
    for (const auto& n : g.nodes)
      if (n.op == Op::Input) {
        Shape s;
        for (auto& d : n.decl_shape) s.push_back(d.value);
        in[n.id] = s;
      }
    infer_shapes(g, in);
  }
  return g;
}

Graph load_graph_file(const std::string& path, const LoadLimits& limits) {
  auto bytes = io::read_file(path);
  return load_graph_text(std::string(bytes.begin(), bytes.end()), path, limits);
}

}  // namespace rlx::ir
