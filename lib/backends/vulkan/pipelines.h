#pragma once
// Compute pipelines: embedded SPIR-V shaders (compiled from shaders/*.comp at
// build time) specialised with specialization constants, and pipelines built
// from SPIR-V generated at run time (fused kernels). The VkPipelineCache is loaded
// from and saved to the persistent compile cache (io/blob_cache.h, docs/cache.md),
// keyed by vendor, device, driver version and pipelineCacheUUID, its header checked
// against the device before the driver sees it. Every pipeline uses the
// same scheme: set 0 holds N storage buffers at bindings 0..N-1, plus one
// 128-byte push-constant range.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/vulkan/device.h"

namespace rlx::vk {

constexpr uint32_t kPushBytes = 128;  // the minimum every Vulkan device supports

struct Pipeline {
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  uint32_t bindings = 0;
  std::string name;
};

// The embedded SPIR-V of shaders/<name>.comp (variants: "<name>.sg" with subgroup ops).
struct ShaderBlob {
  const char* name;
  const uint32_t* code;
  size_t bytes;
};
const ShaderBlob* find_shader(const std::string& name);

class PipelineCache {
 public:
  explicit PipelineCache(Device& dev);
  ~PipelineCache();

  // A shader (embedded, or added with add_shader) specialised with `spec` (constant_id i gets
  // spec[i]).
  const Pipeline& get(const std::string& shader, uint32_t bindings, const std::vector<uint32_t>& spec);
  // Creates, several at once on as many threads (the costliest first), the pipelines of these
  // requests that do not exist yet. Compiled mode knows its whole plan before recording it, and
  // a driver that compiles pipelines on the CPU (lavapipe's LLVM; NVIDIA's on a cold start) is
  // then not paid for one pipeline after another. get() still creates anything missed.
  struct Request {
    std::string shader;
    uint32_t bindings = 0;
    std::vector<uint32_t> spec;
  };
  void prepare(const std::vector<Request>& requests);
  // SPIR-V generated at run time (fused kernels), known from now on as shader `name`.
  bool has_shader(const std::string& name) const { return generated_.count(name) > 0; }
  void add_shader(const std::string& name, std::vector<uint32_t> spirv);

  VkDescriptorSetLayout set_layout(uint32_t bindings);

  // What start-up cost, for --verbose (docs/cache.md): fused kernels' SPIR-V read from the
  // persistent cache or compiled with glslang, and pipelines created.
  struct Stats {
    int spirv_cached = 0, spirv_compiled = 0, pipelines = 0;
    double glslang_ms = 0, pipeline_ms = 0;
    size_t cache_loaded_bytes = 0;
  };
  Stats stats;

 private:
  struct Code {
    const uint32_t* words = nullptr;
    size_t bytes = 0;
  };
  Code code_for(const std::string& shader) const;  // {nullptr, 0} when unknown
  // The driver's part of making a pipeline, safe on several threads at once (touches no member map).
  VkResult make(const uint32_t* code, size_t bytes, VkPipelineLayout layout, const std::vector<uint32_t>& spec,
                VkPipeline* out) const;
  static std::string key_for(const std::string& shader, uint32_t bindings, const std::vector<uint32_t>& spec);
  VkPipelineLayout pipeline_layout(uint32_t bindings);

  Device& dev_;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  std::string disk_key_;     // the persistent cache's key for this device's VkPipelineCache
  std::string loaded_data_;  // what was loaded from it (not stored again unchanged)
  std::map<std::string, std::vector<uint32_t>> generated_;
  std::map<std::string, std::unique_ptr<Pipeline>> pipelines_;
  std::map<uint32_t, VkDescriptorSetLayout> set_layouts_;
  std::map<uint32_t, VkPipelineLayout> layouts_;
};

}  // namespace rlx::vk
