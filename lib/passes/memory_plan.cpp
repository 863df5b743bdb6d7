#include "passes/memory_plan.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <numeric>
#include <set>

#include "core/error.h"

namespace rlx::passes {

namespace {

// Sizes fit int64 one by one (checked at load), but an arena holding several may not: that is
// memory no device has (RuntimeError, exit 3), never a wrapped offset.
[[noreturn]] void too_big() {
  throw RuntimeError("out of memory: the graph's intermediate values need more bytes than fit int64");
}

int64_t aligned(int64_t size, int64_t align) {
  if (size > INT64_MAX - align) too_big();
  return (size + align - 1) / align * align;
}

// off + size, or too_big() where that passes INT64_MAX.
int64_t end_of(int64_t off, int64_t size) {
  if (off > INT64_MAX - size) too_big();
  return off + size;
}

// Best fit by decreasing size: each value takes the smallest gap among the values already placed
// whose lifetimes overlap its own. The tightest packing of the two, but each value scans every
// value placed before it: quadratic in the number of values.
void plan_by_size(const std::vector<Lifetime>& values, const std::vector<size_t>& sized, int64_t align,
                  MemoryPlan& p) {
  std::vector<size_t> order = sized;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a].size > values[b].size; });
  struct Placed { int64_t off, end; int first, last; };
  std::vector<Placed> placed;
  std::vector<std::pair<int64_t, int64_t>> busy;
  for (size_t v : order) {
    const auto& L = values[v];
    int64_t size = aligned(L.size, align);
    busy.clear();
    for (const auto& q : placed)
      if (!(q.last < L.first || L.last < q.first)) busy.push_back({q.off, q.end});
    std::sort(busy.begin(), busy.end());
    int64_t best = -1, best_gap = INT64_MAX, cur = 0;
    for (const auto& [o, e] : busy) {
      if (o - cur >= size && o - cur < best_gap) { best = cur; best_gap = o - cur; }
      cur = std::max(cur, e);
    }
    if (best < 0) best = cur;
    const int64_t end = end_of(best, size);
    p.offsets[v] = best;
    placed.push_back({best, end, L.first, L.last});
    p.arena_bytes = std::max(p.arena_bytes, end);
  }
}

// Best fit in time order: values are placed as they are written and their blocks return to a
// free list (coalesced with free neighbours) after their last reader. O(n log n).
void plan_in_time_order(const std::vector<Lifetime>& values, const std::vector<size_t>& sized, int64_t align,
                        MemoryPlan& p) {
  std::vector<size_t> by_first = sized, by_last = sized;
  std::stable_sort(by_first.begin(), by_first.end(), [&](size_t a, size_t b) { return values[a].first < values[b].first; });
  std::stable_sort(by_last.begin(), by_last.end(), [&](size_t a, size_t b) { return values[a].last < values[b].last; });
  std::map<int64_t, int64_t> free_at;            // offset -> size
  std::set<std::pair<int64_t, int64_t>> by_size;  // (size, offset)
  int64_t top = 0;
  auto take = [&](std::map<int64_t, int64_t>::iterator it) {
    by_size.erase({it->second, it->first});
    free_at.erase(it);
  };
  auto release = [&](int64_t off, int64_t size) {
    auto next = free_at.lower_bound(off);
    if (next != free_at.end() && next->first == off + size) {
      size += next->second;
      take(next);
    }
    auto prev = free_at.lower_bound(off);
    if (prev != free_at.begin()) {
      --prev;
      if (prev->first + prev->second == off) {
        off = prev->first;
        size += prev->second;
        take(prev);
      }
    }
    free_at[off] = size;
    by_size.insert({size, off});
  };
  size_t freed = 0;
  for (size_t v : by_first) {
    const auto& L = values[v];
    // Blocks whose last reader ran before this value is written are free again.
    for (; freed < by_last.size() && values[by_last[freed]].last < L.first; ++freed) {
      size_t q = by_last[freed];
      release(p.offsets[q], aligned(values[q].size, align));
    }
    int64_t size = aligned(L.size, align);
    int64_t off;
    auto fit = by_size.lower_bound({size, INT64_MIN});
    if (fit != by_size.end()) {
      auto [bsize, boff] = *fit;
      take(free_at.find(boff));
      off = boff;
      if (bsize > size) release(boff + size, bsize - size);
    } else if (!free_at.empty() && std::prev(free_at.end())->first + std::prev(free_at.end())->second == top) {
      // The free block at the top of the arena grows to the size needed.
      auto last = std::prev(free_at.end());
      off = last->first;
      take(last);
      top = end_of(off, size);
    } else {
      off = top;
      top = end_of(top, size);
    }
    p.offsets[v] = off;
    p.arena_bytes = std::max(p.arena_bytes, end_of(off, size));
  }
}

}  // namespace

MemoryPlan plan_memory(const std::vector<Lifetime>& values, int64_t align) {
  MemoryPlan p;
  p.offsets.assign(values.size(), -1);
  std::vector<size_t> sized;
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].size > 0) {
      sized.push_back(i);
      const int64_t size = aligned(values[i].size, align);
      p.sum_bytes = p.sum_bytes > INT64_MAX - size ? INT64_MAX : p.sum_bytes + size;
    }
  if (sized.size() <= kBySizeMaxValues) plan_by_size(values, sized, align, p);
  else plan_in_time_order(values, sized, align, p);
  return p;
}

}  // namespace rlx::passes
