#include "backends/vulkan/pipelines.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "io/blob_cache.h"

namespace rlx::vk {

// Generated at build time (shader_blobs.cpp): every shaders/*.comp as SPIR-V.
extern const ShaderBlob kShaderBlobs[];
extern const size_t kShaderBlobCount;

const ShaderBlob* find_shader(const std::string& name) {
  for (size_t i = 0; i < kShaderBlobCount; ++i)
    if (name == kShaderBlobs[i].name) return &kShaderBlobs[i];
  return nullptr;
}

namespace {

std::string uuid_hex(const uint8_t* u) {
  std::string s;
  for (int i = 0; i < VK_UUID_SIZE; ++i) s += fmt::format("{:02x}", u[i]);
  return s;
}

// Why pipeline-cache data saved earlier does not belong to this device, or "" when it does
// (VkPipelineCacheHeaderVersionOne: length, version, vendor, device, UUID).
std::string header_problem(const std::string& d, const VkPhysicalDeviceProperties& p) {
  if (d.size() < 32) return "shorter than its header";
  uint32_t w[4];
  std::memcpy(w, d.data(), 16);
  if (w[0] < 32 || w[0] > d.size()) return "bad header length";
  if (w[1] != VK_PIPELINE_CACHE_HEADER_VERSION_ONE) return "unknown header version";
  if (w[2] != p.vendorID || w[3] != p.deviceID) return "another vendor or device";
  if (std::memcmp(d.data() + 16, p.pipelineCacheUUID, VK_UUID_SIZE) != 0) return "another driver build (UUID)";
  return "";
}

}  // namespace

PipelineCache::PipelineCache(Device& dev) : dev_(dev) {
  VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  if (io::BlobCache* disk = io::active_cache()) {
    VkPhysicalDeviceProperties p{};
    dev.fn().vkGetPhysicalDeviceProperties(dev.phys, &p);
    disk_key_ = fmt::format("vulkan pipeline cache\nvendor {:#x} device {:#x} driver {:#x} uuid {}\n{}\n{}", p.vendorID,
                            p.deviceID, p.driverVersion, uuid_hex(p.pipelineCacheUUID), p.deviceName, dev.caps.driver);
    io::BlobCache::Lookup hit = disk->get("vkpipeline", disk_key_);
    std::string problem = hit.problem;
    if (hit.data) {
      problem = header_problem(*hit.data, p);
      if (problem.empty()) loaded_data_ = std::move(*hit.data);
      else problem = disk->entry_path("vkpipeline", disk_key_) + ": " + problem;
    }
    if (!problem.empty()) io::cache_log().warnings.push_back("compile cache: ignored a bad Vulkan pipeline cache (" + problem + ")");
  }
  if (!loaded_data_.empty()) {
    ci.initialDataSize = loaded_data_.size();
    ci.pInitialData = loaded_data_.data();
    if (dev.fn().vkCreatePipelineCache(dev.dev, &ci, nullptr, &cache_) == VK_SUCCESS) {
      stats.cache_loaded_bytes = loaded_data_.size();
      return;
    }
    io::cache_log().warnings.push_back("compile cache: the driver refused the saved Vulkan pipeline cache; starting empty");
    loaded_data_.clear();
    ci.initialDataSize = 0;
    ci.pInitialData = nullptr;
  }
  vk_check(dev.fn().vkCreatePipelineCache(dev.dev, &ci, nullptr, &cache_), "vkCreatePipelineCache");
}

PipelineCache::~PipelineCache() {
  const VkFns& f = dev_.fn();
  // Save what the driver cached, when pipelines were created and it changed (never throws).
  io::BlobCache* disk = io::active_cache();
  if (disk && cache_ && stats.pipelines > 0 && !disk_key_.empty()) {
    size_t n = 0;
    std::string data;
    if (f.vkGetPipelineCacheData(dev_.dev, cache_, &n, nullptr) == VK_SUCCESS && n > 0) {
      data.resize(n);
      if (f.vkGetPipelineCacheData(dev_.dev, cache_, &n, data.data()) != VK_SUCCESS) data.clear();
      data.resize(std::min(n, data.size()));
    }
    if (!data.empty() && data != loaded_data_) {
      std::string err;
      if (disk->put("vkpipeline", disk_key_, data, &err)) io::cache_log().stores++;
      else io::cache_log().warnings.push_back("compile cache: could not store the Vulkan pipeline cache: " + err);
    }
  }
  io::cache_log().notes.push_back(fmt::format(
      "compile cache: vulkan: fused kernels: {} SPIR-V from the cache, {} compiled with glslang ({:.1f} ms); "
      "{} pipeline(s) created in {:.1f} ms; pipeline cache: {} bytes loaded",
      stats.spirv_cached, stats.spirv_compiled, stats.glslang_ms, stats.pipelines, stats.pipeline_ms,
      stats.cache_loaded_bytes));
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

VkResult PipelineCache::make(const uint32_t* code, size_t bytes, VkPipelineLayout layout,
                             const std::vector<uint32_t>& spec, VkPipeline* out) const {
  const VkFns& f = dev_.fn();
  VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mi.codeSize = bytes;
  mi.pCode = code;
  VkShaderModule module;
  VkResult r = f.vkCreateShaderModule(dev_.dev, &mi, nullptr, &module);
  if (r != VK_SUCCESS) return r;
  std::vector<VkSpecializationMapEntry> entries(spec.size());
  for (uint32_t i = 0; i < spec.size(); ++i) entries[i] = {i, i * 4, 4};
  VkSpecializationInfo si{(uint32_t)entries.size(), entries.data(), spec.size() * 4, spec.data()};
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = module;
  ci.stage.pName = "main";
  ci.stage.pSpecializationInfo = spec.empty() ? nullptr : &si;
  ci.layout = layout;
  // The pipeline cache is internally synchronised (created without EXTERNALLY_SYNCHRONIZED).
  r = f.vkCreateComputePipelines(dev_.dev, cache_, 1, &ci, nullptr, out);
  f.vkDestroyShaderModule(dev_.dev, module, nullptr);
  return r;
}

PipelineCache::Code PipelineCache::code_for(const std::string& shader) const {
  auto g = generated_.find(shader);
  if (g != generated_.end()) return {g->second.data(), g->second.size() * 4};
  const ShaderBlob* blob = find_shader(shader);
  return blob ? Code{blob->code, blob->bytes} : Code{};
}

void PipelineCache::add_shader(const std::string& name, std::vector<uint32_t> spirv) {
  generated_[name] = std::move(spirv);
}

std::string PipelineCache::key_for(const std::string& shader, uint32_t bindings, const std::vector<uint32_t>& spec) {
  std::string key = shader + "|" + std::to_string(bindings);
  for (uint32_t v : spec) key += "," + std::to_string(v);
  return key;
}

void PipelineCache::prepare(const std::vector<Request>& requests) {
  struct Job {
    std::string key;
    const Request* req;
    Code code;
    std::unique_ptr<Pipeline> p;
    VkResult r = VK_SUCCESS;
  };
  std::vector<Job> jobs;
  std::set<std::string> seen;
  for (const Request& q : requests) {
    std::string key = key_for(q.shader, q.bindings, q.spec);
    Code code = code_for(q.shader);
    if (!code.words || pipelines_.count(key) || !seen.insert(key).second) continue;  // get() reports a missing shader
    auto p = std::make_unique<Pipeline>();
    p->bindings = q.bindings;
    p->name = q.shader;
    p->set_layout = set_layout(q.bindings);
    p->layout = pipeline_layout(q.bindings);
    jobs.push_back({key, &q, code, std::move(p)});
  }
  if (jobs.empty()) return;
  // The largest modules first (a driver's compile time grows with them), so that the threads
  // finish together rather than one of them starting the costliest last.
  std::stable_sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.code.bytes > b.code.bytes; });
  const size_t threads = std::min<size_t>({jobs.size(), std::max(1u, std::thread::hardware_concurrency()), 8});
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
      Job& j = jobs[i];
      j.r = make(j.code.words, j.code.bytes, j.p->layout, j.req->spec, &j.p->pipeline);
    }
  };
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  stats.pipeline_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  stats.pipelines += (int)jobs.size();
  const Job* failed = nullptr;
  for (Job& j : jobs) {
    if (j.r == VK_SUCCESS) pipelines_[j.key] = std::move(j.p);
    else if (!failed) failed = &j;
  }
  if (failed) vk_check(failed->r, ("vkCreateComputePipelines(" + failed->req->shader + ")").c_str());
}

const Pipeline& PipelineCache::get(const std::string& shader, uint32_t bindings, const std::vector<uint32_t>& spec) {
  std::string key = key_for(shader, bindings, spec);
  auto it = pipelines_.find(key);
  if (it != pipelines_.end()) return *it->second;
  if (!code_for(shader).words) throw RuntimeError("internal: no shader '" + shader + "'");
  prepare({{shader, bindings, spec}});  // one job: created on this thread
  return *pipelines_.at(key);
}

}  // namespace rlx::vk
