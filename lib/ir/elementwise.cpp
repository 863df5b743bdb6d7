#include "ir/elementwise.h"

#include <sstream>

namespace rlx {

bool ew_is_unary(EwOp op) {
  switch (op) {
#define UNARY(E, C, G) case EwOp::E: return true;
#define BINARY(E, C, G) case EwOp::E: return false;
#include "ir/elementwise.def"
#undef UNARY
#undef BINARY
  }
  return false;
}

const char* ew_name(EwOp op) {
  switch (op) {
#define UNARY(E, C, G) case EwOp::E: return #E;
#define BINARY(E, C, G) case EwOp::E: return #E;
#include "ir/elementwise.def"
#undef UNARY
#undef BINARY
  }
  return "?";
}

const char* ew_glsl(EwOp op) {
  switch (op) {
#define UNARY(E, C, G) case EwOp::E: return #G;
#define BINARY(E, C, G) case EwOp::E: return #G;
#include "ir/elementwise.def"
#undef UNARY
#undef BINARY
  }
  return "";
}

namespace {
// Every formula of elementwise.def in precision T (float, or double for the CPU's f64 kernels).
template <class T>
T apply(EwOp op, T x, T b) {
  T a = x;
  (void)a;
  switch (op) {
#define UNARY(E, C, G) case EwOp::E: return C;
#define BINARY(E, C, G) case EwOp::E: return C;
#include "ir/elementwise.def"
#undef UNARY
#undef BINARY
  }
  return T(0);
}
}  // namespace

float ew_apply(EwOp op, float x, float b) { return apply<float>(op, x, b); }
double ew_apply_f64(EwOp op, double x, double b) { return apply<double>(op, x, b); }

std::string FusedProgram::describe() const {
  std::vector<std::string> r(code.size());
  for (size_t i = 0; i < code.size(); ++i) {
    const auto& in = code[i];
    std::ostringstream s;
    switch (in.kind) {
      case FusedInstr::Load: s << "in" << in.a; break;
      case FusedInstr::Const: s << in.imm; break;
      case FusedInstr::Unary: s << ew_name(in.op) << "(" << r[in.a] << ")"; break;
      case FusedInstr::Binary: s << ew_name(in.op) << "(" << r[in.a] << ", " << r[in.b] << ")"; break;
    }
    r[i] = s.str();
    // A chain of thousands of instructions would otherwise nest every operand's whole text
    // into each register's (quadratic memory: 2.3 GB for a 30,000-node chain).
    if (r[i].size() > kDescribeMax) r[i] = r[i].substr(0, kDescribeMax) + "...";
  }
  return code.empty() ? "" : r[result];
}

std::string FusedProgram::key() const {
  std::ostringstream s;
  s.precision(9);
  for (const auto& in : code) s << (int)in.kind << ':' << (int)in.op << ':' << in.a << ':' << in.b << ':' << in.imm << ';';
  s << "r" << result << ";n" << input_shapes.size();
  return s.str();
}

}  // namespace rlx
