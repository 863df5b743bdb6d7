#pragma once
// A capacity-planned KV cache for decoder exports in the Hugging Face / Optimum layout
// (past_key_values.N.key/value [batch, kv_heads, past, head_dim] in, present.N.* out, grown by a
// Concat along the past axis). docs/ir-design.md section 4, docs/modes.md "Generation".
//
// The cache is a persistent input of `capacity` slots per layer, of which the first length()
// hold the past; the step graph is the model specialised once for a past of `capacity` slots,
// the unused slots masked out through attention_mask (0) and the positions given by
// position_ids, so every step up to the capacity runs the same plan. Each step's new rows (the
// Concat's second input, made a graph output in place of present.N) are written into the next
// free slot, on the host and in the plan's input buffer, so a step uploads one row per head,
// not the cache. Beyond the capacity the cache doubles (one new plan per doubling).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace rlx {

// The step graph: `g` with each present output (ids in `present`) replaced by the new rows its
// Concat appends, or `why_not` says which output is not `concat(past input, new rows)` along
// axis 2. `new_rows[k]` is the index in graph->outputs of present k's new rows.
struct CapacityGraph {
  std::shared_ptr<const ir::Graph> graph;
  std::vector<int> new_rows;
  std::string why_not;
};
CapacityGraph capacity_step_graph(const ir::Graph& g, const std::vector<std::string>& past, const std::vector<std::string>& present);

class KvCache {
 public:
  // Smallest capacity for `needed` slots: a power of two, at least 64.
  static int64_t capacity_for(int64_t needed);

  KvCache(std::vector<int64_t> kv_heads, std::vector<int64_t> head_dim, std::vector<DType> dtypes, int64_t capacity);

  int64_t capacity() const { return capacity_; }
  int64_t length() const { return length_; }
  size_t size() const { return slots_.size(); }
  // Tensor k: [1, kv_heads, capacity, head_dim], slots [length, capacity) zero.
  const Tensor& tensor(size_t k) const { return slots_[k]; }
  // Copies `rows` [1, kv_heads, t, head_dim] into slots [length, length + t) of tensor k
  // (converted to its dtype); returns the byte ranges written (offset, bytes), one per head.
  std::vector<std::pair<size_t, size_t>> write(size_t k, const Tensor& rows);
  // After every tensor got its rows: the cache holds t more positions.
  void advance(int64_t t) { length_ += t; }
  // New tensors of `capacity` slots holding the same positions (one copy per growth).
  void grow(int64_t capacity);
  // The positions held, [1, kv_heads, length, head_dim] (a copy).
  Tensor valid(size_t k) const;
  int64_t bytes() const;

 private:
  std::vector<int64_t> heads_, dim_;
  std::vector<DType> dtypes_;
  std::vector<Tensor> slots_;
  int64_t capacity_ = 0, length_ = 0;
};

}  // namespace rlx
