#pragma once
// CPU kernels of the ONNX-style ops (cpu_ops_index.cpp): min/prod reductions and the Index
// category (where, argmax, argmin, cumsum, topk, gather, gather_elements, slice, pad, trilu).
#include "runtime/executor.h"

namespace rlx::cpu {

// How the CPU executor reaches a tensor's memory (cpu_executor.cpp's ptr()).
using TensorPtrFn = float* (*)(const TensorRef&);

// Runs k when its op is one of the above and returns true; false for any other op.
// Throws RuntimeError naming the node for run-time errors (an index out of range).
bool run_index_op(const Kernel& k, TensorPtrFn ptr);

}  // namespace rlx::cpu
