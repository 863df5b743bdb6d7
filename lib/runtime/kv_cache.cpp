#include "runtime/kv_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "ir/op_registry.h"

namespace rlx {

CapacityGraph capacity_step_graph(const ir::Graph& g, const std::vector<std::string>& past, const std::vector<std::string>& present) {
  CapacityGraph r;
  auto out = std::make_shared<ir::Graph>(g);
  for (size_t k = 0; k < present.size(); ++k) {
    int j = -1;
    for (size_t o = 0; o < g.outputs.size(); ++o)
      if (g.nodes[g.outputs[o]].id == present[k]) j = (int)o;
    if (j < 0) {
      r.why_not = "output '" + present[k] + "' is missing from the specialised graph";
      return r;
    }
    const ir::Node& n = g.nodes[g.outputs[j]];
    const int64_t axis = n.op == ir::Op::Concat ? n.attrs.i("axis") : 0;
    if (n.op != ir::Op::Concat || n.inputs.size() != 2 || !(axis == 2 || axis == -2) ||
        g.nodes[n.inputs[0]].op != ir::Op::Input || g.nodes[n.inputs[0]].id != past[k]) {
      r.why_not = "output '" + present[k] + "' is not a concatenation of input '" + past[k] + "' and the new rows along the past axis";
      return r;
    }
    out->outputs[j] = n.inputs[1];
    r.new_rows.push_back(j);
  }
  // Appendable: each past input read by its concat alone (and not an output itself), in a graph
  // without control nodes (those run as segments and host steps, not one plan).
  r.appendable = true;
  for (const auto& n : g.nodes)
    if (ir::op_info(n.op).category == ir::Category::Control) r.appendable = false;
  for (size_t k = 0; k < past.size(); ++k) {
    const int p = g.find(past[k]);
    int readers = 0;
    for (const auto& n : g.nodes)
      for (int u : n.inputs) readers += u == p;
    for (int o : out->outputs) readers += o == p;
    r.appendable = r.appendable && readers == 1;
  }
  r.graph = std::move(out);
  return r;
}

namespace {

// `bytes` of anonymous zero pages: resident only once written (reading an untouched page maps
// the shared zero page), given back whole by munmap when the last tensor borrowing them goes.
std::shared_ptr<uint8_t> zero_pages(size_t bytes) {
  const size_t n = std::max<size_t>(bytes, 1);
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw RuntimeError("KV cache: out of memory mapping " + std::to_string(n) + " bytes");
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [n](uint8_t* q) { munmap(q, n); });
}

// Gives back the whole pages inside [p, p + bytes) (they read as zeros again).
void release_pages(uint8_t* p, size_t bytes) {
  static const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const uintptr_t b = ((uintptr_t)p + page - 1) / page * page, e = ((uintptr_t)p + bytes) / page * page;
  if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

}  // namespace

int64_t KvCache::capacity_for(int64_t needed) {
  int64_t c = 64;
  while (c < needed) c *= 2;
  return c;
}

KvCache::KvCache(std::vector<int64_t> kv_heads, std::vector<int64_t> head_dim, std::vector<DType> dtypes, int64_t capacity,
                 bool spare_slot, Executor* ex)
    : heads_(std::move(kv_heads)), dim_(std::move(head_dim)), dtypes_(std::move(dtypes)), ex_(spare_slot ? ex : nullptr),
      spare_(spare_slot), capacity_(capacity) {
  const size_t n = heads_.size();
  slots_.resize(n), views_.resize(n), mem_.resize(n), bufs_.resize(n);
  if (ex_)  // device buffers unless the executor reads and writes host pages in place (the CPU)
    for (DType dt : dtypes_) {
      Tensor probe({1}, dt);
      device_ = device_ || ex_->storage_dtype(dt) != dt || !ex_->wrap_host(probe.raw(), probe.nbytes(), dt, probe.keepalive());
    }
  if (!device_) allocate(capacity_, slots_, views_, mem_);
  for (size_t k = 0; k < n; ++k) {
    if (device_) bufs_[k] = device_buffer(k, stride());
    else wrap(k);
  }
}

std::shared_ptr<DeviceBuffer> KvCache::device_buffer(size_t k, int64_t stride) const {
  const size_t bytes = ex_->storage_bytes(heads_[k] * stride * dim_[k], dtypes_[k]);
  std::shared_ptr<DeviceBuffer> b = ex_->allocate(std::max<size_t>(bytes, 1));
  ex_->zero(*b, 0, bytes);  // the unused slots are read (masked out): zeros, never stale memory
  return b;
}

void KvCache::wrap(size_t k) {
  bufs_[k].reset();
  if (!ex_) return;
  bufs_[k] = ex_->wrap_host(slots_[k].raw(), slots_[k].nbytes(), dtypes_[k], slots_[k].keepalive());
  if (!bufs_[k]) throw RuntimeError("internal: KV cache: the " + ex_->name() + " backend does not take the cache's host pages");
}

const Tensor& KvCache::tensor(size_t k) const {
  if (device_) throw RuntimeError("internal: KV cache: the cache is on the device, not in host tensors");
  return views_[k];
}

const Tensor& KvCache::storage(size_t k) const {
  if (device_) throw RuntimeError("internal: KV cache: the cache is on the device, not in host tensors");
  return slots_[k];
}

Session::AppendStorage KvCache::append_storage(size_t k) const {
  if (!spare_ || !bufs_[k]) throw RuntimeError("internal: KV cache: no append storage (a spare slot and an executor are needed)");
  return {bufs_[k], Shape{1, heads_[k], capacity_, dim_[k]}, Shape{1, heads_[k], capacity_ + 1, dim_[k]}, dtypes_[k]};
}

void KvCache::allocate(int64_t capacity, std::vector<Tensor>& slots, std::vector<Tensor>& views,
                       std::vector<uint8_t*>& mem) const {
  static const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const int64_t per_head = capacity + (spare_ ? 1 : 0);
  std::vector<size_t> at(heads_.size());
  size_t total = 0;
  for (size_t k = 0; k < heads_.size(); ++k) {  // each cache page-aligned in the one mapping
    at[k] = total;
    total += ((size_t)(heads_[k] * per_head * dim_[k]) * dtype_size(dtypes_[k]) + page - 1) / page * page;
  }
  auto pages = zero_pages(total);
  for (size_t k = 0; k < heads_.size(); ++k) {
    uint8_t* p = pages.get() + at[k];
    mem[k] = p;
    slots[k] = Tensor::borrow({1, heads_[k], per_head, dim_[k]}, dtypes_[k], p, pages);
    views[k] = spare_ ? Tensor::borrow({1, heads_[k], capacity, dim_[k]}, dtypes_[k], p, pages) : slots[k];
  }
}

std::vector<std::pair<size_t, size_t>> KvCache::write(size_t k, const Tensor& rows_in) {
  const Tensor rows = rows_in.astype(dtypes_[k]);
  const Shape& s = rows.shape();
  if (s.size() != 4 || s[0] != 1 || s[1] != heads_[k] || s[3] != dim_[k])
    throw RuntimeError("KV cache: new rows of shape " + shape_str(s) + ", expected [1, " + std::to_string(heads_[k]) + ", t, " +
                       std::to_string(dim_[k]) + "]");
  const int64_t t = s[2];
  if (length_ + t > capacity_)
    throw RuntimeError("internal: KV cache: " + std::to_string(length_ + t) + " positions exceed the capacity " + std::to_string(capacity_));
  const size_t es = dtype_size(dtypes_[k]), row = (size_t)dim_[k] * es;
  const uint8_t* src = static_cast<const uint8_t*>(rows.raw());
  std::vector<std::pair<size_t, size_t>> ranges;
  for (int64_t h = 0; h < heads_[k]; ++h) {
    if (device_) {  // device bytes (the storage dtype's)
      const size_t at = ((size_t)h * stride() + length_) * device_row(k);
      ex_->upload(*bufs_[k], at, src + (size_t)h * t * row, t * row, dtypes_[k]);
      ranges.emplace_back(at, t * device_row(k));
      continue;
    }
    const size_t at = ((size_t)h * stride() + length_) * row;
    std::memcpy(mem_[k] + at, src + (size_t)h * t * row, t * row);
    ranges.emplace_back(at, t * row);
  }
  return ranges;
}

int64_t KvCache::commit_appended() {
  if (!spare_) throw RuntimeError("internal: KV cache: nothing appended without a spare slot");
  if (length_ + 1 > capacity_) throw RuntimeError("internal: KV cache: an append beyond the capacity " + std::to_string(capacity_));
  int64_t moved = 0;
  for (size_t k = 0; k < heads_.size(); ++k) {
    const size_t row = device_ ? device_row(k) : (size_t)dim_[k] * dtype_size(dtypes_[k]);
    std::vector<std::pair<size_t, size_t>> at;  // per head: slot C -> slot length
    for (int64_t h = 0; h < heads_[k]; ++h) at.emplace_back(((size_t)h * stride() + capacity_) * row, ((size_t)h * stride() + length_) * row);
    if (device_) ex_->copy_ranges(*bufs_[k], *bufs_[k], at, row);  // on the device: one transfer, no host copy
    else
      for (const auto& [from, to] : at) std::memcpy(mem_[k] + to, mem_[k] + from, row);
    moved += (int64_t)(row * at.size());
  }
  length_ += 1;
  return moved;
}

void KvCache::relayout(int64_t capacity, bool spare_slot) {
  if (capacity < length_) throw RuntimeError("internal: KV cache: capacity " + std::to_string(capacity) + " below its length");
  const int64_t old_stride = stride(), new_stride = capacity + (spare_slot ? 1 : 0);
  spare_ = spare_slot;  // old_stride keeps the old layout
  if (device_) {
    for (size_t k = 0; k < heads_.size(); ++k) {
      const size_t row = device_row(k);
      if (spare_slot) {  // on the device: a new buffer, the held rows copied head by head
        std::shared_ptr<DeviceBuffer> b = device_buffer(k, new_stride);
        std::vector<std::pair<size_t, size_t>> at;
        for (int64_t h = 0; h < heads_[k]; ++h) at.emplace_back((size_t)h * old_stride * row, (size_t)h * new_stride * row);
        if (length_ > 0) ex_->copy_ranges(*bufs_[k], *b, at, length_ * row);
        bufs_[k] = std::move(b);
        continue;
      }
      // no spare slot: a plan that reads the past as it is, from host tensors
      if (k == 0) allocate(capacity, slots_, views_, mem_);
      const size_t hrow = (size_t)dim_[k] * dtype_size(dtypes_[k]);
      for (int64_t h = 0; h < heads_[k] && length_ > 0; ++h)
        ex_->download(*bufs_[k], (size_t)h * old_stride * row, mem_[k] + (size_t)h * new_stride * hrow, length_ * hrow, dtypes_[k]);
      bufs_[k].reset();
    }
    if (!spare_slot) device_ = false;
    capacity_ = capacity;
    return;
  }
  const size_t n = slots_.size();
  for (auto& b : bufs_) b.reset();  // a wrapped buffer holds the old pages too
  std::vector<Tensor> s(n), v(n);
  std::vector<uint8_t*> m(n);
  allocate(capacity, s, v, m);
  // Only this cache holds the old storage (each past input's tensor and view: two owners each):
  // each past input's old pages go back once its rows are copied, so growth holds about one copy
  // of the rows, not two (the rest of the old mapping goes with it just after). One madvise per
  // past input, not per head, and one mapping for all of them: each call is a TLB shootdown
  // across the CPUs, and per head and per mapping they took 3-15 ms of a small decoder's growth on
  // this project's 2-vCPU VM (0.9-2.4 ms now).
  const bool sole = n && slots_[0].keepalive().use_count() == (long)(2 * n);
  for (size_t k = 0; k < n; ++k) {
    const size_t row = (size_t)dim_[k] * dtype_size(dtypes_[k]);
    for (int64_t h = 0; h < heads_[k] && length_ > 0; ++h)
      std::memcpy(m[k] + (size_t)h * new_stride * row, mem_[k] + (size_t)h * old_stride * row, length_ * row);
    if (sole && length_ > 0) release_pages(mem_[k], (size_t)heads_[k] * old_stride * row);
  }
  for (size_t k = 0; k < n; ++k) {
    slots_[k] = std::move(s[k]), views_[k] = std::move(v[k]), mem_[k] = m[k];
    if (spare_) wrap(k);
  }
  capacity_ = capacity;
}

Tensor KvCache::valid(size_t k) const {
  Tensor r(Shape{1, heads_[k], length_, dim_[k]}, dtypes_[k]);
  if (length_ == 0) return r;
  const size_t row = (size_t)dim_[k] * dtype_size(dtypes_[k]);
  for (int64_t h = 0; h < heads_[k]; ++h) {
    uint8_t* dst = static_cast<uint8_t*>(r.mutable_raw()) + (size_t)h * length_ * row;
    if (device_) ex_->download(*bufs_[k], (size_t)h * stride() * device_row(k), dst, length_ * row, dtypes_[k]);
    else std::memcpy(dst, mem_[k] + (size_t)h * stride() * row, length_ * row);
  }
  return r;
}

int64_t KvCache::bytes() const {
  int64_t b = 0;
  for (size_t k = 0; k < heads_.size(); ++k) b += device_ ? (int64_t)bufs_[k]->capacity : (int64_t)slots_[k].nbytes();
  return b;
}

int64_t KvCache::held_bytes() const {
  int64_t b = 0;
  for (size_t k = 0; k < slots_.size(); ++k) b += heads_[k] * length_ * dim_[k] * (int64_t)dtype_size(dtypes_[k]);
  return b;
}

}  // namespace rlx
