#version 450
// Matrix products with few rows (M <= MR <= 16: decode steps), memory bound on b.
// Same bindings and push constants as matmul.comp.
// TB = 1 (b is [N, K], linear's weight): a work group computes ROWS outputs n,
//   its invocations splitting K (coalesced reads of b's rows), then reducing.
// TB = 0 (b is [K, N]): a work group computes COLS neighbouring columns n, its
//   invocations splitting K into wg / COLS slices (each slice's reads of b's rows coalesced
//   over the COLS columns), then summing the slices. (One invocation walking all of K per
//   column was latency bound: 0.24 ms for a 2048 x 256 weight on an H200.)
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#ifdef RLX_HALF  // the ".h16" variants: operands and result may be f16/bf16 in 2-byte storage
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#define UNROLL [[unroll]]
#else
#define UNROLL
#endif
layout(local_size_x = 256, local_size_x_id = 10) in;
layout(constant_id = 0) const uint MR = 1;    // rows of a (>= M)
layout(constant_id = 1) const uint TA = 0;
layout(constant_id = 2) const uint TB = 1;
layout(constant_id = 3) const uint BIAS = 0;
layout(constant_id = 4) const uint NB = 0;    // collapsed batch rank, 0..3
layout(constant_id = 5) const uint ROWS = 4;  // outputs per work group (TB = 1)
layout(constant_id = 11) const uint COLS = 32;  // columns per work group (TB = 0), dividing it
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer A { float a[]; };
layout(std430, binding = 1) restrict readonly buffer B { float b[]; };
layout(std430, binding = 2) restrict readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) restrict writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
  uint m, n, k, aoff, boff, biasoff, yoff, zbase;
  uint bd[3], as[3], bs[3];
} pc;

const uint NACC = MR * ROWS;
const uint SLICES = 64;  // >= subgroups per work group
// per-subgroup (or per-slice) partial sums; TB = 0: MR x 256 (per invocation of up to 256)
shared float partial[MR * 64u * (ROWS > 4u ? ROWS : 4u)];

#ifdef RLX_HALF
layout(constant_id = 6) const uint ADT = 0;  // storage: 0 f32, 1 f16, 2 bf16
layout(constant_id = 7) const uint BDT = 0;
layout(constant_id = 8) const uint BIASDT = 0;
layout(constant_id = 9) const uint YDT = 0;
layout(std430, binding = 0) restrict readonly buffer A16 { uint16_t a16[]; };
layout(std430, binding = 1) restrict readonly buffer B16 { uint16_t b16[]; };
layout(std430, binding = 2) restrict readonly buffer Bias16 { uint16_t bias16[]; };
layout(std430, binding = 3) restrict writeonly buffer Y16 { uint16_t y16[]; };
float ld_a(uint i) { return ADT != 0u ? rlx_from16(ADT, uint(a16[i])) : a[i]; }
float ld_b(uint i) { return BDT != 0u ? rlx_from16(BDT, uint(b16[i])) : b[i]; }
float ld_bias(uint i) { return BIASDT != 0u ? rlx_from16(BIASDT, uint(bias16[i])) : bias[i]; }
void st_y(uint i, float v) {
  if (YDT != 0u) y16[i] = uint16_t(rlx_to16(YDT, v));
  else y[i] = v;
}
#else
float ld_a(uint i) { return a[i]; }
float ld_b(uint i) { return b[i]; }
float ld_bias(uint i) { return bias[i]; }
void st_y(uint i, float v) { y[i] = v; }
#endif

float a_at(uint abase, uint m, uint k) { return ld_a(abase + (TA == 0u ? m * pc.k + k : k * pc.m + m)); }

void main() {
  uint M = pc.m, N = pc.n, K = pc.k;
  uint z = gl_WorkGroupID.z + pc.zbase;
  uint abase = pc.aoff, bbase = pc.boff, zr = z;
  for (int d = int(NB) - 1; d >= 0; --d) {
    uint c = zr % pc.bd[d];
    zr /= pc.bd[d];
    abase += c * pc.as[d];
    bbase += c * pc.bs[d];
  }
  uint ybase = pc.yoff + z * M * N;
  uint t = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;

  if (TB == 0u) {
    uint sl = wg / COLS, c = t % COLS, s = t / COLS;
    uint n = rlx_group_index() * COLS + c;
    float acc[MR];
    UNROLL for (uint m = 0u; m < MR; ++m) acc[m] = 0.0;
    if (n < N) {
      for (uint k = s; k < K; k += sl) {
        float bv = ld_b(bbase + k * N + n);
        UNROLL for (uint m = 0u; m < MR; ++m)
          if (m < M) acc[m] = fma(a_at(abase, m, k), bv, acc[m]);
      }
    }
    UNROLL for (uint m = 0u; m < MR; ++m) partial[m * wg + t] = acc[m];
    barrier();
    if (s == 0u && n < N) {
      UNROLL for (uint m = 0u; m < MR; ++m) {
        if (m >= M) continue;
        float v = 0.0;
        for (uint j = 0u; j < sl; ++j) v += partial[m * wg + j * COLS + c];
        st_y(ybase + m * N + n, v + (BIAS != 0u ? ld_bias(pc.biasoff + n) : 0.0));
      }
    }
    return;
  }

  uint n0 = rlx_group_index() * ROWS;
  if (n0 >= N) return;  // uniform across the work group
  float acc[NACC];
  UNROLL for (uint i = 0u; i < NACC; ++i) acc[i] = 0.0;
  for (uint k = t; k < K; k += wg) {
    float av[MR];
    UNROLL for (uint m = 0u; m < MR; ++m) av[m] = m < M ? a_at(abase, m, k) : 0.0;
    UNROLL for (uint r = 0u; r < ROWS; ++r) {
      float bv = n0 + r < N ? ld_b(bbase + (n0 + r) * K + k) : 0.0;
      UNROLL for (uint m = 0u; m < MR; ++m) acc[m * ROWS + r] = fma(av[m], bv, acc[m * ROWS + r]);
    }
  }
  // Reduce every accumulator over the work group: first within 32-wide slices
  // (subgroups, or a shared-memory pass), then across slices.
#ifdef RLX_SUBGROUP
  uint slices = gl_NumSubgroups, slice = gl_SubgroupID;
  UNROLL for (uint i = 0u; i < NACC; ++i) {
    float v = subgroupAdd(acc[i]);
    if (subgroupElect()) partial[i * SLICES + slice] = v;
  }
  barrier();
#else
  uint slices = min(32u, wg), slice = t % slices;
  UNROLL for (uint i = 0u; i < NACC; ++i) {
    if (t < slices) partial[i * SLICES + t] = 0.0;
  }
  barrier();
  for (uint s = 0u; s < wg / slices; ++s) {
    if (t / slices == s)
      UNROLL for (uint i = 0u; i < NACC; ++i) partial[i * SLICES + slice] += acc[i];
    barrier();
  }
#endif
  for (uint i = t; i < NACC; i += wg) {
    uint m = i / ROWS, r = i % ROWS, n = n0 + r;
    float v = 0.0;
    for (uint s = 0u; s < slices; ++s) v += partial[i * SLICES + s];
    if (m < M && n < N) st_y(ybase + m * N + n, v + (BIAS != 0u ? ld_bias(pc.biasoff + n) : 0.0));
  }
}
