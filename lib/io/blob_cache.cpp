#include "io/blob_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
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
constexpr uint32_t kFormat = 1;
const char* const kLayout = "v1";  // DIR/v1/...: a new layout gets a new directory

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
  auto env = [](const char* n) -> std::string {
    const char* v = std::getenv(n);
    return v ? v : "";
  };
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
  return s;
}

BlobCache::BlobCache(std::string dir, uint64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}

std::string BlobCache::entry_path(const std::string& kind, const std::string& key) const {
  return dir_ + "/" + kLayout + "/" + kind + "/" + hex64(hash64(key)) + ".bin";
}

BlobCache::Lookup BlobCache::get(const std::string& kind, const std::string& key) {
  Lookup r;
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
  if (bytes.size() - pos < 16) return reject("truncated header");
  uint64_t len = get_u64(bytes.data() + pos), sum = get_u64(bytes.data() + pos + 8);
  pos += 16;
  if (len != bytes.size() - pos)
    return reject("truncated or padded payload (" + std::to_string(bytes.size() - pos) + " bytes, header says " +
                  std::to_string(len) + ")");
  if (hash64(bytes.data() + pos, len) != sum) return reject("checksum mismatch (corrupt payload)");
  r.data = bytes.substr(pos);
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // most recently used now
  return r;
}

bool BlobCache::put(const std::string& kind, const std::string& key, const std::string& data, std::string* error) {
  std::string blob(kMagic, sizeof kMagic);
  blob.append(reinterpret_cast<const char*>(&kFormat), 4);
  put_u64(blob, key.size());
  blob += key;
  put_u64(blob, data.size());
  put_u64(blob, hash64(data.data(), data.size()));
  blob += data;
  const std::string path = entry_path(kind, key);
  try {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    if (ec) throw InputError("cannot create " + fs::path(path).parent_path().string() + ": " + ec.message());
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
