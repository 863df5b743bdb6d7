#pragma once
// A host tensor: shape, logical dtype and f32 values, contiguous row-major.
// Storage is shared and may borrow memory owned elsewhere (a memory-mapped
// parameter file), kept alive by `keepalive`.
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace rlx {

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled tensor that owns its storage.
  Tensor(Shape shape, DType dtype = DType::f32);
  // Tensor that reads `data` (numel floats) kept alive by `keepalive`. Read-only.
  static Tensor borrow(Shape shape, DType dtype, const float* data, std::shared_ptr<const void> keepalive);
  static Tensor from_vector(Shape shape, std::vector<float> values, DType dtype = DType::f32);

  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return numel_; }
  int rank() const { return (int)shape_.size(); }
  bool defined() const { return data_ != nullptr || numel_ == 0; }
  const float* data() const { return data_; }
  // Writable pointer; copies first if the storage is borrowed (copy on write).
  float* mutable_data();
  std::vector<float> to_vector() const { return std::vector<float>(data_, data_ + numel_); }
  // Same storage, new shape (numel must match) or new dtype label.
  Tensor reshaped(Shape s) const;
  Tensor with_dtype(DType t) const;

 private:
  Shape shape_;
  DType dtype_ = DType::f32;
  int64_t numel_ = 0;
  std::shared_ptr<const void> keep_;
  float* data_ = nullptr;
  bool owned_ = false;
};

}  // namespace rlx
