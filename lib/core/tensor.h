#pragma once
// A host tensor: shape, dtype and its values stored in that dtype (dtype_size(dtype)
// bytes per element, see core/dtype.h), contiguous row-major. Storage is shared and
// may borrow memory owned elsewhere (a memory-mapped parameter file), kept alive by
// `keepalive`; writing through mutable_* copies borrowed storage first.
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace rlx {

// The C++ element type of each dtype's storage (bool is one byte 0/1, f16/bf16 are raw bits).
template <class T>
bool storage_type_matches(DType t) {
  if constexpr (std::is_same_v<T, float>) return t == DType::f32;
  else if constexpr (std::is_same_v<T, double>) return t == DType::f64;
  else if constexpr (std::is_same_v<T, uint16_t>) return t == DType::f16 || t == DType::bf16 || t == DType::u16;
  else if constexpr (std::is_same_v<T, int16_t>) return t == DType::i16;
  else if constexpr (std::is_same_v<T, int32_t>) return t == DType::i32;
  else if constexpr (std::is_same_v<T, uint32_t>) return t == DType::u32;
  else if constexpr (std::is_same_v<T, int64_t>) return t == DType::i64;
  else if constexpr (std::is_same_v<T, uint64_t>) return t == DType::u64;
  else if constexpr (std::is_same_v<T, uint8_t>) return t == DType::boolean || t == DType::u8;
  else if constexpr (std::is_same_v<T, int8_t>) return t == DType::i8;
  else return false;
}

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled tensor that owns its storage.
  Tensor(Shape shape, DType dtype = DType::f32);
  // Tensor that reads numel elements of `dtype` at `data`, kept alive by `keepalive` (no copy).
  static Tensor borrow(Shape shape, DType dtype, const void* data, std::shared_ptr<const void> keepalive);
  // f32 values converted to `dtype` (the rules of convert_elements, as `cast`).
  static Tensor from_vector(Shape shape, const std::vector<float>& values, DType dtype = DType::f32);
  // Integer values stored exactly in an integer dtype (or converted to a float/bool one).
  static Tensor from_ints(Shape shape, const std::vector<int64_t>& values, DType dtype = DType::i64);

  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return numel_; }
  int rank() const { return (int)shape_.size(); }
  size_t nbytes() const { return (size_t)numel_ * dtype_size(dtype_); }
  bool defined() const { return data_ != nullptr || numel_ == 0; }

  // Raw storage (nbytes() bytes in the tensor's dtype).
  const void* raw() const { return data_; }
  void* mutable_raw();  // copies borrowed storage first (copy on write)
  // Typed access; T must be the dtype's storage type (float, uint16_t, int32_t, int64_t,
  // uint8_t), else this throws: use to_f32() / astype() to convert.
  template <class T>
  const T* data() const {
    check_access(storage_type_matches<T>(dtype_), "data");
    return static_cast<const T*>(static_cast<const void*>(data_));
  }
  template <class T>
  T* mutable_data() {
    check_access(storage_type_matches<T>(dtype_), "mutable_data");
    return static_cast<T*>(mutable_raw());
  }
  // f32 tensors only (throws for any other dtype, naming it).
  const float* data() const { return data<float>(); }
  float* mutable_data() { return mutable_data<float>(); }

  // Host conversions (convert_elements' rules). Same storage when the dtype already matches.
  Tensor astype(DType t) const;
  Tensor to_f32() const { return astype(DType::f32); }
  // The values converted to f32 (astype(f32)); exact for f16/bf16/bool and |integers| <= 2^24.
  std::vector<float> to_vector() const;
  // One element, as double / as int64 (element_as_double / element_as_i64).
  double at(int64_t i) const;
  int64_t int_at(int64_t i) const;
  // What keeps raw() alive (the owned block or the borrowed memory's owner); shares nothing
  // when the tensor is empty.
  const std::shared_ptr<const void>& keepalive() const { return keep_; }
  // True when this tensor borrows memory it does not own (e.g. a memory-mapped file).
  bool borrowed() const { return !owned_ && numel_ > 0; }

  // Same storage, new shape (numel must match).
  Tensor reshaped(Shape s) const;

 private:
  void check_access(bool ok, const char* fn) const;

  Shape shape_;
  DType dtype_ = DType::f32;
  int64_t numel_ = 0;
  std::shared_ptr<const void> keep_;
  uint8_t* data_ = nullptr;
  bool owned_ = false;
};

}  // namespace rlx
