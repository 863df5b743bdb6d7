#include "core/tensor.h"

#include <cstring>
#include <new>

#include "core/error.h"

namespace rlx {

namespace {
std::shared_ptr<uint8_t> alloc_bytes(int64_t numel, DType t) {
  if (numel < 0 || (uint64_t)numel > (uint64_t)INT64_MAX / 8) throw InputError("tensor size overflows");
  const size_t bytes = (size_t)numel * dtype_size(t);
  // Rounded up to 8 bytes and 64-byte aligned, so every dtype's elements are aligned.
  uint8_t* p = new (std::align_val_t(64), std::nothrow) uint8_t[(bytes + 7) / 8 * 8 + 8]();
  if (!p) throw RuntimeError("out of host memory allocating " + std::to_string(bytes) + " bytes");
  return std::shared_ptr<uint8_t>(p, [](uint8_t* q) { operator delete[](q, std::align_val_t(64)); });
}
}  // namespace

Tensor::Tensor(Shape shape, DType dtype) : shape_(std::move(shape)), dtype_(dtype) {
  numel_ = shape_numel(shape_);
  if (numel_ < 0) throw InputError("tensor shape " + shape_str(shape_) + " has an invalid element count");
  auto p = alloc_bytes(numel_, dtype_);
  data_ = p.get();
  keep_ = std::move(p);
  owned_ = true;
}

Tensor Tensor::borrow(Shape shape, DType dtype, const void* data, std::shared_ptr<const void> keepalive) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.numel_ = shape_numel(t.shape_);
  t.data_ = static_cast<uint8_t*>(const_cast<void*>(data));
  t.keep_ = std::move(keepalive);
  t.owned_ = false;
  return t;
}

Tensor Tensor::from_vector(Shape shape, const std::vector<float>& values, DType dtype) {
  Tensor t(std::move(shape), dtype);
  if ((int64_t)values.size() != t.numel_) throw InputError("value count does not match shape");
  convert_elements(values.data(), DType::f32, t.data_, dtype, t.numel_);
  return t;
}

Tensor Tensor::from_ints(Shape shape, const std::vector<int64_t>& values, DType dtype) {
  Tensor t(std::move(shape), dtype);
  if ((int64_t)values.size() != t.numel_) throw InputError("value count does not match shape");
  if (dtype != DType::i64 && dtype != DType::boolean)  // never wrapped silently
    for (int64_t v : values)
      if (!fits_dtype(v, dtype))
        throw InputError("integer value " + std::to_string(v) + " does not fit " + dtype_name(dtype) + " [" +
                         std::to_string(dtype_traits(dtype).min) + ", " + std::to_string(dtype_traits(dtype).max) + "]");
  convert_elements(values.data(), DType::i64, t.data_, dtype, t.numel_);
  return t;
}

void Tensor::check_access(bool ok, const char* fn) const {
  if (!ok)
    throw RuntimeError(std::string("internal: Tensor::") + fn + "<T>() on a " + dtype_name(dtype_) + " tensor " +
                       shape_str(shape_) + " with a C++ type that is not its storage type; convert with astype()");
}

void* Tensor::mutable_raw() {
  if (!owned_) {
    auto p = alloc_bytes(numel_, dtype_);
    if (numel_) std::memcpy(p.get(), data_, nbytes());
    data_ = p.get();
    keep_ = std::move(p);
    owned_ = true;
  }
  return data_;
}

Tensor Tensor::astype(DType t) const {
  if (t == dtype_) return *this;
  Tensor r(shape_, t);
  convert_elements(data_, dtype_, r.data_, t, numel_);
  return r;
}

std::vector<float> Tensor::to_vector() const {
  std::vector<float> v((size_t)numel_);
  convert_elements(data_, dtype_, v.data(), DType::f32, numel_);
  return v;
}

double Tensor::at(int64_t i) const { return element_as_double(data_, dtype_, i); }
int64_t Tensor::int_at(int64_t i) const { return element_as_i64(data_, dtype_, i); }

Tensor Tensor::reshaped(Shape s) const {
  if (shape_numel(s) != numel_) throw InputError("reshape " + shape_str(shape_) + " -> " + shape_str(s));
  Tensor t = *this;
  t.shape_ = std::move(s);
  return t;
}

}  // namespace rlx
