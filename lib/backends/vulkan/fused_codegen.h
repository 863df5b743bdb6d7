#pragma once
// Fused elementwise kernels: GLSL generated from a FusedProgram at run time,
// compiled with glslang and cached by FusedProgram::key() plus the collapsed
// broadcast layout (rank, and which dims each input varies along). Sizes and
// offsets are push constants, so one pipeline serves every shape with that layout.
//
// Bindings: inputs 0..n-1, output n. Push constants: n_out, dims[rank], off[n+1].
#include <string>
#include <vector>

#include "backends/vulkan/pipelines.h"
#include "ir/elementwise.h"

namespace rlx::vk {

struct FusedLayout {
  uint32_t rank = 1;
  std::vector<uint32_t> varies;  // per input: bit d set when it varies along collapsed dim d
  std::vector<uint32_t> kinds;   // storage per input, then the output: 0 f32, 1 f16, 2 bf16 (2 bytes)
};

// Push-constant words a fused kernel of `inputs` inputs and `rank` needs.
inline uint32_t fused_push_words(size_t inputs, uint32_t rank) { return 1 + rank + (uint32_t)inputs + 1; }

std::string fused_glsl(const FusedProgram& p, const FusedLayout& layout);

class FusedCodegen {
 public:
  explicit FusedCodegen(PipelineCache& pipes) : pipes_(pipes) {}
  // The name under which the kernel's SPIR-V is known to the PipelineCache (read from the
  // persistent cache, else compiled with glslang); its pipeline is made like any other.
  std::string shader(const FusedProgram& p, const FusedLayout& layout);

 private:
  PipelineCache& pipes_;
};

}  // namespace rlx::vk
