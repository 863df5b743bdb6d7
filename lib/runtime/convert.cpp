// rlx convert GRAPH.json (convert.h).
#include "runtime/convert.h"

#include <filesystem>

#include "core/error.h"
#include "io/file.h"
#include "io/safetensors.h"
#include "ir/loader.h"
#include "ir/writer.h"
#include "runtime/params.h"
#include "runtime/runner.h"

namespace rlx {

void convert_graph(const std::string& graph, const std::vector<std::string>& params, const std::string& graph_out,
                   const std::string& params_out) {
  auto ends_with = [](const std::string& s, const std::string& e) { return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0; };
  if (!params_out.empty() && !ends_with(params_out, ".safetensors"))
    throw InputError("--params-out " + params_out + ": rlx convert writes the weights as safetensors; give a file name ending in .safetensors");
  const ir::Graph g = ir::load_graph_file(graph);
  const bool has_params = !g.inputs_of_kind(ir::Op::Param).empty();
  if (has_params && params_out.empty()) throw InputError(graph + " reads parameters: give --params-out FILE.safetensors");
  std::error_code ec;
  for (const std::string& o : {graph_out, params_out}) {
    if (o.empty()) continue;
    if (std::filesystem::exists(o, ec) && std::filesystem::equivalent(o, graph, ec))
      throw InputError(o + " is the graph being converted; write to another file");
    for (const auto& p : params)
      if (std::filesystem::exists(o, ec) && std::filesystem::equivalent(o, p, ec))
        throw InputError(o + " is a --params file being read; write to another file");
    prepare_output_file(o);
  }
  std::vector<std::pair<std::string, Tensor>> ts;
  if (has_params) {
    ParamStore store;
    for (const auto& p : params) store.add(p);
    const auto bound = bind_params(g, store, BindOptions{}, nullptr);  // checks dtypes and shapes
    for (int i : g.inputs_of_kind(ir::Op::Param)) ts.emplace_back(g.nodes[i].param_name, bound.at(g.nodes[i].id));
  }
  const std::string text = ir::graph_to_json(g);
  if (has_params) io::write_safetensors(params_out, ts);
  try {
    io::write_file_atomic(graph_out, text.data(), text.size());
  } catch (...) {
    if (has_params) std::filesystem::remove(params_out);  // both files or neither
    throw;
  }
}

}  // namespace rlx
