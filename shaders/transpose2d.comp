#version 450
// Batched 2-D transpose through shared memory: x viewed as [B, R, C] (contiguous)
// becomes y = [B, C, R]. A 32x32 tile is read along x's rows and written along y's
// rows, so both sides are coalesced (a strided copy writes or reads with stride R).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 32, local_size_y = 8) in;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
  uint R, C, xoff, yoff;
} pc;

shared float tile[32][33];  // +1 column: no bank conflicts on the transposed read

void main() {
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  uint c0 = gl_WorkGroupID.x * 32u, r0 = gl_WorkGroupID.y * 32u;
  uint base = gl_WorkGroupID.z * pc.R * pc.C;
  for (uint j = 0u; j < 32u; j += 8u) {
    uint r = r0 + ty + j, c = c0 + tx;
    if (r < pc.R && c < pc.C) tile[ty + j][tx] = x[pc.xoff + base + r * pc.C + c];
  }
  barrier();
  for (uint j = 0u; j < 32u; j += 8u) {
    uint c = c0 + ty + j, r = r0 + tx;
    if (r < pc.R && c < pc.C) y[pc.yoff + base + c * pc.R + r] = tile[tx][ty + j];
  }
}
