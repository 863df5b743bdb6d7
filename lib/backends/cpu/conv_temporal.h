#pragma once
// The temporal half of a separable 3-D convolution (kernel kD x 1 x 1: torchvision's s3d and
// r2plus1d_18) on the CPU, NCDHW f32, as products that read no im2col columns.
#include <cstdint>
#include <functional>

#include "ir/spatial.h"

namespace rlx::cpu {

// Called on each run of finished outputs [b, e) (flat indices into y), on the thread that
// wrote them: a fused epilogue.
using SpanFn = std::function<void(int64_t b, int64_t e)>;

// Whether conv3d_temporal takes g: kH = kW = 1, strides and pads 1 and 0 along H and W, depth
// dilation 1, more than one depth tap, and RLX_CONV_TEMPORAL not 0.
bool conv3d_temporal_applies(const ir::Conv2dGeom& g);

// y[n, m, od, p] = b[m] + sum over taps kd inside the input and channels c of the group of
// w[m, c, kd] x[n, c, od sD - pf + kd, p], p over the H x W positions. For each block of
// positions and run of output depths, the input planes' rows are copied once into a slab
// [depth][Cg][T] (the block's positions of the depths the run reads), and each output depth
// is then one product over the slab's
// consecutive rows of its valid taps (no zero rows for padded taps: s3d's 7x1x1 stem over 16
// frames skips 6 of its 56 taps) with the weight reordered to [M][kD][Cg]. Parallel over
// (image, group, position block[, output depths]) on rlx's pool.
void conv3d_temporal(const ir::Conv2dGeom& g, const float* x, const float* w, const float* bias, float* y,
                     const SpanFn* epi = nullptr);

}  // namespace rlx::cpu
