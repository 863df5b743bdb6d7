#pragma once
// CPU kernels of the ONNX-style ops (cpu_ops_index.cpp): min/prod reductions, the Index
// category (where, argmax, argmin, cumsum, topk, gather, gather_elements, slice, pad, trilu)
// and compares of integer tensors.
#include "runtime/executor.h"

namespace rlx::cpu {

// True when k runs on its tensors' stored dtypes (exact integers, bool outputs); false
// sends it through the executor's f32 adapter (the kernels then see f32 copies).
bool index_op_native(const Kernel& k);

// Runs k when its op is one of the above and returns true; false for any other op.
// Throws RuntimeError naming the node for run-time errors (an index out of range).
bool run_index_op(const Kernel& k);

}  // namespace rlx::cpu
