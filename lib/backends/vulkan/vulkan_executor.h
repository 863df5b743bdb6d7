#pragma once
// The Vulkan executor (see docs/backends.md). libvulkan is loaded at run time:
// without a loader or a device, make_vulkan_executor() and vulkan_devices()
// throw RuntimeError saying what is missing and how to install it.
//
// RLX_VK_VALIDATION=1 enables VK_LAYER_KHRONOS_validation (with synchronization
// validation) and a debug-utils messenger: every validation error is printed
// and counted, and flush()/replay() throw RuntimeError when any was reported.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/executor.h"

namespace rlx {

std::unique_ptr<Executor> make_vulkan_executor(int device);
std::vector<DeviceInfo> vulkan_devices();

// Validation-layer errors seen by a Vulkan executor since it was created
// (0 when validation is off, or for another executor kind).
uint64_t vulkan_validation_error_count(const Executor& e);
// Test hook: sends a message of error severity through the executor's
// debug-utils messenger (no-op without validation), to check the error path.
void vulkan_inject_validation_error(Executor& e, const std::string& message);

}  // namespace rlx
