// conv2d (1-D as 2-D too) and conv3d through oneDNN's convolution primitive in compiled CPU plans
// (lib/backends/cpu/dnnl_conv.cpp):
// odd geometries (channels that are not a multiple of the layout's 16 / 8 block, groups,
// depthwise with and without a multiplier, dilation, asymmetric padding, strides, a floor
// division that leaves input columns unused, 3-channel first layers, batches) with each
// consumer the plan folds into the convolution's epilogue (ReLU, Clip(0, 6), HardSigmoid,
// HardSwish, Sigmoid, SiLU, a residual add, a squeeze-excitation scale), against plain reference
// loops written here. Compiled mode runs three times: the first run uses rlx's own kernel, the
// oneDNN primitives are made before the second. ctest also runs this file with RLX_CPU_ISA=avx2
// (nChw8c, oneDNN capped at AVX2), RLX_CPU_ISA=base (oneDNN off), RLX_CONV_DNNL=0 and
// RLX_CONV_DNNL=all (the per-shape rule off).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>

#include "backends/cpu/dnnl_api.h"
#include "backends/cpu/isa.h"
#include "runtime/executor.h"
#include "runtime/session.h"
#include "conv_test_util.h"

using namespace rlx;
using namespace rlx::conv_test;

namespace {

struct Geo {
  int64_t N, C, H, W, M, G, kH, kW, sH, sW, dH, dW, pt, pl, pb, pr;
  bool bias;
};

// The consumers: graph nodes after the conv (output "y", the conv is "c") and the same formula.
struct Act {
  const char* name;
  std::string nodes;  // JSON nodes reading "c" (and "r" / "s", inputs declared by the test)
  std::function<double(double c, double r, double s)> f;
  bool residual = false, scale = false;
};

std::vector<Act> acts() {
  auto k = [](const char* id, double v) {
    return std::string(R"({"id": ")") + id + R"(", "op": "constant", "shape": [], "value": )" + std::to_string(v) + "}, ";
  };
  const std::string hs = k("k0", 0.0) + k("k1", 1.0) + k("k6", 1.0 / 6) + k("kh", 0.5) +
                         R"({"id": "h1", "op": "mul", "inputs": ["c", "k6"]}, {"id": "h2", "op": "add", "inputs": ["h1", "kh"]},)"
                         R"( {"id": "h3", "op": "minimum", "inputs": ["h2", "k1"]}, {"id": "hsig", "op": "maximum", "inputs": ["h3", "k0"]}, )";
  auto hsig = [](double c) { return std::max(0.0, std::min(1.0, c / 6 + 0.5)); };
  return {
      {"none", R"({"id": "y", "op": "add", "inputs": ["c", "c"]})", [](double c, double, double) { return 2 * c; }},
      {"relu", R"({"id": "y", "op": "relu", "inputs": ["c"]})", [](double c, double, double) { return std::max(c, 0.0); }},
      {"clip(0, 6)",
       k("z", 0.0) + k("six", 6.0) +
           R"({"id": "a", "op": "maximum", "inputs": ["c", "z"]}, {"id": "y", "op": "minimum", "inputs": ["a", "six"]})",
       [](double c, double, double) { return std::min(6.0, std::max(0.0, c)); }},
      {"hardsigmoid", hs + R"({"id": "y", "op": "add", "inputs": ["hsig", "k0"]})",
       [hsig](double c, double, double) { return hsig(c); }},
      {"hardswish", hs + R"({"id": "y", "op": "mul", "inputs": ["c", "hsig"]})",
       [hsig](double c, double, double) { return c * hsig(c); }},
      {"sigmoid", R"({"id": "y", "op": "sigmoid", "inputs": ["c"]})",
       [](double c, double, double) { return 1 / (1 + std::exp(-c)); }},
      {"silu", R"({"id": "y", "op": "silu", "inputs": ["c"]})", [](double c, double, double) { return c / (1 + std::exp(-c)); }},
      {"relu + residual", R"({"id": "a", "op": "add", "inputs": ["c", "r"]}, {"id": "y", "op": "relu", "inputs": ["a"]})",
       [](double c, double r, double) { return std::max(c + r, 0.0); }, true},
      {"squeeze-excitation scale", R"({"id": "y", "op": "mul", "inputs": ["c", "s"]})",
       [](double c, double, double s) { return c * s; }, false, true},
  };
}

bool dnnl_expected() {
  const char* sw = std::getenv("RLX_CONV_DNNL");
  return cpu::dnnl_api().ok && !(sw && std::string(sw) == "0");
}
// RLX_CONV_DNNL=all: oneDNN runs whatever it has a jit kernel for, the per-shape rule aside.
bool rule_off() {
  const char* sw = std::getenv("RLX_CONV_DNNL");
  return sw && std::string(sw) == "all";
}

TEST(DnnlConv, OddGeometriesAndEveryEpilogueAgainstTheReferenceLoop) {
  auto ex = make_executor("cpu", 0);
  // N, C, H, W, M, G, kH, kW, sH, sW, dH, dW, pt, pl, pb, pr, bias
  const struct {
    const char* what;
    Geo p;
    bool onednn;  // oneDNN runs it (when on); otherwise rlx's kernel, the plan says why
    bool rule = false;  // the per-shape rule leaves it to rlx's kernel (RLX_CONV_DNNL=all: oneDNN)
  } cases[] = {
      {"depthwise 3x3, 37 channels", {1, 37, 13, 17, 37, 37, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, true},
      {"depthwise 5x5 stride 2, batch 3", {3, 24, 15, 14, 24, 24, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, true}, true},
      {"depthwise x2 multiplier, dilation 2 (oneDNN: no jit kernel)", {1, 16, 11, 19, 32, 16, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, false}, false},
      {"depthwise, asymmetric pads, unused columns", {2, 32, 10, 12, 32, 32, 3, 3, 2, 2, 1, 1, 0, 1, 1, 0, true}, true},
      {"3x3, 24 -> 40 channels", {1, 24, 12, 13, 40, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, true},
      {"3x2 dilation 2x3 stride 1x2 asymmetric pads", {2, 20, 14, 15, 18, 1, 3, 2, 1, 2, 2, 3, 2, 0, 1, 3, true}, true},
      {"first layer, 3 channels, 7x7 stride 2", {1, 3, 30, 26, 20, 1, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, true}, true},
      {"1x1, 200 -> 136", {1, 200, 9, 11, 136, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, false}, true},
      {"1x1, 40 -> 72 (the rule: rlx's GEMM)", {1, 40, 9, 11, 72, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, true}, false, true},
      {"1x1 on a 1x1 map, batch 2 (the rule: rlx's GEMM)", {2, 96, 1, 1, 200, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, true}, false, true},
      {"1x1 stride 2, batch 3", {3, 48, 9, 10, 20, 1, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, true}, true},
      {"groups 2 of 16 -> 32 channels", {1, 32, 9, 9, 64, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, true},
      {"groups 8 of 4 channels (oneDNN: no jit kernel)", {1, 32, 9, 9, 32, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, false},
  };
  std::mt19937 rng(2311);
  const auto all = acts();
  for (const auto& c : cases) {
    const Geo& p = c.p;
    const int64_t eH = (p.kH - 1) * p.dH + 1, eW = (p.kW - 1) * p.dW + 1;
    const int64_t OH = (p.H + p.pt + p.pb - eH) / p.sH + 1, OW = (p.W + p.pl + p.pr - eW) / p.sW + 1;
    Tensor x = random_tensor({p.N, p.C, p.H, p.W}, rng), w = random_tensor({p.M, p.C / p.G, p.kH, p.kW}, rng),
           b = random_tensor({p.M}, rng), r = random_tensor({p.N, p.M, OH, OW}, rng),
           s = random_tensor({p.N, p.M, 1, 1}, rng);
    const std::vector<double> conv = conv_ref(p, x, w, p.bias ? &b : nullptr, OH, OW);
    const std::string attrs = R"({"strides": )" + ints({p.sH, p.sW}) + R"(, "dilations": )" + ints({p.dH, p.dW}) +
                              R"(, "pads": )" + ints({p.pt, p.pl, p.pb, p.pr}) + R"(, "groups": )" + std::to_string(p.G) + "}";
    for (const Act& a : all) {
      std::string nodes = R"({"id": "x", "op": "input", "shape": )" + shape_json(x.shape()) +
                          R"(}, {"id": "w", "op": "param", "shape": )" + shape_json(w.shape()) + "}, " +
                          (p.bias ? R"({"id": "b", "op": "param", "shape": )" + shape_json(b.shape()) + "}, " : "") +
                          (a.residual ? R"({"id": "r", "op": "input", "shape": )" + shape_json(r.shape()) + "}, " : "") +
                          (a.scale ? R"({"id": "s", "op": "input", "shape": )" + shape_json(s.shape()) + "}, " : "") +
                          R"({"id": "c", "op": "conv2d", "inputs": ["x", "w")" + (p.bias ? R"(, "b")" : "") +
                          R"(], "attrs": )" + attrs + "}, " + a.nodes;
      std::vector<double> want(conv.size());
      const int64_t plane = OH * OW;
      for (size_t i = 0; i < conv.size(); ++i)
        want[i] = a.f(conv[i], r.data()[i], s.data()[i / plane]);
      std::map<std::string, Tensor> params{{"w", w}};
      if (p.bias) params["b"] = b;
      Session sess(graph(nodes), *ex, params);
      sess.set_input("x", x);
      if (a.residual) sess.set_input("r", r);
      if (a.scale) sess.set_input("s", s);
      const double tol = 1e-5 * std::max(1.0, std::sqrt((double)(p.C / p.G * p.kH * p.kW)));
      const std::string what = std::string(c.what) + ", " + a.name;
      for (int run = 0; run < 3; ++run)
        expect_close(sess.run(Mode::Compiled)[0], want, {p.N, p.M, OH, OW}, tol, what + ", run " + std::to_string(run + 1));
      // The plan says which kernel ran it: oneDNN where it is on and takes the shape.
      const std::string plan = sess.plan_text();
      if (dnnl_expected() && (c.rule ? rule_off() : c.onednn))
        EXPECT_NE(plan.find(" (conv2d): oneDNN"), std::string::npos) << what << "\n" << plan;
      else
        EXPECT_NE(plan.find(" (conv2d): rlx's kernel ("), std::string::npos) << what << "\n" << plan;
    }
  }
}

// A mobile-net block: 1x1 expand + ReLU -> depthwise 3x3 + HardSwish -> 1x1 project + residual.
// The expand's and the depthwise's results stay in the blocked layout (neither is converted
// back to NCHW; the plan says so); a batch of 2, and channels that are no multiple of 16.
TEST(DnnlConv, ChainKeptBlockedAgainstTheReferenceLoop) {
  auto ex = make_executor("cpu", 0);
  std::mt19937 rng(4242);
  const int64_t N = 2, C = 24, H = 15, W = 13, E = 88, P = 24;
  const Geo g1{N, C, H, W, E, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, true};
  const Geo g2{N, E, H, W, E, E, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true};
  const Geo g3{N, E, H, W, P, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, true};
  Tensor x = random_tensor({N, C, H, W}, rng), w1 = random_tensor({E, C, 1, 1}, rng), b1 = random_tensor({E}, rng),
         w2 = random_tensor({E, 1, 3, 3}, rng), b2 = random_tensor({E}, rng), w3 = random_tensor({P, E, 1, 1}, rng),
         b3 = random_tensor({P}, rng);
  auto to_tensor = [](const std::vector<double>& v, Shape s) {
    Tensor t(s);
    for (size_t i = 0; i < v.size(); ++i) t.mutable_data()[i] = (float)v[i];
    return t;
  };
  std::vector<double> a1 = conv_ref(g1, x, w1, &b1, H, W);
  for (double& v : a1) v = std::max(v, 0.0);
  std::vector<double> a2 = conv_ref(g2, to_tensor(a1, {N, E, H, W}), w2, &b2, H, W);
  for (double& v : a2) v = v * std::max(0.0, std::min(1.0, v / 6 + 0.5));
  std::vector<double> want = conv_ref(g3, to_tensor(a2, {N, E, H, W}), w3, &b3, H, W);
  const float* X = x.data();
  for (size_t i = 0; i < want.size(); ++i) want[i] += X[i];  // P == C: the residual is x
  auto param = [](const char* id, const Tensor& t) {
    return std::string(R"({"id": ")") + id + R"(", "op": "param", "shape": )" + shape_json(t.shape()) + "}, ";
  };
  const std::string pw = R"(, "attrs": {"strides": [1,1], "dilations": [1,1], "pads": [0,0,0,0], "groups": 1}}, )";
  const std::string nodes =
      R"({"id": "x", "op": "input", "shape": )" + shape_json(x.shape()) + "}, " + param("w1", w1) + param("b1", b1) +
      param("w2", w2) + param("b2", b2) + param("w3", w3) + param("b3", b3) +
      R"({"id": "k0", "op": "constant", "shape": [], "value": 0.0}, {"id": "k1", "op": "constant", "shape": [], "value": 1.0},)"
      R"( {"id": "k6", "op": "constant", "shape": [], "value": 0.16666666666666666}, {"id": "kh", "op": "constant", "shape": [], "value": 0.5},)"
      R"( {"id": "c1", "op": "conv2d", "inputs": ["x", "w1", "b1"])" + pw +
      R"({"id": "r1", "op": "relu", "inputs": ["c1"]}, {"id": "c2", "op": "conv2d", "inputs": ["r1", "w2", "b2"], "attrs": )"
      R"({"strides": [1,1], "dilations": [1,1], "pads": [1,1,1,1], "groups": 88}}, )"
      R"({"id": "h1", "op": "mul", "inputs": ["c2", "k6"]}, {"id": "h2", "op": "add", "inputs": ["h1", "kh"]},)"
      R"( {"id": "h3", "op": "minimum", "inputs": ["h2", "k1"]}, {"id": "h4", "op": "maximum", "inputs": ["h3", "k0"]},)"
      R"( {"id": "a2", "op": "mul", "inputs": ["c2", "h4"]}, {"id": "c3", "op": "conv2d", "inputs": ["a2", "w3", "b3"])" + pw +
      R"({"id": "y", "op": "add", "inputs": ["c3", "x"]})";
  Session sess(graph(nodes), *ex, {{"w1", w1}, {"b1", b1}, {"w2", w2}, {"b2", b2}, {"w3", w3}, {"b3", b3}});
  sess.set_input("x", x);
  for (int run = 0; run < 3; ++run)
    expect_close(sess.run(Mode::Compiled)[0], want, {N, P, H, W}, 1e-4, "chain, run " + std::to_string(run + 1));
  const std::string plan = sess.plan_text();
  if (dnnl_expected()) {
    EXPECT_NE(plan.find("output kept blocked for later steps (no NCHW copy)"), std::string::npos) << plan;
    EXPECT_NE(plan.find("input read blocked (as an earlier step left it)"), std::string::npos) << plan;
    EXPECT_NE(plan.find("(2 links kept blocked,"), std::string::npos) << plan;
  } else {
    EXPECT_NE(plan.find("(0 links kept blocked,"), std::string::npos) << plan;
  }
}

// Squeeze-excitation's scale before a convolution: conv(x * s), s [N, C, 1, 1], folded into the
// conversion of x (the plan says so), for a 1x1 the rule would leave to rlx's GEMM and a 3x3.
TEST(DnnlConv, ScaleFoldedIntoTheConversionAgainstTheReferenceLoop) {
  auto ex = make_executor("cpu", 0);
  std::mt19937 rng(99);
  for (const Geo& p : {Geo{2, 40, 9, 11, 24, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, true},
                       Geo{1, 48, 10, 7, 20, 1, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, false}}) {
    const int64_t OH = (p.H + p.pt + p.pb - p.kH) / p.sH + 1, OW = (p.W + p.pl + p.pr - p.kW) / p.sW + 1;
    Tensor x = random_tensor({p.N, p.C, p.H, p.W}, rng), s = random_tensor({p.N, p.C, 1, 1}, rng),
           w = random_tensor({p.M, p.C, p.kH, p.kW}, rng), b = random_tensor({p.M}, rng);
    Tensor xs({p.N, p.C, p.H, p.W});
    for (int64_t i = 0; i < x.numel(); ++i) xs.mutable_data()[i] = x.data()[i] * s.data()[i / (p.H * p.W)];
    const std::vector<double> want = conv_ref(p, xs, w, p.bias ? &b : nullptr, OH, OW);
    const std::string nodes =
        R"({"id": "x", "op": "input", "shape": )" + shape_json(x.shape()) + R"(}, {"id": "s", "op": "input", "shape": )" +
        shape_json(s.shape()) + R"(}, {"id": "w", "op": "param", "shape": )" + shape_json(w.shape()) + "}, " +
        (p.bias ? R"({"id": "b", "op": "param", "shape": )" + shape_json(b.shape()) + "}, " : "") +
        R"({"id": "xs", "op": "mul", "inputs": ["s", "x"]}, {"id": "y", "op": "conv2d", "inputs": ["xs", "w")" +
        (p.bias ? R"(, "b")" : "") + R"(], "attrs": {"strides": )" + ints({p.sH, p.sW}) +
        R"(, "dilations": [1,1], "pads": )" + ints({p.pt, p.pl, p.pb, p.pr}) + R"(, "groups": 1}})";
    std::map<std::string, Tensor> params{{"w", w}};
    if (p.bias) params["b"] = b;
    Session sess(graph(nodes), *ex, params);
    sess.set_input("x", x);
    sess.set_input("s", s);
    for (int run = 0; run < 2; ++run)
      expect_close(sess.run(Mode::Compiled)[0], want, {p.N, p.M, OH, OW}, 1e-4, "scaled input, run " + std::to_string(run + 1));
    const std::string plan = sess.plan_text();
    if (dnnl_expected())
      EXPECT_NE(plan.find("+ prologue mul 'xs' (each input channel scaled while converted)"), std::string::npos) << plan;
  }
}

// 1-D convolutions as the ONNX import gives them: x [N, C, W] and the weight [M, C / G, k]
// reshaped to [N, C, 1, W] and [M, C / G, 1, k] (the weight's view of a param counts as constant:
// oneDNN may take it), the conv2d's output reshaped back to [N, M, OW], then the consumer (it runs
// in the epilogue through the reshape). Wide kernels with pads oneDNN's jit kernels refuse get
// columns of zeros written by rlx into the converted input (the plan says so); depthwise and narrow
// 1x1 ones stay with rlx's kernels by the rule (RLX_CONV_DNNL=all: oneDNN).
TEST(DnnlConv, OneDimensionalAgainstTheReferenceLoop) {
  auto ex = make_executor("cpu", 0);
  // N, C, H, W, M, G, kH, kW, sH, sW, dH, dW, pt, pl, pb, pr, bias (H = 1, kH = 1)
  const struct {
    const char* what;
    Geo p;
    bool jit;      // oneDNN has a jit kernel for it (with rlx's columns of zeros where needed)
    bool rule;     // the rule prefers rlx's kernel
    bool padded;   // the plan pads the input rows itself
  } cases[] = {
      {"kernel 32 pad 16, 40 -> 72 (wav2letter's wide conv)", {1, 40, 1, 50, 72, 1, 1, 32, 1, 1, 1, 1, 0, 16, 0, 16, true}, true, false, true},
      {"kernel 7 pad 3, 48 -> 48, batch 2", {2, 48, 1, 37, 48, 1, 1, 7, 1, 1, 1, 1, 0, 3, 0, 3, true}, true, false, false},
      {"kernel 5 stride 3 dilation 2, pads 6 / 2", {1, 32, 1, 61, 24, 1, 1, 5, 1, 3, 1, 2, 0, 6, 0, 2, false}, true, false, false},
      {"first layer, 1 channel, kernel 250 stride 160 pad 45 (wav2letter's)", {1, 1, 1, 1000, 32, 1, 1, 250, 1, 160, 1, 1, 0, 45, 0, 45, true}, true, false, true},
      {"first layer, 1 channel, kernel 40 stride 8 pad 20", {1, 1, 1, 400, 32, 1, 1, 40, 1, 8, 1, 1, 0, 20, 0, 20, true}, true, false, false},
      {"depthwise kernel 3 dilation 16 pad 16 (conv_tasnet's)", {1, 48, 1, 90, 48, 48, 1, 3, 1, 1, 1, 16, 0, 16, 0, 16, true}, true, true, true},
      {"1x1, 32 -> 64 over a row", {2, 32, 1, 45, 64, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, true}, true, true, false},
      {"1x1, 520 -> 520 over a row", {1, 520, 1, 21, 520, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, true}, true, false, false},
  };
  std::mt19937 rng(1717);
  const auto all = acts();
  for (const auto& c : cases) {
    const Geo& p = c.p;
    const int64_t eW = (p.kW - 1) * p.dW + 1, OW = (p.W + p.pl + p.pr - eW) / p.sW + 1;
    Tensor x = random_tensor({p.N, p.C, p.W}, rng), w = random_tensor({p.M, p.C / p.G, p.kW}, rng),
           b = random_tensor({p.M}, rng), r = random_tensor({p.N, p.M, OW}, rng), s = random_tensor({p.N, p.M, 1}, rng);
    const Tensor x4 = x.reshaped({p.N, p.C, 1, p.W}), w4 = w.reshaped({p.M, p.C / p.G, 1, p.kW});
    const std::vector<double> conv = conv_ref(p, x4, w4, p.bias ? &b : nullptr, 1, OW);
    const std::string attrs = R"({"strides": )" + ints({1, p.sW}) + R"(, "dilations": )" + ints({1, p.dW}) +
                              R"(, "pads": )" + ints({0, p.pl, 0, p.pr}) + R"(, "groups": )" + std::to_string(p.G) + "}";
    for (const Act& a : all) {
      if (std::string(a.name) == "hardsigmoid" || std::string(a.name) == "clip(0, 6)") continue;  // (2-D test has them)
      std::string nodes = R"({"id": "x3", "op": "input", "shape": )" + shape_json(x.shape()) +
                          R"(}, {"id": "w3", "op": "param", "shape": )" + shape_json(w.shape()) + "}, " +
                          (p.bias ? R"({"id": "b", "op": "param", "shape": )" + shape_json(b.shape()) + "}, " : "") +
                          (a.residual ? R"({"id": "r", "op": "input", "shape": )" + shape_json(r.shape()) + "}, " : "") +
                          (a.scale ? R"({"id": "s", "op": "input", "shape": )" + shape_json(s.shape()) + "}, " : "") +
                          R"({"id": "x", "op": "reshape", "inputs": ["x3"], "attrs": {"shape": )" + ints({p.N, p.C, 1, p.W}) + "}}, " +
                          R"({"id": "w", "op": "reshape", "inputs": ["w3"], "attrs": {"shape": )" + ints({p.M, p.C / p.G, 1, p.kW}) + "}}, " +
                          R"({"id": "c4", "op": "conv2d", "inputs": ["x", "w")" + (p.bias ? R"(, "b")" : "") +
                          R"(], "attrs": )" + attrs + "}, " +
                          R"({"id": "c", "op": "reshape", "inputs": ["c4"], "attrs": {"shape": )" + ints({p.N, p.M, OW}) + "}}, " + a.nodes;
      std::vector<double> want(conv.size());
      for (size_t i = 0; i < conv.size(); ++i) want[i] = a.f(conv[i], r.data()[i], s.data()[i / OW]);
      std::map<std::string, Tensor> params{{"w3", w}};
      if (p.bias) params["b"] = b;
      Session sess(graph(nodes), *ex, params);
      sess.set_input("x3", x);
      if (a.residual) sess.set_input("r", r);
      if (a.scale) sess.set_input("s", s);
      const double tol = 1e-5 * std::max(1.0, std::sqrt((double)(p.C / p.G * p.kW)));
      const std::string what = std::string(c.what) + ", " + a.name;
      for (int run = 0; run < 3; ++run)
        expect_close(sess.run(Mode::Compiled)[0], want, {p.N, p.M, OW}, tol, what + ", run " + std::to_string(run + 1));
      const std::string plan = sess.plan_text();
      if (dnnl_expected() && c.jit && (!c.rule || rule_off())) {
        EXPECT_NE(plan.find(" (conv2d): oneDNN"), std::string::npos) << what << "\n" << plan;
        if (c.padded)  // (with AVX2 oneDNN's kernels may want rlx's columns for more shapes)
          EXPECT_NE(plan.find("input rows padded by rlx"), std::string::npos) << what << "\n" << plan;
      } else {
        EXPECT_NE(plan.find(" (conv2d): rlx's kernel ("), std::string::npos) << what << "\n" << plan;
      }
    }
  }
}

// 3-D convolutions (video networks: r3d_18, mc3_18, r2plus1d_18, s3d) through oneDNN's nCdhw16c
// (nCdhw8c with AVX2) primitives, with their epilogues, against the 3-D reference loop.
TEST(DnnlConv, ThreeDimensionalAgainstTheReferenceLoop) {
  auto ex = make_executor("cpu", 0);
  const struct {
    const char* what;
    int64_t N, C, M, G;
    Axes3 in, k, s, d, p0, p1;
    bool bias, jit;
    bool rule = false;  // the per-shape rule leaves it to rlx's kernel (RLX_CONV_DNNL=all: oneDNN)
  } cases[] = {
      {"3x3x3, 20 -> 24, batch 2", 2, 20, 24, 1, {4, 6, 7}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, true, true},
      {"first layer, 3 channels, 3x7x7 stride 1x2x2", 1, 3, 16, 1, {4, 13, 12}, {3, 7, 7}, {1, 2, 2}, {1, 1, 1}, {1, 3, 3}, {1, 3, 3}, false, true},
      {"first layer, 3 channels, 1x7x7 stride 1x2x2 (a separable stem)", 1, 3, 24, 1, {3, 11, 12}, {1, 7, 7}, {1, 2, 2}, {1, 1, 1}, {0, 3, 3}, {0, 3, 3}, true, true},
      {"1x1x1 stride 2 (a downsample)", 1, 32, 40, 1, {5, 6, 6}, {1, 1, 1}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, true, true, true},
      {"1x1x1, 160 -> 128", 1, 160, 128, 1, {3, 5, 4}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, true, true, true},
      {"3x1x1 temporal, dilation 2, asymmetric pads", 1, 16, 24, 1, {7, 5, 5}, {3, 1, 1}, {1, 1, 1}, {2, 1, 1}, {2, 0, 0}, {1, 0, 0}, true, true, true},
      // The temporal path (conv_temporal.h) with its epilogue fused: s3d's 7x1x1 stem (stride 2,
      // pads 3, fewer frames than its window covers at the edges), a batch of 2 with groups,
      // and position blocks that do not divide the map.
      {"7x1x1 temporal stride 2, pads 3", 1, 24, 32, 1, {9, 5, 7}, {7, 1, 1}, {2, 1, 1}, {1, 1, 1}, {3, 0, 0}, {3, 0, 0}, true, true, true},
      {"3x1x1 temporal, groups 2, batch 2", 2, 32, 48, 2, {5, 4, 5}, {3, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 0, 0}, {2, 0, 0}, false, false, true},
      {"3x1x1 temporal over 300 positions", 1, 48, 40, 1, {6, 15, 20}, {3, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 0, 0}, {1, 0, 0}, true, true, true},
      {"1x3x3 stride 1x2x2, unused columns", 2, 24, 16, 1, {3, 8, 9}, {1, 3, 3}, {1, 2, 2}, {1, 1, 1}, {0, 1, 1}, {0, 0, 0}, true, true, true},
      {"groups 2 of 16 -> 16", 1, 32, 32, 2, {3, 5, 6}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, true, true},
  };
  std::mt19937 rng(3131);
  const auto all = acts();
  for (const auto& c : cases) {
    Axes3 out;
    for (int i = 0; i < 3; ++i) out[i] = (c.in[i] + c.p0[i] + c.p1[i] - ((c.k[i] - 1) * c.d[i] + 1)) / c.s[i] + 1;
    const Shape ys{c.N, c.M, out[0], out[1], out[2]};
    Tensor x = random_tensor({c.N, c.C, c.in[0], c.in[1], c.in[2]}, rng),
           w = random_tensor({c.M, c.C / c.G, c.k[0], c.k[1], c.k[2]}, rng), b = random_tensor({c.M}, rng),
           r = random_tensor(ys, rng), s = random_tensor({c.N, c.M, 1, 1, 1}, rng);
    const std::vector<double> conv = conv3_ref(c.N, c.C, c.M, c.G, c.in, c.k, c.s, c.d, c.p0, out, x, w, c.bias ? &b : nullptr);
    const std::string attrs = R"({"strides": )" + ints({c.s[0], c.s[1], c.s[2]}) + R"(, "dilations": )" +
                              ints({c.d[0], c.d[1], c.d[2]}) + R"(, "pads": )" +
                              ints({c.p0[0], c.p0[1], c.p0[2], c.p1[0], c.p1[1], c.p1[2]}) + R"(, "groups": )" +
                              std::to_string(c.G) + "}";
    const int64_t plane = out[0] * out[1] * out[2];
    for (const Act& a : all) {
      if (std::string(a.name) == "hardsigmoid" || std::string(a.name) == "clip(0, 6)") continue;  // (2-D test has them)
      std::string nodes = R"({"id": "x", "op": "input", "shape": )" + shape_json(x.shape()) +
                          R"(}, {"id": "w", "op": "param", "shape": )" + shape_json(w.shape()) + "}, " +
                          (c.bias ? R"({"id": "b", "op": "param", "shape": )" + shape_json(b.shape()) + "}, " : "") +
                          (a.residual ? R"({"id": "r", "op": "input", "shape": )" + shape_json(r.shape()) + "}, " : "") +
                          (a.scale ? R"({"id": "s", "op": "input", "shape": )" + shape_json(s.shape()) + "}, " : "") +
                          R"({"id": "c", "op": "conv3d", "inputs": ["x", "w")" + (c.bias ? R"(, "b")" : "") +
                          R"(], "attrs": )" + attrs + "}, " + a.nodes;
      std::vector<double> want(conv.size());
      for (size_t i = 0; i < conv.size(); ++i) want[i] = a.f(conv[i], r.data()[i], s.data()[i / plane]);
      std::map<std::string, Tensor> params{{"w", w}};
      if (c.bias) params["b"] = b;
      Session sess(graph(nodes), *ex, params);
      sess.set_input("x", x);
      if (a.residual) sess.set_input("r", r);
      if (a.scale) sess.set_input("s", s);
      const double tol = 1e-5 * std::max(1.0, std::sqrt((double)(c.C / c.G * c.k[0] * c.k[1] * c.k[2])));
      const std::string what = std::string(c.what) + ", " + a.name;
      for (int run = 0; run < 3; ++run)
        expect_close(sess.run(Mode::Compiled)[0], want, ys, tol, what + ", run " + std::to_string(run + 1));
      const std::string plan = sess.plan_text();
      if (dnnl_expected() && c.jit && (!c.rule || rule_off()))
        EXPECT_NE(plan.find(" (conv3d): oneDNN"), std::string::npos) << what << "\n" << plan;
      else
        EXPECT_NE(plan.find(" (conv3d): rlx's kernel ("), std::string::npos) << what << "\n" << plan;
      EXPECT_NE(plan.find(" + epilogue "), std::string::npos) << what << ": consumer not fused\n" << plan;
    }
  }
}

// Dense 3x3 stride-1 convolutions, which oneDNN runs with Winograd (jit_wino_4x3 /
// jit_fp32_wino_2x3, AVX-512 only) from 7x7 maps up (RLX_CONV_WINOGRAD=1: all of them,
// =0: none): maps that are no multiple of the 4x4 output tiles, channels that are no multiple of
// 16, a batch of 2, ReLU fused, against the reference loop. Winograd's transforms add rounding:
// with these N(0, 1) tensors the worst error relative to 1 + |y| measured 1.3e-4 for C = 128
// (F(4x4, 3x3), |y| up to ~100) against direct's 2.1e-5, 1-1.4e-5 for C = 40 and 64 (direct's
// alike), so the tolerance is twice direct's 1e-5 sqrt(C k k) of the other tests (6.8e-4 at 128).
TEST(DnnlConv, Winograd3x3AgainstTheReferenceLoop) {
  auto ex = make_executor("cpu", 0);
  const char* sw = std::getenv("RLX_CONV_WINOGRAD");
  const std::string wsw = sw ? sw : "";
  const bool wino_on = dnnl_expected() && cpu::isa_avx512() && wsw != "0";
  std::mt19937 rng(733);
  const struct {
    const char* what;
    Geo p;
    bool rule;  // the rule picks Winograd (maps of 7x7 and more)
  } cases[] = {
      {"64 -> 48 at 15x13", {1, 64, 15, 13, 48, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, true},
      {"40 -> 72 at 12x12, batch 2", {2, 40, 12, 12, 72, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, true},
      {"128 -> 128 at 28x28, no bias", {1, 128, 28, 28, 128, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, false}, true},
      {"32 -> 32 at 7x7", {1, 32, 7, 7, 32, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, true},
      {"32 -> 32 at 6x5 (the rule: direct)", {1, 32, 6, 5, 32, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, false},
  };
  for (const auto& c : cases) {
    const Geo& p = c.p;
    Tensor x = random_tensor({p.N, p.C, p.H, p.W}, rng), w = random_tensor({p.M, p.C, 3, 3}, rng),
           b = random_tensor({p.M}, rng);
    std::vector<double> want = conv_ref(p, x, w, p.bias ? &b : nullptr, p.H, p.W);
    for (double& v : want) v = std::max(v, 0.0);
    const std::string nodes =
        R"({"id": "x", "op": "input", "shape": )" + shape_json(x.shape()) + R"(}, {"id": "w", "op": "param", "shape": )" +
        shape_json(w.shape()) + "}, " + (p.bias ? R"({"id": "b", "op": "param", "shape": )" + shape_json(b.shape()) + "}, " : "") +
        R"({"id": "c", "op": "conv2d", "inputs": ["x", "w")" + (p.bias ? R"(, "b")" : "") +
        R"(], "attrs": {"strides": [1,1], "dilations": [1,1], "pads": [1,1,1,1], "groups": 1}}, )"
        R"({"id": "y", "op": "relu", "inputs": ["c"]})";
    std::map<std::string, Tensor> params{{"w", w}};
    if (p.bias) params["b"] = b;
    Session sess(graph(nodes), *ex, params);
    sess.set_input("x", x);
    const double tol = 2e-5 * std::sqrt((double)(p.C * 9));
    for (int run = 0; run < 3; ++run)
      expect_close(sess.run(Mode::Compiled)[0], want, {p.N, p.M, p.H, p.W}, tol,
                   std::string(c.what) + ", run " + std::to_string(run + 1));
    const std::string plan = sess.plan_text();
    const bool wino = wino_on && (c.rule || wsw == "1");
    EXPECT_EQ(plan.find("wino") != std::string::npos, wino) << c.what << "\n" << plan;
  }
}

}  // namespace
