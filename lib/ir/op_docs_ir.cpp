// Documentation generated from the op registry (see op_docs.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ir/op_docs.h"
#include "ir/op_registry.h"

namespace rlx::ir {
namespace {

std::string format_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  std::string s = buf;
  // 1e-05 -> 1e-5
  auto e = s.find("e-0");
  if (e != std::string::npos) s.erase(e + 2, 1);
  if (s.find_first_of(".e") == std::string::npos && std::isfinite(v)) s += ".0";
  return s;
}

std::string default_text(const AttrSpec& a) {
  if (a.required) return "required";
  if (!a.default_value) return "";
  const AttrValue& v = *a.default_value;
  std::string s;
  if (auto p = std::get_if<int64_t>(&v)) s = std::to_string(*p);
  else if (auto p = std::get_if<double>(&v)) s = format_double(*p);
  else if (auto p = std::get_if<bool>(&v)) s = *p ? "true" : "false";
  else if (auto p = std::get_if<std::string>(&v)) s = "\"" + *p + "\"";
  else if (auto p = std::get_if<std::vector<int64_t>>(&v)) {
    s = "[";
    for (size_t i = 0; i < p->size(); ++i) s += (i ? ", " : "") + std::to_string((*p)[i]);
    s += "]";
  }
  if (a.choices.size() > 1) {  // the other choices of a string
    std::string others;
    for (const auto& c : a.choices)
      if (!(std::get_if<std::string>(&v) && *std::get_if<std::string>(&v) == c)) others += (others.empty() ? "" : ", ") + ("\"" + c + "\"");
    s += "; or " + others;
  }
  return s;
}

std::string attrs_text(const OpInfo& info, const OpDoc& doc) {
  std::string s;
  for (const auto& a : info.attrs) {
    auto note = doc.attr_notes.find(a.name);
    std::string d = note != doc.attr_notes.end() ? note->second : default_text(a);
    s += (s.empty() ? "" : ", ") + ("`" + a.name + "`") + (d.empty() ? "" : " (" + d + ")");
  }
  return s;
}

nlohmann::ordered_json attr_schema(const AttrSpec& a) {
  using oj = nlohmann::ordered_json;
  switch (a.type) {
    case AttrType::Int: return oj{{"type", "integer"}};
    case AttrType::Float: return oj{{"type", "number"}};
    case AttrType::Bool: return oj{{"type", "boolean"}};
    case AttrType::Ints: return oj{{"$ref", "#/$defs/ints"}};
    case AttrType::Dtype: return oj{{"$ref", "#/$defs/dtype"}};
    case AttrType::String: return a.choices.empty() ? oj{{"type", "string"}} : oj{{"enum", a.choices}};
    default: return oj{{"type", "array"}, {"items", {{"type", "number"}}}};  // a list of numbers
  }
}

}  // namespace

std::string op_table_markdown(const std::string& which) {
  const bool leaves = which == "leaves";
  std::string out = leaves ? "| op | bound from |\n| --- | --- |\n"
                           : "| op | inputs | attributes (default) | result |\n| --- | --- | --- | --- |\n";
  std::string names, last_key, last_row;
  auto flush = [&] {
    if (!names.empty()) out += "| " + names + " | " + last_row + " |\n";
    names.clear();
  };
  for (const auto& name : all_op_names()) {
    const OpInfo& info = op_info(*op_from_name(name));
    if ((info.category == Category::Leaf) != leaves) continue;
    const OpDoc& doc = op_doc(info.op);
    std::string row = leaves ? doc.result : doc.inputs + " | " + attrs_text(info, doc) + " | " + doc.result;
    if (row != last_row) flush();
    last_row = row;
    names += (names.empty() ? "" : " ") + ("`" + name + "`");
  }
  flush();
  return out;
}

nlohmann::ordered_json graph_schema() {
  using oj = nlohmann::ordered_json;
  oj s;
  s["$schema"] = "https://json-schema.org/draft/2020-12/schema";
  s["$id"] = "https://rlx.dev/schemas/graph-v1.json";
  s["title"] = "rlx graph, version 1";
  s["type"] = "object";
  s["required"] = {"format", "version", "nodes", "outputs"};
  s["properties"]["format"] = {{"const", "rlx.graph"}};
  s["properties"]["version"] = {{"const", 1}};
  s["properties"]["name"] = {{"type", "string"}};
  s["properties"]["nodes"] = {{"type", "array"}, {"items", {{"$ref", "#/$defs/node"}}}};
  s["properties"]["outputs"] = {{"type", "array"}, {"minItems", 1}, {"uniqueItems", true}, {"items", {{"type", "string"}}}};
  oj& defs = s["$defs"];
  defs["ints"] = {{"type", "array"}, {"items", {{"type", "integer"}}}};
  oj dtypes = oj::array();
  for (const auto& d : kDTypeTable)  // core/dtype.h's table: the dtypes the graph format names
    if (d.json) dtypes.push_back(d.name);
  defs["dtype"] = {{"enum", dtypes}};
  defs["dim"] = {{"oneOf", {{{"type", "integer"}, {"minimum", 0}}, {{"type", "string"}, {"minLength", 1}}}}};
  defs["value"] = {{"oneOf", {{{"type", "number"}}, {{"type", "boolean"}}, {{"type", "array"}, {"items", {{"$ref", "#/$defs/value"}}}}}}};
  oj& node = defs["node"];
  node["type"] = "object";
  node["required"] = {"id", "op"};
  node["additionalProperties"] = false;
  oj& np = node["properties"];
  np["id"] = {{"type", "string"}, {"minLength", 1}};
  np["op"] = {{"type", "string"}};
  np["inputs"] = {{"type", "array"}, {"items", {{"type", "string"}}}};
  np["attrs"] = {{"type", "object"}};
  np["shape"] = {{"type", "array"}, {"items", {{"$ref", "#/$defs/dim"}}}};
  np["dtype"] = {{"$ref", "#/$defs/dtype"}};
  np["name"] = {{"type", "string"}};
  np["value"] = {{"$ref", "#/$defs/value"}};
  np["doc"] = {{"type", "string"}};
  np["comment"] = {{"type", "string"}};
  np["bodies"] = {{"type", "array"}, {"items", {{"$ref", "#/$defs/body"}}}};
  defs["body"] = {{"type", "object"},
                  {"required", {"nodes", "outputs"}},
                  {"additionalProperties", false},
                  {"properties",
                   {{"name", {{"type", "string"}}},
                    {"doc", {{"type", "string"}}},
                    {"nodes", {{"type", "array"}, {"items", {{"$ref", "#/$defs/node"}}}}},
                    {"outputs", {{"type", "array"}, {"minItems", 1}, {"uniqueItems", true}, {"items", {{"type", "string"}}}}}}}};
  oj one = oj::array();
  oj leaves = oj::array();
  std::vector<std::string> names;
  for (const auto& name : all_op_names()) {
    if (op_info(*op_from_name(name)).category == Category::Leaf) leaves.push_back(name);
    else names.push_back(name);
  }
  one.push_back({{"properties", {{"op", {{"enum", leaves}}}}}, {"required", {"shape"}}});
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    const OpInfo& info = op_info(*op_from_name(name));
    oj attrs;
    attrs["type"] = "object";
    attrs["additionalProperties"] = false;
    attrs["properties"] = oj::object();
    oj required = oj::array();
    for (const auto& a : info.attrs) {
      attrs["properties"][a.name] = attr_schema(a);
      if (a.required) required.push_back(a.name);
    }
    if (!required.empty()) attrs["required"] = required;
    oj e;
    e["properties"]["op"] = {{"const", name}};
    e["properties"]["attrs"] = attrs;
    e["required"] = required.empty() ? oj{"inputs"} : oj{"inputs", "attrs"};
    if (info.category == Category::Control && !data_dependent_results(info.op)) e["required"].push_back(info.op == Op::Result ? "shape" : "bodies");
    if (info.op == Op::Result) e["required"].push_back("dtype");
    one.push_back(e);
  }
  node["oneOf"] = one;
  return s;
}

namespace {
bool find_markers(const std::string& doc, const std::string& name, size_t* b, size_t* e) {
  const std::string open = "<!-- BEGIN generated: " + name, close = "<!-- END generated: " + name + " -->";
  size_t o = doc.find(open);
  if (o == std::string::npos) return false;
  size_t nl = doc.find("-->", o);
  if (nl == std::string::npos) return false;
  nl = doc.find('\n', nl);
  size_t c = doc.find(close, nl == std::string::npos ? o : nl);
  if (nl == std::string::npos || c == std::string::npos) return false;
  *b = nl + 1;
  *e = c;
  return true;
}
}  // namespace

bool replace_generated(std::string& doc, const std::string& name, const std::string& body) {
  size_t b, e;
  if (!find_markers(doc, name, &b, &e)) return false;
  doc.replace(b, e - b, body);
  return true;
}

bool generated_part(const std::string& doc, const std::string& name, std::string* body) {
  size_t b, e;
  body->clear();
  if (!find_markers(doc, name, &b, &e)) return false;
  *body = doc.substr(b, e - b);
  return true;
}

}  // namespace rlx::ir
