// Tensors kept in oneDNN's blocked channel layout between the steps of a compiled CPU plan
// (lib/backends/cpu/cpu_executor.cpp, link_conv_chains; lib/backends/cpu/blocked_ops.cpp):
// a residual add + ReLU run as a convolution's epilogue on the blocked layout, max / average
// pools, a constant pad, a global mean, and a concat of two convolutions along channels, each
// between convolutions, against plain reference loops written here; batches of 1 and 2, and
// channel counts that are no multiple of the block (the concat then falls back to NCHW); and a
// MobileNetV3 block (depthwise convolutions, squeeze-excitation, HardSwish) kept blocked.
// Compiled mode runs three times (rlx's kernels first, oneDNN's from the second). ctest also
// runs this file with RLX_CPU_ISA=avx2 (blocks of 8), RLX_CPU_ISA=base, RLX_CONV_DNNL=0
// (no oneDNN: nothing is blocked) and RLX_CONV_POSTOPS=0 (activations in rlx's epilogues).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <string>

#include "backends/cpu/blocked_ops.h"
#include "backends/cpu/dnnl_api.h"
#include "runtime/executor.h"
#include "runtime/session.h"
#include "conv_test_util.h"

using namespace rlx;
using namespace rlx::conv_test;

namespace {

bool dnnl_expected() {
  const char* sw = std::getenv("RLX_CONV_DNNL");
  return cpu::dnnl_api().ok && !(sw && std::string(sw) == "0");
}

struct Geo {
  int64_t N, C, H, W, M, G, kH, kW, sH, sW, dH, dW, pt, pl;
};

// A 3x3 (pad 1) or 1x1 convolution of x [N, C, H, W] to M channels, as a reference in double.
struct Conv {
  int64_t C, M, k;
  Tensor w, b;
};

Conv make_conv(int64_t C, int64_t M, int64_t k, std::mt19937& rng) {
  Conv c{C, M, k, random_tensor({M, C, k, k}, rng), random_tensor({M}, rng)};
  for (int64_t i = 0; i < c.w.numel(); ++i) c.w.mutable_data()[i] *= 1.f / std::sqrt((float)(C * k * k));
  return c;
}

Tensor to_tensor(const std::vector<double>& v, Shape s) {
  Tensor t(s);
  for (size_t i = 0; i < v.size(); ++i) t.mutable_data()[i] = (float)v[i];
  return t;
}

std::vector<double> ref_conv(const Conv& c, const std::vector<double>& x, int64_t N, int64_t H, int64_t W) {
  const int64_t p = c.k / 2;
  const Geo g{N, c.C, H, W, c.M, 1, c.k, c.k, 1, 1, 1, 1, p, p};
  return conv_ref(g, to_tensor(x, {N, c.C, H, W}), c.w, &c.b, H, W);
}

void relu(std::vector<double>& v) {
  for (double& e : v) e = std::max(e, 0.0);
}

// Pool of x [N, C, H, W] (kernel k, stride s, pads pt/pl/pb/pr, ceil_mode as ONNX); the average
// divides by the window clipped to the input (count_include_pad false) or to the padded input.
std::vector<double> ref_pool(const std::vector<double>& x, int64_t N, int64_t C, int64_t H, int64_t W, bool is_max,
                             int64_t k, int64_t s, int64_t pad, bool ceil_mode, bool include_pad, int64_t& OH,
                             int64_t& OW) {
  auto out = [&](int64_t L) {
    const int64_t span = L + 2 * pad - k;
    int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && (o - 1) * s >= L + pad) --o;  // the last window must start inside the input or left pad
    return o;
  };
  OH = out(H);
  OW = out(W);
  std::vector<double> y(N * C * OH * OW);
  for (int64_t p = 0; p < N * C; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double acc = is_max ? -INFINITY : 0.0;
        int64_t cnt = 0, padded = 0;
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < k; ++j) {
            const int64_t h = oh * s - pad + i, w = ow * s - pad + j;
            if (h < H + pad && w < W + pad) padded++;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            const double v = x[(p * H + h) * W + w];
            acc = is_max ? std::max(acc, v) : acc + v;
            cnt++;
          }
        y[(p * OH + oh) * OW + ow] = is_max ? acc : acc / (double)(include_pad ? padded : cnt);
      }
  return y;
}

std::string param(const std::string& id, const Tensor& t) {
  return R"({"id": ")" + id + R"(", "op": "param", "shape": )" + shape_json(t.shape()) + "}, ";
}
std::string conv_node(const std::string& id, const std::string& in, const std::string& w, int64_t k) {
  const int64_t p = k / 2;
  return R"({"id": ")" + id + R"(", "op": "conv2d", "inputs": [")" + in + R"(", ")" + w + R"(_w", ")" + w +
         R"(_b"], "attrs": {"strides": [1,1], "dilations": [1,1], "pads": )" + ints({p, p, p, p}) + R"(, "groups": 1}}, )";
}

// Runs the graph (nodes, outputs) in compiled mode three times against `want` per output;
// returns the plan's text.
std::string run_compiled(const std::string& nodes, const std::vector<std::string>& outs,
                         const std::map<std::string, Tensor>& params, const Tensor& x,
                         const std::vector<std::pair<std::vector<double>, Shape>>& want, const std::string& what) {
  std::string body = nodes;
  while (!body.empty() && (body.back() == ' ' || body.back() == ',')) body.pop_back();
  std::string o;
  for (const auto& s : outs) o += (o.empty() ? "\"" : ", \"") + s + "\"";
  auto g = std::make_shared<ir::Graph>(ir::load_graph_text(
      R"({"format": "rlx.graph", "version": 1, "nodes": [{"id": "x", "op": "input", "shape": )" + shape_json(x.shape()) +
          "}, " + body + R"(], "outputs": [)" + o + "]}",
      "t.json"));
  auto ex = make_executor("cpu", 0);
  Session sess(g, *ex, params);
  sess.set_input("x", x);
  for (int run = 0; run < 3; ++run) {
    auto got = sess.run(Mode::Compiled);
    EXPECT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < want.size() && i < got.size(); ++i)
      expect_close(got[i], want[i].first, want[i].second, 1e-4,
                   what + ", output " + outs[i] + ", run " + std::to_string(run + 1));
  }
  return sess.plan_text();
}

void add_params(std::map<std::string, Tensor>& params, std::string& nodes, const std::string& id, const Conv& c) {
  params[id + "_w"] = c.w;
  params[id + "_b"] = c.b;
  nodes += param(id + "_w", c.w) + param(id + "_b", c.b);
}

// Two residual blocks: c1 -> ReLU = r1; c2(r1) + r1 -> ReLU = y1; c3(y1) + y1 -> ReLU = y. Each
// add reads a tensor that is itself a blocked convolution result: the epilogue runs on the
// blocked layout and nothing in the middle is converted to NCHW.
TEST(BlockedLayout, ResidualAddReluAgainstTheReferenceLoop) {
  std::mt19937 rng(77);
  for (const auto& [N, C, M, H, W] : std::vector<std::array<int64_t, 5>>{{2, 8, 32, 9, 11}, {1, 5, 24, 7, 6}, {2, 16, 40, 6, 5}}) {
    const std::string what = "N " + std::to_string(N) + ", M " + std::to_string(M);
    Conv c1 = make_conv(C, M, 3, rng), c2 = make_conv(M, M, 3, rng), c3 = make_conv(M, M, 3, rng);
    Tensor x = random_tensor({N, C, H, W}, rng);
    std::vector<double> xv(x.data(), x.data() + x.numel());
    std::vector<double> r1 = ref_conv(c1, xv, N, H, W);
    relu(r1);
    std::vector<double> y1 = ref_conv(c2, r1, N, H, W);
    for (size_t i = 0; i < y1.size(); ++i) y1[i] += r1[i];
    relu(y1);
    std::vector<double> y = ref_conv(c3, y1, N, H, W);
    for (size_t i = 0; i < y.size(); ++i) y[i] += y1[i];
    relu(y);
    std::map<std::string, Tensor> params;
    std::string nodes;
    add_params(params, nodes, "c1", c1);
    add_params(params, nodes, "c2", c2);
    add_params(params, nodes, "c3", c3);
    nodes += conv_node("a1", "x", "c1", 3) + R"({"id": "r1", "op": "relu", "inputs": ["a1"]}, )" + conv_node("a2", "r1", "c2", 3) +
             R"({"id": "s2", "op": "add", "inputs": ["a2", "r1"]}, {"id": "y1", "op": "relu", "inputs": ["s2"]}, )" +
             conv_node("a3", "y1", "c3", 3) +
             R"({"id": "s3", "op": "add", "inputs": ["y1", "a3"]}, {"id": "y", "op": "relu", "inputs": ["s3"]})";
    const std::string plan = run_compiled(nodes, {"y"}, params, x, {{y, {N, M, H, W}}}, what);
    // y1 a graph output too: kept blocked for a3 and also written NCHW.
    const std::string plan2 =
        run_compiled(nodes, {"y", "y1"}, params, x, {{y, {N, M, H, W}}, {y1, {N, M, H, W}}}, what + ", y1 an output");
    if (dnnl_expected())
      EXPECT_NE(plan2.find("output kept blocked for later steps, and converted to NCHW for other readers"), std::string::npos)
          << what << "\n" << plan2;
    if (dnnl_expected()) {
      EXPECT_NE(plan.find("'a2' (conv2d): oneDNN"), std::string::npos) << what << "\n" << plan;
      // a2's and a3's epilogues read r1 and y1 blocked; r1 and y1 have no NCHW copy.
      size_t n = 0;
      for (size_t at = 0; (at = plan.find("epilogue run on the blocked layout", at)) != std::string::npos; ++at) n++;
      EXPECT_EQ(n, 2u) << what << "\n" << plan;
      EXPECT_NE(plan.find("output kept blocked for later steps (no NCHW copy)"), std::string::npos) << what << "\n" << plan;
    } else {
      EXPECT_EQ(plan.find("read blocked"), std::string::npos) << what << "\n" << plan;
    }
  }
}

// conv -> ReLU -> max pool 3x3/2 pad 1 -> conv -> ReLU -> constant pad 1 -> average pool 3x3/2
// (ceil mode, and no pad in the pool: its divisor counts the padded zeros) -> conv -> ReLU = r3;
// outputs: a 2x2/2 max pool of r3, and r3's global mean (as GlobalAveragePool imports).
TEST(BlockedLayout, PoolsPadAndGlobalMeanBetweenConvsAgainstTheReferenceLoop) {
  std::mt19937 rng(78);
  for (const auto& [N, C, M, H, W] : std::vector<std::array<int64_t, 5>>{{2, 3, 32, 17, 14}, {1, 6, 20, 13, 16}}) {
    const std::string what = "N " + std::to_string(N) + ", M " + std::to_string(M);
    Conv c1 = make_conv(C, M, 3, rng), c2 = make_conv(M, M, 3, rng), c3 = make_conv(M, M, 1, rng);
    Tensor x = random_tensor({N, C, H, W}, rng);
    std::vector<double> xv(x.data(), x.data() + x.numel());
    std::vector<double> r1 = ref_conv(c1, xv, N, H, W);
    relu(r1);
    int64_t H1, W1, H2, W2, H3, W3;
    std::vector<double> p1 = ref_pool(r1, N, M, H, W, true, 3, 2, 1, false, false, H1, W1);
    std::vector<double> r2 = ref_conv(c2, p1, N, H1, W1);
    relu(r2);
    // pad then pool without pads == pool with pad 1 counting the padding
    std::vector<double> p2 = ref_pool(r2, N, M, H1, W1, false, 3, 2, 1, true, true, H2, W2);
    std::vector<double> r3 = ref_conv(c3, p2, N, H2, W2);
    relu(r3);
    std::vector<double> y = ref_pool(r3, N, M, H2, W2, true, 2, 2, 0, false, false, H3, W3);
    std::vector<double> g(N * M, 0.0);
    for (int64_t p = 0; p < N * M; ++p) {
      for (int64_t i = 0; i < H2 * W2; ++i) g[p] += r3[p * H2 * W2 + i];
      g[p] /= (double)(H2 * W2);
    }
    std::map<std::string, Tensor> params;
    std::string nodes;
    add_params(params, nodes, "c1", c1);
    add_params(params, nodes, "c2", c2);
    add_params(params, nodes, "c3", c3);
    nodes += conv_node("a1", "x", "c1", 3) + R"({"id": "r1", "op": "relu", "inputs": ["a1"]}, )" +
             R"({"id": "p1", "op": "max_pool2d", "inputs": ["r1"], "attrs": {"kernel": [3,3], "strides": [2,2], "pads": [1,1,1,1]}}, )" +
             conv_node("a2", "p1", "c2", 3) + R"({"id": "r2", "op": "relu", "inputs": ["a2"]}, )" +
             R"({"id": "d2", "op": "pad", "inputs": ["r2"], "attrs": {"pads": [0,0,1,1,0,0,1,1]}}, )" +
             R"({"id": "p2", "op": "avg_pool2d", "inputs": ["d2"], "attrs": {"kernel": [3,3], "strides": [2,2], "ceil_mode": true}}, )" +
             conv_node("a3", "p2", "c3", 1) + R"({"id": "r3", "op": "relu", "inputs": ["a3"]}, )" +
             R"({"id": "y", "op": "max_pool2d", "inputs": ["r3"], "attrs": {"kernel": [2,2], "strides": [2,2]}}, )" +
             R"({"id": "g", "op": "mean", "inputs": ["r3"], "attrs": {"axes": [2,3], "keepdims": true}})";
    const std::string plan =
        run_compiled(nodes, {"y", "g"}, params, x, {{y, {N, M, H3, W3}}, {g, {N, M, 1, 1}}}, what);
    if (dnnl_expected()) {
      for (const char* s : {"'p1' (max_pool2d): on the blocked layout", "'d2' (pad): on the blocked layout",
                            "'p2' (avg_pool2d): on the blocked layout", "'y' (max_pool2d): on the blocked layout",
                            "'g' (mean): on the blocked layout"})
        EXPECT_NE(plan.find(s), std::string::npos) << what << ": " << s << "\n" << plan;
    } else {
      EXPECT_EQ(plan.find("read blocked"), std::string::npos) << what << "\n" << plan;
    }
  }
}

// Two convolutions of x, each + ReLU, concatenated along channels, then a convolution: the
// concat runs on the blocked layout where both channel counts are multiples of the block and a
// convolution reads the result, and on NCHW (the convolutions' results converted) where one
// count is not or only a sigmoid reads it.
TEST(BlockedLayout, ConcatOfTwoConvsAgainstTheReferenceLoop) {
  std::mt19937 rng(79);
  const int64_t B = cpu::blocked_block();
  for (const auto& [N, M1, M2] : std::vector<std::array<int64_t, 3>>{{2, 16, 32}, {1, 32, 16}, {2, 24, 16}, {1, 20, 12}}) {
    const int64_t C = 12, H = 8, W = 9, K = 16;
    const std::string what = "N " + std::to_string(N) + ", " + std::to_string(M1) + " + " + std::to_string(M2) + " channels";
    Conv c1 = make_conv(C, M1, 3, rng), c2 = make_conv(C, M2, 1, rng), c3 = make_conv(M1 + M2, K, 3, rng);
    Tensor x = random_tensor({N, C, H, W}, rng);
    std::vector<double> xv(x.data(), x.data() + x.numel());
    std::vector<double> r1 = ref_conv(c1, xv, N, H, W), r2 = ref_conv(c2, xv, N, H, W);
    relu(r1);
    relu(r2);
    std::vector<double> cat;
    for (int64_t n = 0; n < N; ++n) {
      cat.insert(cat.end(), r1.begin() + n * M1 * H * W, r1.begin() + (n + 1) * M1 * H * W);
      cat.insert(cat.end(), r2.begin() + n * M2 * H * W, r2.begin() + (n + 1) * M2 * H * W);
    }
    std::vector<double> y = ref_conv(c3, cat, N, H, W);
    std::map<std::string, Tensor> params;
    std::string nodes;
    add_params(params, nodes, "c1", c1);
    add_params(params, nodes, "c2", c2);
    add_params(params, nodes, "c3", c3);
    nodes += conv_node("a1", "x", "c1", 3) + R"({"id": "r1", "op": "relu", "inputs": ["a1"]}, )" + conv_node("a2", "x", "c2", 1) +
             R"({"id": "r2", "op": "relu", "inputs": ["a2"]}, )" +
             R"({"id": "cat", "op": "concat", "inputs": ["r1", "r2"], "attrs": {"axis": 1}}, )" + conv_node("y", "cat", "c3", 3);
    std::string plan = run_compiled(nodes, {"y"}, params, x, {{y, {N, K, H, W}}}, what);
    // The 1x1 conv a2 goes to oneDNN only when something reads its result blocked (the rule).
    const bool blocked = dnnl_expected() && M1 % B == 0 && M2 % B == 0;
    EXPECT_EQ(plan.find("'cat' (concat): on the blocked layout, 2 inputs read blocked; output blocked (no NCHW copy)") !=
                  std::string::npos,
              blocked)
        << what << "\n" << plan;
    if (blocked) EXPECT_NE(plan.find("'y' (conv2d): oneDNN"), std::string::npos) << what << "\n" << plan;
    // Read by an op with no blocked kernel (a sigmoid): the concat runs on NCHW after all, the
    // convolutions' results converted.
    std::vector<double> sg(cat);
    for (double& v : sg) v = 1 / (1 + std::exp(-v));
    const std::string nodes2 = nodes.substr(0, nodes.rfind(R"({"id": "y")")) + R"({"id": "y", "op": "sigmoid", "inputs": ["cat"]})";
    plan = run_compiled(nodes2, {"y"}, params, x, {{sg, {N, M1 + M2, H, W}}}, what + ", sigmoid");
    EXPECT_EQ(plan.find("(concat): on the blocked layout"), std::string::npos) << what << "\n" << plan;
  }
}

// A MobileNetV3 block: 1x1 expansion + HardSwish, depthwise k x k (stride 1 or 2) + activation
// (ReLU, ReLU6 as min / max, HardSwish, PP-LCNet's affine HardSwish, SiLU), squeeze-excitation (global mean -> 1x1 -> ReLU -> 1x1 ->
// HardSigmoid -> x * s), 1x1 projection, the residual add where the shapes allow. The activations
// are written as the ONNX importer writes them (HardSwish x * min(max(x / 6 + 1/2, 0), 1)), so the
// fuser makes them programs; against reference loops in double. With oneDNN, the activations run
// inside the convolutions' kernels (post-ops; RLX_CONV_POSTOPS=0: rlx's epilogue on the blocked
// buffer), the depthwise result stays blocked with no NCHW copy (the mean and the projection,
// which scales its input per channel, read it blocked), and SE's two 1x1 convs are rlx's products.
TEST(BlockedLayout, MobileNetBlockWithDepthwiseAndSqueezeExcitationAgainstTheReferenceLoop) {
  std::mt19937 rng(80);
  struct Case {
    int64_t N, C, E, R, M, H, W, k, s;
    const char* act;  // the depthwise conv's activation
  };
  const char* sw = std::getenv("RLX_CONV_POSTOPS");
  const bool postops = dnnl_expected() && !(sw && std::string(sw) == "0");
  for (const Case& t : std::vector<Case>{{1, 16, 40, 16, 16, 14, 14, 3, 1, "hardswish"},
                                         {2, 12, 36, 12, 20, 11, 9, 5, 2, "relu"},
                                         {2, 24, 72, 24, 24, 8, 8, 5, 1, "relu6"},
                                         {1, 16, 96, 24, 24, 13, 13, 3, 2, "hardswish"},
                                         {2, 16, 48, 16, 16, 10, 7, 3, 1, "lcnet"},
                                         {1, 24, 40, 8, 24, 9, 9, 5, 2, "silu"}}) {
    const std::string what = "N " + std::to_string(t.N) + ", E " + std::to_string(t.E) + ", " + std::to_string(t.k) + "x" +
                             std::to_string(t.k) + "/" + std::to_string(t.s) + " " + t.act;
    const int64_t N = t.N, E = t.E, H = t.H, W = t.W, k = t.k, s = t.s, p = k / 2;
    const int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
    Conv ce = make_conv(t.C, E, 1, rng), cf1 = make_conv(E, t.R, 1, rng), cf2 = make_conv(t.R, E, 1, rng),
         cp = make_conv(E, t.M, 1, rng);
    Conv cd{E, E, k, random_tensor({E, 1, k, k}, rng), random_tensor({E}, rng)};
    for (int64_t i = 0; i < cd.w.numel(); ++i) cd.w.mutable_data()[i] *= 1.f / (float)k;
    Tensor x = random_tensor({N, t.C, H, W}, rng);
    std::vector<double> xv(x.data(), x.data() + x.numel());
    auto hswish = [](double v) { return v * std::min(std::max(v / 6 + 0.5, 0.0), 1.0); };
    std::vector<double> h = ref_conv(ce, xv, N, H, W);
    for (double& v : h) v = hswish(v);
    const Geo gd{N, E, H, W, E, E, k, k, s, s, 1, 1, p, p};
    std::vector<double> d = conv_ref(gd, to_tensor(h, {N, E, H, W}), cd.w, &cd.b, OH, OW);
    // PP-LCNet's affine HardSwish: 0.7 * (u * clip(u + 3, 0, 6) / 6) - 0.2 with u = v + 0.4
    auto lcnet = [](double v) {
      const double u = v + 0.4;
      return 0.7 * (u * std::min(std::max(u + 3, 0.0), 6.0) / 6) - 0.2;
    };
    const std::string act = t.act;
    for (double& v : d)
      v = act == "relu"    ? std::max(v, 0.0)
          : act == "relu6" ? std::min(std::max(v, 0.0), 6.0)
          : act == "lcnet" ? lcnet(v)
          : act == "silu"  ? v / (1 + std::exp(-v))
                           : hswish(v);
    std::vector<double> m(N * E, 0.0);
    for (int64_t i = 0; i < N * E; ++i) {
      for (int64_t q = 0; q < OH * OW; ++q) m[i] += d[i * OH * OW + q];
      m[i] /= (double)(OH * OW);
    }
    std::vector<double> f1 = ref_conv(cf1, m, N, 1, 1);
    relu(f1);
    std::vector<double> f2 = ref_conv(cf2, f1, N, 1, 1);
    for (double& v : f2) v = std::min(std::max(v / 6 + 0.5, 0.0), 1.0);
    std::vector<double> sc(d);
    for (int64_t i = 0; i < N * E; ++i)
      for (int64_t q = 0; q < OH * OW; ++q) sc[i * OH * OW + q] *= f2[i];
    std::vector<double> y = ref_conv(cp, sc, N, OH, OW);
    const bool residual = s == 1 && t.C == t.M;
    if (residual)
      for (size_t i = 0; i < y.size(); ++i) y[i] += xv[i];
    std::map<std::string, Tensor> params;
    std::string nodes;
    for (const auto& [id, c] : std::vector<std::pair<std::string, Conv*>>{{"ce", &ce}, {"cd", &cd}, {"cf1", &cf1}, {"cf2", &cf2}, {"cp", &cp}})
      add_params(params, nodes, id, *c);
    nodes += R"({"id": "k6", "op": "constant", "shape": [], "value": 0.16666666666666666}, )"
             R"({"id": "kh", "op": "constant", "shape": [], "value": 0.5}, {"id": "k0", "op": "constant", "shape": [], "value": 0.0}, )"
             R"({"id": "k1", "op": "constant", "shape": [], "value": 1.0}, {"id": "kx", "op": "constant", "shape": [], "value": 6.0}, )"
             R"({"id": "kc", "op": "constant", "shape": [], "value": 0.4}, {"id": "k3", "op": "constant", "shape": [], "value": 3.0}, )"
             R"({"id": "ka", "op": "constant", "shape": [], "value": 0.7}, {"id": "kb", "op": "constant", "shape": [], "value": -0.2}, )";
    // v's HardSwish (or HardSigmoid: without the last product) as the importer writes it.
    auto hard = [](const std::string& v, const std::string& out, bool swish) {
      return R"({"id": ")" + out + R"(_m", "op": "mul", "inputs": [")" + v + R"(", "k6"]}, )" + R"({"id": ")" + out +
             R"(_a", "op": "add", "inputs": [")" + out + R"(_m", "kh"]}, )" + R"({"id": ")" + out +
             R"(_x", "op": "maximum", "inputs": [")" + out + R"(_a", "k0"]}, )" + R"({"id": ")" + out +
             (swish ? "_n" : "") + R"(", "op": "minimum", "inputs": [")" + out + R"(_x", "k1"]}, )" +
             (swish ? R"({"id": ")" + out + R"(", "op": "mul", "inputs": [")" + v + R"(", ")" + out + R"(_n"]}, )" : "");
    };
    nodes += conv_node("e", "x", "ce", 1) + hard("e", "h", true);
    nodes += R"({"id": "dc", "op": "conv2d", "inputs": ["h", "cd_w", "cd_b"], "attrs": {"strides": )" + ints({s, s}) +
             R"(, "dilations": [1,1], "pads": )" + ints({p, p, p, p}) + R"(, "groups": )" + std::to_string(E) + "}}, ";
    if (act == "relu") nodes += R"({"id": "d", "op": "relu", "inputs": ["dc"]}, )";
    else if (act == "relu6")
      nodes += R"({"id": "d_x", "op": "maximum", "inputs": ["dc", "k0"]}, {"id": "d", "op": "minimum", "inputs": ["d_x", "kx"]}, )";
    else if (act == "lcnet")  // as PaddleOCR's detector writes it (the fuser folds (v + 0.4) + 3)
      nodes += R"({"id": "d_u", "op": "add", "inputs": ["dc", "kc"]}, {"id": "d_3", "op": "add", "inputs": ["d_u", "k3"]}, )"
               R"({"id": "d_x", "op": "maximum", "inputs": ["d_3", "k0"]}, {"id": "d_n", "op": "minimum", "inputs": ["d_x", "kx"]}, )"
               R"({"id": "d_p", "op": "mul", "inputs": ["d_u", "d_n"]}, {"id": "d_q", "op": "div", "inputs": ["d_p", "kx"]}, )"
               R"({"id": "d_r", "op": "mul", "inputs": ["ka", "d_q"]}, {"id": "d", "op": "add", "inputs": ["d_r", "kb"]}, )";
    else if (act == "silu")  // EfficientNet's, as x * sigmoid(x)
      nodes += R"({"id": "d_s", "op": "sigmoid", "inputs": ["dc"]}, {"id": "d", "op": "mul", "inputs": ["dc", "d_s"]}, )";
    else nodes += hard("dc", "d", true);
    nodes += R"({"id": "m", "op": "mean", "inputs": ["d"], "attrs": {"axes": [2,3], "keepdims": true}}, )" +
             conv_node("f1c", "m", "cf1", 1) + R"({"id": "f1", "op": "relu", "inputs": ["f1c"]}, )" + conv_node("f2c", "f1", "cf2", 1) +
             hard("f2c", "f2", false) + R"({"id": "sc", "op": "mul", "inputs": ["d", "f2"]}, )" +
             conv_node(residual ? "pc" : "y", "sc", "cp", 1);
    if (residual) nodes += R"({"id": "y", "op": "add", "inputs": ["pc", "x"]})";
    const std::string plan = run_compiled(nodes, {"y"}, params, x, {{y, {N, t.M, OH, OW}}}, what);
    auto line_of = [&](const std::string& id) {
      const size_t at = plan.find("  '" + id + "' (conv2d)");
      return at == std::string::npos ? std::string() : plan.substr(at, plan.find('\n', at) - at);
    };
    if (dnnl_expected()) {
      const std::string dl = line_of("dc");
      EXPECT_NE(dl.find("oneDNN jit_dw"), std::string::npos) << what << "\n" << plan;
      EXPECT_NE(dl.find("output kept blocked for later steps (no NCHW copy)"), std::string::npos) << what << "\n" << plan;
      EXPECT_EQ(dl.find("in its kernel") != std::string::npos, postops) << what << "\n" << plan;
      EXPECT_EQ(line_of("e").find("hardswish in its kernel") != std::string::npos, postops) << what << "\n" << plan;
      const std::string pl = line_of(residual ? "pc" : "y");
      EXPECT_NE(pl.find("prologue mul"), std::string::npos) << what << "\n" << plan;
      EXPECT_NE(pl.find("input read blocked"), std::string::npos) << what << "\n" << plan;
      EXPECT_NE(line_of("f1c").find("rlx's kernel"), std::string::npos) << what << "\n" << plan;
      EXPECT_NE(plan.find("'m' (mean): on the blocked layout"), std::string::npos) << what << "\n" << plan;
    } else {
      EXPECT_EQ(plan.find("read blocked"), std::string::npos) << what << "\n" << plan;
    }
  }
}

}  // namespace
