#pragma once
// Run-time GLSL -> SPIR-V compilation through the glslang C++ API (used for the
// fused elementwise kernels generated from FusedProgram).
#include <cstdint>
#include <string>
#include <vector>

namespace rlx::vk {

// Compiles a compute shader for Vulkan 1.1 / SPIR-V 1.3. Throws RuntimeError
// with glslang's log (and `what`) on failure: that is a bug in the generator.
std::vector<uint32_t> compile_compute_glsl(const std::string& source, const std::string& what);

}  // namespace rlx::vk
