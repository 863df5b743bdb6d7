// Compiled mode's attention_views pass (lib/passes/attention_views.cpp): an attention fed by
// the narrows, reshapes and transposes of a packed qkv product (torch's multi-head attention as
// exported: ViT) reads the product in place and writes the layout of the transpose after it, so
// those copies leave the plan. Expected values come from a plain loop written here.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>

#include "ir/loader.h"
#include "ir/op_registry.h"
#include "passes/passes.h"
#include "runtime/runner.h"
#include "runtime/session.h"
#include "scoped_env.h"
#include "test_util.h"

using namespace rlx;

namespace {

// x [S, B, 3E] (the qkv product) -> q, k, v narrows of E columns -> reshape [S, B*H, D] ->
// transpose [B*H, S, D] (k: [B*H, D, S]) -> softmax(q k^T * c) v -> transpose [S, B*H, D] ->
// reshape [S*B, E] = y; z = y + y reads it.
struct Dims {
  int64_t S, B, H, D;
};
// block: x = linear(u.transpose(1, 0)) of an input u [B, S, E] (the qkv product), and the
// output w = (linear(y) as [S, B, E]).transpose(1, 0) + u (the out projection, back to [B, S, E]).
std::shared_ptr<ir::Graph> vit_attention(const Dims& d, bool block = false, const std::string& also_output = "") {
  const int64_t E = d.H * d.D;
  auto s = [](int64_t v) { return std::to_string(v); };
  auto part = [&](const char* id, int k) {
    return std::string(R"({"id": ")") + id + R"(n", "op": "narrow", "inputs": ["x"], "attrs": {"axis": 2, "start": )" +
           s(k * E) + R"(, "length": )" + s(E) + R"(}},
    {"id": ")" + id + R"(r", "op": "reshape", "inputs": [")" + id + R"(n"], "attrs": {"shape": [)" + s(d.S) + ", " +
           s(d.B * d.H) + ", " + s(d.D) + R"(]}},)";
  };
  std::string nodes =
      block ? R"({"id": "u", "op": "input", "shape": [)" + s(d.B) + ", " + s(d.S) + ", " + s(E) + R"(]},
    {"id": "wi", "op": "param", "shape": [)" + s(3 * E) + ", " + s(E) + R"(]},
    {"id": "bi", "op": "param", "shape": [)" + s(3 * E) + R"(]},
    {"id": "wo", "op": "param", "shape": [)" + s(E) + ", " + s(E) + R"(]},
    {"id": "bo", "op": "param", "shape": [)" + s(E) + R"(]},
    {"id": "ut", "op": "transpose", "inputs": ["u"], "attrs": {"perm": [1, 0, 2]}},
    {"id": "x", "op": "linear", "inputs": ["ut", "wi", "bi"]},)"
            : R"({"id": "x", "op": "input", "shape": [)" + s(d.S) + ", " + s(d.B) + ", " + s(3 * E) + R"(]},)";
  nodes += R"(
    {"id": "c", "op": "constant", "shape": [], "value": )" + std::to_string(1.0 / std::sqrt((double)d.D)) + R"(},)" +
                      part("q", 0) + part("k", 1) + part("v", 2) + R"(
    {"id": "qt", "op": "transpose", "inputs": ["qr"], "attrs": {"perm": [1, 0, 2]}},
    {"id": "kt", "op": "transpose", "inputs": ["kr"], "attrs": {"perm": [1, 2, 0]}},
    {"id": "vt", "op": "transpose", "inputs": ["vr"], "attrs": {"perm": [1, 0, 2]}},
    {"id": "sc", "op": "matmul", "inputs": ["qt", "kt"]},
    {"id": "ss", "op": "mul", "inputs": ["sc", "c"]},
    {"id": "p", "op": "softmax", "inputs": ["ss"], "attrs": {"axis": -1}},
    {"id": "o", "op": "matmul", "inputs": ["p", "vt"]},
    {"id": "ot", "op": "transpose", "inputs": ["o"], "attrs": {"perm": [1, 0, 2]}},
    {"id": "y", "op": "reshape", "inputs": ["ot"], "attrs": {"shape": [)" + s(d.S * d.B) + ", " + s(E) + R"(]}},
    {"id": "z", "op": "add", "inputs": ["y", "y"]})";
  if (block)
    nodes += R"(,
    {"id": "pl", "op": "linear", "inputs": ["y", "wo", "bo"]},
    {"id": "pr", "op": "reshape", "inputs": ["pl"], "attrs": {"shape": [)" + s(d.S) + ", " + s(d.B) + ", " + s(E) + R"(]}},
    {"id": "pt", "op": "transpose", "inputs": ["pr"], "attrs": {"perm": [1, 0, 2]}},
    {"id": "w", "op": "add", "inputs": ["pt", "u"]})";
  return std::make_shared<ir::Graph>(ir::load_graph_text(R"({"format": "rlx.graph", "version": 1, "nodes": [)" + nodes +
                                                             R"(], "outputs": )" + (block ? R"(["w")" : R"(["y", "z")") +
                                                             (also_output.empty() ? "" : ", \"" + also_output + "\"") + "]}",
                                                         "vit_attention.json"));
}

// y[(s*B + b), h*D + e] by the definition, in double.
std::vector<double> reference(const Dims& d, const Tensor& x) {
  const int64_t E = d.H * d.D;
  auto X = [&](int64_t s, int64_t b, int64_t c) { return (double)x.data()[(s * d.B + b) * 3 * E + c]; };
  std::vector<double> y(d.S * d.B * E);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t i = 0; i < d.S; ++i) {
        std::vector<double> p(d.S);
        double mx = -INFINITY, l = 0;
        for (int64_t j = 0; j < d.S; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d.D; ++e) dot += X(i, b, h * d.D + e) * X(j, b, E + h * d.D + e);
          p[j] = dot / std::sqrt((double)d.D);
          mx = std::max(mx, p[j]);
        }
        for (auto& v : p) l += (v = std::exp(v - mx));
        for (int64_t e = 0; e < d.D; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < d.S; ++j) acc += p[j] * X(j, b, 2 * E + h * d.D + e);
          y[(i * d.B + b) * E + h * d.D + e] = acc / l;
        }
      }
  return y;
}

Tensor ramp(Shape s) {
  Tensor t(s);
  float* v = t.mutable_data();
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = std::sin(i * 0.37f) * 1.5f;
  return t;
}

// Kernels of op `op` in a plan's text (lines "  kN  OP  ID ...").
int plan_kernels(const std::string& plan, const std::string& op) {
  int n = 0;
  std::istringstream lines(plan);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream f(line);
    std::string k, o;
    f >> k >> o;
    n += line.rfind("  k", 0) == 0 && o == op;
  }
  return n;
}

// check(backend, mode, folds) on the CPU and (where a device is found) Vulkan, in every mode, with
// the pass on (RLX_VK_ATTENTION_VIEWS=1: every dtype) and, on Vulkan, off; `folds` where the
// plan should keep no copy (Vulkan with the pass on).
template <class Check>
void for_each_setting(Check check) {
  for (const std::string& b : test::built_backends())
    for (const std::string views : {"1", "0"}) {
      if (b == "cpu" && views == "0") continue;
      test::ScopedEnv env;
      env.set("RLX_VK_ATTENTION_VIEWS", views.c_str());
      for (Mode mode : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {
        SCOPED_TRACE(b + " " + mode_name(mode) + " RLX_VK_ATTENTION_VIEWS=" + views);
        check(b, mode, b == "vulkan" && views == "1");
      }
    }
}

int count_op(const passes::OptimizedGraph& og, ir::Op op) {
  int n = 0;
  for (const auto& node : og.graph.nodes) n += node.op == op;
  return n;
}

// Graph level, no backend: with the pass on, the optimised graph has one attention with views
// over x and no narrow or transpose; with it off (the CPU's plan) they are all there. Where a
// stride is not a multiple of the alignment asked for (D = 4 halves against 8), nothing folds.
TEST(AttentionViews, PassFoldsTheCopiesIntoTheAttention) {
  for (const Dims& d : {Dims{5, 2, 2, 8}, Dims{5, 2, 2, 4}}) {
    auto g = vit_attention(d);
    auto ts = ir::infer_shapes(*g, {{"x", Shape{d.S, d.B, 3 * d.H * d.D}}});
    passes::OptOptions on;
    on.attention_views_all = true;
    on.attention_view_align = 8;
    auto og = passes::optimize(*g, ts, on);
    auto off = passes::optimize(*g, ts, {});
    EXPECT_EQ(count_op(off, ir::Op::Attention), 1);
    EXPECT_EQ(count_op(off, ir::Op::Transpose), 4);  // q, k (one, composed), v, o
    EXPECT_EQ(count_op(off, ir::Op::Narrow), 3);
    ASSERT_EQ(count_op(og, ir::Op::Attention), 1);
    const bool folds = d.D % 8 == 0;
    EXPECT_EQ(count_op(og, ir::Op::Transpose), folds ? 0 : 4) << "D " << d.D;
    EXPECT_EQ(count_op(og, ir::Op::Narrow), folds ? 0 : 3) << "D " << d.D;
    if (!folds) continue;
    for (const auto& n : og.graph.nodes) {
      if (n.op != ir::Op::Attention) continue;
      ASSERT_TRUE(n.attrs.has("views"));
      std::string err;
      ir::AttentionViews av = ir::attention_views(n.attrs, &err);
      ASSERT_EQ(err, "");
      const int64_t E = d.H * d.D;
      // q (b, h, s, e) at s*B*3E + b*3E + h*D + e; k at + E, v at + 2E; o at s*B*E + b*E + h*D + e
      EXPECT_EQ(av.B, d.B);
      EXPECT_EQ(av.H, d.H);
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(av.off[k], k * E);
        EXPECT_EQ(av.stride[k][0], 3 * E);
        EXPECT_EQ(av.stride[k][1], d.D);
        EXPECT_EQ(av.stride[k][2], d.B * 3 * E);
        EXPECT_EQ(og.graph.nodes[n.inputs[k]].id, "x");
      }
      EXPECT_EQ(av.stride[3][0], E);
      EXPECT_EQ(av.stride[3][1], d.D);
      EXPECT_EQ(av.stride[3][2], d.B * E);
      EXPECT_EQ(av.out_shape, (std::vector<int64_t>{d.S, d.B * d.H, d.D}));
    }
  }
}

// The whole block at graph level: with the pass on, no transpose or narrow is left; where q's
// narrow is also a graph output, the qkv product must keep its layout (that narrow reads it), so
// the transpose before it stays while the rest still folds.
TEST(AttentionViews, TheProductBeforeKeepsItsLayoutWhereAnotherNodeReadsIt) {
  const Dims d{5, 2, 2, 8};
  const int64_t E = d.H * d.D;
  for (const char* extra : {"", "qn"}) {
    auto g = vit_attention(d, true, extra);
    std::map<std::string, Shape> in{{"u", Shape{d.B, d.S, E}}};
    auto ts = ir::infer_shapes(*g, in);
    passes::OptOptions on;
    on.attention_views_all = true;
    on.attention_view_align = 8;
    auto og = passes::optimize(*g, ts, on);
    const bool kept = *extra != 0;
    EXPECT_EQ(count_op(og, ir::Op::Transpose), kept ? 1 : 0) << extra;
    EXPECT_EQ(count_op(og, ir::Op::Narrow), kept ? 1 : 0) << extra;
    EXPECT_EQ(count_op(og, ir::Op::Attention), 1);
  }
}

// Every mode, on the CPU (the pass off: its attention reads contiguous operands) and on Vulkan
// where built, with RLX_VK_ATTENTION_VIEWS=1 (every dtype: on a device without the tensor-core
// kernel the views are copied through scratch into the scalar kernel) and =0: the values agree
// with the loop; compiled mode on Vulkan with the pass on has no transpose or narrow kernel left.
TEST(AttentionViews, EveryModeAgreesAndTheCopiesLeaveThePlan) {
  const Dims d{6, 2, 2, 8};
  auto g = vit_attention(d);
  Tensor x = ramp({d.S, d.B, 3 * d.H * d.D});
  const auto want = reference(d, x);
  for_each_setting([&](const std::string& b, Mode mode, bool folds) {
    auto ex = make_executor(b);
    Session s(g, *ex, {});
    s.set_input("x", x);
    auto out = s.run(mode);
    ASSERT_EQ(out.size(), 2u);
    ASSERT_EQ(out[0].shape(), (Shape{d.S * d.B, d.H * d.D}));
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(out[0].data()[i], want[i], 1e-5) << i;
      ASSERT_NEAR(out[1].data()[i], 2 * want[i], 2e-5) << i;
    }
    if (mode != Mode::Compiled) return;
    const std::string& plan = s.plan_text();
    EXPECT_EQ(plan_kernels(plan, "transpose"), folds ? 0 : 4) << plan;
    EXPECT_EQ(plan_kernels(plan, "narrow"), folds ? 0 : 3) << plan;
    EXPECT_EQ(plan_kernels(plan, "attention"), 1) << plan;
  });
}

// ViT's whole attention block: the qkv product reads u.transpose(1, 0) and the out projection's
// result is transposed back. With the pass on (Vulkan, RLX_VK_ATTENTION_VIEWS=1) the products run
// on rows in the order that makes both transposes go too: no transpose or narrow kernel is left;
// =0 keeps all six transposes and the three narrows. Every mode agrees with the loop.
TEST(AttentionViews, TheProductsBesideTheAttentionTakeTheTransposes) {
  const Dims d{6, 2, 2, 8};
  const int64_t E = d.H * d.D;
  auto g = vit_attention(d, true);
  Tensor u = ramp({d.B, d.S, E}), wi({3 * E, E}), bi({3 * E}), wo({E, E}), bo({E});
  auto fill = [](Tensor& t, float scale, float phase) {
    float* v = t.mutable_data();
    for (int64_t i = 0; i < t.numel(); ++i) v[i] = std::cos(i * 0.61f + phase) * scale;
  };
  fill(wi, 0.3f, 0.1f), fill(bi, 0.1f, 0.7f), fill(wo, 0.25f, 1.3f), fill(bo, 0.1f, 2.1f);
  // x [S, B, 3E] = u.transpose(1, 0) W_in^T + b_in, then the attention by reference(), then the rest
  Tensor x({d.S, d.B, 3 * E});
  for (int64_t si = 0; si < d.S; ++si)
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t c = 0; c < 3 * E; ++c) {
        double acc = bi.data()[c];
        for (int64_t e = 0; e < E; ++e) acc += (double)u.data()[(b * d.S + si) * E + e] * wi.data()[c * E + e];
        x.mutable_data()[(si * d.B + b) * 3 * E + c] = (float)acc;
      }
  const auto y = reference(d, x);
  std::vector<double> want(d.B * d.S * E);
  for (int64_t si = 0; si < d.S; ++si)
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t j = 0; j < E; ++j) {
        double acc = bo.data()[j];
        for (int64_t e = 0; e < E; ++e) acc += y[(si * d.B + b) * E + e] * wo.data()[j * E + e];
        want[(b * d.S + si) * E + j] = acc + u.data()[(b * d.S + si) * E + j];
      }
  for_each_setting([&](const std::string& b, Mode mode, bool folds) {
    auto ex = make_executor(b);
    Session s(g, *ex, {{"wi", wi}, {"bi", bi}, {"wo", wo}, {"bo", bo}});
    s.set_input("u", u);
    auto out = s.run(mode);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].shape(), (Shape{d.B, d.S, E}));
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[0].data()[i], want[i], 1e-4) << i;
    if (mode != Mode::Compiled) return;
    const std::string& plan = s.plan_text();
    EXPECT_EQ(plan_kernels(plan, "transpose"), folds ? 0 : 6) << plan;
    EXPECT_EQ(plan_kernels(plan, "narrow"), folds ? 0 : 3) << plan;
    EXPECT_EQ(plan_kernels(plan, "attention"), 1) << plan;
    EXPECT_EQ(plan_kernels(plan, "linear"), 2) << plan;
  });
}

}  // namespace

namespace {

// An attention node carrying `views` (as compiled mode writes it for Vulkan; a graph file cannot:
// the attribute has more entries than a file's integer lists may hold) runs on every backend: q,
// k and v read in place from x [S, B, 3E], o written as [S, B*H, D] (the CPU gathers the views;
// Vulkan reads them, or copies through scratch where no kernel reads strides), in every mode,
// against the same loop.
TEST(AttentionViews, AnAttentionWithViewsRunsOnEveryBackend) {
  const Dims d{6, 2, 2, 8};
  const int64_t E = d.H * d.D;
  auto s = [](int64_t v) { return std::to_string(v); };
  auto g = std::make_shared<ir::Graph>(ir::load_graph_text(
      R"({"format": "rlx.graph", "version": 1, "nodes": [
    {"id": "x", "op": "input", "shape": [)" + s(d.S) + ", " + s(d.B) + ", " + s(3 * E) + R"(]},
    {"id": "a", "op": "attention", "inputs": ["x", "x", "x"]}], "outputs": ["a"]})",
      "views.json"));
  ir::AttentionViews av;
  av.B = d.B, av.H = d.H, av.Sq = av.Sk = d.S, av.D = av.Dv = d.D;
  for (int k = 0; k < 3; ++k) {
    av.off[k] = k * E;
    av.stride[k][0] = 3 * E, av.stride[k][1] = d.D, av.stride[k][2] = d.B * 3 * E;
  }
  av.stride[3][0] = E, av.stride[3][1] = d.D, av.stride[3][2] = d.B * E;
  av.out_shape = {d.S, d.B * d.H, d.D};
  ir::set_attention_views(g->nodes[g->index.at("a")].attrs, av);
  Tensor x = ramp({d.S, d.B, 3 * E});
  const auto want = reference(d, x);
  for (const std::string& b : test::built_backends())
    for (Mode mode : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {
      SCOPED_TRACE(b + " " + mode_name(mode));
      auto ex = make_executor(b);
      Session sess(g, *ex, {});
      sess.set_input("x", x);
      auto out = sess.run(mode);
      ASSERT_EQ(out.size(), 1u);
      ASSERT_EQ(out[0].shape(), (Shape{d.S, d.B * d.H, d.D}));
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[0].data()[i], want[i], 1e-5) << i;
    }
}

}  // namespace
