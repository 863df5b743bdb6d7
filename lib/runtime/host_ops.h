#pragma once
// The data-dependent ops' kernels (nonzero, compress, unique, topk_dynamic,
// non_max_suppression; docs/ir-design.md section 3). They run on the host between planned
// segments, as a host step of lib/runtime/control.cpp: their operands come back from the device
// (a download on Vulkan), their results' sizes are read here, and the rest of the graph is
// planned for them. These ops are small (indices and boxes), so one plain loop each.
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace rlx {

struct HostStepResult {
  std::vector<Tensor> outs;  // the node's results, in order
  int64_t size = 0;          // the data-dependent size (the node's `size_key` records it)
};

// Runs data-dependent node `n` on host tensors `ins`. Bad operands (a k out of range, boxes
// that are not [B, N, 4]) are InputErrors naming `who`.
HostStepResult run_data_dependent(const ir::Node& n, const std::vector<Tensor>& ins, const std::string& who);

}  // namespace rlx
