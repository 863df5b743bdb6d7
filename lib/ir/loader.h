#pragma once
// Loads a graph file (docs/graph-format.md) into the IR, validating everything
// that can be checked without input values. Throws InputError naming the file,
// the node id, its JSON location and what was expected.
#include <string>

#include "ir/graph.h"

namespace rlx::ir {

struct LoadLimits {
  size_t max_nodes = 1'000'000;
  size_t max_inputs_per_node = 4096;
  size_t max_rank = 16;
  size_t max_constant_elements = 1 << 24;
  int max_body_depth = 16;  // nesting of control-flow bodies (if/loop/scan) below the graph
};

Graph load_graph_file(const std::string& path, const LoadLimits& limits = {});
Graph load_graph_text(const std::string& text, const std::string& file_name, const LoadLimits& limits = {});

// Graph with every param/input shape concrete: shapes can be inferred at load.
bool has_symbolic_dims(const Graph& g);

// The shape `decl` declares, its symbols looked up in `bound`. A symbol missing there throws
// InputError starting with `what`, naming every missing one and the --dim flags that give them.
Shape bind_dims(const std::vector<Dim>& decl, const std::map<std::string, int64_t>& bound, const std::string& what);

}  // namespace rlx::ir
