#include "backends/cpu/host_memory.h"

#include <sys/mman.h>
#include <sys/sysinfo.h>

#include <cstdlib>
#include <map>
#include <mutex>

namespace rlx::cpu {
namespace {

constexpr size_t kLarge = size_t(1) << 20;          // bytes: blocks from here up are cached
constexpr size_t kHuge = size_t(2) << 20;           // huge page size, the large-block granule
constexpr size_t kCacheLimit = size_t(1) << 30;     // bytes of free blocks kept at most

struct Cache {
  std::mutex mu;
  std::multimap<size_t, void*> free;  // by capacity in bytes
  size_t cached_bytes = 0, hits = 0, misses = 0;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: buffers may outlive static destructors
  return *c;
}

// The machine's memory and swap: no single block larger than that can ever be backed, so it is
// refused here rather than asked of the allocator (which, with overcommit, may hand out address
// space that the kernel's OOM killer later reclaims with the whole process).
size_t machine_bytes() {
  static const size_t total = [] {
    struct sysinfo si {};
    if (sysinfo(&si) != 0) return SIZE_MAX;
    const unsigned __int128 t = ((unsigned __int128)si.totalram + si.totalswap) * si.mem_unit;
    return t > SIZE_MAX ? SIZE_MAX : (size_t)t;
  }();
  return total;
}

void* raw_alloc(size_t bytes, size_t align) {
  if (bytes > machine_bytes()) return nullptr;
  void* p = nullptr;
  if (posix_memalign(&p, align, bytes)) return nullptr;
  return p;
}

}  // namespace

void* host_alloc(size_t bytes, size_t* capacity) {
  bytes = ((bytes ? bytes : 1) + 63) / 64 * 64;
  if (bytes < kLarge) {
    *capacity = bytes;
    return raw_alloc(bytes, 64);
  }
  bytes = (bytes + kHuge - 1) / kHuge * kHuge;
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> l(c.mu);
    // The smallest cached block that fits and wastes at most a quarter.
    auto it = c.free.lower_bound(bytes);
    if (it != c.free.end() && it->first <= bytes + bytes / 4) {
      void* p = it->second;
      *capacity = it->first;
      c.cached_bytes -= it->first;
      c.free.erase(it);
      c.hits++;
      return p;
    }
    c.misses++;
  }
  void* p = raw_alloc(bytes, kHuge);
  if (p) madvise(p, bytes, MADV_HUGEPAGE);
  *capacity = bytes;
  return p;
}

void host_free(void* p, size_t capacity) {
  if (!p) return;
  size_t bytes = capacity;
  if (bytes < kLarge) {
    std::free(p);
    return;
  }
  Cache& c = cache();
  std::lock_guard<std::mutex> l(c.mu);
  // Make room by dropping the largest cached blocks first.
  while (c.cached_bytes + bytes > kCacheLimit && !c.free.empty()) {
    auto last = std::prev(c.free.end());
    c.cached_bytes -= last->first;
    std::free(last->second);
    c.free.erase(last);
  }
  if (c.cached_bytes + bytes > kCacheLimit) {
    std::free(p);
    return;
  }
  c.free.emplace(capacity, p);
  c.cached_bytes += bytes;
}

HostMemoryStats host_memory_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> l(c.mu);
  return {c.cached_bytes, c.hits, c.misses};
}

void host_memory_trim() {
  Cache& c = cache();
  std::lock_guard<std::mutex> l(c.mu);
  for (auto& [cap, p] : c.free) std::free(p);
  c.free.clear();
  c.cached_bytes = 0;
}

}  // namespace rlx::cpu
