#pragma once
// The on-disk store behind rlx's persistent compile cache (docs/cache.md): named blobs
// (compiled plans, SPIR-V, Vulkan pipeline caches) under one directory, one file each.
//
//   DIR/v1/KIND/HASH.bin   HASH = 64-bit hash of the full key, in hex
//
// Every entry starts with a header: magic, format version, the full key (checked, so a
// hash collision is a miss), the payload's size, its checksum, and a MAC (keyed BLAKE2b,
// libsodium) over the kind, the full key and the payload under a secret that lives outside
// the cache (RLX_CACHE_SECRET, else a per-user key file). An entry that fails any check
// (truncated, corrupt, another format, not authenticated under this key) is reported,
// deleted and treated as a miss, never trusted. Writes go to a temporary file renamed over the entry (io::write_file_atomic),
// so concurrent processes read either the old complete entry or the new one. A read touches
// the entry's mtime; when the store grows past its size limit, the least recently used
// entries are removed. Failures to write are reported, never fatal: the cache only saves time.
//
// This is below the backends (the Vulkan executor stores SPIR-V and pipeline caches here),
// so it knows nothing of graphs: callers build the keys.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rlx::io {

// 64-bit hash of bytes (not cryptographic; for cache keys and checksums).
uint64_t hash64(const void* data, size_t n, uint64_t seed = 0);
inline uint64_t hash64(const std::string& s, uint64_t seed = 0) { return hash64(s.data(), s.size(), seed); }
std::string hex64(uint64_t v);

// rlx's version and an identity of this build (the running executable's size and mtime):
// a rebuilt rlx never reads what another build wrote.
const std::string& build_id();

// Where the cache lives and whether it is on, from the environment:
//   RLX_CACHE=0 (or off/false/no)  off
//   RLX_CACHE_DIR=DIR              the directory, else $XDG_CACHE_HOME/rlx, else $HOME/.cache/rlx
//   RLX_CACHE_MAX_MB=N             size limit in MiB (default 512); entries beyond it are evicted LRU
//   RLX_CACHE_SECRET=S             the secret entries are authenticated under (>= 16 bytes), else
//                                  the key file $XDG_CONFIG_HOME/rlx/cache.key (~/.config/rlx/...)
// Without RLX_CACHE_SECRET, a directory that another user owns or others can write is not
// used (unsafe_dir_why says why). Reading the settings has no side effects.
struct CacheSettings {
  bool enabled = true;
  std::string dir;            // empty when no location could be found (no HOME)
  uint64_t max_bytes = 512ull << 20;
  std::string disabled_why;   // "RLX_CACHE=0", "--no-cache", "no HOME or XDG_CACHE_HOME"
  bool shared_secret = false;  // RLX_CACHE_SECRET is set
  std::string unsafe_dir_why;  // one line when `dir` is not safe to use (see unsafe_cache_dir)
};
// Throws InputError for a malformed RLX_CACHE_MAX_MB.
CacheSettings cache_settings_from_env();

// Why DIR must not be used without a shared secret, or "" when it may: DIR (or a directory
// below it that the cache uses) is owned by another user or writable by group or others, or
// one of its parents is owned by another user (not root) or writable by others without the
// sticky bit (as ssh checks ~/.ssh). Directories that do not exist yet are created 0700.
std::string unsafe_cache_dir(const std::string& dir);

// The 32-byte key that authenticates entries. From RLX_CACHE_SECRET when set (at least 16
// bytes, hashed into the key), else from the per-user key file, created on first use (32
// bytes from libsodium's CSPRNG, mode 0600, published atomically so that concurrent first
// runs agree on one key) unless `create` is false. A key file that is not a regular file
// owned by this user, readable by group or others, or not 32 bytes long is not used.
// Returns "" and sets *why (one line: what is wrong and how to fix it) when there is no key;
// *source says where the key comes from ("RLX_CACHE_SECRET" or the file's path), and
// *not_made_yet whether the key file is only missing (and `create` was false).
std::string cache_mac_key(bool create, std::string* source, std::string* why, bool* not_made_yet = nullptr);
// Where the per-user key file is ($XDG_CONFIG_HOME/rlx/cache.key, else ~/.config/rlx/...),
// or "" when neither is set.
std::string cache_key_path();
constexpr size_t kCacheKeyBytes = 32;

class BlobCache {
 public:
  // `mac_key`: kCacheKeyBytes bytes (cache_mac_key). With any other key (empty), get() and
  // put() miss and fail; info(), clear() and evict() need none.
  BlobCache(std::string dir, uint64_t max_bytes, std::string mac_key);

  const std::string& dir() const { return dir_; }
  uint64_t max_bytes() const { return max_bytes_; }

  struct Lookup {
    std::optional<std::string> data;  // the payload on a hit
    std::string problem;              // set when an entry existed but was rejected (and deleted)
  };
  Lookup get(const std::string& kind, const std::string& key);
  // Stores atomically, then evicts if over the limit. Returns false and sets *error on failure.
  bool put(const std::string& kind, const std::string& key, const std::string& data, std::string* error = nullptr);

  struct Info {
    uint64_t entries = 0, bytes = 0;
    std::map<std::string, std::pair<uint64_t, uint64_t>> kinds;  // kind -> (entries, bytes)
  };
  Info info() const;
  // Removes every entry (and stray temporaries); returns what was removed.
  Info clear();
  // Removes least-recently-used entries until the total is at most `target` bytes.
  void evict(uint64_t target);

  // The file an entry lives in (for tests and `rlx cache info`).
  std::string entry_path(const std::string& kind, const std::string& key) const;

 private:
  std::string dir_;
  uint64_t max_bytes_;
  std::string mac_key_;
};

// The process's cache from its settings: checks the directory (unless RLX_CACHE_SECRET is
// set) and gets the key. Null when the settings say off, and then, when the user should hear
// why (an unsafe directory, no usable key), *warning holds one line for stderr.
std::unique_ptr<BlobCache> open_cache(const CacheSettings& s, std::string* warning);

// The cache the running program uses, or null when caching is off. Library users (tests)
// get none unless they install one; the rlx CLI installs one from cache_settings_from_env()
// unless --no-cache is given.
BlobCache* active_cache();
void set_active_cache(std::unique_ptr<BlobCache> cache);

// Notes for --verbose and warnings (a rejected entry), collected by whoever used the cache
// and printed by the CLI: one line each.
struct CacheLog {
  std::vector<std::string> notes, warnings;
  int hits = 0, misses = 0, stores = 0;
};
CacheLog& cache_log();

}  // namespace rlx::io
