// The Vulkan executor: launch() lowers a kernel to dispatches and records them
// into the current command buffer (barriers only where a dispatch touches bytes
// an earlier dispatch since the last barrier wrote, or writes bytes it read);
// flush() submits once and waits on a fence; record()/replay() build a command
// buffer once, with descriptor sets allocated for its lifetime, and resubmit it.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>
#include <utility>

#include "backends/vulkan/kernels.h"
#include "backends/vulkan/vulkan_executor.h"
#include "core/error.h"
#include "ir/op_registry.h"

namespace rlx {
namespace vk {
namespace {

constexpr uint32_t kSetsPerPool = 512;
constexpr uint32_t kDescriptorsPerPool = kSetsPerPool * 8;
constexpr uint32_t kLiveQueries = 4096;

// Descriptor sets from a growing list of pools; reset() recycles them all.
class DescriptorArena {
 public:
  explicit DescriptorArena(Device& dev) : dev_(dev) {}
  ~DescriptorArena() {
    for (VkDescriptorPool p : pools_) dev_.fn().vkDestroyDescriptorPool(dev_.dev, p, nullptr);
  }
  VkDescriptorSet allocate(VkDescriptorSetLayout layout) {
    for (;;) {
      bool fresh = current_ == pools_.size();
      if (fresh) pools_.push_back(new_pool());
      VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
      ai.descriptorPool = pools_[current_];
      ai.descriptorSetCount = 1;
      ai.pSetLayouts = &layout;
      VkDescriptorSet set;
      VkResult r = dev_.fn().vkAllocateDescriptorSets(dev_.dev, &ai, &set);
      if (r == VK_SUCCESS) return set;
      if (fresh || (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL))
        vk_check(r, "vkAllocateDescriptorSets");
      ++current_;
    }
  }
  void reset() {
    for (VkDescriptorPool p : pools_) dev_.fn().vkResetDescriptorPool(dev_.dev, p, 0);
    current_ = 0;
  }

 private:
  VkDescriptorPool new_pool() {
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kDescriptorsPerPool};
    VkDescriptorPoolCreateInfo ci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    ci.maxSets = kSetsPerPool;
    ci.poolSizeCount = 1;
    ci.pPoolSizes = &size;
    VkDescriptorPool p;
    vk_check(dev_.fn().vkCreateDescriptorPool(dev_.dev, &ci, nullptr, &p), "vkCreateDescriptorPool");
    return p;
  }
  Device& dev_;
  std::vector<VkDescriptorPool> pools_;
  size_t current_ = 0;
};

// Byte ranges read and written since the last barrier.
class Hazards {
 public:
  bool conflicts(const Dispatch& d) const {
    for (const Binding& b : d.bindings) {
      if (!b.tracked) continue;
      if (overlaps(writes_, b) || (b.write && overlaps(reads_, b))) return true;
    }
    return false;
  }
  void add(const Dispatch& d) {
    for (const Binding& b : d.bindings)
      if (b.tracked && b.hi > b.lo) (b.write ? writes_ : reads_).push_back({b.buffer, b.lo, b.hi});
  }
  void clear() {
    reads_.clear();
    writes_.clear();
  }

 private:
  struct Range {
    VkBuffer buf;
    VkDeviceSize lo, hi;
  };
  static bool overlaps(const std::vector<Range>& rs, const Binding& b) {
    for (const Range& r : rs)
      if (r.buf == b.buffer && r.lo < b.hi && b.lo < r.hi) return true;
    return false;
  }
  std::vector<Range> reads_, writes_;
};

void compute_barrier(const VkFns& f, VkCommandBuffer cmd) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  f.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0,
                         nullptr, 0, nullptr);
}

// A command buffer of dispatches, with what is needed to report on it after it ran.
class Stream {
 public:
  Stream(Device& dev, PipelineCache& pipes, VkCommandPool pool, uint32_t query_capacity)
      : dev_(dev), pipes_(pipes), pool_(pool), arena_(dev), query_capacity_(query_capacity) {
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    vk_check(dev.fn().vkAllocateCommandBuffers(dev.dev, &ai, &cmd_), "vkAllocateCommandBuffers");
    // Queries 0 and 1 time the whole command buffer; per-kernel pairs follow.
    query_capacity_ += 2;
    queries_used_ = 2;
    if (dev.caps.timestamps) {
      VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
      qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
      qi.queryCount = query_capacity_;
      vk_check(dev.fn().vkCreateQueryPool(dev.dev, &qi, nullptr, &queries_), "vkCreateQueryPool");
    }
  }
  ~Stream() {
    if (queries_) dev_.fn().vkDestroyQueryPool(dev_.dev, queries_, nullptr);
    dev_.fn().vkFreeCommandBuffers(dev_.dev, pool_, 1, &cmd_);
  }

  uint32_t next_id() const { return (uint32_t)kernels_.size(); }
  bool empty() const { return dispatches_ == 0; }
  // True when one more timed kernel would not fit in the query pool.
  bool full() const { return queries_ && queries_used_ + 2 > query_capacity_; }
  const std::string& label(uint32_t id) const { return kernels_.at(id).label; }
  const std::string& op(uint32_t id) const { return kernels_.at(id).op; }

  // Records the dispatches of kernel `k` (id next_id()). With `timed`, the kernel
  // runs alone between two timestamps.
  void add(const Kernel& k, const std::vector<Dispatch>& ds, bool timed) {
    const VkFns& f = dev_.fn();
    begin();
    Info info;
    info.label = k.label;
    info.op = k.node ? ir::op_name(k.node->op) : "fused";
    info.flops = k.flops;
    info.bytes = k.bytes;
    timed = timed && queries_ && !full();
    if (timed) {
      compute_barrier(f, cmd_);
      hazards_.clear();
      info.query = queries_used_;
      queries_used_ += 2;
      f.vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, info.query);
    }
    for (const Dispatch& d : ds) record(d);
    if (timed) f.vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, info.query + 1);
    kernels_.push_back(std::move(info));
  }

  // Ends recording (idempotent until the next add()).
  void finish() {
    if (!begun_ || ended_) return;
    const VkFns& f = dev_.fn();
    // Make the results visible to host reads (download, error flag) and transfers.
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT;
    f.vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                           VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, nullptr, 0,
                           nullptr);
    if (queries_) f.vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, 1);
    vk_check(f.vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
    ended_ = true;
  }

  // Device seconds the last submission of this stream took (0 without timestamps).
  double device_seconds() const {
    if (!queries_) return 0;
    uint64_t ts[2];
    vk_check(dev_.fn().vkGetQueryPoolResults(dev_.dev, queries_, 0, 2, sizeof ts, ts, 8,
                                             VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
             "vkGetQueryPoolResults");
    uint64_t mask = dev_.caps.timestamp_bits >= 64 ? ~0ull : (1ull << dev_.caps.timestamp_bits) - 1;
    return ((ts[1] - ts[0]) & mask) * dev_.caps.timestamp_period_ns * 1e-9;
  }

  VkCommandBuffer cmd() const { return cmd_; }

  // Per-kernel seconds of the timed kernels (after the stream ran).
  void append_profile(std::vector<ProfileEntry>& out) const {
    bool any = false;
    for (const Info& i : kernels_) any = any || i.query != kNoQuery;
    if (!any) return;
    std::vector<uint64_t> ts(queries_used_);
    vk_check(dev_.fn().vkGetQueryPoolResults(dev_.dev, queries_, 2, queries_used_ - 2, (ts.size() - 2) * 8,
                                             ts.data() + 2, 8,
                                             VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
             "vkGetQueryPoolResults");
    uint64_t mask = dev_.caps.timestamp_bits >= 64 ? ~0ull : (1ull << dev_.caps.timestamp_bits) - 1;
    for (const Info& i : kernels_) {
      if (i.query == kNoQuery) continue;
      uint64_t dt = (ts[i.query + 1] - ts[i.query]) & mask;
      out.push_back({i.label, i.op, dt * dev_.caps.timestamp_period_ns * 1e-9, i.flops, i.bytes});
    }
  }

  // Device memory that lives as long as this stream's recorded commands. A buffer handed to an
  // earlier kernel is handed out again (the smallest that is large enough): the hazard tracking
  // puts a barrier between that kernel's last use and the new writes, as for any tensor. Without
  // the reuse a compiled plan kept every kernel's scratch at once (ResNet-50 at batch 32, its
  // convolutions as products: 4.2 GB of f32 im2col columns instead of the largest one's 0.34).
  TensorRef scratch(MemoryPool& mem, int64_t floats) {
    const size_t bytes = (size_t)floats * 4;
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i)
      if (free_[i]->capacity >= bytes && (best == free_.size() || free_[i]->capacity < free_[best]->capacity)) best = i;
    VulkanBuffer* b;
    if (best < free_.size()) {
      b = free_[best];
      free_.erase(free_.begin() + (std::ptrdiff_t)best);
    } else {
      scratch_.push_back(mem.allocate(bytes));
      b = scratch_.back().get();
    }
    busy_.push_back(b);
    return {b, 0, {floats}, DType::f32};
  }
  // The kernel being lowered is done: its scratch may serve the kernels lowered after it.
  void end_kernel() {
    free_.insert(free_.end(), busy_.begin(), busy_.end());
    busy_.clear();
  }

  // Forget everything recorded (the command buffer must have completed).
  void reset() {
    free_.clear();
    busy_.clear();
    scratch_.clear();
    kernels_.clear();
    arena_.reset();
    hazards_.clear();
    begun_ = ended_ = false;
    dispatches_ = 0;
    queries_used_ = 2;
  }

 private:
  static constexpr uint32_t kNoQuery = ~0u;
  struct Info {
    std::string label, op;
    double flops = 0, bytes = 0;
    uint32_t query = kNoQuery;
  };

  void begin() {
    if (begun_) return;
    const VkFns& f = dev_.fn();
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    vk_check(f.vkBeginCommandBuffer(cmd_, &bi), "vkBeginCommandBuffer");
    if (queries_) {
      f.vkCmdResetQueryPool(cmd_, queries_, 0, query_capacity_);
      f.vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_, 0);
    }
    begun_ = true;
  }

  void record(const Dispatch& d) {
    const VkFns& f = dev_.fn();
    const Pipeline& p = pipes_.get(d.shader, (uint32_t)d.bindings.size(), d.spec);
    if (hazards_.conflicts(d)) {
      compute_barrier(f, cmd_);
      hazards_.clear();
    }
    hazards_.add(d);
    VkDescriptorSet set = arena_.allocate(p.set_layout);
    std::vector<VkDescriptorBufferInfo> infos(d.bindings.size());
    for (size_t i = 0; i < infos.size(); ++i) infos[i] = {d.bindings[i].buffer, d.bindings[i].offset, d.bindings[i].range};
    VkWriteDescriptorSet w{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w.dstSet = set;
    w.dstBinding = 0;
    w.descriptorCount = (uint32_t)infos.size();
    w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w.pBufferInfo = infos.data();
    f.vkUpdateDescriptorSets(dev_.dev, 1, &w, 0, nullptr);
    f.vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
    f.vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
    if (!d.push.empty())
      f.vkCmdPushConstants(cmd_, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)d.push.size() * 4, d.push.data());
    f.vkCmdDispatch(cmd_, d.groups[0], d.groups[1], d.groups[2]);
    ++dispatches_;
  }

  Device& dev_;
  PipelineCache& pipes_;
  VkCommandPool pool_;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  DescriptorArena arena_;
  Hazards hazards_;
  VkQueryPool queries_ = VK_NULL_HANDLE;
  uint32_t query_capacity_ = 0, queries_used_ = 0;
  std::vector<Info> kernels_;
  std::vector<std::unique_ptr<VulkanBuffer>> scratch_;
  std::vector<VulkanBuffer*> free_, busy_;  // scratch_ handed out to earlier kernels / to the current one
  size_t dispatches_ = 0;
  bool begun_ = false, ended_ = false;
};

struct VkRecording : Recording {
  std::vector<Kernel> kernels;
  std::unique_ptr<Stream> plain, timed;  // built on first use
};

class VulkanExecutor final : public Executor {
 public:
  explicit VulkanExecutor(int device)
      : dev_(device), mem_(dev_), pipes_(dev_), fused_(pipes_), env_{dev_, pipes_, fused_, {}, {}, {}} {
    VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pi.queueFamilyIndex = dev_.queue_family;
    vk_check(dev_.fn().vkCreateCommandPool(dev_.dev, &pi, nullptr, &cmd_pool_), "vkCreateCommandPool");
    error_ = mem_.host_block(16);
    std::memset(error_->mapped, 0, 16);
    dummy_ = mem_.host_block(256);
    std::memset(dummy_->mapped, 0, 256);
    env_.error = {error_->buffer, 0, 16, 0, 16, true, false};
    env_.dummy = {dummy_->buffer, 0, 256, 0, 0, false, false};
    env_.rope_table = [this](int64_t dims, double base, double scale) -> const VulkanBuffer& {
      return rope_table(dims, base, scale);
    };
    env_.scratch = [this](int64_t floats) { return lowering_->scratch(mem_, floats); };
    env_.const_table = [this](const std::vector<uint32_t>& words) -> const VulkanBuffer& { return const_table(words); };
    live_ = std::make_unique<Stream>(dev_, pipes_, cmd_pool_, kLiveQueries);
  }

  ~VulkanExecutor() override {
    dev_.fn().vkDeviceWaitIdle(dev_.dev);
    live_.reset();
    for (auto& [key, tab] : rope_tables_) mem_.destroy_block(*tab.block);
    for (auto& [key, tab] : const_tables_) mem_.destroy_block(*tab.block);
    mem_.destroy_block(*error_);
    mem_.destroy_block(*dummy_);
    dev_.fn().vkDestroyCommandPool(dev_.dev, cmd_pool_, nullptr);
  }

  std::string name() const override { return "vulkan"; }
  std::string description() const override { return dev_.description(); }

  std::unique_ptr<DeviceBuffer> allocate(size_t bytes) override { return mem_.allocate(bytes); }

  // f16/bf16 live in 2 bytes on the device where it has 16-bit storage buffers; every other
  // dtype (and f16/bf16 without 16-bit storage) as f32: upload converts the host elements to
  // the storage dtype and download converts back; same-dtype copies are plain byte copies.
  DType storage_dtype(DType t) const override { return device_storage(dev_.caps, t); }
  // attention*.comp's ".h16" variants read 2-byte q/k/v where the device has 16-bit storage, but
  // where f16/bf16 products run on tensor cores the scalar kernel loses to the unfused q k^T and
  // p v on them (ViT-S/16 f16 on the H200: 12.05-12.15 ms fused against 11.35-11.39 ms). So:
  // fused where products have no tensor cores (lavapipe), and f16 on a device with
  // VK_NV_cooperative_matrix, where attention_coop.comp (tensor-core flash attention) runs it
  // (ViT-S/16 f16 on the H200: 9.52-9.59 ms fused against 10.65-10.76 ms; docs/benchmarks.md),
  // and bf16 on a device listing bf16 VK_KHR_cooperative_matrix shapes, where the prebuilt
  // attention_cm1.bf16 runs it (ViT-S/16 bf16: 8.53-8.62 ms fused against 9.38-9.47 ms);
  // RLX_VK_FLASH_COOP=0 turns those kernels, and so this fusion, off.
  bool half_attention(DType t) const override {
    if (!dev_.caps.storage16 || widen16_forced()) return false;
    if (!dev_.caps.coop_nv && !dev_.caps.coop_khr) return true;
    return flash_attention_shape(dev_.caps, t == DType::f16 ? 1u : t == DType::bf16 ? 2u : 0u) != nullptr;
  }
  // f16 attention_coop reads q, k, v rows at strides that are multiples of 8 halves (16-byte
  // loads) and writes o at any strides; RLX_VK_ATTENTION_VIEWS=0 turns the pass off, =1 on for
  // every dtype (where no kernel reads strides, kernels.cpp copies through scratch: tests), =2 on
  // without the linear products' reordering (passes::OptOptions::attention_views_linear).
  int64_t attention_views(bool* f16, bool* all, bool* linear) const override {
    const char* e = std::getenv("RLX_VK_ATTENTION_VIEWS");
    *all = e && *e == '1';
    *linear = !(e && *e == '2');
    *f16 = !(e && *e == '0') && half_attention(DType::f16) && flash_attention_shape(dev_.caps, 1u) != nullptr;
    return 8;
  }

  // f64 and the ONNX-only integer widths (i16, u16, u32, u64) have no storage here: they would
  // travel as f32 (rounding f64, and integers beyond 2^24), so a graph holding one is refused
  // when planned (docs/backends.md); so is bit_shift (its wrap-around needs real integers).
  void check_dtypes(const std::string& where, const ir::Node& n, const std::vector<DType>& inputs,
                    DType output) const override {
    auto onnx_only = [](DType t) { return !dtype_traits(t).json; };
    std::vector<DType> all(inputs);
    all.push_back(output);
    for (DType t : all)
      if (onnx_only(t))
        throw RuntimeError(where + ": the Vulkan backend has no " + dtype_name(t) + " tensors (" +
                           (t == DType::f64 ? "no float64 shaders; f32 storage would round every value"
                                            : "integers live as f32 on the device") +
                           "); run this model with --backend cpu");
    if (n.op == ir::Op::BitShift)
      throw RuntimeError(where + ": the Vulkan backend has no bit_shift kernel (integers live as f32 on the device); "
                         "run this model with --backend cpu");
  }

  void upload(DeviceBuffer& dst, size_t offset, const void* src, size_t bytes, DType dtype) override {
    if (!live_->empty()) flush();  // queued kernels must see the old contents
    const size_t n = bytes / dtype_size(dtype);
    const DType st = storage_dtype(dtype);
    const auto& b = checked(dst, offset, n * dtype_size(st), "upload");
    if (st == dtype) {
      mem_.write(b, offset, src, bytes);
    } else {
      if (is_integer(dtype)) check_exact_in_f32(src, dtype, n);
      std::vector<float> tmp(n);
      convert_elements(src, dtype, tmp.data(), DType::f32, (int64_t)n);
      mem_.write(b, offset, tmp.data(), n * 4);
    }
    note_transfer(true);
  }

  void download(const DeviceBuffer& src, size_t offset, void* dst, size_t bytes, DType dtype) override {
    if (!live_->empty()) flush();
    const size_t n = bytes / dtype_size(dtype);
    const DType st = storage_dtype(dtype);
    const auto& b = checked(src, offset, n * dtype_size(st), "download");
    if (st == dtype) {
      mem_.read(b, offset, dst, bytes);
    } else {
      std::vector<float> tmp(n);
      mem_.read(b, offset, tmp.data(), n * 4);
      convert_elements(tmp.data(), DType::f32, dst, dtype, (int64_t)n);
    }
    note_transfer(false);
  }

  void zero(DeviceBuffer& dst, size_t offset, size_t bytes) override {
    if (!live_->empty()) flush();  // queued kernels write before the zeros
    mem_.zero(checked(dst, offset, bytes, "zero"), offset, bytes);
  }

  void copy_ranges(const DeviceBuffer& src, DeviceBuffer& dst, const std::vector<std::pair<size_t, size_t>>& at,
                   size_t bytes) override {
    if (!live_->empty()) flush();  // queued kernels first
    for (const auto& [from, to] : at) {
      checked(src, from, bytes, "copy");
      checked(dst, to, bytes, "copy");
    }
    if (bytes && !at.empty()) mem_.copy(static_cast<const VulkanBuffer&>(src), static_cast<const VulkanBuffer&>(dst), at, bytes);
  }

  // concat() writes only the inputs not already in place (Kernel::inputs_in_output).
  bool appends_in_place() const override { return true; }

  DeviceStats take_device_stats() override {
    DeviceStats s = std::exchange(stats_, DeviceStats{});
    s.has_device_time = dev_.caps.timestamps;
    return s;
  }

  void launch(const Kernel& k) override {
    if (k.output.numel() == 0) return;  // nothing to compute
    if (profiling_ && live_->full()) flush();
    lowering_ = live_.get();
    auto ds = lower_kernel(env_, k, live_->next_id());
    live_->end_kernel();
    live_->add(k, ds, profiling_);
  }

  void flush() override {
    if (live_->empty()) {
      live_->reset();
      dev_.check_validation("during flush()");
      return;
    }
    struct Reset {
      Stream& s;
      ~Reset() { s.reset(); }
    } reset{*live_};
    run(*live_);
  }

  std::unique_ptr<Recording> record(const std::vector<Kernel>& kernels) override {
    auto rec = std::make_unique<VkRecording>();
    rec->kernels = kernels;
    (profiling_ ? rec->timed : rec->plain) = build(kernels, profiling_);
    return rec;
  }

  void replay(Recording& r) override {
    auto& rec = static_cast<VkRecording&>(r);
    if (!live_->empty()) flush();
    auto& s = profiling_ ? rec.timed : rec.plain;
    if (!s) s = build(rec.kernels, profiling_);
    run(*s);
  }

  uint64_t validation_errors() const { return dev_.inst->validation_errors.load(); }
  void inject_validation_error(const std::string& msg) {
    const VkFns& f = dev_.fn();
    if (!dev_.inst->validation || !f.vkSubmitDebugUtilsMessageEXT) return;
    VkDebugUtilsMessengerCallbackDataEXT data{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CALLBACK_DATA_EXT};
    data.pMessage = msg.c_str();
    f.vkSubmitDebugUtilsMessageEXT(dev_.inst->instance, VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
                                   VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT, &data);
  }

 private:
  // Adds the copy just made to the stats and, when profiling, to the profile.
  void note_transfer(bool up) {
    TransferStats t = mem_.take_stats();
    uint64_t bytes = up ? t.upload_bytes : t.download_bytes;
    double secs = up ? t.upload_s : t.download_s;
    (up ? stats_.upload_bytes : stats_.download_bytes) += bytes;
    (up ? stats_.upload_s : stats_.download_s) += secs;
    if (profiling_) profile_.push_back({up ? "upload" : "download", "transfer", secs, 0, (double)bytes});
  }

  const VulkanBuffer& checked(const DeviceBuffer& b, size_t offset, size_t n, const char* what) const {
    if (offset + n > b.capacity)
      throw RuntimeError(std::string("internal: ") + what + " of " + std::to_string(n) + " bytes at offset " +
                         std::to_string(offset) + " overruns a buffer of " + std::to_string(b.capacity) + " bytes");
    return static_cast<const VulkanBuffer&>(b);
  }

  // Integers travel as f32 on the device (phase 1): refuse one f32 cannot hold exactly.
  static void check_exact_in_f32(const void* src, DType dtype, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const int64_t v = element_as_i64(src, dtype, (int64_t)i);
      if (v > (1 << 24) || v < -(1 << 24))
        throw RuntimeError("integer value " + std::to_string(v) + " at element " + std::to_string(i) +
                           " does not fit exactly in the Vulkan backend's f32 storage (|v| <= 2^24 = 16777216); "
                           "run on the CPU (--backend cpu) for integers of this size");
    }
  }

  std::unique_ptr<Stream> build(const std::vector<Kernel>& kernels, bool timed) {
    auto s = std::make_unique<Stream>(dev_, pipes_, cmd_pool_, timed ? 2 * (uint32_t)kernels.size() : 0);
    lowering_ = s.get();
    // Lower every kernel first, so that the pipelines the whole plan needs are created at once
    // (PipelineCache::prepare, on several threads), then record.
    std::vector<std::pair<const Kernel*, std::vector<Dispatch>>> lowered;
    uint32_t id = s->next_id();
    for (size_t i = 0; i < kernels.size(); ++i) {
      const Kernel& k = kernels[i];
      if (k.output.numel() == 0) continue;
      ProductEpilogue epi;  // a convolution's ReLU (+ residual) consumer folded into its product
      const bool fold = product_epilogue_for(dev_.caps, kernels, i, epi);
      lowered.emplace_back(&k, lower_kernel(env_, k, id++, fold ? &epi : nullptr));
      s->end_kernel();
      if (fold && epi.done) ++i;  // the consumer's output is written; its kernel is not run
    }
    std::vector<PipelineCache::Request> needed;
    for (const auto& [k, ds] : lowered)
      for (const Dispatch& d : ds)
        needed.push_back({d.shader, (uint32_t)d.bindings.size(), d.spec});
    pipes_.prepare(needed);
    for (const auto& [k, ds] : lowered) s->add(*k, ds, timed);
    s->finish();
    return s;
  }

  // Submits a stream, waits, and reports device-side errors and profiles.
  void run(Stream& s) {
    if (s.empty()) return;
    s.finish();
    dev_.submit_and_wait(s.cmd());
    stats_.device_s += s.device_seconds();
    mem_.collect();
    if (profiling_) s.append_profile(profile_);
    uint32_t* err = (uint32_t*)error_->mapped;
    if (err[0]) {
      uint32_t id = err[0] - 1;
      float bad;
      std::memcpy(&bad, &err[1], 4);
      uint32_t vocab = err[2];
      bool signed_range = err[3] == 1;  // gather/gather_elements: negative indices count from the end
      const bool inexact = err[3] == 2;  // an integer result beyond the f32 storage's exact range
      std::memset(err, 0, 16);
      char value[32];
      std::snprintf(value, sizeof value, "%.9g", bad);
      std::string lo = signed_range ? "-" + std::to_string(vocab) : "0";
      // Kernel labels of graph nodes already read "file: node 'id' (op) at nodes[k]".
      const std::string& label = s.label(id);
      std::string who = label.find("node '") != std::string::npos ? label : "node '" + label + "' (" + s.op(id) + ")";
      if (inexact)
        throw RuntimeError(who + ": integer result " + value + " does not fit exactly in the Vulkan backend's f32 storage (|v| <= 2^24 = " +
                           std::to_string(vocab) + "); run on the CPU (--backend cpu) for integers of this size");
      throw RuntimeError(who + ": index " + value + " is outside [" + lo + ", " + std::to_string(vocab) + ")");
    }
    dev_.check_validation("while running kernels");
  }

  const VulkanBuffer& rope_table(int64_t dims, double base, double scale) {
    auto key = std::make_tuple(dims, base, scale);
    auto it = rope_tables_.find(key);
    if (it != rope_tables_.end()) return it->second.view;
    int64_t half = std::max<int64_t>(1, dims / 2);
    std::vector<uint32_t> t(2 * half);
    for (int64_t i = 0; i < half; ++i) {
      // turns per position, reduced mod 1, as a 64-bit fraction
      long double f = scale * std::pow((long double)base, -2.0L * i / dims) / (2 * 3.14159265358979323846264338L);
      f -= std::floor(f);
      long double scaled = std::ldexp(f, 64);
      uint64_t F = scaled >= 18446744073709551615.0L ? 0 : (uint64_t)scaled;
      t[2 * i] = (uint32_t)(F >> 32);
      t[2 * i + 1] = (uint32_t)F;
    }
    // A block of its own: written from the host at once, it must not alias
    // memory that queued kernels may still read.
    auto& tab = rope_tables_[key];
    tab.block = mem_.host_block(t.size() * 4);
    std::memcpy(tab.block->mapped, t.data(), t.size() * 4);
    tab.view.block = tab.block.get();
    tab.view.bytes = t.size() * 4;
    tab.view.capacity = t.size() * 4;
    return tab.view;
  }

  const VulkanBuffer& const_table(const std::vector<uint32_t>& words) {
    auto it = const_tables_.find(words);
    if (it != const_tables_.end()) return it->second.view;
    auto& tab = const_tables_[words];  // a block of its own, like the rope tables
    size_t n = std::max<size_t>(1, words.size());
    tab.block = mem_.host_block(n * 4);
    std::memcpy(tab.block->mapped, words.data(), words.size() * 4);
    tab.view.block = tab.block.get();
    tab.view.bytes = n * 4;
    tab.view.capacity = n * 4;
    return tab.view;
  }

  Device dev_;
  MemoryPool mem_;
  PipelineCache pipes_;
  FusedCodegen fused_;
  LowerEnv env_;
  std::unique_ptr<Block> error_, dummy_;
  struct Table {
    std::unique_ptr<Block> block;
    VulkanBuffer view;  // pool-less view of `block`
  };
  std::map<std::tuple<int64_t, double, double>, Table> rope_tables_;
  std::map<std::vector<uint32_t>, Table> const_tables_;
  VkCommandPool cmd_pool_ = VK_NULL_HANDLE;
  std::unique_ptr<Stream> live_;
  Stream* lowering_ = nullptr;  // the stream the kernel being lowered is recorded into
  DeviceStats stats_;
};

}  // namespace
}  // namespace vk

std::unique_ptr<Executor> make_vulkan_executor(int device) { return std::make_unique<vk::VulkanExecutor>(device); }

std::vector<DeviceInfo> vulkan_devices() {
  vk::Instance inst(false);
  std::vector<DeviceInfo> out;
  for (VkPhysicalDevice pd : inst.physical_devices()) {
    vk::DeviceCaps c = inst.query(pd);
    DeviceInfo d;
    d.name = c.name;
    d.type = c.type;
    d.memory_bytes = c.device_local_bytes;
    d.properties = c.describe();
    out.push_back(std::move(d));
  }
  if (out.empty())
    throw RuntimeError("no Vulkan device: the loader found no driver; install one, e.g. "
                       "`apt-get install mesa-vulkan-drivers` (CPU) or the GPU vendor's driver");
  return out;
}

uint64_t vulkan_validation_error_count(const Executor& e) {
  auto* v = dynamic_cast<const vk::VulkanExecutor*>(&e);
  return v ? v->validation_errors() : 0;
}

void vulkan_inject_validation_error(Executor& e, const std::string& message) {
  if (auto* v = dynamic_cast<vk::VulkanExecutor*>(&e)) v->inject_validation_error(message);
}

}  // namespace rlx
