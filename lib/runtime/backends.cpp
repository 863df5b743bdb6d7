// Backend factory: the one place that knows which executors exist.
#include <cstdlib>
#include <fstream>
#include <string>

#include "backends/cpu/cpu_executor.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/qgemm.h"
#include "backends/cpu/thread_pool.h"
#include "core/error.h"
#include "runtime/executor.h"
#ifdef RLX_HAVE_VULKAN
#include "backends/vulkan/vulkan_executor.h"
#endif

namespace rlx {

namespace {

// The CPU's model name (/proc/cpuinfo) and the instruction-set extensions rlx's kernels choose
// between (by cpuid, at start-up).
std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string cpu_features() {
  std::string s;
  auto add = [&](bool has, const char* name) {
    if (has) s += (s.empty() ? "" : " ") + std::string(name);
  };
  __builtin_cpu_init();
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bw"), "avx512bw");
  add(__builtin_cpu_supports("avx512vl"), "avx512vl");
  add(__builtin_cpu_supports("avx512vnni"), "avx512vnni");
  add(__builtin_cpu_supports("avx512bf16"), "avx512bf16");
  add(__builtin_cpu_supports("avxvnni"), "avxvnni");
  add(__builtin_cpu_supports("amx-tile"), "amx-tile");
  add(__builtin_cpu_supports("amx-int8"), "amx-int8");
  add(__builtin_cpu_supports("amx-bf16"), "amx-bf16");
  return s.empty() ? "none of the above (portable kernels)" : s;
}

}  // namespace

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
    d.name = cpu_model();
    d.type = "cpu";
    d.properties.push_back({"threads", std::to_string(cpu::ThreadPool::global().size())});
    d.properties.push_back({"pool polling", std::to_string(cpu::ThreadPool::global().spin_us()) + " us before sleeping (" +
                                                 cpu::ThreadPool::global().spin_why() + ")"});
    d.properties.push_back({"gemm", cpu::gemm_description()});
    d.properties.push_back({"int8 products", cpu::qisa_name(cpu::qgemm_isa())});
    d.properties.push_back({"cpu features", cpu_features()});
    return {d};
  }
#ifdef RLX_HAVE_VULKAN
  if (backend == "vulkan") return vulkan_devices();
#endif
  return {};
}

}  // namespace rlx
