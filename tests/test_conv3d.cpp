// The 3-D convolution family (conv3d, conv_transpose3d, max_pool3d, avg_pool3d; issue 30):
// randomized geometries on every available backend and in every mode against plain reference
// loops (conv as a gather over (c, kd, kh, kw), conv_test_util.h's conv3_ref; conv_transpose as a scatter, pools
// as explicit windows with the ONNX output-size rule), and the load-time refusals of bad 3-D
// shapes and attributes. Small shapes: a few seconds per backend.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "ir/loader.h"
#include "runtime/session.h"
#include "conv_test_util.h"

using namespace rlx;
using namespace rlx::conv_test;

namespace {

using V3 = std::array<int64_t, 3>;  // one entry per spatial axis: D, H, W

std::string ints3(const V3& v) { return ints({v[0], v[1], v[2]}); }
std::string pads6(const V3& a, const V3& b) { return ints({a[0], a[1], a[2], b[0], b[1], b[2]}); }

// Flat index of (i0, i1, i2) in a [.., n0, n1, n2] block.
int64_t at3(const V3& n, int64_t a, int64_t b, int64_t c) { return (a * n[1] + b) * n[2] + c; }

struct Geo {
  int64_t N = 1, C = 1, M = 1, G = 1;
  V3 in{}, k{}, s{}, d{}, p0{}, p1{}, op{};
  bool bias = false;
};

// The gather-form reference (conv_test_util.h).
std::vector<double> conv_ref(const Geo& g, const V3& out, const Tensor& x, const Tensor& w, const Tensor* b) {
  return conv3_ref(g.N, g.C, g.M, g.G, g.in, g.k, g.s, g.d, g.p0, out, x, w, b);
}

// Every x[n, c, i] * w[c, m', t] lands on output position i s + t d - p0.
std::vector<double> conv_transpose_ref(const Geo& g, const V3& out, const Tensor& x, const Tensor& w, const Tensor* b) {
  const int64_t Cg = g.C / g.G, Mg = g.M / g.G, IN = g.in[0] * g.in[1] * g.in[2], OUT = out[0] * out[1] * out[2];
  const int64_t KK = g.k[0] * g.k[1] * g.k[2];
  std::vector<double> y(g.N * g.M * OUT, 0.0);
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t i0 = 0; i0 < g.in[0]; ++i0)
        for (int64_t i1 = 0; i1 < g.in[1]; ++i1)
          for (int64_t i2 = 0; i2 < g.in[2]; ++i2)
            for (int64_t ml = 0; ml < Mg; ++ml)
              for (int64_t t0 = 0; t0 < g.k[0]; ++t0)
                for (int64_t t1 = 0; t1 < g.k[1]; ++t1)
                  for (int64_t t2 = 0; t2 < g.k[2]; ++t2) {
                    const int64_t o0 = i0 * g.s[0] + t0 * g.d[0] - g.p0[0], o1 = i1 * g.s[1] + t1 * g.d[1] - g.p0[1],
                                  o2 = i2 * g.s[2] + t2 * g.d[2] - g.p0[2];
                    if (o0 < 0 || o0 >= out[0] || o1 < 0 || o1 >= out[1] || o2 < 0 || o2 >= out[2]) continue;
                    const int64_t m = (c / Cg) * Mg + ml;
                    y[(n * g.M + m) * OUT + at3(out, o0, o1, o2)] += (double)x.data()[(n * g.C + c) * IN + at3(g.in, i0, i1, i2)] *
                                                                     w.data()[(c * Mg + ml) * KK + at3(g.k, t0, t1, t2)];
                  }
  if (b)
    for (int64_t i = 0; i < (int64_t)y.size(); ++i) y[i] += b->data()[(i / OUT) % g.M];
  return y;
}

// ONNX / PyTorch pooling length (with ceil_mode a window starting in the trailing padding is dropped).
int64_t pool_len(int64_t in, int64_t p0, int64_t p1, int64_t ext, int64_t s, bool ceil_mode) {
  double q = double(in + p0 + p1 - ext) / double(s);
  int64_t out = (int64_t)(ceil_mode ? std::ceil(q) : std::floor(q)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p0) --out;
  return out;
}

std::string conv_nodes(const char* op, const Tensor& x, const Tensor& w, const Tensor* b, const std::string& attrs) {
  return R"({"id": "x", "op": "input", "shape": )" + shape_json(x.shape()) + R"(}, {"id": "w", "op": "param", "shape": )" +
         shape_json(w.shape()) + "}, " + (b ? R"({"id": "b", "op": "param", "shape": )" + shape_json(b->shape()) + "}, " : "") +
         R"({"id": "y", "op": ")" + op + R"(", "inputs": ["x", "w")" + (b ? R"(, "b")" : "") + R"(], "attrs": )" + attrs + "}";
}

class Conv3dFamily : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    try {
      ex_ = make_executor(GetParam(), 0);
    } catch (const std::exception& e) {
      GTEST_SKIP() << GetParam() << " unavailable: " << e.what();
    }
  }
  // Runs `nodes` (output "y") in every mode; each result must match `want`.
  void check(const std::string& nodes, const std::map<std::string, Tensor>& params, const Tensor& x,
             const std::vector<double>& want, const Shape& shape, double tol, const std::string& what) {
    for (Mode m : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {
      Session s(graph(nodes), *ex_, params);
      s.set_input("x", x);
      expect_close(s.run(m)[0], want, shape, tol, what + " in " + mode_name(m) + " mode: " + nodes);
    }
  }
  // A conv3d of geometry g (output sizes out) on seeded random x, w and b, against conv_ref.
  void check_conv3d(const Geo& g, const V3& out, std::mt19937& rng, double tol, const std::string& what) {
    Tensor x = random_tensor({g.N, g.C, g.in[0], g.in[1], g.in[2]}, rng);
    Tensor w = random_tensor({g.M, g.C / g.G, g.k[0], g.k[1], g.k[2]}, rng), b = random_tensor({g.M}, rng);
    const std::string attrs = R"({"strides": )" + ints3(g.s) + R"(, "dilations": )" + ints3(g.d) + R"(, "pads": )" +
                              pads6(g.p0, g.p1) + R"(, "groups": )" + std::to_string(g.G) + "}";
    std::map<std::string, Tensor> params{{"w", w}};
    if (g.bias) params["b"] = b;
    check(conv_nodes("conv3d", x, w, g.bias ? &b : nullptr, attrs), params, x, conv_ref(g, out, x, w, g.bias ? &b : nullptr),
          {g.N, g.M, out[0], out[1], out[2]}, tol, what);
  }
  std::unique_ptr<Executor> ex_;
};

TEST_P(Conv3dFamily, Conv3dRandomGeometriesInEveryMode) {
  std::mt19937 rng(3030);
  auto U = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int it = 0; it < 16; ++it) {
    Geo g;
    g.G = U(1, 2);
    g.C = g.G * U(1, 3);
    g.M = g.G * U(1, 3);
    if (it % 4 == 0) g.G = g.C, g.M = g.C * U(1, 2);  // depthwise (with multiplier)
    g.N = U(1, 2), g.bias = U(0, 1);
    V3 out;
    for (int a = 0; a < 3; ++a) {
      g.k[a] = U(1, 3), g.s[a] = U(1, 2), g.d[a] = U(1, 2), g.p0[a] = U(0, 2), g.p1[a] = U(0, 2);
      const int64_t ext = (g.k[a] - 1) * g.d[a] + 1;
      g.in[a] = std::max<int64_t>(1, ext - g.p0[a] - g.p1[a]) + U(0, 4);
      out[a] = (g.in[a] + g.p0[a] + g.p1[a] - ext) / g.s[a] + 1;
    }
    if (it == 1) g.k = {1, 1, 1}, g.s = {1, 1, 1}, g.p0 = g.p1 = {0, 0, 0}, out = g.in;  // 1x1x1: x read in place
    check_conv3d(g, out, rng, 1e-5, "conv3d case " + std::to_string(it));
  }
}

// Layers whose group's weights exceed 2 MiB take the CPU's whole-plane vol2col and one pooled
// product (r3d_18's layers 3 and 4); with bias, with groups and a batch of 2.
// The whole-plane path is the CPU kernel's, so this suite is instantiated for the CPU only
// (Vulkan has one conv shader for every size, covered above; lavapipe would take seconds here).
class Conv3dCpuOnly : public Conv3dFamily {};
TEST_P(Conv3dCpuOnly, Conv3dDeepLayersInEveryMode) {
  std::mt19937 rng(3033);
  for (int grouped = 0; grouped < 2; ++grouped) {
    Geo g;
    g.G = grouped ? 2 : 1, g.N = grouped ? 2 : 1, g.C = 64 * g.G, g.M = 320 * g.G, g.bias = !grouped;
    g.in = {2, 4, 3}, g.k = {3, 3, 3}, g.s = {1, 1, 1}, g.d = {1, 1, 1}, g.p0 = {1, 1, 1}, g.p1 = {1, 1, 1};
    const V3 out = g.in;
    Tensor x = random_tensor({g.N, g.C, g.in[0], g.in[1], g.in[2]}, rng);
    Tensor w = random_tensor({g.M, g.C / g.G, 3, 3, 3}, rng), b = random_tensor({g.M}, rng);
    const std::string attrs = R"({"pads": [1, 1, 1, 1, 1, 1], "groups": )" + std::to_string(g.G) + "}";
    std::map<std::string, Tensor> params{{"w", w}};
    if (g.bias) params["b"] = b;
    // f32 sums of K = 1728 products of N(0, 1) values: rounding grows like sqrt(K).
    check(conv_nodes("conv3d", x, w, g.bias ? &b : nullptr, attrs), params, x, conv_ref(g, out, x, w, g.bias ? &b : nullptr),
          {g.N, g.M, out[0], out[1], out[2]}, 1e-5 * std::sqrt(1728.0), grouped ? "grouped deep conv3d" : "deep conv3d");
  }
}

// The halves of separable convs (s3d, r2plus1d_18): kD x 1 x 1 temporal ones take the CPU's
// products over a slab of input planes (conv_temporal.h), 1 x k x k spatial ones the tiled
// im2col; odd sizes, temporal stride 2 and pads beyond what a window covers at the edges,
// groups, a batch of 2, maps of several position blocks, and a dilated temporal conv (the
// general path).
TEST_P(Conv3dCpuOnly, Conv3dSeparableHalvesInEveryMode) {
  std::mt19937 rng(3035);
  struct Case {
    int64_t N, C, M, G;
    V3 in, k, s, d, p0, p1;
    bool bias;
  };
  const Case cases[] = {
      {1, 24, 32, 1, {9, 5, 7}, {7, 1, 1}, {2, 1, 1}, {1, 1, 1}, {3, 0, 0}, {3, 0, 0}, true},     // s3d's stem, temporal half
      {2, 12, 18, 3, {5, 3, 5}, {3, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 0, 0}, {2, 0, 0}, false},    // groups, batch 2
      {1, 40, 24, 1, {7, 15, 21}, {3, 1, 1}, {2, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 0, 0}, true},   // 315 positions, stride 2
      {1, 8, 8, 1, {2, 3, 3}, {5, 1, 1}, {1, 1, 1}, {1, 1, 1}, {2, 0, 0}, {2, 0, 0}, true},       // window wider than the frames
      {1, 8, 8, 1, {5, 23, 25}, {3, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 0, 0}, {1, 0, 0}, true},     // 2 position blocks
      {1, 320, 16, 1, {4, 16, 28}, {3, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 0, 0}, {1, 0, 0}, false}, // slabs of 3 planes
      {1, 16, 16, 1, {7, 4, 5}, {3, 1, 1}, {1, 1, 1}, {2, 1, 1}, {2, 0, 0}, {2, 0, 0}, true},     // dilated: the general path
      {2, 20, 28, 1, {3, 9, 11}, {1, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, true},    // spatial half
      {1, 16, 24, 2, {4, 13, 10}, {1, 3, 3}, {1, 2, 2}, {1, 1, 1}, {0, 1, 1}, {0, 0, 1}, false},  // spatial, stride 2, groups
  };
  int i = 0;
  for (const Case& c : cases) {
    Geo g;
    g.N = c.N, g.C = c.C, g.M = c.M, g.G = c.G, g.in = c.in, g.k = c.k, g.s = c.s, g.d = c.d, g.p0 = c.p0, g.p1 = c.p1;
    g.bias = c.bias;
    V3 out;
    for (int a = 0; a < 3; ++a) out[a] = (g.in[a] + g.p0[a] + g.p1[a] - ((g.k[a] - 1) * g.d[a] + 1)) / g.s[a] + 1;
    const double tol = 1e-5 * std::sqrt((double)(g.C / g.G * g.k[0] * g.k[1] * g.k[2]));
    check_conv3d(g, out, rng, tol, "separable half " + std::to_string(i++));
  }
}

TEST_P(Conv3dFamily, ConvTranspose3dRandomGeometriesInEveryMode) {
  std::mt19937 rng(3031);
  auto U = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int it = 0; it < 12; ++it) {
    Geo g;
    g.G = U(1, 2);
    g.C = g.G * U(1, 3);
    g.M = g.G * U(1, 3);
    g.N = U(1, 2), g.bias = U(0, 1);
    V3 out;
    for (int a = 0; a < 3; ++a) {
      g.k[a] = U(1, 3), g.s[a] = U(1, 2), g.d[a] = U(1, 2), g.in[a] = U(1, 4);
      g.op[a] = U(0, std::max(g.s[a], g.d[a]) - 1);
      const int64_t full = g.s[a] * (g.in[a] - 1) + (g.k[a] - 1) * g.d[a] + 1 + g.op[a];
      g.p0[a] = U(0, std::min<int64_t>(2, (full - 1) / 2)), g.p1[a] = U(0, std::min<int64_t>(2, (full - 1) / 2));
      out[a] = full - g.p0[a] - g.p1[a];
    }
    Tensor x = random_tensor({g.N, g.C, g.in[0], g.in[1], g.in[2]}, rng);
    Tensor w = random_tensor({g.C, g.M / g.G, g.k[0], g.k[1], g.k[2]}, rng), b = random_tensor({g.M}, rng);
    const std::string attrs = R"({"strides": )" + ints3(g.s) + R"(, "dilations": )" + ints3(g.d) + R"(, "pads": )" +
                              pads6(g.p0, g.p1) + R"(, "groups": )" + std::to_string(g.G) + R"(, "output_padding": )" +
                              ints3(g.op) + "}";
    std::map<std::string, Tensor> params{{"w", w}};
    if (g.bias) params["b"] = b;
    check(conv_nodes("conv_transpose3d", x, w, g.bias ? &b : nullptr, attrs), params, x,
          conv_transpose_ref(g, out, x, w, g.bias ? &b : nullptr), {g.N, g.M, out[0], out[1], out[2]}, 1e-5,
          "conv_transpose3d case " + std::to_string(it));
  }
}

// The pools' reference: explicit windows (the padded input spans [-p0, in + p1); ceil_mode
// windows may overhang it), max with NaN propagated, average over the clipped window.
std::vector<double> pool_ref(bool is_max, bool include_pad, int64_t NC, const V3& in, const V3& k, const V3& s, const V3& d,
                             const V3& p0, const V3& p1, const V3& out, const Tensor& x) {
  const int64_t IN = in[0] * in[1] * in[2], OUT = out[0] * out[1] * out[2];
  std::vector<double> want(NC * OUT);
  for (int64_t p = 0; p < NC; ++p)
    for (int64_t o0 = 0; o0 < out[0]; ++o0)
      for (int64_t o1 = 0; o1 < out[1]; ++o1)
        for (int64_t o2 = 0; o2 < out[2]; ++o2) {
          double acc = is_max ? -INFINITY : 0.0;
          int64_t count = 0, padded = 0;
          for (int64_t t0 = 0; t0 < k[0]; ++t0)
            for (int64_t t1 = 0; t1 < k[1]; ++t1)
              for (int64_t t2 = 0; t2 < k[2]; ++t2) {
                const int64_t i[3] = {o0 * s[0] - p0[0] + t0 * d[0], o1 * s[1] - p0[1] + t1 * d[1], o2 * s[2] - p0[2] + t2 * d[2]};
                bool in_padded = true, inside = true;
                for (int a = 0; a < 3; ++a) {
                  in_padded = in_padded && i[a] >= -p0[a] && i[a] < in[a] + p1[a];
                  inside = inside && i[a] >= 0 && i[a] < in[a];
                }
                padded += in_padded;
                if (!inside) continue;
                const double v = x.data()[p * IN + at3(in, i[0], i[1], i[2])];
                acc = !is_max ? acc + v : (std::isnan(v) || std::isnan(acc)) ? NAN : std::max(acc, v);
                ++count;
              }
          want[p * OUT + at3(out, o0, o1, o2)] = is_max ? acc : acc / double(include_pad ? padded : count);
        }
  return want;
}

std::string pool_nodes(bool is_max, bool ceil_mode, bool include_pad, const Shape& xs, const V3& k, const V3& s, const V3& d,
                       const V3& p0, const V3& p1) {
  std::string attrs = R"({"kernel": )" + ints3(k) + R"(, "strides": )" + ints3(s) + R"(, "pads": )" + pads6(p0, p1) +
                      R"(, "ceil_mode": )" + (ceil_mode ? "true" : "false");
  attrs += is_max ? R"(, "dilations": )" + ints3(d) : std::string(R"(, "count_include_pad": )") + (include_pad ? "true" : "false");
  return R"({"id": "x", "op": "input", "shape": )" + shape_json(xs) + R"(}, {"id": "y", "op": ")" +
         (is_max ? "max_pool3d" : "avg_pool3d") + R"(", "inputs": ["x"], "attrs": )" + attrs + "}}";
}

TEST_P(Conv3dFamily, Pools3dRandomGeometriesInEveryMode) {
  std::mt19937 rng(3032);
  auto U = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int it = 0; it < 24; ++it) {
    const bool is_max = it % 2 == 0, ceil_mode = U(0, 1), include_pad = U(0, 1);
    const int64_t N = U(1, 2), C = U(1, 3);
    V3 k, s, d, p0, p1, in, ext, out;
    for (int a = 0; a < 3; ++a) {
      k[a] = U(1, 3), s[a] = U(1, 3), d[a] = is_max ? U(1, 2) : 1;
      ext[a] = (k[a] - 1) * d[a] + 1;
      p0[a] = U(0, std::min<int64_t>(2, ext[a] - 1)), p1[a] = U(0, std::min<int64_t>(2, ext[a] - 1));
      in[a] = std::max<int64_t>(1, ext[a] - p0[a] - p1[a]) + U(0, 4);
      out[a] = pool_len(in[a], p0[a], p1[a], ext[a], s[a], ceil_mode);
    }
    Tensor x = random_tensor({N, C, in[0], in[1], in[2]}, rng);
    check(pool_nodes(is_max, ceil_mode, include_pad, x.shape(), k, s, d, p0, p1), {}, x,
          pool_ref(is_max, include_pad, N * C, in, k, s, d, p0, p1, out, x), {N, C, out[0], out[1], out[2]}, 1e-6,
          "pool case " + std::to_string(it));
  }
}

// Rows wide enough for the CPU's separable pools to take their vector loops (8 columns at a
// time along W for strides 1 and 2, whole rows along H and D; whole planes where W = sW OW
// and, along H, with stride 1), s3d's pools among them, and a
// few NaNs (a max over a window holding one is NaN, and must be). ctest runs this file again
// with RLX_CPU_ISA=base (the scalar loops).
TEST_P(Conv3dCpuOnly, Pools3dWideRowsInEveryMode) {
  std::mt19937 rng(3034);
  struct Case {
    bool is_max, ceil_mode, include_pad;
    int64_t N, C;
    V3 in, k, s, d, p0, p1;
  };
  const Case cases[] = {
      {true, false, false, 1, 3, {3, 21, 44}, {1, 3, 3}, {1, 2, 2}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}},   // s3d's stem pools
      {true, false, false, 1, 2, {2, 12, 45}, {1, 3, 3}, {1, 2, 2}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}},   // odd width: row by row
      {true, false, false, 2, 2, {5, 9, 29}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}},    // s3d's branch pools
      {true, false, false, 1, 2, {6, 10, 30}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}},   // stride 2 everywhere
      {true, true, false, 1, 3, {5, 7, 33}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}},     // ceil_mode, odd sizes
      {true, false, false, 1, 1, {4, 6, 40}, {2, 2, 3}, {1, 3, 2}, {2, 1, 2}, {1, 0, 2}, {0, 1, 1}},    // dilations
      {true, true, false, 1, 2, {3, 5, 26}, {1, 2, 4}, {3, 1, 3}, {1, 2, 1}, {0, 1, 2}, {0, 0, 1}},     // stride 3 along W
      {false, false, true, 2, 2, {5, 9, 29}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}},
      {false, true, false, 1, 3, {5, 11, 37}, {3, 2, 3}, {2, 2, 2}, {1, 1, 1}, {1, 0, 1}, {1, 1, 1}},
      {false, false, false, 1, 2, {2, 7, 7}, {2, 7, 7}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}},    // s3d's head
  };
  int i = 0;
  for (const Case& c : cases) {
    V3 out;
    for (int a = 0; a < 3; ++a) out[a] = pool_len(c.in[a], c.p0[a], c.p1[a], (c.k[a] - 1) * c.d[a] + 1, c.s[a], c.ceil_mode);
    Tensor x = random_tensor({c.N, c.C, c.in[0], c.in[1], c.in[2]}, rng);
    if (c.is_max)  // a NaN in every 97th value
      for (int64_t j = 13; j < x.numel(); j += 97) x.mutable_data()[j] = NAN;
    const std::vector<double> want = pool_ref(c.is_max, c.include_pad, c.N * c.C, c.in, c.k, c.s, c.d, c.p0, c.p1, out, x);
    const std::string what = "wide pool case " + std::to_string(i++);
    int64_t nans = 0;
    for (double v : want) nans += std::isnan(v);
    if (c.is_max) {
      EXPECT_GT(nans, 0) << what << ": the NaNs should reach some windows";
    }
    for (Mode m : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {
      Session sess(graph(pool_nodes(c.is_max, c.ceil_mode, c.include_pad, x.shape(), c.k, c.s, c.d, c.p0, c.p1)), *ex_, {});
      sess.set_input("x", x);
      const Tensor got = sess.run(m)[0];
      ASSERT_EQ(got.shape(), Shape({c.N, c.C, out[0], out[1], out[2]})) << what;
      const std::vector<float> g = got.to_vector();
      int64_t bad = 0, first = -1;
      for (size_t j = 0; j < want.size(); ++j) {
        const bool ok = std::isnan(want[j]) ? std::isnan(g[j]) : std::abs(g[j] - want[j]) <= 1e-6 * (1 + std::abs(want[j]));
        if (!ok && bad++ == 0) first = (int64_t)j;
      }
      EXPECT_EQ(bad, 0) << what << " in " << mode_name(m) << " mode: element " << first << " is "
                        << (first >= 0 ? g[first] : 0.f) << ", expected " << (first >= 0 ? want[first] : 0.0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, Conv3dCpuOnly, ::testing::Values("cpu"), [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Backends, Conv3dFamily, ::testing::Values("cpu", "vulkan"),
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

TEST(Conv3dRefusals, BadShapesAndAttributesNameTheNode) {
  const std::string x5 = R"({"id": "x", "op": "input", "shape": [1, 4, 6, 8, 8]}, )";
  const std::string w5 = R"({"id": "w", "op": "param", "shape": [4, 4, 3, 3, 3]}, )";
  const std::pair<std::string, const char*> cases[] = {
      {R"({"id": "x", "op": "input", "shape": [1, 4, 8, 8]}, )" + w5 + R"({"id": "y", "op": "conv3d", "inputs": ["x", "w"]})",
       "x must be [N, C, D, H, W] (rank 5), got [1, 4, 8, 8]"},
      {x5 + R"({"id": "w", "op": "param", "shape": [4, 4, 3, 3]}, {"id": "y", "op": "conv3d", "inputs": ["x", "w"]})",
       "weight must have rank 5"},
      {x5 + w5 + R"({"id": "y", "op": "conv3d", "inputs": ["x", "w"], "attrs": {"pads": [1, 1, 1, 1]}})",
       "attribute 'pads' must have 6 entries, got [1, 1, 1, 1]"},
      {x5 + w5 + R"({"id": "y", "op": "conv3d", "inputs": ["x", "w"], "attrs": {"strides": [1, 1]}})",
       "attribute 'strides' must have 3 entries"},
      {x5 + w5 + R"({"id": "y", "op": "conv3d", "inputs": ["x", "w"], "attrs": {"dilations": [4, 1, 1]}})",
       "the kernel 9x3x3 (with dilation) is larger than the padded input 6x8x8"},
      {x5 + w5 + R"({"id": "y", "op": "conv3d", "inputs": ["x", "w"], "attrs": {"groups": 2}})",
       "must be [M, C/groups, kD, kH, kW] = [4, 2, kD, kH, kW]"},
      {x5 + w5 + R"({"id": "y", "op": "conv_transpose3d", "inputs": ["x", "w"], "attrs": {"strides": [2, 2, 2], "output_padding": [0, 2, 0]}})",
       "output_padding [0, 2, 0] must be smaller than the stride or the dilation"},
      {x5 + R"({"id": "y", "op": "max_pool3d", "inputs": ["x"], "attrs": {"kernel": [3, 3]}})",
       "attribute 'kernel' must have 3 entries, got [3, 3]"},
      {x5 + R"({"id": "y", "op": "max_pool3d", "inputs": ["x"], "attrs": {"kernel": [7, 3, 3], "dilations": [2, 1, 1]}})",
       "the window 13x3x3 is larger than the padded input 6x8x8"},
      {x5 + R"({"id": "y", "op": "avg_pool3d", "inputs": ["x"], "attrs": {"kernel": [2, 2, 2], "pads": [2, 0, 0, 0, 0, 0]}})",
       "must each be smaller than the (dilated) window 2x2x2"},
      {x5 + R"({"id": "y", "op": "avg_pool3d", "inputs": ["x"], "attrs": {"kernel": [2, 2, 2], "dilations": [2, 2, 2]}})",
       "dilations"},
  };
  for (const auto& [nodes, phrase] : cases) {
    const std::string msg = load_error(nodes);
    EXPECT_NE(msg.find("node 'y'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(phrase), std::string::npos) << "expected \"" << phrase << "\" in: " << msg;
  }
}

}  // namespace
