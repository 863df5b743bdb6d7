#version 450
// min (OP 0) / prod (OP 1) over more reduced elements than one invocation may walk (llvmpipe ends
// an invocation's loops after 65535 iterations; kernels_index.cpp's min_prod, on the wg route:
// every device but a CPU one, which takes reduce_ext.comp's serial chunks): one work group of
// WG invocations per (output, chunk of CHUNK = WG * PER reduced elements), every invocation
// combining PER elements (element k * WG + its lane of the chunk) and the group those 256 results
// in two levels through shared memory, written to y[output * nchunks + chunk]; the host reduces those results again by
// this shader until one per output is left. Indexing as reduce_ext.comp (up to 4 kept and 4
// reduced dims, element strides). NaN anywhere gives NaN (min's min() alone would not say);
// prod's f32 products are grouped by lanes and levels, not in order.
#extension GL_GOOGLE_include_directive : require
const uint WG = 256u;
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint KR = 1;  // kept rank, 0..4
layout(constant_id = 1) const uint RR = 1;  // reduced rank, 1..4
layout(constant_id = 2) const uint OP = 0;
layout(constant_id = 3) const uint PER = 16;  // elements per invocation (kernels.h's wg_chunk)
const uint CHUNK = WG * PER;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
  uint nout, nred, xoff, yoff;
  uint kd[4], ks[4], rd[4], rs[4];
  uint nchunks;
} pc;

shared float sv[WG];

float combine(float a, float b) {
  if (isnan(a) || isnan(b)) return rlx_nan();
  return OP == 0u ? min(a, b) : a * b;
}

void main() {
  uint g = rlx_group_index(), lid = gl_LocalInvocationID.x;
  if (g >= pc.nout * pc.nchunks) return;  // the whole group: the grid's spare groups
  uint o = g / pc.nchunks, r0 = (g % pc.nchunks) * CHUNK, r1 = min(pc.nred, r0 + CHUNK);
  uint base = pc.xoff, rem = o;
  for (int d = int(KR) - 1; d >= 0; --d) {
    base += (rem % pc.kd[d]) * pc.ks[d];
    rem /= pc.kd[d];
  }
  float acc = OP == 0u ? rlx_inf() : 1.0;
  for (uint k = 0u; k < PER; ++k) {
    uint r = r0 + k * WG + lid;
    if (r >= r1) break;
    uint off = 0u, q = r;
    for (int d = int(RR) - 1; d >= 0; --d) {
      off += (q % pc.rd[d]) * pc.rs[d];
      q /= pc.rd[d];
    }
    acc = combine(acc, x[base + off]);
  }
  // 16 invocations each over 16 lanes' results, then invocation 0 over those (as axis_wg.comp)
  sv[lid] = acc;
  barrier();
  if (lid < 16u)
    for (uint k = 1u; k < 16u; ++k) acc = combine(acc, sv[lid + 16u * k]);
  barrier();
  if (lid < 16u) sv[lid] = acc;
  barrier();
  if (lid == 0u) {
    for (uint k = 1u; k < 16u; ++k) acc = combine(acc, sv[k]);
    y[pc.yoff + g] = acc;
  }
}
