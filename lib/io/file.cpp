#include "io/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <system_error>

#include "core/error.h"

static_assert(std::endian::native == std::endian::little, "rlx io assumes a little-endian host");

namespace rlx::io {

namespace {

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// Closes a file descriptor on scope exit.
struct FdGuard {
  int fd = -1;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

// ---- writing ----

[[noreturn]] void throw_write_error(const std::string& path, const std::string& dir, int err) {
  const std::string head = "cannot write " + path + ": ";
  switch (err) {
    case ENOENT:
      // /proc and similar pseudo file systems refuse new files with ENOENT although the directory exists.
      if (std::error_code ec; std::filesystem::is_directory(dir, ec))
        throw InputError(head + "directory " + dir + " does not accept new files");
      throw InputError(head + "directory " + dir + " does not exist");
    case ENOTDIR: throw InputError(head + dir + " is not a directory");
    case EACCES: case EPERM: throw InputError(head + "permission denied");
    case EROFS: throw InputError(head + "permission denied (read-only file system)");
    case EISDIR: throw InputError(head + "it is a directory, expected a file name");
    case ENAMETOOLONG: throw InputError(head + "file name too long");
    case ENOSPC: case EDQUOT: throw RuntimeError(head + "no space left on device");
    default: throw RuntimeError(head + errno_text(err));
  }
}

// The process umask, read without changing it (umask(2) would race with other threads).
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Umask:", 0) == 0) return (mode_t)std::strtoul(line.c_str() + 6, nullptr, 8);
  return 022;
}

// Mode for the new file: the existing target's mode, else what open(2) would give.
mode_t target_mode(const std::string& path) {
  struct stat st;
  // lstat: a symlink in the target's place is replaced by the rename, never followed.
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return st.st_mode & 07777;
  return 0666 & ~current_umask();
}

// Returns 0 or the errno of the failed write.
int write_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

// A mkstemp temporary that is unlinked unless committed.
struct TempFile {
  std::string path;
  FdGuard fd;
  bool committed = false;
  ~TempFile() {
    if (!committed && !path.empty()) ::unlink(path.c_str());
  }
};

// ---- reading ----

[[noreturn]] void throw_read_error(const std::string& path, int err) {
  const std::string head = "cannot read " + path + ": ";
  switch (err) {
    case ENOENT: throw InputError(head + "file does not exist");
    case EACCES: case EPERM: throw InputError(head + "permission denied");
    case ENOTDIR: throw InputError(head + "a component of the path is not a directory");
    case ENOMEM: throw RuntimeError(head + "out of memory");
    default: throw InputError(head + errno_text(err));
  }
}

const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void throw_not_regular(const std::string& path, mode_t m) {
  if (S_ISDIR(m)) throw InputError("cannot read " + path + ": it is a directory, expected a file");
  throw InputError("cannot read " + path + ": it is " + std::string(file_kind(m)) +
                   ", expected a regular file (special files are refused: they can block or never end)");
}

// Opens `path` for reading; fills `st`. Only regular files (or symlinks to them) are opened:
// the path is stat'ed first, so a FIFO is never opened (open would block until a writer comes)
// and a device such as /dev/zero never read (it never ends). The open itself is non-blocking
// and the opened file is checked again, in case the path was replaced in between.
int open_for_read(const std::string& path, struct stat* st) {
  if (::stat(path.c_str(), st) != 0) throw_read_error(path, errno);
  if (!S_ISREG(st->st_mode)) throw_not_regular(path, st->st_mode);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw_read_error(path, errno);
  FdGuard guard{fd};
  if (::fstat(fd, st) != 0) throw_read_error(path, errno);
  if (!S_ISREG(st->st_mode)) throw_not_regular(path, st->st_mode);
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) throw_read_error(path, errno);
  guard.fd = -1;
  return fd;
}

// Reads at most `size` bytes (the regular file's size at open): a file that grows while it is
// read is not followed, one that shrinks gives what is there.
std::vector<uint8_t> read_at_most(int fd, const std::string& path, size_t size) {
  std::vector<uint8_t> out(size);
  size_t got = 0;
  while (got < size) {
    ssize_t r = ::read(fd, out.data() + got, size - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_read_error(path, errno);
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  out.resize(got);
  return out;
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

void write_file_atomic(const std::string& path, const void* data, size_t size, bool durable) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string name = target.filename().string();
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  if (name.empty() || name == "." || name == "..")
    throw InputError("cannot write " + path + ": expected a file name, found a directory path");

  TempFile tmp;
  std::string tmpl = dir + "/." + name + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmpl.data());
  if (fd < 0) throw_write_error(path, dir, errno);
  tmp.path = tmpl;
  tmp.fd.fd = fd;

  int err = write_all(fd, static_cast<const uint8_t*>(data), size);
  if (!err && ::fchmod(fd, target_mode(path)) != 0) err = errno;
  if (!err && durable && ::fsync(fd) != 0) err = errno;
  tmp.fd.fd = -1;
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && ::rename(tmp.path.c_str(), path.c_str()) != 0) err = errno;
  if (err) throw_write_error(path, dir, err);
  tmp.committed = true;
  if (!durable) return;

  // Make the rename itself durable (best effort: some file systems refuse fsync on directories).
  FdGuard dfd{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (dfd.fd >= 0) ::fsync(dfd.fd);
}

std::vector<uint8_t> read_file_prefix(const std::string& path, size_t n) {
  struct stat st;
  FdGuard fd{open_for_read(path, &st)};
  return read_at_most(fd.fd, path, std::min(n, (size_t)st.st_size));
}

std::vector<uint8_t> read_file(const std::string& path) {
  struct stat st;
  FdGuard fd{open_for_read(path, &st)};
  return read_at_most(fd.fd, path, (size_t)st.st_size);
}

MappedFile map_file(const std::string& path) {
  struct stat st;
  FdGuard fd{open_for_read(path, &st)};
  MappedFile m;
  m.size = (size_t)st.st_size;
  if (m.size == 0) return m;  // mmap refuses empty mappings
  void* p = ::mmap(nullptr, m.size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (p == MAP_FAILED) throw_read_error(path, errno);
  const size_t len = m.size;
  m.keep = std::shared_ptr<const void>(p, [len](const void* q) { ::munmap(const_cast<void*>(q), len); });
  m.data = static_cast<const uint8_t*>(p);
  return m;
}

const uint8_t* ByteReader::take(size_t n, const char* field) {
  if (n > remaining())
    throw InputError(what_ + ": truncated " + field + ": expected " + std::to_string(n) + " bytes at offset " +
                     std::to_string(pos_) + ", found " + std::to_string(remaining()));
  const uint8_t* p = data_ + pos_;
  pos_ += n;
  return p;
}

uint16_t ByteReader::u16le(const char* field) { return load<uint16_t>(take(2, field)); }
uint32_t ByteReader::u32le(const char* field) { return load<uint32_t>(take(4, field)); }
uint64_t ByteReader::u64le(const char* field) { return load<uint64_t>(take(8, field)); }

void append_le(std::vector<uint8_t>& out, uint64_t v, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out.push_back((uint8_t)(v >> (8 * i)));
}

Tensor tensor_from_bytes(const uint8_t* src, const Shape& shape, DType dtype, std::shared_ptr<const void> keep) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "tensor files are little-endian, as the host");
  if (keep && dtype != DType::boolean && reinterpret_cast<uintptr_t>(src) % dtype_size(dtype) == 0)
    return Tensor::borrow(shape, dtype, src, std::move(keep));
  Tensor t(shape, dtype);
  if (dtype == DType::boolean) {
    auto* d = static_cast<uint8_t*>(t.mutable_raw());
    for (int64_t i = 0; i < t.numel(); ++i) d[i] = src[i] != 0;
  } else if (t.nbytes()) {
    std::memcpy(t.mutable_raw(), src, t.nbytes());
  }
  return t;
}

}  // namespace rlx::io
