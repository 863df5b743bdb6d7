#pragma once
// Separable 3-D pooling (max_pool3d, avg_pool3d; NCDHW f32) for the CPU executor.
#include "ir/spatial.h"

namespace rlx::cpu {

// y = pool(x) with g's window, strides, dilations, pads and ceil_mode (ONNX semantics), one axis at
// a time: each input row pooled along W into a row buffer, those rows along H into a plane, the
// planes along D into y, so a kD x kH x kW window costs kD + kH + kW passes instead of
// kD kH kW. Max is exact (a max of maxes; any NaN in a window gives NaN); average sums in that
// order and divides by ir::avg_pool_divisor. Vectorised with AVX2 along W (strides 1 and 2)
// and over whole rows in the H and D passes, unless RLX_CPU_ISA=base. Parallel over rlx's pool.
void pool3d_separable(const ir::Conv2dGeom& g, bool is_max, const float* x, float* y);

}  // namespace rlx::cpu
