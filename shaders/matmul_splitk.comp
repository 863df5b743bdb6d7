#version 450
// Sums the split-K partial products of matmul_tiled (SPLIT = 1): y[i] =
// sum_s part[s*M*N + i] (+ bias[i % N]), four elements per invocation.
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_HALF  // the ".h16" variant: bias and y may be f16/bf16 in 2-byte storage
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint BIAS = 0;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer P { float part[]; };
layout(std430, binding = 1) restrict readonly buffer Bias { float bias[]; };
layout(std430, binding = 2) restrict writeonly buffer Y { float y[]; };
#ifdef RLX_HALF
layout(constant_id = 1) const uint BIASDT = 0;  // storage: 0 f32, 1 f16, 2 bf16
layout(constant_id = 2) const uint YDT = 0;
layout(std430, binding = 1) restrict readonly buffer Bias16 { uint16_t bias16[]; };
layout(std430, binding = 2) restrict writeonly buffer Y16 { uint16_t y16[]; };
float ld_bias(uint i) { return BIASDT != 0u ? rlx_from16(BIASDT, uint(bias16[i])) : bias[i]; }
void st(uint i, float v) {
  if (YDT != 0u) y16[i] = uint16_t(rlx_to16(YDT, v));
  else y[i] = v;
}
#else
float ld_bias(uint i) { return bias[i]; }
void st(uint i, float v) { y[i] = v; }
#endif
layout(push_constant) uniform PC {
  uint mn, n, nsplit, poff, biasoff, yoff;
} pc;

void main() {
  uint i0 = rlx_global_index() * 4u;
  for (uint i = i0; i < min(i0 + 4u, pc.mn); ++i) {
    float v = 0.0;
    for (uint s = 0u; s < pc.nsplit; ++s) v += part[pc.poff + s * pc.mn + i];
    if (BIAS != 0u) v += ld_bias(pc.biasoff + i % pc.n);
    st(pc.yoff + i, v);
  }
}
