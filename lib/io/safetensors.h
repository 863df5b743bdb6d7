#pragma once
// safetensors files: F32, F16, BF16, I32, I64, BOOL. Files are memory-mapped;
// tensors are returned in their dtype without a copy (borrowing the mapping) where
// the data is aligned for the dtype (bool is copied, normalised to 0/1).
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace rlx::io {

struct TensorInfo {
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets within the data section
};

class SafetensorsFile {
 public:
  // Maps and validates the header. Throws InputError naming the file on a bad
  // or truncated header, offsets out of range or overlapping, unknown dtypes,
  // shapes whose byte size does not match their offsets, header larger than the file.
  static SafetensorsFile open(const std::string& path);
  // Same checks over bytes in memory (for tests and fuzzing).
  static SafetensorsFile from_memory(std::shared_ptr<const std::vector<uint8_t>> bytes, const std::string& what);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  const TensorInfo& info(const std::string& name) const;  // throws InputError if absent
  // The tensor in its file dtype (zero copy where aligned).
  Tensor get(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  // Validates the layout of `size` bytes at `data` (kept alive by `keep`).
  static SafetensorsFile from_bytes(std::shared_ptr<const void> keep, const uint8_t* data, size_t size,
                                    const std::string& what);

  std::string path_;
  std::shared_ptr<const void> keep_;  // mapping or vector
  const uint8_t* data_ = nullptr;     // start of the data section
  size_t data_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (in their dtypes) atomically.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors);
std::vector<uint8_t> encode_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors);

}  // namespace rlx::io
