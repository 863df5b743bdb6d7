#pragma once
// CPU kernels of the quantization ops (cpu_ops_quant.cpp): quantize, dequantize,
// matmul_integer[_scaled], matmul_nbits and conv2d_integer_scaled, with ONNX's (and ONNX Runtime's) semantics. They read every dtype themselves (native kernels).
#include <memory>

#include "runtime/executor.h"

namespace rlx::cpu {

bool is_quant_op(const Kernel& k);
// Runs k when its op is one of the above and returns true; false for any other op.
bool run_quant_op(const Kernel& k);

struct PackedQB;
struct QEpilogue;
// matmul_integer through qgemm (packed: B packed once by a compiled plan, or null: packed
// here); writes `out` (int32, or f32 with ep.to_float). False: shapes the fast path does not
// take (the caller runs the reference loops).
bool matmul_integer_fast(const Kernel& k, const PackedQB* packed, const QEpilogue& ep, void* out);

// Compiled plans: a matmul_integer[_scaled] whose B is a constant matrix gets it packed once
// (null otherwise), and runs on it.
std::shared_ptr<const PackedQB> pack_quant_weight(const Kernel& k);
void run_quant_packed(const Kernel& k, const PackedQB& packed);

// conv2d_integer_scaled (qconv.cpp): w^T packed for qgemm, and the convolution on it (packed
// null: packed here).
std::shared_ptr<const PackedQB> pack_qconv_weight(const Kernel& k);
void run_qconv(const Kernel& k, const PackedQB* packed);

}  // namespace rlx::cpu
