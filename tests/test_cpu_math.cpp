// Accuracy of the CPU executor's vectorisable math against double-precision libm.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cpu/fast_math.h"

using namespace rlx::cpu;

namespace {

template <class F, class R>
double worst_rel(F f, R ref, double lo, double hi, double floor_abs) {
  double worst = 0;
  for (int i = 0; i <= 200000; ++i) {
    double x = lo + (hi - lo) * i / 200000.0;
    double want = ref(x), got = f((float)x);
    double err = std::fabs(got - want) / std::max(std::fabs(want), floor_abs);
    worst = std::max(worst, err);
  }
  return worst;
}

TEST(FastMath, Exp) {
  EXPECT_LT(worst_rel(fm_exp, [](double x) { return std::exp((double)(float)x); }, -87, 88, 1e-37), 3e-7);
  EXPECT_EQ(fm_exp(-200.f), 0.f);
  EXPECT_TRUE(std::isinf(fm_exp(100.f)));
  EXPECT_TRUE(std::isnan(fm_exp(NAN)));
}

TEST(FastMath, ErfRelativeEverywhere) {
  auto ref = [](double x) { return std::erf((double)(float)x); };
  EXPECT_LT(worst_rel(fm_erf, ref, -6, 6, 1e-30), 5e-7);
  EXPECT_LT(worst_rel(fm_erf, ref, -1e-3, 1e-3, 1e-30), 5e-7);  // near zero: no cancellation
}

TEST(FastMath, Tanh) {
  auto ref = [](double x) { return std::tanh((double)(float)x); };
  EXPECT_LT(worst_rel(fm_tanh, ref, -30, 30, 1e-30), 5e-7);
  EXPECT_LT(worst_rel(fm_tanh, ref, -1e-2, 1e-2, 1e-30), 5e-7);
}

TEST(FastMath, GeluBothFormsIncludingNegativeTail) {
  auto erf_ref = [](double x) { x = (double)(float)x; return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); };
  EXPECT_LT(worst_rel(fm_gelu_erf, erf_ref, -9, 9, 1e-30), 1e-6);
  auto erfc_ref = [](double a) { return std::erfc((double)(float)a / std::sqrt(2.0)); };
  EXPECT_LT(worst_rel(fm_erfc_scaled_tail, erfc_ref, 0, 12, 1e-30), 5e-7);
  auto tanh_ref = [](double x) {
    x = (double)(float)x;
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  };
  // The tanh form's argument u is computed in f32 (as the spec's formula reads); its rounding,
  // ~ulp(|2u|) relative in exp, bounds the tail accuracy of any f32 implementation: 3e-6 at x = -5.
  EXPECT_LT(worst_rel(fm_gelu_tanh, tanh_ref, -5, 9, 1e-30), 4e-6);
  EXPECT_LT(worst_rel(fm_gelu_tanh, tanh_ref, -2, 9, 1e-30), 1e-6);
}

TEST(FastMath, SigmoidAndSilu) {
  auto ref = [](double x) { x = (double)(float)x; return 1 / (1 + std::exp(-x)); };
  EXPECT_LT(worst_rel(fm_sigmoid, ref, -80, 80, 1e-30), 5e-7);
}

}  // namespace
