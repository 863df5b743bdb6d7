// Backend factory: the one place that knows which executors exist.
#include <cstdlib>

#include "backends/cpu/cpu_executor.h"
#include "backends/cpu/thread_pool.h"
#include "core/error.h"
#include "runtime/executor.h"
#ifdef RLX_HAVE_VULKAN
#include "backends/vulkan/vulkan_executor.h"
#endif

namespace rlx {

std::vector<std::string> backend_names() {
#ifdef RLX_HAVE_VULKAN
  return {"cpu", "vulkan"};
#else
  return {"cpu"};
#endif
}

std::unique_ptr<Executor> make_executor(const std::string& name, int device) {
  if (name == "cpu") return make_cpu_executor();
  if (name == "vulkan") {
#ifdef RLX_HAVE_VULKAN
    return make_vulkan_executor(device);
#else
    throw RuntimeError("this rlx was built without the Vulkan executor (install libvulkan-dev and glslang-dev, then rebuild)");
#endif
  }
  throw InputError("unknown backend \"" + name + "\"; valid backends are cpu, vulkan");
}

std::vector<DeviceInfo> list_devices(const std::string& backend) {
  if (backend == "cpu") {
    DeviceInfo d;
    d.name = "CPU";
    d.type = "cpu";
    d.properties.push_back({"threads", std::to_string(cpu::ThreadPool::global().size())});
    d.properties.push_back({"blas", "OpenBLAS"});
    return {d};
  }
#ifdef RLX_HAVE_VULKAN
  if (backend == "vulkan") return vulkan_devices();
#endif
  return {};
}

}  // namespace rlx
