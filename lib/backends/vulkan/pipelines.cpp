#include "backends/vulkan/pipelines.h"

#include <cstring>

#include "core/error.h"

namespace rlx::vk {

// Generated at build time (shader_blobs.cpp): every shaders/*.comp as SPIR-V.
extern const ShaderBlob kShaderBlobs[];
extern const size_t kShaderBlobCount;

const ShaderBlob* find_shader(const std::string& name) {
  for (size_t i = 0; i < kShaderBlobCount; ++i)
    if (name == kShaderBlobs[i].name) return &kShaderBlobs[i];
  return nullptr;
}

PipelineCache::PipelineCache(Device& dev) : dev_(dev) {
  VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  vk_check(dev.fn().vkCreatePipelineCache(dev.dev, &ci, nullptr, &cache_), "vkCreatePipelineCache");
}

PipelineCache::~PipelineCache() {
  const VkFns& f = dev_.fn();
  for (auto& [k, p] : pipelines_) f.vkDestroyPipeline(dev_.dev, p->pipeline, nullptr);
  for (auto& [n, l] : layouts_) f.vkDestroyPipelineLayout(dev_.dev, l, nullptr);
  for (auto& [n, l] : set_layouts_) f.vkDestroyDescriptorSetLayout(dev_.dev, l, nullptr);
  if (cache_) f.vkDestroyPipelineCache(dev_.dev, cache_, nullptr);
}

VkDescriptorSetLayout PipelineCache::set_layout(uint32_t n) {
  auto it = set_layouts_.find(n);
  if (it != set_layouts_.end()) return it->second;
  std::vector<VkDescriptorSetLayoutBinding> b(n);
  for (uint32_t i = 0; i < n; ++i) {
    b[i].binding = i;
    b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    b[i].descriptorCount = 1;
    b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo ci{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  ci.bindingCount = n;
  ci.pBindings = b.data();
  VkDescriptorSetLayout l;
  vk_check(dev_.fn().vkCreateDescriptorSetLayout(dev_.dev, &ci, nullptr, &l), "vkCreateDescriptorSetLayout");
  return set_layouts_[n] = l;
}

VkPipelineLayout PipelineCache::pipeline_layout(uint32_t n) {
  auto it = layouts_.find(n);
  if (it != layouts_.end()) return it->second;
  VkDescriptorSetLayout sl = set_layout(n);
  VkPushConstantRange pr{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
  VkPipelineLayoutCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  ci.setLayoutCount = 1;
  ci.pSetLayouts = &sl;
  ci.pushConstantRangeCount = 1;
  ci.pPushConstantRanges = &pr;
  VkPipelineLayout l;
  vk_check(dev_.fn().vkCreatePipelineLayout(dev_.dev, &ci, nullptr, &l), "vkCreatePipelineLayout");
  return layouts_[n] = l;
}

const Pipeline& PipelineCache::create(const std::string& key, const std::string& name, const uint32_t* code,
                                      size_t bytes, uint32_t bindings, const std::vector<uint32_t>& spec) {
  const VkFns& f = dev_.fn();
  VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mi.codeSize = bytes;
  mi.pCode = code;
  VkShaderModule module;
  vk_check(f.vkCreateShaderModule(dev_.dev, &mi, nullptr, &module), "vkCreateShaderModule");

  std::vector<VkSpecializationMapEntry> entries(spec.size());
  for (uint32_t i = 0; i < spec.size(); ++i) entries[i] = {i, i * 4, 4};
  VkSpecializationInfo si{(uint32_t)entries.size(), entries.data(), spec.size() * 4, spec.data()};

  auto p = std::make_unique<Pipeline>();
  p->bindings = bindings;
  p->name = name;
  p->set_layout = set_layout(bindings);
  p->layout = pipeline_layout(bindings);
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = module;
  ci.stage.pName = "main";
  ci.stage.pSpecializationInfo = spec.empty() ? nullptr : &si;
  ci.layout = p->layout;
  VkResult r = f.vkCreateComputePipelines(dev_.dev, cache_, 1, &ci, nullptr, &p->pipeline);
  f.vkDestroyShaderModule(dev_.dev, module, nullptr);
  vk_check(r, ("vkCreateComputePipelines(" + name + ")").c_str());
  return *(pipelines_[key] = std::move(p));
}

const Pipeline& PipelineCache::get(const std::string& shader, uint32_t bindings, const std::vector<uint32_t>& spec) {
  std::string key = shader + "|" + std::to_string(bindings);
  for (uint32_t v : spec) key += "," + std::to_string(v);
  auto it = pipelines_.find(key);
  if (it != pipelines_.end()) return *it->second;
  const ShaderBlob* blob = find_shader(shader);
  if (!blob) throw RuntimeError("internal: no embedded shader '" + shader + "'");
  return create(key, shader, blob->code, blob->bytes, bindings, spec);
}

const Pipeline* PipelineCache::find(const std::string& key) const {
  auto it = pipelines_.find(key);
  return it == pipelines_.end() ? nullptr : it->second.get();
}

const Pipeline& PipelineCache::add(const std::string& key, const std::vector<uint32_t>& spirv, uint32_t bindings) {
  return create(key, "fused", spirv.data(), spirv.size() * 4, bindings, {});
}

}  // namespace rlx::vk
