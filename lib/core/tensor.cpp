#include "core/tensor.h"

#include <cstring>
#include <new>

#include "core/error.h"

namespace rlx {

namespace {
std::shared_ptr<float> alloc_floats(int64_t n) {
  if (n < 0) throw InputError("tensor size overflows");
  float* p = new (std::nothrow) float[n > 0 ? n : 1]();
  if (!p) throw RuntimeError("out of host memory allocating " + std::to_string(n * 4) + " bytes");
  return std::shared_ptr<float>(p, std::default_delete<float[]>());
}
}  // namespace

Tensor::Tensor(Shape shape, DType dtype) : shape_(std::move(shape)), dtype_(dtype) {
  numel_ = shape_numel(shape_);
  if (numel_ < 0) throw InputError("tensor shape " + shape_str(shape_) + " has an invalid element count");
  auto p = alloc_floats(numel_);
  data_ = p.get();
  keep_ = std::move(p);
  owned_ = true;
}

Tensor Tensor::borrow(Shape shape, DType dtype, const float* data, std::shared_ptr<const void> keepalive) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.numel_ = shape_numel(t.shape_);
  t.data_ = const_cast<float*>(data);
  t.keep_ = std::move(keepalive);
  t.owned_ = false;
  return t;
}

Tensor Tensor::from_vector(Shape shape, std::vector<float> values, DType dtype) {
  Tensor t(std::move(shape), dtype);
  if ((int64_t)values.size() != t.numel_) throw InputError("value count does not match shape");
  if (!values.empty()) std::memcpy(t.data_, values.data(), values.size() * 4);
  return t;
}

float* Tensor::mutable_data() {
  if (!owned_) {
    auto p = alloc_floats(numel_);
    if (numel_) std::memcpy(p.get(), data_, numel_ * 4);
    data_ = p.get();
    keep_ = std::move(p);
    owned_ = true;
  }
  return data_;
}

Tensor Tensor::reshaped(Shape s) const {
  if (shape_numel(s) != numel_) throw InputError("reshape " + shape_str(shape_) + " -> " + shape_str(s));
  Tensor t = *this;
  t.shape_ = std::move(s);
  return t;
}

Tensor Tensor::with_dtype(DType d) const {
  Tensor t = *this;
  t.dtype_ = d;
  return t;
}

}  // namespace rlx
