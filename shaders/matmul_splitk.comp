#version 450
// Sums the split-K partial products of matmul_tiled (SPLIT = 1): y[i] =
// sum_s part[s*M*N + i] (+ bias[i % N]), four elements per invocation.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint BIAS = 0;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer P { float part[]; };
layout(std430, binding = 1) restrict readonly buffer Bias { float bias[]; };
layout(std430, binding = 2) restrict writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
  uint mn, n, nsplit, poff, biasoff, yoff;
} pc;

void main() {
  uint i0 = rlx_global_index() * 4u;
  for (uint i = i0; i < min(i0 + 4u, pc.mn); ++i) {
    float v = 0.0;
    for (uint s = 0u; s < pc.nsplit; ++s) v += part[pc.poff + s * pc.mn + i];
    if (BIAS != 0u) v += bias[pc.biasoff + i % pc.n];
    y[pc.yoff + i] = v;
  }
}
