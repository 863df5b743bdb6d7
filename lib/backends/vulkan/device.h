#pragma once
// The device layer: Vulkan instance (with the validation layer and a debug-utils
// messenger when RLX_VK_VALIDATION=1), physical-device selection by index, the
// logical device with one compute queue, and the capabilities the kernels need.
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/vulkan/vk_api.h"
#include "runtime/executor.h"

namespace rlx::vk {

// What the executor needs to know about a physical device.
struct DeviceCaps {
  std::string name, type, driver;
  bool cpu = false;  // VK_PHYSICAL_DEVICE_TYPE_CPU (lavapipe): shaders are JIT-compiled for the host
  uint32_t api_version = 0;
  uint64_t device_local_bytes = 0;
  uint32_t subgroup_size = 1;
  bool subgroup_arithmetic = false;  // subgroupAdd/Max usable in compute shaders
  uint32_t max_shared_bytes = 16384;
  uint32_t max_push_bytes = 128;
  uint64_t max_storage_range = 1u << 27;  // maxStorageBufferRange, as the driver says
  // The most bytes one storage-buffer binding may cover, as the lowering uses it:
  // maxStorageBufferRange, or less where RLX_VK_MAX_BINDING_BYTES lowers it (tests make tensors
  // "too large" with it). A tensor above it is bound as several views (kernels_split.cpp).
  uint64_t max_binding_bytes = 1u << 27;
  bool binding_lowered = false;  // RLX_VK_MAX_BINDING_BYTES took effect
  uint32_t max_storage_bindings = 4;  // maxPerStageDescriptorStorageBuffers
  uint64_t min_storage_align = 256;
  uint64_t max_allocation = 1ull << 30;  // maxMemoryAllocationSize
  uint64_t max_heap_bytes = 0;           // the largest device-local heap
  uint32_t max_groups[3] = {65535, 65535, 65535};
  uint32_t max_wg_invocations = 128;
  bool timestamps = false;
  double timestamp_period_ns = 1.0;
  uint32_t timestamp_bits = 0;
  bool fp16 = false;
  // storageBuffer16BitAccess: f16/bf16 tensors live in 2 bytes on the device (read and written
  // as uint16_t bit patterns by the ".h16" shader variants); without it, as f32 (phase 1).
  bool storage16 = false;
  bool memory_model = false;         // vulkanMemoryModel (GL_NV_cooperative_matrix needs it)
  std::vector<std::string> coopmat;  // cooperative-matrix extensions present
  // VK_NV_cooperative_matrix shapes (subgroup scope) multiplying f16 x f16 into f32, as the
  // driver lists them; the tensor-core matmul is built only for one of these, and only when
  // the device also has storage16, fp16, memory_model and the feature (coop_nv_usable()).
  struct CoopShape {
    uint32_t m, n, k;
  };
  std::vector<CoopShape> coop_f16;
  bool coop_nv = false;  // VK_NV_cooperative_matrix's cooperativeMatrix feature
  bool rte16 = false;    // shaderRoundingModeRTEFloat16: f32 -> f16 conversions can be made nearest-even
  bool coop_nv_usable() const {
    return coop_nv && storage16 && fp16 && memory_model && rte16 && !coop_f16.empty();
  }
  // The prebuilt kernels (shaders/prebuilt/, SPIR-V 1.6: Vulkan 1.3 and maintenance4),
  // filled by query_coopmat (coopmat_caps.cpp). VK_KHR_cooperative_matrix: subgroup shapes
  // multiplying f16 x f16 and bf16 x bf16 into f32 (matmul_cm1).
  bool spirv16 = false, maintenance4 = false;
  bool coop_khr = false;
  std::vector<CoopShape> khr_f16, khr_bf16;
  bool bf16_type = false, bf16_coop = false;  // VK_KHR_shader_bfloat16: the type, and in cooperative matrices
  // VK_NV_cooperative_matrix2 (matmul_cm2): workgroup-scope matrices of flexible dimensions
  // (multiples of these granularities, for a work group of `wg` invocations), loaded with
  // tensor addressing.
  bool cm2 = false;
  uint32_t cm2_max_wg = 0, cm2_max_dim = 0, cm2_reserved_shared = 0;
  struct FlexShape {
    uint32_t mg, ng, kg, wg;
  };
  std::vector<FlexShape> cm2_f16, cm2_bf16;
  bool prebuilt_tc_usable() const { return coop_khr && storage16 && fp16 && memory_model && rte16; }
  std::vector<std::pair<std::string, std::string>> describe() const;  // for DeviceInfo
};

// A Vulkan instance (the loader is opened on first use).
class Instance {
 public:
  // `validation`: enable VK_LAYER_KHRONOS_validation and a messenger counting errors.
  explicit Instance(bool validation);
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  std::vector<VkPhysicalDevice> physical_devices() const;
  DeviceCaps query(VkPhysicalDevice pd) const;

  VkFns fn;
  VkInstance instance = VK_NULL_HANDLE;
  uint32_t api_version = VK_API_VERSION_1_1;
  bool validation = false;
  // Validation messages of error severity seen so far, and the last one.
  std::atomic<uint64_t> validation_errors{0};
  std::string last_validation_error;

 private:
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
};

// A logical device with one compute queue.
class Device {
 public:
  explicit Device(int index);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const VkFns& fn() const { return inst->fn; }
  std::string description() const;
  // Submits `cmd` and blocks until it has finished.
  void submit_and_wait(VkCommandBuffer cmd);
  // Waits for `fence` (not reset). On GPUs (RLX_VK_SPIN=1: everywhere, =0: never) it first polls
  // the fence for up to 50 ms (a busy core instead of the driver's blocking wait and its wake-up
  // latency), then blocks.
  VkResult wait_fence(VkFence fence);
  // Throws RuntimeError if the validation layer reported errors since the last call.
  void check_validation(const std::string& where);

  std::unique_ptr<Instance> inst;
  VkPhysicalDevice phys = VK_NULL_HANDLE;
  VkDevice dev = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  uint32_t queue_family = 0;
  VkPhysicalDeviceMemoryProperties mem{};
  DeviceCaps caps;

 private:
  VkFence fence_ = VK_NULL_HANDLE;
  uint64_t validation_seen_ = 0;
};

// True when RLX_VK_VALIDATION is set to something other than "" or "0".
bool validation_requested();

}  // namespace rlx::vk
