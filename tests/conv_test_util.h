#pragma once
// Helpers shared by the convolution tests (test_conv.cpp, test_conv3d.cpp, test_dnnl_conv.cpp): graphs written as
// JSON text around their nodes, attribute lists, seeded random inputs, the 2-D and 3-D reference
// convolutions, the closeness check.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/loader.h"

namespace rlx::conv_test {

inline std::string ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}
inline std::string shape_json(const Shape& s) { return ints(std::vector<int64_t>(s.begin(), s.end())); }

// A graph of `nodes` (JSON text) whose output is the node "y".
inline std::shared_ptr<ir::Graph> graph(const std::string& nodes) {
  return std::make_shared<ir::Graph>(ir::load_graph_text(
      R"({"format": "rlx.graph", "version": 1, "nodes": [)" + nodes + R"(], "outputs": ["y"]})", "t.json"));
}

inline Tensor random_tensor(Shape s, std::mt19937& rng) {
  Tensor t(s);
  std::normal_distribution<float> nd(0.f, 1.f);
  float* d = t.mutable_data();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = nd(rng);
  return t;
}

// y[n, m, oh, ow] = b[m] + sum over the group's channels and taps (gather form), in double:
// the reference of a 2-D convolution for any geometry struct with the fields N, C, H, W, M, G,
// kH, kW, sH, sW, dH, dW, pt, pl (test_conv.cpp's Conv, test_dnnl_conv.cpp's Geo).
template <class P>
std::vector<double> conv_ref(const P& p, const Tensor& x, const Tensor& w, const Tensor* b, int64_t OH, int64_t OW) {
  const int64_t Cg = p.C / p.G, Mg = p.M / p.G;
  std::vector<double> y(p.N * p.M * OH * OW);
  const float *X = x.data(), *Wt = w.data();
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t m = 0; m < p.M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = b ? b->data()[m] : 0.0;
          for (int64_t cl = 0; cl < Cg; ++cl)
            for (int64_t i = 0; i < p.kH; ++i)
              for (int64_t j = 0; j < p.kW; ++j) {
                const int64_t ih = oh * p.sH - p.pt + i * p.dH, iw = ow * p.sW - p.pl + j * p.dW;
                if (ih < 0 || ih >= p.H || iw < 0 || iw >= p.W) continue;
                const int64_t c = (m / Mg) * Cg + cl;
                s += (double)X[((n * p.C + c) * p.H + ih) * p.W + iw] * Wt[((m * Cg + cl) * p.kH + i) * p.kW + j];
              }
          y[((n * p.M + m) * OH + oh) * OW + ow] = s;
        }
  return y;
}

// The 3-D form: x [N, C, D, H, W], w [M, C / G, kD, kH, kW]; each array holds D, H, W (in, the
// kernel, strides, dilations, the leading pads, the output): y[n, m, o] = b[m] + sum over the
// group's channels c and taps t of x[n, c, o s - p0 + t d] w[m, c', t], in double.
using Axes3 = std::array<int64_t, 3>;
inline std::vector<double> conv3_ref(int64_t N, int64_t C, int64_t M, int64_t G, const Axes3& in, const Axes3& k,
                                     const Axes3& s, const Axes3& d, const Axes3& p0, const Axes3& out, const Tensor& x,
                                     const Tensor& w, const Tensor* b) {
  auto at = [](const Axes3& n, int64_t a, int64_t i, int64_t j) { return (a * n[1] + i) * n[2] + j; };
  const int64_t Cg = C / G, Mg = M / G, IN = in[0] * in[1] * in[2], OUT = out[0] * out[1] * out[2];
  const int64_t KK = k[0] * k[1] * k[2];
  std::vector<double> y(N * M * OUT);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t o0 = 0; o0 < out[0]; ++o0)
        for (int64_t o1 = 0; o1 < out[1]; ++o1)
          for (int64_t o2 = 0; o2 < out[2]; ++o2) {
            double acc = b ? b->data()[m] : 0.0;
            for (int64_t cl = 0; cl < Cg; ++cl)
              for (int64_t t0 = 0; t0 < k[0]; ++t0)
                for (int64_t t1 = 0; t1 < k[1]; ++t1)
                  for (int64_t t2 = 0; t2 < k[2]; ++t2) {
                    const int64_t i0 = o0 * s[0] - p0[0] + t0 * d[0], i1 = o1 * s[1] - p0[1] + t1 * d[1],
                                  i2 = o2 * s[2] - p0[2] + t2 * d[2];
                    if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
                    const int64_t c = (m / Mg) * Cg + cl;
                    acc += (double)x.data()[(n * C + c) * IN + at(in, i0, i1, i2)] *
                           w.data()[(m * Cg + cl) * KK + at(k, t0, t1, t2)];
                  }
            y[(n * M + m) * OUT + at(out, o0, o1, o2)] = acc;
          }
  return y;
}

// got has `shape` and matches `want` within `tol`, relative to 1 + |want| (NaN counts as worst).
inline void expect_close(const Tensor& got, const std::vector<double>& want, const Shape& shape, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.shape(), shape) << what;
  ASSERT_EQ((size_t)got.numel(), want.size()) << what;
  std::vector<float> g = got.to_vector();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double e = std::abs(g[i] - want[i]) / (1 + std::abs(want[i]));
    if (!(e <= worst)) worst = e, at = i;  // NaN counts as worst
  }
  EXPECT_LE(worst, tol) << what << ": element " << at << " is " << g[at] << ", expected " << want[at];
}

}  // namespace rlx::conv_test
