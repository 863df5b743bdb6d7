#pragma once
// Device memory: DeviceBuffers are suballocated from large blocks (one VkBuffer
// per block). Blocks are device-local; when that memory is also host-visible
// (lavapipe, integrated GPUs) uploads and downloads are plain memcpy through a
// persistent mapping, otherwise they go through a host-visible staging buffer.
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "backends/vulkan/device.h"

namespace rlx::vk {

class MemoryPool;

struct Block {
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize size = 0;
  uint8_t* mapped = nullptr;  // persistent mapping when host-visible
  bool coherent = true;
  bool dedicated = false;  // holds exactly one allocation
  VkDeviceSize used = 0;
  std::map<VkDeviceSize, VkDeviceSize> free;  // offset -> size
};

// A DeviceBuffer living in a Block at `offset` bytes.
class VulkanBuffer : public DeviceBuffer {
 public:
  ~VulkanBuffer() override;
  MemoryPool* pool = nullptr;
  Block* block = nullptr;  // null for an empty buffer
  VkDeviceSize offset = 0, bytes = 0;
};

class MemoryPool {
 public:
  explicit MemoryPool(Device& dev);
  ~MemoryPool();

  // Throws RuntimeError "out of device memory allocating N bytes on DEVICE".
  std::unique_ptr<VulkanBuffer> allocate(size_t capacity_bytes);
  void release(VulkanBuffer& b);

  // Host <-> device copies. The caller guarantees no queued GPU work touches the range.
  void write(const VulkanBuffer& dst, VkDeviceSize byte_offset, const void* src, size_t bytes);
  void read(const VulkanBuffer& src, VkDeviceSize byte_offset, void* dst, size_t bytes);

  // A small host-visible, coherent buffer (e.g. the device error flag).
  std::unique_ptr<Block> host_block(VkDeviceSize bytes);
  void destroy_block(Block& b);

  // Frees blocks that became empty; call only while the GPU is idle.
  void collect();

 private:
  Block* new_block(VkDeviceSize bytes, bool dedicated);
  uint32_t pick_type(uint32_t type_bits, bool host) const;
  void ensure_staging(VkDeviceSize bytes);
  void staged_copy(const VulkanBuffer& b, VkDeviceSize byte_offset, size_t bytes, uint8_t* host, bool to_device);

  Device& dev_;
  VkDeviceSize block_size_ = 0, align_ = 256;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::set<VulkanBuffer*> live_;  // detached from the pool if it dies first
  std::unique_ptr<Block> staging_;
  VkCommandPool cmd_pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
};

}  // namespace rlx::vk
