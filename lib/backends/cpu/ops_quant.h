#pragma once
// CPU kernels of the quantization ops (cpu_ops_quant.cpp): quantize, dequantize and
// matmul_integer, with ONNX's semantics. They read every dtype themselves (native kernels).
#include "runtime/executor.h"

namespace rlx::cpu {

bool is_quant_op(const Kernel& k);
// Runs k when its op is one of the above and returns true; false for any other op.
bool run_quant_op(const Kernel& k);

}  // namespace rlx::cpu
