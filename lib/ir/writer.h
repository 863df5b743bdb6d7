#pragma once
// Writes an IR graph as an rlx.graph version 1 JSON file (docs/graph-format.md): the inverse
// of loader.h. Every attribute is written with its value (defaults included), leaves with
// their shape and dtype, constants with their values (flat, row-major). Non-finite constant
// values cannot be written as JSON and are refused with InputError naming the node.
#include <string>

#include "ir/graph.h"

namespace rlx::ir {

std::string graph_to_json(const Graph& g, int indent = 1);
// Atomic: a temporary file in the same directory, then a rename.
void write_graph_file(const std::string& path, const Graph& g);

}  // namespace rlx::ir
