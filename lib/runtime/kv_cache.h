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
//
// Memory: the cache's storage is anonymous zero pages (mmap), resident only where rows are
// written, so a cache of capacity 2n holding n positions costs about n positions; growth copies
// the held rows and gives the old pages back past input by past input (all in one mapping). With a spare slot (in-place append,
// Session::set_append_storage) each head has C + 1 slots: the step's plan writes the export's
// concat(past, new) into the cache itself, the new rows landing in slot C, then moved to slot
// length (commit_appended), so no copy of the cache and no buffer of its size is made per step.
// Where the executor cannot use host memory in place (Vulkan), that storage is device buffers
// instead: the cache never leaves the device (rows move and growth copies by device-to-device
// transfers), only the prompt's rows are uploaded and valid() downloads.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "runtime/executor.h"
#include "runtime/session.h"

namespace rlx {

// The step graph: `g` with each present output (ids in `present`) replaced by the new rows its
// Concat appends, or `why_not` says which output is not `concat(past input, new rows)` along
// axis 2. `new_rows[k]` is the index in graph->outputs of present k's new rows.
struct CapacityGraph {
  std::shared_ptr<const ir::Graph> graph;
  std::vector<int> new_rows;
  std::string why_not;
  // Each past input is read by nothing but its concat, in a graph without control nodes: the
  // concat can be written into the cache itself (KvCache with a spare slot,
  // Session::set_append_storage).
  bool appendable = false;
};
CapacityGraph capacity_step_graph(const ir::Graph& g, const std::vector<std::string>& past, const std::vector<std::string>& present);

class KvCache {
 public:
  // Smallest capacity for `needed` slots: a power of two, at least 64.
  static int64_t capacity_for(int64_t needed);

  // `spare_slot`: each head holds capacity + 1 slots, the last the step's append slot (in-place
  // append: storage() is concat(past, new)'s output, tensor() the past's view of it). `ex`, with
  // a spare slot: the executor whose plans append into the cache (append_storage()); its host
  // pages wrapped where `ex` can use host memory in place (the CPU), else its own buffers.
  KvCache(std::vector<int64_t> kv_heads, std::vector<int64_t> head_dim, std::vector<DType> dtypes, int64_t capacity,
          bool spare_slot = false, Executor* ex = nullptr);

  int64_t capacity() const { return capacity_; }
  int64_t length() const { return length_; }
  size_t size() const { return heads_.size(); }
  bool spare_slot() const { return spare_; }
  // The storage is the executor's device buffers (no host pages: tensor() and storage() are
  // internal errors; write(), valid() and growth go through the executor).
  bool on_device() const { return device_; }
  // Tensor k: [1, kv_heads, capacity, head_dim], slots [length, capacity) zero. With a spare
  // slot, a tensor of that shape over the storage's first bytes (not its layout: a plan reads it
  // only through the concat written into storage(k)).
  const Tensor& tensor(size_t k) const;
  // The storage: [1, kv_heads, capacity + spare, head_dim] (borrowed anonymous pages).
  const Tensor& storage(size_t k) const;
  // Tensor k's storage as the plan's append target (spare slot and executor given):
  // concat(past_k, new) is written into it, past_k reading it as [1, kv_heads, capacity, head_dim].
  Session::AppendStorage append_storage(size_t k) const;
  // Copies `rows` [1, kv_heads, t, head_dim] into slots [length, length + t) of tensor k
  // (converted to its dtype); returns the byte ranges written (offset, bytes), one per head.
  std::vector<std::pair<size_t, size_t>> write(size_t k, const Tensor& rows);
  // After every tensor got its rows: the cache holds t more positions.
  void advance(int64_t t) { length_ += t; }
  // After a plan appended one position in place (each tensor's new rows in its spare slot):
  // they move to slot length (a memcpy per head on the host; on the device one transfer of every
  // head's row, Executor::copy_ranges) and the cache holds one more position.
  // Returns the bytes moved: one row per head and tensor.
  int64_t commit_appended();
  // New tensors of `capacity` slots holding the same positions (one copy per growth; the old
  // pages are given back as they are copied where nothing else holds the old storage).
  void grow(int64_t capacity) { relayout(capacity, spare_); }
  // The same with or without the spare slot (a plan that cannot append in place).
  void relayout(int64_t capacity, bool spare_slot);
  // The positions held, [1, kv_heads, length, head_dim] (a copy).
  Tensor valid(size_t k) const;
  // The storage's bytes (capacity + spare slots; resident only where written).
  int64_t bytes() const;
  // What `length` positions need: kv_heads x length x head_dim elements per tensor.
  int64_t held_bytes() const;

 private:
  std::vector<int64_t> heads_, dim_;
  std::vector<DType> dtypes_;
  std::vector<Tensor> slots_, views_;
  std::vector<uint8_t*> mem_;  // slots_[k]'s bytes, written in place (the tensors borrow them)
  Executor* ex_ = nullptr;
  bool device_ = false;
  std::vector<std::shared_ptr<DeviceBuffer>> bufs_;  // append targets: the pages wrapped, or device buffers
  bool spare_ = false;
  int64_t capacity_ = 0, length_ = 0;
  int64_t stride() const { return capacity_ + (spare_ ? 1 : 0); }  // slots per head
  // Every past input's tensors at `capacity`, in one mapping of zero pages (one mmap and, when the
  // last of them goes, one munmap per growth: each is a TLB shootdown across the CPUs).
  void allocate(int64_t capacity, std::vector<Tensor>& slots, std::vector<Tensor>& views, std::vector<uint8_t*>& mem) const;
  std::shared_ptr<DeviceBuffer> device_buffer(size_t k, int64_t stride) const;  // zeroed
  size_t device_row(size_t k) const { return ex_->storage_bytes(dim_[k], dtypes_[k]); }
  void wrap(size_t k);  // bufs_[k] over the host pages, where the executor takes them
};

}  // namespace rlx
