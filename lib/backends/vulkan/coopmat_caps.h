#pragma once
// Tensor-core capabilities beyond VK_NV_cooperative_matrix (which device.cpp handles):
// VK_KHR_cooperative_matrix (subgroup shapes, for the prebuilt matmul_cm1 kernels),
// VK_NV_cooperative_matrix2 (workgroup-scope matrices with tensor addressing, matmul_cm2) and
// VK_KHR_shader_bfloat16 (bf16 operands). Debian 12's Vulkan headers (1.3.239) predate these
// extensions, so their structures are declared here, as the Vulkan registry defines them.
#include <vector>

#include "backends/vulkan/device.h"

namespace rlx::vk {

struct CoopFeaturesKHR {  // VkPhysicalDeviceCooperativeMatrixFeaturesKHR
  VkStructureType sType;
  void* pNext;
  VkBool32 cooperativeMatrix, cooperativeMatrixRobustBufferAccess;
};
struct CoopFeatures2NV {  // VkPhysicalDeviceCooperativeMatrix2FeaturesNV
  VkStructureType sType;
  void* pNext;
  VkBool32 workgroupScope, flexibleDimensions, reductions, conversions, perElementOperations, tensorAddressing,
      blockLoads;
};
struct Bf16FeaturesKHR {  // VkPhysicalDeviceShaderBfloat16FeaturesKHR
  VkStructureType sType;
  void* pNext;
  VkBool32 type, dotProduct, cooperativeMatrix;
};

// Fills caps' KHR / cm2 / bf16 fields for physical device `pd` (`exts`: its extensions).
void query_coopmat(const Instance& inst, VkPhysicalDevice pd, const std::vector<VkExtensionProperties>& exts,
                   DeviceCaps& caps);

// The feature structures to chain into VkDeviceCreateInfo for what caps says is usable (after
// env overrides), and the extensions to enable. Owns the structures: keep it alive until
// vkCreateDevice returns.
class CoopmatEnable {
 public:
  // `tail`: the pNext slot of the last structure already in the chain; returns the new tail.
  void** chain(const DeviceCaps& caps, void** tail, std::vector<const char*>& extensions);

 private:
  CoopFeaturesKHR khr_{};
  CoopFeatures2NV cm2_{};
  Bf16FeaturesKHR bf16_{};
  VkPhysicalDeviceMaintenance4Features m4_{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_FEATURES};
};

}  // namespace rlx::vk
