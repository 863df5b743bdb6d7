#version 450
// y = cond != 0 ? x : y2 with NumPy broadcasting of all three (strides 0 along broadcast dims)
// over the collapsed output shape (up to 6 dims).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint RANK = 1;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer C { float c[]; };
layout(std430, binding = 1) restrict readonly buffer A { float a[]; };
layout(std430, binding = 2) restrict readonly buffer B { float b[]; };
layout(std430, binding = 3) restrict writeonly buffer Y { float y[]; };
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
  y[pc.yoff + i] = c[ci] != 0.0 ? a[ai] : b[bi];
}
