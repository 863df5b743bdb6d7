#pragma once
// Static memory planning: assigns every intermediate value an offset in one
// arena so that values whose lifetimes do not overlap share memory.
#include <cstdint>
#include <vector>

namespace rlx::passes {

struct Lifetime {
  int64_t size = 0;   // bytes; 0 = needs no arena storage
  int first = 0;      // step that writes it
  int last = 0;       // last step that reads it (inclusive)
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // per value, in bytes (-1 when size is 0)
  int64_t arena_bytes = 0;
  int64_t sum_bytes = 0;         // what a plan without reuse would need
};

// Greedy best-fit by decreasing size. Offsets (and sizes) are aligned to `align` bytes.
MemoryPlan plan_memory(const std::vector<Lifetime>& values, int64_t align = 64);

}  // namespace rlx::passes
