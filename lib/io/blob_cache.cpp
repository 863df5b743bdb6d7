#include "io/blob_cache.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "io/file.h"

#ifndef RLX_VERSION
#define RLX_VERSION "dev"
#endif

namespace rlx::io {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'R', 'L', 'X', 'C', 'A', 'C', 'H', 'E'};
// 2: a MAC after the checksum (entries of format 1 were not authenticated and are misses).
constexpr uint32_t kFormat = 2;
const char* const kLayout = "v1";  // DIR/v1/...: a new layout gets a new directory
constexpr size_t kMacBytes = 32;   // keyed BLAKE2b-256 (crypto_generichash)
constexpr size_t kMinSecret = 16;  // RLX_CACHE_SECRET's minimum length in bytes

uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back((char)(v >> (8 * i)));
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | (uint8_t)p[i];
  return v;
}

std::string env_str(const char* n) {
  const char* v = std::getenv(n);
  return v ? v : "";
}

bool sodium_ready() {
  static const bool ok = ::sodium_init() >= 0;  // thread-safe, idempotent
  return ok;
}

std::string octal_mode(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", (unsigned)(m & 07777));
  return b;
}

// Creates `dir` and its missing parents, each new one mode 0700 (whatever the umask).
void mkdir_private(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return;
  if (dir.has_parent_path() && dir.parent_path() != dir) mkdir_private(dir.parent_path());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw InputError("cannot create " + dir.string() + ": " + std::strerror(errno));
}

// The MAC of an entry: keyed BLAKE2b-256 over a label, the entry format, the kind, the full
// key and the payload (each with its length, so no two different triples hash alike).
void entry_mac(const std::string& mac_key, const std::string& kind, const std::string& key, const char* payload,
               size_t n, unsigned char out[kMacBytes]) {
  crypto_generichash_state st;
  crypto_generichash_init(&st, reinterpret_cast<const unsigned char*>(mac_key.data()), mac_key.size(), kMacBytes);
  std::string head("rlx cache entry", 16);  // with its NUL
  head.append(reinterpret_cast<const char*>(&kFormat), 4);
  put_u64(head, kind.size());
  head += kind;
  put_u64(head, key.size());
  auto update = [&](const void* p, size_t len) {
    crypto_generichash_update(&st, static_cast<const unsigned char*>(p), len);
  };
  update(head.data(), head.size());
  update(key.data(), key.size());
  std::string tail;
  put_u64(tail, n);
  update(tail.data(), tail.size());
  update(payload, n);
  crypto_generichash_final(&st, out, kMacBytes);
}

// The key file's 32 bytes, or "" with *why (and *missing when it does not exist).
std::string read_key_file(const std::string& path, bool* missing, std::string* why) {
  *missing = false;
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT) *missing = true;
    *why = e == ELOOP ? "it is a symbolic link" : std::strerror(e);
    return "";
  }
  struct stat st;
  std::string key;
  if (::fstat(fd, &st) != 0) *why = std::strerror(errno);
  else if (!S_ISREG(st.st_mode)) *why = "not a regular file";
  else if (st.st_uid != ::geteuid())
    *why = "owned by uid " + std::to_string(st.st_uid) + ", not by you (uid " + std::to_string(::geteuid()) + ")";
  else if (st.st_mode & 077)
    *why = "mode " + octal_mode(st.st_mode) + ": group or others may read or write it (chmod 600 " + path +
           ", or remove it and a new key is made)";
  else if ((size_t)st.st_size != kCacheKeyBytes)
    *why = std::to_string((long long)st.st_size) + " bytes, expected " + std::to_string(kCacheKeyBytes) +
           " (remove it and a new key is made)";
  else {
    key.resize(kCacheKeyBytes);
    if (::read(fd, key.data(), key.size()) != (ssize_t)key.size()) {
      key.clear();
      *why = "could not read it";
    }
  }
  ::close(fd);
  return key;
}

// Writes the whole key to a file just created (mode 0600 whatever the umask); false on failure.
bool write_key(int fd, const unsigned char* k) {
  bool ok = ::fchmod(fd, 0600) == 0 && ::write(fd, k, kCacheKeyBytes) == (ssize_t)kCacheKeyBytes && ::fsync(fd) == 0;
  int e = errno;
  ::close(fd);
  errno = e;
  return ok;
}

// Makes a new key file: 32 random bytes written to a private temporary, published with
// link(2), which never replaces an existing file, so concurrent first runs keep one key.
void create_key_file(const std::string& path) {
  mkdir_private(fs::path(path).parent_path());
  unsigned char k[kCacheKeyBytes];
  ::randombytes_buf(k, sizeof k);
  struct Wipe {
    unsigned char* k;
    ~Wipe() { ::sodium_memzero(k, kCacheKeyBytes); }
  } wipe{k};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + hex64(::randombytes_random());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw InputError("cannot create " + tmp + ": " + std::strerror(errno));
  if (!write_key(fd, k)) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw InputError("cannot write " + tmp + ": " + std::strerror(e));
  }
  int r = ::link(tmp.c_str(), path.c_str());
  int e = errno;
  ::unlink(tmp.c_str());
  if (r == 0 || e == EEXIST) return;
  // A file system without hard links: create the key in place. O_EXCL still keeps one key;
  // a concurrent first run may read it half-written and then runs once without the cache.
  fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) return;
  if (fd < 0 || !write_key(fd, k)) throw InputError("cannot create " + path + ": " + std::strerror(errno));
}

bool entry_file(const fs::directory_entry& e) {
  std::error_code ec;
  return e.is_regular_file(ec) && e.path().extension() == ".bin" && e.path().filename().string()[0] != '.';
}

}  // namespace

uint64_t hash64(const void* data, size_t n, uint64_t seed) {
  // 4 independent lanes over 8-byte words, then a final mix: fast enough to hash
  // graph constants on every start.
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h[4] = {seed ^ 0x9e3779b97f4a7c15ULL, seed + 0x6a09e667f3bcc909ULL, seed ^ 0xbb67ae8584caa73bULL,
                   seed + 0x3c6ef372fe94f82bULL};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * l, 8);
      h[l] = (h[l] ^ mix(w + l)) * 0x9ddfea08eb382d69ULL;
      h[l] ^= h[l] >> 29;
    }
  uint64_t r = mix(h[0]) ^ mix(h[1] + 1) ^ mix(h[2] + 2) ^ mix(h[3] + 3) ^ n;
  for (; i < n; ++i) r = (r ^ p[i]) * 0x100000001b3ULL;
  return mix(r);
}

std::string hex64(uint64_t v) {
  static const char* d = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = d[v & 15];
  return s;
}

const std::string& build_id() {
  static const std::string id = [] {
    std::string s = std::string("rlx ") + RLX_VERSION;
    char exe[4096];
    ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    struct stat st;
    if (n > 0) {
      exe[n] = 0;
      if (::stat(exe, &st) == 0)
        s += " build " + std::to_string((long long)st.st_size) + "-" + std::to_string((long long)st.st_mtim.tv_sec) + "." +
             std::to_string((long long)st.st_mtim.tv_nsec);
    }
    return s;
  }();
  return id;
}

CacheSettings cache_settings_from_env() {
  CacheSettings s;
  auto env = env_str;
  std::string on = env("RLX_CACHE");
  std::transform(on.begin(), on.end(), on.begin(), [](unsigned char c) { return std::tolower(c); });
  if (on == "0" || on == "off" || on == "false" || on == "no") {
    s.enabled = false;
    s.disabled_why = "RLX_CACHE=" + env("RLX_CACHE");
  }
  if (!env("RLX_CACHE_DIR").empty()) s.dir = env("RLX_CACHE_DIR");
  else if (!env("XDG_CACHE_HOME").empty()) s.dir = env("XDG_CACHE_HOME") + "/rlx";
  else if (!env("HOME").empty()) s.dir = env("HOME") + "/.cache/rlx";
  else if (s.enabled) {
    s.enabled = false;
    s.disabled_why = "no RLX_CACHE_DIR, XDG_CACHE_HOME or HOME to put it in";
  }
  std::string mb = env("RLX_CACHE_MAX_MB");
  if (!mb.empty()) {
    bool digits = mb.size() <= 9 && std::all_of(mb.begin(), mb.end(), [](unsigned char c) { return std::isdigit(c); });
    if (!digits) throw InputError("RLX_CACHE_MAX_MB=" + mb + ": expected a size in MiB (a non-negative integer, e.g. 512)");
    s.max_bytes = std::stoull(mb) << 20;
  }
  s.shared_secret = std::getenv("RLX_CACHE_SECRET") != nullptr;
  if (!s.dir.empty() && !s.shared_secret) s.unsafe_dir_why = unsafe_cache_dir(s.dir);
  return s;
}

std::string unsafe_cache_dir(const std::string& dir) {
  std::error_code ec;
  const fs::path abs = fs::absolute(dir, ec);
  if (ec) return "";
  const fs::path real = fs::weakly_canonical(abs, ec);  // symbolic links resolved: check where it really is
  const fs::path root = ec ? abs : real;
  const uid_t me = ::geteuid();
  // `own`: the cache's own directories (no sticky exception); else a parent.
  auto problem = [&](const fs::path& d, bool own) -> std::string {
    struct stat st;
    if (::stat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "";  // not there (yet): made 0700
    if (st.st_uid != me && st.st_uid != 0)
      return d.string() + " is owned by uid " + std::to_string(st.st_uid) + ", not by you (uid " + std::to_string(me) +
             "); use a directory of your own (RLX_CACHE_DIR)";
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && (own || !(st.st_mode & S_ISVTX)))
      return d.string() + " is writable by group or others (mode " + octal_mode(st.st_mode) + "); fix with 'chmod go-w " +
             d.string() + "'";
    return "";
  };
  auto with_hint = [](std::string why) {
    return why.empty() ? why : why + ", or set RLX_CACHE_SECRET to share a cache (docs/cache.md)";
  };
  // The directory, the layout and kind directories below it that entries are read from...
  std::vector<fs::path> own = {root, root / kLayout};
  for (const auto& k : fs::directory_iterator(root / kLayout, ec))
    if (k.is_directory(ec)) own.push_back(k.path());
  for (const auto& d : own)
    if (std::string why = problem(d, true); !why.empty()) return with_hint(why);
  // ...and every parent up to /.
  for (fs::path d = root; d.has_parent_path() && d.parent_path() != d;) {
    d = d.parent_path();
    if (std::string why = problem(d, false); !why.empty()) return with_hint(why);
  }
  return "";
}

std::string cache_key_path() {
  if (!env_str("XDG_CONFIG_HOME").empty()) return env_str("XDG_CONFIG_HOME") + "/rlx/cache.key";
  if (!env_str("HOME").empty()) return env_str("HOME") + "/.config/rlx/cache.key";
  return "";
}

std::string cache_mac_key(bool create, std::string* source, std::string* why, bool* not_made_yet) {
  if (not_made_yet) *not_made_yet = false;
  if (!sodium_ready()) {
    *why = "libsodium could not be initialised";
    return "";
  }
  if (const char* secret = std::getenv("RLX_CACHE_SECRET")) {
    *source = "RLX_CACHE_SECRET";
    const size_t n = std::strlen(secret);
    if (n < kMinSecret) {
      *why = "RLX_CACHE_SECRET is " + std::to_string(n) + " bytes; it must be at least " + std::to_string(kMinSecret) +
             " (a random string, e.g. from 'head -c 32 /dev/urandom | base64')";
      return "";
    }
    // The key is a hash of the secret, so a secret of any length and alphabet gives 32 bytes.
    std::string key(kCacheKeyBytes, '\0');
    crypto_generichash_state st;
    crypto_generichash_init(&st, nullptr, 0, key.size());
    const char label[] = "rlx compile cache secret v1";  // with its NUL
    crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(label), sizeof label);
    crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(secret), n);
    crypto_generichash_final(&st, reinterpret_cast<unsigned char*>(key.data()), key.size());
    return key;
  }
  const std::string path = cache_key_path();
  *source = path;
  if (path.empty()) {
    *why = "no RLX_CACHE_SECRET, and no XDG_CONFIG_HOME or HOME for the key file";
    return "";
  }
  bool missing = false;
  std::string problem;
  std::string key = read_key_file(path, &missing, &problem);
  if (key.empty() && missing && create) {
    try {
      create_key_file(path);
      key = read_key_file(path, &missing, &problem);  // ours, or the one a concurrent first run made
    } catch (const std::exception& e) {
      *why = std::string("cannot make the key file: ") + e.what();
      return "";
    }
  }
  if (key.empty() && missing && not_made_yet) *not_made_yet = true;
  if (key.empty())
    *why = missing ? "the key file " + path + " does not exist yet (made on the first run that uses the cache)"
                   : "not using the key file " + path + ": " + problem;
  return key;
}

std::unique_ptr<BlobCache> open_cache(const CacheSettings& s, std::string* warning) {
  if (!s.enabled || s.dir.empty()) return nullptr;
  if (!s.unsafe_dir_why.empty()) {
    *warning = "compile cache: not using " + s.dir + ": " + s.unsafe_dir_why + "; running without the cache";
    return nullptr;
  }
  std::string source, why;
  std::string key = cache_mac_key(true, &source, &why);
  if (key.empty()) {
    *warning = "compile cache: " + why + "; running without the cache";
    return nullptr;
  }
  return std::make_unique<BlobCache>(s.dir, s.max_bytes, std::move(key));
}

BlobCache::BlobCache(std::string dir, uint64_t max_bytes, std::string mac_key)
    : dir_(std::move(dir)), max_bytes_(max_bytes), mac_key_(std::move(mac_key)) {
  if (mac_key_.size() != kCacheKeyBytes || !sodium_ready()) mac_key_.clear();
}

std::string BlobCache::entry_path(const std::string& kind, const std::string& key) const {
  return dir_ + "/" + kLayout + "/" + kind + "/" + hex64(hash64(key)) + ".bin";
}

BlobCache::Lookup BlobCache::get(const std::string& kind, const std::string& key) {
  Lookup r;
  if (mac_key_.empty()) return r;  // no key: nothing can be trusted
  const std::string path = entry_path(kind, key);
  std::ifstream f(path, std::ios::binary);
  if (!f) return r;  // no entry: a plain miss
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  auto reject = [&](const std::string& why) {
    r.problem = path + ": " + why;
    std::error_code ec;
    fs::remove(path, ec);  // rewritten by the caller's put
    return r;
  };
  const size_t head = sizeof kMagic + 4 + 8;
  if (bytes.size() < head) return reject("truncated (" + std::to_string(bytes.size()) + " bytes)");
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return reject("not an rlx cache entry (bad magic)");
  uint32_t format = 0;
  std::memcpy(&format, bytes.data() + 8, 4);
  if (format != kFormat) return reject("entry format " + std::to_string(format) + ", expected " + std::to_string(kFormat));
  uint64_t klen = get_u64(bytes.data() + 12);
  if (klen > bytes.size() - head) return reject("truncated key");
  size_t pos = head + klen;
  if (bytes.compare(head, klen, key) != 0) return r;  // another key with the same hash: a miss, kept
  if (bytes.size() - pos < 16 + kMacBytes) return reject("truncated header");
  uint64_t len = get_u64(bytes.data() + pos), sum = get_u64(bytes.data() + pos + 8);
  const char* mac = bytes.data() + pos + 16;
  pos += 16 + kMacBytes;
  if (len != bytes.size() - pos)
    return reject("truncated or padded payload (" + std::to_string(bytes.size() - pos) + " bytes, header says " +
                  std::to_string(len) + ")");
  if (hash64(bytes.data() + pos, len) != sum) return reject("checksum mismatch (corrupt payload)");
  // The checksum catches accidents; only the MAC says the entry was written under this key.
  unsigned char want[kMacBytes];
  entry_mac(mac_key_, kind, key, bytes.data() + pos, len, want);
  if (::crypto_verify_32(want, reinterpret_cast<const unsigned char*>(mac)) != 0)
    return reject("entry not authenticated under this key (written under another RLX_CACHE_SECRET or key file, or edited)");
  r.data = bytes.substr(pos);
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // most recently used now
  return r;
}

bool BlobCache::put(const std::string& kind, const std::string& key, const std::string& data, std::string* error) {
  if (mac_key_.empty()) {
    if (error) *error = "no key to authenticate entries with";
    return false;
  }
  std::string blob(kMagic, sizeof kMagic);
  blob.append(reinterpret_cast<const char*>(&kFormat), 4);
  put_u64(blob, key.size());
  blob += key;
  put_u64(blob, data.size());
  put_u64(blob, hash64(data.data(), data.size()));
  unsigned char mac[kMacBytes];
  entry_mac(mac_key_, kind, key, data.data(), data.size(), mac);
  blob.append(reinterpret_cast<const char*>(mac), kMacBytes);
  blob += data;
  const std::string path = entry_path(kind, key);
  try {
    mkdir_private(fs::path(path).parent_path());
    write_file_atomic(path, blob.data(), blob.size());
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    return false;
  }
  if (max_bytes_ > 0) {
    Info i = info();
    if (i.bytes > max_bytes_) evict(max_bytes_ - max_bytes_ / 10);
  }
  return true;
}

BlobCache::Info BlobCache::info() const {
  Info r;
  std::error_code ec;
  const fs::path root = fs::path(dir_) / kLayout;
  if (!fs::is_directory(root, ec)) return r;
  for (const auto& k : fs::directory_iterator(root, ec)) {
    if (!k.is_directory(ec)) continue;
    for (const auto& e : fs::directory_iterator(k.path(), ec)) {
      if (!entry_file(e)) continue;
      uint64_t sz = e.file_size(ec);
      if (ec) continue;
      auto& [n, b] = r.kinds[k.path().filename().string()];
      n++, b += sz;
      r.entries++, r.bytes += sz;
    }
  }
  return r;
}

BlobCache::Info BlobCache::clear() {
  Info r = info();
  std::error_code ec;
  fs::remove_all(fs::path(dir_) / kLayout, ec);
  return r;
}

void BlobCache::evict(uint64_t target) {
  struct E {
    fs::path p;
    uint64_t size;
    fs::file_time_type t;
  };
  std::vector<E> all;
  uint64_t total = 0;
  std::error_code ec;
  const fs::path root = fs::path(dir_) / kLayout;
  const auto now = fs::file_time_type::clock::now();
  for (const auto& k : fs::directory_iterator(root, ec)) {
    if (!k.is_directory(ec)) continue;
    for (const auto& e : fs::directory_iterator(k.path(), ec)) {
      std::error_code ec2;
      auto t = e.last_write_time(ec2);
      if (ec2) continue;
      if (!entry_file(e)) {  // a temporary left by a killed writer (an hour old): remove
        if (e.is_regular_file(ec2) && now - t > std::chrono::hours(1)) fs::remove(e.path(), ec2);
        continue;
      }
      uint64_t sz = e.file_size(ec2);
      if (ec2) continue;
      all.push_back({e.path(), sz, t});
      total += sz;
    }
  }
  std::sort(all.begin(), all.end(), [](const E& a, const E& b) { return a.t < b.t; });
  for (const auto& e : all) {
    if (total <= target) break;
    std::error_code ec2;
    if (fs::remove(e.p, ec2)) cache_log().notes.push_back("compile cache: evicted " + e.p.string() + " (least recently used)");
    total -= e.size;  // gone, whether we or a concurrent process removed it
  }
}

namespace {
std::unique_ptr<BlobCache>& active() {
  static std::unique_ptr<BlobCache> c;
  return c;
}
}  // namespace

BlobCache* active_cache() { return active().get(); }
void set_active_cache(std::unique_ptr<BlobCache> cache) { active() = std::move(cache); }

CacheLog& cache_log() {
  // Never destroyed: executors held in statics (tests) log from their destructors at exit,
  // possibly after a function-local static log would already be gone.
  static CacheLog* log = new CacheLog;
  return *log;
}

}  // namespace rlx::io
