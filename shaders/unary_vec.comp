#version 450
// y = op(x) for a contiguous run of 2-byte values (f16 or bf16, x and y alike) whose first
// elements sit at multiples of 8: 16-byte loads and stores of 8 values (unary.comp's one
// 2-byte access per element moved ViT-S/16's GELU, [6304, 1536] f16, at ~1.3 TB/s on the H200;
// docs/benchmarks.md, session 14). Widening (rlx_from16x2) and rounding (rlx_to16) are
// unary.comp's, so the results are the same bits. Invocation i of the grid takes the vectors
// i, i + G, ..., VPT of them (G: the grid's invocations), then the last n % 8 values one by one.
// The host (Lowering::strided_one) checks contiguity and alignment.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 255;  // uint(EwOp)
layout(constant_id = 1) const uint DT = 1;    // storage kind of x and y: 1 f16, 2 bf16
layout(constant_id = 2) const uint VPT = 2;   // 16-byte vectors per invocation
layout(constant_id = 3) const uint HW = 0;    // 1 (f16 only): the conversion instructions (below)
#include "common.glsl"
#include "ew_ops.glsl"

layout(std430, binding = 0) restrict readonly buffer X { uvec4 x8[]; };
layout(std430, binding = 1) restrict writeonly buffer Y { uvec4 y8[]; };
layout(std430, binding = 0) restrict readonly buffer X16 { uint16_t x16[]; };
layout(std430, binding = 1) restrict writeonly buffer Y16 { uint16_t y16[]; };
layout(push_constant) uniform PC {
  uint n, xoff, yoff;  // elements; xoff and yoff multiples of 8
} pc;

// HW = 1 (the default for f16; RLX_VK_UNARY_VEC=1 turns it off): f16 widened and rounded by
// unpackHalf2x16 / packHalf2x16 rather than by rlx_from16x2 / rlx_to16's integer arithmetic,
// which made GELU compute-bound on the H200 (ViT-S/16 f16's device time 0.08-0.15 ms lower with
// HW, docs/benchmarks.md, session 16). NaN is written as rlx_to16 writes it (sign | 0x7e00);
// VulkanHalf.UnaryOpsOverContiguousTwoByteRuns compares the bits with unary.comp's on each
// device it runs on (lavapipe and the H200 agree).
uint op2(uint w) {
  if (HW != 0u) {
    vec2 f = unpackHalf2x16(w);
    f = vec2(rlx_ew_unary(OP, f.x), rlx_ew_unary(OP, f.y));
    uint p = packHalf2x16(f);
    if (isnan(f.x)) p = (p & 0xffff0000u) | ((floatBitsToUint(f.x) >> 16) & 0x8000u) | 0x7e00u;
    if (isnan(f.y)) p = (p & 0xffffu) | (floatBitsToUint(f.y) & 0x80000000u) | 0x7e000000u;
    return p;
  }
  vec2 f = rlx_from16x2(DT, w);
  return rlx_to16(DT, rlx_ew_unary(OP, f.x)) | (rlx_to16(DT, rlx_ew_unary(OP, f.y)) << 16);
}

void main() {
  const uint nv = pc.n >> 3, xv = pc.xoff >> 3, yv = pc.yoff >> 3;
  const uint gi = rlx_global_index(), G = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_WorkGroupSize.x;
  uvec4 v[VPT];
  // All loads first, then all stores: VPT loads in flight per invocation.
  [[unroll]] for (uint e = 0u; e < VPT; ++e) {
    uint i = gi + e * G;
    v[e] = i < nv ? x8[xv + i] : uvec4(0u);
  }
  [[unroll]] for (uint e = 0u; e < VPT; ++e) {
    uint i = gi + e * G;
    if (i < nv) y8[yv + i] = uvec4(op2(v[e].x), op2(v[e].y), op2(v[e].z), op2(v[e].w));
  }
  uint t = nv * 8u + gi;  // the tail
  if (gi < 8u && t < pc.n) y16[pc.yoff + t] = uint16_t(rlx_to16(DT, rlx_ew_unary(OP, rlx_from16(DT, uint(x16[pc.xoff + t])))));
}
