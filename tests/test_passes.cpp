// Compiled mode's pattern rewrites (lib/passes/patterns.cpp): each decomposed form exporters
// write becomes its fused registry op, near misses stay as they were, and the rewritten graph
// gives the answer of a plain reference loop written here (never rlx's own output).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "ir/loader.h"
#include "ir/op_registry.h"
#include "passes/passes.h"
#include "runtime/session.h"

using namespace rlx;

namespace {

std::shared_ptr<ir::Graph> graph_text(const std::string& nodes, const std::string& outputs) {
  return std::make_shared<ir::Graph>(ir::load_graph_text(
      R"({"format": "rlx.graph", "version": 1, "nodes": [)" + nodes + R"(], "outputs": )" + outputs + "}", "t.json"));
}

Tensor values(Shape s, float scale, float phase) {
  Tensor t(s);
  float* d = t.mutable_data();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = scale * std::sin(0.37f * i + phase) + 0.1f * std::cos(1.3f * i);
  return t;
}

int count_op(const passes::OptimizedGraph& og, ir::Op op) {
  int n = 0;
  for (const auto& node : og.graph.nodes) n += node.op == op;
  return n;
}
const ir::Node& output_node(const passes::OptimizedGraph& og, int k = 0) { return og.graph.nodes[og.graph.outputs[k]]; }

passes::OptimizedGraph optimize(const ir::Graph& g, const std::map<std::string, Shape>& in) {
  return passes::optimize(g, ir::infer_shapes(g, in));
}

// Runs g in compiled mode on the CPU; returns output 0.
Tensor run_compiled(std::shared_ptr<ir::Graph> g, std::map<std::string, Tensor> inputs,
                    std::map<std::string, Tensor> params = {}) {
  auto ex = make_executor("cpu");
  SessionOptions so;
  so.disk_cache = false;
  Session s(g, *ex, std::move(params), so);
  for (auto& [k, v] : inputs) s.set_input(k, v);
  Tensor y = s.run(Mode::Compiled)[0];
  return y.astype(DType::f32);  // own a copy
}

void expect_near(const Tensor& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.numel(), (int64_t)want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got.data()[i], want[i], tol * (1 + std::abs(want[i]))) << i;
}

// ---------------------------------------------------------------- LayerNorm
// torch.onnx's LayerNorm at opset < 17: ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add.
std::string layer_norm_nodes(int mean_axis, const std::string& two = "2.0") {
  return R"(
    {"id": "x", "op": "input", "shape": [3, 8]},
    {"id": "w", "op": "param", "shape": [8]},
    {"id": "b", "op": "constant", "shape": [8], "value": [0.1, -0.2, 0.3, 0, 0.5, -0.6, 0.7, 0.05]},
    {"id": "two", "op": "constant", "shape": [], "value": )" + two + R"(},
    {"id": "eps", "op": "constant", "shape": [], "value": 1e-5},
    {"id": "m", "op": "mean", "inputs": ["x"], "attrs": {"axes": [)" + std::to_string(mean_axis) + R"(], "keepdims": true}},
    {"id": "d", "op": "sub", "inputs": ["x", "m"]},
    {"id": "p", "op": "pow", "inputs": ["d", "two"]},
    {"id": "v", "op": "mean", "inputs": ["p"], "attrs": {"axes": [)" + std::to_string(mean_axis) + R"(], "keepdims": true}},
    {"id": "a", "op": "add", "inputs": ["v", "eps"]},
    {"id": "s", "op": "sqrt", "inputs": ["a"]},
    {"id": "n", "op": "div", "inputs": ["d", "s"]},
    {"id": "nw", "op": "mul", "inputs": ["n", "w"]},
    {"id": "y", "op": "add", "inputs": ["b", "nw"]})";
}

TEST(PassesPatterns, LayerNormWrittenOutBecomesLayerNormWithWeightAndBias) {
  auto g = graph_text(layer_norm_nodes(-1), R"(["y"])");
  auto og = optimize(*g, {{"x", {3, 8}}});
  EXPECT_EQ(og.stats.patterns, 1);
  const ir::Node& y = output_node(og);
  ASSERT_EQ(y.op, ir::Op::LayerNorm);
  ASSERT_EQ(y.inputs.size(), 3u);
  EXPECT_EQ(og.graph.nodes[y.inputs[1]].id, "w");
  EXPECT_NEAR(y.attrs.f("eps"), 1e-5, 1e-12);
  EXPECT_EQ(count_op(og, ir::Op::Mean), 0);

  Tensor x = values({3, 8}, 2.f, 0.3f), w = values({8}, 0.5f, 1.1f);
  Tensor got = run_compiled(g, {{"x", x}}, {{"w", w}});
  const double b[8] = {0.1, -0.2, 0.3, 0, 0.5, -0.6, 0.7, 0.05};
  std::vector<double> want;
  for (int r = 0; r < 3; ++r) {
    double mu = 0, var = 0;
    for (int j = 0; j < 8; ++j) mu += x.data()[r * 8 + j] / 8.0;
    for (int j = 0; j < 8; ++j) var += std::pow(x.data()[r * 8 + j] - mu, 2) / 8.0;
    for (int j = 0; j < 8; ++j) want.push_back((x.data()[r * 8 + j] - mu) / std::sqrt(var + 1e-5) * w.data()[j] + b[j]);
  }
  expect_near(got, want, 1e-5);
}

TEST(PassesPatterns, LayerNormOverAnotherAxisOrWithAnotherPowerStaysUnfused) {
  for (auto [axis, two] : {std::pair<int, std::string>{0, "2.0"}, {1, "3.0"}}) {
    auto g = graph_text(layer_norm_nodes(axis, two), R"(["y"])");
    auto og = optimize(*g, {{"x", {3, 8}}});
    EXPECT_EQ(og.stats.patterns, 0) << og.stats.pattern_kinds;
    EXPECT_EQ(count_op(og, ir::Op::LayerNorm) + count_op(og, ir::Op::RmsNorm), 0);
    EXPECT_EQ(count_op(og, ir::Op::Mean), 2);
  }
}

// A following scale that varies per row (not a weight over the last axis) stays a mul after
// the layer_norm, and the bias after it stays an add.
TEST(PassesPatterns, LayerNormKeepsANonVectorScaleOutside) {
  std::string nodes = layer_norm_nodes(-1);
  nodes.replace(nodes.find(R"({"id": "w", "op": "param", "shape": [8]})"), 40,
                R"({"id": "w", "op": "param", "shape": [3, 1]})");
  auto og = optimize(*graph_text(nodes, R"(["y"])"), {{"x", {3, 8}}});
  ASSERT_EQ(count_op(og, ir::Op::LayerNorm), 1);
  for (const auto& n : og.graph.nodes)
    if (n.op == ir::Op::LayerNorm) EXPECT_EQ(n.inputs.size(), 1u);
  EXPECT_NE(output_node(og).op, ir::Op::LayerNorm);
}

// ---------------------------------------------------------------- RMSNorm
// As Hugging Face writes it: weight * (x * rsqrt(x.pow(2).mean(-1, keepdim) + eps)), exported
// with rsqrt as 1 / Sqrt.
TEST(PassesPatterns, RmsNormWrittenOutBecomesRmsNorm) {
  auto g = graph_text(R"(
    {"id": "x", "op": "input", "shape": [2, 3, 16]},
    {"id": "w", "op": "param", "shape": [16]},
    {"id": "two", "op": "constant", "shape": [], "value": 2},
    {"id": "one", "op": "constant", "shape": [], "value": 1},
    {"id": "eps", "op": "constant", "shape": [], "value": 1e-6},
    {"id": "p", "op": "pow", "inputs": ["x", "two"]},
    {"id": "v", "op": "mean", "inputs": ["p"], "attrs": {"axes": [2], "keepdims": true}},
    {"id": "a", "op": "add", "inputs": ["v", "eps"]},
    {"id": "s", "op": "sqrt", "inputs": ["a"]},
    {"id": "r", "op": "div", "inputs": ["one", "s"]},
    {"id": "n", "op": "mul", "inputs": ["x", "r"]},
    {"id": "y", "op": "mul", "inputs": ["w", "n"]})", R"(["y"])");
  auto og = optimize(*g, {{"x", {2, 3, 16}}});
  const ir::Node& y = output_node(og);
  ASSERT_EQ(y.op, ir::Op::RmsNorm);
  ASSERT_EQ(y.inputs.size(), 2u);
  EXPECT_NEAR(y.attrs.f("eps"), 1e-6, 1e-13);
  Tensor x = values({2, 3, 16}, 1.5f, 0.7f), w = values({16}, 1.f, 2.f);
  Tensor got = run_compiled(g, {{"x", x}}, {{"w", w}});
  std::vector<double> want;
  for (int r = 0; r < 6; ++r) {
    double ms = 0;
    for (int j = 0; j < 16; ++j) ms += std::pow(x.data()[r * 16 + j], 2) / 16.0;
    for (int j = 0; j < 16; ++j) want.push_back(w.data()[j] * (x.data()[r * 16 + j] / std::sqrt(ms + 1e-6)));
  }
  expect_near(got, want, 1e-5);
}

// The rsqrt spelling, without a weight; and a near miss where the squared value is not x.
TEST(PassesPatterns, RmsNormWithRsqrtAndItsNearMiss) {
  auto nodes = [](const std::string& squared) {
    return R"(
    {"id": "x", "op": "input", "shape": [4, 8]},
    {"id": "z", "op": "input", "shape": [4, 8]},
    {"id": "eps", "op": "constant", "shape": [], "value": 1e-6},
    {"id": "p", "op": "mul", "inputs": [)" + squared + R"(]},
    {"id": "v", "op": "mean", "inputs": ["p"], "attrs": {"axes": [-1], "keepdims": true}},
    {"id": "a", "op": "add", "inputs": ["eps", "v"]},
    {"id": "r", "op": "rsqrt", "inputs": ["a"]},
    {"id": "y", "op": "mul", "inputs": ["r", "x"]})";
  };
  auto og = optimize(*graph_text(nodes(R"("x", "x")"), R"(["y"])"), {{"x", {4, 8}}, {"z", {4, 8}}});
  EXPECT_EQ(output_node(og).op, ir::Op::RmsNorm);
  EXPECT_EQ(output_node(og).inputs.size(), 1u);
  og = optimize(*graph_text(nodes(R"("x", "z")"), R"(["y"])"), {{"x", {4, 8}}, {"z", {4, 8}}});
  EXPECT_EQ(og.stats.patterns, 0);
  EXPECT_EQ(count_op(og, ir::Op::RmsNorm), 0);
}

// ---------------------------------------------------------------- GELU
// x comes out of a matrix product (a linear layer), where the rewrite applies.
std::string gelu_nodes(const std::string& root2, double c, double half, bool from_gemm = true) {
  return std::string(from_gemm ? R"(
    {"id": "in", "op": "input", "shape": [5, 3]},
    {"id": "W", "op": "param", "shape": [3, 7]},
    {"id": "x", "op": "matmul", "inputs": ["in", "W"]},)"
                               : R"(
    {"id": "x", "op": "input", "shape": [5, 7]},)") + R"(
    {"id": "c", "op": "constant", "shape": [], "value": )" + std::to_string(c) + R"(},
    {"id": "one", "op": "constant", "shape": [], "value": 1.0},
    {"id": "half", "op": "constant", "shape": [], "value": )" + std::to_string(half) + R"(},
    {"id": "s", "op": ")" + root2 + R"(", "inputs": ["x", "c"]},
    {"id": "e", "op": "erf", "inputs": ["s"]},
    {"id": "a", "op": "add", "inputs": ["e", "one"]},
    {"id": "m", "op": "mul", "inputs": ["x", "a"]},
    {"id": "y", "op": "mul", "inputs": ["m", "half"]})";
}

TEST(PassesPatterns, GeluWithErfBecomesGelu) {
  for (auto [op, c] : {std::pair<std::string, double>{"div", 1.4142135381698608}, {"mul", 0.7071067811865476}}) {
    auto g = graph_text(gelu_nodes(op, c, 0.5), R"(["y"])");
    auto og = optimize(*g, {{"in", {5, 3}}});
    const ir::Node& y = output_node(og);
    ASSERT_EQ(y.op, ir::Op::Gelu) << op;
    EXPECT_EQ(y.attrs.s("approximate"), "none");
    EXPECT_EQ(og.graph.nodes[y.inputs[0]].id, "x");
    Tensor a = values({5, 3}, 1.f, 0.2f), W = values({3, 7}, 1.5f, 0.9f);
    Tensor got = run_compiled(g, {{"in", a}}, {{"W", W}});
    std::vector<double> want;
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 7; ++j) {
        double x = 0;
        for (int k = 0; k < 3; ++k) x += (double)a.data()[i * 3 + k] * W.data()[k * 7 + j];
        want.push_back(0.5 * x * (1 + std::erf(x / std::sqrt(2.0))));
      }
    expect_near(got, want, 1e-5);
  }
}

TEST(PassesPatterns, GeluWithAnotherConstantOrAnIntermediateOutputStaysUnfused) {
  for (auto [c, half] : {std::pair<double, double>{1.5, 0.5}, {1.4142135381698608, 0.6}}) {
    auto og = optimize(*graph_text(gelu_nodes("div", c, half), R"(["y"])"), {{"in", {5, 3}}});
    EXPECT_EQ(og.stats.patterns, 0) << c << " " << half;
    EXPECT_EQ(count_op(og, ir::Op::Gelu), 0);
  }
  // erf(x / sqrt 2) is also an output: it must still be computed, so nothing is absorbed.
  auto og = optimize(*graph_text(gelu_nodes("div", 1.4142135381698608, 0.5), R"(["y", "e"])"), {{"in", {5, 3}}});
  EXPECT_EQ(count_op(og, ir::Op::Gelu), 0);
}

// A GELU chain on a plain input stays one fused elementwise kernel (cheaper than `gelu`,
// which evaluates the accurate erfc tail): only a matrix product's activation is rewritten.
TEST(PassesPatterns, GeluChainOnAnInputStaysAFusedChain) {
  auto og = optimize(*graph_text(gelu_nodes("div", 1.4142135381698608, 0.5, false), R"(["y"])"), {{"x", {5, 7}}});
  EXPECT_EQ(count_op(og, ir::Op::Gelu), 0);
  EXPECT_EQ(og.stats.fused_groups, 1);
  EXPECT_EQ(og.stats.fused_nodes, 5);
}

// ---------------------------------------------------------------- MatMul + bias
TEST(PassesPatterns, MatmulPlusBiasBecomesLinearWithTheWeightTransposedOnce) {
  auto g = graph_text(R"(
    {"id": "x", "op": "input", "shape": [2, 3, 6]},
    {"id": "B", "op": "param", "shape": [6, 4]},
    {"id": "bias", "op": "param", "shape": [4]},
    {"id": "mm", "op": "matmul", "inputs": ["x", "B"]},
    {"id": "y", "op": "add", "inputs": ["bias", "mm"]})", R"(["y"])");
  auto og = optimize(*g, {{"x", {2, 3, 6}}});  // the default (Vulkan's): B^T made once
  const ir::Node& y = output_node(og);
  ASSERT_EQ(y.op, ir::Op::Linear);
  ASSERT_EQ(y.inputs.size(), 3u);
  const ir::Node& w = og.graph.nodes[y.inputs[1]];
  EXPECT_EQ(w.op, ir::Op::Transpose);  // over a param: computed once when the plan is built
  EXPECT_EQ(og.ts.shapes[y.inputs[1]], (Shape{4, 6}));

  // Where the backend packs either layout (the CPU), B stays as given: no copy of it is made.
  passes::OptOptions keep;
  keep.transposed_linear = false;
  ir::TypedShapes ts = ir::infer_shapes(*g, {{"x", {2, 3, 6}}});
  passes::OptimizedGraph kept = passes::optimize(*g, ts, keep);
  EXPECT_EQ(count_op(kept, ir::Op::Linear), 0);
  EXPECT_EQ(count_op(kept, ir::Op::Transpose), 0);
  EXPECT_EQ(count_op(kept, ir::Op::Matmul), 1);

  Tensor x = values({2, 3, 6}, 1.f, 0.f), B = values({6, 4}, 0.7f, 0.4f), bias = values({4}, 0.3f, 2.f);
  std::vector<double> want;
  for (int r = 0; r < 6; ++r)
    for (int n = 0; n < 4; ++n) {
      double acc = bias.data()[n];
      for (int k = 0; k < 6; ++k) acc += (double)x.data()[r * 6 + k] * B.data()[k * 4 + n];
      want.push_back(acc);
    }
  auto ex = make_executor("cpu");
  EXPECT_FALSE(ex->transposed_linear_weights());
  SessionOptions so;
  so.disk_cache = false;
  Session s(g, *ex, {{"B", B}, {"bias", bias}}, so);
  s.set_input("x", x);
  Tensor got = s.run(Mode::Compiled)[0].astype(DType::f32);
  EXPECT_EQ(s.plan_text().find("once  transpose"), std::string::npos) << s.plan_text();
  expect_near(got, want, 1e-5);
  // A second run replays the plan (the weight packed by then where packing pays).
  Tensor again = s.run(Mode::Compiled)[0].astype(DType::f32);
  expect_near(again, want, 1e-5);
}

TEST(PassesPatterns, MatmulPlusNonVectorOrByAnInputStaysMatmul) {
  // The added term is [3, 4] (a residual, not a bias), and B is an input (not a weight).
  auto og = optimize(*graph_text(R"(
    {"id": "x", "op": "input", "shape": [3, 6]},
    {"id": "B", "op": "param", "shape": [6, 4]},
    {"id": "Bi", "op": "input", "shape": [6, 4]},
    {"id": "r", "op": "input", "shape": [3, 4]},
    {"id": "bias", "op": "param", "shape": [4]},
    {"id": "mm", "op": "matmul", "inputs": ["x", "B"]},
    {"id": "y", "op": "add", "inputs": ["mm", "r"]},
    {"id": "mi", "op": "matmul", "inputs": ["x", "Bi"]},
    {"id": "z", "op": "add", "inputs": ["mi", "bias"]})", R"(["y", "z"])"),
                     {{"x", {3, 6}}, {"Bi", {6, 4}}, {"r", {3, 4}}});
  EXPECT_EQ(og.stats.patterns, 0);
  EXPECT_EQ(count_op(og, ir::Op::Linear), 0);
  EXPECT_EQ(count_op(og, ir::Op::Matmul), 2);
}

// ---------------------------------------------------------------- attention
// The reference: softmax(scale * q k^T + mask) v per (b, h), kv head h / (Hq / Hk).
std::vector<double> attention_ref(const Tensor& q, const Tensor& k, const Tensor& v, int B, int Hq, int Hk, int Sq,
                                  int Sk, int D, double scale, std::function<double(int, int, int)> mask) {
  std::vector<double> out;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h) {
      int hk = h / (Hq / Hk);
      for (int i = 0; i < Sq; ++i) {
        std::vector<double> s(Sk);
        double mx = -1e300;
        for (int j = 0; j < Sk; ++j) {
          double acc = 0;
          for (int d = 0; d < D; ++d)
            acc += (double)q.data()[((b * Hq + h) * Sq + i) * D + d] * k.data()[((b * Hk + hk) * Sk + j) * D + d];
          s[j] = scale * acc + mask(b, i, j);
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (int j = 0; j < Sk; ++j) z += s[j] = std::exp(s[j] - mx);
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = 0; j < Sk; ++j) acc += s[j] / z * v.data()[((b * Hk + hk) * Sk + j) * D + d];
          out.push_back(acc);
        }
      }
    }
  return out;
}

// BERT as torch exports it: k^T by a transpose, / sqrt(D), + a padding mask [B, 1, 1, S].
std::string bert_attention_nodes(const std::string& softmax_axis, bool mask_before_scale = false) {
  std::string scaled = mask_before_scale ? R"(
    {"id": "sm", "op": "add", "inputs": ["qk", "mask"]},
    {"id": "s", "op": "div", "inputs": ["sm", "c"]},)"
                                         : R"(
    {"id": "sd", "op": "div", "inputs": ["qk", "c"]},
    {"id": "s", "op": "add", "inputs": ["sd", "mask"]},)";
  return R"(
    {"id": "q", "op": "input", "shape": [2, 3, 5, 4]},
    {"id": "k", "op": "input", "shape": [2, 5, 3, 4]},
    {"id": "v", "op": "input", "shape": [2, 3, 5, 4]},
    {"id": "mask", "op": "input", "shape": [2, 1, 1, 5]},
    {"id": "c", "op": "constant", "shape": [], "value": 2.0},
    {"id": "kt", "op": "transpose", "inputs": ["k"], "attrs": {"perm": [0, 2, 3, 1]}},
    {"id": "qk", "op": "matmul", "inputs": ["q", "kt"]},)" +
         scaled + R"(
    {"id": "p", "op": "softmax", "inputs": ["s"], "attrs": {"axis": )" + softmax_axis + R"(}},
    {"id": "y", "op": "matmul", "inputs": ["p", "v"]})";
}

TEST(PassesPatterns, MaskedAttentionBecomesAttention) {
  auto g = graph_text(bert_attention_nodes("3"), R"(["y"])");
  std::map<std::string, Shape> shapes{{"q", {2, 3, 5, 4}}, {"k", {2, 5, 3, 4}}, {"v", {2, 3, 5, 4}}, {"mask", {2, 1, 1, 5}}};
  auto og = optimize(*g, shapes);
  const ir::Node& y = output_node(og);
  ASSERT_EQ(y.op, ir::Op::Attention);
  ASSERT_EQ(y.inputs.size(), 4u);
  EXPECT_DOUBLE_EQ(y.attrs.f("scale"), 0.5);
  EXPECT_FALSE(y.attrs.b("causal"));
  EXPECT_EQ(og.ts.shapes[y.inputs[1]], (Shape{2, 3, 5, 4}));  // k as [B, H, S, D]

  Tensor q = values({2, 3, 5, 4}, 1.f, 0.f), k = values({2, 5, 3, 4}, 1.f, 1.f), v = values({2, 3, 5, 4}, 1.f, 2.f);
  Tensor mask({2, 1, 1, 5});
  for (int i = 0; i < 10; ++i) mask.mutable_data()[i] = i == 3 || i == 4 ? -3.4028234663852886e38f : 0.f;
  Tensor got = run_compiled(g, {{"q", q}, {"k", k}, {"v", v}, {"mask", mask}});
  Tensor kh({2, 3, 5, 4});  // k in [B, H, S, D] for the reference
  for (int b = 0; b < 2; ++b)
    for (int s = 0; s < 5; ++s)
      for (int h = 0; h < 3; ++h)
        for (int d = 0; d < 4; ++d) kh.mutable_data()[((b * 3 + h) * 5 + s) * 4 + d] = k.data()[((b * 5 + s) * 3 + h) * 4 + d];
  auto want = attention_ref(q, kh, v, 2, 3, 3, 5, 5, 4, 0.5,
                            [&](int b, int, int j) { return b == 0 && j >= 3 ? -1e300 : 0.0; });
  expect_near(got, want, 1e-5);
}

// Attention over q scaled by a constant before the product (`op` "mul" or "div" by `c`): one
// attention node reading q itself with scale `scale`, the scaling op gone, the values as the
// reference computes them for q filled with `q_step` steps.
void expect_attention_over_scaled_q(const char* op, double c, double scale, float q_step) {
  auto g = graph_text(std::string(R"(
    {"id": "q", "op": "input", "shape": [1, 2, 3, 4]},
    {"id": "k", "op": "input", "shape": [1, 2, 3, 4]},
    {"id": "v", "op": "input", "shape": [1, 2, 3, 4]},
    {"id": "c", "op": "constant", "shape": [], "value": )") + std::to_string(c) + R"(},
    {"id": "qs", "op": ")" + op + R"(", "inputs": ["q", "c"]},
    {"id": "s", "op": "matmul", "inputs": ["qs", "k"], "attrs": {"transpose_b": true}},
    {"id": "p", "op": "softmax", "inputs": ["s"]},
    {"id": "y", "op": "matmul", "inputs": ["p", "v"]})", R"(["y"])");
  auto og = optimize(*g, {{"q", {1, 2, 3, 4}}, {"k", {1, 2, 3, 4}}, {"v", {1, 2, 3, 4}}});
  const ir::Node& y = output_node(og);
  ASSERT_EQ(y.op, ir::Op::Attention) << op;
  EXPECT_DOUBLE_EQ(y.attrs.f("scale"), scale) << op;
  EXPECT_EQ(og.graph.nodes[y.inputs[0]].id, "q") << op;
  EXPECT_EQ(og.graph.nodes[y.inputs[1]].id, "k") << op;
  EXPECT_EQ(count_op(og, ir::Op::Mul) + count_op(og, ir::Op::Div), 0) << op;
  Tensor q = values({1, 2, 3, 4}, q_step, 0.f), k = values({1, 2, 3, 4}, 1.f, 1.f), v = values({1, 2, 3, 4}, 1.f, 2.f);
  Tensor got = run_compiled(g, {{"q", q}, {"k", k}, {"v", v}});
  expect_near(got, attention_ref(q, k, v, 1, 2, 2, 3, 3, 4, scale, [](int, int, int) { return 0.0; }), 1e-5);
}

// The scale applied to q before the product (q / sqrt(D) written as q * c).
TEST(PassesPatterns, AttentionWithTheScaleOnQ) { expect_attention_over_scaled_q("mul", 0.5, 0.5, 1.f); }

// torch's MultiheadAttention (ViT) divides q by sqrt(head dim) before the product.
TEST(PassesPatterns, AttentionWithQDividedByAConstant) { expect_attention_over_scaled_q("div", 4.0, 0.25, 2.f); }

TEST(PassesPatterns, AttentionNearMissesStayUnfused) {
  std::map<std::string, Shape> shapes{{"q", {2, 3, 5, 4}}, {"k", {2, 5, 3, 4}}, {"v", {2, 3, 5, 4}}, {"mask", {2, 1, 1, 5}}};
  // softmax over the query axis, not the keys
  auto og = optimize(*graph_text(bert_attention_nodes("2"), R"(["y"])"), shapes);
  EXPECT_EQ(count_op(og, ir::Op::Attention), 0);
  EXPECT_EQ(count_op(og, ir::Op::Softmax), 1);
  // the mask added before the scale: (qk + mask) / c is not scale * qk + mask
  og = optimize(*graph_text(bert_attention_nodes("-1", true), R"(["y"])"), shapes);
  EXPECT_EQ(count_op(og, ir::Op::Attention), 0);
}

// Llama as Hugging Face writes it: repeat_kv by reshape/expand/reshape, k.transpose(2, 3),
// / sqrt(D), + a constant causal mask (finfo.min above the diagonal).
TEST(PassesPatterns, GroupedQueryCausalAttentionReadsTheKvHeadsAndDropsTheMask) {
  const int S = 4;
  std::string mask = "[";
  for (int i = 0; i < S; ++i) {
    mask += i ? ",[" : "[";
    for (int j = 0; j < S; ++j) mask += std::string(j ? "," : "") + (j > i ? "-3.4028234663852886e38" : "0");
    mask += "]";
  }
  mask += "]";
  auto g = graph_text(R"(
    {"id": "q", "op": "input", "shape": [1, 4, 4, 8]},
    {"id": "k", "op": "input", "shape": [1, 2, 4, 8]},
    {"id": "v", "op": "input", "shape": [1, 2, 4, 8]},
    {"id": "cm", "op": "constant", "shape": [4, 4], "value": )" + mask + R"(},
    {"id": "cm4", "op": "reshape", "inputs": ["cm"], "attrs": {"shape": [1, 1, 4, 4]}},
    {"id": "c", "op": "constant", "shape": [], "value": 2.8284270763397217},
    {"id": "k5", "op": "reshape", "inputs": ["k"], "attrs": {"shape": [1, 2, 1, 4, 8]}},
    {"id": "kx", "op": "broadcast_to", "inputs": ["k5"], "attrs": {"shape": [1, 2, 2, 4, 8]}},
    {"id": "kr", "op": "reshape", "inputs": ["kx"], "attrs": {"shape": [1, 4, 4, 8]}},
    {"id": "v5", "op": "reshape", "inputs": ["v"], "attrs": {"shape": [1, 2, 1, 4, 8]}},
    {"id": "vx", "op": "broadcast_to", "inputs": ["v5"], "attrs": {"shape": [1, 2, 2, 4, 8]}},
    {"id": "vr", "op": "reshape", "inputs": ["vx"], "attrs": {"shape": [1, 4, 4, 8]}},
    {"id": "kt", "op": "transpose", "inputs": ["kr"], "attrs": {"perm": [0, 1, 3, 2]}},
    {"id": "qk", "op": "matmul", "inputs": ["q", "kt"]},
    {"id": "sd", "op": "div", "inputs": ["qk", "c"]},
    {"id": "s", "op": "add", "inputs": ["sd", "cm4"]},
    {"id": "p", "op": "softmax", "inputs": ["s"], "attrs": {"axis": -1}},
    {"id": "y", "op": "matmul", "inputs": ["p", "vr"]})", R"(["y"])");
  auto og = optimize(*g, {{"q", {1, 4, 4, 8}}, {"k", {1, 2, 4, 8}}, {"v", {1, 2, 4, 8}}});
  const ir::Node& y = output_node(og);
  ASSERT_EQ(y.op, ir::Op::Attention);
  ASSERT_EQ(y.inputs.size(), 3u);  // the causal mask became causal = true
  EXPECT_TRUE(y.attrs.b("causal"));
  EXPECT_EQ(og.graph.nodes[y.inputs[1]].id, "k");
  EXPECT_EQ(og.graph.nodes[y.inputs[2]].id, "v");
  EXPECT_EQ(count_op(og, ir::Op::BroadcastTo), 0);
  Tensor q = values({1, 4, 4, 8}, 1.f, 0.f), k = values({1, 2, 4, 8}, 1.f, 1.f), v = values({1, 2, 4, 8}, 1.f, 2.f);
  Tensor got = run_compiled(g, {{"q", q}, {"k", k}, {"v", v}});
  auto want = attention_ref(q, k, v, 1, 4, 2, 4, 4, 8, 1 / 2.8284270763397217,
                            [](int, int i, int j) { return j > i ? -1e300 : 0.0; });
  expect_near(got, want, 1e-5);
}

// ---------------------------------------------------------------- RoPE
// Hugging Face's apply_rotary_pos_emb with the cos/sin tables the exporter folds to constants.
std::string rope_nodes(double base, bool swapped) {
  const int S = 5, D = 8, h = D / 2;
  std::string c = "[", s = "[";
  for (int p = 0; p < S; ++p) {
    c += p ? ",[" : "[";
    s += p ? ",[" : "[";
    for (int j = 0; j < D; ++j) {
      double a = p * std::pow(base, -2.0 * (j % h) / D);
      c += (j ? "," : "") + std::to_string(std::cos(a));
      s += (j ? "," : "") + std::to_string(std::sin(a));
    }
    c += "]";
    s += "]";
  }
  c += "]";
  s += "]";
  std::string cat = swapped ? R"(["lo", "ng"])" : R"(["ng", "lo"])";
  return R"(
    {"id": "x", "op": "input", "shape": [2, 3, 5, 8]},
    {"id": "cos", "op": "constant", "shape": [5, 8], "value": )" + c + R"(},
    {"id": "sin", "op": "constant", "shape": [5, 8], "value": )" + s + R"(},
    {"id": "a", "op": "mul", "inputs": ["x", "cos"]},
    {"id": "lo", "op": "narrow", "inputs": ["x"], "attrs": {"axis": 3, "start": 0, "length": 4}},
    {"id": "hi", "op": "narrow", "inputs": ["x"], "attrs": {"axis": -1, "start": 4, "length": 4}},
    {"id": "ng", "op": "neg", "inputs": ["hi"]},
    {"id": "r", "op": "concat", "inputs": )" + cat + R"(, "attrs": {"axis": -1}},
    {"id": "b", "op": "mul", "inputs": ["sin", "r"]},
    {"id": "y", "op": "add", "inputs": ["a", "b"]})";
}

TEST(PassesPatterns, RotateHalfRopeBecomesRope) {
  auto g = graph_text(rope_nodes(10000.0, false), R"(["y"])");
  auto og = optimize(*g, {{"x", {2, 3, 5, 8}}});
  const ir::Node& y = output_node(og);
  ASSERT_EQ(y.op, ir::Op::Rope);
  EXPECT_NEAR(y.attrs.f("base"), 10000.0, 1.0);
  EXPECT_FALSE(y.attrs.b("traditional"));
  Tensor x = values({2, 3, 5, 8}, 1.f, 0.5f);
  Tensor got = run_compiled(g, {{"x", x}});
  std::vector<double> want;
  for (int row = 0; row < 30; ++row) {
    const int p = row % 5;
    const float* xr = x.data() + row * 8;
    for (int j = 0; j < 8; ++j) {
      double a = p * std::pow(10000.0, -2.0 * (j % 4) / 8);
      double rot = j < 4 ? -xr[j + 4] : xr[j - 4];
      want.push_back(xr[j] * std::cos(a) + rot * std::sin(a));
    }
  }
  expect_near(got, want, 1e-5);
}

TEST(PassesPatterns, RopeWithSwappedHalvesStaysUnfused) {
  // concat(x1, -x2) rotates the other way: not rope's rotation.
  auto og = optimize(*graph_text(rope_nodes(10000.0, true), R"(["y"])"), {{"x", {2, 3, 5, 8}}});
  EXPECT_EQ(count_op(og, ir::Op::Rope), 0);
  EXPECT_EQ(count_op(og, ir::Op::Concat), 1);
}

// ---------------------------------------------------------------- Conv + BatchNorm
// BatchNormalization as the importer writes it (a per-channel scale and shift, constants),
// then ReLU.
std::string conv_bn_nodes(const std::string& scale_shape, const std::string& scale_value) {
  return R"(
    {"id": "x", "op": "input", "shape": [2, 3, 6, 6]},
    {"id": "W", "op": "param", "shape": [4, 3, 3, 3]},
    {"id": "b", "op": "param", "shape": [4]},
    {"id": "sc", "op": "constant", "shape": )" + scale_shape + R"(, "value": )" + scale_value + R"(},
    {"id": "sh", "op": "constant", "shape": [4, 1, 1], "value": [[[0.1]], [[-0.2]], [[0.3]], [[0.05]]]},
    {"id": "c", "op": "conv2d", "inputs": ["x", "W", "b"], "attrs": {"pads": [1, 1, 1, 1]}},
    {"id": "m", "op": "mul", "inputs": ["c", "sc"]},
    {"id": "a", "op": "add", "inputs": ["m", "sh"]},
    {"id": "y", "op": "relu", "inputs": ["a"]})";
}

TEST(PassesPatterns, ConvFollowedByBatchNormFoldsIntoTheConv) {
  auto g = graph_text(conv_bn_nodes("[4, 1, 1]", "[[[1.5]], [[0.5]], [[-1.0]], [[2.0]]]"), R"(["y"])");
  auto og = optimize(*g, {{"x", {2, 3, 6, 6}}});
  EXPECT_EQ(count_op(og, ir::Op::Conv2d), 1);
  const ir::Node& y = output_node(og);
  ASSERT_EQ(y.op, ir::Op::Relu);
  EXPECT_EQ(og.graph.nodes[y.inputs[0]].op, ir::Op::Conv2d);
  EXPECT_EQ(og.stats.pattern_kinds, "conv2d+affine 1");

  Tensor x = values({2, 3, 6, 6}, 1.f, 0.f), W = values({4, 3, 3, 3}, 0.4f, 0.5f), b = values({4}, 0.2f, 1.f);
  Tensor got = run_compiled(g, {{"x", x}}, {{"W", W}, {"b", b}});
  const double sc[4] = {1.5, 0.5, -1.0, 2.0}, sh[4] = {0.1, -0.2, 0.3, 0.05};
  std::vector<double> want;
  for (int n = 0; n < 2; ++n)
    for (int m = 0; m < 4; ++m)
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 6; ++j) {
          double acc = b.data()[m];
          for (int c = 0; c < 3; ++c)
            for (int u = 0; u < 3; ++u)
              for (int t = 0; t < 3; ++t) {
                int yi = i + u - 1, xj = j + t - 1;
                if (yi < 0 || yi >= 6 || xj < 0 || xj >= 6) continue;
                acc += (double)x.data()[((n * 3 + c) * 6 + yi) * 6 + xj] * W.data()[((m * 3 + c) * 3 + u) * 3 + t];
              }
          want.push_back(std::max(0.0, acc * sc[m] + sh[m]));
        }
  expect_near(got, want, 1e-5);
}

TEST(PassesPatterns, ConvWhoseOutputIsAlsoAGraphOutputIsNotFolded) {
  auto og = optimize(*graph_text(conv_bn_nodes("[4, 1, 1]", "[[[1.5]], [[0.5]], [[-1.0]], [[2.0]]]"), R"(["y", "c"])"),
                     {{"x", {2, 3, 6, 6}}});
  EXPECT_EQ(og.stats.patterns, 0);
  EXPECT_EQ(og.graph.nodes[og.graph.outputs[1]].op, ir::Op::Conv2d);
}

TEST(PassesPatterns, ConvFollowedByAScaleThatIsNotPerChannelStaysUnfused) {
  // A [6, 6] spatial scale varies over the image: it is no per-channel affine.
  std::string v = "[";
  for (int i = 0; i < 6; ++i) v += std::string(i ? "," : "") + "[1,2,3,4,5,6]";
  v += "]";
  auto og = optimize(*graph_text(conv_bn_nodes("[6, 6]", v), R"(["y"])"), {{"x", {2, 3, 6, 6}}});
  EXPECT_EQ(og.stats.patterns, 0);
  ASSERT_EQ(count_op(og, ir::Op::Conv2d), 1);
  for (const auto& n : og.graph.nodes)
    if (n.op == ir::Op::Conv2d) {  // still the model's own weight and bias
      EXPECT_EQ(og.graph.nodes[n.inputs[1]].id, "W");
      EXPECT_EQ(og.graph.nodes[n.inputs[2]].id, "b");
    }
}

}  // namespace

// ---- memory planning (lib/passes/memory_plan.cpp) ----
// Checked by brute force over every pair: values whose lifetimes overlap never share a byte,
// every offset is aligned, and the arena holds at least the bytes live at the busiest step.
namespace {
void check_plan(const std::vector<passes::Lifetime>& v, const passes::MemoryPlan& p, int64_t align) {
  ASSERT_EQ(p.offsets.size(), v.size());
  int steps = 0;
  for (const auto& l : v) steps = std::max(steps, l.last + 1);
  std::vector<int64_t> live(steps, 0);
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].size == 0) { EXPECT_EQ(p.offsets[i], -1); continue; }
    ASSERT_GE(p.offsets[i], 0);
    EXPECT_EQ(p.offsets[i] % align, 0);
    EXPECT_LE(p.offsets[i] + v[i].size, p.arena_bytes);
    for (int t = v[i].first; t <= v[i].last; ++t) live[t] += (v[i].size + align - 1) / align * align;
  }
  EXPECT_GE(p.arena_bytes, *std::max_element(live.begin(), live.end()));
  EXPECT_LE(p.arena_bytes, p.sum_bytes);
  for (size_t i = 0; i < v.size(); ++i)
    for (size_t j = i + 1; j < v.size(); ++j) {
      if (v[i].size == 0 || v[j].size == 0) continue;
      bool overlap_t = !(v[i].last < v[j].first || v[j].last < v[i].first);
      bool overlap_b = p.offsets[i] < p.offsets[j] + v[j].size && p.offsets[j] < p.offsets[i] + v[i].size;
      ASSERT_FALSE(overlap_t && overlap_b) << "values " << i << " and " << j;
    }
}

std::vector<passes::Lifetime> random_lifetimes(size_t n, uint32_t seed) {
  std::vector<passes::Lifetime> v(n);
  uint32_t s = seed;
  auto next = [&] { s = s * 1664525u + 1013904223u; return s >> 8; };
  for (size_t i = 0; i < n; ++i) {
    v[i].first = (int)i;
    // Mostly short lifetimes, some live to the end (as an unrolled loop's per-step outputs).
    v[i].last = next() % 10 == 0 ? (int)n : (int)i + 1 + (int)(next() % 6);
    v[i].size = next() % 17 == 0 ? 0 : 1 + (int64_t)(next() % 5000);
  }
  return v;
}
}  // namespace

TEST(MemoryPlan, BySizeNeverOverlapsLiveValues) {
  auto v = random_lifetimes(600, 1);
  check_plan(v, passes::plan_memory(v, 64), 64);
}

TEST(MemoryPlan, InTimeOrderNeverOverlapsLiveValues) {
  auto v = random_lifetimes(passes::kBySizeMaxValues + 900, 2);
  auto p = passes::plan_memory(v, 64);
  check_plan(v, p, 64);
  EXPECT_LT(p.arena_bytes, p.sum_bytes / 2);  // memory is reused
}

TEST(MemoryPlan, InTimeOrderReusesFreedBlocksOfAChain) {
  // A chain: each value read only by the next. Two blocks of the same size suffice.
  std::vector<passes::Lifetime> v(passes::kBySizeMaxValues + 10);
  for (size_t i = 0; i < v.size(); ++i) v[i] = {256, (int)i, (int)i + 1};
  auto p = passes::plan_memory(v, 64);
  check_plan(v, p, 64);
  EXPECT_EQ(p.arena_bytes, 2 * 256);
}

// A 20,000-node elementwise chain fuses into one kernel whose description stays bounded, and
// computes what a plain loop computes.
TEST(PassesFusion, LongChainFusesIntoOneBoundedKernel) {
  const int n = 20000;
  std::string nodes = R"({"id": "x", "op": "input", "shape": [8]})";
  std::string prev = "x";
  for (int i = 0; i < n; ++i) {
    std::string id = "n" + std::to_string(i);
    nodes += R"(, {"id": ")" + id + R"(", "op": ")" + (i % 2 ? "sin" : "neg") + R"(", "inputs": [")" + prev + R"("]})";
    prev = id;
  }
  auto g = graph_text(nodes, "[\"" + prev + "\"]");
  Tensor x = values({8}, 1.f, 0.2f);
  ir::TypedShapes ts = ir::infer_shapes(*g, {{"x", x.shape()}});
  auto og = passes::optimize(*g, ts);
  ASSERT_EQ(og.graph.nodes.size(), 2u);
  ASSERT_NE(og.fused[1], nullptr);
  EXPECT_LE(og.fused[1]->describe().size(), FusedProgram::kDescribeMax + 3);
  auto cpu = make_executor("cpu");
  Session s(g, *cpu, {});
  s.set_input("x", x);
  auto y = s.run(Mode::Compiled);
  for (int j = 0; j < 8; ++j) {
    float r = x.data()[j];
    for (int i = 0; i < n; ++i) r = i % 2 ? std::sin(r) : -r;
    EXPECT_NEAR(y[0].data()[j], r, 1e-4f) << j;
  }
}

// ---------------------------------------------------------------- quantized weights
// Constant folding leaves a dequantize of constant weights alone (the weights stay i8), while
// folding the float arithmetic around it as before; the answer is a reference loop's.
TEST(Folding, DequantizeOfConstantWeightsIsNotFolded) {
  auto g = graph_text(R"(
      {"id": "x", "op": "input", "shape": [2, 3]},
      {"id": "w", "op": "constant", "shape": [3, 2], "dtype": "i8", "value": [[-128, 5], [127, 0], [-1, 64]]},
      {"id": "s", "op": "constant", "shape": [2], "value": [0.5, 0.25]},
      {"id": "z", "op": "constant", "shape": [2], "dtype": "i8", "value": [3, -4]},
      {"id": "two", "op": "constant", "shape": [], "value": 2.0},
      {"id": "s2", "op": "mul", "inputs": ["s", "two"]},
      {"id": "wd", "op": "dequantize", "inputs": ["w", "s2", "z"]},
      {"id": "y", "op": "matmul", "inputs": ["x", "wd"]})",
                      R"(["y"])");
  auto og = optimize(*g, {{"x", {2, 3}}});
  EXPECT_EQ(count_op(og, ir::Op::Dequantize), 1);   // kept
  EXPECT_GE(og.stats.folded, 1);                    // s2 = s * 2 was folded
  EXPECT_EQ(count_op(og, ir::Op::Mul), 0);
  const float xv[6] = {1, -2, 0.5f, 3, 0.25f, -1};
  Tensor x = Tensor::from_vector({2, 3}, std::vector<float>(xv, xv + 6));
  const int w[3][2] = {{-128, 5}, {127, 0}, {-1, 64}};
  const int z[2] = {3, -4};
  const double s[2] = {1.0, 0.5};
  std::vector<double> want;
  for (int m = 0; m < 2; ++m)
    for (int n = 0; n < 2; ++n) {
      double acc = 0;
      for (int k = 0; k < 3; ++k) acc += xv[m * 3 + k] * (w[k][n] - z[n]) * s[n];
      want.push_back(acc);
    }
  expect_near(run_compiled(g, {{"x", x}}), want, 1e-6);
}

// ---------------------------------------------------------------- integer products
namespace {
std::string rows_json(const std::vector<int>& v, int64_t rows, int64_t cols) {
  std::string s = "[";
  for (int64_t r = 0; r < rows; ++r) {
    s += r ? ",[" : "[";
    for (int64_t c = 0; c < cols; ++c) s += (c ? "," : "") + std::to_string(v[r * cols + c]);
    s += "]";
  }
  return s + "]";
}
std::vector<int> ints_in(int64_t n, int lo, int hi, unsigned seed) {
  std::vector<int> v(n);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = lo + (int)((seed >> 8) % (unsigned)(hi - lo + 1));
  }
  return v;
}
constexpr int64_t kQK = 37, kQN = 20, kQM = 15;  // a [3, 5, 37] u8, W [37, 20] i8
// ORT's dynamic quantization after DynamicQuantizeLinear: MatMulInteger -> Cast -> Mul(a_scale *
// b_scale) -> Add(bias). `tail` adds nodes after y; `outputs` names the graph's outputs.
std::shared_ptr<ir::Graph> dynamic_quant_graph(const std::vector<int>& W, const std::string& scale_shape,
                                               const std::string& outputs = R"(["out"])") {
  std::string bias = "[";
  for (int n = 0; n < kQN; ++n) bias += (n ? "," : "") + std::to_string(0.25 - 0.03 * n);
  bias += "]";
  return graph_text(R"(
      {"id": "q", "op": "input", "shape": [3, 5, 37], "dtype": "u8"},
      {"id": "as", "op": "input", "shape": )" + scale_shape + R"(},
      {"id": "w", "op": "constant", "shape": [37, 20], "dtype": "i8", "value": )" + rows_json(W, kQK, kQN) + R"(},
      {"id": "zq", "op": "constant", "shape": [], "dtype": "u8", "value": 131},
      {"id": "zw", "op": "constant", "shape": [20], "dtype": "i8", "value": )" + rows_json(ints_in(kQN, -128, 127, 5), 1, kQN).substr(1, std::string::npos - 1).substr(0, rows_json(ints_in(kQN, -128, 127, 5), 1, kQN).size() - 2) + R"(},
      {"id": "bs", "op": "constant", "shape": [20], "value": )" + std::string("[") + [] {
                      std::string s;
                      for (int n = 0; n < kQN; ++n) s += (n ? "," : "") + std::to_string(0.001 * (1 + n % 7));
                      return s;
                    }() + R"(]},
      {"id": "b", "op": "constant", "shape": [20], "value": )" + bias + R"(},
      {"id": "s", "op": "mul", "inputs": ["as", "bs"]},
      {"id": "mm", "op": "matmul_integer", "inputs": ["q", "w", "zq", "zw"]},
      {"id": "c", "op": "cast", "inputs": ["mm"], "attrs": {"dtype": "f32"}},
      {"id": "y", "op": "mul", "inputs": ["c", "s"]},
      {"id": "out", "op": "add", "inputs": ["y", "b"]})",
                    outputs);
}
}  // namespace

TEST(PassesPatterns, DynamicQuantizedMatmulBecomesOneIntegerProductWithAFloatEpilogue) {
  const std::vector<int> W = ints_in(kQK * kQN, -128, 127, 3), zw = ints_in(kQN, -128, 127, 5);
  std::vector<int> qv = ints_in(kQM * kQK, 0, 255, 9);
  for (int k = 0; k < kQK; ++k) qv[k] = 255;  // an all-255 row
  auto g = dynamic_quant_graph(W, "[]");
  passes::OptOptions oo;
  oo.integer_gemm = true;
  auto og = passes::optimize(*g, ir::infer_shapes(*g, {{"q", {3, 5, 37}}, {"as", {}}}), oo);
  EXPECT_EQ(count_op(og, ir::Op::MatmulIntegerScaled), 1) << og.stats.pattern_kinds;
  EXPECT_EQ(count_op(og, ir::Op::MatmulInteger), 0);
  EXPECT_NE(og.stats.pattern_kinds.find("matmul_integer_scaled 1"), std::string::npos) << og.stats.pattern_kinds;
  // Off where the backend does not run the op (the default options: Vulkan).
  EXPECT_EQ(count_op(passes::optimize(*g, ir::infer_shapes(*g, {{"q", {3, 5, 37}}, {"as", {}}})), ir::Op::MatmulIntegerScaled), 0);
  std::vector<int64_t> q64(qv.begin(), qv.end());
  const float as = 0.0173f;
  Tensor y = run_compiled(g, {{"q", Tensor::from_ints({3, 5, 37}, q64, DType::u8)}, {"as", Tensor::from_vector({}, {as})}});
  // The reference: exact integer sums, then cast, mul, add in f32 as the graph writes them.
  for (int64_t m = 0; m < kQM; ++m)
    for (int64_t n = 0; n < kQN; ++n) {
      int64_t acc = 0;
      for (int64_t k = 0; k < kQK; ++k) acc += (int64_t)(qv[m * kQK + k] - 131) * (W[k * kQN + n] - zw[n]);
      const float s = as * (float)(0.001 * (1 + n % 7));
      float want = (float)acc * s;
      want += (float)(0.25 - 0.03 * n);
      ASSERT_EQ(y.data()[m * kQN + n], want) << m << " " << n;
    }
}

TEST(PassesPatterns, IntegerProductNearMissesStayUnfused) {
  const std::vector<int> W = ints_in(kQK * kQN, -128, 127, 3);
  passes::OptOptions oo;
  oo.integer_gemm = true;
  // The cast's result is also a graph output.
  auto g1 = dynamic_quant_graph(W, "[]", R"(["out", "c"])");
  auto og1 = passes::optimize(*g1, ir::infer_shapes(*g1, {{"q", {3, 5, 37}}, {"as", {}}}), oo);
  EXPECT_EQ(count_op(og1, ir::Op::MatmulIntegerScaled), 0) << og1.stats.pattern_kinds;
  // A scale per row ([3, 5, 1]) is no per-column epilogue.
  auto g2 = dynamic_quant_graph(W, "[3, 5, 1]");
  auto og2 = passes::optimize(*g2, ir::infer_shapes(*g2, {{"q", {3, 5, 37}}, {"as", {3, 5, 1}}}), oo);
  EXPECT_EQ(count_op(og2, ir::Op::MatmulIntegerScaled), 0) << og2.stats.pattern_kinds;
}

namespace {
std::shared_ptr<ir::Graph> qdq_graph(bool weight_input) {
  const std::vector<int> W = ints_in(33 * 18, -128, 127, 21);
  std::string sw;
  for (int n = 0; n < 18; ++n) sw += (n ? "," : "") + std::to_string(0.002 * (1 + n % 5));
  const std::string w = weight_input ? R"({"id": "w", "op": "input", "shape": [33, 18], "dtype": "i8"},)"
                                     : R"({"id": "w", "op": "constant", "shape": [33, 18], "dtype": "i8", "value": )" +
                                           rows_json(W, 33, 18) + "},";
  return graph_text(R"(
      {"id": "xq", "op": "input", "shape": [4, 33], "dtype": "u8"},
      )" + w + R"(
      {"id": "sx", "op": "constant", "shape": [], "value": 0.05},
      {"id": "zx", "op": "constant", "shape": [], "dtype": "u8", "value": 120},
      {"id": "sw", "op": "constant", "shape": [18], "value": [)" + sw + R"(]},
      {"id": "x", "op": "dequantize", "inputs": ["xq", "sx", "zx"]},
      {"id": "wd", "op": "dequantize", "inputs": ["w", "sw"]},
      {"id": "y", "op": "matmul", "inputs": ["x", "wd"]})",
                    R"(["y"])");
}
}  // namespace

TEST(PassesPatterns, QdqMatmulBecomesAnIntegerProductWithARescale) {
  auto g = qdq_graph(false);
  passes::OptOptions oo;
  oo.integer_gemm = true;
  auto og = passes::optimize(*g, ir::infer_shapes(*g, {{"xq", {4, 33}}}), oo);
  EXPECT_EQ(count_op(og, ir::Op::MatmulIntegerScaled), 1) << og.stats.pattern_kinds;
  EXPECT_EQ(count_op(og, ir::Op::Dequantize), 0);
  const std::vector<int> W = ints_in(33 * 18, -128, 127, 21), xv = ints_in(4 * 33, 0, 255, 4);
  Tensor y = run_compiled(g, {{"xq", Tensor::from_ints({4, 33}, std::vector<int64_t>(xv.begin(), xv.end()), DType::u8)}});
  std::vector<double> want;
  for (int m = 0; m < 4; ++m)
    for (int n = 0; n < 18; ++n) {
      double acc = 0;
      for (int k = 0; k < 33; ++k) acc += (xv[m * 33 + k] - 120) * 0.05 * W[k * 18 + n] * 0.002 * (1 + n % 5);
      want.push_back(acc);
    }
  expect_near(y, want, 1e-5);
  // Near miss: a weight that is not a constant stays dequantize -> matmul.
  auto g2 = qdq_graph(true);
  auto og2 = passes::optimize(*g2, ir::infer_shapes(*g2, {{"xq", {4, 33}}, {"w", {33, 18}}}), oo);
  EXPECT_EQ(count_op(og2, ir::Op::MatmulIntegerScaled), 0);
  EXPECT_EQ(count_op(og2, ir::Op::Matmul), 1);
}
