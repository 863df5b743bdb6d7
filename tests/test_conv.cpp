// The convolution family (conv2d, conv_transpose2d, max_pool2d, avg_pool2d, resize):
// randomized geometries on every available backend against plain reference loops written
// here (conv2d as a gather, conv_transpose2d as a scatter, pools as explicit windows with
// the ONNX output-size rule), and the load-time refusals of bad shapes and attributes.
// Small shapes: the whole file runs in about a second per backend.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>

#include "core/error.h"
#include "ir/loader.h"
#include "ir/op_registry.h"
#include "runtime/session.h"
#include "conv_test_util.h"

using namespace rlx;
using namespace rlx::conv_test;

namespace {

struct Conv {
  int64_t N, C, H, W, M, G, kH, kW, sH, sW, dH, dW, pt, pl, pb, pr, oph = 0, opw = 0;
  bool bias;
  std::string attrs(bool transpose) const {
    std::string a = R"({"strides": )" + ints({sH, sW}) + R"(, "dilations": )" + ints({dH, dW}) + R"(, "pads": )" +
                    ints({pt, pl, pb, pr}) + R"(, "groups": )" + std::to_string(G);
    if (transpose) a += R"(, "output_padding": )" + ints({oph, opw});
    return a + "}";
  }
};

// Every x[n, c, i, j] * w[c, m, kh, kw] is scattered to (i sH + kh dH - top, j sW + kw dW - left).
std::vector<double> conv_transpose_ref(const Conv& p, const Tensor& x, const Tensor& w, const Tensor* b, int64_t OH,
                                       int64_t OW) {
  const int64_t Cg = p.C / p.G, Mg = p.M / p.G;
  std::vector<double> y(p.N * p.M * OH * OW, 0.0);
  const float *X = x.data(), *Wt = w.data();
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t c = 0; c < p.C; ++c)
      for (int64_t i = 0; i < p.H; ++i)
        for (int64_t j = 0; j < p.W; ++j)
          for (int64_t ml = 0; ml < Mg; ++ml)
            for (int64_t kh = 0; kh < p.kH; ++kh)
              for (int64_t kw = 0; kw < p.kW; ++kw) {
                int64_t oh = i * p.sH + kh * p.dH - p.pt, ow = j * p.sW + kw * p.dW - p.pl;
                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                int64_t m = (c / Cg) * Mg + ml;
                y[((n * p.M + m) * OH + oh) * OW + ow] +=
                    (double)X[((n * p.C + c) * p.H + i) * p.W + j] * Wt[((c * Mg + ml) * p.kH + kh) * p.kW + kw];
              }
  if (b)
    for (int64_t k = 0; k < (int64_t)y.size(); ++k) y[k] += b->data()[(k / (OH * OW)) % p.M];
  return y;
}

class ConvFamily : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    try {
      ex_ = make_executor(GetParam(), 0);
    } catch (const std::exception& e) {
      GTEST_SKIP() << GetParam() << " unavailable: " << e.what();
    }
  }
  // Runs graph `nodes` (output "y") in eager mode with the given leaves.
  Tensor run(const std::string& nodes, std::map<std::string, Tensor> params, const Tensor& x) {
    Session s(graph(nodes), *ex_, std::move(params));
    s.set_input("x", x);
    return s.run(Mode::Eager)[0];
  }
  std::unique_ptr<Executor> ex_;
};

TEST_P(ConvFamily, Conv2dRandomGeometries) {
  std::mt19937 rng(1234);
  auto U = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int it = 0; it < 40; ++it) {
    Conv p{};
    p.G = U(1, 3);
    p.C = p.G * U(1, 3);
    p.M = p.G * U(1, 3);
    if (it % 5 == 0) p.G = p.C, p.M = p.C * U(1, 2);  // depthwise (with multiplier)
    p.N = U(1, 2), p.kH = U(1, 4), p.kW = U(1, 4), p.sH = U(1, 3), p.sW = U(1, 3), p.dH = U(1, 2), p.dW = U(1, 2);
    p.pt = U(0, 2), p.pl = U(0, 2), p.pb = U(0, 2), p.pr = U(0, 2), p.bias = U(0, 1);
    const int64_t eH = (p.kH - 1) * p.dH + 1, eW = (p.kW - 1) * p.dW + 1;
    p.H = std::max<int64_t>(1, eH - p.pt - p.pb) + U(0, 7);
    p.W = std::max<int64_t>(1, eW - p.pl - p.pr) + U(0, 7);
    const int64_t OH = (p.H + p.pt + p.pb - eH) / p.sH + 1, OW = (p.W + p.pl + p.pr - eW) / p.sW + 1;
    Tensor x = random_tensor({p.N, p.C, p.H, p.W}, rng), w = random_tensor({p.M, p.C / p.G, p.kH, p.kW}, rng),
           b = random_tensor({p.M}, rng);
    std::string nodes = R"({"id": "x", "op": "input", "shape": )" + shape_json(x.shape()) +
                        R"(}, {"id": "w", "op": "param", "shape": )" + shape_json(w.shape()) + "}, " +
                        (p.bias ? R"({"id": "b", "op": "param", "shape": )" + shape_json(b.shape()) + "}, " : "") +
                        R"({"id": "y", "op": "conv2d", "inputs": ["x", "w")" + (p.bias ? R"(, "b")" : "") +
                        R"(], "attrs": )" + p.attrs(false) + "}";
    std::map<std::string, Tensor> params{{"w", w}};
    if (p.bias) params["b"] = b;
    Tensor y = run(nodes, params, x);
    expect_close(y, conv_ref(p, x, w, p.bias ? &b : nullptr, OH, OW), {p.N, p.M, OH, OW}, 1e-5,
                 "conv2d case " + std::to_string(it) + " " + nodes);
  }
}

// Batches of 3 images through each conv2d path of the CPU kernel (1x1 reading x in place, 1x1 on a
// 1x1 map as one product over the batch, im2col tiles with groups / stride / padding / dilation,
// several tiles per image, depthwise with and without a channel multiplier), in every mode,
// against the reference loop: each image must come out as the loop computes it.
TEST_P(ConvFamily, Conv2dBatchOfThreeInEveryMode) {
  struct Case {
    const char* what;
    Conv p;
  };
  // N, C, H, W, M, G, kH, kW, sH, sW, dH, dW, pt, pl, pb, pr, oph, opw, bias
  const Case cases[] = {
      {"1x1", {3, 24, 9, 11, 20, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, true}},
      {"1x1 on a 1x1 map (squeeze-excitation)", {3, 40, 1, 1, 24, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, true}},
      {"1x1 on a 1x1 map, no bias", {3, 17, 1, 1, 33, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, false}},
      {"1x1 on a 1x1 map, groups 2", {3, 8, 1, 1, 6, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, true}},
      {"1x1 with stride 2", {3, 8, 9, 10, 12, 1, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0, true}},
      {"1x1 with padding", {3, 8, 5, 6, 12, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 0, false}},
      {"3x3 pad 1", {3, 16, 12, 13, 24, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, true}},
      {"3x3 groups 4 stride 2", {3, 16, 13, 11, 8, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, true}},
      {"3x2 dilation 2x3 asymmetric pads", {3, 6, 14, 15, 10, 2, 3, 2, 1, 2, 2, 3, 2, 0, 1, 3, 0, 0, true}},
      {"3x3 several tiles per image", {3, 64, 44, 50, 8, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, true}},
      {"1x1 several tiles per image", {3, 70, 40, 52, 5, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, false}},
      {"depthwise 3x3 (16- and 8-column blocks)", {3, 12, 10, 43, 12, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, true}},
      {"depthwise 5x5 stride 2x1 pad 2", {3, 10, 12, 16, 10, 10, 5, 5, 2, 1, 1, 1, 2, 2, 2, 2, 0, 0, true}},
      {"depthwise x2 multiplier dilation 2", {3, 5, 11, 37, 10, 5, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 0, 0, false}},
      {"first conv (3 channels, stride 2)", {3, 3, 16, 20, 16, 1, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, true}},
  };
  std::mt19937 rng(77);
  for (const Case& c : cases) {
    const Conv& p = c.p;
    const int64_t eH = (p.kH - 1) * p.dH + 1, eW = (p.kW - 1) * p.dW + 1;
    const int64_t OH = (p.H + p.pt + p.pb - eH) / p.sH + 1, OW = (p.W + p.pl + p.pr - eW) / p.sW + 1;
    Tensor x = random_tensor({p.N, p.C, p.H, p.W}, rng), w = random_tensor({p.M, p.C / p.G, p.kH, p.kW}, rng),
           b = random_tensor({p.M}, rng);
    std::string nodes = R"({"id": "x", "op": "input", "shape": )" + shape_json(x.shape()) +
                        R"(}, {"id": "w", "op": "param", "shape": )" + shape_json(w.shape()) + "}, " +
                        (p.bias ? R"({"id": "b", "op": "param", "shape": )" + shape_json(b.shape()) + "}, " : "") +
                        R"({"id": "y", "op": "conv2d", "inputs": ["x", "w")" + (p.bias ? R"(, "b")" : "") +
                        R"(], "attrs": )" + p.attrs(false) + "}";
    std::map<std::string, Tensor> params{{"w", w}};
    if (p.bias) params["b"] = b;
    const std::vector<double> want = conv_ref(p, x, w, p.bias ? &b : nullptr, OH, OW);
    for (Mode m : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {
      Session s(graph(nodes), *ex_, params);
      s.set_input("x", x);
      // f32 sums of K = Cg kH kW products of N(0, 1) values (up to 576 here): rounding grows like sqrt(K).
      const double tol = 1e-5 * std::max(1.0, std::sqrt((double)(p.C / p.G * p.kH * p.kW)));
      expect_close(s.run(m)[0], want, {p.N, p.M, OH, OW}, tol, std::string(c.what) + " in " + mode_name(m) + " mode");
    }
  }
}

TEST_P(ConvFamily, ConvTranspose2dRandomGeometries) {
  std::mt19937 rng(99);
  auto U = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int it = 0; it < 40; ++it) {
    Conv p{};
    p.G = U(1, 3);
    p.C = p.G * U(1, 3);
    p.M = p.G * U(1, 3);
    p.N = U(1, 2), p.kH = U(1, 4), p.kW = U(1, 4), p.sH = U(1, 3), p.sW = U(1, 3), p.dH = U(1, 2), p.dW = U(1, 2);
    p.H = U(1, 6), p.W = U(1, 6), p.bias = U(0, 1);
    p.oph = U(0, std::max(p.sH, p.dH) - 1), p.opw = U(0, std::max(p.sW, p.dW) - 1);
    const int64_t fullH = p.sH * (p.H - 1) + (p.kH - 1) * p.dH + 1 + p.oph;
    const int64_t fullW = p.sW * (p.W - 1) + (p.kW - 1) * p.dW + 1 + p.opw;
    p.pt = U(0, std::min<int64_t>(2, (fullH - 1) / 2)), p.pb = U(0, std::min<int64_t>(2, (fullH - 1) / 2));
    p.pl = U(0, std::min<int64_t>(2, (fullW - 1) / 2)), p.pr = U(0, std::min<int64_t>(2, (fullW - 1) / 2));
    const int64_t OH = fullH - p.pt - p.pb, OW = fullW - p.pl - p.pr;
    Tensor x = random_tensor({p.N, p.C, p.H, p.W}, rng), w = random_tensor({p.C, p.M / p.G, p.kH, p.kW}, rng),
           b = random_tensor({p.M}, rng);
    std::string nodes = R"({"id": "x", "op": "input", "shape": )" + shape_json(x.shape()) +
                        R"(}, {"id": "w", "op": "param", "shape": )" + shape_json(w.shape()) + "}, " +
                        (p.bias ? R"({"id": "b", "op": "param", "shape": )" + shape_json(b.shape()) + "}, " : "") +
                        R"({"id": "y", "op": "conv_transpose2d", "inputs": ["x", "w")" + (p.bias ? R"(, "b")" : "") +
                        R"(], "attrs": )" + p.attrs(true) + "}";
    std::map<std::string, Tensor> params{{"w", w}};
    if (p.bias) params["b"] = b;
    Tensor y = run(nodes, params, x);
    expect_close(y, conv_transpose_ref(p, x, w, p.bias ? &b : nullptr, OH, OW), {p.N, p.M, OH, OW}, 1e-5,
                 "conv_transpose2d case " + std::to_string(it) + " " + nodes);
  }
}

// ONNX / PyTorch pooling length: floor or ceil of (in + pads - extent) / stride, plus one;
// with ceil_mode a window that would start inside the trailing padding is dropped.
int64_t pool_len(int64_t in, int64_t p0, int64_t p1, int64_t ext, int64_t s, bool ceil_mode) {
  double q = double(in + p0 + p1 - ext) / double(s);
  int64_t out = (int64_t)(ceil_mode ? std::ceil(q) : std::floor(q)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p0) --out;
  return out;
}

TEST_P(ConvFamily, PoolsRandomGeometries) {
  std::mt19937 rng(7);
  auto U = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int it = 0; it < 60; ++it) {
    const bool is_max = it % 2 == 0, ceil_mode = U(0, 1), include_pad = U(0, 1);
    const int64_t N = U(1, 2), C = U(1, 3), kH = U(1, 4), kW = U(1, 4), sH = U(1, 3), sW = U(1, 3);
    const int64_t dH = is_max ? U(1, 2) : 1, dW = is_max ? U(1, 2) : 1;
    const int64_t eH = (kH - 1) * dH + 1, eW = (kW - 1) * dW + 1;
    const int64_t pt = U(0, std::min<int64_t>(2, eH - 1)), pb = U(0, std::min<int64_t>(2, eH - 1));
    const int64_t pl = U(0, std::min<int64_t>(2, eW - 1)), pr = U(0, std::min<int64_t>(2, eW - 1));
    const int64_t H = std::max<int64_t>(1, eH - pt - pb) + U(0, 6), W = std::max<int64_t>(1, eW - pl - pr) + U(0, 6);
    const int64_t OH = pool_len(H, pt, pb, eH, sH, ceil_mode), OW = pool_len(W, pl, pr, eW, sW, ceil_mode);
    Tensor x = random_tensor({N, C, H, W}, rng);
    std::string attrs = R"({"kernel": )" + ints({kH, kW}) + R"(, "strides": )" + ints({sH, sW}) + R"(, "pads": )" +
                        ints({pt, pl, pb, pr}) + R"(, "ceil_mode": )" + (ceil_mode ? "true" : "false");
    attrs += is_max ? R"(, "dilations": )" + ints({dH, dW}) : std::string(R"(, "count_include_pad": )") + (include_pad ? "true" : "false");
    std::string nodes = R"({"id": "x", "op": "input", "shape": )" + shape_json(x.shape()) + R"(}, {"id": "y", "op": ")" +
                        (is_max ? "max_pool2d" : "avg_pool2d") + R"(", "inputs": ["x"], "attrs": )" + attrs + "}}";
    std::vector<double> want(N * C * OH * OW);
    const float* X = x.data();
    for (int64_t p = 0; p < N * C; ++p)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = is_max ? -INFINITY : 0.0;
          int64_t count = 0, padded = 0;
          for (int64_t i = 0; i < kH; ++i)
            for (int64_t j = 0; j < kW; ++j) {
              int64_t ih = oh * sH - pt + i * dH, iw = ow * sW - pl + j * dW;
              // the padded input spans [-pt, H + pb) x [-pl, W + pr); ceil_mode windows may overhang it
              if (ih >= -pt && ih < H + pb && iw >= -pl && iw < W + pr) ++padded;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              double v = X[(p * H + ih) * W + iw];
              acc = is_max ? std::max(acc, v) : acc + v;
              ++count;
            }
          want[(p * OH + oh) * OW + ow] = is_max ? acc : acc / double(include_pad ? padded : count);
        }
    Tensor y = run(nodes, {}, x);
    expect_close(y, want, {N, C, OH, OW}, 1e-6, "pool case " + std::to_string(it) + " " + nodes);
  }
}

// Max pools over rows wide enough for the 8-column AVX2 path (stride 1 and 2 along W, dilation,
// pads, ceil_mode), with NaNs in the input: a window holding a NaN gives NaN, the others the max.
TEST_P(ConvFamily, MaxPoolWideRowsWithNaN) {
  std::mt19937 rng(31);
  struct P { int64_t H, W, k, s, d, pad; bool ceil; };
  for (const P& c : {P{9, 113, 3, 2, 1, 1, true}, P{7, 64, 3, 1, 1, 1, false}, P{6, 37, 2, 2, 1, 0, false},
                     P{8, 50, 3, 1, 2, 2, false}, P{5, 91, 5, 2, 1, 2, true}}) {
    Tensor x = random_tensor({1, 2, c.H, c.W}, rng);
    for (int i = 0; i < 6; ++i) x.mutable_data()[std::uniform_int_distribution<int64_t>(0, x.numel() - 1)(rng)] = NAN;
    const int64_t e = (c.k - 1) * c.d + 1;
    const int64_t OH = pool_len(c.H, c.pad, c.pad, e, c.s, c.ceil), OW = pool_len(c.W, c.pad, c.pad, e, c.s, c.ceil);
    const std::string nodes = R"({"id": "x", "op": "input", "shape": )" + shape_json(x.shape()) +
                              R"(}, {"id": "y", "op": "max_pool2d", "inputs": ["x"], "attrs": {"kernel": )" +
                              ints({c.k, c.k}) + R"(, "strides": )" + ints({c.s, c.s}) + R"(, "pads": )" +
                              ints({c.pad, c.pad, c.pad, c.pad}) + R"(, "dilations": )" + ints({c.d, c.d}) +
                              R"(, "ceil_mode": )" + (c.ceil ? "true" : "false") + "}}";
    std::vector<float> got = run(nodes, {}, x).to_vector();
    ASSERT_EQ((int64_t)got.size(), 2 * OH * OW) << nodes;
    const float* X = x.data();
    int nans = 0;
    for (int64_t p = 0; p < 2; ++p)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double m = -INFINITY;
          bool nan = false;
          for (int64_t i = 0; i < c.k; ++i)
            for (int64_t j = 0; j < c.k; ++j) {
              const int64_t ih = oh * c.s - c.pad + i * c.d, iw = ow * c.s - c.pad + j * c.d;
              if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
              const float v = X[(p * c.H + ih) * c.W + iw];
              nan = nan || v != v;
              m = std::max(m, (double)v);
            }
          const float g = got[(p * OH + oh) * OW + ow];
          nans += nan;
          if (nan) EXPECT_TRUE(std::isnan(g)) << nodes << " at " << p << "," << oh << "," << ow;
          else EXPECT_EQ(g, (float)m) << nodes << " at " << p << "," << oh << "," << ow;
        }
    EXPECT_GT(nans, 0) << nodes;
  }
}

// resize, every coordinate transform and nearest mode, written from the ONNX definition.
TEST_P(ConvFamily, ResizeModesAgainstTheOnnxFormulas) {
  std::mt19937 rng(5);
  const char* cts[] = {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn"};
  const char* nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  const Shape xs{2, 3, 5, 4};
  const std::vector<Shape> outs{{2, 3, 10, 8}, {2, 3, 7, 3}, {2, 3, 1, 9}, {2, 3, 3, 1}, {2, 3, 5, 7}};
  Tensor x = random_tensor(xs, rng);
  for (int linear = 0; linear < 2; ++linear)
    for (const char* ct : cts)
      for (int k = 0; k < (linear ? 1 : 4); ++k)
        for (const Shape& ys : outs) {
          const std::string nm = nms[k];
          auto src = [&](int64_t o, int64_t L, int64_t O) {
            double s = double(O) / double(L), c;
            std::string t = ct;
            if (s == 1) c = o;  // ONNX Runtime leaves an axis of scale 1 alone
            else if (t == "half_pixel") c = (o + 0.5) / s - 0.5;
            else if (t == "asymmetric") c = o / s;
            else if (t == "align_corners") c = O == 1 ? 0 : o * double(L - 1) / double(O - 1);
            else if (t == "pytorch_half_pixel") c = O > 1 ? (o + 0.5) / s - 0.5 : 0;
            else c = (o + 0.5) / s;
            return c;
          };
          auto nearest = [&](double c, int64_t L) {
            double r;
            if (nm == "floor") r = std::floor(c);
            else if (nm == "ceil") r = std::ceil(c);
            else if (c == std::floor(c) + 0.5) r = nm == "round_prefer_ceil" ? std::ceil(c) : std::floor(c);
            else r = std::round(c);
            return (int64_t)std::min<double>(std::max<double>(r, 0), double(L - 1));
          };
          std::vector<double> want;
          const float* X = x.data();
          for (int64_t p = 0; p < xs[0] * xs[1]; ++p)
            for (int64_t oh = 0; oh < ys[2]; ++oh)
              for (int64_t ow = 0; ow < ys[3]; ++ow) {
                double ch = src(oh, xs[2], ys[2]), cw = src(ow, xs[3], ys[3]);
                auto at = [&](int64_t h, int64_t w) { return (double)X[(p * xs[2] + h) * xs[3] + w]; };
                if (!linear) {
                  want.push_back(at(nearest(ch, xs[2]), nearest(cw, xs[3])));
                  continue;
                }
                ch = std::clamp(ch, 0.0, double(xs[2] - 1)), cw = std::clamp(cw, 0.0, double(xs[3] - 1));
                int64_t h0 = (int64_t)ch, w0 = (int64_t)cw;
                int64_t h1 = std::min(h0 + 1, xs[2] - 1), w1 = std::min(w0 + 1, xs[3] - 1);
                double a = ch - h0, b = cw - w0;
                want.push_back((1 - a) * ((1 - b) * at(h0, w0) + b * at(h0, w1)) + a * ((1 - b) * at(h1, w0) + b * at(h1, w1)));
              }
          std::string nodes = R"({"id": "x", "op": "input", "shape": )" + shape_json(xs) +
                              R"(}, {"id": "y", "op": "resize", "inputs": ["x"], "attrs": {"sizes": )" + shape_json(ys) +
                              R"(, "mode": ")" + (linear ? "linear" : "nearest") +
                              R"(", "coordinate_transformation_mode": ")" + ct + R"(", "nearest_mode": ")" + nm + R"("}})";
          Tensor y = run(nodes, {}, x);
          expect_close(y, want, ys, 1e-6, nodes);
        }
}

INSTANTIATE_TEST_SUITE_P(Backends, ConvFamily, ::testing::Values("cpu", "vulkan"),
                         [](const auto& info) { return info.param; });

// ---------------- load-time refusals ----------------

std::string load_error(const std::string& nodes) {
  try {
    graph(nodes);  // a graph without symbols is shape-checked completely when loaded
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

struct BadCase {
  const char* name;
  std::string x;      // the input's shape
  std::string extra;  // more leaves
  std::string node;   // node "y"
  const char* phrase;
};
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class ConvRefusals : public ::testing::TestWithParam<BadCase> {};

TEST_P(ConvRefusals, NameTheNodeAndTheProblem) {
  const BadCase& c = GetParam();
  std::string msg = load_error(R"({"id": "x", "op": "input", "shape": )" + c.x + "}, " + c.extra + c.node);
  EXPECT_NE(msg.find("node 'y'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(c.phrase), std::string::npos) << "expected \"" << c.phrase << "\" in: " << msg;
}

const std::string W3 = R"({"id": "w", "op": "param", "shape": [4, 3, 3, 3]}, )";
std::string conv_node(const std::string& attrs, const std::string& inputs = R"("x", "w")") {
  return R"({"id": "y", "op": "conv2d", "inputs": [)" + inputs + R"(], "attrs": )" + attrs + "}";
}
std::string pool_node(const char* op, const std::string& attrs) {
  return std::string(R"({"id": "y", "op": ")") + op + R"(", "inputs": ["x"], "attrs": )" + attrs + "}";
}

INSTANTIATE_TEST_SUITE_P(
    Attrs, ConvRefusals,
    ::testing::Values(
        BadCase{"conv_x_rank3", "[3, 8, 8]", W3, conv_node("{}"), "x must be [N, C, H, W] (rank 4), got [3, 8, 8]"},
        BadCase{"conv_weight_rank", "[1, 3, 8, 8]", R"({"id": "w", "op": "param", "shape": [4, 3, 3]}, )", conv_node("{}"),
                "weight must have rank 4"},
        BadCase{"conv_weight_channels", "[1, 6, 8, 8]", W3, conv_node("{}"), "must be [M, C/groups, kH, kW] = [4, 6, kH, kW]"},
        BadCase{"conv_out_channels_groups", "[1, 6, 8, 8]", R"({"id": "w", "op": "param", "shape": [5, 3, 3, 3]}, )",
                conv_node(R"({"groups": 2})"), "output channels 5 (weight [5, 3, 3, 3]) are not divisible by groups 2"},
        BadCase{"conv_groups_zero", "[1, 3, 8, 8]", W3, conv_node(R"({"groups": 0})"), "groups must be >= 1"},
        BadCase{"conv_stride_zero", "[1, 3, 8, 8]", W3, conv_node(R"({"strides": [0, 1]})"),
                "attribute 'strides' entries must be in [1, 2^31)"},
        BadCase{"conv_pads_negative", "[1, 3, 8, 8]", W3, conv_node(R"({"pads": [0, -1, 0, 0]})"),
                "attribute 'pads' entries must be in [0, 2^31)"},
        BadCase{"conv_pads_count", "[1, 3, 8, 8]", W3, conv_node(R"({"pads": [1, 1]})"),
                "attribute 'pads' must have 4 entries, got [1, 1]"},
        BadCase{"conv_dilation_huge", "[1, 3, 8, 8]", W3, conv_node(R"({"dilations": [9223372036854775807, 1]})"),
                "attribute 'dilations' entries must be in [1, 2^31)"},
        BadCase{"conv_dilated_kernel_too_large", "[1, 3, 8, 8]", W3, conv_node(R"({"dilations": [4, 1]})"),
                "the kernel 9x3 (with dilation) is larger than the padded input 8x8"},
        BadCase{"conv_bias_shape", "[1, 3, 8, 8]", W3 + R"({"id": "b", "op": "param", "shape": [3]}, )",
                conv_node("{}", R"("x", "w", "b")"), "bias must have shape [4], got [3]"},
        BadCase{"conv_int_input", R"([1, 3, 8, 8], "dtype": "i32")", W3, conv_node("{}"), "input 0 must be a float tensor"},
        BadCase{"conv_transpose_output_padding", "[1, 4, 5, 5]", W3,
                R"({"id": "y", "op": "conv_transpose2d", "inputs": ["x", "w"], "attrs": {"strides": [2, 2], "output_padding": [2, 0]}})",
                "output_padding [2, 0] must be smaller than the stride or the dilation"},
        BadCase{"conv_transpose_weight_channels", "[1, 3, 5, 5]", W3,
                R"({"id": "y", "op": "conv_transpose2d", "inputs": ["x", "w"]})", "must be [C, M/groups, kH, kW] with C = 3"},
        BadCase{"conv_transpose_pads_eat_output", "[1, 4, 1, 1]", W3,
                R"({"id": "y", "op": "conv_transpose2d", "inputs": ["x", "w"], "attrs": {"pads": [2, 0, 1, 0]}})",
                "the output would be 0x3"},
        BadCase{"pool_kernel_missing", "[1, 3, 8, 8]", "", pool_node("max_pool2d", "{}"), "kernel"},
        BadCase{"pool_kernel_count", "[1, 3, 8, 8]", "", pool_node("avg_pool2d", R"({"kernel": [3]})"),
                "attribute 'kernel' must have 2 entries, got [3]"},
        BadCase{"pool_window_too_large", "[1, 3, 4, 4]", "", pool_node("max_pool2d", R"({"kernel": [3, 3], "dilations": [2, 1]})"),
                "the window 5x3 is larger than the padded input 4x4"},
        BadCase{"pool_dilations_on_avg", "[1, 3, 8, 8]", "", pool_node("avg_pool2d", R"({"kernel": [2, 2], "dilations": [2, 2]})"),
                "dilations"},
        BadCase{"resize_sizes_negative", "[1, 3, 4, 4]", "", pool_node("resize", R"({"sizes": [1, 3, -1, 4]})"),
                "has a negative entry"},
        BadCase{"resize_scales_count", "[1, 3, 4, 4]", "", pool_node("resize", R"({"sizes": [1, 3, 8, 8], "scales": [2, 2]})"),
                "scales must have one entry per axis"},
        BadCase{"resize_scales_zero", "[1, 3, 4, 4]", "",
                pool_node("resize", R"({"sizes": [1, 3, 8, 8], "scales": [1, 1, 0, 2]})"), "scales must be positive"},
        BadCase{"resize_scales_string", "[1, 3, 4, 4]", "",
                pool_node("resize", R"({"sizes": [1, 3, 8, 8], "scales": [1, 1, "2", 2]})"),
                "attribute 'scales' must be a list of finite numbers"},
        BadCase{"resize_linear_channel_axis", "[1, 3, 4, 4]", "",
                pool_node("resize", R"({"sizes": [1, 6, 8, 8], "mode": "linear"})"), "interpolates the last two axes only"},
        BadCase{"resize_mode_unknown", "[1, 3, 4, 4]", "", pool_node("resize", R"({"sizes": [1, 3, 8, 8], "mode": "cubic"})"),
                "expected one of \"nearest\", \"linear\""},
        BadCase{"resize_empty_axis", "[1, 0, 4, 4]", "", pool_node("resize", R"({"sizes": [1, 2, 8, 8]})"),
                "cannot resize the empty axis 1"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
