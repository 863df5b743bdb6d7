// libFuzzer harness: graph JSON loader + validation + shape inference.
// load_graph_text, then, when the graph loads, infer_shapes with every symbolic
// dimension bound to small sizes (all 1, all 2, all 3, and distinct sizes per
// symbol), then node_flops on every node.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "ir/loader.h"
#include "ir/op_registry.h"

using namespace rlx;

namespace {

// Shapes for every input node, symbols bound by `size_of`.
template <class F>
std::map<std::string, Shape> bind_inputs(const ir::Graph& g, F size_of) {
  std::map<std::string, Shape> in;
  for (const auto& n : g.nodes) {
    if (n.op != ir::Op::Input) continue;
    Shape s;
    for (const auto& d : n.decl_shape) s.push_back(d.symbol.empty() ? d.value : size_of(d.symbol));
    in[n.id] = s;
  }
  return in;
}

void infer_all(const ir::Graph& g, const std::map<std::string, Shape>& in) {
  fuzz::expect_only_rlx_errors("fuzz_graph(infer)", [&] {
    ir::TypedShapes ts = ir::infer_shapes(g, in);
    for (int i = 0; i < (int)g.nodes.size(); ++i) (void)ir::node_flops(g, i, ts);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Smaller constant limit than the default (16M elements) only to keep the
  // harness fast; the check itself is the same code path.
  ir::LoadLimits limits;
  limits.max_constant_elements = 1 << 16;
  ir::Graph g;
  bool loaded = false;
  fuzz::expect_only_rlx_errors("fuzz_graph(load)", [&] {
    g = ir::load_graph_text(text, "fuzz.json", limits);
    loaded = true;
  });
  if (!loaded || !ir::has_symbolic_dims(g)) return 0;

  std::map<std::string, int64_t> symbols;
  for (const auto& n : g.nodes)
    for (const auto& d : n.decl_shape)
      if (!d.symbol.empty()) symbols.emplace(d.symbol, 1 + (int64_t)symbols.size() % 3);
  for (int64_t v : {1, 2, 3}) infer_all(g, bind_inputs(g, [v](const std::string&) { return v; }));
  infer_all(g, bind_inputs(g, [&](const std::string& s) { return symbols.at(s); }));
  return 0;
}
