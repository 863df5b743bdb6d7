#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace rlx {

namespace {
// Large tensors (a model's weights: --random-params, ONNX initializers, converted params) on
// 2 MiB pages where the kernel offers them (transparent huge pages in `madvise` mode, the
// Debian default): the CPU executor reads such params in place (Executor::wrap_host), and a
// matrix-vector product streaming 2-byte weight rows reads them 1.2-1.4x faster than from 4 KiB
// pages, where the hardware prefetchers stop at every page (docs/benchmarks.md, "Half
// precision"). Only whole 2 MiB pages are advised, so the tail past the last one stays on 4 KiB
// pages and the resident size is what the tensor uses (from 2 MiB on: at least one whole page).
constexpr size_t kHugePage = size_t(2) << 20, kHugeFrom = kHugePage;

std::shared_ptr<uint8_t> alloc_huge(size_t bytes) {  // `bytes`: the padded size alloc_bytes uses
#ifdef __linux__
  const size_t n = (bytes + kHugePage - 1) / kHugePage * kHugePage;  // aligned_alloc: a multiple
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(kHugePage, n));
  if (!p) return nullptr;
  madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice only: without THP, 4 KiB pages
  std::memset(p, 0, bytes);
  return std::shared_ptr<uint8_t>(p, [](uint8_t* q) { std::free(q); });
#else
  (void)bytes;
  return nullptr;
#endif
}

std::shared_ptr<uint8_t> alloc_bytes(int64_t numel, DType t) {
  if (numel < 0 || (uint64_t)numel > (uint64_t)INT64_MAX / 8) throw InputError("tensor size overflows");
  const size_t bytes = (size_t)numel * dtype_size(t);
  if (bytes >= kHugeFrom)
    if (auto p = alloc_huge((bytes + 7) / 8 * 8 + 8)) return p;
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
