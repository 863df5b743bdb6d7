#version 450
// Normalisations over the last axis, one work group per row of D elements.
// MODE 0 layer_norm (x, weight?, bias?); 1 rms_norm (x, weight?);
// 2 layer_norm_vjp (dy, x); 3 rms_norm_vjp (dy, x). Two-pass statistics;
// rows up to CACHE * work-group-size long stay in registers.
// ".h16" variant: each tensor read and written in its own storage (XDT, WDT, BDT, YDT: 0 f32,
// 1 f16, 2 bf16), widened in registers, statistics in f32, y rounded once on store.
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_HALF
#extension GL_EXT_shader_16bit_storage : require
#endif
#ifdef RLX_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
layout(local_size_x = 256, local_size_x_id = 10) in;
layout(constant_id = 0) const uint MODE = 0;
layout(constant_id = 1) const uint HAS_W = 0;
layout(constant_id = 2) const uint HAS_B = 0;
layout(constant_id = 3) const uint CACHE = 8;  // row elements per invocation kept in registers
layout(constant_id = 4) const uint XDT = 0;
layout(constant_id = 5) const uint WDT = 0;
layout(constant_id = 6) const uint BDT = 0;
layout(constant_id = 7) const uint YDT = 0;
#include "common.glsl"
#include "reduce_wg.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };   // x, or dy for the vjps
layout(std430, binding = 1) restrict readonly buffer W { float w[]; };   // weight, or x for the vjps
layout(std430, binding = 2) restrict readonly buffer Bi { float bias[]; };
layout(std430, binding = 3) restrict writeonly buffer Y { float y[]; };
#ifdef RLX_HALF
layout(std430, binding = 0) restrict readonly buffer X16 { uint16_t x16[]; };
layout(std430, binding = 1) restrict readonly buffer W16 { uint16_t w16[]; };
layout(std430, binding = 2) restrict readonly buffer Bi16 { uint16_t bias16[]; };
layout(std430, binding = 3) restrict writeonly buffer Y16 { uint16_t y16[]; };
#endif
float ld_x(uint i) { return RLX_LD(XDT, x, x16, i); }
float ld_w(uint i) { return RLX_LD(WDT, w, w16, i); }
float ld_b(uint i) { return RLX_LD(BDT, bias, bias16, i); }
void st_y(uint i, float v) RLX_ST(YDT, y, y16, i, v)
layout(push_constant) uniform PC {
  uint rows, d, xoff, woff, boff, yoff;
  float eps;
} pc;

bool vjp() { return MODE >= 2u; }

void main() {
  uint row = rlx_group_index();
  if (row >= pc.rows) return;  // uniform across the work group
  uint t = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  uint D = pc.d;
  bool cached = D <= CACHE * wg;
  // xb: the normalised input (x); gb: dy for the vjps
  uint xb = (vjp() ? pc.woff : pc.xoff) + row * D;
  uint gb = pc.xoff + row * D;
  float xv[CACHE], gv[CACHE];
  for (uint k = 0u; k < CACHE; ++k) {
    uint j = t + k * wg;
    xv[k] = cached && j < D ? (vjp() ? ld_w(xb + j) : ld_x(xb + j)) : 0.0;
    gv[k] = cached && vjp() && j < D ? ld_x(gb + j) : 0.0;
  }
#define XAT(k, j) (cached ? xv[k] : (vjp() ? ld_w(xb + (j)) : ld_x(xb + (j))))
#define GAT(k, j) (cached ? gv[k] : ld_x(gb + (j)))
#define FOR_ROW(body)                                           \
  if (cached) {                                                 \
    for (uint k = 0u; k < CACHE; ++k) {                         \
      uint j = t + k * wg;                                      \
      if (j < D) { body }                                       \
    }                                                           \
  } else {                                                      \
    for (uint j = t, k = 0u; j < D; j += wg) { body }           \
  }

  bool layer = MODE == 0u || MODE == 2u;
  float mean = 0.0;
  if (layer) {
    float s = 0.0;
    FOR_ROW(s += XAT(k, j);)
    mean = rlx_wg_sum(s) / float(D);
  }
  float q = 0.0;  // sum of squares (of x - mean for layer norms)
  FOR_ROW(float c = XAT(k, j) - mean; q += c * c;)
  float rstd = 1.0 / sqrt(rlx_wg_sum(q) / float(D) + pc.eps);

  if (MODE == 0u || MODE == 1u) {
    FOR_ROW(
      float v = (XAT(k, j) - mean) * rstd;
      if (HAS_W != 0u) v *= ld_w(pc.woff + j);
      if (HAS_B != 0u) v += ld_b(pc.boff + j);
      st_y(pc.yoff + row * D + j, v);
    )
    return;
  }
  if (MODE == 2u) {
    // dx = rstd * (dy - mean(dy) - xhat * mean(dy * xhat))
    float sg = 0.0, sgx = 0.0;
    FOR_ROW(float g = GAT(k, j); sg += g; sgx += g * (XAT(k, j) - mean) * rstd;)
    float mg = rlx_wg_sum(sg) / float(D);
    float mgx = rlx_wg_sum(sgx) / float(D);
    FOR_ROW(
      float xh = (XAT(k, j) - mean) * rstd;
      st_y(pc.yoff + row * D + j, rstd * (GAT(k, j) - mg - xh * mgx));
    )
    return;
  }
  // MODE 3: dx = rstd * dy - x * rstd^3 * mean(dy * x)
  float sgx = 0.0;
  FOR_ROW(sgx += GAT(k, j) * XAT(k, j);)
  float mgx = rlx_wg_sum(sgx) / float(D);
  float r3 = rstd * rstd * rstd;
  FOR_ROW(st_y(pc.yoff + row * D + j, rstd * GAT(k, j) - XAT(k, j) * r3 * mgx);)
}
