#include "backends/vulkan/glsl_compiler.h"

#include <glslang/Public/ResourceLimits.h>
#include <glslang/Public/ShaderLang.h>
#include <glslang/SPIRV/GlslangToSpv.h>
#include <spirv-tools/libspirv.h>

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

std::string spirv_problem(const std::vector<uint32_t>& words) {
  if (words.size() < 5) return "not SPIR-V (" + std::to_string(words.size() * 4) + " bytes)";
  if (words[0] != 0x07230203u) return "not SPIR-V (bad magic number)";
  const uint32_t v = words[1];
  if ((v & 0xff0000ffu) != 0 || v < 0x00010000u || v > 0x00010300u) return "SPIR-V version word " + std::to_string(v) + " (expected 1.0-1.3)";
  // Every id is below the bound, and an instruction defines at most one: no more ids than words.
  if (words[3] == 0 || words[3] > words.size()) return "SPIR-V id bound " + std::to_string(words[3]) + " out of range";
  if (words[4] != 0) return "SPIR-V schema word is not 0";
  static std::mutex mu;
  static spv_context ctx = spvContextCreate(SPV_ENV_VULKAN_1_1);
  std::lock_guard<std::mutex> lock(mu);
  spv_const_binary_t bin{words.data(), words.size()};
  spv_diagnostic diag = nullptr;
  spv_result_t r = spvValidate(ctx, &bin, &diag);
  std::string why;
  if (r != SPV_SUCCESS) why = std::string("invalid SPIR-V: ") + (diag && diag->error ? diag->error : "rejected by the validator");
  spvDiagnosticDestroy(diag);
  return why;
}

}  // namespace rlx::vk
