#version 450
// conv2d / conv3d and conv_transpose2d / conv_transpose3d (NC[D]HW, groups,
// strides, dilations, pads; 2-D as 3-D with D = OD = kD = 1), one invocation per
// output element, direct summation over the group's input channels and the kernel
// taps. TRANSPOSE = 0: conv, w [M, C/groups, kD, kH, kW]; TRANSPOSE = 1:
// conv_transpose, w [C, M/groups, kD, kH, kW], an output element gathers every
// input position whose scattered tap lands on it.
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
  uint D, OD, kD;
  int sD, dD, pf;
} pc;

void main() {
  uint i = rlx_global_index();
  if (i >= pc.n) return;
  int ow = int(i % pc.OW);
  uint t = i / pc.OW;
  int oh = int(t % pc.OH);
  t /= pc.OH;
  int od = int(t % pc.OD);
  t /= pc.OD;
  uint m = t % pc.M, nb = t / pc.M;
  uint KK = pc.kD * pc.kH * pc.kW;
  uint grp = m / pc.Mg, ml = m % pc.Mg;
  float acc = HAS_BIAS != 0u ? bias[pc.boff + m] : 0.0;
  for (uint cl = 0u; cl < pc.Cg; ++cl) {
    uint c = grp * pc.Cg + cl;
    uint xc = pc.xoff + (nb * pc.C + c) * pc.D * pc.H * pc.W;
    uint wc = TRANSPOSE == 0u ? pc.woff + (m * pc.Cg + cl) * KK : pc.woff + (c * pc.Mg + ml) * KK;
    for (uint kd = 0u; kd < pc.kD; ++kd) {
    int id;
    if (TRANSPOSE == 0u) {
      id = od * pc.sD - pc.pf + int(kd) * pc.dD;
    } else {
      int td = od + pc.pf - int(kd) * pc.dD;
      if (td < 0 || td % pc.sD != 0) continue;
      id = td / pc.sD;
    }
    if (id < 0 || id >= int(pc.D)) continue;
    uint xd = xc + uint(id) * pc.H * pc.W, wd = wc + kd * pc.kH * pc.kW;
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
        acc = fma(w[wd + kh * pc.kW + kw], x[xd + uint(ih) * pc.W + uint(iw)], acc);
      }
    }
    }
  }
  y[pc.yoff + i] = acc;
}
