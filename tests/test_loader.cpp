// Loader refusals: every malformed graph in tests/golden/bad is refused with an
// InputError naming the file and the node (tests/golden/bad/expected_errors.json).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "ir/loader.h"
#include "ir/op_registry.h"
#include "ir/writer.h"
#include "test_util.h"

using namespace rlx;

namespace {

struct BadCase {
  std::string file;
  std::vector<std::string> ids;
};

std::vector<BadCase> bad_cases() {
  std::ifstream f(test::src("tests/golden/bad/expected_errors.json"));
  auto j = nlohmann::json::parse(f);
  std::vector<BadCase> r;
  for (auto& [file, ids] : j.items()) r.push_back({file, ids.get<std::vector<std::string>>()});
  return r;
}

// Loads and, for graphs with symbolic inputs, binds every symbol to 2 and infers shapes.
void load_and_bind(const std::string& path) {
  ir::Graph g = ir::load_graph_file(path);
  std::map<std::string, Shape> in;
  for (const auto& n : g.nodes)
    if (n.op == ir::Op::Input) {
      Shape s;
      for (auto& d : n.decl_shape) s.push_back(d.symbol.empty() ? d.value : 2);
      in[n.id] = s;
    }
  ir::infer_shapes(g, in);
}

class Bad : public ::testing::TestWithParam<BadCase> {};

TEST_P(Bad, RefusedNamingFileAndNode) {
  const auto& c = GetParam();
  std::string path = test::src("tests/golden/bad/" + c.file);
  try {
    load_and_bind(path);
    FAIL() << c.file << " was accepted";
  } catch (const InputError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(c.file), std::string::npos) << msg;
    if (!c.ids.empty()) {
      bool named = false;
      for (const auto& id : c.ids)
        named = named || msg.find("'" + id + "'") != std::string::npos || msg.find("\"" + id + "\"") != std::string::npos;
      EXPECT_TRUE(named) << "message does not name any of the expected nodes: " << msg;
    }
    EXPECT_EQ(e.exit_code(), 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Files, Bad, ::testing::ValuesIn(bad_cases()), [](const auto& info) {
  std::string n = info.param.file;
  for (auto& ch : n)
    if (!isalnum((unsigned char)ch)) ch = '_';
  return n;
});

ir::Graph load(const std::string& text) { return ir::load_graph_text(text, "t.json"); }

std::string graph_with(const std::string& nodes, const std::string& outputs = "[\"y\"]") {
  return R"({"format": "rlx.graph", "version": 1, "nodes": [)" + nodes + R"(], "outputs": )" + outputs + "}";
}

TEST(Loader, DefaultsAreFilledFromTheRegistry) {
  auto g = load(graph_with(R"({"id": "x", "op": "input", "shape": [2, 8]},
                              {"id": "y", "op": "rope", "inputs": ["x"]})"));
  const auto& a = g.nodes[g.find("y")].attrs;
  EXPECT_DOUBLE_EQ(a.f("base"), 10000.0);
  EXPECT_FALSE(a.b("traditional"));
  EXPECT_DOUBLE_EQ(a.f("scale"), 1.0);
  EXPECT_EQ(a.i("offset"), 0);
  EXPECT_FALSE(a.has("dims"));  // defaults to D at run time
}

TEST(Loader, NodesInAnyOrderAreSortedTopologically) {
  auto g = load(graph_with(R"({"id": "y", "op": "relu", "inputs": ["h"]},
                              {"id": "h", "op": "neg", "inputs": ["x"]},
                              {"id": "x", "op": "input", "shape": [3]})"));
  EXPECT_LT(g.find("x"), g.find("h"));
  EXPECT_LT(g.find("h"), g.find("y"));
}

TEST(Loader, SymbolicDimensionsBindAtRunTimeAndMustAgree) {
  auto g = load(graph_with(R"({"id": "a", "op": "input", "shape": ["batch", 4]},
                              {"id": "b", "op": "input", "shape": ["batch", 4]},
                              {"id": "y", "op": "add", "inputs": ["a", "b"]})"));
  auto ts = ir::infer_shapes(g, {{"a", {3, 4}}, {"b", {3, 4}}});
  EXPECT_EQ(ts.shapes[g.find("y")], (Shape{3, 4}));
  try {
    ir::infer_shapes(g, {{"a", {3, 4}}, {"b", {5, 4}}});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'batch'"), std::string::npos) << e.what();
  }
}

TEST(Loader, ConstantScalarFillsShapeAndNestedListsAreRowMajor) {
  auto g = load(graph_with(R"({"id": "c", "op": "constant", "shape": [2, 2], "value": [[1, 2], [3, 4]]},
                              {"id": "d", "op": "constant", "shape": [3], "value": 0.5},
                              {"id": "y", "op": "neg", "inputs": ["c"]})"));
  EXPECT_EQ(g.nodes[g.find("c")].constant.to_vector(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(g.nodes[g.find("d")].constant.to_vector(), (std::vector<float>{0.5f, 0.5f, 0.5f}));
}

TEST(Loader, UnknownFieldAndNodeCountLimit) {
  EXPECT_THROW(load(graph_with(R"({"id": "x", "op": "input", "shape": [1], "shpae": [2]},
                                  {"id": "y", "op": "neg", "inputs": ["x"]})")), InputError);
  ir::LoadLimits lim;
  lim.max_nodes = 1;
  EXPECT_THROW(ir::load_graph_text(graph_with(R"({"id": "x", "op": "input", "shape": [1]},
                                                 {"id": "y", "op": "neg", "inputs": ["x"]})"), "t.json", lim),
               InputError);
}

TEST(Registry, EveryOpOfTheSpecIsRegistered) {
  // The op table of docs/graph-format.md (spec v1), written out independently.
  const char* spec_ops[] = {"input", "param", "constant", "add", "sub", "mul", "div", "pow", "maximum", "minimum",
                            "neg", "exp", "log", "sqrt", "rsqrt", "abs", "tanh", "sigmoid", "relu", "silu", "erf",
                            "sin", "cos", "square", "gelu", "sum", "mean", "max", "softmax", "matmul", "linear",
                            "reshape", "transpose", "broadcast_to", "narrow", "concat", "embedding", "cast",
                            "layer_norm", "rms_norm", "rope", "scaled_masked_softmax", "attention", "layer_norm_vjp",
                            "rms_norm_vjp", "softmax_vjp", "silu_vjp", "gelu_vjp",
                            // the convolution family (team contract, session 2)
                            "conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d", "resize"};
  for (const char* op : spec_ops) EXPECT_TRUE(ir::op_from_name(op).has_value()) << op;
  // Beyond v1: the ONNX-style ops of the team contract (issue 12), also written out independently.
  const char* onnx_ops[] = {"floor", "ceil", "round", "softplus", "logical_not", "sign", "equal", "less",
                            "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_xor",
                            "where", "mod", "min", "prod", "argmax", "argmin", "cumsum", "topk", "gather",
                            "gather_elements", "slice", "pad", "trilu", "conv2d", "conv_transpose2d", "max_pool2d",
                            "avg_pool2d", "resize",
                            // inverse trigonometric functions (issue 20: ONNX's Asin, Acos, Atan)
                            "asin", "acos", "atan",
                            // ONNX's BitShift on unsigned integers (issue 20)
                            "bit_shift",
                            // the 3-D convolution family (issue 30: ONNX's Conv, ConvTranspose, MaxPool, AveragePool on NCDHW)
                            "conv3d", "conv_transpose3d", "max_pool3d", "avg_pool3d"};
  // The quantization ops of docs/ir-design.md section 2 (issue 19).
  const char* quant_ops[] = {"quantize", "dequantize", "matmul_integer", "matmul_nbits"};
  for (const char* op : quant_ops) EXPECT_TRUE(ir::op_from_name(op).has_value()) << op;
  // Control flow (issue 20, docs/ir-design.md section 3): nodes with bodies and their results.
  const char* control_ops[] = {"if", "loop", "scan", "result",
                               // data-dependent output shapes (issue 20): host steps without bodies
                               "nonzero", "compress", "unique", "topk_dynamic", "non_max_suppression", "roi_align", "max_unpool",
                               "scatter_elements"};
  std::set<std::string> known(std::begin(spec_ops), std::end(spec_ops));
  known.insert("matmul_integer_scaled");  // issue 19's fused integer product (compiled mode, CPU)
  known.insert("conv2d_integer_scaled");  // issue 19's int8 convolution of QDQ models (compiled mode, CPU)
  known.insert(std::begin(onnx_ops), std::end(onnx_ops));
  known.insert(std::begin(quant_ops), std::end(quant_ops));
  known.insert(std::begin(control_ops), std::end(control_ops));
  for (const auto& name : ir::all_op_names()) EXPECT_TRUE(known.count(name)) << "op " << name << " is in no spec";
}

}  // namespace

// A control node with bodies, as docs/graph-format.md writes it: y = x * 2 if c else -x.
std::string if_graph(const std::string& then_body, const std::string& extra = "", const std::string& result = "") {
  return R"({"format": "rlx.graph", "version": 1, "nodes": [
      {"id": "c", "op": "input", "shape": [], "dtype": "bool"},
      {"id": "x", "op": "input", "shape": [3]},
      {"id": "t", "op": "if", "inputs": ["c", "x"], "attrs": {"num_captures": 1}, "bodies": [)" + then_body + R"(,
        {"nodes": [{"id": "x", "op": "input", "shape": [3]}, {"id": "n", "op": "neg", "inputs": ["x"]}], "outputs": ["n"]}]},
      )" + (result.empty() ? R"({"id": "y", "op": "result", "inputs": ["t"], "attrs": {"index": 0}, "shape": [3], "dtype": "f32"})" : result) +
         extra + R"(], "outputs": ["y"]})";
}
const char* kThen = R"({"nodes": [{"id": "x", "op": "input", "shape": [3]}, {"id": "two", "op": "constant", "shape": [], "value": 2},
                                 {"id": "m", "op": "mul", "inputs": ["x", "two"]}], "outputs": ["m"]})";

TEST(Loader, ControlNodesCarryBodiesAndRoundTrip) {
  ir::Graph g = ir::load_graph_text(if_graph(kThen), "t.json");
  int t = g.find("t");
  ASSERT_GE(t, 0);
  ASSERT_EQ(g.nodes[t].bodies.size(), 2u);
  EXPECT_EQ(g.nodes[t].bodies[0]->nodes.size(), 3u);
  EXPECT_EQ(g.nodes[g.find("y")].op, ir::Op::Result);
  // written and read back: the same bodies
  ir::Graph g2 = ir::load_graph_text(ir::graph_to_json(g), "t2.json");
  EXPECT_EQ(ir::graph_to_json(g2), ir::graph_to_json(g));
  EXPECT_EQ(g2.nodes[g2.find("t")].bodies[1]->nodes.size(), 2u);
}

TEST(Loader, ControlNodesAreCheckedAgainstTheirBodies) {
  auto refused = [](const std::string& text, const std::string& phrase) {
    try {
      ir::load_graph_text(text, "t.json");
      ADD_FAILURE() << "no error, want: " << phrase;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    }
  };
  // a body reading what it does not declare: its own graph, isolated from above
  refused(if_graph(R"({"nodes": [{"id": "m", "op": "neg", "inputs": ["c"]}], "outputs": ["m"]})"), "input \"c\" is not a node of this graph");
  // body inputs = the captures (if)
  refused(if_graph(R"({"nodes": [{"id": "two", "op": "constant", "shape": [], "value": 2}], "outputs": ["two"]})"), "has 0 inputs, the node gives it 1");
  refused(if_graph(kThen, "", R"({"id": "y", "op": "result", "inputs": ["t"], "attrs": {"index": 3}, "shape": [3], "dtype": "f32"})"),
          "index 3, but 't' has 1 results");
  refused(if_graph(kThen, "", R"({"id": "y", "op": "result", "inputs": ["t"], "attrs": {"index": 0}})"), "declares its \"shape\" and \"dtype\"");
  refused(if_graph(kThen, "", R"({"id": "y", "op": "result", "inputs": ["x"], "attrs": {"index": 0}, "shape": [3], "dtype": "f32"})"),
          "a result reads an if, loop or scan node");
  refused(R"({"format": "rlx.graph", "version": 1, "nodes": [{"id": "c", "op": "input", "shape": [], "dtype": "bool"},
            {"id": "t", "op": "if", "inputs": ["c"]}], "outputs": ["t"]})", "needs \"bodies\"");
  refused(R"({"format": "rlx.graph", "version": 1, "nodes": [{"id": "c", "op": "input", "shape": [3]},
            {"id": "t", "op": "neg", "inputs": ["c"], "bodies": []}], "outputs": ["t"]})", "only allowed on if, loop and scan");
  refused(if_graph(R"({"nodes": [{"id": "x", "op": "input", "shape": [3]}, {"id": "w", "op": "param", "shape": [3]},
                                 {"id": "m", "op": "mul", "inputs": ["x", "w"]}], "outputs": ["m"]})"), "a body holds no params");
  // nesting beyond the limit
  const std::string leaf = R"({"nodes": [{"id": "x", "op": "input", "shape": [3]}], "outputs": ["x"]})";
  std::string body = leaf;
  for (int k = 0; k < 17; ++k)
    body = R"({"nodes": [{"id": "x", "op": "input", "shape": [3]}, {"id": "c", "op": "constant", "shape": [], "dtype": "bool", "value": true},
              {"id": "t", "op": "if", "inputs": ["c", "x"], "attrs": {"num_captures": 1}, "bodies": [)" + body + "," + leaf + R"(]},
              {"id": "y", "op": "result", "inputs": ["t"], "attrs": {"index": 0}, "shape": [3], "dtype": "f32"}], "outputs": ["y"]})";
  refused(if_graph(body), "above the limit of 16");
}
