#pragma once
// Helpers shared by the convolution tests (test_conv.cpp, test_conv3d.cpp): graphs written as
// JSON text around their nodes, attribute lists, seeded random inputs, the closeness check.
#include <gtest/gtest.h>

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
