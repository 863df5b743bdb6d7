// Ops along long lines (issue 30): topk, argmax/argmin, cumsum, min and prod along lines longer
// than one Vulkan shader invocation may walk (llvmpipe ends an invocation's loops after 65535
// iterations; kernels_long.cpp runs such lines in passes of bounded walks), in every mode on the
// CPU and, where built, on Vulkan (lavapipe in CI). Expected values come from plain loops here:
// a stable order for topk (value, NaN above every number, then the lower index), a scan for
// argmax/argmin, double-precision sums and products.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ir/loader.h"
#include "runtime/session.h"
#include "test_util.h"

using namespace rlx;

namespace {

std::string dims(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// A graph of one input x of shape `xs` and the given nodes (JSON objects reading "x"), whose
// outputs are `outs`.
std::shared_ptr<ir::Graph> graph(const Shape& xs, const std::string& nodes, const std::string& outs) {
  return std::make_shared<ir::Graph>(ir::load_graph_text(
      R"({"format": "rlx.graph", "version": 1, "nodes": [{"id": "x", "op": "input", "shape": )" + dims(xs) + "}, " +
          nodes + R"(], "outputs": [)" + outs + "]}",
      "long_lines.json"));
}

// Runs g on x on every built backend in every mode; check(outputs) for each.
template <class Check>
void every_backend_and_mode(const std::shared_ptr<ir::Graph>& g, const Tensor& x, Check check) {
  for (const std::string& b : test::built_backends())
    for (Mode mode : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {
      SCOPED_TRACE(b + " " + mode_name(mode));
      auto ex = make_executor(b);
      Session s(g, *ex, {});
      s.set_input("x", x);
      check(s.run(mode));
    }
}

// x [outer, len, inner]: values on a coarse grid (many ties), NaN at positions `nans` of every line
// (along axis 1).
Tensor tied_values(const Shape& s, unsigned seed, std::vector<int64_t> nans = {}) {
  Tensor t(s);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 2.f);
  float* v = t.mutable_data();
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = std::round(nd(rng) * 8.f) / 8.f;
  for (int64_t o = 0; o < s[0]; ++o)
    for (int64_t i = 0; i < s[2]; ++i)
      for (int64_t j : nans) v[(o * s[1] + j) * s[2] + i] = NAN;
  return t;
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0; }

// ---- topk

// The first K of `row` (len elements, stride `st`) in topk order: the reference.
std::vector<int64_t> topk_reference(const float* row, int64_t len, int64_t st, int64_t K, bool largest) {
  std::vector<int64_t> ord(len);
  std::iota(ord.begin(), ord.end(), 0);
  std::stable_sort(ord.begin(), ord.end(), [&](int64_t a, int64_t b) {
    const float va = row[a * st], vb = row[b * st];
    const bool na = std::isnan(va), nb = std::isnan(vb);
    if (na != nb) return largest ? na : nb;  // NaN above every number
    if (na) return false;                    // two NaNs: stable (lower index first)
    return largest ? va > vb : va < vb;      // equal values: stable
  });
  ord.resize(K);
  return ord;
}

// x [2, len, 2] (axis 1: lines strided by 2), K of them, values and indices.
void check_topk(int64_t len, int64_t K, bool largest, unsigned seed) {
  SCOPED_TRACE("len " + std::to_string(len) + " k " + std::to_string(K) + (largest ? " largest" : " smallest"));
  const Shape xs{2, len, 2};
  const Tensor x = tied_values(xs, seed, {7, len / 2, len - 1});
  const std::string a = R"("attrs": {"k": )" + std::to_string(K) + R"(, "axis": 1, "largest": )" +
                        (largest ? "true" : "false");
  auto g = graph(xs,
                 R"({"id": "v", "op": "topk", "inputs": ["x"], )" + a + R"(}},
                    {"id": "i", "op": "topk", "inputs": ["x"], )" + a + R"(, "select": "indices"}})",
                 R"("v", "i")");
  std::vector<std::vector<int64_t>> want;
  for (int64_t o = 0; o < 2; ++o)
    for (int64_t in = 0; in < 2; ++in) want.push_back(topk_reference(x.data() + o * len * 2 + in, len, 2, K, largest));
  every_backend_and_mode(g, x, [&](const std::vector<Tensor>& out) {
    ASSERT_EQ(out.size(), 2u);
    ASSERT_EQ(out[0].shape(), (Shape{2, K, 2}));
    ASSERT_EQ(out[1].dtype(), DType::i64);
    const float* v = out[0].data();
    const int64_t* idx = out[1].data<int64_t>();
    for (int64_t o = 0; o < 2; ++o)
      for (int64_t in = 0; in < 2; ++in)
        for (int64_t r = 0; r < K; ++r) {
          const int64_t at = o * K * 2 + r * 2 + in, j = want[o * 2 + in][r];
          ASSERT_EQ(idx[at], j) << "line " << o * 2 + in << " rank " << r;
          ASSERT_TRUE(same_float(v[at], x.data()[o * len * 2 + j * 2 + in]))
              << "line " << o * 2 + in << " rank " << r << ": " << v[at];
        }
  });
}

TEST(LongLines, TopKLargestWithTiesAndNaN) { check_topk(70000, 1000, true, 1); }
TEST(LongLines, TopKSmallestWithTiesAndNaN) { check_topk(70000, 1000, false, 2); }
TEST(LongLines, TopKOfAWholeLongLineIsItsSort) { check_topk(70000, 70000, false, 3); }
TEST(LongLines, TopKOverRetinaNetSizedLines) {
  check_topk(300001, 1000, true, 4);
  check_topk(300001, 3, false, 5);
}

// ---- argmax / argmin

TEST(LongLines, ArgMaxArgMinWithTiesAndNaN) {
  for (int64_t len : {int64_t(70000), int64_t(300000)}) {
    SCOPED_TRACE("len " + std::to_string(len));
    const Shape xs{3, len, 2};
    Tensor x = tied_values(xs, 6);
    // line (0, 1): a NaN in the middle (the first NaN wins); line (2, 0): two NaNs
    x.mutable_data()[(0 * len + len / 3) * 2 + 1] = NAN;
    x.mutable_data()[(2 * len + 5000) * 2 + 0] = NAN;
    x.mutable_data()[(2 * len + 200000 % len) * 2 + 0] = NAN;
    auto g = graph(xs, R"({"id": "a", "op": "argmax", "inputs": ["x"], "attrs": {"axis": 1}},
                         {"id": "b", "op": "argmin", "inputs": ["x"], "attrs": {"axis": 1}},
                         {"id": "c", "op": "argmax", "inputs": ["x"], "attrs": {"axis": 1, "select_last_index": true}},
                         {"id": "d", "op": "argmin", "inputs": ["x"], "attrs": {"axis": 1, "select_last_index": true}})",
                   R"("a", "b", "c", "d")");
    // want[op][line]: scan by the definition (NaN is the extreme: its first occurrence)
    std::vector<std::vector<int64_t>> want(4);
    for (int op = 0; op < 4; ++op)
      for (int64_t line = 0; line < 6; ++line) {
        const float* row = x.data() + (line / 2) * len * 2 + line % 2;
        const bool is_max = op % 2 == 0, last = op >= 2;
        int64_t best = -1;
        for (int64_t j = 0; j < len; ++j) {
          const float c = row[j * 2];
          if (std::isnan(c)) {
            best = j;
            break;
          }
          if (best < 0) best = j;
          const float b = row[best * 2];
          if (is_max ? c > b : c < b) best = j;
          else if (last && c == b) best = j;
        }
        want[op].push_back(best);
      }
    every_backend_and_mode(g, x, [&](const std::vector<Tensor>& out) {
      ASSERT_EQ(out.size(), 4u);
      for (int op = 0; op < 4; ++op) {
        ASSERT_EQ(out[op].shape(), (Shape{3, 1, 2}));
        for (int64_t line = 0; line < 6; ++line)
          EXPECT_EQ(out[op].data<int64_t>()[line], want[op][line]) << "output " << op << " line " << line;
      }
    });
  }
}

// ---- cumsum

TEST(LongLines, CumSumExclusiveAndReverse) {
  const int64_t len = 300000;
  const Shape xs{2, len, 3};
  Tensor x(xs);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(1.f, 2.f);
  // magnitudes in [1, 2], signs mixed: an element lost or counted twice moves a sum by >= 1
  for (int64_t i = 0; i < x.numel(); ++i) x.mutable_data()[i] = (rng() & 1 ? 1.f : -1.f) * u(rng);
  auto g = graph(xs, R"({"id": "a", "op": "cumsum", "inputs": ["x"], "attrs": {"axis": 1}},
                       {"id": "b", "op": "cumsum", "inputs": ["x"], "attrs": {"axis": 1, "exclusive": true}},
                       {"id": "c", "op": "cumsum", "inputs": ["x"], "attrs": {"axis": 1, "reverse": true}},
                       {"id": "d", "op": "cumsum", "inputs": ["x"], "attrs": {"axis": 1, "exclusive": true, "reverse": true}})",
                 R"("a", "b", "c", "d")");
  // want[op]: the scan in double, and the sum of |x| scanned so far (the tolerance's scale)
  std::vector<std::vector<double>> want(4, std::vector<double>(x.numel())), mag = want;
  for (int op = 0; op < 4; ++op) {
    const bool excl = op % 2 == 1, rev = op >= 2;
    for (int64_t line = 0; line < 6; ++line) {
      const int64_t base = (line / 3) * len * 3 + line % 3;
      double s = 0, m = 0;
      for (int64_t q = 0; q < len; ++q) {
        const int64_t at = base + (rev ? len - 1 - q : q) * 3;
        if (!excl) s += x.data()[at], m += std::fabs(x.data()[at]);
        want[op][at] = s, mag[op][at] = m;
        if (excl) s += x.data()[at], m += std::fabs(x.data()[at]);
      }
    }
  }
  // Tolerance: 1e-6 of the sum of |x| so far (f32 sums, Kahan-compensated in chunks, and their
  // chunk offsets: a few ulp of that scale), at most 0.45 here, below any one element's 1.
  every_backend_and_mode(g, x, [&](const std::vector<Tensor>& out) {
    ASSERT_EQ(out.size(), 4u);
    for (int op = 0; op < 4; ++op) {
      ASSERT_EQ(out[op].shape(), xs);
      for (int64_t i = 0; i < x.numel(); ++i)
        ASSERT_NEAR(out[op].data()[i], want[op][i], 1e-6 * mag[op][i] + 1e-6) << "output " << op << " element " << i;
    }
  });
}

// ---- min / prod

TEST(LongLines, MinAndProdOverLongReductions) {
  // min and prod of x [20, 3, 4000] over axes 0 and 2 (two groups of reduced dims, 80000 elements
  // an output) and over every element (240000).
  const Shape xs{20, 3, 4000};
  auto flat = [](int64_t i, int64_t j, int64_t k) { return (i * 3 + j) * 4000 + k; };
  Tensor x(xs);
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < x.numel(); ++i) x.mutable_data()[i] = 1.f + 1e-3f * u(rng);
  x.mutable_data()[flat(19, 2, 3999)] = 0.25f;  // output 2's min, and the whole min: the last element
  Tensor xn = x;
  xn.mutable_data()[flat(5, 1, 1234)] = NAN;  // output 1 and the whole min are NaN, as is prod's output 1
  auto g = graph(xs, R"({"id": "a", "op": "min", "inputs": ["x"], "attrs": {"axes": [0, 2]}},
                       {"id": "b", "op": "min", "inputs": ["x"]},
                       {"id": "c", "op": "prod", "inputs": ["x"], "attrs": {"axes": [0, 2]}},
                       {"id": "d", "op": "prod", "inputs": ["x"]})",
                 R"("a", "b", "c", "d")");
  for (const Tensor* in : {&x, &xn}) {
    SCOPED_TRACE(in == &x ? "no NaN" : "a NaN");
    const float* v = in->data();
    // by the definition, in double; NaN propagates
    auto step = [](double acc, double e, bool is_min) {
      if (std::isnan(acc) || std::isnan(e)) return (double)NAN;
      return is_min ? std::min(acc, e) : acc * e;
    };
    std::vector<double> a(3, INFINITY), b(1, INFINITY), c(3, 1.0), d(1, 1.0);
    for (int64_t i = 0; i < 20; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 4000; ++k) {
          const double e = v[flat(i, j, k)];
          a[j] = step(a[j], e, true), b[0] = step(b[0], e, true);
          c[j] = step(c[j], e, false), d[0] = step(d[0], e, false);
        }
    every_backend_and_mode(g, *in, [&](const std::vector<Tensor>& out) {
      ASSERT_EQ(out.size(), 4u);
      // min is exact; prod: f32 products of 80000 or 240000 factors in 1 +- 1e-3 against the
      // double loop, within 1e-3 relative (f32 rounding: ~3e-5 typical; one chunk of 4096 factors
      // lost or doubled moves a product by ~4%)
      auto expect = [](const Tensor& t, const std::vector<double>& w, double rtol, const char* what) {
        ASSERT_EQ(t.numel(), (int64_t)w.size()) << what;
        for (size_t i = 0; i < w.size(); ++i) {
          if (std::isnan(w[i])) EXPECT_TRUE(std::isnan(t.data()[i])) << what << " " << i << ": " << t.data()[i];
          else EXPECT_NEAR(t.data()[i], w[i], rtol * std::fabs(w[i])) << what << " " << i;
        }
      };
      expect(out[0], a, 0, "min over axes 0, 2");
      expect(out[1], b, 0, "min of all");
      expect(out[2], c, 1e-3, "prod over axes 0, 2");
      expect(out[3], d, 1e-3, "prod of all");
    });
  }
}

}  // namespace
