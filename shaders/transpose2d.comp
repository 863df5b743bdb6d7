#version 450
// Batched 2-D transpose through shared memory: x viewed as [B, R, C] (contiguous)
// becomes y = [B, C, R]. A 32x32 tile is read along x's rows and written along y's
// rows, so both sides are coalesced (a strided copy writes or reads with stride R).
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_HALF  // the ".h16" variant: f16/bf16 x and y in 2-byte storage
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x = 32, local_size_y = 8) in;
layout(constant_id = 0) const uint DT = 0;  // storage kind of x and y (common.glsl): 0 f32, 1 f16, 2 bf16
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer Y { float y[]; };
#ifdef RLX_HALF
layout(std430, binding = 0) restrict readonly buffer X16 { uint16_t x16[]; };
layout(std430, binding = 1) restrict writeonly buffer Y16 { uint16_t y16[]; };
#endif
layout(push_constant) uniform PC {
  uint R, C, xoff, yoff;
} pc;

shared float tile[32][33];  // +1 column: no bank conflicts on the transposed read

float load_x(uint i) {
#ifdef RLX_HALF
  if (DT != 0u) return rlx_from16(DT, uint(x16[i]));
#endif
  return x[i];
}
void store_y(uint i, float v) {
#ifdef RLX_HALF
  if (DT != 0u) {
    y16[i] = uint16_t(rlx_to16(DT, v));
    return;
  }
#endif
  y[i] = v;
}

void main() {
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  uint c0 = gl_WorkGroupID.x * 32u, r0 = gl_WorkGroupID.y * 32u;
  uint base = gl_WorkGroupID.z * pc.R * pc.C;
  for (uint j = 0u; j < 32u; j += 8u) {
    uint r = r0 + ty + j, c = c0 + tx;
    if (r < pc.R && c < pc.C) tile[ty + j][tx] = load_x(pc.xoff + base + r * pc.C + c);
  }
  barrier();
  for (uint j = 0u; j < 32u; j += 8u) {
    uint c = c0 + ty + j, r = r0 + tx;
    if (r < pc.R && c < pc.C) store_y(pc.yoff + base + c * pc.R + r, tile[tx][ty + j]);
  }
}
