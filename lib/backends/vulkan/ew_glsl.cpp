#include "backends/vulkan/ew_glsl.h"

#include "ir/elementwise.h"

namespace rlx::vk {

std::string ew_glsl_library() {
  std::string unary, binary;
  auto add = [](std::string& s, EwOp op) {
    s += "    case " + std::to_string((unsigned)op) + "u: return " + ew_glsl(op) + ";  // " + ew_name(op) + "\n";
  };
#define UNARY(E, C, G) add(unary, EwOp::E);
#define BINARY(E, C, G) add(binary, EwOp::E);
#include "ir/elementwise.def"
#undef UNARY
#undef BINARY
  return "// Generated from lib/ir/elementwise.def by ew_glsl_library(): do not edit.\n"
         "float rlx_ew_unary(uint op, float x) {\n  switch (op) {\n" + unary +
         "  }\n  return x;\n}\n"
         "float rlx_ew_binary(uint op, float a, float b) {\n  switch (op) {\n" + binary +
         "  }\n  return a;\n}\n";
}

}  // namespace rlx::vk
