#pragma once
// File helpers: atomic writes and whole-file reads with clear errors, plus the
// byte-level pieces shared by the tensor file formats (bounds-checked reads,
// element conversion to and from little-endian storage).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace rlx::io {

// Writes `size` bytes to `path` atomically: a temporary file in the same
// directory, fsync, then rename over the target. On any failure the temporary
// is removed and the target is untouched; throws InputError (missing directory,
// read-only location) or RuntimeError (disk full) naming the path.
void write_file_atomic(const std::string& path, const void* data, size_t size);
// Reads a whole file; throws InputError naming the path.
std::vector<uint8_t> read_file(const std::string& path);

// A read-only, private memory mapping of a whole file. `keep` owns the mapping
// (unmapped when the last copy goes); `data` is null for an empty file.
struct MappedFile {
  std::shared_ptr<const void> keep;
  const uint8_t* data = nullptr;
  size_t size = 0;
};
// Maps `path`; throws InputError naming the path (missing, a directory, unreadable).
MappedFile map_file(const std::string& path);

// A bounds-checked cursor over bytes in memory. Every read checks the remaining
// size first and throws InputError "WHAT: truncated FIELD: expected N bytes at
// offset P, found R" instead of reading past the end.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size, std::string what)
      : data_(data), size_(size), what_(std::move(what)) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  const std::string& what() const { return what_; }
  // Returns a pointer to the next `n` bytes and advances past them.
  const uint8_t* take(size_t n, const char* field);
  uint8_t u8(const char* field) { return *take(1, field); }
  uint16_t u16le(const char* field);
  uint32_t u32le(const char* field);
  uint64_t u64le(const char* field);

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string what_;
};

// Appends the low `bytes` bytes of `v`, little-endian.
void append_le(std::vector<uint8_t>& out, uint64_t v, size_t bytes);
// Converts `n` little-endian elements of `dtype` at `src` to f32 values.
void decode_elements(const uint8_t* src, DType dtype, int64_t n, float* dst);
// Stores `n` f32 values as little-endian `dtype` elements (integers rounded to
// nearest and saturated, NaN stored as 0; bool is value != 0).
void encode_elements(const float* src, int64_t n, DType dtype, uint8_t* dst);

}  // namespace rlx::io
