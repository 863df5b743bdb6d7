#pragma once
#include <memory>

#include "runtime/executor.h"

namespace rlx {

std::unique_ptr<Executor> make_cpu_executor();

namespace cpu {
// Runs one fused elementwise program over contiguous f32 inputs (exposed for benchmarks).
void run_fused(const FusedProgram& p, const std::vector<const float*>& inputs, float* out);
// One fused elementwise program prepared for running over arbitrary element ranges of its
// output from several threads at once (the GEMM epilogue runs it on each block of C that a
// task has just computed). Inputs and output as for run_fused; they must outlive it.
class FusedSpans {
 public:
  FusedSpans(const FusedProgram& p, const std::vector<const float*>& inputs, float* out);
  ~FusedSpans();
  void run(int64_t begin, int64_t end) const;  // output elements [begin, end), flat indices

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
// The instruction set the elementwise block loops run with: "avx2+fma" or "x86-64".
const char* fused_isa();

}  // namespace cpu

}  // namespace rlx
