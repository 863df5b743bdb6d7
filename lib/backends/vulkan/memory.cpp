#include "backends/vulkan/memory.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace rlx::vk {

namespace {

constexpr VkDeviceSize kMiB = 1024 * 1024;
// The staging ring: up to kSlots buffers of up to kSlotMax bytes each. While the
// device copies one chunk, the host fills (or drains) the next.
constexpr VkDeviceSize kSlotMax = 16 * kMiB;
constexpr size_t kSlots = 4;
// Host copies at least this large are split across the copy threads.
constexpr size_t kThreadedCopy = 2 * kMiB;
constexpr VkBufferUsageFlags kUsage =
    VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;

VkDeviceSize round_up(VkDeviceSize v, VkDeviceSize a) { return (v + a - 1) / a * a; }

bool is_oom(VkResult r) { return r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY; }

// RLX_VK_FORCE_STAGING=1: never map device blocks, so that every transfer takes the
// staging path (lets CPU drivers such as lavapipe test it).
bool force_staging() {
  const char* e = std::getenv("RLX_VK_FORCE_STAGING");
  return e && *e && std::strcmp(e, "0") != 0;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

CopyThreads::CopyThreads(unsigned n) {
  for (unsigned i = 1; i < n; ++i) workers_.emplace_back([this, i] { work(i); });
}

CopyThreads::~CopyThreads() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  go_.notify_all();
  for (auto& t : workers_) t.join();
}

void CopyThreads::memcpy(void* dst, const void* src, size_t n) {
  if (n < kThreadedCopy || workers_.empty()) {
    std::memcpy(dst, src, n);
    return;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    dst_ = (uint8_t*)dst;
    src_ = (const uint8_t*)src;
    n_ = n;
    piece_ = round_up((n + size() - 1) / size(), 4096);
    pending_ = (unsigned)workers_.size();
    ++epoch_;
  }
  go_.notify_all();
  std::memcpy(dst, src, std::min(n, piece_));  // the caller's share: piece 0
  std::unique_lock<std::mutex> l(mu_);
  done_.wait(l, [&] { return pending_ == 0; });
}

void CopyThreads::work(unsigned i) {
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> l(mu_);
    go_.wait(l, [&] { return stop_ || epoch_ != seen; });
    if (stop_) return;
    seen = epoch_;
    uint8_t* dst = dst_;
    const uint8_t* src = src_;
    size_t lo = std::min(n_, (size_t)i * piece_), hi = std::min(n_, lo + piece_);
    l.unlock();
    if (hi > lo) std::memcpy(dst + lo, src + lo, hi - lo);
    l.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

VulkanBuffer::~VulkanBuffer() {
  if (pool) pool->release(*this);
}

MemoryPool::MemoryPool(Device& dev) : dev_(dev) {
  // Blocks small enough to be bound whole; big requests get a block of their own.
  block_size_ = std::min<VkDeviceSize>({64 * kMiB, dev.caps.max_storage_range, dev.caps.max_allocation});
  align_ = std::max<VkDeviceSize>(256, dev.caps.min_storage_align);
  if (const char* e = std::getenv("RLX_VK_KEEP_BLOCKS"); e && *e) keep_collects_ = (uint32_t)std::max(0, std::atoi(e));
  VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pi.queueFamilyIndex = dev.queue_family;
  vk_check(dev.fn().vkCreateCommandPool(dev.dev, &pi, nullptr, &cmd_pool_), "vkCreateCommandPool");
}

MemoryPool::~MemoryPool() {
  for (VulkanBuffer* b : live_) b->pool = nullptr, b->block = nullptr;
  for (auto& b : blocks_) destroy_block(*b);
  for (Slot& s : slots_) {
    if (s.busy) dev_.fn().vkWaitForFences(dev_.dev, 1, &s.fence, VK_TRUE, UINT64_MAX);
    destroy_block(*s.block);
    dev_.fn().vkDestroyFence(dev_.dev, s.fence, nullptr);
  }
  if (cmd_pool_) dev_.fn().vkDestroyCommandPool(dev_.dev, cmd_pool_, nullptr);
}

uint32_t MemoryPool::pick_type(uint32_t bits, bool host) const {
  const auto& m = dev_.mem;
  auto find = [&](VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid) -> int {
    for (uint32_t i = 0; i < m.memoryTypeCount; ++i) {
      VkMemoryPropertyFlags f = m.memoryTypes[i].propertyFlags;
      if ((bits & (1u << i)) && (f & want) == want && !(f & avoid)) return (int)i;
    }
    return -1;
  };
  const VkMemoryPropertyFlags DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
                              HC = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, CA = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
  std::vector<std::pair<VkMemoryPropertyFlags, VkMemoryPropertyFlags>> prefs;
  if (host)
    prefs = {{HV | HC | CA, 0}, {HV | HC, 0}, {HV, 0}};
  else if (dev_.caps.type == "discrete-gpu")  // keep tensors in VRAM, not in the BAR window
    prefs = {{DL, HV}, {DL, 0}, {0, 0}};
  else  // CPU / integrated: device memory is host memory, map it directly
    prefs = {{DL | HV | HC, 0}, {DL, 0}, {HV | HC, 0}, {0, 0}};
  for (auto [want, avoid] : prefs)
    if (int i = find(want, avoid); i >= 0) return (uint32_t)i;
  throw RuntimeError("Vulkan: no suitable memory type on " + dev_.caps.name);
}

Block* MemoryPool::new_block(VkDeviceSize bytes, bool dedicated) {
  const VkFns& f = dev_.fn();
  auto oom = [&] {
    return RuntimeError("out of device memory allocating " + std::to_string(bytes) + " bytes on " + dev_.caps.name);
  };
  if (bytes > dev_.caps.max_allocation)
    throw RuntimeError("out of device memory allocating " + std::to_string(bytes) + " bytes on " + dev_.caps.name +
                       ": larger than the device's maxMemoryAllocationSize (" +
                       std::to_string(dev_.caps.max_allocation) + " bytes)");
  auto b = std::make_unique<Block>();
  b->size = bytes;
  b->dedicated = dedicated;
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = bytes;
  bi.usage = kUsage;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkResult r = f.vkCreateBuffer(dev_.dev, &bi, nullptr, &b->buffer);
  if (is_oom(r)) throw oom();
  vk_check(r, "vkCreateBuffer");
  VkMemoryRequirements req;
  f.vkGetBufferMemoryRequirements(dev_.dev, b->buffer, &req);
  uint32_t type = pick_type(req.memoryTypeBits, false);
  if (VkDeviceSize heap = dev_.mem.memoryHeaps[dev_.mem.memoryTypes[type].heapIndex].size; req.size > heap) {
    f.vkDestroyBuffer(dev_.dev, b->buffer, nullptr);
    throw RuntimeError("out of device memory allocating " + std::to_string(bytes) + " bytes on " + dev_.caps.name +
                       ": larger than its memory heap (" + std::to_string(heap) + " bytes)");
  }
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = type;
  r = f.vkAllocateMemory(dev_.dev, &ai, nullptr, &b->memory);
  if (is_oom(r) && trim()) r = f.vkAllocateMemory(dev_.dev, &ai, nullptr, &b->memory);  // kept blocks first
  if (r != VK_SUCCESS) {
    f.vkDestroyBuffer(dev_.dev, b->buffer, nullptr);
    if (is_oom(r)) throw oom();
    vk_check(r, "vkAllocateMemory");
  }
  vk_check(f.vkBindBufferMemory(dev_.dev, b->buffer, b->memory, 0), "vkBindBufferMemory");
  VkMemoryPropertyFlags props = dev_.mem.memoryTypes[type].propertyFlags;
  if ((props & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && !force_staging()) {
    void* p = nullptr;
    vk_check(f.vkMapMemory(dev_.dev, b->memory, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
    b->mapped = (uint8_t*)p;
    b->coherent = props & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  }
  b->free[0] = bytes;
  blocks_.push_back(std::move(b));
  return blocks_.back().get();
}

std::unique_ptr<VulkanBuffer> MemoryPool::allocate(size_t capacity_bytes) {
  auto buf = std::make_unique<VulkanBuffer>();
  buf->capacity = capacity_bytes;
  buf->pool = this;
  live_.insert(buf.get());
  if (capacity_bytes == 0) return buf;
  VkDeviceSize bytes = round_up((VkDeviceSize)capacity_bytes, align_);
  Block* blk = nullptr;
  VkDeviceSize off = 0;
  if (bytes > block_size_ / 2) {
    // An empty dedicated block kept by collect() that wastes at most a quarter, else a new one.
    for (auto& b : blocks_)
      if (b->dedicated && b->used == 0 && b->size >= bytes && b->size - bytes <= bytes / 4 &&
          (!blk || b->size < blk->size))
        blk = b.get();
    if (!blk) blk = new_block(bytes, true);
    blk->free.clear();
  } else {
    for (auto& b : blocks_) {
      if (b->dedicated) continue;
      for (auto it = b->free.begin(); it != b->free.end(); ++it)
        if (it->second >= bytes) {
          blk = b.get();
          off = it->first;
          break;
        }
      if (blk) break;
    }
    if (!blk) blk = new_block(block_size_, false);
    auto it = blk->free.find(off);
    VkDeviceSize rest = it->second - bytes;
    blk->free.erase(it);
    if (rest) blk->free[off + bytes] = rest;
  }
  blk->used += bytes;
  blk->idle = 0;
  buf->block = blk;
  buf->offset = off;
  buf->bytes = bytes;
  return buf;
}

void MemoryPool::release(VulkanBuffer& b) {
  live_.erase(&b);
  Block* blk = b.block;
  if (!blk) return;
  b.block = nullptr;
  blk->used -= b.bytes;
  if (blk->dedicated) return;  // destroyed by collect()
  auto it = blk->free.emplace(b.offset, b.bytes).first;
  auto next = std::next(it);
  if (next != blk->free.end() && it->first + it->second == next->first) {
    it->second += next->second;
    blk->free.erase(next);
  }
  if (it != blk->free.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      blk->free.erase(it);
    }
  }
}

void MemoryPool::collect() {
  bool kept_spare = false;
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    Block& b = **it;
    bool empty = b.used == 0;
    if (empty && ++b.idle <= keep_collects_) {
      ++it;
    } else if (empty && !b.dedicated && !kept_spare) {
      kept_spare = true;
      ++it;
    } else if (empty) {
      destroy_block(b);
      it = blocks_.erase(it);
    } else {
      ++it;
    }
  }
}

bool MemoryPool::trim() {
  // Only blocks empty since a collect() (idle > 0): no command recorded since then uses them,
  // and the GPU was idle at that collect().
  bool any = false;
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    if ((*it)->used == 0 && (*it)->idle > 0) {
      destroy_block(**it);
      it = blocks_.erase(it);
      any = true;
    } else {
      ++it;
    }
  }
  return any;
}

void MemoryPool::destroy_block(Block& b) {
  const VkFns& f = dev_.fn();
  if (b.mapped) f.vkUnmapMemory(dev_.dev, b.memory);
  if (b.buffer) f.vkDestroyBuffer(dev_.dev, b.buffer, nullptr);
  if (b.memory) f.vkFreeMemory(dev_.dev, b.memory, nullptr);
  b = Block{};
}

std::unique_ptr<Block> MemoryPool::host_block(VkDeviceSize bytes) {
  const VkFns& f = dev_.fn();
  auto b = std::make_unique<Block>();
  b->size = bytes;
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = bytes;
  bi.usage = kUsage;
  vk_check(f.vkCreateBuffer(dev_.dev, &bi, nullptr, &b->buffer), "vkCreateBuffer");
  VkMemoryRequirements req;
  f.vkGetBufferMemoryRequirements(dev_.dev, b->buffer, &req);
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = pick_type(req.memoryTypeBits, true);
  VkResult r = f.vkAllocateMemory(dev_.dev, &ai, nullptr, &b->memory);
  if (is_oom(r)) {
    f.vkDestroyBuffer(dev_.dev, b->buffer, nullptr);
    throw RuntimeError("out of host memory allocating " + std::to_string(bytes) + " bytes of staging for " +
                       dev_.caps.name);
  }
  vk_check(r, "vkAllocateMemory");
  vk_check(f.vkBindBufferMemory(dev_.dev, b->buffer, b->memory, 0), "vkBindBufferMemory");
  void* p = nullptr;
  vk_check(f.vkMapMemory(dev_.dev, b->memory, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
  b->mapped = (uint8_t*)p;
  b->coherent = dev_.mem.memoryTypes[ai.memoryTypeIndex].propertyFlags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  return b;
}

void MemoryPool::ensure_staging(VkDeviceSize bytes) {
  VkDeviceSize want = std::clamp(round_up(bytes, kMiB), kMiB, kSlotMax);
  if (want <= slot_bytes_) return;
  const VkFns& f = dev_.fn();
  for (Slot& s : slots_) {  // too small: replace them all
    wait_slot(s);
    destroy_block(*s.block);
    f.vkDestroyFence(dev_.dev, s.fence, nullptr);
    f.vkFreeCommandBuffers(dev_.dev, cmd_pool_, 1, &s.cmd);
  }
  slots_.clear();
  slot_bytes_ = want;
  slots_.resize(kSlots);
  for (Slot& s : slots_) {
    s.block = host_block(want);
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = cmd_pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    vk_check(f.vkAllocateCommandBuffers(dev_.dev, &ai, &s.cmd), "vkAllocateCommandBuffers");
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    vk_check(f.vkCreateFence(dev_.dev, &fi, nullptr, &s.fence), "vkCreateFence");
  }
}

void MemoryPool::host_copy(void* dst, const void* src, size_t n) {
  if (n >= kThreadedCopy && !threads_) {
    unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    threads_ = std::make_unique<CopyThreads>(std::clamp(hw / 2, 1u, 8u));
  }
  if (threads_) threads_->memcpy(dst, src, n);
  else std::memcpy(dst, src, n);
}

// Records and submits the copy of `n` bytes between slot `s` and the device buffer.
void MemoryPool::submit_slot(Slot& s, const VulkanBuffer& b, VkDeviceSize dev_off, size_t n, bool to_device) {
  const VkFns& f = dev_.fn();
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  vk_check(f.vkBeginCommandBuffer(s.cmd, &bi), "vkBeginCommandBuffer");
  VkBufferCopy c{};
  c.size = n;
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  if (to_device) {
    c.dstOffset = b.offset + dev_off;
    f.vkCmdCopyBuffer(s.cmd, s.block->buffer, b.block->buffer, 1, &c);
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    f.vkCmdPipelineBarrier(s.cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0,
                           nullptr, 0, nullptr);
  } else {
    c.srcOffset = b.offset + dev_off;
    f.vkCmdCopyBuffer(s.cmd, b.block->buffer, s.block->buffer, 1, &c);
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    f.vkCmdPipelineBarrier(s.cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr,
                           0, nullptr);
  }
  vk_check(f.vkEndCommandBuffer(s.cmd), "vkEndCommandBuffer");
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &s.cmd;
  vk_check(f.vkQueueSubmit(dev_.queue, 1, &si, s.fence), "vkQueueSubmit");
  s.busy = true;
}

void MemoryPool::wait_slot(Slot& s) {
  if (!s.busy) return;
  const VkFns& f = dev_.fn();
  VkResult r = dev_.wait_fence(s.fence);
  f.vkResetFences(dev_.dev, 1, &s.fence);
  s.busy = false;
  vk_check(r, "vkWaitForFences");
}

// Host <-> device through the staging ring, chunk c in slot c % kSlots.
// Upload: fill a slot (waiting for its previous copy), submit, go on to the next.
// Download: keep up to kSlots device copies queued, drain each as it completes.
void MemoryPool::staged_copy(const VulkanBuffer& b, VkDeviceSize byte_offset, size_t bytes, uint8_t* host,
                             bool to_device) {
  const VkFns& f = dev_.fn();
  ensure_staging(bytes);
  const size_t S = slot_bytes_, chunks = (bytes + S - 1) / S;
  auto len = [&](size_t c) { return std::min(S, bytes - c * S); };
  auto range = [&](Slot& s) {
    VkMappedMemoryRange r{VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE};
    r.memory = s.block->memory;
    r.size = VK_WHOLE_SIZE;
    return r;
  };
  struct Drain {  // on an exception, leave no copy in flight
    MemoryPool& p;
    ~Drain() {
      for (Slot& s : p.slots_)
        if (s.busy) {
          p.dev_.fn().vkWaitForFences(p.dev_.dev, 1, &s.fence, VK_TRUE, UINT64_MAX);
          p.dev_.fn().vkResetFences(p.dev_.dev, 1, &s.fence);
          s.busy = false;
        }
    }
  } drain{*this};
  if (to_device) {
    for (size_t c = 0; c < chunks; ++c) {
      Slot& s = slots_[c % kSlots];
      wait_slot(s);
      host_copy(s.block->mapped, host + c * S, len(c));
      if (!s.block->coherent) {
        auto r = range(s);
        f.vkFlushMappedMemoryRanges(dev_.dev, 1, &r);
      }
      submit_slot(s, b, byte_offset + c * S, len(c), true);
    }
    for (Slot& s : slots_) wait_slot(s);
  } else {
    size_t queued = 0;
    for (size_t c = 0; c < chunks; ++c) {
      for (; queued < chunks && queued < c + kSlots; ++queued)
        submit_slot(slots_[queued % kSlots], b, byte_offset + queued * S, len(queued), false);
      Slot& s = slots_[c % kSlots];
      wait_slot(s);
      if (!s.block->coherent) {
        auto r = range(s);
        f.vkInvalidateMappedMemoryRanges(dev_.dev, 1, &r);
      }
      host_copy(host + c * S, s.block->mapped, len(c));
    }
  }
}

void MemoryPool::write(const VulkanBuffer& dst, VkDeviceSize off, const void* src, size_t bytes) {
  if (bytes == 0) return;
  double t0 = now_s();
  struct Count {
    TransferStats& st;
    size_t bytes;
    double t0;
    ~Count() { st.upload_bytes += bytes, st.upload_s += now_s() - t0; }
  } count{stats_, bytes, t0};
  Block* b = dst.block;
  if (!b->mapped) return staged_copy(dst, off, bytes, (uint8_t*)src, true);
  host_copy(b->mapped + dst.offset + off, src, bytes);
  if (!b->coherent) {
    VkMappedMemoryRange r{VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE};
    r.memory = b->memory;
    r.size = VK_WHOLE_SIZE;
    dev_.fn().vkFlushMappedMemoryRanges(dev_.dev, 1, &r);
  }
}

void MemoryPool::read(const VulkanBuffer& src, VkDeviceSize off, void* dst, size_t bytes) {
  if (bytes == 0) return;
  double t0 = now_s();
  struct Count {
    TransferStats& st;
    size_t bytes;
    double t0;
    ~Count() { st.download_bytes += bytes, st.download_s += now_s() - t0; }
  } count{stats_, bytes, t0};
  Block* b = src.block;
  if (!b->mapped) return staged_copy(src, off, bytes, (uint8_t*)dst, false);
  if (!b->coherent) {
    VkMappedMemoryRange r{VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE};
    r.memory = b->memory;
    r.size = VK_WHOLE_SIZE;
    dev_.fn().vkInvalidateMappedMemoryRanges(dev_.dev, 1, &r);
  }
  host_copy(dst, b->mapped + src.offset + off, bytes);
}

void MemoryPool::zero(const VulkanBuffer& dst, VkDeviceSize off, size_t bytes) {
  if (bytes == 0) return;
  Block* b = dst.block;
  if (b->mapped) {
    std::memset(b->mapped + dst.offset + off, 0, bytes);
    if (!b->coherent) {
      VkMappedMemoryRange r{VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE};
      r.memory = b->memory;
      r.size = VK_WHOLE_SIZE;
      dev_.fn().vkFlushMappedMemoryRanges(dev_.dev, 1, &r);
    }
    return;
  }
  if ((dst.offset + off) % 4 || bytes % 4) {  // vkCmdFillBuffer takes whole words: upload the zeros
    const std::vector<uint8_t> z(bytes, 0);
    return write(dst, off, z.data(), bytes);
  }
  transfer([&](VkCommandBuffer cmd) { dev_.fn().vkCmdFillBuffer(cmd, b->buffer, dst.offset + off, bytes, 0); });
}

void MemoryPool::copy(const VulkanBuffer& src, const VulkanBuffer& dst, const std::vector<std::pair<size_t, size_t>>& at,
                      size_t bytes) {
  Block *a = src.block, *b = dst.block;
  const VkFns& f = dev_.fn();
  if (a->mapped && b->mapped) {  // host-visible (lavapipe, integrated GPUs): plain memcpys
    VkMappedMemoryRange r{VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE};
    r.size = VK_WHOLE_SIZE;
    if (!a->coherent) r.memory = a->memory, f.vkInvalidateMappedMemoryRanges(dev_.dev, 1, &r);
    for (const auto& [from, to] : at) std::memmove(b->mapped + dst.offset + to, a->mapped + src.offset + from, bytes);
    if (!b->coherent) r.memory = b->memory, f.vkFlushMappedMemoryRanges(dev_.dev, 1, &r);
    return;
  }
  std::vector<VkBufferCopy> regions;
  for (const auto& [from, to] : at) regions.push_back({src.offset + from, dst.offset + to, bytes});
  transfer([&](VkCommandBuffer cmd) { f.vkCmdCopyBuffer(cmd, a->buffer, b->buffer, (uint32_t)regions.size(), regions.data()); });
}

// Records `what` (transfer commands) in a staging slot's command buffer, then a barrier that
// makes its writes visible to compute shaders, submits it and waits.
void MemoryPool::transfer(const std::function<void(VkCommandBuffer)>& what) {
  ensure_staging(1);  // a slot's command buffer and fence
  Slot& s = slots_[0];
  wait_slot(s);
  const VkFns& f = dev_.fn();
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  vk_check(f.vkBeginCommandBuffer(s.cmd, &bi), "vkBeginCommandBuffer");
  what(s.cmd);
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  f.vkCmdPipelineBarrier(s.cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr, 0,
                         nullptr);
  vk_check(f.vkEndCommandBuffer(s.cmd), "vkEndCommandBuffer");
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &s.cmd;
  vk_check(f.vkQueueSubmit(dev_.queue, 1, &si, s.fence), "vkQueueSubmit");
  s.busy = true;
  wait_slot(s);
}

}  // namespace rlx::vk
