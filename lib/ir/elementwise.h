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

// The scalar helpers the formulas of elementwise.def call, for f32 and for the CPU's f64 kernels
// (one template: the same formula in either precision).
template <class T> inline T rlx_powf(T a, T b) { return std::pow(a, b); }
template <class T> inline T rlx_maxf(T a, T b) { return (a != a || b != b) ? T(NAN) : (a > b ? a : b); }
template <class T> inline T rlx_minf(T a, T b) { return (a != a || b != b) ? T(NAN) : (a < b ? a : b); }
template <class T> inline T rlx_softplus(T x) {  // max(x, 0) + log1p(exp(-|x|)): no overflow for large |x|
  return (x > T(0) ? x : T(0)) + std::log1p(std::exp(-std::fabs(x)));
}
template <class T> inline T rlx_sign(T x) { return x > T(0) ? T(1) : x < T(0) ? T(-1) : x; }  // NaN stays NaN
// ONNX Mod with fmod=0: the remainder takes the divisor's sign (NumPy's mod, Python's %).
template <class T> inline T rlx_modf(T a, T b) {
  T r = std::fmod(a, b);
  return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? r + b : r;
}
template <class T> inline T rlx_shlf(T a, T b) { return std::ldexp(a, (int)b); }
template <class T> inline T rlx_shrf(T a, T b) { return std::floor(std::ldexp(a, -(int)b)); }
template <class T> inline T rlx_silu_vjp(T dy, T x) {
  T s = T(1) / (T(1) + std::exp(-x));
  return dy * s * (T(1) + x * (T(1) - s));
}
template <class T> inline T rlx_gelu_erf_vjp(T dy, T x) {
  T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752)));
  T pdf = std::exp(T(-0.5) * x * x) * T(0.39894228040143268);
  return dy * (cdf + x * pdf);
}
template <class T> inline T rlx_gelu_tanh_vjp(T dy, T x) {
  const T k = T(0.79788456080286536), c = T(0.044715);
  T t = std::tanh(k * (x + c * x * x * x));
  return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x * x));
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
