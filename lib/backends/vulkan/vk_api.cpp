#include "backends/vulkan/vk_api.h"

#include <dlfcn.h>

#include <mutex>

#include "core/error.h"

namespace rlx::vk {

namespace {

// The loader stays open for the life of the process (a Vulkan loader does not
// support being unloaded while instances may exist).
PFN_vkGetInstanceProcAddr open_loader() {
  static PFN_vkGetInstanceProcAddr gipa = nullptr;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* names[] = {"libvulkan.so.1", "libvulkan.so"};
    void* lib = nullptr;
    std::string why;
    for (const char* n : names) {
      lib = dlopen(n, RTLD_NOW | RTLD_LOCAL);
      if (lib) break;
      const char* e = dlerror();
      if (why.empty() && e) why = e;
    }
    if (!lib) {
      error = "no Vulkan loader (libvulkan.so.1): install libvulkan1 and a driver, e.g. "
              "`apt-get install libvulkan1 mesa-vulkan-drivers` (" + why + ")";
      return;
    }
    gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
    if (!gipa) error = "the Vulkan loader has no vkGetInstanceProcAddr: reinstall libvulkan1";
  });
  if (!gipa) throw RuntimeError(error);
  return gipa;
}

}  // namespace

void VkFns::load_loader() {
  vkGetInstanceProcAddr = open_loader();
#define RLX_VK_LOAD(name) name = (PFN_##name)vkGetInstanceProcAddr(nullptr, #name);
  RLX_VK_GLOBAL_FNS(RLX_VK_LOAD)
#undef RLX_VK_LOAD
  vkEnumerateInstanceVersion =
      (PFN_vkEnumerateInstanceVersion)vkGetInstanceProcAddr(nullptr, "vkEnumerateInstanceVersion");
  if (!vkCreateInstance || !vkEnumerateInstanceExtensionProperties)
    throw RuntimeError("the Vulkan loader is missing core entry points: reinstall libvulkan1");
}

void VkFns::load_instance(VkInstance instance, bool debug_utils) {
#define RLX_VK_LOAD(name)                                                        \
  name = (PFN_##name)vkGetInstanceProcAddr(instance, #name);                      \
  if (!name) throw RuntimeError("Vulkan: the loader has no " #name " (Vulkan 1.1 is required)");
  RLX_VK_INSTANCE_FNS(RLX_VK_LOAD)
#undef RLX_VK_LOAD
  if (debug_utils) {
#define RLX_VK_LOAD(name) name = (PFN_##name)vkGetInstanceProcAddr(instance, #name);
    RLX_VK_DEBUG_FNS(RLX_VK_LOAD)
#undef RLX_VK_LOAD
  }
}

void VkFns::load_device(VkDevice device) {
#define RLX_VK_LOAD(name)                                      \
  name = (PFN_##name)vkGetDeviceProcAddr(device, #name);        \
  if (!name) throw RuntimeError("Vulkan: the driver has no " #name);
  RLX_VK_DEVICE_FNS(RLX_VK_LOAD)
#undef RLX_VK_LOAD
}

const char* vk_result_name(VkResult r) {
  switch (r) {
#define C(x) case x: return #x;
    C(VK_SUCCESS) C(VK_NOT_READY) C(VK_TIMEOUT) C(VK_INCOMPLETE)
    C(VK_ERROR_OUT_OF_HOST_MEMORY) C(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    C(VK_ERROR_INITIALIZATION_FAILED) C(VK_ERROR_DEVICE_LOST) C(VK_ERROR_MEMORY_MAP_FAILED)
    C(VK_ERROR_LAYER_NOT_PRESENT) C(VK_ERROR_EXTENSION_NOT_PRESENT) C(VK_ERROR_FEATURE_NOT_PRESENT)
    C(VK_ERROR_INCOMPATIBLE_DRIVER) C(VK_ERROR_TOO_MANY_OBJECTS) C(VK_ERROR_FORMAT_NOT_SUPPORTED)
    C(VK_ERROR_FRAGMENTED_POOL) C(VK_ERROR_OUT_OF_POOL_MEMORY) C(VK_ERROR_INVALID_SHADER_NV)
    C(VK_ERROR_UNKNOWN)
#undef C
    default: return "VK_ERROR_(unknown)";
  }
}

void vk_check(VkResult r, const char* what) {
  if (r == VK_SUCCESS) return;
  std::string msg = std::string("Vulkan: ") + what + " failed: " + vk_result_name(r);
  if (r == VK_ERROR_DEVICE_LOST) msg += " (the GPU reset or the driver crashed; see dmesg)";
  throw RuntimeError(msg);
}

}  // namespace rlx::vk
