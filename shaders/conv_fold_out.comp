#version 450
// The output of a convolution taken as one product with the batch folded into its columns
// (kernels_conv_fold.cpp): t [M, N*P] (f32: NSPLIT partial products [NSPLIT, M, N*P] of a
// product split over K; TDT 16-bit: the whole product, its bias added, rounded) becomes y [N, M, P]:
//   y[n, m, p] = act(sum_s t_s[m, n*P + p] + bias[m] + r[n, m, p])
// in f32, rounded into y's dtype; r (RES = 1) in y's dtype and layout, ACT 1 ReLU.
// One invocation per element of y, in y's order (consecutive p: consecutive t elements).
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_HALF  // the ".h16" variant: bias, y and r may be f16/bf16 in 2-byte storage
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint BIAS = 0;
layout(constant_id = 1) const uint BIASDT = 0;  // storage: 0 f32, 1 f16, 2 bf16
layout(constant_id = 2) const uint YDT = 0;     // y's and r's storage
layout(constant_id = 3) const uint RES = 0;
layout(constant_id = 4) const uint ACT = 0;
layout(constant_id = 5) const uint TDT = 0;  // t's storage: 0 f32 (NSPLIT partials), else 16-bit (one product)
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer T { float t[]; };
layout(std430, binding = 1) restrict readonly buffer Bias { float bias[]; };
layout(std430, binding = 2) restrict writeonly buffer Y { float y[]; };
layout(std430, binding = 3) restrict readonly buffer R { float r[]; };
#ifdef RLX_HALF
layout(std430, binding = 0) restrict readonly buffer T16 { uint16_t t16[]; };
layout(std430, binding = 1) restrict readonly buffer Bias16 { uint16_t bias16[]; };
layout(std430, binding = 2) restrict writeonly buffer Y16 { uint16_t y16[]; };
layout(std430, binding = 3) restrict readonly buffer R16 { uint16_t r16[]; };
float ld_bias(uint i) { return BIASDT != 0u ? rlx_from16(BIASDT, uint(bias16[i])) : bias[i]; }
float ld_t(uint i) { return TDT != 0u ? rlx_from16(TDT, uint(t16[i])) : t[i]; }
float ld_r(uint i) { return YDT != 0u ? rlx_from16(YDT, uint(r16[i])) : r[i]; }
void st(uint i, float v) {
  if (YDT != 0u) y16[i] = uint16_t(rlx_to16(YDT, v));
  else y[i] = v;
}
#else
float ld_bias(uint i) { return bias[i]; }
float ld_t(uint i) { return t[i]; }
float ld_r(uint i) { return r[i]; }
void st(uint i, float v) { y[i] = v; }
#endif
layout(push_constant) uniform PC {
  uint total, m, p, cols, nsplit, toff, biasoff, yoff, roff;
} pc;

void main() {
  const uint i = rlx_global_index();
  if (i >= pc.total) return;
  const uint p = i % pc.p, q = i / pc.p, m = q % pc.m, n = q / pc.m;
  const uint j = pc.toff + m * pc.cols + n * pc.p + p, part = pc.m * pc.cols;
  float v = 0.0;
  for (uint s = 0u; s < pc.nsplit; ++s) v += ld_t(j + s * part);
  if (BIAS != 0u) v += ld_bias(pc.biasoff + m);
  if (RES != 0u) v += ld_r(pc.roff + i);
  if (ACT == 1u) v = v < 0.0 ? 0.0 : v;  // NaN stays NaN, as elementwise.def's relu
  st(pc.yoff + i, v);
}
