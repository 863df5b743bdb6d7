#pragma once
#include <memory>

#include "runtime/executor.h"

namespace rlx {

std::unique_ptr<Executor> make_cpu_executor();

namespace cpu {
// Runs one fused elementwise program over contiguous f32 inputs (exposed for benchmarks).
void run_fused(const FusedProgram& p, const std::vector<const float*>& inputs, float* out);
// The instruction set the elementwise block loops run with: "avx2+fma" or "x86-64".
const char* fused_isa();

}  // namespace cpu

}  // namespace rlx
