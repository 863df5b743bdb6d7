#pragma once
// Dynamically loaded Vulkan entry points. libvulkan is opened with dlopen at run
// time, so an rlx binary without a Vulkan loader still runs (and reports a clear
// error when the Vulkan backend is asked for). Every Vulkan call in the backend
// goes through a VkFns table filled from vkGetInstanceProcAddr/vkGetDeviceProcAddr.
#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <vulkan/vulkan.h>

#include <string>

namespace rlx::vk {

// Loader-level entry points (no instance needed).
#define RLX_VK_GLOBAL_FNS(X)                 \
  X(vkCreateInstance)                        \
  X(vkEnumerateInstanceExtensionProperties) \
  X(vkEnumerateInstanceLayerProperties)

// Instance-level entry points.
#define RLX_VK_INSTANCE_FNS(X)                  \
  X(vkDestroyInstance)                          \
  X(vkEnumeratePhysicalDevices)                 \
  X(vkGetPhysicalDeviceProperties)              \
  X(vkGetPhysicalDeviceProperties2)             \
  X(vkGetPhysicalDeviceFeatures)                \
  X(vkGetPhysicalDeviceFeatures2)               \
  X(vkGetPhysicalDeviceMemoryProperties)        \
  X(vkGetPhysicalDeviceQueueFamilyProperties)   \
  X(vkEnumerateDeviceExtensionProperties)       \
  X(vkCreateDevice)                             \
  X(vkGetDeviceProcAddr)

// Optional instance-level entry points (VK_EXT_debug_utils).
#define RLX_VK_DEBUG_FNS(X)            \
  X(vkCreateDebugUtilsMessengerEXT)    \
  X(vkDestroyDebugUtilsMessengerEXT)   \
  X(vkSubmitDebugUtilsMessageEXT)

// Device-level entry points.
#define RLX_VK_DEVICE_FNS(X)            \
  X(vkDestroyDevice)                    \
  X(vkGetDeviceQueue)                   \
  X(vkDeviceWaitIdle)                   \
  X(vkQueueSubmit)                      \
  X(vkQueueWaitIdle)                    \
  X(vkAllocateMemory)                   \
  X(vkFreeMemory)                       \
  X(vkMapMemory)                        \
  X(vkUnmapMemory)                      \
  X(vkFlushMappedMemoryRanges)          \
  X(vkInvalidateMappedMemoryRanges)     \
  X(vkCreateBuffer)                     \
  X(vkDestroyBuffer)                    \
  X(vkGetBufferMemoryRequirements)      \
  X(vkBindBufferMemory)                 \
  X(vkCreateShaderModule)               \
  X(vkDestroyShaderModule)              \
  X(vkCreatePipelineCache)              \
  X(vkDestroyPipelineCache)             \
  X(vkGetPipelineCacheData)             \
  X(vkMergePipelineCaches)              \
  X(vkCreateComputePipelines)           \
  X(vkDestroyPipeline)                  \
  X(vkCreatePipelineLayout)             \
  X(vkDestroyPipelineLayout)            \
  X(vkCreateDescriptorSetLayout)        \
  X(vkDestroyDescriptorSetLayout)       \
  X(vkCreateDescriptorPool)             \
  X(vkDestroyDescriptorPool)            \
  X(vkResetDescriptorPool)              \
  X(vkAllocateDescriptorSets)           \
  X(vkUpdateDescriptorSets)             \
  X(vkCreateCommandPool)                \
  X(vkDestroyCommandPool)               \
  X(vkAllocateCommandBuffers)           \
  X(vkFreeCommandBuffers)               \
  X(vkBeginCommandBuffer)               \
  X(vkEndCommandBuffer)                 \
  X(vkResetCommandBuffer)               \
  X(vkCreateFence)                      \
  X(vkDestroyFence)                     \
  X(vkResetFences)                      \
  X(vkGetFenceStatus)                   \
  X(vkWaitForFences)                    \
  X(vkCreateQueryPool)                  \
  X(vkDestroyQueryPool)                 \
  X(vkGetQueryPoolResults)              \
  X(vkCmdResetQueryPool)                \
  X(vkCmdWriteTimestamp)                \
  X(vkCmdBindPipeline)                  \
  X(vkCmdBindDescriptorSets)            \
  X(vkCmdPushConstants)                 \
  X(vkCmdDispatch)                      \
  X(vkCmdPipelineBarrier)               \
  X(vkCmdCopyBuffer)                    \
  X(vkCmdFillBuffer)

struct VkFns {
#define RLX_VK_DECLARE(name) PFN_##name name = nullptr;
  RLX_VK_GLOBAL_FNS(RLX_VK_DECLARE)
  RLX_VK_INSTANCE_FNS(RLX_VK_DECLARE)
  RLX_VK_DEBUG_FNS(RLX_VK_DECLARE)
  RLX_VK_DEVICE_FNS(RLX_VK_DECLARE)
#undef RLX_VK_DECLARE
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  PFN_vkEnumerateInstanceVersion vkEnumerateInstanceVersion = nullptr;  // null on a 1.0 loader

  // Opens libvulkan and loads the global entry points. Throws RuntimeError with
  // an installation hint when no loader is present.
  void load_loader();
  void load_instance(VkInstance instance, bool debug_utils);
  void load_device(VkDevice device);
};

// "VK_ERROR_OUT_OF_DEVICE_MEMORY" etc.
const char* vk_result_name(VkResult r);
// Throws RuntimeError("Vulkan: <what> failed: <result>") unless r == VK_SUCCESS.
void vk_check(VkResult r, const char* what);

}  // namespace rlx::vk
