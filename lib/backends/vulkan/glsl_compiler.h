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

// Why `words` is not a valid SPIR-V module for Vulkan 1.1, or "" when it is: the header
// (magic, a version up to 1.3, a sane id bound, schema 0), then SPIRV-Tools' validator
// (spirv-val's checks, already linked in through glslang; 0.4-0.6 ms for a fused kernel's
// 3.8 KB on a 2-core machine). For SPIR-V read back from the compile cache, after its MAC.
std::string spirv_problem(const std::vector<uint32_t>& words);

}  // namespace rlx::vk
