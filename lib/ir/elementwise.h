#pragma once
// Elementwise operations as data: the enum of every unary/binary formula (from
// elementwise.def), their scalar C++ implementations, and FusedProgram, the
// small register bytecode the compiler emits for fused elementwise chains.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/shape.h"

namespace rlx {

enum class EwOp : uint8_t {
#define UNARY(E, C, G) E,
#define BINARY(E, C, G) E,
#include "ir/elementwise.def"
#undef UNARY
#undef BINARY
};

bool ew_is_unary(EwOp op);
const char* ew_name(EwOp op);
const char* ew_glsl(EwOp op);  // GLSL expression template, in terms of x or a,b

inline float rlx_powf(float a, float b) { return std::pow(a, b); }
inline float rlx_maxf(float a, float b) { return (a != a || b != b) ? NAN : (a > b ? a : b); }
inline float rlx_minf(float a, float b) { return (a != a || b != b) ? NAN : (a < b ? a : b); }
inline float rlx_softplus(float x) {  // max(x, 0) + log1p(exp(-|x|)): no overflow for large |x|
  return (x > 0.0f ? x : 0.0f) + std::log1p(std::exp(-std::fabs(x)));
}
inline float rlx_sign(float x) { return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x; }  // NaN stays NaN
// ONNX Mod with fmod=0: the remainder takes the divisor's sign (NumPy's mod, Python's %).
inline float rlx_modf(float a, float b) {
  float r = std::fmod(a, b);
  return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
inline float rlx_shlf(float a, float b) { return std::ldexp(a, (int)b); }
inline float rlx_shrf(float a, float b) { return std::floor(std::ldexp(a, -(int)b)); }
inline float rlx_silu_vjp(float dy, float x) {
  float s = 1.0f / (1.0f + std::exp(-x));
  return dy * s * (1.0f + x * (1.0f - s));
}
inline float rlx_gelu_erf_vjp(float dy, float x) {
  float cdf = 0.5f * (1.0f + std::erf(x * 0.70710678118654752f));
  float pdf = std::exp(-0.5f * x * x) * 0.39894228040143268f;
  return dy * (cdf + x * pdf);
}
inline float rlx_gelu_tanh_vjp(float dy, float x) {
  const float k = 0.79788456080286536f, c = 0.044715f;
  float t = std::tanh(k * (x + c * x * x * x));
  return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * c * x * x));
}

// The same helpers in double precision (the CPU's f64 kernels expand the same formulas).
inline double rlx_powf(double a, double b) { return std::pow(a, b); }
inline double rlx_maxf(double a, double b) { return (a != a || b != b) ? NAN : (a > b ? a : b); }
inline double rlx_minf(double a, double b) { return (a != a || b != b) ? NAN : (a < b ? a : b); }
inline double rlx_softplus(double x) { return (x > 0.0 ? x : 0.0) + std::log1p(std::exp(-std::fabs(x))); }
inline double rlx_sign(double x) { return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : x; }
inline double rlx_modf(double a, double b) {
  double r = std::fmod(a, b);
  return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r;
}
inline double rlx_shlf(double a, double b) { return std::ldexp(a, (int)b); }
inline double rlx_shrf(double a, double b) { return std::floor(std::ldexp(a, -(int)b)); }
inline double rlx_silu_vjp(double dy, double x) {
  double s = 1.0 / (1.0 + std::exp(-x));
  return dy * s * (1.0 + x * (1.0 - s));
}
inline double rlx_gelu_erf_vjp(double dy, double x) {
  double cdf = 0.5 * (1.0 + std::erf(x * 0.70710678118654752));
  double pdf = std::exp(-0.5 * x * x) * 0.39894228040143268;
  return dy * (cdf + x * pdf);
}
inline double rlx_gelu_tanh_vjp(double dy, double x) {
  const double k = 0.79788456080286536, c = 0.044715;
  double t = std::tanh(k * (x + c * x * x * x));
  return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x));
}

// Scalar evaluation (reference path; kernels use the vectorised loops in the CPU executor).
float ew_apply(EwOp op, float a, float b = 0.f);
// The same formula in double precision (the CPU's f64 kernels): every operation in double.
// (The formulas' float constants, e.g. gelu's 0.044715f, are widened, not re-rounded.)
double ew_apply_f64(EwOp op, double a, double b = 0.0);

// A fused elementwise kernel: registers r0..rN-1 in SSA form, instruction i writes r_i.
struct FusedInstr {
  enum Kind : uint8_t { Load, Const, Unary, Binary } kind;
  EwOp op = EwOp::Add;  // for Unary/Binary
  int32_t a = 0, b = 0;  // Load: input index in a; Unary: a; Binary: a, b (register ids)
  float imm = 0.f;       // Const
};

struct FusedProgram {
  std::vector<FusedInstr> code;
  std::vector<Shape> input_shapes;  // each broadcasts to out_shape
  Shape out_shape;
  int result = 0;  // register holding the output
  // e.g. "mul(x0, add(x1, 0.5))"; an expression longer than kDescribeMax characters is cut
  // there and ends in "...".
  std::string describe() const;
  static constexpr size_t kDescribeMax = 256;
  // Stable text key (used to cache generated GPU kernels).
  std::string key() const;
};

}  // namespace rlx
