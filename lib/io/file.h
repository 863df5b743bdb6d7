#pragma once
// File helpers: atomic writes and whole-file reads with clear errors, plus the
// byte-level pieces shared by the tensor file formats (bounds-checked reads,
// element conversion to and from little-endian storage).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace rlx::io {

// Writes `size` bytes to `path` atomically: a temporary file in the same
// directory, fsync, then rename over the target. On any failure the temporary
// is removed and the target is untouched; throws InputError (missing directory,
// read-only location) or RuntimeError (disk full) naming the path. `durable` false skips the
// fsyncs (the file is still replaced atomically, but may be lost, or found short, after a power
// loss): for callers that check what they find (a batch job's resume does, docs/batch.md).
void write_file_atomic(const std::string& path, const void* data, size_t size, bool durable = true);
// Reads a whole file; throws InputError naming the path. Every read of an untrusted file goes
// through read_file or map_file: only regular files (or symlinks to them) are read, and never
// more than their size; a FIFO, a device, a socket or a directory is refused (exit 2) before
// anything could block on it.
std::vector<uint8_t> read_file(const std::string& path);
// The first `n` bytes of a file (fewer when it is shorter), with read_file's checks.
std::vector<uint8_t> read_file_prefix(const std::string& path, size_t n);

// A read-only, private memory mapping of a whole file. `keep` owns the mapping
// (unmapped when the last copy goes); `data` is null for an empty file.
struct MappedFile {
  std::shared_ptr<const void> keep;
  const uint8_t* data = nullptr;
  size_t size = 0;
};
// Maps `path`; throws InputError naming the path (missing, not a regular file, unreadable).
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
// A tensor over `numel` little-endian elements of `dtype` at `src` (file bytes; the host is
// little-endian). With `keep` (what owns the bytes, e.g. a file mapping) and an address
// aligned for the dtype, the tensor borrows the bytes (zero copy); otherwise it copies
// them. bool bytes are always copied, normalised to 0/1.
Tensor tensor_from_bytes(const uint8_t* src, const Shape& shape, DType dtype, std::shared_ptr<const void> keep);

}  // namespace rlx::io
