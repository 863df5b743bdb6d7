#include "runtime/inspect.h"

#include <map>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "ir/loader.h"
#include "ir/op_registry.h"
#include "runtime/bench.h"
#include "runtime/executor.h"
#include "runtime/onnx_binding.h"
#include "runtime/runner.h"

namespace rlx {

std::string inspect_text(const std::string& path, const std::vector<std::string>& dims, bool dot) {
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
  s << "inputs:\n";
  for (int i : g.inputs_of_kind(ir::Op::Input)) {
    std::string dimsx;
    for (auto& d : g.nodes[i].decl_shape) dimsx += (dimsx.empty() ? "" : ", ") + (d.symbol.empty() ? std::to_string(d.value) : d.symbol);
    s << fmt::format("  {} [{}] {}\n", g.nodes[i].id, dimsx, dtype_name(g.nodes[i].dtype));
  }
  if (!bound) {
    s << "outputs and FLOPs need the symbolic dimension(s) " << unbound << ": pass --dim NAME=SIZE\n";
    s << "outputs:";
    for (int o : g.outputs) s << " " << g.nodes[o].id;
    s << "\n";
    return s.str();
  }
  auto ts = ir::infer_shapes(g, in_shapes);
  s << "outputs:\n";
  for (int o : g.outputs) s << fmt::format("  {} {} {}\n", g.nodes[o].id, shape_str(ts.shapes[o]), dtype_name(ts.dtypes[o]));
  s << fmt::format("FLOPs per run: {:.6g} ({:.3f} GFLOP)\n", graph_flops(g, ts), graph_flops(g, ts) / 1e9);
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
