#version 450
// y = cond != 0 ? x : y2 with NumPy broadcasting of all three (strides 0 along broadcast dims)
// over the collapsed output shape (up to 6 dims).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint RANK = 1;
layout(constant_id = 1) const uint CDT = 0;  // storage kinds (common.glsl): 0 f32, 3 i8, 4 u8
layout(constant_id = 2) const uint ADT = 0;
layout(constant_id = 3) const uint BDT = 0;
layout(constant_id = 4) const uint YDT = 0;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer C { float c[]; };
layout(std430, binding = 1) restrict readonly buffer A { float a[]; };
layout(std430, binding = 2) restrict readonly buffer B { float b[]; };
layout(std430, binding = 3) restrict writeonly buffer Y { float y[]; };
layout(std430, binding = 0) restrict readonly buffer C8 { uint c8[]; };
layout(std430, binding = 1) restrict readonly buffer A8 { uint a8[]; };
layout(std430, binding = 2) restrict readonly buffer B8 { uint b8[]; };
layout(std430, binding = 3) buffer Y8 { uint y8[]; };
float ld_c(uint i) { return CDT >= 3u ? rlx_b2f(CDT, c8[i >> 2], i) : c[i]; }
float ld_a(uint i) { return ADT >= 3u ? rlx_b2f(ADT, a8[i >> 2], i) : a[i]; }
float ld_b(uint i) { return BDT >= 3u ? rlx_b2f(BDT, b8[i >> 2], i) : b[i]; }
layout(push_constant) uniform PC {
  uint n, coff, aoff, boff, yoff;
  uint dims[6], cs[6], as[6], bs[6];
} pc;

void main() {
  uint i = rlx_global_index();
  if (i >= pc.n) return;
  uint ci = pc.coff, ai = pc.aoff, bi = pc.boff, r = i;
  for (int d = int(RANK) - 1; d >= 0; --d) {
    uint k = r % pc.dims[d];
    r /= pc.dims[d];
    ci += k * pc.cs[d];
    ai += k * pc.as[d];
    bi += k * pc.bs[d];
  }
  float v = ld_c(ci) != 0.0 ? ld_a(ai) : ld_b(bi);
  if (YDT >= 3u) {
    RLX_STORE8(y8, pc.yoff + i, v);
  } else {
    y[pc.yoff + i] = v;
  }
}
