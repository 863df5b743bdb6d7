#include "ir/writer.h"

#include <nlohmann/json.hpp>

#include <cmath>

#include "core/error.h"
#include "io/file.h"
#include "ir/op_registry.h"

namespace rlx::ir {

namespace {

using json = nlohmann::json;

// The nodes and outputs of a graph (the file's, or a control node's body).
json graph_object(const Graph& g) {
  json root;
  if (!g.name.empty()) root["name"] = g.name;
  json nodes = json::array();
  for (const auto& n : g.nodes) {
    json jn;
    jn["id"] = n.id;
    jn["op"] = op_name(n.op);
    if (!n.inputs.empty()) {
      json ins = json::array();
      for (int i : n.inputs) ins.push_back(g.nodes[i].id);
      jn["inputs"] = ins;
    }
    bool leaf = op_info(n.op).category == Category::Leaf;
    // f64 and the 16/32/64-bit integer widths other than i32/i64 are ONNX-only dtypes: the
    // graph format does not name them, so a graph holding them has no JSON form.
    std::string dt_text = (leaf || n.op == Op::Result) ? dtype_name(n.dtype) : "";
    if (n.attrs.has("dtype") && parse_dtype(n.attrs.s("dtype"))) dt_text = n.attrs.s("dtype");
    if (!dt_text.empty() && !parse_json_dtype(dt_text))
      throw InputError(node_ref(g, n) + ": dtype " + dt_text + " is a dtype of ONNX models only (the graph format "
                       "names " + json_dtype_names() + "); the graph cannot be written as JSON");
    if (!n.bodies.empty()) {
      json bodies = json::array();
      for (const auto& b : n.bodies) bodies.push_back(graph_object(*b));
      jn["bodies"] = bodies;
    }
    if (leaf || n.op == Op::Result) {
      json shape = json::array();
      for (const auto& d : n.decl_shape) {
        if (d.symbol.empty()) shape.push_back(d.value);
        else shape.push_back(d.symbol);
      }
      jn["shape"] = shape;
      jn["dtype"] = dtype_name(n.dtype);
      if (n.op == Op::Param && n.param_name != n.id) jn["name"] = n.param_name;
      if (n.op == Op::Constant) {
        const Tensor& t = n.constant;
        json vals = json::array();
        for (int64_t k = 0; k < t.numel(); ++k) {
          if (n.dtype == DType::boolean) { vals.push_back(t.int_at(k) != 0); continue; }
          if (is_integer(n.dtype)) { vals.push_back(t.int_at(k)); continue; }  // exact, int64 included
          double v = t.at(k);
          if (!std::isfinite(v))
            throw InputError(node_ref(g, n) + ": constant holds a non-finite value (" + std::to_string(v) +
                             "), which JSON cannot represent; the graph cannot be written");
          vals.push_back((float)v);
        }
        if (t.rank() == 0 && t.numel() == 1) jn["value"] = vals[0];
        else jn["value"] = vals;
      }
    }
    if (!n.attrs.values.empty()) {
      json ja = json::object();
      for (const auto& kv : n.attrs.values) {
        const std::string& k = kv.first;
        const AttrValue& v = kv.second;
        std::visit([&ja, &k](const auto& x) { ja[k] = x; }, v);
        if (const double* d = std::get_if<double>(&v); d && !std::isfinite(*d))
          throw InputError(node_ref(g, n) + ": attribute '" + k + "' is not finite; the graph cannot be written");
      }
      jn["attrs"] = ja;
    }
    nodes.push_back(jn);
  }
  root["nodes"] = nodes;
  json outs = json::array();
  for (int o : g.outputs) outs.push_back(g.nodes[o].id);
  root["outputs"] = outs;
  return root;
}

}  // namespace

std::string graph_to_json(const Graph& g, int indent) {
  json root = graph_object(g);
  root["format"] = "rlx.graph";
  root["version"] = 1;
  return root.dump(indent) + "\n";
}

void write_graph_file(const std::string& path, const Graph& g) {
  std::string text = graph_to_json(g);
  io::write_file_atomic(path, text.data(), text.size());
}

}  // namespace rlx::ir
