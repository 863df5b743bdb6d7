// The ONNX-style ops (issue 12) beyond their golden cases (tests/golden/op_*):
//  - the published JSON Schema agrees with the op registry (names, attributes, types, required);
//  - run-time errors: gather/gather_elements indices out of range exit 3 naming the node, on
//    every backend and in every mode;
//  - load-time errors for bad attributes and shapes name the node (exit 2);
//  - compiled mode: compares and logical ops fuse and keep their bool dtype, the new
//    elementwise ops fuse, constant indexing folds to the value NumPy gives (hand-computed).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/npy.h"
#include "ir/loader.h"
#include "ir/op_docs.h"
#include "ir/op_registry.h"
#include "passes/passes.h"
#include "runtime/executor.h"
#include "test_util.h"

namespace {

using json = nlohmann::json;
using namespace rlx;

bool has(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }

// ---------------------------------------------------------------- schema vs registry

json schema_type(const ir::AttrSpec& a) {
  switch (a.type) {
    case ir::AttrType::Int: return {{"type", "integer"}};
    case ir::AttrType::Float: return {{"type", "number"}};
    case ir::AttrType::Bool: return {{"type", "boolean"}};
    case ir::AttrType::Ints: return {{"$ref", "#/$defs/ints"}};
    case ir::AttrType::Dtype: return {{"$ref", "#/$defs/dtype"}};
    case ir::AttrType::String:
      if (a.choices.empty()) return {{"type", "string"}};
      return {{"enum", a.choices}};
    default: return nullptr;  // a type this test does not know: only its presence is checked
  }
}

TEST(OpsSchema, EveryRegistryOpAndAttributeIsInTheSchemaAndNothingElse) {
  std::ifstream f(test::src("docs/graph-format.schema.json"));
  ASSERT_TRUE(f.good());
  json schema = json::parse(f);
  std::map<std::string, json> entries;
  for (const auto& e : schema["$defs"]["node"]["oneOf"]) {
    const auto& op = e["properties"]["op"];
    if (op.contains("const")) entries[op["const"].get<std::string>()] = e;
  }
  std::set<std::string> registry;
  for (const auto& name : ir::all_op_names()) {
    const auto& info = ir::op_info(*ir::op_from_name(name));
    if (info.category == ir::Category::Leaf) continue;
    registry.insert(name);
    SCOPED_TRACE(name);
    auto it = entries.find(name);
    ASSERT_NE(it, entries.end()) << "docs/graph-format.schema.json has no entry for op " << name;
    const json& attrs = it->second["properties"]["attrs"];
    std::set<std::string> want, got, want_req, got_req;
    for (const auto& a : info.attrs) {
      want.insert(a.name);
      if (a.required) want_req.insert(a.name);
      ASSERT_TRUE(attrs["properties"].contains(a.name)) << "attribute " << a.name << " missing from the schema";
      json t = schema_type(a);
      if (!t.is_null()) EXPECT_EQ(attrs["properties"][a.name], t) << "attribute " << a.name;
    }
    for (auto& [k, v] : attrs["properties"].items()) got.insert(k);
    if (attrs.contains("required"))
      for (const auto& r : attrs["required"]) got_req.insert(r.get<std::string>());
    EXPECT_EQ(got, want);
    EXPECT_EQ(got_req, want_req);
    EXPECT_EQ(attrs["additionalProperties"], false);
  }
  for (const auto& [name, e] : entries) EXPECT_TRUE(registry.count(name)) << "schema op " << name << " is not in the registry";
}

// ---------------------------------------------------------------- generated docs

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_text(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  std::ofstream(tmp, std::ios::binary) << text;
  std::filesystem::rename(tmp, path);
}

// docs/graph-format.md's op tables and docs/graph-format.schema.json are exactly what the
// registry generates (scripts/gen_docs.sh runs this test with RLX_UPDATE_DOCS=1 to rewrite them).
TEST(OpsDocs, TablesAndSchemaAreGeneratedFromTheRegistry) {
  const bool update = std::getenv("RLX_UPDATE_DOCS") != nullptr;
  const std::string md_path = test::src("docs/graph-format.md"), schema_path = test::src("docs/graph-format.schema.json");
  std::string md = read_text(md_path);
  std::string schema = ir::graph_schema().dump(1) + "\n";
  for (const char* part : {"leaves", "ops"}) {
    std::string body;
    ASSERT_TRUE(ir::generated_part(md, part, &body)) << "docs/graph-format.md lacks the markers of " << part;
    std::string want = ir::op_table_markdown(part);
    if (update) ir::replace_generated(md, part, want);
    else EXPECT_EQ(body, want) << "docs/graph-format.md's " << part << " table is stale: run scripts/gen_docs.sh";
  }
  if (update) {
    write_text(md_path, md);
    write_text(schema_path, schema);
  } else {
    EXPECT_EQ(read_text(schema_path), schema) << "docs/graph-format.schema.json is stale: run scripts/gen_docs.sh";
  }
}

TEST(OpsDocs, EveryOpIsDocumented) {
  for (const auto& name : ir::all_op_names()) {
    const ir::OpInfo& info = ir::op_info(*ir::op_from_name(name));
    const ir::OpDoc& doc = ir::op_doc(info.op);
    EXPECT_FALSE(doc.result.empty()) << name << " has no result line in op_registry.cpp's doc_for";
    if (info.category != ir::Category::Leaf && info.max_inputs > 0)
      EXPECT_FALSE(doc.inputs.empty()) << name << " has no inputs line in op_registry.cpp's doc_for";
    for (const auto& [attr, note] : doc.attr_notes) {
      bool known = false;
      for (const auto& a : info.attrs) known = known || a.name == attr;
      EXPECT_TRUE(known) << name << ": a note for the unknown attribute " << attr;
    }
  }
  // The table shows defaults and choices as the registry has them.
  std::string t = ir::op_table_markdown("ops");
  EXPECT_NE(t.find("| `argmax` `argmin` | x | `axis` (0), `keepdims` (true), `select_last_index` (false) |"), std::string::npos) << t;
  EXPECT_NE(t.find("`mode` (\"constant\"; or \"reflect\", \"edge\")"), std::string::npos) << t;
  EXPECT_NE(t.find("`k` (required)"), std::string::npos) << t;
}

// ---------------------------------------------------------------- command line errors

class OpsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("rlx_ops_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& nodes, const std::string& outputs = "[\"y\"]") {
    std::string p = (dir_ / name).string();
    std::ofstream(p) << R"({"format": "rlx.graph", "version": 1, "nodes": [)" << nodes << R"(], "outputs": )" << outputs
                     << "}";
    return p;
  }
  static std::vector<std::string> backends() {
    std::vector<std::string> r;
    for (const auto& b : backend_names()) {
      try {
        make_executor(b, 0);
        r.push_back(b);
      } catch (const Error&) {
      }
    }
    return r;
  }
  std::filesystem::path dir_;
};

TEST_F(OpsCli, GatherIndexOutOfRangeIsARuntimeErrorNamingTheNodeOnEveryBackend) {
  std::string g = write("g.json", R"({"id": "d", "op": "input", "shape": [4, 2]},
    {"id": "i", "op": "input", "shape": [3], "dtype": "i64"},
    {"id": "y", "op": "gather", "inputs": ["d", "i"]})");
  std::string ge = write("ge.json", R"({"id": "d", "op": "input", "shape": [2, 3]},
    {"id": "i", "op": "input", "shape": [2, 2], "dtype": "i32"},
    {"id": "y", "op": "gather_elements", "inputs": ["d", "i"], "attrs": {"axis": 1}})");
  for (const auto& b : backends())
    for (const char* mode : {"eager", "lazy", "compiled"}) {
      SCOPED_TRACE(b + " " + mode);
      std::string common = " --backend " + b + " --mode " + mode + " --input d=random";
      auto r = test::run_rlx("run '" + g + "'" + common + " --input i=3xi64=0,-4,4");
      EXPECT_EQ(r.code, 3) << r.out;
      EXPECT_TRUE(has(r.out, "'y' (gather)")) << r.out;
      EXPECT_TRUE(has(r.out, "index 4")) << r.out;
      EXPECT_TRUE(has(r.out, "outside [-4, 4)")) << r.out;
      r = test::run_rlx("run '" + g + "'" + common + " --input i=3xi64=-5,0,1");
      EXPECT_EQ(r.code, 3) << r.out;
      EXPECT_TRUE(has(r.out, "index -5")) << r.out;
      // In range (negative indices wrap): runs.
      r = test::run_rlx("run '" + g + "'" + common + " --input i=3xi64=-4,3,-1");
      EXPECT_EQ(r.code, 0) << r.out;
      r = test::run_rlx("run '" + ge + "'" + common + " --input i=2x2xi32=0,2,-3,3");
      EXPECT_EQ(r.code, 3) << r.out;
      EXPECT_TRUE(has(r.out, "'y' (gather_elements)")) << r.out;
      EXPECT_TRUE(has(r.out, "outside [-3, 3)")) << r.out;
    }
}

// The JSON result of `rlx run --json` (stderr, merged by run_rlx, holds only the summary line).
json run_json(const std::string& args, int* code) {
  auto r = test::run_rlx(args + " --json");
  *code = r.code;
  size_t b = r.out.find('{'), e = r.out.rfind('}');
  if (b == std::string::npos || e == std::string::npos || e < b) return json();
  return json::parse(r.out.substr(b, e - b + 1), nullptr, false);
}

const json* output_named(const json& res, const std::string& name) {
  if (!res.is_object() || !res.contains("outputs")) return nullptr;
  for (const auto& o : res["outputs"])
    if (o["name"] == name) return &o;
  return nullptr;
}

// i64 values beyond f32's (2^24) and double's (2^53) exact range move and compare exactly on
// the CPU (tensors stored as i64). Expected values are written out by hand from the inputs.
TEST_F(OpsCli, IntegerIndexingSelectionAndComparesAreExactOnTheCpu) {
  std::string g = write("big.json", R"({"id": "d", "op": "input", "shape": [4], "dtype": "i64"},
    {"id": "e", "op": "input", "shape": [4], "dtype": "i64"},
    {"id": "c", "op": "input", "shape": [4], "dtype": "bool"},
    {"id": "i", "op": "input", "shape": [3], "dtype": "i64"},
    {"id": "g", "op": "gather", "inputs": ["d", "i"]},
    {"id": "w", "op": "where", "inputs": ["c", "d", "e"]},
    {"id": "s", "op": "slice", "inputs": ["d"], "attrs": {"starts": [-1], "ends": [-100], "steps": [-2]}},
    {"id": "p", "op": "pad", "inputs": ["d"], "attrs": {"pads": [1, 1], "value": 7}},
    {"id": "tv", "op": "topk", "inputs": ["d"], "attrs": {"k": 2}},
    {"id": "ti", "op": "topk", "inputs": ["d"], "attrs": {"k": 2, "select": "indices"}},
    {"id": "am", "op": "argmax", "inputs": ["d"], "attrs": {"keepdims": false}},
    {"id": "cs", "op": "cumsum", "inputs": ["d"], "attrs": {"axis": 0}},
    {"id": "mn", "op": "min", "inputs": ["d"]},
    {"id": "eq", "op": "equal", "inputs": ["d", "e"]},
    {"id": "lt", "op": "less", "inputs": ["e", "d"]})",
                        R"(["g", "w", "s", "p", "tv", "ti", "am", "cs", "mn", "eq", "lt"])");
  const int64_t d0 = 9007199254740993, d1 = -9007199254740993, d2 = 1152921504606846979, d3 = 5;
  const int64_t e1 = 9007199254740992;
  const std::map<std::string, std::vector<int64_t>> want = {
      {"g", {d2, d0, d3}},                // indices 2, -4, 3
      {"w", {d0, e1, d2, d3}},            // cond 1, 0, 1, 0 (e3 == 5 == d3)
      {"s", {d3, d1}},                    // from the last element backwards, step -2
      {"p", {7, d0, d1, d2, d3, 7}},
      {"tv", {d2, d0}},
      {"ti", {2, 0}},
      {"am", {2}},
      {"cs", {d0, 0, d2, d2 + 5}},
      {"mn", {d1}},
      {"eq", {1, 0, 0, 1}},               // d0 == e0; d1 != e1 (they differ only past 2^53); d2 != 5
      {"lt", {0, 0, 1, 0}},               // e < d: only 5 < d2
  };
  const std::string ins = " --input d=4xi64=9007199254740993,-9007199254740993,1152921504606846979,5"
                          " --input e=4xi64=9007199254740993,9007199254740992,5,5"
                          " --input c=4xbool=1,0,1,0 --input i=3xi64=2,-4,3";
  for (const char* mode : {"eager", "lazy", "compiled"}) {
    SCOPED_TRACE(mode);
    int code = -1;
    json res = run_json("run '" + g + "' --backend cpu --mode " + std::string(mode) + ins, &code);
    ASSERT_EQ(code, 0) << res.dump();
    for (const auto& [name, vals] : want) {
      SCOPED_TRACE(name);
      const json* o = output_named(res, name);
      ASSERT_NE(o, nullptr) << res.dump();
      ASSERT_EQ((*o)["values"].size(), vals.size()) << o->dump();
      for (size_t k = 0; k < vals.size(); ++k) {
        const json& v = (*o)["values"][k];
        if (v.is_number_integer()) EXPECT_EQ(v.get<int64_t>(), vals[k]) << k;
        else EXPECT_EQ(v.get<double>(), (double)vals[k]) << k;  // bools print as 0.0/1.0
      }
    }
    EXPECT_EQ((*output_named(res, "ti"))["dtype"], "i64");
    EXPECT_EQ((*output_named(res, "eq"))["dtype"], "bool");
  }
}

// Zero-size tensors run on every backend and mode: empty results have the right shapes, and
// what is not empty (pad of an empty axis, prod over an empty axis) has its defined value.
TEST_F(OpsCli, EmptyTensorsRunEverywhere) {
  std::string g = write("empty.json", R"({"id": "x", "op": "input", "shape": [0, 3]},
    {"id": "i", "op": "input", "shape": [0], "dtype": "i64"},
    {"id": "g", "op": "gather", "inputs": ["x", "i"], "attrs": {"axis": 1}},
    {"id": "s", "op": "slice", "inputs": ["x"], "attrs": {"starts": [2], "ends": [2], "axes": [1]}},
    {"id": "p", "op": "pad", "inputs": ["x"], "attrs": {"pads": [1, 0, 1, 0], "value": 2.5}},
    {"id": "t", "op": "topk", "inputs": ["x"], "attrs": {"k": 0}},
    {"id": "c", "op": "cumsum", "inputs": ["x"], "attrs": {"axis": 0}},
    {"id": "a", "op": "argmax", "inputs": ["x"], "attrs": {"axis": 1}},
    {"id": "w", "op": "where", "inputs": ["x", "x", "x"]},
    {"id": "m", "op": "prod", "inputs": ["x"], "attrs": {"axes": [0]}},
    {"id": "tr", "op": "trilu", "inputs": ["x"]})",
                        R"(["g", "s", "p", "t", "c", "a", "w", "m", "tr"])");
  const std::map<std::string, std::vector<int64_t>> shapes = {{"g", {0, 0}}, {"s", {0, 0}}, {"p", {2, 3}},
                                                              {"t", {0, 0}}, {"c", {0, 3}}, {"a", {0, 1}},
                                                              {"w", {0, 3}}, {"m", {3}},    {"tr", {0, 3}}};
  for (const auto& b : backends())
    for (const char* mode : {"eager", "lazy", "compiled"}) {
      SCOPED_TRACE(b + " " + mode);
      int code = -1;
      json res = run_json("run '" + g + "' --backend " + b + " --mode " + mode + " --input x=0x3xf32= --input i=0xi64=",
                          &code);
      ASSERT_EQ(code, 0) << res.dump();
      for (const auto& [name, shape] : shapes) {
        const json* o = output_named(res, name);
        ASSERT_NE(o, nullptr) << name;
        EXPECT_EQ((*o)["shape"].get<std::vector<int64_t>>(), shape) << name;
      }
      EXPECT_EQ((*output_named(res, "p"))["values"].get<std::vector<double>>(), std::vector<double>(6, 2.5));
      EXPECT_EQ((*output_named(res, "m"))["values"].get<std::vector<double>>(), std::vector<double>(3, 1.0));
    }
}

struct BadCase {
  const char* name;
  const char* nodes;
  const char* phrase;
};

TEST_F(OpsCli, BadAttributesAndShapesAreRefusedNamingTheNode) {
  const char* x = R"({"id": "x", "op": "input", "shape": [3, 4]}, )";
  const std::vector<BadCase> cases = {
      {"slice_step0", R"({"id": "y", "op": "slice", "inputs": ["x"], "attrs": {"starts": [0], "ends": [2], "steps": [0]}})",
       "steps must not be 0"},
      {"slice_len", R"({"id": "y", "op": "slice", "inputs": ["x"], "attrs": {"starts": [0, 1], "ends": [2]}})",
       "starts has 2 entries and ends 1"},
      {"slice_axis", R"({"id": "y", "op": "slice", "inputs": ["x"], "attrs": {"starts": [0], "ends": [2], "axes": [2]}})",
       "axis 2 is out of range"},
      {"slice_axis_twice", R"({"id": "y", "op": "slice", "inputs": ["x"], "attrs": {"starts": [0, 0], "ends": [2, 2], "axes": [1, -1]}})",
       "listed twice"},
      {"pad_len", R"({"id": "y", "op": "pad", "inputs": ["x"], "attrs": {"pads": [1, 1]}})", "needs 4"},
      {"pad_reflect", R"({"id": "y", "op": "pad", "inputs": ["x"], "attrs": {"pads": [3, 0, 0, 0], "mode": "reflect"}})",
       "reflect pads of axis 0 must be at most its size - 1"},
      {"pad_crop", R"({"id": "y", "op": "pad", "inputs": ["x"], "attrs": {"pads": [-2, 0, -2, 0]}})", "crop more than"},
      {"pad_mode", R"({"id": "y", "op": "pad", "inputs": ["x"], "attrs": {"pads": [0, 0, 0, 0], "mode": "wrap"}})",
       "expected one of"},
      {"topk_k", R"({"id": "y", "op": "topk", "inputs": ["x"], "attrs": {"k": 5}})", "k 5 is outside [0, 4]"},
      {"topk_missing_k", R"({"id": "y", "op": "topk", "inputs": ["x"]})", "attribute \"k\" is required"},
      {"cumsum_axis", R"({"id": "y", "op": "cumsum", "inputs": ["x"], "attrs": {"axis": -3}})", "axis -3 is out of range"},
      {"argmax_axis", R"({"id": "y", "op": "argmax", "inputs": ["x"], "attrs": {"axis": 2}})", "axis 2 is out of range"},
      {"gather_float_indices", R"({"id": "i", "op": "input", "shape": [2]}, {"id": "y", "op": "gather", "inputs": ["x", "i"]})",
       "indices must be i32 or i64"},
      {"gather_elements_rank", R"({"id": "i", "op": "input", "shape": [2], "dtype": "i64"}, {"id": "y", "op": "gather_elements", "inputs": ["x", "i"]})",
       "must have the rank of data"},
      {"gather_elements_big", R"({"id": "i", "op": "input", "shape": [2, 5], "dtype": "i64"}, {"id": "y", "op": "gather_elements", "inputs": ["x", "i"]})",
       "exceed data"},
      {"where_dtypes", R"({"id": "c", "op": "input", "shape": [4], "dtype": "bool"}, {"id": "i", "op": "input", "shape": [4], "dtype": "i64"}, {"id": "y", "op": "where", "inputs": ["c", "x", "i"]})",
       "where needs one dtype for both"},
      {"where_broadcast", R"({"id": "c", "op": "input", "shape": [2], "dtype": "bool"}, {"id": "y", "op": "where", "inputs": ["c", "x", "x"]})",
       "cannot broadcast"},
      {"trilu_rank", R"({"id": "v", "op": "input", "shape": [4]}, {"id": "y", "op": "trilu", "inputs": ["v"]})",
       "rank >= 2"},
      {"less_broadcast", R"({"id": "v", "op": "input", "shape": [3]}, {"id": "y", "op": "less", "inputs": ["x", "v"]})",
       "cannot broadcast"},
      {"min_empty", R"({"id": "e", "op": "input", "shape": [0, 2]}, {"id": "y", "op": "min", "inputs": ["e"], "attrs": {"axes": [0]}})",
       "min over an empty axis"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string g = write(std::string(c.name) + ".json", std::string(x) + c.nodes);
    std::string ins = " --input x=random";
    for (const char* id : {"i", "c", "v", "e"})
      if (has(c.nodes, std::string("\"id\": \"") + id + "\"")) ins += std::string(" --input ") + id + "=random";
    auto r = test::run_rlx("run '" + g + "'" + ins);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_TRUE(has(r.out, "node 'y'")) << r.out;
    EXPECT_TRUE(has(r.out, c.phrase)) << "expected \"" << c.phrase << "\" in:\n" << r.out;
  }
}

// ---------------------------------------------------------------- compiled mode passes

ir::TypedShapes shapes_of(const ir::Graph& g) { return ir::infer_shapes(g, {{"x", {3, 8}}}); }

TEST(OpsPasses, ComparesAndLogicalOpsFuseAndKeepTheirBoolDtype) {
  auto g = ir::load_graph_text(R"({"format": "rlx.graph", "version": 1, "nodes": [
    {"id": "x", "op": "input", "shape": [3, 8]},
    {"id": "h", "op": "constant", "shape": [], "value": 0.5},
    {"id": "f", "op": "floor", "inputs": ["x"]},
    {"id": "m", "op": "greater", "inputs": ["f", "h"]},
    {"id": "n", "op": "logical_not", "inputs": ["m"]},
    {"id": "s", "op": "softplus", "inputs": ["x"]},
    {"id": "r", "op": "round", "inputs": ["s"]},
    {"id": "e", "op": "equal", "inputs": ["r", "f"]},
    {"id": "y", "op": "logical_or", "inputs": ["n", "e"]}], "outputs": ["y"]})", "fuse.json");
  auto ts = shapes_of(g);
  auto og = passes::optimize(g, ts);
  EXPECT_EQ(og.stats.fused_groups, 1);
  EXPECT_EQ(og.stats.fused_nodes, 7);
  int root = og.graph.outputs[0];
  ASSERT_TRUE(og.fused[root]);
  EXPECT_EQ(og.ts.dtypes[root], DType::boolean);
  // The program computes the same as the formulas: check a few points against hand values.
  const FusedProgram& p = *og.fused[root];
  ASSERT_EQ(p.input_shapes.size(), 1u);
  // x = 1.7: floor 1 > 0.5 -> m true, n false; softplus(1.7) = 1.8744 -> round 2 != 1 -> e false: y false.
  // x = 0.2: floor 0 -> n true: y true. x = -3: floor -3, n true: y true.
  // x = 0.9: floor 0 -> n true. x = 1.2: floor 1, n false; softplus(1.2) = 1.4633 -> round 1 == 1: y true.
  std::vector<float> xs = {1.7f, 0.2f, -3.f, 1.2f};
  std::vector<float> want = {0.f, 1.f, 1.f, 1.f};
  for (size_t i = 0; i < xs.size(); ++i) {
    std::vector<float> regs(p.code.size());
    for (size_t k = 0; k < p.code.size(); ++k) {
      const auto& in = p.code[k];
      switch (in.kind) {
        case FusedInstr::Load: regs[k] = xs[i]; break;
        case FusedInstr::Const: regs[k] = in.imm; break;
        case FusedInstr::Unary: regs[k] = ew_apply(in.op, regs[in.a]); break;
        case FusedInstr::Binary: regs[k] = ew_apply(in.op, regs[in.a], regs[in.b]); break;
      }
    }
    EXPECT_EQ(regs[p.result], want[i]) << "x = " << xs[i] << ": " << p.describe();
  }
}

TEST(OpsPasses, ConstantIndexingFoldsToItsValue) {
  auto g = ir::load_graph_text(R"({"format": "rlx.graph", "version": 1, "nodes": [
    {"id": "x", "op": "input", "shape": [2, 3]},
    {"id": "t", "op": "constant", "shape": [3, 3], "value": [[1, 2, 3], [4, 5, 6], [7, 8, 9]]},
    {"id": "i", "op": "constant", "shape": [2], "dtype": "i64", "value": [-1, 0]},
    {"id": "g", "op": "gather", "inputs": ["t", "i"]},
    {"id": "s", "op": "slice", "inputs": ["g"], "attrs": {"starts": [-1], "ends": [-100], "axes": [1], "steps": [-1]}},
    {"id": "c", "op": "cumsum", "inputs": ["s"], "attrs": {"axis": 1}},
    {"id": "a", "op": "argmax", "inputs": ["c"], "attrs": {"axis": 1, "keepdims": false}},
    {"id": "y", "op": "add", "inputs": ["x", "c"]}], "outputs": ["y", "a"]})", "fold.json");
  auto og = passes::optimize(g, ir::infer_shapes(g, {{"x", {2, 3}}}));
  EXPECT_EQ(og.stats.folded, 4);
  // gather rows [-1, 0] = [[7,8,9],[1,2,3]]; reversed columns [[9,8,7],[3,2,1]];
  // cumsum [[9,17,24],[3,5,6]]; argmax of each row: 2, 2.
  int a = og.graph.outputs[1];
  ASSERT_EQ(og.graph.nodes[a].op, ir::Op::Constant);
  EXPECT_EQ(og.ts.dtypes[a], DType::i64);
  const Tensor& av = og.graph.nodes[a].constant;
  ASSERT_EQ(av.numel(), 2);
  EXPECT_EQ(av.data<int64_t>()[0], 2);
  EXPECT_EQ(av.data<int64_t>()[1], 2);
  int y = og.graph.outputs[0];
  const ir::Node& add = og.graph.nodes[y];
  ASSERT_EQ(add.inputs.size(), 2u);
  const ir::Node& c = og.graph.nodes[add.inputs[1]];
  ASSERT_EQ(c.op, ir::Op::Constant);
  std::vector<float> want = {9, 17, 24, 3, 5, 6};
  ASSERT_EQ(c.constant.numel(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c.constant.data()[i], want[i]) << i;
}

}  // namespace

// CPU attention over a long key sequence: each task's score scratch (heads x query rows x keys)
// is bounded by taking fewer query rows per chunk (16 here instead of 64, 5 chunks), which must
// not change the result. Reference: a plain double-precision loop.
TEST_F(OpsCli, CpuAttentionOverLongKeysMatchesAReferenceLoop) {
  const int64_t Hq = 2, Sq = 65, Sk = 131072, D = 2;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> q(Hq * Sq * D), k(Sk * D), v(Sk);
  for (auto* t : {&q, &k, &v})
    for (auto& x : *t) x = u(rng);
  io::write_npy((dir_ / "q.npy").string(), Tensor::from_vector({1, Hq, Sq, D}, q));
  io::write_npy((dir_ / "k.npy").string(), Tensor::from_vector({1, 1, Sk, D}, k));
  io::write_npy((dir_ / "v.npy").string(), Tensor::from_vector({1, 1, Sk, 1}, v));
  std::string g = write("attn.json", R"({"id": "q", "op": "input", "shape": [1, 2, 65, 2]},
    {"id": "k", "op": "input", "shape": [1, 1, 131072, 2]},
    {"id": "v", "op": "input", "shape": [1, 1, 131072, 1]},
    {"id": "y", "op": "attention", "inputs": ["q", "k", "v"], "attrs": {"causal": true}})");
  std::vector<double> want(Hq * Sq);
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t i = 0; i < Sq; ++i) {
      const int64_t visible = i + (Sk - Sq) + 1;  // causal, aligned to the end of the keys
      double mx = -INFINITY, l = 0, acc = 0;
      std::vector<double> s(visible);
      for (int64_t j = 0; j < visible; ++j) {
        s[j] = (q[(h * Sq + i) * D] * (double)k[j * D] + q[(h * Sq + i) * D + 1] * (double)k[j * D + 1]) / std::sqrt(2.0);
        mx = std::max(mx, s[j]);
      }
      for (int64_t j = 0; j < visible; ++j) l += std::exp(s[j] - mx), acc += std::exp(s[j] - mx) * v[j];
      want[h * Sq + i] = acc / l;
    }
  const std::string ins = " --input q=@" + (dir_ / "q.npy").string() + " --input k=@" + (dir_ / "k.npy").string() +
                          " --input v=@" + (dir_ / "v.npy").string();
  for (const char* mode : {"eager", "lazy", "compiled"}) {
    SCOPED_TRACE(mode);
    const std::string out = (dir_ / (std::string(mode) + ".npy")).string();
    auto r = test::run_rlx("run '" + g + "' --backend cpu --mode " + mode + ins + " --output y=" + out);
    ASSERT_EQ(r.code, 0) << r.out;
    Tensor y = io::read_npy(out);
    ASSERT_EQ(y.shape(), (Shape{1, Hq, Sq, 1}));
    for (int64_t e = 0; e < Hq * Sq; ++e) ASSERT_NEAR(y.data<float>()[e], want[e], 1e-5 + 1e-4 * std::abs(want[e])) << e;
  }
}
