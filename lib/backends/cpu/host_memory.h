#pragma once
// Host memory for the CPU executor's buffers: 64-byte aligned, and large blocks
// are recycled. Touching fresh pages is slow (a page fault per 4 KiB, several
// microseconds each on a virtual machine), and every eager node and every lazy
// run allocates its buffers anew: a freed block goes to a cache and the next
// allocation of a similar size takes it back, already mapped. Large blocks are
// also marked for transparent huge pages (fewer faults the first time).
#include <cstddef>

namespace rlx::cpu {

// At least `bytes` bytes, 64-byte aligned (contents undefined); `capacity` receives the
// block's size in bytes.
void* host_alloc(size_t bytes, size_t* capacity);
// Returns a block from host_alloc (with its capacity).
void host_free(void* p, size_t capacity);

struct HostMemoryStats {
  size_t cached_bytes = 0, hits = 0, misses = 0;
};
HostMemoryStats host_memory_stats();
// Frees every cached block.
void host_memory_trim();

}  // namespace rlx::cpu
