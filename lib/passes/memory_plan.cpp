#include "passes/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace rlx::passes {

MemoryPlan plan_memory(const std::vector<Lifetime>& values, int64_t align) {
  auto too_big = [] {
    throw RuntimeError("out of memory: the graph's intermediate values need more bytes than fit int64");
  };
  MemoryPlan p;
  p.offsets.assign(values.size(), -1);
  std::vector<size_t> order;
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].size > 0) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a].size > values[b].size; });
  struct Placed { int64_t off, end; int first, last; };
  std::vector<Placed> placed;
  for (size_t v : order) {
    const auto& L = values[v];
    // Sizes fit int64 one by one (checked at load), but an arena holding several may not: that
    // is memory no device has (RuntimeError, exit 3), never a wrapped offset.
    if (L.size > INT64_MAX - align) too_big();
    int64_t size = (L.size + align - 1) / align * align;
    p.sum_bytes = p.sum_bytes > INT64_MAX - size ? INT64_MAX : p.sum_bytes + size;
    // Intervals in use during v's lifetime, sorted by offset; take the smallest gap that fits.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const auto& q : placed)
      if (!(q.last < L.first || L.last < q.first)) busy.push_back({q.off, q.end});
    std::sort(busy.begin(), busy.end());
    int64_t best = -1, best_gap = INT64_MAX, cur = 0;
    for (const auto& [o, e] : busy) {
      if (o - cur >= size && o - cur < best_gap) { best = cur; best_gap = o - cur; }
      cur = std::max(cur, e);
    }
    if (best < 0) best = cur;
    if (best > INT64_MAX - size) too_big();
    p.offsets[v] = best;
    placed.push_back({best, best + size, L.first, L.last});
    p.arena_bytes = std::max(p.arena_bytes, best + size);
  }
  return p;
}

}  // namespace rlx::passes
