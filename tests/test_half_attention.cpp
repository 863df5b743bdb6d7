// attention on f16/bf16 keys and values read in place (cpu_executor.cpp's half path: decode-sized
// products widen the cache in registers, larger ones a head at a time in the task's scratch; never
// an f32 copy of the whole cache), in every mode, against a plain
// double-precision reference loop written here from the 2-byte values. Odd head sizes and key
// counts exercise the kernels' tails; tests/half_attention.cmake runs this binary again with
// RLX_HALF_ISA and RLX_CPU_ISA forced lower, so every instruction-set level is checked.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "ir/loader.h"
#include "runtime/executor.h"
#include "runtime/session.h"

using namespace rlx;

namespace {

// The value of a 2-byte float, decoded here from its definition (not core/dtype.h).
double ref_value(uint16_t h, DType t) {
  if (t == DType::bf16) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? std::ldexp((double)m, -24) : std::ldexp(1024.0 + m, e - 25);
  if (e == 31) v = m ? NAN : INFINITY;
  return s ? -v : v;
}

struct Case {
  int64_t Hq, Hk, Sq, Sk, D, Dv;
  bool causal;
};

std::string shape(int64_t a, int64_t b, int64_t c) {
  return "[1, " + std::to_string(a) + ", " + std::to_string(b) + ", " + std::to_string(c) + "]";
}

void check(DType dt, const Case& c) {
  const std::string dn = dtype_name(dt);
  auto g = std::make_shared<ir::Graph>(ir::load_graph_text(
      R"({"format": "rlx.graph", "version": 1, "nodes": [
        {"id": "q", "op": "input", "shape": )" + shape(c.Hq, c.Sq, c.D) + R"(, "dtype": ")" + dn + R"("},
        {"id": "k", "op": "input", "shape": )" + shape(c.Hk, c.Sk, c.D) + R"(, "dtype": ")" + dn + R"("},
        {"id": "v", "op": "input", "shape": )" + shape(c.Hk, c.Sk, c.Dv) + R"(, "dtype": ")" + dn + R"("},
        {"id": "y", "op": "attention", "inputs": ["q", "k", "v"], "attrs": {"causal": )" +
          (c.causal ? "true" : "false") + R"(}}], "outputs": ["y"]})",
      "t.json"));
  std::mt19937 gen((unsigned)(c.Hq * 131 + c.Sk * 7 + c.D + c.causal));
  std::normal_distribution<float> d(0.f, 1.f);
  auto random = [&](std::vector<int64_t> s) {
    std::vector<float> v(s[1] * s[2] * s[3]);
    for (auto& x : v) x = d(gen);
    return Tensor::from_vector(s, v, dt);
  };
  Tensor q = random({1, c.Hq, c.Sq, c.D}), k = random({1, c.Hk, c.Sk, c.D}), v = random({1, c.Hk, c.Sk, c.Dv});
  // Reference: softmax(q.k / sqrt(D)) . v in double, from the 2-byte values.
  const int64_t G = c.Hq / c.Hk;
  std::vector<double> want(c.Hq * c.Sq * c.Dv), mag(c.Hq * c.Sq * c.Dv);
  for (int64_t h = 0; h < c.Hq; ++h)
    for (int64_t i = 0; i < c.Sq; ++i) {
      const int64_t hk = h / G, valid = c.causal ? std::min(c.Sk, i + (c.Sk - c.Sq) + 1) : c.Sk;
      std::vector<double> p(c.Sk, 0.0);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < valid; ++j) {
        double s = 0;
        for (int64_t e = 0; e < c.D; ++e)
          s += ref_value(q.data<uint16_t>()[(h * c.Sq + i) * c.D + e], dt) *
               ref_value(k.data<uint16_t>()[(hk * c.Sk + j) * c.D + e], dt);
        p[j] = s / std::sqrt((double)c.D);
        mx = std::max(mx, p[j]);
      }
      for (int64_t j = 0; j < valid; ++j) sum += (p[j] = std::exp(p[j] - mx));
      for (int64_t e = 0; e < c.Dv; ++e) {
        double o = 0, m = 0;
        for (int64_t j = 0; j < valid; ++j) {
          const double x = p[j] / sum * ref_value(v.data<uint16_t>()[(hk * c.Sk + j) * c.Dv + e], dt);
          o += x;
          m += std::fabs(x);
        }
        want[(h * c.Sq + i) * c.Dv + e] = o;
        mag[(h * c.Sq + i) * c.Dv + e] = m;
      }
    }
  auto ex = make_executor("cpu");
  for (Mode m : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {
    SCOPED_TRACE(std::string(mode_name(m)) + " " + dn);
    Session s(g, *ex, {});
    s.set_input("q", q);
    s.set_input("k", k);
    s.set_input("v", v);
    auto y = s.run(m).at(0);
    ASSERT_EQ(y.dtype(), dt);
    ASSERT_EQ(y.numel(), (int64_t)want.size());
    // One rounding into the 2-byte type (half an ulp: 2^-9 relative for bf16, 2^-12 for
    // f16), plus f32 sums and exp (well under 1e-5 of the terms' magnitude).
    const double rel = dt == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    for (size_t i = 0; i < want.size(); ++i) {
      const double got = ref_value(y.data<uint16_t>()[i], dt);
      ASSERT_NEAR(got, want[i], rel * std::fabs(want[i]) + 1e-5 * (mag[i] + 1e-3)) << "element " << i;
    }
  }
}

const std::vector<Case> kCases = {
    // a decode step: one query per head, grouped heads, odd key count and head sizes
    {8, 2, 1, 37, 33, 21, true},
    {4, 4, 1, 1, 64, 64, true},
    // several queries: causal with a cache offset, non-causal, tails everywhere
    {6, 2, 3, 11, 17, 40, true},
    {4, 4, 5, 19, 64, 64, false},
    {2, 1, 7, 7, 5, 3, true},
    // more than 16 query rows a task (prefill): the head's keys and values widened per task
    {8, 2, 7, 23, 33, 21, true},
    {4, 1, 9, 9, 64, 64, false},
};

}  // namespace

TEST(HalfAttention, Bf16KeysAndValuesMatchTheReferenceLoop) {
  for (const auto& c : kCases) check(DType::bf16, c);
}

TEST(HalfAttention, F16KeysAndValuesMatchTheReferenceLoop) {
  for (const auto& c : kCases) check(DType::f16, c);
}
