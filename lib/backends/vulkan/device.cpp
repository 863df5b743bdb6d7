#include "backends/vulkan/device.h"

#include "backends/vulkan/coopmat_caps.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace rlx::vk {

namespace {

const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

std::string version_str(uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) + "." +
         std::to_string(VK_API_VERSION_PATCH(v));
}

const char* type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

bool has_ext(const std::vector<VkExtensionProperties>& exts, const char* name) {
  for (const auto& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

std::vector<VkExtensionProperties> instance_exts(const VkFns& fn, const char* layer) {
  uint32_t n = 0;
  fn.vkEnumerateInstanceExtensionProperties(layer, &n, nullptr);
  std::vector<VkExtensionProperties> v(n);
  fn.vkEnumerateInstanceExtensionProperties(layer, &n, v.data());
  v.resize(n);
  return v;
}

VKAPI_ATTR VkBool32 VKAPI_CALL on_debug_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                 VkDebugUtilsMessageTypeFlagsEXT,
                                                 const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  auto* inst = static_cast<Instance*>(user);
  const char* msg = data && data->pMessage ? data->pMessage : "(no message)";
  if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    inst->last_validation_error = msg;
    inst->validation_errors++;
    std::fprintf(stderr, "rlx: Vulkan validation error: %s\n", msg);
  } else {
    std::fprintf(stderr, "rlx: Vulkan validation warning: %s\n", msg);
  }
  return VK_FALSE;
}

// RLX_VK_MAX_BINDING_BYTES: a lower binding limit than the device's (0 when unset). Only
// lowers: a value above maxStorageBufferRange changes nothing. Bad values are refused (exit 2).
uint64_t binding_limit_override() {
  const char* e = std::getenv("RLX_VK_MAX_BINDING_BYTES");
  if (!e || !*e) return 0;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(e, &end, 10);
  if (*e < '0' || *e > '9' || *end || errno || v < 4096)
    throw InputError(std::string("RLX_VK_MAX_BINDING_BYTES must be a number of bytes >= 4096 (it can only lower the "
                                 "device's maxStorageBufferRange), not '") + printable(e) + "'");
  return v;
}

}  // namespace

bool validation_requested() {
  const char* v = std::getenv("RLX_VK_VALIDATION");
  return v && *v && std::strcmp(v, "0") != 0;
}

// ---------------------------------------------------------------- Instance

Instance::Instance(bool want_validation) {
  fn.load_loader();
  uint32_t loader_version = VK_API_VERSION_1_0;
  if (fn.vkEnumerateInstanceVersion) fn.vkEnumerateInstanceVersion(&loader_version);
  if (loader_version < VK_API_VERSION_1_1)
    throw RuntimeError("the Vulkan loader supports only Vulkan " + version_str(loader_version) +
                       "; rlx needs 1.1 or newer: upgrade libvulkan1");
  api_version = std::min<uint32_t>(loader_version, VK_API_VERSION_1_3);

  auto exts = instance_exts(fn, nullptr);
  std::vector<const char*> enable_exts, enable_layers;
  VkInstanceCreateFlags flags = 0;
  if (has_ext(exts, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
    enable_exts.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
    flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  }
  bool sync_validation = false;
  if (want_validation) {
    uint32_t n = 0;
    fn.vkEnumerateInstanceLayerProperties(&n, nullptr);
    std::vector<VkLayerProperties> layers(n);
    fn.vkEnumerateInstanceLayerProperties(&n, layers.data());
    bool found = false;
    for (uint32_t i = 0; i < n; ++i) found = found || std::strcmp(layers[i].layerName, kValidationLayer) == 0;
    if (!found)
      throw RuntimeError(std::string("RLX_VK_VALIDATION is set but ") + kValidationLayer +
                         " is not installed: `apt-get install vulkan-validationlayers`");
    auto layer_exts = instance_exts(fn, kValidationLayer);
    if (!has_ext(exts, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) && !has_ext(layer_exts, VK_EXT_DEBUG_UTILS_EXTENSION_NAME))
      throw RuntimeError("RLX_VK_VALIDATION is set but VK_EXT_debug_utils is not available");
    enable_layers.push_back(kValidationLayer);
    enable_exts.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    if (has_ext(layer_exts, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
      enable_exts.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
      sync_validation = true;
    }
    validation = true;
  }

  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "rlx";
  app.pEngineName = "rlx";
  app.apiVersion = api_version;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.flags = flags;
  ci.pApplicationInfo = &app;
  ci.enabledExtensionCount = (uint32_t)enable_exts.size();
  ci.ppEnabledExtensionNames = enable_exts.data();
  ci.enabledLayerCount = (uint32_t)enable_layers.size();
  ci.ppEnabledLayerNames = enable_layers.data();
  // Synchronization validation checks the executor's barriers, too.
  VkValidationFeatureEnableEXT features[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  VkValidationFeaturesEXT vf{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
  vf.enabledValidationFeatureCount = 1;
  vf.pEnabledValidationFeatures = features;
  if (sync_validation) ci.pNext = &vf;
  VkResult r = fn.vkCreateInstance(&ci, nullptr, &instance);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
    throw RuntimeError("no Vulkan driver: the loader found no compatible ICD; install one, e.g. "
                       "`apt-get install mesa-vulkan-drivers` (CPU) or the GPU vendor's driver");
  vk_check(r, "vkCreateInstance");
  fn.load_instance(instance, validation);

  if (validation) {
    VkDebugUtilsMessengerCreateInfoEXT mi{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    mi.pfnUserCallback = on_debug_message;
    mi.pUserData = this;
    if (!fn.vkCreateDebugUtilsMessengerEXT) throw RuntimeError("Vulkan: vkCreateDebugUtilsMessengerEXT is missing");
    vk_check(fn.vkCreateDebugUtilsMessengerEXT(instance, &mi, nullptr, &messenger_), "vkCreateDebugUtilsMessengerEXT");
  }
}

Instance::~Instance() {
  if (messenger_) fn.vkDestroyDebugUtilsMessengerEXT(instance, messenger_, nullptr);
  if (instance) fn.vkDestroyInstance(instance, nullptr);
}

std::vector<VkPhysicalDevice> Instance::physical_devices() const {
  uint32_t n = 0;
  vk_check(fn.vkEnumeratePhysicalDevices(instance, &n, nullptr), "vkEnumeratePhysicalDevices");
  std::vector<VkPhysicalDevice> v(n);
  vk_check(fn.vkEnumeratePhysicalDevices(instance, &n, v.data()), "vkEnumeratePhysicalDevices");
  v.resize(n);
  return v;
}

DeviceCaps Instance::query(VkPhysicalDevice pd) const {
  DeviceCaps c;
  uint32_t n = 0;
  fn.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  fn.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, exts.data());
  exts.resize(n);

  VkPhysicalDeviceSubgroupProperties sg{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p2.pNext = &sg;
  VkPhysicalDeviceProperties p0;
  fn.vkGetPhysicalDeviceProperties(pd, &p0);
  bool v12 = p0.apiVersion >= VK_API_VERSION_1_2 && api_version >= VK_API_VERSION_1_2;
  if (v12 || has_ext(exts, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME)) sg.pNext = &drv;
  fn.vkGetPhysicalDeviceProperties2(pd, &p2);
  const auto& p = p2.properties;
  const auto& L = p.limits;

  c.name = p.deviceName;
  c.type = type_name(p.deviceType);
  c.cpu = p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  c.api_version = p.apiVersion;
  c.driver = sg.pNext ? std::string(drv.driverName) + " " + drv.driverInfo : std::to_string(p.driverVersion);
  c.subgroup_size = std::max(1u, sg.subgroupSize);
  c.subgroup_arithmetic = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                          (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                          (sg.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT);
  c.max_shared_bytes = L.maxComputeSharedMemorySize;
  c.max_push_bytes = L.maxPushConstantsSize;
  c.max_storage_range = L.maxStorageBufferRange;
  c.max_binding_bytes = c.max_storage_range;
  if (uint64_t lowered = binding_limit_override(); lowered && lowered < c.max_binding_bytes) {
    c.max_binding_bytes = lowered;
    c.binding_lowered = true;
  }
  c.max_storage_bindings = L.maxPerStageDescriptorStorageBuffers;
  c.min_storage_align = std::max<uint64_t>(4, L.minStorageBufferOffsetAlignment);
  for (int i = 0; i < 3; ++i) c.max_groups[i] = L.maxComputeWorkGroupCount[i];
  c.max_wg_invocations = std::min(L.maxComputeWorkGroupInvocations, L.maxComputeWorkGroupSize[0]);
  c.timestamp_period_ns = L.timestampPeriod;

  VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  VkPhysicalDeviceProperties2 p3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p3.pNext = &m3;
  fn.vkGetPhysicalDeviceProperties2(pd, &p3);
  c.max_allocation = m3.maxMemoryAllocationSize ? m3.maxMemoryAllocationSize : (1ull << 30);

  // fp16 arithmetic in shaders (1.2 core, or VK_KHR_shader_float16_int8).
  if (v12 || has_ext(exts, VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME)) {
    VkPhysicalDeviceShaderFloat16Int8Features f16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.pNext = &f16;
    fn.vkGetPhysicalDeviceFeatures2(pd, &f2);
    c.fp16 = f16.shaderFloat16;
  }
  for (const char* e : {"VK_KHR_cooperative_matrix", "VK_NV_cooperative_matrix", "VK_NV_cooperative_matrix2"})
    if (has_ext(exts, e)) c.coopmat.push_back(e);
  {  // 16-bit storage (core in 1.1), the Vulkan memory model (1.2), NV cooperative matrices
    VkPhysicalDevice16BitStorageFeatures s16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDeviceVulkanMemoryModelFeatures mm{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cm{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.pNext = &s16;
    void** tail = &s16.pNext;
    if (v12) *tail = &mm, tail = &mm.pNext;
    bool nv = has_ext(exts, "VK_NV_cooperative_matrix");
    if (nv) *tail = &cm, tail = &cm.pNext;
    fn.vkGetPhysicalDeviceFeatures2(pd, &f2);
    c.storage16 = s16.storageBuffer16BitAccess;
    c.memory_model = v12 && mm.vulkanMemoryModel;
    c.coop_nv = nv && cm.cooperativeMatrix;
    if (v12) {
      VkPhysicalDeviceFloatControlsProperties fc{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES};
      VkPhysicalDeviceProperties2 pf{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
      pf.pNext = &fc;
      fn.vkGetPhysicalDeviceProperties2(pd, &pf);
      c.rte16 = fc.shaderRoundingModeRTEFloat16;
    }
    auto props = (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)fn.vkGetInstanceProcAddr(
        instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
    if (c.coop_nv && props) {
      uint32_t np = 0;
      props(pd, &np, nullptr);
      std::vector<VkCooperativeMatrixPropertiesNV> ps(np, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
      props(pd, &np, ps.data());
      for (uint32_t i = 0; i < np; ++i) {
        const auto& q = ps[i];
        if (q.AType == VK_COMPONENT_TYPE_FLOAT16_NV && q.BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
            q.CType == VK_COMPONENT_TYPE_FLOAT32_NV && q.DType == VK_COMPONENT_TYPE_FLOAT32_NV &&
            q.scope == VK_SCOPE_SUBGROUP_NV)
          c.coop_f16.push_back({q.MSize, q.NSize, q.KSize});
      }
    }
  }

  query_coopmat(*this, pd, exts, c);

  VkPhysicalDeviceMemoryProperties mem;
  fn.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  for (uint32_t i = 0; i < mem.memoryHeapCount; ++i)
    if (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) {
      c.device_local_bytes += mem.memoryHeaps[i].size;
      c.max_heap_bytes = std::max<uint64_t>(c.max_heap_bytes, mem.memoryHeaps[i].size);
    }

  uint32_t nq = 0;
  fn.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  fn.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, qf.data());
  for (const auto& q : qf)
    if (q.queueFlags & VK_QUEUE_COMPUTE_BIT) {
      c.timestamp_bits = q.timestampValidBits;
      break;
    }
  c.timestamps = c.timestamp_bits > 0 && c.timestamp_period_ns > 0;
  return c;
}

std::vector<std::pair<std::string, std::string>> DeviceCaps::describe() const {
  auto yes = [](bool b) { return std::string(b ? "yes" : "no"); };
  std::string cm;
  for (const auto& e : coopmat) cm += (cm.empty() ? "" : ", ") + e;
  auto list = [](const std::vector<CoopShape>& v) {
    std::string s;
    for (const auto& q : v)
      s += (s.empty() ? "" : ", ") + std::to_string(q.m) + "x" + std::to_string(q.n) + "x" + std::to_string(q.k);
    return s.empty() ? std::string("none") : s;
  };
  auto flex = [&](const std::vector<FlexShape>& v) {
    std::string s;
    for (const auto& q : v)
      s += (s.empty() ? "" : ", ") + std::to_string(q.mg) + "x" + std::to_string(q.ng) + "x" + std::to_string(q.kg) +
           " (" + std::to_string(q.wg) + " invocations)";
    return s.empty() ? std::string("none") : s;
  };
  std::string shapes = list(coop_f16);
  return {
      {"api", version_str(api_version)},
      {"driver", driver},
      {"subgroup size", std::to_string(subgroup_size)},
      {"subgroup arithmetic", yes(subgroup_arithmetic)},
      {"max work group invocations", std::to_string(max_wg_invocations)},
      {"max shared memory", std::to_string(max_shared_bytes) + " bytes"},
      {"max storage buffer range", std::to_string(max_storage_range) + " bytes" +
                                       (binding_lowered ? " (bindings limited to " + std::to_string(max_binding_bytes) +
                                                              " by RLX_VK_MAX_BINDING_BYTES)"
                                                        : "")},
      {"max allocation", std::to_string(max_allocation) + " bytes"},
      {"max push constants", std::to_string(max_push_bytes) + " bytes"},
      {"fp16 arithmetic", yes(fp16)},
      {"16-bit storage", yes(storage16)},
      {"cooperative matrix", cm.empty() ? "no" : cm},
      {"f16 tensor-core shapes (NV)", shapes},
      {"f16 tensor cores (KHR)", coop_khr ? list(khr_f16) : "none"},
      {"bf16 tensor cores (KHR)", coop_khr ? list(khr_bf16) : "none"},
      {"bf16 shader type", bf16_coop ? "yes, in cooperative matrices" : yes(bf16_type)},
      {"f16 tensor cores (NV2)", cm2 ? flex(cm2_f16) : "none"},
      {"bf16 tensor cores (NV2)", cm2 ? flex(cm2_bf16) : "none"},
      {"timestamps", yes(timestamps)},
  };
}

// ---------------------------------------------------------------- Device

Device::Device(int index) {
  inst = std::make_unique<Instance>(validation_requested());
  const VkFns& f = inst->fn;
  auto pds = inst->physical_devices();
  if (pds.empty())
    throw RuntimeError("no Vulkan device: the loader found no driver; install one, e.g. "
                       "`apt-get install mesa-vulkan-drivers` (CPU) or the GPU vendor's driver");
  if (index < 0 || index >= (int)pds.size()) {
    std::string list;
    for (size_t i = 0; i < pds.size(); ++i) list += "\n  " + std::to_string(i) + ": " + inst->query(pds[i]).name;
    throw RuntimeError("Vulkan device " + std::to_string(index) + " does not exist; there are " +
                       std::to_string(pds.size()) + ":" + list);
  }
  phys = pds[index];
  caps = inst->query(phys);
  // Forces the shared-memory reduction variants (tests, driver bug workarounds).
  if (const char* v = std::getenv("RLX_VK_NO_SUBGROUP_OPS"); v && *v && std::strcmp(v, "0") != 0)
    caps.subgroup_arithmetic = false;
  // The GPU shader variants on a device that runs shaders on the host (tests them on lavapipe).
  if (const char* v = std::getenv("RLX_VK_GPU_VARIANTS"); v && *v && std::strcmp(v, "0") != 0) caps.cpu = false;
  if (caps.api_version < VK_API_VERSION_1_1)
    throw RuntimeError("Vulkan device '" + caps.name + "' supports only Vulkan " + version_str(caps.api_version) +
                       "; rlx needs 1.1: update the driver");
  f.vkGetPhysicalDeviceMemoryProperties(phys, &mem);

  uint32_t nq = 0;
  f.vkGetPhysicalDeviceQueueFamilyProperties(phys, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  f.vkGetPhysicalDeviceQueueFamilyProperties(phys, &nq, qf.data());
  bool found = false;
  for (uint32_t i = 0; i < nq && !found; ++i)
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) queue_family = i, found = true;
  if (!found) throw RuntimeError("Vulkan device '" + caps.name + "' has no compute queue");

  uint32_t n = 0;
  f.vkEnumerateDeviceExtensionProperties(phys, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  f.vkEnumerateDeviceExtensionProperties(phys, nullptr, &n, exts.data());
  exts.resize(n);
  std::vector<const char*> enable;
  if (has_ext(exts, "VK_KHR_portability_subset")) enable.push_back("VK_KHR_portability_subset");
  // RLX_VK_NO_16BIT=1 keeps f16/bf16 as f32 on the device (phase 1); RLX_VK_NO_COOPMAT=1 keeps
  // f16 matmuls off the tensor cores (the shared-memory kernel). Both for tests and comparisons.
  auto env_on = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v && std::strcmp(v, "0") != 0;
  };
  if (env_on("RLX_VK_NO_16BIT")) caps.storage16 = false;
  // RLX_VK_COOPMAT=nv|khr|cm2: the newest tensor-core route allowed (tests each kernel on a
  // device that has them all; comparisons).
  const char* lv = std::getenv("RLX_VK_COOPMAT");
  std::string level = lv && *lv ? lv : "cm2";
  if (level != "nv" && level != "khr" && level != "cm2")
    throw InputError("RLX_VK_COOPMAT must be nv, khr or cm2 (got '" + level + "')");
  if (env_on("RLX_VK_NO_COOPMAT") || !caps.storage16) caps.coop_nv = false, caps.coop_khr = false;
  if (level == "nv" || !caps.prebuilt_tc_usable()) caps.coop_khr = false;
  if (level != "cm2" || !caps.coop_khr) caps.cm2 = false;
  if (!caps.coop_khr) caps.khr_f16.clear(), caps.khr_bf16.clear(), caps.bf16_coop = false;
  if (!caps.bf16_coop) caps.khr_bf16.clear(), caps.cm2_bf16.clear();
  if (!caps.cm2) caps.cm2_f16.clear(), caps.cm2_bf16.clear();
  bool coop = caps.coop_nv_usable();
  if (!coop) caps.coop_f16.clear(), caps.coop_nv = false;
  CoopmatEnable tc;
  VkPhysicalDevice16BitStorageFeatures s16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
  VkPhysicalDeviceShaderFloat16Int8Features f16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
  VkPhysicalDeviceVulkanMemoryModelFeatures mm{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
  VkPhysicalDeviceCooperativeMatrixFeaturesNV cm{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  void* features = nullptr;
  if (caps.storage16) {
    s16.storageBuffer16BitAccess = VK_TRUE;
    features = &s16;
  }
  if (coop || caps.coop_khr) {  // all 1.2 core features but the extensions' own
    f16.shaderFloat16 = VK_TRUE;
    mm.vulkanMemoryModel = VK_TRUE;
    s16.pNext = &f16;
    f16.pNext = &mm;
    void** tail = &mm.pNext;
    if (coop) {
      cm.cooperativeMatrix = VK_TRUE;
      *tail = &cm, tail = &cm.pNext;
      enable.push_back("VK_NV_cooperative_matrix");
    }
    tc.chain(caps, tail, enable);
  }

  float prio = 1.0f;
  VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qi.queueFamilyIndex = queue_family;
  qi.queueCount = 1;
  qi.pQueuePriorities = &prio;
  VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  di.queueCreateInfoCount = 1;
  di.pQueueCreateInfos = &qi;
  di.enabledExtensionCount = (uint32_t)enable.size();
  di.ppEnabledExtensionNames = enable.data();
  di.pNext = features;
  vk_check(f.vkCreateDevice(phys, &di, nullptr, &dev), "vkCreateDevice");
  inst->fn.load_device(dev);
  f.vkGetDeviceQueue(dev, queue_family, 0, &queue);
  caps.timestamp_bits = qf[queue_family].timestampValidBits;
  caps.timestamps = caps.timestamp_bits > 0 && caps.timestamp_period_ns > 0;

  VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  vk_check(f.vkCreateFence(dev, &fi, nullptr, &fence_), "vkCreateFence");
}

Device::~Device() {
  if (dev) {
    fn().vkDeviceWaitIdle(dev);
    if (fence_) fn().vkDestroyFence(dev, fence_, nullptr);
    fn().vkDestroyDevice(dev, nullptr);
  }
}

std::string Device::description() const {
  return caps.name + " (Vulkan " + version_str(caps.api_version) + ", " + caps.driver + ")";
}

void Device::submit_and_wait(VkCommandBuffer cmd) {
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cmd;
  vk_check(fn().vkQueueSubmit(queue, 1, &si, fence_), "vkQueueSubmit");
  VkResult r = wait_fence(fence_);
  fn().vkResetFences(dev, 1, &fence_);
  vk_check(r, "vkWaitForFences");
}

VkResult Device::wait_fence(VkFence fence) {
  // Polling first cut ViT-S/16 f16's wall time on the H200 by 0.18-0.29 ms a run (the readback's
  // wait 0.08 -> 0.03-0.05 ms; docs/benchmarks.md, session 16). Not on CPU devices (lavapipe's
  // threads would share the cores with the polling one).
  const char* e = std::getenv("RLX_VK_SPIN");
  const bool spin = e && *e ? *e == '1' : !caps.cpu;
  if (spin) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      VkResult r = fn().vkGetFenceStatus(dev, fence);
      if (r != VK_NOT_READY) return r;
      if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(50)) break;
    }
  }
  return fn().vkWaitForFences(dev, 1, &fence, VK_TRUE, UINT64_MAX);
}

void Device::check_validation(const std::string& where) {
  uint64_t n = inst->validation_errors.load();
  if (n == validation_seen_) return;
  uint64_t fresh = n - validation_seen_;
  validation_seen_ = n;
  throw RuntimeError("Vulkan validation layer reported " + std::to_string(fresh) + " error(s) " + where +
                     "; last: " + inst->last_validation_error);
}

}  // namespace rlx::vk
