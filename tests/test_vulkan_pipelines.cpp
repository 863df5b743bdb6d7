// PipelineCache::prepare: compiled mode creates the pipelines its whole plan needs at once, on
// several threads; each distinct (shader, bindings, specialisation) once, none twice.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/vulkan/device.h"
#include "backends/vulkan/pipelines.h"
#include "core/error.h"

namespace {

using rlx::vk::PipelineCache;

std::unique_ptr<rlx::vk::Device> open_device() {
  try {
    return std::make_unique<rlx::vk::Device>(0);
  } catch (const std::exception&) {
    return nullptr;
  }
}

TEST(VulkanPipelines, PrepareCreatesEachDistinctPipelineOnce) {
  auto dev = open_device();
  if (!dev) GTEST_SKIP() << "no Vulkan device";
  PipelineCache pc(*dev);
  // Bindings: more than any of these shaders declares (a layout may hold unused bindings).
  pc.prepare({{"binary", 16, {}}, {"softmax", 16, {}}, {"binary", 16, {}}, {"transpose2d", 16, {}},
              {"no_such_shader", 16, {}}});
  EXPECT_EQ(pc.stats.pipelines, 3);  // the duplicate collapsed, the unknown shader left to get()
  const int before = pc.stats.pipelines;
  for (const char* s : {"binary", "softmax", "transpose2d"}) {
    const rlx::vk::Pipeline& p = pc.get(s, 16, {});
    EXPECT_NE(p.pipeline, (VkPipeline)VK_NULL_HANDLE) << s;
    EXPECT_EQ(p.name, s);
  }
  EXPECT_EQ(pc.stats.pipelines, before) << "get() created a pipeline prepare() had made";
  pc.prepare({{"softmax", 16, {}}});  // nothing new
  EXPECT_EQ(pc.stats.pipelines, before);
  // Another binding count is another layout, so another pipeline.
  pc.prepare({{"softmax", 15, {}}});
  EXPECT_EQ(pc.stats.pipelines, before + 1);
  EXPECT_THROW(pc.get("no_such_shader", 16, {}), rlx::RuntimeError);
  dev->check_validation("PipelineCache::prepare");
}

// Run-time SPIR-V (fused kernels) is made in the same batch as the embedded shaders, under its
// own name, and get() then finds it without creating anything.
TEST(VulkanPipelines, GeneratedShadersArePreparedWithTheRest) {
  auto dev = open_device();
  if (!dev) GTEST_SKIP() << "no Vulkan device";
  PipelineCache pc(*dev);
  const rlx::vk::ShaderBlob* blob = rlx::vk::find_shader("unary");
  ASSERT_NE(blob, nullptr);
  EXPECT_FALSE(pc.has_shader("fused:test"));
  pc.add_shader("fused:test", std::vector<uint32_t>(blob->code, blob->code + blob->bytes / 4));
  EXPECT_TRUE(pc.has_shader("fused:test"));
  pc.prepare({{"fused:test", 8, {}}, {"softmax", 8, {}}, {"fused:test", 8, {}}});
  EXPECT_EQ(pc.stats.pipelines, 2);
  const rlx::vk::Pipeline& p = pc.get("fused:test", 8, {});
  EXPECT_NE(p.pipeline, (VkPipeline)VK_NULL_HANDLE);
  EXPECT_EQ(p.name, "fused:test");
  EXPECT_EQ(pc.stats.pipelines, 2) << "get() created a pipeline prepare() had made";
  dev->check_validation("PipelineCache::prepare with generated SPIR-V");
}

}  // namespace
