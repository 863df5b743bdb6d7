#version 450
// resize: nearest (LINEAR 0) or bilinear over the last two axes (LINEAR 1), one
// invocation per output element. The source taps of every output coordinate come
// from a table computed on the host in double precision (ir::resize_plan):
//   tab[a] = start of axis a's entries; entry o of axis a = (i0, i1, float bits of w),
//   value along the axis = (1 - w) x[i0] + w x[i1].
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint LINEAR = 0;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict readonly buffer T { uint tab[]; };
layout(std430, binding = 2) restrict writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
  uint n, rank, xoff, toff, yoff;
  uint dims[8], xs[8];  // output shape; element strides of x
} pc;

void main() {
  uint i = rlx_global_index();
  if (i >= pc.n) return;
  uint rem = i, o0 = pc.xoff, o1 = pc.xoff, c0 = 0u, c1 = 0u;
  float wh = 0.0, ww = 0.0;
  for (uint k = 0u; k < pc.rank; ++k) {
    uint a = pc.rank - 1u - k;
    uint c = rem % pc.dims[a];
    rem /= pc.dims[a];
    uint e = pc.toff + tab[pc.toff + a] + 3u * c;
    uint i0 = tab[e], i1 = tab[e + 1u];
    if (LINEAR != 0u && a == pc.rank - 1u) {
      c0 = i0 * pc.xs[a];
      c1 = i1 * pc.xs[a];
      ww = uintBitsToFloat(tab[e + 2u]);
    } else {
      o0 += i0 * pc.xs[a];
      o1 += (LINEAR != 0u && a + 2u == pc.rank ? i1 : i0) * pc.xs[a];
      if (a + 2u == pc.rank) wh = uintBitsToFloat(tab[e + 2u]);
    }
  }
  if (LINEAR == 0u) {
    y[pc.yoff + i] = x[o0];
    return;
  }
  float top = x[o0 + c0] + ww * (x[o0 + c1] - x[o0 + c0]);
  float bot = x[o1 + c0] + ww * (x[o1 + c1] - x[o1 + c0]);
  y[pc.yoff + i] = top + wh * (bot - top);
}
