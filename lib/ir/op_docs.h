#pragma once
// Documentation generated from the op registry, so that no hand copy can drift from it:
//  - the op tables of docs/graph-format.md (between its "generated" markers);
//  - docs/graph-format.schema.json, the graph format's JSON Schema.
// tests/test_ops.cpp (OpsDocs) checks that the files hold exactly this; scripts/gen_docs.sh
// rewrites them.
#include <string>

#include <nlohmann/json.hpp>

namespace rlx::ir {

// "leaves": | op | bound from |;  "ops": | op | inputs | attributes (default) | result |.
// Consecutive ops (in ops.def order) with the same inputs, attributes and result share a row.
std::string op_table_markdown(const std::string& which);

// The JSON Schema of a v1 graph: one entry per op with its attributes, their types and
// which are required (attributes beyond these are refused, as the loader does).
nlohmann::ordered_json graph_schema();

// Replaces the text between "<!-- BEGIN generated: NAME ... -->" and "<!-- END generated: NAME -->"
// in `doc` with `body`; false when the markers are missing.
bool replace_generated(std::string& doc, const std::string& name, const std::string& body);
// The text between those markers ("" and false when missing).
bool generated_part(const std::string& doc, const std::string& name, std::string* body);

}  // namespace rlx::ir
