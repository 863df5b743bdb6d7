#include "backends/cpu/host_memory.h"

#include <sys/mman.h>

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
  std::multimap<size_t, float*> free;  // by capacity in floats
  size_t cached_bytes = 0, hits = 0, misses = 0;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: buffers may outlive static destructors
  return *c;
}

float* raw_alloc(size_t bytes, size_t align) {
  void* p = nullptr;
  if (posix_memalign(&p, align, bytes)) return nullptr;
  return static_cast<float*>(p);
}

}  // namespace

float* host_alloc(size_t floats, size_t* capacity) {
  size_t bytes = (floats ? floats : 1) * sizeof(float);
  if (bytes < kLarge) {
    *capacity = bytes / sizeof(float);
    return raw_alloc((bytes + 63) / 64 * 64, 64);
  }
  bytes = (bytes + kHuge - 1) / kHuge * kHuge;
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> l(c.mu);
    // The smallest cached block that fits and wastes at most a quarter.
    auto it = c.free.lower_bound(bytes / sizeof(float));
    if (it != c.free.end() && it->first * sizeof(float) <= bytes + bytes / 4) {
      float* p = it->second;
      *capacity = it->first;
      c.cached_bytes -= it->first * sizeof(float);
      c.free.erase(it);
      c.hits++;
      return p;
    }
    c.misses++;
  }
  float* p = raw_alloc(bytes, kHuge);
  if (p) madvise(p, bytes, MADV_HUGEPAGE);
  *capacity = bytes / sizeof(float);
  return p;
}

void host_free(float* p, size_t capacity) {
  if (!p) return;
  size_t bytes = capacity * sizeof(float);
  if (bytes < kLarge) {
    std::free(p);
    return;
  }
  Cache& c = cache();
  std::lock_guard<std::mutex> l(c.mu);
  // Make room by dropping the largest cached blocks first.
  while (c.cached_bytes + bytes > kCacheLimit && !c.free.empty()) {
    auto last = std::prev(c.free.end());
    c.cached_bytes -= last->first * sizeof(float);
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
