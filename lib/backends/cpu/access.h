#pragma once
// How CPU kernels reach tensor memory. A CpuBuffer holds bytes; a TensorRef's offset is
// in bytes and its elements are stored in its dtype (the CPU's storage_dtype is the
// logical dtype). Two kinds of kernels:
//  - f32-only kernels (the usual style: `float* ptr(const TensorRef&)`, f32 in, f32 out).
//    The executor's adapter hands them f32 copies of non-f32 inputs and converts their f32
//    result into the output's dtype (compute rules: docs/graph-format.md), so ptr() sees
//    f32 storage only; ptr() on other storage throws (a kernel missing from the adapter).
//  - native kernels (registered in cpu_executor.cpp's is_native()) read any dtype through
//    bytes(), typed<T>(), index_at() and value_at().
#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/tensor.h"
#include "runtime/executor.h"

namespace rlx::cpu {

class CpuBuffer : public DeviceBuffer {
 public:
  explicit CpuBuffer(size_t bytes, bool f32_view = false);
  // Host memory used in place (read-only; see Executor::wrap_host).
  CpuBuffer(const void* data, size_t bytes, std::shared_ptr<const void> keep);
  // Fresh memory (64-byte aligned, recycled when large); the old block lives on
  // while someone shares it (see Executor::share_memory).
  void renew();
  std::shared_ptr<uint8_t> mem;
  uint8_t* data = nullptr;  // mem.get()
  // An f32 copy made by the adapter for an f32-only kernel: elements are f32 whatever
  // the TensorRef's logical dtype says (e.g. a bool mask as 0/1).
  bool f32_view = false;
  // Host memory of someone else's used in place (the wrapping constructor): a model file's
  // mapping or ONNX initializers, alive as long as `mem`'s owner.
  bool external = false;
};

// Address of a tensor's first element.
inline uint8_t* bytes(const TensorRef& t) { return static_cast<CpuBuffer*>(t.buf)->data + t.offset; }

// f32 storage only (see above).
inline float* ptr(const TensorRef& t) {
  if (t.dtype != DType::f32 && !static_cast<const CpuBuffer*>(t.buf)->f32_view)
    throw RuntimeError(std::string("internal: an f32-only CPU kernel was handed a ") + dtype_name(t.dtype) +
                       " tensor " + shape_str(t.shape) + " without the dtype adapter");
  return reinterpret_cast<float*>(bytes(t));
}

// Typed storage; T is the dtype's storage type (float, uint16_t, int32_t, int64_t, uint8_t).
template <class T>
T* typed(const TensorRef& t) {
  if (!storage_type_matches<T>(t.dtype) || static_cast<const CpuBuffer*>(t.buf)->f32_view)
    throw RuntimeError(std::string("internal: typed access with the wrong C++ type to a ") + dtype_name(t.dtype) +
                       " tensor " + shape_str(t.shape));
  return reinterpret_cast<T*>(bytes(t));
}

inline DType stored_dtype(const TensorRef& t) {
  return static_cast<const CpuBuffer*>(t.buf)->f32_view ? DType::f32 : t.dtype;
}

// Element i as an index: exact for i32/i64/bool; floats truncated toward zero (NaN -> 0).
// Works on adapter copies too (f32 storage).
inline int64_t index_at(const TensorRef& t, int64_t i) { return element_as_i64(bytes(t), stored_dtype(t), i); }
// Element i as double (exact for every dtype except i64 beyond 2^53).
inline double value_at(const TensorRef& t, int64_t i) { return element_as_double(bytes(t), stored_dtype(t), i); }

}  // namespace rlx::cpu
