#version 450
// Row softmax kernels, one work group per row. MODE 0: softmax along an axis
// (row elements `inner` apart); 1: scaled_masked_softmax over the last axis
// with the optional causal mask (key j visible to query i iff j <= i + Tk - Tq;
// a row with every key hidden gives zeros); 2: softmax_vjp, y * (dy - sum(dy * y)).
// Rows up to CACHE * work-group-size long are kept in registers (one global read).
// ".h16" variant: each tensor in its own storage (XDT, X2DT, YDT: 0 f32, 1 f16, 2 bf16),
// widened in registers, computed in f32, y rounded once on store.
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
layout(constant_id = 1) const uint CAUSAL = 0;
layout(constant_id = 2) const uint CACHE = 8;  // row elements per invocation kept in registers
layout(constant_id = 3) const uint XDT = 0;
layout(constant_id = 4) const uint X2DT = 0;
layout(constant_id = 5) const uint YDT = 0;
#include "common.glsl"
#include "reduce_wg.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };   // x, or dy for the vjp
layout(std430, binding = 1) restrict readonly buffer X2 { float x2[]; };  // y for the vjp (else unused)
layout(std430, binding = 2) restrict writeonly buffer Y { float y[]; };
#ifdef RLX_HALF
layout(std430, binding = 0) restrict readonly buffer X16 { uint16_t x16[]; };
layout(std430, binding = 1) restrict readonly buffer X216 { uint16_t x216[]; };
layout(std430, binding = 2) restrict writeonly buffer Y16 { uint16_t y16[]; };
#endif
float ld_x(uint i) { return RLX_LD(XDT, x, x16, i); }
float ld_x2(uint i) { return RLX_LD(X2DT, x2, x216, i); }
void st_y(uint i, float v) RLX_ST(YDT, y, y16, i, v)
layout(push_constant) uniform PC {
  uint rows, len, inner, xoff, x2off, yoff;
  float scale;
  uint tq;  // MODE 1: queries per row block (the Tq axis)
} pc;


void main() {
  uint row = rlx_group_index();
  if (row >= pc.rows) return;  // uniform across the work group
  uint t = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  uint base = (row / pc.inner) * pc.len * pc.inner + row % pc.inner;
  uint stride = pc.inner;
  bool cached = pc.len <= CACHE * wg;
  // keys visible to this row: j < limit
  uint limit = pc.len;
  if (MODE == 1u && CAUSAL != 0u) {
    int l = int(row % pc.tq) + int(pc.len) - int(pc.tq) + 1;
    limit = uint(clamp(l, 0, int(pc.len)));
  }

  if (MODE == 2u) {
    float dyv[CACHE], yv[CACHE];
    float dot = 0.0;
    for (uint k = 0u; k < CACHE; ++k) {
      uint j = t + k * wg;
      dyv[k] = 0.0;
      yv[k] = 0.0;
      if (cached && j < pc.len) {
        dyv[k] = ld_x(pc.xoff + base + j * stride);
        yv[k] = ld_x2(pc.x2off + base + j * stride);
        dot += dyv[k] * yv[k];
      }
    }
    if (!cached)
      for (uint j = t; j < pc.len; j += wg) dot += ld_x(pc.xoff + base + j * stride) * ld_x2(pc.x2off + base + j * stride);
    dot = rlx_wg_sum(dot);
    if (cached) {
      for (uint k = 0u; k < CACHE; ++k) {
        uint j = t + k * wg;
        if (j < pc.len) st_y(pc.yoff + base + j * stride, yv[k] * (dyv[k] - dot));
      }
    } else {
      for (uint j = t; j < pc.len; j += wg) {
        float yy = ld_x2(pc.x2off + base + j * stride);
        st_y(pc.yoff + base + j * stride, yy * (ld_x(pc.xoff + base + j * stride) - dot));
      }
    }
    return;
  }

  float scale = MODE == 1u ? pc.scale : 1.0;
  float v[CACHE];
  float m = -rlx_inf();
  for (uint k = 0u; k < CACHE; ++k) {
    uint j = t + k * wg;
    v[k] = -rlx_inf();
    if (cached && j < limit) {
      v[k] = ld_x(pc.xoff + base + j * stride) * scale;
      m = max(m, v[k]);
    }
  }
  if (!cached)
    for (uint j = t; j < limit; j += wg) m = max(m, ld_x(pc.xoff + base + j * stride) * scale);
  m = rlx_wg_max(m);
  bool empty = MODE == 1u && m == -rlx_inf();  // every key hidden: zeros
  float s = 0.0;
  if (cached) {
    for (uint k = 0u; k < CACHE; ++k)
      if (t + k * wg < limit) {
        v[k] = exp(v[k] - m);
        s += v[k];
      }
  } else {
    for (uint j = t; j < limit; j += wg) s += exp(ld_x(pc.xoff + base + j * stride) * scale - m);
  }
  s = rlx_wg_sum(s);
  if (cached) {
    for (uint k = 0u; k < CACHE; ++k) {
      uint j = t + k * wg;
      if (j < pc.len) st_y(pc.yoff + base + j * stride, (j < limit && !empty) ? v[k] / s : 0.0);
    }
  } else {
    for (uint j = t; j < pc.len; j += wg)
      st_y(pc.yoff + base + j * stride, (j < limit && !empty) ? exp(ld_x(pc.xoff + base + j * stride) * scale - m) / s : 0.0);
  }
}
