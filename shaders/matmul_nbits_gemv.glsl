// matmul_nbits (see matmul_nbits.comp) for few rows of a (decode steps) and 4-bit weights,
// memory bound on b: a work group computes NC outputs n for all MR rows, its invocations
// splitting K into chunks of 32 values (16 bytes of b: one 128-bit load per chunk and column,
// coalesced along b's rows), then reducing. The weights stay 4 bits on the device and are
// unpacked in registers; per chunk (inside one block, as BS % 32 == 0) the block's scale and
// zero point apply once: sum_j a_j (q_j - zp) sc = sc (sum_j a_j q_j - zp sum_j a_j).
// Needs K % 32 == 0, BS % 32 == 0, b's offset a multiple of 16 bytes and a's of 4 floats.
// The body of matmul_nbits_gemv.comp and matmul_nbits_gemv_unroll.comp (the same kernel with
// [[unroll]] on its constant-trip loops; which is faster is the device's business: tuning,
// RLX_VK_NBITS_GEMV). The includer defines UNROLL and enables the extensions.
layout(local_size_x = 64, local_size_x_id = 10) in;
layout(constant_id = 0) const uint MR = 1;  // rows of a
layout(constant_id = 1) const uint NC = 4;  // outputs n per work group
layout(constant_id = 2) const uint HAS_ZP = 0;
layout(constant_id = 3) const uint CPI = 1;  // chunks per invocation and pass
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
  UNROLL for (uint i = 0u; i < NACC; ++i) acc[i] = 0.0;
  // Each pass loads CPI chunks' weights (WG apart: every load instruction coalesced across the
  // group) for all NC outputs before using any of them.
  for (uint c0 = tid; c0 < chunks; c0 += WG * CPI) {
    uvec4 w[CPI * NC];
    float sc[CPI * NC], zp[CPI * NC];
    UNROLL for (uint p = 0u; p < CPI; ++p) {
      const uint c = min(c0 + p * WG, chunks - 1u);  // past the end: a valid chunk, not used
      const uint blk = (c * 32u) / pc.BS;
      UNROLL for (uint j = 0u; j < NC; ++j) {
        uint col = min(n0 + j, pc.N - 1u);  // past the end: a valid row, result not stored
        w[p * NC + j] = b4[pc.boff16 + col * pc.row_chunks + c];
        sc[p * NC + j] = s[pc.soff + col * pc.kb + blk];
        zp[p * NC + j] = 8.0;
        if (HAS_ZP != 0u) {
          uint zi = pc.zoff + col * pc.zcols + blk / 2u;
          zp[p * NC + j] = float(((z8[zi >> 2] >> ((zi & 3u) * 8u)) >> ((blk & 1u) * 4u)) & 15u);
        }
      }
    }
    UNROLL for (uint p = 0u; p < CPI; ++p) {
      const uint c = c0 + p * WG;
      if (c >= chunks) break;
      UNROLL for (uint r = 0u; r < MR; ++r) {
        const uint ai = pc.aoff4 + (r * pc.K + c * 32u) / 4u;
        vec4 av[8];
        UNROLL for (uint q = 0u; q < 8u; ++q) av[q] = a4[ai + q];
        float asum = 0.0;
        UNROLL for (uint q = 0u; q < 8u; ++q) asum += av[q].x + av[q].y + av[q].z + av[q].w;
        UNROLL for (uint j = 0u; j < NC; ++j) {
          const uvec4 wj = w[p * NC + j];
          float d = dot8(wj.x, av[0], av[1]) + dot8(wj.y, av[2], av[3]) + dot8(wj.z, av[4], av[5]) +
                    dot8(wj.w, av[6], av[7]);
          acc[r * NC + j] += sc[p * NC + j] * (d - zp[p * NC + j] * asum);
        }
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
