#version 450
// max_pool2d / max_pool3d (MODE 0) and avg_pool2d / avg_pool3d (MODE 1) over
// NC[D]HW (2-D as 3-D with D = OD = kD = 1), one invocation per output element. Padding never enters a max; the average divides by the window
// clipped to the input (or, with count_include_pad, to the padded input).
// The ".h16" variant reads and writes f16/bf16 (DT) in 2-byte storage, the window in f32 and one
// rounding (a max is exact), as widening into f32 and rounding back would. KH, KW > 0 (the 2-D
// window's size as spec constants) unroll the window: every tap is loaded (clamped into the
// input) before any is used, so its loads are in flight together.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifdef RLX_HALF
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint MODE = 0;
layout(constant_id = 1) const uint DT = 0;  // storage kind of x and y (common.glsl): 0 f32, 1 f16, 2 bf16
layout(constant_id = 2) const uint KH = 0;  // > 0: the window's height (== pc.kH; pc.kD 1)
layout(constant_id = 3) const uint KW = 0;  // > 0: its width (== pc.kW)
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer Y { float y[]; };
#ifdef RLX_HALF
layout(std430, binding = 0) restrict readonly buffer X16 { uint16_t x16[]; };
layout(std430, binding = 1) restrict writeonly buffer Y16 { uint16_t y16[]; };
#endif
layout(push_constant) uniform PC {
  uint n, H, W, OH, OW;
  int kH, kW, sH, sW, dH, dW, pt, pl, pb, pr;
  uint count_include_pad, xoff, yoff;
  uint D, OD;
  int kD, sD, dD, pf, pk;
} pc;

void main() {
  uint i = rlx_global_index();
  if (i >= pc.n) return;
  int ow = int(i % pc.OW);
  uint t = i / pc.OW;
  int oh = int(t % pc.OH);
  t /= pc.OH;
  int od = int(t % pc.OD);
  uint plane = t / pc.OD;
  uint xp0 = pc.xoff + plane * pc.D * pc.H * pc.W;
  int ds = od * pc.sD - pc.pf, hs = oh * pc.sH - pc.pt, ws = ow * pc.sW - pc.pl;
  float acc = MODE == 0u ? -rlx_inf() : 0.0;
  if (KH != 0u && KW != 0u) {
    float v[KH * KW + 1u];  // + 1: never an array of 0 (KH = KW = 0 specialises this block away, but the
                            // module must stay valid SPIR-V: the validation layer checks it)
    [[unroll]] for (uint kh = 0u; kh < KH; ++kh) {
      const int ih = clamp(hs + int(kh) * pc.dH, 0, int(pc.H) - 1);
      [[unroll]] for (uint kw = 0u; kw < KW; ++kw) {
        const int iw = clamp(ws + int(kw) * pc.dW, 0, int(pc.W) - 1);
        v[kh * KW + kw] = RLX_LD(DT, x, x16, xp0 + uint(ih) * pc.W + uint(iw));
      }
    }
    [[unroll]] for (uint kh = 0u; kh < KH; ++kh) {
      const int ih = hs + int(kh) * pc.dH;
      [[unroll]] for (uint kw = 0u; kw < KW; ++kw) {
        const int iw = ws + int(kw) * pc.dW;
        if (ih < 0 || ih >= int(pc.H) || iw < 0 || iw >= int(pc.W)) continue;
        const float e = v[kh * KW + kw];
        if (MODE == 0u) acc = (e > acc || isnan(e)) ? e : acc;
        else acc += e;
      }
    }
  } else
  for (int kd = 0; kd < pc.kD; ++kd) {
  int id = ds + kd * pc.dD;
  if (id < 0 || id >= int(pc.D)) continue;
  uint xp = xp0 + uint(id) * pc.H * pc.W;
  for (int kh = 0; kh < pc.kH; ++kh) {
    int ih = hs + kh * pc.dH;
    if (ih < 0 || ih >= int(pc.H)) continue;
    for (int kw = 0; kw < pc.kW; ++kw) {
      int iw = ws + kw * pc.dW;
      if (iw < 0 || iw >= int(pc.W)) continue;
      float v = RLX_LD(DT, x, x16, xp + uint(ih) * pc.W + uint(iw));
      if (MODE == 0u) acc = (v > acc || isnan(v)) ? v : acc;
      else acc += v;
    }
  }
  }
  if (MODE == 1u) {
    int de, he, we, d0 = ds, h0 = hs, w0 = ws;
    if (pc.count_include_pad != 0u) {
      de = min(ds + pc.kD, int(pc.D) + pc.pk);
      he = min(hs + pc.kH, int(pc.H) + pc.pb);
      we = min(ws + pc.kW, int(pc.W) + pc.pr);
    } else {
      de = min(ds + pc.kD, int(pc.D));
      he = min(hs + pc.kH, int(pc.H));
      we = min(ws + pc.kW, int(pc.W));
      d0 = max(ds, 0);
      h0 = max(hs, 0);
      w0 = max(ws, 0);
    }
    acc /= float((de - d0) * (he - h0) * (we - w0));
  }
  RLX_ST(DT, y, y16, pc.yoff + i, acc);
}
