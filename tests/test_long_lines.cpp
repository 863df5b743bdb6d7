// Ops along long lines (issue 30): topk, argmax/argmin, cumsum, min and prod along lines longer
// than one Vulkan shader invocation may walk (llvmpipe ends an invocation's loops after 65535
// iterations; kernels_long.cpp runs such lines in passes of bounded walks), in every mode on the
// CPU and, where built, on Vulkan (lavapipe in CI). Expected values come from plain loops here:
// a stable order for topk (value, NaN above every number, then the lower index), a scan for
// argmax/argmin, double-precision sums and products.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
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
std::shared_ptr<ir::Graph> graph(const Shape& xs, const std::string& nodes, const std::string& outs,
                                  const std::string& dtype = "f32") {
  return std::make_shared<ir::Graph>(ir::load_graph_text(
      R"({"format": "rlx.graph", "version": 1, "nodes": [{"id": "x", "op": "input", "dtype": ")" + dtype +
          R"(", "shape": )" + dims(xs) + "}, " + nodes + R"(], "outputs": [)" + outs + "]}",
      "long_lines.json"));
}

// RLX_VK_LONG_ROUTE=route while alive (read when a plan is lowered); "" leaves it unset.
struct LongRoute {
  explicit LongRoute(const std::string& route) {
    if (!route.empty()) setenv("RLX_VK_LONG_ROUTE", route.c_str(), 1);
  }
  ~LongRoute() { unsetenv("RLX_VK_LONG_ROUTE"); }
};

// Runs g on x on every built backend in every mode; check(outputs) for each. Vulkan runs twice,
// through each route of argmax/argmin, cumsum and min/prod along long lines (kernels.h's
// long_wg: serial walks, lavapipe's default, and work-group passes, the GPUs').
template <class Check>
void every_backend_and_mode(const std::shared_ptr<ir::Graph>& g, const Tensor& x, Check check) {
  for (const std::string& b : test::built_backends())
    for (const std::string& route : b == "vulkan" ? std::vector<std::string>{"serial", "wg"} : std::vector<std::string>{""}) {
      LongRoute forced(route);
      for (Mode mode : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {
        SCOPED_TRACE(b + (route.empty() ? "" : " route " + route) + " " + mode_name(mode));
        auto ex = make_executor(b);
        Session s(g, *ex, {});
        s.set_input("x", x);
        check(s.run(mode));
      }
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

// ---- chunk boundaries: on Vulkan these lines run in chunks of 4096 elements, one invocation
// (serial route) or one work group (wg route; cumsum: 2048 on devices with less than 18.5 KiB of
// shared memory; kernels.h's wg_chunk) each, then passes over the chunks' results by chunks again
// (three levels past chunk^2 elements); the cases put ties, NaNs and extremes at those boundaries,
// in partial last chunks, over several lines (outer > 1) strided by inner > 1. Cases of three
// levels run with RLX_VK_LONG_PER=2 (chunks of 512 on both routes: three levels past 262144
// elements) where the production chunks would need 16.7M elements.

constexpr int64_t kChunk = 4096, kScanChunk = 2048;
constexpr int64_t kSmallChunk = 512, kSmallThreeLevels = kSmallChunk * kSmallChunk + 5;

// RLX_VK_LONG_PER=2 while alive (read when a plan is lowered)
struct SmallChunks {
  SmallChunks() { setenv("RLX_VK_LONG_PER", "2", 1); }
  ~SmallChunks() { unsetenv("RLX_VK_LONG_PER"); }
};

// x[o, j, i] of x [outer, len, inner], writable
float& at(Tensor& x, int64_t line, int64_t j) {
  const Shape& s = x.shape();
  return x.mutable_data()[((line / s[2]) * s[1] + j) * s[2] + line % s[2]];
}

// argmax, argmin, argmax (select_last_index), argmin (select_last_index) of x [outer, len, inner]
// along axis 1: a scan by the definition (NaN is the extreme: its first occurrence), per line.
std::vector<std::vector<int64_t>> arg_reference(const Tensor& x) {
  const Shape& s = x.shape();
  std::vector<std::vector<int64_t>> want(4);
  for (int op = 0; op < 4; ++op)
    for (int64_t line = 0; line < s[0] * s[2]; ++line) {
      const float* row = x.data() + (line / s[2]) * s[1] * s[2] + line % s[2];
      const bool is_max = op % 2 == 0, last = op >= 2;
      int64_t best = -1;
      for (int64_t j = 0; j < s[1]; ++j) {
        const float c = row[j * s[2]];
        if (std::isnan(c)) {
          best = j;
          break;
        }
        if (best < 0) best = j;
        const float b = row[best * s[2]];
        if (is_max ? c > b : c < b) best = j;
        else if (last && c == b) best = j;
      }
      want[op].push_back(best);
    }
  return want;
}

void check_arg(const Tensor& x) {
  const Shape& xs = x.shape();
  auto g = graph(xs, R"({"id": "a", "op": "argmax", "inputs": ["x"], "attrs": {"axis": 1}},
                       {"id": "b", "op": "argmin", "inputs": ["x"], "attrs": {"axis": 1}},
                       {"id": "c", "op": "argmax", "inputs": ["x"], "attrs": {"axis": 1, "select_last_index": true}},
                       {"id": "d", "op": "argmin", "inputs": ["x"], "attrs": {"axis": 1, "select_last_index": true}})",
                 R"("a", "b", "c", "d")");
  const auto want = arg_reference(x);
  every_backend_and_mode(g, x, [&](const std::vector<Tensor>& out) {
    ASSERT_EQ(out.size(), 4u);
    for (int op = 0; op < 4; ++op) {
      ASSERT_EQ(out[op].shape(), (Shape{xs[0], 1, xs[2]}));
      for (int64_t line = 0; line < xs[0] * xs[2]; ++line)
        EXPECT_EQ(out[op].data<int64_t>()[line], want[op][line]) << "output " << op << " line " << line;
    }
  });
}

TEST(LongLines, ArgMaxArgMinAcrossWorkGroupChunks) {
  const int64_t len = 70001;  // 17 chunks of 4096 and a last one of 369
  Tensor x = tied_values({2, len, 3}, 9);
  // line 0: maxima tied across chunk boundaries, minima too, one in the partial last chunk
  for (int64_t j : {kChunk - 1, kChunk, 3 * kChunk - 1}) at(x, 0, j) = 100.f;
  for (int64_t j : {2 * kChunk - 1, 2 * kChunk, len - 1}) at(x, 0, j) = -100.f;
  // line 1: a maximum before the first NaN (chunk 1), another NaN later
  at(x, 1, 10) = 100.f, at(x, 1, kChunk + 1) = NAN, at(x, 1, 40000) = NAN;
  // line 2: a NaN only at the last element; the minimum at the first
  at(x, 2, len - 1) = NAN, at(x, 2, 0) = -100.f;
  // line 3: every element equal (first 0, last len - 1)
  for (int64_t j = 0; j < len; ++j) at(x, 3, j) = 0.5f;
  // line 4: NaNs at the first element and at a chunk's first
  at(x, 4, 0) = NAN, at(x, 4, kChunk) = NAN;
  // line 5: infinities, tied, in different chunks
  for (int64_t j : {int64_t(3000), len - 2}) at(x, 5, j) = INFINITY;
  for (int64_t j : {int64_t(5000), 16 * kChunk}) at(x, 5, j) = -INFINITY;
  check_arg(x);
}

TEST(LongLines, ArgMaxArgMinOverThreeLevels) {
  // one line of 512 * 512 + 5 in chunks of 512: 513 chunks, their pairs in 2 chunks, then one
  SmallChunks small;
  const int64_t c = kSmallChunk, len = kSmallThreeLevels;
  Tensor x = tied_values({1, len, 1}, 10);
  at(x, 0, (c - 1) * c + 7) = 100.f, at(x, 0, c * c + 1) = 100.f;  // tied across the pairs' chunks
  at(x, 0, c * c) = -100.f, at(x, 0, len - 1) = -100.f;
  {
    SCOPED_TRACE("no NaN");
    check_arg(x);
  }
  at(x, 0, 200000) = NAN;
  at(x, 0, len - 2) = NAN;
  {
    SCOPED_TRACE("NaN");
    check_arg(x);
  }
}

// cumsum of x [outer, len, inner] along axis 1 in all four variants, against a double loop;
// x holds small integers (and NaN, inf), so every partial sum is exact in f32 (below 2^24) and
// the outputs must equal the loop's exactly.
void check_cumsum_exact(const Tensor& x, const std::string& dtype = "f32") {
  const Shape& xs = x.shape();
  const int64_t len = xs[1], inner = xs[2], lines = xs[0] * xs[2];
  auto g = graph(xs, R"({"id": "a", "op": "cumsum", "inputs": ["x"], "attrs": {"axis": 1}},
                       {"id": "b", "op": "cumsum", "inputs": ["x"], "attrs": {"axis": 1, "exclusive": true}},
                       {"id": "c", "op": "cumsum", "inputs": ["x"], "attrs": {"axis": 1, "reverse": true}},
                       {"id": "d", "op": "cumsum", "inputs": ["x"], "attrs": {"axis": 1, "exclusive": true, "reverse": true}})",
                 R"("a", "b", "c", "d")", dtype);
  auto value = [&](const Tensor& t, int64_t i) -> double {
    return dtype == "i32" ? (double)t.data<int32_t>()[i] : (double)t.data()[i];
  };
  std::vector<std::vector<double>> want(4, std::vector<double>(x.numel()));
  for (int op = 0; op < 4; ++op) {
    const bool excl = op % 2 == 1, rev = op >= 2;
    for (int64_t line = 0; line < lines; ++line) {
      const int64_t base = (line / inner) * len * inner + line % inner;
      double s = 0;
      for (int64_t q = 0; q < len; ++q) {
        const int64_t i = base + (rev ? len - 1 - q : q) * inner;
        if (!excl) s += value(x, i);
        want[op][i] = s;
        if (excl) s += value(x, i);
      }
    }
  }
  every_backend_and_mode(g, x, [&](const std::vector<Tensor>& out) {
    ASSERT_EQ(out.size(), 4u);
    for (int op = 0; op < 4; ++op) {
      ASSERT_EQ(out[op].shape(), xs);
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double w = want[op][i], got = value(out[op], i);
        if (std::isnan(w)) ASSERT_TRUE(std::isnan(got)) << "output " << op << " element " << i << ": " << got;
        else ASSERT_EQ(got, w) << "output " << op << " element " << i;
      }
    }
  });
}

Tensor small_integers(const Shape& s, unsigned seed, int lo, int hi, DType dt = DType::f32) {
  Tensor t(s, dt);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DType::i32) t.mutable_data<int32_t>()[i] = u(rng);
    else t.mutable_data()[i] = (float)u(rng);
  }
  return t;
}

TEST(LongLines, CumSumAcrossWorkGroupChunksExactly) {
  const int64_t len = 70001;  // a partial last chunk of 369
  Tensor x = small_integers({2, len, 3}, 11, -3, 3);
  at(x, 1, 5000) = NAN;                                  // NaN from there on (forward), up to it (reverse)
  at(x, 2, kScanChunk) = INFINITY, at(x, 2, 60000) = -INFINITY;  // inf, then NaN past both
  at(x, 4, 2 * kScanChunk - 1) = INFINITY;                      // the last element of a chunk
  check_cumsum_exact(x);
}

TEST(LongLines, CumSumOverThreeLevelsExactly) {
  // [2, 262149, 2] in chunks of 512: 513 chunks, their sums scanned in 2 chunks, whose sums are
  // scanned once (the serial route scans the 513 sums in one walk, as they are below kMaxWalk)
  SmallChunks small;
  check_cumsum_exact(small_integers({2, kSmallThreeLevels, 2}, 16, -3, 3));
}

TEST(LongLines, CumSumOfInt32Exactly) {
  // i32 travels as f32 on Vulkan: exact while every partial sum stays below 2^24 (70001 * 100 does)
  check_cumsum_exact(small_integers({2, 70001, 2}, 13, -100, 100, DType::i32), "i32");
}

// min and prod of x [outer, len, inner] over axis 1 against a double loop (NaN propagates): min
// exact, prod within rtol relative.
void check_min_prod(const Tensor& x, double rtol) {
  const Shape& xs = x.shape();
  const int64_t len = xs[1], inner = xs[2], lines = xs[0] * xs[2];
  auto g = graph(xs, R"({"id": "a", "op": "min", "inputs": ["x"], "attrs": {"axes": [1]}},
                       {"id": "b", "op": "prod", "inputs": ["x"], "attrs": {"axes": [1]}})",
                 R"("a", "b")");
  std::vector<double> mn(lines, INFINITY), pr(lines, 1.0);
  for (int64_t line = 0; line < lines; ++line)
    for (int64_t j = 0; j < len; ++j) {
      const double e = x.data()[((line / inner) * len + j) * inner + line % inner];
      if (std::isnan(e) || std::isnan(mn[line])) mn[line] = pr[line] = NAN;
      else mn[line] = std::min(mn[line], e), pr[line] *= e;
    }
  every_backend_and_mode(g, x, [&](const std::vector<Tensor>& out) {
    ASSERT_EQ(out.size(), 2u);
    for (int64_t line = 0; line < lines; ++line) {
      const float m = out[0].data()[line], p = out[1].data()[line];
      if (std::isnan(mn[line])) {
        EXPECT_TRUE(std::isnan(m)) << "min line " << line << ": " << m;
        EXPECT_TRUE(std::isnan(p)) << "prod line " << line << ": " << p;
      } else {
        EXPECT_EQ(m, mn[line]) << "min line " << line;
        if (std::isinf(pr[line])) EXPECT_EQ(p, pr[line]) << "prod line " << line;
        else EXPECT_NEAR(p, pr[line], rtol * std::fabs(pr[line])) << "prod line " << line;
      }
    }
  });
}

Tensor near_one(const Shape& s, unsigned seed, float spread) {
  Tensor t(s);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data()[i] = 1.f + spread * u(rng);
  return t;
}

TEST(LongLines, MinAndProdAcrossWorkGroupChunks) {
  const int64_t len = 70001;
  Tensor x = near_one({2, len, 3}, 14, 1e-4f);
  at(x, 0, kChunk) = 0.25f;                       // a chunk's first element
  at(x, 1, len - 2) = NAN;                        // in the partial last chunk
  at(x, 2, 0) = NAN, at(x, 2, 1) = 0.25f;         // NaN first, a smaller number after it
  at(x, 3, kChunk - 1) = -INFINITY;               // a chunk's last element: min and prod -inf
  at(x, 4, len - 1) = 0.5f, at(x, 4, 7) = 0.5f;   // tied minima, first and partial last chunk
  check_min_prod(x, 1e-3);  // factors 1 +- 1e-4: a chunk of 4096 lost or doubled moves it ~4e-3
}

TEST(LongLines, MinAndProdOverThreeLevels) {
  // ones, with 2, 0.5 and 3 at chunk boundaries and scattered: every product is exact in f32
  // (2^k 3^10 at most), so an element lost or counted twice shows. (Factors 1 +- 1e-6 over 4.2M
  // elements: f32 products grouped by lanes and levels drift by ~3% from the exact product, as
  // NumPy's f32 simulation of such a grouping does, ties near 1 rounding down.)
  SmallChunks small;  // chunks of 512: 513 chunks, their results in 2 chunks, then one
  const int64_t c = kSmallChunk, len = kSmallThreeLevels;
  Tensor x({1, len, 1});
  std::fill(x.mutable_data(), x.mutable_data() + x.numel(), 1.f);
  std::mt19937 rng(15);
  std::uniform_int_distribution<int64_t> pos(0, len - 1);
  for (int64_t j : {int64_t(0), c - 1, c, c * c - 1, len - 1}) at(x, 0, j) = 2.f;
  for (int i = 0; i < 40; ++i) at(x, 0, pos(rng)) = 2.f;
  for (int i = 0; i < 40; ++i) at(x, 0, pos(rng)) = 0.5f;
  for (int i = 0; i < 10; ++i) at(x, 0, pos(rng)) = 3.f;
  at(x, 0, c * c + 2) = 0.25f;  // the min, in the second chunk of the chunks' results
  {
    SCOPED_TRACE("no NaN");
    check_min_prod(x, 0);
  }
  at(x, 0, len - 1) = NAN;
  {
    SCOPED_TRACE("NaN");
    check_min_prod(x, 0);
  }
}

}  // namespace
