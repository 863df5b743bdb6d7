#pragma once
// Shared by the Vulkan executor tests (test_vulkan, test_vulkan_half): device 0's executor and
// nodes built as the loader builds them.
#include <map>
#include <memory>
#include <string>

#include "backends/vulkan/vulkan_executor.h"
#include "ir/graph.h"
#include "ir/op_registry.h"

namespace rlx::test {

// One executor per test process, on device 0 (lavapipe in CI).
inline Executor& vk() {
  static std::unique_ptr<Executor> e = make_vulkan_executor(0);
  return *e;
}

// A node with the given attrs plus every registry default (as the loader does).
inline ir::Node node(ir::Op op, std::map<std::string, ir::AttrValue> attrs = {}) {
  ir::Node n;
  n.op = op;
  n.id = std::string(ir::op_name(op)) + "_node";
  n.attrs.values = std::move(attrs);
  for (const auto& spec : ir::op_info(op).attrs)
    if (spec.default_value && !n.attrs.has(spec.name)) n.attrs.values[spec.name] = *spec.default_value;
  return n;
}

}  // namespace rlx::test
