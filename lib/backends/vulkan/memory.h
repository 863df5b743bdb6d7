#pragma once
// Device memory: DeviceBuffers are suballocated from large blocks (one VkBuffer
// per block). Blocks are device-local; when that memory is also host-visible
// (lavapipe, integrated GPUs) uploads and downloads are plain memcpy through a
// persistent mapping, otherwise they go through a ring of host-visible staging
// buffers: the host memcpy of one chunk (on several threads for large copies)
// overlaps the device's copy of the previous one.
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "backends/vulkan/device.h"

namespace rlx::vk {

class MemoryPool;

// Byte counts and wall time of host <-> device copies since the last take.
struct TransferStats {
  uint64_t upload_bytes = 0, download_bytes = 0;
  double upload_s = 0, download_s = 0;
};

// A few persistent threads for splitting large memcpys.
class CopyThreads {
 public:
  explicit CopyThreads(unsigned n);
  ~CopyThreads();
  unsigned size() const { return (unsigned)workers_.size() + 1; }
  // Copies `n` bytes, split across the threads (and the caller) when it is large.
  void memcpy(void* dst, const void* src, size_t n);

 private:
  void work(unsigned i);
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable go_, done_;
  uint8_t* dst_ = nullptr;
  const uint8_t* src_ = nullptr;
  size_t n_ = 0, piece_ = 0;
  uint64_t epoch_ = 0;
  unsigned pending_ = 0;
  bool stop_ = false;
};

struct Block {
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize size = 0;
  uint8_t* mapped = nullptr;  // persistent mapping when host-visible
  bool coherent = true;
  bool dedicated = false;  // holds exactly one allocation
  VkDeviceSize used = 0;
  std::map<VkDeviceSize, VkDeviceSize> free;  // offset -> size
  uint32_t idle = 0;  // collect() calls it has been empty through
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
  // Zero bits over the range, on the device (vkCmdFillBuffer; a memset where the memory is mapped).
  void zero(const VulkanBuffer& dst, VkDeviceSize byte_offset, size_t bytes);
  // Device-to-device copies of `bytes` each (src offset, dst offset), one submission (vkCmdCopyBuffer
  // regions; memcpys where both are mapped). The caller guarantees no queued GPU work touches them.
  void copy(const VulkanBuffer& src, const VulkanBuffer& dst, const std::vector<std::pair<size_t, size_t>>& at, size_t bytes);

  // A small host-visible, coherent buffer (e.g. the device error flag).
  std::unique_ptr<Block> host_block(VkDeviceSize bytes);
  void destroy_block(Block& b);

  // Frees blocks that have been empty through the last few calls (RLX_VK_KEEP_BLOCKS, default 4;
  // 0 frees every empty block but one spare at once); call only while the GPU is idle. Keeping
  // them lets the next runs (of this or another session on the device) reuse the memory instead
  // of allocating it again: on the H200, freeing and re-allocating an eager run's ~900 MiB every
  // run doubled the wall time of another session's compiled replay (docs/benchmarks.md).
  void collect();

  TransferStats take_stats() { return std::exchange(stats_, TransferStats{}); }

 private:
  Block* new_block(VkDeviceSize bytes, bool dedicated);
  bool trim();  // frees the blocks collect() kept empty (out of memory); false when there was none
  uint32_t keep_collects_ = 4;
  uint32_t pick_type(uint32_t type_bits, bool host) const;
  struct Slot {  // one staging buffer of the ring, with its own command buffer and fence
    std::unique_ptr<Block> block;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    bool busy = false;
  };
  void ensure_staging(VkDeviceSize bytes);
  void transfer(const std::function<void(VkCommandBuffer)>& what);
  void staged_copy(const VulkanBuffer& b, VkDeviceSize byte_offset, size_t bytes, uint8_t* host, bool to_device);
  void submit_slot(Slot& s, const VulkanBuffer& b, VkDeviceSize dev_off, size_t n, bool to_device);
  void wait_slot(Slot& s);
  void host_copy(void* dst, const void* src, size_t n);

  Device& dev_;
  VkDeviceSize block_size_ = 0, align_ = 256;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::set<VulkanBuffer*> live_;  // detached from the pool if it dies first
  std::vector<Slot> slots_;
  VkDeviceSize slot_bytes_ = 0;
  VkCommandPool cmd_pool_ = VK_NULL_HANDLE;
  std::unique_ptr<CopyThreads> threads_;  // started on the first large copy
  TransferStats stats_;
};

}  // namespace rlx::vk
