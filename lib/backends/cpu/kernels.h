#pragma once
// Row kernels of the CPU executor, vectorised like the elementwise block loops
// (an AVX2 clone chosen at run time; see cpu_fused.cpp). Single-threaded: callers
// parallelise over rows.
#include <cstdint>

namespace rlx::cpu {

// In place: x[0, valid) becomes softmax(scale * x[0, valid)) and x[valid, n) zeros.
// A row whose entries are all -inf (or valid <= 0) becomes zeros, never NaN.
void softmax_row(float* x, int64_t valid, int64_t n, float scale);

// One row of layer_norm (layer) or rms_norm over D features: y = (x - mean) / sqrt(var + eps)
// (mean 0 and var = mean(x^2) for rms_norm), then * w and + bias where given. Sums in double.
void norm_row(const float* x, float* y, int64_t D, float eps, bool layer, const float* w, const float* bias);

}  // namespace rlx::cpu
