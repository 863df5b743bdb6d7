#version 450
// Rotary position embedding over x [..., S, D], one invocation per element.
// Position p = offset + s (an integer); pair i < dims/2 turns by
// theta = p * scale * base^(-2i/dims). The host tables F_i = frac(scale *
// base^(-2i/dims) / 2pi) as a 64-bit fixed-point fraction (two uints per pair),
// so frac(p * F_i) -- the angle in turns -- is exact integer arithmetic mod 2^64:
// accurate at any position, with no reliance on fused multiply-add.
// TRADITIONAL 0: feature i pairs with i + dims/2; 1: 2i pairs with 2i + 1.
// ".h16" variant: x and y in their own storage (XDT, YDT: 0 f32, 1 f16, 2 bf16), the rotation in
// f32, y rounded once on store.
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_HALF
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint TRADITIONAL = 0;
layout(constant_id = 1) const uint OFFSET_INPUT = 0;  // offset read from the i32 scalar input
layout(constant_id = 2) const uint XDT = 0;
layout(constant_id = 3) const uint YDT = 0;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict readonly buffer F { uint freq[]; };  // [dims/2] x (hi, lo) of F_i
layout(std430, binding = 2) restrict readonly buffer O { float offset_in[]; };
layout(std430, binding = 3) restrict writeonly buffer Y { float y[]; };
#ifdef RLX_HALF
layout(std430, binding = 0) restrict readonly buffer X16 { uint16_t x16[]; };
layout(std430, binding = 3) restrict writeonly buffer Y16 { uint16_t y16[]; };
#endif
float ld_x(uint i) { return RLX_LD(XDT, x, x16, i); }
void st_y(uint i, float v) RLX_ST(YDT, y, y16, i, v)
layout(push_constant) uniform PC {
  uint n, s, d, dims, xoff, foff, ooff, yoff;
  int offset;
} pc;

void main() {
  uint gi = rlx_global_index();
  if (gi >= pc.n) return;
  uint f = gi % pc.d, row = gi / pc.d;
  uint xb = pc.xoff + row * pc.d;
  if (f >= pc.dims) {
    st_y(pc.yoff + gi, ld_x(xb + f));
    return;
  }
  uint half_ = pc.dims / 2u, i, fa, fb;
  if (TRADITIONAL != 0u) {
    i = f / 2u;
    fa = 2u * i;
    fb = fa + 1u;
  } else {
    i = f % half_;
    fa = i;
    fb = i + half_;
  }
  int p = (OFFSET_INPUT != 0u ? int(offset_in[pc.ooff]) : pc.offset) + int(row % pc.s);
  // turns = frac(|p| * F) as 64-bit fixed point (hi, lo), negated for p < 0
  uint pa = uint(abs(p)), carry, lo;
  umulExtended(pa, freq[pc.foff + 2u * i + 1u], carry, lo);
  uint hi = pa * freq[pc.foff + 2u * i] + carry;
  if (p < 0) {
    lo = ~lo + 1u;
    hi = ~hi + (lo == 0u ? 1u : 0u);
  }
  // signed turns in [-0.5, 0.5): the angle in [-pi, pi), where sin/cos are accurate
  float turns = float(int(hi)) * 2.3283064365386963e-10 + float(lo) * 5.421010862427522e-20;
  float theta = turns * 6.283185307179586;
  float sn = sin(theta), cs = cos(theta);
  float a = ld_x(xb + fa), b = ld_x(xb + fb);
  st_y(pc.yoff + gi, f == fa ? a * cs - b * sn : a * sn + b * cs);
}
