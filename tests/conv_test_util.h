#pragma once
// Helpers shared by the convolution tests (test_conv.cpp, test_conv3d.cpp): graphs written as
// JSON text around their nodes, attribute lists, and seeded random inputs.
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

}  // namespace rlx::conv_test
