#include "runtime/inspect.h"

#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "ir/loader.h"
#include "ir/op_registry.h"
#include "onnx/model.h"
#include "runtime/bench.h"
#include "runtime/executor.h"
#include "runtime/onnx_binding.h"
#include "runtime/runner.h"

namespace rlx {

namespace {

nlohmann::json dims_json(const std::vector<ir::Dim>& ds) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& d : ds) {
    if (d.symbol.empty()) a.push_back(d.value);
    else a.push_back(d.symbol.rfind("?", 0) == 0 ? "?" : d.symbol);
  }
  return a;
}
std::string dims_text(const std::vector<ir::Dim>& ds) {
  std::string r;
  for (const auto& d : ds) r += (r.empty() ? "" : ", ") + (d.symbol.empty() ? std::to_string(d.value) : d.symbol.rfind("?", 0) == 0 ? "?" : d.symbol);
  return "[" + r + "]";
}

// An ONNX model whose symbolic dimensions are not all given: what can be said without
// specialising it (the inputs' and the declared outputs' symbolic shapes, the ONNX ops).
std::string onnx_symbolic_summary(const onnx::Model& m, const std::string& path, const std::vector<std::string>& unbound, bool json) {
  std::map<std::string, int> by_op;
  for (const auto& n : m.nodes()) by_op[n.op_type]++;
  int64_t init_values = 0;
  for (const auto& [name, t] : m.initializers()) init_values += t->numel;
  std::string list;
  for (const auto& u : unbound) list += (list.empty() ? "" : ", ") + u;
  auto elem_type = [](int et) {  // rlx's dtype names where rlx has the type, else ONNX's
    try {
      return std::string(dtype_name(onnx::to_dtype(et, "")));
    } catch (const Error&) {
      return std::string(onnx::elem_type_name(et));
    }
  };
  // "f32", "sequence of f32", "optional f32", "optional sequence of f32"
  auto value_type = [&](const onnx::ValueInfo& vi) {
    const onnx::ValueType& t = vi.type;
    return std::string(t.kind == onnx::ValueKind::Optional ? "optional " : "") + (t.is_sequence() ? "sequence of " : "") + elem_type(vi.elem_type);
  };
  if (json) {
    nlohmann::json j;
    j["graph"] = path;
    j["format"] = "onnx";
    j["opset"] = m.opset();
    j["onnx_nodes"] = m.nodes().size();
    j["onnx_ops"] = by_op;
    j["initializers"] = {{"tensors", m.initializers().size()}, {"values", init_values}};
    for (const char* k : {"inputs", "outputs"}) j[k] = nlohmann::json::array();
    for (const auto& vi : m.inputs())
      if (!m.is_default_input(vi.name))
        j["inputs"].push_back({{"name", vi.name}, {"shape", vi.has_shape ? dims_json(vi.dims) : nlohmann::json()}, {"dtype", value_type(vi)}});
    for (const auto& vi : m.outputs())
      j["outputs"].push_back({{"name", vi.name}, {"shape", vi.has_shape ? dims_json(vi.dims) : nlohmann::json()}, {"dtype", value_type(vi)}});
    j["unbound_dims"] = unbound;
    j["note"] = unbound.empty() ? "output shapes as declared in the model; the imported graph depends on the tensors of its sequence or optional inputs"
                              : "output shapes as declared in the model; the imported graph, its shapes and FLOPs need --dim NAME=SIZE for " + list;
    return j.dump(2) + "\n";
  }
  std::ostringstream s;
  s << fmt::format("graph: {} (onnx, opset {})\n", path, m.opset());
  s << fmt::format("ONNX nodes: {}\n", m.nodes().size());
  for (const auto& [op, c] : by_op) s << fmt::format("  {:<24} {}\n", op, c);
  s << fmt::format("initializers: {} tensors, {} values\n", m.initializers().size(), init_values);
  s << "inputs:\n";
  for (const auto& vi : m.inputs())
    if (!m.is_default_input(vi.name))
      s << fmt::format("  {} {} {}\n", vi.name, vi.has_shape ? dims_text(vi.dims) : "(shape not declared)", value_type(vi));
  s << "outputs (as declared in the model):\n";
  for (const auto& vi : m.outputs())
    s << fmt::format("  {} {} {}\n", vi.name, vi.has_shape ? dims_text(vi.dims) : "(shape not declared)", value_type(vi));
  if (!unbound.empty()) s << "the imported graph (registry ops, shapes, FLOPs) needs the symbolic dimension(s) " << list << ": pass --dim NAME=SIZE\n";
  else s << "the imported graph (registry ops, shapes, FLOPs) depends on the tensors of its sequence or optional inputs (rlx run MODEL --input NAME.0=SPEC --input NAME.1=SPEC ...)\n";
  return s.str();
}

}  // namespace

// The quantized weights a graph states (rlx quantize, ONNX quantized models): each param or
// constant read as the integer operand of matmul_nbits, matmul_integer(_scaled) or dequantize,
// with its dtype, shape, scales, zero points and layout.
static nlohmann::json quantized_weights(const ir::Graph& g) {
  nlohmann::json r = nlohmann::json::array();
  auto leaf = [&](int i) { return g.nodes[i].op == ir::Op::Param || g.nodes[i].op == ir::Op::Constant; };
  auto desc = [&](int i) {
    const ir::Node& n = g.nodes[i];
    std::string sh;
    for (const auto& d : n.decl_shape) sh += (sh.empty() ? "" : ", ") + (d.symbol.empty() ? std::to_string(d.value) : d.symbol);
    const std::string name = n.op == ir::Op::Param && n.param_name != n.id ? n.param_name : n.id;
    return std::make_pair(name, fmt::format("{} [{}]", dtype_name(n.dtype), sh));
  };
  std::vector<std::vector<int>> users(g.nodes.size());
  for (int i = 0; i < (int)g.nodes.size(); ++i)
    for (int k : g.nodes[i].inputs) users[k].push_back(i);
  auto only_user = [&](int i, ir::Op op) { return users[i].size() == 1 && g.nodes[users[i][0]].op == op ? users[i][0] : -1; };
  // The weight scales of matmul_integer -> cast -> mul(scale): scale a leaf, or a mul of the
  // activation's scale and a leaf (rlx quantize's and quantize_dynamic's form).
  auto integer_scales = [&](int mm) {
    const int c = only_user(mm, ir::Op::Cast), m = c >= 0 ? only_user(c, ir::Op::Mul) : -1;
    if (m < 0) return -1;
    for (int s : g.nodes[m].inputs) {
      if (s == c) continue;
      if (leaf(s)) return s;
      if (g.nodes[s].op == ir::Op::Mul)
        for (int t : g.nodes[s].inputs)
          if (leaf(t) && g.nodes[t].dtype == DType::f32) return t;
    }
    return -1;
  };
  for (int i = 0; i < (int)g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    int w = -1, sc = -1, zp = -1;
    std::string layout;
    if (n.op == ir::Op::MatmulNbits) {
      w = n.inputs[1], sc = n.inputs[2], zp = n.inputs.size() > 3 ? n.inputs[3] : -1;
      layout = fmt::format("{}-bit blocks of {} along K (k = {}, n = {}), zero point {}", n.attrs.i("bits"), n.attrs.i("block_size"),
                           n.attrs.i("k"), n.attrs.i("n"), zp >= 0 ? "per block" : std::to_string(1 << (n.attrs.i("bits") - 1)));
    } else if (n.op == ir::Op::MatmulInteger || n.op == ir::Op::MatmulIntegerScaled) {
      w = n.inputs[1], zp = n.inputs.size() > 3 ? n.inputs[3] : -1;
      sc = n.op == ir::Op::MatmulIntegerScaled ? n.inputs[4] : integer_scales(i);
      layout = "[K, N] weight of an exact i32 product, scaled after it";
    } else if (n.op == ir::Op::Dequantize) {
      w = n.inputs[0], sc = n.inputs[1], zp = n.inputs.size() > 2 ? n.inputs[2] : -1;
      layout = n.attrs.has("block_size") && n.attrs.i("block_size") > 0 ? fmt::format("blocks of {} along axis {}", n.attrs.i("block_size"), n.attrs.i("axis"))
                                                                          : fmt::format("axis {}", n.attrs.i("axis"));
    }
    if (w < 0 || !leaf(w)) continue;
    auto [wname, wdesc] = desc(w);
    nlohmann::json e{{"node", n.id}, {"op", ir::op_name(n.op)}, {"weight", wname}, {"weight_type", wdesc}, {"layout", layout}};
    std::string text = fmt::format("{} ({}): {} {}", n.id, ir::op_name(n.op), wname, wdesc);
    if (sc >= 0 && leaf(sc)) {
      auto [sn, sd] = desc(sc);
      e["scales"] = sn, e["scales_type"] = sd;
      text += fmt::format(", scales {} {}", sn, sd);
    }
    if (zp >= 0 && leaf(zp)) {
      auto [zn, zd] = desc(zp);
      e["zero_points"] = zn, e["zero_points_type"] = zd;
      text += fmt::format(", zero points {} {}", zn, zd);
    }
    text += "; " + layout;
    e["text"] = text;
    r.push_back(e);
  }
  return r;
}

std::string inspect_text(const std::string& path, const std::vector<std::string>& dims, bool dot, bool json) {
  if (is_onnx_file(path) && !dot) {
    std::shared_ptr<onnx::Model> m = onnx::Model::load(path);
    std::map<std::string, int64_t> given = parse_dims(dims);
    std::set<std::string> known;
    std::vector<std::string> unbound;
    for (const auto& vi : m->inputs())
      for (const auto& d : vi.dims)
        if (!d.symbol.empty() && known.insert(d.symbol).second && !given.count(d.symbol) && !m->is_default_input(vi.name) &&
            d.symbol.rfind("?", 0) != 0 && vi.type.kind == onnx::ValueKind::Tensor)
          unbound.push_back(d.symbol);
    check_dim_names(given, known, path);
    bool sequences = false;  // a sequence's length and shapes come only with its tensors (rlx run)
    for (const auto& vi : m->inputs()) sequences = sequences || vi.type.kind != onnx::ValueKind::Tensor;
    if (!unbound.empty() || sequences) return onnx_symbolic_summary(*m, path, unbound, json);
  }
  ir::Graph g = is_onnx_file(path) ? *onnx_graph_for(path, dims) : ir::load_graph_file(path);
  std::map<std::string, int64_t> sym = parse_dims(dims);
  if (!is_onnx_file(path)) {  // (an ONNX model's names are checked as it is specialised)
    std::set<std::string> known;
    for (const auto& n : g.nodes)
      for (const auto& d : n.decl_shape)
        if (!d.symbol.empty()) known.insert(d.symbol);
    check_dim_names(sym, known, path);
  }
  std::ostringstream s;
  if (dot) {
    s << "digraph \"" << (g.name.empty() ? "graph" : g.name) << "\" {\n  rankdir=TB;\n";
    for (const auto& n : g.nodes) {
      const char* shape = n.op == ir::Op::Input ? "invhouse" : n.op == ir::Op::Param ? "box" : n.op == ir::Op::Constant ? "note" : "ellipse";
      s << fmt::format("  \"{}\" [label=\"{}\\n{}\", shape={}];\n", n.id, n.id, ir::op_name(n.op), shape);
      for (int u : n.inputs) s << fmt::format("  \"{}\" -> \"{}\";\n", g.nodes[u].id, n.id);
    }
    for (int o : g.outputs) s << fmt::format("  \"{}\" [peripheries=2];\n", g.nodes[o].id);
    s << "}\n";
    return s.str();
  }
  std::map<std::string, int> by_op;
  int64_t param_count = 0, param_bytes = 0;
  std::map<DType, std::pair<int64_t, int64_t>> param_by_dtype;  // values, bytes
  std::map<std::string, Shape> in_shapes;
  bool bound = true;
  std::string unbound;
  for (const auto& n : g.nodes) {
    by_op[ir::op_name(n.op)]++;
    if (n.op == ir::Op::Param) {
      Shape sh;
      for (auto& d : n.decl_shape) sh.push_back(d.value);
      param_count += shape_numel(sh);
      param_bytes += shape_numel(sh) * (int64_t)dtype_size(n.dtype);
      param_by_dtype[n.dtype].first += shape_numel(sh);
      param_by_dtype[n.dtype].second += shape_numel(sh) * (int64_t)dtype_size(n.dtype);
    }
    if (n.op == ir::Op::Input) {
      Shape sh;
      for (auto& d : n.decl_shape) {
        if (d.symbol.empty()) sh.push_back(d.value);
        else if (sym.count(d.symbol)) sh.push_back(sym[d.symbol]);
        else { bound = false; unbound += (unbound.empty() ? "" : ", ") + d.symbol; sh.push_back(1); }
      }
      in_shapes[n.id] = sh;
    }
  }
  s << fmt::format("graph: {}{}\n", path, g.name.empty() ? "" : " (" + g.name + ")");
  s << fmt::format("nodes: {}\n", g.nodes.size());
  for (const auto& [op, c] : by_op) s << fmt::format("  {:<24} {}\n", op, c);
  s << fmt::format("parameters: {} values, {:.3f} MiB as stored in the graph's dtypes\n", param_count, param_bytes / 1048576.0);
  for (const auto& [dt, cb] : param_by_dtype)  // bytes per dtype: what the params occupy in memory
    s << fmt::format("  {:<5} {} values, {} bytes ({:.3f} MiB)\n", dtype_name(dt), cb.first, cb.second, cb.second / 1048576.0);
  const nlohmann::json qw = quantized_weights(g);
  if (!qw.empty()) {
    s << "quantized weights:\n";
    for (const auto& w : qw) s << "  " << w["text"].get<std::string>() << "\n";
  }
  s << "inputs:\n";
  nlohmann::json j;
  j["quantized_weights"] = qw;
  j["graph"] = path;
  j["format"] = is_onnx_file(path) ? "onnx" : "rlx.graph";
  j["nodes"] = g.nodes.size();
  j["ops"] = by_op;
  j["parameters"] = {{"values", param_count}, {"bytes", param_bytes}};
  j["inputs"] = nlohmann::json::array();
  j["outputs"] = nlohmann::json::array();
  for (int i : g.inputs_of_kind(ir::Op::Input)) {
    s << fmt::format("  {} {} {}\n", g.nodes[i].id, dims_text(g.nodes[i].decl_shape), dtype_name(g.nodes[i].dtype));
    j["inputs"].push_back({{"name", g.nodes[i].id}, {"shape", dims_json(g.nodes[i].decl_shape)}, {"dtype", dtype_name(g.nodes[i].dtype)}});
  }
  if (!bound) {
    s << "outputs and FLOPs need the symbolic dimension(s) " << unbound << ": pass --dim NAME=SIZE\n";
    s << "outputs:";
    for (int o : g.outputs) {
      s << " " << g.nodes[o].id;
      j["outputs"].push_back({{"name", g.nodes[o].id}, {"shape", nullptr}, {"dtype", nullptr}});
    }
    s << "\n";
    std::vector<std::string> ub;
    std::stringstream ss(unbound);
    for (std::string x; std::getline(ss, x, ',');) ub.push_back(x.substr(x.find_first_not_of(' ')));
    j["unbound_dims"] = ub;
    return json ? j.dump(2) + "\n" : s.str();
  }
  auto ts = ir::infer_shapes(g, in_shapes);
  s << "outputs:\n";
  for (int o : g.outputs) {
    s << fmt::format("  {} {} {}\n", g.nodes[o].id, shape_str(ts.shapes[o]), dtype_name(ts.dtypes[o]));
    j["outputs"].push_back({{"name", g.nodes[o].id}, {"shape", ts.shapes[o]}, {"dtype", dtype_name(ts.dtypes[o])}});
  }
  s << fmt::format("FLOPs per run: {:.6g} ({:.3f} GFLOP)\n", graph_flops(g, ts), graph_flops(g, ts) / 1e9);
  j["flops"] = graph_flops(g, ts);
  j["unbound_dims"] = nlohmann::json::array();
  if (json) {
    j["bytes_moved"] = graph_bytes(g, ts);
    return j.dump(2) + "\n";
  }
  std::map<DType, std::pair<int64_t, int64_t>> results;  // computed values by dtype: count, bytes
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (ir::op_info(g.nodes[i].op).category == ir::Category::Leaf) continue;
    results[ts.dtypes[i]].first += shape_numel(ts.shapes[i]);
    results[ts.dtypes[i]].second += shape_numel(ts.shapes[i]) * (int64_t)dtype_size(ts.dtypes[i]);
  }
  s << "computed values by dtype (every node's result, before memory reuse):\n";
  for (const auto& [dt, cb] : results)
    s << fmt::format("  {:<5} {} values, {} bytes ({:.3f} MiB)\n", dtype_name(dt), cb.first, cb.second, cb.second / 1048576.0);
  s << fmt::format("bytes moved per run (unfused, in each tensor's dtype): {:.3f} MB\n", graph_bytes(g, ts) / 1e6);
  return s.str();
}

std::string devices_text(const std::string& backend) {
  std::vector<std::string> names = backend == "all" ? backend_names() : std::vector<std::string>{backend};
  std::ostringstream s;
  for (const auto& b : names) {
    if (b != "cpu" && b != "vulkan") throw InputError("--backend: unknown backend \"" + b + "\"; valid: cpu, vulkan, all");
    std::vector<DeviceInfo> devs;
    try {
      devs = list_devices(b);
    } catch (const RuntimeError& e) {
      if (backend != "all") throw;
      s << b << ": unavailable: " << e.what() << "\n";
      continue;
    }
    if (devs.empty()) {
      s << b << ": no devices" << (b == "vulkan" ? " (this rlx was built without Vulkan)" : "") << "\n";
      continue;
    }
    for (size_t i = 0; i < devs.size(); ++i) {
      const auto& d = devs[i];
      s << fmt::format("{} device {}: {} ({})", b, i, d.name, d.type);
      if (d.memory_bytes) s << fmt::format(", {:.1f} GiB", d.memory_bytes / 1073741824.0);
      s << "\n";
      for (const auto& [k, v] : d.properties) s << fmt::format("    {:<28} {}\n", k, v);
    }
  }
  return s.str();
}

}  // namespace rlx
