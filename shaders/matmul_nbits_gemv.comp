#version 450
// matmul_nbits (see matmul_nbits.comp) for few rows of a (decode steps) and 4-bit weights,
// memory bound on b: a work group computes NC outputs n for all MR rows, its invocations
// splitting K into chunks of 32 values (16 bytes of b: one 128-bit load per chunk and column,
// coalesced along b's rows), then reducing. The weights stay 4 bits on the device and are
// unpacked in registers; per chunk (inside one block, as BS % 32 == 0) the block's scale and
// zero point apply once: sum_j a_j (q_j - zp) sc = sc (sum_j a_j q_j - zp sum_j a_j).
// Needs K % 32 == 0, BS % 32 == 0, b's offset a multiple of 16 bytes and a's of 4 floats.
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
layout(local_size_x = 64, local_size_x_id = 10) in;
layout(constant_id = 0) const uint MR = 1;  // rows of a
layout(constant_id = 1) const uint NC = 4;  // outputs n per work group
layout(constant_id = 2) const uint HAS_ZP = 0;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer A { vec4 a4[]; };
layout(std430, binding = 1) restrict readonly buffer B { uvec4 b4[]; };
layout(std430, binding = 2) restrict readonly buffer S { float s[]; };
layout(std430, binding = 3) restrict readonly buffer Z { uint z8[]; };
layout(std430, binding = 4) restrict writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
  uint N, K, BS, kb, zcols, aoff4, boff16, soff, zoff, yoff, row_chunks;
} pc;

const uint NACC = MR * NC;
const uint SLICES = 64;  // >= subgroups (or invocations, without subgroup arithmetic) per group
shared float partial[NACC * SLICES];

// Sum over the 8 nibbles of w (K values 0..7 of the word, low bits first) times a0, a1.
float dot8(uint w, vec4 a0, vec4 a1) {
  vec4 q0 = vec4(float(w & 15u), float((w >> 4) & 15u), float((w >> 8) & 15u), float((w >> 12) & 15u));
  vec4 q1 = vec4(float((w >> 16) & 15u), float((w >> 20) & 15u), float((w >> 24) & 15u), float(w >> 28));
  return dot(q0, a0) + dot(q1, a1);
}

void main() {
  const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
  const uint n0 = rlx_group_index() * NC;
  const uint chunks = pc.K / 32u;
  float acc[NACC];
  for (uint i = 0u; i < NACC; ++i) acc[i] = 0.0;
  for (uint c = tid; c < chunks; c += WG) {
    const uint blk = (c * 32u) / pc.BS;
    uvec4 w[NC];
    float sc[NC], zp[NC];
    for (uint j = 0u; j < NC; ++j) {
      uint col = min(n0 + j, pc.N - 1u);  // past the end: a valid row, result not stored
      w[j] = b4[pc.boff16 + col * pc.row_chunks + c];
      sc[j] = s[pc.soff + col * pc.kb + blk];
      zp[j] = 8.0;
      if (HAS_ZP != 0u) {
        uint zi = pc.zoff + col * pc.zcols + blk / 2u;
        zp[j] = float(((z8[zi >> 2] >> ((zi & 3u) * 8u)) >> ((blk & 1u) * 4u)) & 15u);
      }
    }
    for (uint r = 0u; r < MR; ++r) {
      const uint ai = pc.aoff4 + (r * pc.K + c * 32u) / 4u;
      vec4 av[8];
      for (uint q = 0u; q < 8u; ++q) av[q] = a4[ai + q];
      float asum = 0.0;
      for (uint q = 0u; q < 8u; ++q) asum += av[q].x + av[q].y + av[q].z + av[q].w;
      for (uint j = 0u; j < NC; ++j) {
        float d = dot8(w[j].x, av[0], av[1]) + dot8(w[j].y, av[2], av[3]) + dot8(w[j].z, av[4], av[5]) +
                  dot8(w[j].w, av[6], av[7]);
        acc[r * NC + j] += sc[j] * (d - zp[j] * asum);
      }
    }
  }
#ifdef RLX_SUBGROUP
  for (uint i = 0u; i < NACC; ++i) {
    float v = subgroupAdd(acc[i]);
    if (subgroupElect()) partial[i * SLICES + gl_SubgroupID] = v;
  }
  barrier();
  const uint parts = gl_NumSubgroups;
#else
  // Tree over the invocations (WG <= SLICES).
  for (uint i = 0u; i < NACC; ++i) partial[i * SLICES + tid] = acc[i];
  barrier();
  for (uint h = WG / 2u; h > 0u; h /= 2u) {
    if (tid < h)
      for (uint i = 0u; i < NACC; ++i) partial[i * SLICES + tid] += partial[i * SLICES + tid + h];
    barrier();
  }
  const uint parts = 1u;
#endif
  for (uint i = tid; i < NACC; i += WG) {
    float v = 0.0;
    for (uint p = 0u; p < parts; ++p) v += partial[i * SLICES + p];
    uint r = i / NC, col = n0 + i % NC;
    if (col < pc.N) y[pc.yoff + r * pc.N + col] = v;
  }
}
