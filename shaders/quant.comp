#version 450
// MODE 0 quantize:   y = clamp(roundEven(x / scale) + zp, LO, HI) (NaN -> zp), ONNX QuantizeLinear
// MODE 1 dequantize: y = (q - zp) * scale, ONNX DequantizeLinear
// The scale (and zero point) element of element i: KIND 0 per tensor, 1 per axis (the
// coordinate along the axis), 2 blocked (the coordinates with the axis one divided by BLOCK).
// q and the zero point are i8/u8 bytes (XDT / ZDT / YDT 3 i8, 4 u8, read through 32-bit words,
// written with RLX_STORE8) or f32 values (0: i32, exact within |v| <= 2^24).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint MODE = 0;
layout(constant_id = 1) const uint KIND = 0;
layout(constant_id = 2) const uint HAS_ZP = 0;
layout(constant_id = 3) const uint XDT = 0;  // storage kinds (common.glsl): 0 f32, 3 i8, 4 u8
layout(constant_id = 4) const uint ZDT = 0;
layout(constant_id = 5) const uint YDT = 0;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict readonly buffer S { float s[]; };
layout(std430, binding = 2) restrict readonly buffer Z { float z[]; };
layout(std430, binding = 3) restrict writeonly buffer Y { float y[]; };
layout(std430, binding = 0) restrict readonly buffer X8 { uint x8[]; };
layout(std430, binding = 2) restrict readonly buffer Z8 { uint z8[]; };
layout(std430, binding = 3) buffer Y8 { uint y8[]; };
float ld_x(uint i) { return XDT >= 3u ? rlx_b2f(XDT, x8[i >> 2], i) : x[i]; }
float ld_z(uint i) { return ZDT >= 3u ? rlx_b2f(ZDT, z8[i >> 2], i) : z[i]; }
void st_y(uint i, float v) {
  if (YDT >= 3u) {
    RLX_STORE8(y8, i, v);
  } else {
    y[i] = v;
  }
}
layout(push_constant) uniform PC {
  uint n, xoff, soff, zoff, yoff, dim, inner, sdim, block;
  float lo, hi;
} pc;

void main() {
  uint i = rlx_global_index();
  if (i >= pc.n) return;
  uint j = 0u;
  if (KIND == 1u) {
    j = (i / pc.inner) % pc.dim;
  } else if (KIND == 2u) {
    uint in_ = i % pc.inner, c = (i / pc.inner) % pc.dim, outer = i / (pc.inner * pc.dim);
    j = (outer * pc.sdim + c / pc.block) * pc.inner + in_;
  }
  precise float sc = s[pc.soff + j];
  precise float zp = HAS_ZP != 0u ? ld_z(pc.zoff + j) : 0.0;
  precise float v = ld_x(pc.xoff + i);
  if (MODE == 0u) {
    // x / scale rounded as IEEE f32 division: a device's division may be off by an ulp or two,
    // so one residual step (exact with fma) brings the quotient to the correctly rounded one.
    // (Skipped where q is inf or NaN, or 1 / scale overflows: the step would make a NaN.)
    precise float q = v / sc;
    if (!isinf(q) && !isnan(q)) {
      precise float r = fma(-q, sc, v);
      precise float inv = 1.0 / sc;
      if (r != 0.0 && !isinf(inv)) q = fma(r, inv, q);
    }
    if (isnan(q)) {
      st_y(pc.yoff + i, zp);
      return;
    }
    st_y(pc.yoff + i, clamp(roundEven(q) + zp, pc.lo, pc.hi));
  } else {
    st_y(pc.yoff + i, (v - zp) * sc);
  }
}
