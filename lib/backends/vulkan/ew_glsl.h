#pragma once
// The GLSL library of elementwise formulas, generated from lib/ir/elementwise.def
// through ew_glsl(): `float rlx_ew_unary(uint op, float x)` and
// `float rlx_ew_binary(uint op, float a, float b)`, switching on uint(EwOp).
// The build writes it to ew_ops.glsl for the static shaders (op = a
// specialization constant); fused kernels embed it and call it with literal ops.
#include <string>

namespace rlx::vk {

constexpr unsigned kEwIdentity = 255;  // "no op": plain copy in the unary shader
// Elementwise kernels (unary.comp, binary.comp, fused): work-group size and
// elements per invocation (EPT in the shaders).
constexpr unsigned kEwGroup = 256;
constexpr unsigned kEwPerInvocation = 8;

std::string ew_glsl_library();

}  // namespace rlx::vk
