#pragma once
// Kernels over oneDNN's blocked channel layout, for compiled plans that keep a tensor blocked
// between convolutions (cpu_plan.cpp, link_conv_chains): x [N, C, H, W] is held as
// [N][CP / B][H][W][B] with CP = C rounded up to the block B (16 with AVX-512, 8 below; the
// layout dnnl_conv.h's primitives read and write). Padding channels past C hold values nothing
// uses. ONNX Runtime's NCHWc transformer keeps the same layout through the same ops.
#include <cstdint>
#include <string>
#include <vector>

#include "ir/spatial.h"
#include "runtime/executor.h"

namespace rlx::cpu {

// The channel block of the blocked layout (dnnl_conv.cpp's primitives use the same).
int64_t blocked_block();
inline int64_t blocked_padded(int64_t C) { return (C + blocked_block() - 1) / blocked_block() * blocked_block(); }

// Which blocked kernel can run kernel k when its inputs are blocked, or "" when none:
// "pool" (max_pool2d / avg_pool2d over f32), "pad" (a constant pad of H and W), "concat" (along channels of 4-D f32 tensors whose
// channel counts are multiples of the block), "mean" (the mean over H and W of a 4-D f32
// tensor: a global average pool, whose small output is written NCHW).
std::string blocked_kind(const Kernel& k);

// Whether program p gives finite values on finite inputs (adds, products, max / min, ReLU-like
// and bounded functions; no division, logarithm, power or exponential): run over padding
// channels, whose values nothing uses, it cannot leave an infinity or NaN there for a later
// convolution's zero weights to turn into NaN in real channels.
bool blocked_finite(const FusedProgram& p);

// y (blocked, [N][CP/B][OH][OW][B]) = the pool of x (blocked) with geometry g.
void blocked_pool(const ir::Conv2dGeom& g, bool is_max, const float* x, float* y);
// y (blocked, [N][CP/B][OH][OW][B]) = x (blocked, H x W) with pt rows above and pl columns left
// of it, the rest of OH x OW filled with value.
void blocked_pad(const float* x, int64_t N, int64_t C, int64_t H, int64_t W, int64_t pt, int64_t pl, int64_t OH,
                 int64_t OW, float value, float* y);
// y (blocked) = the inputs' channels one after another; xs[i] is blocked with cs[i] channels
// (each a multiple of the block), every input of N images of HW pixels.
void blocked_concat(const std::vector<const float*>& xs, const std::vector<int64_t>& cs, int64_t N, int64_t HW, float* y);
// y [N, C] (NCHW with H = W = 1) = the mean over the HW pixels of x (blocked).
void blocked_mean_hw(const float* x, int64_t N, int64_t C, int64_t HW, float* y);
// y (NCHW) = x (blocked), N images of C channels and HW pixels.
void blocked_to_nchw(const float* x, int64_t N, int64_t C, int64_t HW, float* y);

}  // namespace rlx::cpu
