#version 450
// conv2d and conv_transpose2d (NCHW, groups, strides, dilations, pads), one
// invocation per output element, direct summation over the group's input
// channels and the kernel taps. TRANSPOSE = 0: conv2d, w [M, C/groups, kH, kW];
// TRANSPOSE = 1: conv_transpose2d, w [C, M/groups, kH, kW], an output element
// gathers every input position whose scattered tap lands on it.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint TRANSPOSE = 0;
layout(constant_id = 1) const uint HAS_BIAS = 0;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict readonly buffer Wt { float w[]; };
layout(std430, binding = 2) restrict readonly buffer B { float bias[]; };
layout(std430, binding = 3) restrict writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
  uint n, C, H, W, M, OH, OW, kH, kW;
  int sH, sW, dH, dW, pt, pl;
  uint Cg, Mg, xoff, woff, boff, yoff;
} pc;

void main() {
  uint i = rlx_global_index();
  if (i >= pc.n) return;
  int ow = int(i % pc.OW);
  uint t = i / pc.OW;
  int oh = int(t % pc.OH);
  t /= pc.OH;
  uint m = t % pc.M, nb = t / pc.M;
  uint grp = m / pc.Mg, ml = m % pc.Mg;
  float acc = HAS_BIAS != 0u ? bias[pc.boff + m] : 0.0;
  for (uint cl = 0u; cl < pc.Cg; ++cl) {
    uint c = grp * pc.Cg + cl;
    uint xc = pc.xoff + (nb * pc.C + c) * pc.H * pc.W;
    uint wc = TRANSPOSE == 0u ? pc.woff + (m * pc.Cg + cl) * pc.kH * pc.kW
                              : pc.woff + (c * pc.Mg + ml) * pc.kH * pc.kW;
    for (uint kh = 0u; kh < pc.kH; ++kh) {
      int ih;
      if (TRANSPOSE == 0u) {
        ih = oh * pc.sH - pc.pt + int(kh) * pc.dH;
      } else {
        int th = oh + pc.pt - int(kh) * pc.dH;
        if (th < 0 || th % pc.sH != 0) continue;
        ih = th / pc.sH;
      }
      if (ih < 0 || ih >= int(pc.H)) continue;
      for (uint kw = 0u; kw < pc.kW; ++kw) {
        int iw;
        if (TRANSPOSE == 0u) {
          iw = ow * pc.sW - pc.pl + int(kw) * pc.dW;
        } else {
          int tw = ow + pc.pl - int(kw) * pc.dW;
          if (tw < 0 || tw % pc.sW != 0) continue;
          iw = tw / pc.sW;
        }
        if (iw < 0 || iw >= int(pc.W)) continue;
        acc = fma(w[wc + kh * pc.kW + kw], x[xc + uint(ih) * pc.W + uint(iw)], acc);
      }
    }
  }
  y[pc.yoff + i] = acc;
}
