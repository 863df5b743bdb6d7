#pragma once
// Static memory planning: assigns every intermediate value an offset in one
// arena so that values whose lifetimes do not overlap share memory.
#include <cstddef>
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

// Up to this many values, best fit by decreasing size (the tightest packing, but quadratic in
// the number of values: each scans every value placed before it); beyond, best fit in time order
// with a coalescing free list, O(n log n), so a 10,000-step unrolled LSTM plans in milliseconds.
constexpr size_t kBySizeMaxValues = 4096;

// The alignment of planned tensors (bytes); views inside them keep it (session.cpp).
constexpr int64_t kPlanAlign = 64;
// Assigns every value of nonzero size an offset such that values whose lifetimes overlap never
// share bytes. Offsets (and sizes) are aligned to `align` bytes.
MemoryPlan plan_memory(const std::vector<Lifetime>& values, int64_t align = kPlanAlign);

}  // namespace rlx::passes
