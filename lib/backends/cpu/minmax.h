#pragma once
// The range of a contiguous f32 run in one pass (whole-tensor min and max, as dynamic
// quantization takes them): vectorised (AVX-512 or AVX2 by cpuid, RLX_CPU_ISA=base forces the
// plain loop), split over the thread pool in chunks. A NaN anywhere makes both results NaN, as
// the reference reductions (min and max propagate NaN).
#include <cstdint>

#include "backends/cpu/gemm.h"

namespace rlx::cpu {

struct Range {
  float min, max;
};
Range minmax_f32(const float* x, int64_t n, Threads th = Threads::Pool);

}  // namespace rlx::cpu
