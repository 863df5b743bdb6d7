#pragma once
// The executor interface: what a backend (CPU, Vulkan) implements. The three
// execution modes (runtime/modes.cpp) are written once above it:
//   eager    : launch(k); flush();   per node
//   lazy     : launch(k) for every kernel of the plan; flush() once
//   compiled : record(kernels) once per compiled plan; replay() each run
// Tensors live in device buffers as contiguous row-major arrays of the backend's
// storage dtype for their logical dtype (storage_dtype(): the CPU keeps every dtype
// as itself; Vulkan phase 1 keeps f32 on the device). Sizes and offsets are BYTES.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "ir/elementwise.h"
#include "ir/graph.h"

namespace rlx {

class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  size_t capacity = 0;  // bytes
};

// A tensor inside a device buffer: `offset` bytes from the start, contiguous row-major,
// elements of the executor's storage_dtype(dtype).
struct TensorRef {
  DeviceBuffer* buf = nullptr;
  size_t offset = 0;  // bytes
  Shape shape;
  DType dtype = DType::f32;  // logical dtype (the graph's)
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
  // Set by the session for backends that optimise a recording (the CPU's compiled plans
  // prepack constant weights and fold a product's consumer into its epilogue):
  uint32_t const_inputs = 0;  // bit i: input i is a param or constant (the same bytes every run)
  bool graph_output = false;  // the output is a graph output (read after the run)
  // Bit i: input i's values already are where the output holds them (an in-place append,
  // Session::set_append_storage; only where appends_in_place()): a concat does not copy it.
  uint32_t inputs_in_output = 0;
  const ir::Graph* graph = nullptr;  // the graph `node` is in, where known (names inputs in messages)
};

// A recorded sequence of kernels that can be replayed (compiled mode).
class Recording {
 public:
  virtual ~Recording() = default;
  // What the backend did with the kernels when recording (packed weights and their bytes,
  // fused epilogues), appended to --dump-plan; empty when nothing.
  virtual std::string describe() const { return {}; }
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

  // Compiled mode's optimiser for this backend (passes::OptOptions::transposed_linear): whether
  // matmul(x, B) + b with a constant B [K, N] becomes linear(x, B^T, b) with B^T copied once.
  virtual bool transposed_linear_weights() const { return true; }
  // Whether the backend runs matmul_integer_scaled (passes::OptOptions::integer_gemm).
  virtual bool integer_gemm() const { return false; }
  // Whether compiled mode should fuse attention in graphs of 16-bit dtype t (f16 or bf16;
  // passes::OptOptions::half_attention_f16/_bf16): the backend's attention reads 2-byte q/k/v
  // natively and beats its unfused 16-bit products.
  virtual bool half_attention(DType t) const {
    (void)t;
    return false;
  }
  // Whether compiled mode's attention_views pass runs (passes::OptOptions::attention_views_f16
  // / _all: attention reading q, k, v at strides in place of the transposes that feed it);
  // returns the alignment in elements its offsets and strides need; `linear`: the linear
  // products beside the attention are reordered too. Off by default (the CPU).
  virtual int64_t attention_views(bool* f16, bool* all, bool* linear) const {
    *f16 = *all = *linear = false;
    return 1;
  }

  // Refuses a node this backend has no kernel for in these dtypes (e.g. f64 on Vulkan), by
  // throwing the backend's error naming `where` (the node); called for every node that becomes a
  // kernel, and for inputs, params and constants, when a plan or an eager run is built, before
  // anything runs.
  virtual void check_dtypes(const std::string& where, const ir::Node& n, const std::vector<DType>& inputs,
                            DType output) const {}

  // The dtype this backend keeps in memory for a tensor of logical dtype `logical`.
  virtual DType storage_dtype(DType logical) const { return logical; }
  // Bytes a tensor of `numel` elements of logical dtype `logical` occupies on the device.
  // Shapes are checked to fit int64 bytes in their logical dtype at load; a wider storage
  // dtype can still overflow: that is a tensor this device cannot hold (RuntimeError, exit 3).
  size_t storage_bytes(int64_t numel, DType logical) const {
    const int64_t b = checked_nbytes(std::max<int64_t>(numel, 0), dtype_size(storage_dtype(logical)));
    if (b < 0)
      throw RuntimeError("out of device memory: " + std::to_string(numel) + " elements of " +
                         dtype_name(storage_dtype(logical)) + " are more bytes than fit int64");
    return (size_t)b;
  }

  // Buffers. Allocation failure throws RuntimeError ("out of device memory ...").
  virtual std::unique_ptr<DeviceBuffer> allocate(size_t bytes) = 0;
  // Host <-> device copies of whole elements. `src`/`dst` hold `bytes` bytes of host elements
  // of logical dtype `dtype`; the device side starts `offset` bytes into the buffer and holds
  // storage_dtype(dtype) elements (the backend converts where the two differ, and throws
  // RuntimeError for a value the storage dtype cannot hold exactly).
  virtual void upload(DeviceBuffer& dst, size_t offset, const void* src, size_t bytes, DType dtype) = 0;
  virtual void download(const DeviceBuffer& src, size_t offset, void* dst, size_t bytes, DType dtype) = 0;
  // A read-only buffer over host memory used in place (zero copy): `bytes` bytes of `dtype`
  // elements at `data`, kept alive by `keep` while the buffer lives. Null where the backend
  // cannot use host memory directly (then upload a copy) or storage_dtype(dtype) != dtype.
  // Kernels never write a buffer made this way (the session uses it for params and constants),
  // except a concat's output over a caller's KV cache on the host (Session::set_append_storage).
  virtual std::unique_ptr<DeviceBuffer> wrap_host(const void* data, size_t bytes, DType dtype,
                                                  std::shared_ptr<const void> keep) {
    return nullptr;
  }

  // Sets `bytes` bytes of `dst` from byte `offset` to zero bits (0 in every storage dtype) on the
  // device, without a host copy of that size where the backend can (a persistent buffer's unused
  // part: a KV cache's empty slots). The default uploads zeros (as u8: for a backend storing u8 as itself).
  virtual void zero(DeviceBuffer& dst, size_t offset, size_t bytes) {
    const std::vector<uint8_t> z(std::min<size_t>(bytes, 1 << 20), 0);
    for (size_t at = 0; at < bytes; at += z.size()) upload(dst, offset + at, z.data(), std::min(z.size(), bytes - at), DType::u8);
  }
  // Copies `bytes` bytes from `src` at each pair's first offset to `dst` at its second (byte
  // offsets; `src` and `dst` may be one buffer, no two ranges overlapping), after every kernel
  // launched so far, before any launched later: a KV cache's rows moved between slots or into a
  // grown buffer. Vulkan: one transfer submission (a memcpy where the memory is mapped), not a
  // dispatch per range.
  virtual void copy_ranges(const DeviceBuffer& src, DeviceBuffer& dst, const std::vector<std::pair<size_t, size_t>>& at,
                           size_t bytes) = 0;
  // Whether concat kernels honour Kernel::inputs_in_output (write only the other inputs): then a
  // concat's output may be a caller's buffer whose leading part already holds its first input,
  // the KV cache's in-place append (Session::set_append_storage), on the host or on the device.
  virtual bool appends_in_place() const { return false; }

  // Enqueue a kernel. The CPU runs it at once; Vulkan records it. Kernels
  // launched in order see each other's writes (the executor inserts barriers).
  virtual void launch(const Kernel& k) = 0;
  // Submit everything enqueued and wait. Run-time errors detected on the device
  // (e.g. embedding index out of range) are thrown here as RuntimeError naming the node.
  virtual void flush() = 0;

  // Compiled mode: record once, replay many times; replay() submits and waits. Buffers referenced by the
  // kernels must stay alive while the recording is. The default keeps the list
  // and relaunches it.
  // (Defined inline below: the CPU backend's library needs them without the runtime's.)
  virtual std::unique_ptr<Recording> record(const std::vector<Kernel>& kernels);
  virtual void replay(Recording& rec);

  // Zero-copy readback where device memory is host memory (the CPU): memory that holds
  // `buf`'s values and stays valid while held, or null where the backend cannot share.
  // Before a buffer whose memory is shared is written again, renew_if_shared() gives it
  // fresh memory, so holders keep the values they were handed.
  // (Only where storage_dtype is the logical dtype for every dtype, so the bytes are host tensors.)
  virtual std::shared_ptr<const void> share_memory(DeviceBuffer& buf) { return nullptr; }
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

namespace detail {
struct KernelList : Recording {
  std::vector<Kernel> kernels;
};
}  // namespace detail

inline std::unique_ptr<Recording> Executor::record(const std::vector<Kernel>& kernels) {
  auto r = std::make_unique<detail::KernelList>();
  r->kernels = kernels;
  return r;
}

inline void Executor::replay(Recording& rec) {
  for (const auto& k : static_cast<detail::KernelList&>(rec).kernels) launch(k);
  flush();
}

// A kernel copying `src` into `dst` (as many elements, one dtype; contiguous ranges of any
// buffers, the same one included where they do not overlap): a feed between steps. Every backend
// runs it (a reshape between two buffers).
inline Kernel copy_kernel(const TensorRef& src, const TensorRef& dst, std::string label) {
  static const ir::Node node = [] {
    ir::Node c;
    c.id = "copy";
    c.op = ir::Op::Reshape;
    return c;
  }();
  Kernel k;
  k.node = &node;
  k.inputs = {src};
  k.output = dst;
  k.label = std::move(label);
  return k;
}

// Backend factory. `name` is "cpu" or "vulkan"; `device` selects a device index.
// Throws RuntimeError (exit 3) when the backend is unavailable, saying why.
std::unique_ptr<Executor> make_executor(const std::string& name, int device = 0);
std::vector<std::string> backend_names();
// Devices of a backend, for `rlx devices`; throws RuntimeError if unavailable.
std::vector<DeviceInfo> list_devices(const std::string& backend);

}  // namespace rlx
