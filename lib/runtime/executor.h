#pragma once
// The executor interface: what a backend (CPU, Vulkan) implements. The three
// execution modes (runtime/modes.cpp) are written once above it:
//   eager    : launch(k); flush();   per node
//   lazy     : launch(k) for every kernel of the plan; flush() once
//   compiled : record(kernels) once per compiled plan; replay() each run
// Tensors live in device buffers as contiguous f32 arrays (see core/dtype.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "ir/elementwise.h"
#include "ir/graph.h"

namespace rlx {

class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  size_t floats = 0;  // capacity in f32 elements
};

// A tensor inside a device buffer: `offset` floats from the start, contiguous row-major.
struct TensorRef {
  DeviceBuffer* buf = nullptr;
  size_t offset = 0;
  Shape shape;
  DType dtype = DType::f32;  // logical dtype (values are f32; e.g. a bool mask holds 0/1)
  int64_t numel() const { return shape_numel(shape); }
};

// One kernel launch: either a graph node's op (attrs read from `node`), or a
// fused elementwise program produced by the compiler.
struct Kernel {
  const ir::Node* node = nullptr;       // op + attrs (null for a fused kernel)
  const FusedProgram* fused = nullptr;  // set for fused kernels
  std::vector<TensorRef> inputs;        // node inputs in order (optional inputs omitted)
  TensorRef output;
  std::string label;  // node id, or "fused[a,b,c]" — for errors and profiles
  double flops = 0;   // for profiles
  double bytes = 0;   // bytes read + written, for profiles
};

// A recorded sequence of kernels that can be replayed (compiled mode).
class Recording {
 public:
  virtual ~Recording() = default;
};

struct ProfileEntry {
  std::string label;
  std::string op;
  double seconds = 0;
  double flops = 0, bytes = 0;
};

// Where a backend's time went since the last take_device_stats(): device time of the
// submitted work (timestamp queries; has_device_time false where the backend has none)
// and host <-> device copies.
struct DeviceStats {
  bool has_device_time = false;
  double device_s = 0;
  uint64_t upload_bytes = 0, download_bytes = 0;
  double upload_s = 0, download_s = 0;
};

struct DeviceInfo {
  std::string name, type;
  uint64_t memory_bytes = 0;
  std::vector<std::pair<std::string, std::string>> properties;  // shown by `rlx devices`
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;         // "cpu", "vulkan"
  virtual std::string description() const = 0;  // device name for reports

  // Buffers. Allocation failure throws RuntimeError ("out of device memory ...").
  virtual std::unique_ptr<DeviceBuffer> allocate(size_t floats) = 0;
  virtual void upload(DeviceBuffer& dst, size_t offset, const float* src, size_t n) = 0;
  virtual void download(const DeviceBuffer& src, size_t offset, float* dst, size_t n) = 0;

  // Enqueue a kernel. The CPU runs it at once; Vulkan records it. Kernels
  // launched in order see each other's writes (the executor inserts barriers).
  virtual void launch(const Kernel& k) = 0;
  // Submit everything enqueued and wait. Run-time errors detected on the device
  // (e.g. embedding index out of range) are thrown here as RuntimeError naming the node.
  virtual void flush() = 0;

  // Compiled mode: record once, replay many times; replay() submits and waits. Buffers referenced by the
  // kernels must stay alive while the recording is. The default keeps the list
  // and relaunches it.
  virtual std::unique_ptr<Recording> record(const std::vector<Kernel>& kernels);
  virtual void replay(Recording& rec);

  // Zero-copy readback where device memory is host memory (the CPU): memory that holds
  // `buf`'s values and stays valid while held, or null where the backend cannot share.
  // Before a buffer whose memory is shared is written again, renew_if_shared() gives it
  // fresh memory, so holders keep the values they were handed.
  virtual std::shared_ptr<const float> share_memory(DeviceBuffer& buf) { return nullptr; }
  virtual void renew_if_shared(DeviceBuffer& buf) {}

  // Profiling: when enabled, flush() collects one entry per launched kernel.
  virtual void set_profiling(bool on) { profiling_ = on; }
  virtual std::vector<ProfileEntry> take_profile() { return std::move(profile_); }
  // Device time and transfers since the last call (for `rlx bench`).
  virtual DeviceStats take_device_stats() { return {}; }

 protected:
  bool profiling_ = false;
  std::vector<ProfileEntry> profile_;
};

// Backend factory. `name` is "cpu" or "vulkan"; `device` selects a device index.
// Throws RuntimeError (exit 3) when the backend is unavailable, saying why.
std::unique_ptr<Executor> make_executor(const std::string& name, int device = 0);
std::vector<std::string> backend_names();
// Devices of a backend, for `rlx devices`; throws RuntimeError if unavailable.
std::vector<DeviceInfo> list_devices(const std::string& backend);

}  // namespace rlx
