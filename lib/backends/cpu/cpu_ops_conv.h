#pragma once
// CPU kernels of the convolution family (conv2d, conv_transpose2d, max_pool2d,
// avg_pool2d, resize); see cpu_ops_conv.cpp.
#include "backends/cpu/conv_temporal.h"
#include "runtime/executor.h"

namespace rlx::cpu {

// Resolves a tensor to its f32 host memory (the executor's ptr()).
using TensorPtr = float* (*)(const TensorRef&);

// Runs a conv2d or conv3d with rlx's kernels; epi (may be null) is a fused consumer, called on
// each run [b, e) of flat output indices right after a task has finished it (in cache).
void run_conv(const Kernel& k, TensorPtr ptr, const SpanFn* epi);

// Runs a kernel whose node is of the convolution family (ir::is_spatial).
void run_spatial(const Kernel& k, TensorPtr ptr);

}  // namespace rlx::cpu
