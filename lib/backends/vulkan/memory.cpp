#include "backends/vulkan/memory.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace rlx::vk {

namespace {

constexpr VkDeviceSize kMiB = 1024 * 1024;
constexpr VkDeviceSize kStagingMax = 64 * kMiB;
constexpr VkBufferUsageFlags kUsage =
    VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;

VkDeviceSize round_up(VkDeviceSize v, VkDeviceSize a) { return (v + a - 1) / a * a; }

bool is_oom(VkResult r) { return r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY; }

}  // namespace

VulkanBuffer::~VulkanBuffer() {
  if (pool) pool->release(*this);
}

MemoryPool::MemoryPool(Device& dev) : dev_(dev) {
  // Blocks small enough to be bound whole; big requests get a block of their own.
  block_size_ = std::min<VkDeviceSize>({64 * kMiB, dev.caps.max_storage_range, dev.caps.max_allocation});
  align_ = std::max<VkDeviceSize>(256, dev.caps.min_storage_align);
  VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pi.queueFamilyIndex = dev.queue_family;
  vk_check(dev.fn().vkCreateCommandPool(dev.dev, &pi, nullptr, &cmd_pool_), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = cmd_pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  vk_check(dev.fn().vkAllocateCommandBuffers(dev.dev, &ai, &cmd_), "vkAllocateCommandBuffers");
}

MemoryPool::~MemoryPool() {
  for (VulkanBuffer* b : live_) b->pool = nullptr, b->block = nullptr;
  for (auto& b : blocks_) destroy_block(*b);
  if (staging_) destroy_block(*staging_);
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
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = type;
  r = f.vkAllocateMemory(dev_.dev, &ai, nullptr, &b->memory);
  if (r != VK_SUCCESS) {
    f.vkDestroyBuffer(dev_.dev, b->buffer, nullptr);
    if (is_oom(r)) throw oom();
    vk_check(r, "vkAllocateMemory");
  }
  vk_check(f.vkBindBufferMemory(dev_.dev, b->buffer, b->memory, 0), "vkBindBufferMemory");
  VkMemoryPropertyFlags props = dev_.mem.memoryTypes[type].propertyFlags;
  if (props & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) {
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
    blk = new_block(bytes, true);
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
    if (empty && !b.dedicated && !kept_spare) {
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
  bytes = std::min(round_up(bytes, kMiB), kStagingMax);
  if (staging_ && staging_->size >= bytes) return;
  if (staging_) destroy_block(*staging_);
  staging_ = host_block(bytes);
}

void MemoryPool::staged_copy(const VulkanBuffer& b, VkDeviceSize byte_offset, size_t bytes, uint8_t* host,
                             bool to_device) {
  const VkFns& f = dev_.fn();
  ensure_staging(bytes);
  VkMappedMemoryRange range{VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE};
  range.memory = staging_->memory;
  range.size = VK_WHOLE_SIZE;
  for (size_t done = 0; done < bytes;) {
    size_t n = std::min<size_t>(bytes - done, staging_->size);
    if (to_device) {
      std::memcpy(staging_->mapped, host + done, n);
      if (!staging_->coherent) f.vkFlushMappedMemoryRanges(dev_.dev, 1, &range);
    }
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    vk_check(f.vkBeginCommandBuffer(cmd_, &bi), "vkBeginCommandBuffer");
    VkBufferCopy c{};
    c.size = n;
    if (to_device) {
      c.dstOffset = b.offset + byte_offset + done;
      f.vkCmdCopyBuffer(cmd_, staging_->buffer, b.block->buffer, 1, &c);
    } else {
      c.srcOffset = b.offset + byte_offset + done;
      f.vkCmdCopyBuffer(cmd_, b.block->buffer, staging_->buffer, 1, &c);
    }
    vk_check(f.vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
    dev_.submit_and_wait(cmd_);
    if (!to_device) {
      if (!staging_->coherent) f.vkInvalidateMappedMemoryRanges(dev_.dev, 1, &range);
      std::memcpy(host + done, staging_->mapped, n);
    }
    done += n;
  }
}

void MemoryPool::write(const VulkanBuffer& dst, VkDeviceSize off, const void* src, size_t bytes) {
  if (bytes == 0) return;
  Block* b = dst.block;
  if (!b->mapped) return staged_copy(dst, off, bytes, (uint8_t*)src, true);
  std::memcpy(b->mapped + dst.offset + off, src, bytes);
  if (!b->coherent) {
    VkMappedMemoryRange r{VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE};
    r.memory = b->memory;
    r.size = VK_WHOLE_SIZE;
    dev_.fn().vkFlushMappedMemoryRanges(dev_.dev, 1, &r);
  }
}

void MemoryPool::read(const VulkanBuffer& src, VkDeviceSize off, void* dst, size_t bytes) {
  if (bytes == 0) return;
  Block* b = src.block;
  if (!b->mapped) return staged_copy(src, off, bytes, (uint8_t*)dst, false);
  if (!b->coherent) {
    VkMappedMemoryRange r{VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE};
    r.memory = b->memory;
    r.size = VK_WHOLE_SIZE;
    dev_.fn().vkInvalidateMappedMemoryRanges(dev_.dev, 1, &r);
  }
  std::memcpy(dst, b->mapped + src.offset + off, bytes);
}

}  // namespace rlx::vk
