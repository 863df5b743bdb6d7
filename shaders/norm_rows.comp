#version 450
// layer_norm / rms_norm over the last axis for 2-byte x and y (f16/bf16), one subgroup per row:
// several rows per work group, the statistics by subgroup arithmetic (no barrier), x and y moved
// 4 halves (8 bytes) per load and store. For rows of D = 4·n elements (n ≤ CH · subgroup size)
// whose x and y start at multiples of 4 elements (kernels.cpp checks; norm.comp otherwise).
// MODE 0 layer_norm (x, weight?, bias?), 1 rms_norm (x, weight?); weight and bias in any
// storage kind (read one by one: the same D values for every row, from cache). Two-pass
// statistics in f32 from the values kept in registers; y rounded once on store, as norm.comp.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#define RLX_HALF 1
layout(local_size_x = 256, local_size_x_id = 10) in;
layout(constant_id = 0) const uint MODE = 0;
layout(constant_id = 1) const uint HAS_W = 0;
layout(constant_id = 2) const uint HAS_B = 0;
layout(constant_id = 3) const uint CH = 4;  // 4-element chunks per invocation
layout(constant_id = 4) const uint XDT = 1;  // 1 f16, 2 bf16
layout(constant_id = 5) const uint WDT = 0;
layout(constant_id = 6) const uint BDT = 0;
layout(constant_id = 7) const uint YDT = 1;  // 1 f16, 2 bf16
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { uvec2 x4[]; };
layout(std430, binding = 1) restrict readonly buffer W { float w[]; };
layout(std430, binding = 1) restrict readonly buffer W16 { uint16_t w16[]; };
layout(std430, binding = 2) restrict readonly buffer Bi { float bias[]; };
layout(std430, binding = 2) restrict readonly buffer Bi16 { uint16_t bias16[]; };
layout(std430, binding = 3) restrict writeonly buffer Y { uvec2 y4[]; };
float ld_w(uint i) { return RLX_LD(WDT, w, w16, i); }
float ld_b(uint i) { return RLX_LD(BDT, bias, bias16, i); }
layout(push_constant) uniform PC {
  uint rows, d, xoff, woff, boff, yoff;
  float eps;
} pc;

void main() {
  // rows by subgroup, strided by the whole grid (covers every row whatever the subgroup size);
  // no workgroup barrier below
  uint nsg = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumSubgroups;
  for (uint row = rlx_group_index() * gl_NumSubgroups + gl_SubgroupID; row < pc.rows; row += nsg) {
  uint lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize, n4 = pc.d / 4u;
  uint xb = pc.xoff / 4u + row * n4, yb = pc.yoff / 4u + row * n4;
  vec4 xv[CH];
  float s = 0.0;
  [[unroll]] for (uint i = 0u; i < CH; ++i) {
    uint c = lane + sgs * i;
    xv[i] = vec4(0.0);
    if (c < n4) {
      uvec2 u = x4[xb + c];
      xv[i] = vec4(rlx_from16x2(XDT, u.x), rlx_from16x2(XDT, u.y));
    }
    s += xv[i].x + xv[i].y + xv[i].z + xv[i].w;
  }
  float mean = MODE == 0u ? subgroupAdd(s) / float(pc.d) : 0.0;
  float q = 0.0;
  [[unroll]] for (uint i = 0u; i < CH; ++i) {
    if (lane + sgs * i < n4) {
      vec4 c = xv[i] - mean;
      q += dot(c, c);
    }
  }
  float rstd = 1.0 / sqrt(subgroupAdd(q) / float(pc.d) + pc.eps);
  [[unroll]] for (uint i = 0u; i < CH; ++i) {
    uint c = lane + sgs * i;
    if (c < n4) {
      vec4 v = (xv[i] - mean) * rstd;
      uint j = 4u * c;
      if (HAS_W != 0u) v *= vec4(ld_w(pc.woff + j), ld_w(pc.woff + j + 1u), ld_w(pc.woff + j + 2u), ld_w(pc.woff + j + 3u));
      if (HAS_B != 0u) v += vec4(ld_b(pc.boff + j), ld_b(pc.boff + j + 1u), ld_b(pc.boff + j + 2u), ld_b(pc.boff + j + 3u));
      y4[yb + c] = uvec2(rlx_to16(YDT, v.x) | (rlx_to16(YDT, v.y) << 16), rlx_to16(YDT, v.z) | (rlx_to16(YDT, v.w) << 16));
    }
  }
  }
}
