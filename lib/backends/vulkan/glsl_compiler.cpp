#include "backends/vulkan/glsl_compiler.h"

#include <glslang/Public/ResourceLimits.h>
#include <glslang/Public/ShaderLang.h>
#include <glslang/SPIRV/GlslangToSpv.h>

#include <mutex>

#include "core/error.h"

namespace rlx::vk {

std::vector<uint32_t> compile_compute_glsl(const std::string& source, const std::string& what) {
  static std::once_flag init;
  std::call_once(init, [] { glslang::InitializeProcess(); });
  static std::mutex mu;  // glslang's per-process state is not fully thread safe
  std::lock_guard<std::mutex> lock(mu);

  glslang::TShader shader(EShLangCompute);
  const char* src = source.c_str();
  shader.setStrings(&src, 1);
  shader.setEnvInput(glslang::EShSourceGlsl, EShLangCompute, glslang::EShClientVulkan, 100);
  shader.setEnvClient(glslang::EShClientVulkan, glslang::EShTargetVulkan_1_1);
  shader.setEnvTarget(glslang::EShTargetSpv, glslang::EShTargetSpv_1_3);
  auto messages = (EShMessages)(EShMsgSpvRules | EShMsgVulkanRules);
  auto fail = [&](const char* stage, const char* log) {
    return RuntimeError(std::string("internal: generated shader for ") + what + " failed to " + stage + ":\n" + log +
                        "\n--- source ---\n" + source);
  };
  if (!shader.parse(GetDefaultResources(), 450, false, messages)) throw fail("compile", shader.getInfoLog());
  glslang::TProgram program;
  program.addShader(&shader);
  if (!program.link(messages)) throw fail("link", program.getInfoLog());
  std::vector<uint32_t> spirv;
  glslang::SpvOptions opts;
  opts.disableOptimizer = false;
  glslang::GlslangToSpv(*program.getIntermediate(EShLangCompute), spirv, &opts);
  return spirv;
}

}  // namespace rlx::vk
