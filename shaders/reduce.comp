#version 450
// sum / mean / max over arbitrary axes. The host collapses the input into up to
// 4 kept and 4 reduced dims (with element strides). MODE 0: one work group per
// output (reduced elements innermost: coalesced row reads); MODE 1: one
// invocation per output (a kept dim innermost: coalesced across invocations).
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
layout(local_size_x = 256, local_size_x_id = 10) in;
layout(constant_id = 0) const uint KR = 1;    // kept rank, 0..4
layout(constant_id = 1) const uint RR = 1;    // reduced rank, 1..4
layout(constant_id = 2) const uint OP = 0;    // 0 sum, 1 mean, 2 max
layout(constant_id = 3) const uint MODE = 0;  // 0 group per output, 1 invocation per output
#include "common.glsl"
#include "reduce_wg.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
  uint nout, nred, xoff, yoff;
  uint kd[4], ks[4], rd[4], rs[4];
} pc;

uint kept_offset(uint o) {
  uint off = 0u;
  for (int d = int(KR) - 1; d >= 0; --d) {
    off += (o % pc.kd[d]) * pc.ks[d];
    o /= pc.kd[d];
  }
  return off;
}
uint reduced_offset(uint r) {
  if (RR == 1) return r * pc.rs[0];
  uint off = 0u;
  for (int d = int(RR) - 1; d >= 0; --d) {
    off += (r % pc.rd[d]) * pc.rs[d];
    r /= pc.rd[d];
  }
  return off;
}

// Per-invocation partial over reduced elements first, first+step, ...: Kahan-compensated
// sum (compensation dropped once the sum is infinite, so +-inf propagate as in f32 addition),
// or max with a NaN flag.
void partial(uint base, uint first, uint step, out float acc, out bool nan_seen) {
  precise float s = 0.0, c = 0.0;
  float m = -rlx_inf();
  nan_seen = false;
  for (uint r = first; r < pc.nred; r += 4u * step) {
    float v[4];  // four loads in flight
    for (uint u = 0u; u < 4u; ++u) {
      uint ru = r + u * step;
      v[u] = ru < pc.nred ? x[base + reduced_offset(ru)] : (OP == 2u ? -rlx_inf() : 0.0);
    }
    for (uint u = 0u; u < 4u; ++u) {
      if (OP == 2u) {
        nan_seen = nan_seen || isnan(v[u]);
        m = max(m, v[u]);
      } else {
        precise float t = v[u] - c;
        precise float w = s + t;
        c = isinf(w) ? 0.0 : (w - s) - t;  // an infinite sum stays infinite: no inf - inf
        s = w;
      }
    }
  }
  acc = OP == 2u ? m : s;
}

float finish(float acc, bool nan_seen) {
  if (OP == 2u) return nan_seen ? rlx_nan() : acc;
  if (OP == 1u) return acc / float(pc.nred);
  return acc;
}

void main() {
  float acc;
  bool nan_seen;
  if (MODE == 1u) {
    uint o = rlx_global_index();
    if (o >= pc.nout) return;
    partial(pc.xoff + kept_offset(o), 0u, 1u, acc, nan_seen);
    y[pc.yoff + o] = finish(acc, nan_seen);
    return;
  }
  uint o = rlx_group_index();
  if (o >= pc.nout) return;  // uniform across the work group
  partial(pc.xoff + kept_offset(o), gl_LocalInvocationID.x, gl_WorkGroupSize.x, acc, nan_seen);
  if (OP == 2u) {
    nan_seen = rlx_wg_sum(nan_seen ? 1.0 : 0.0) > 0.0;
    acc = rlx_wg_max(acc);
  } else {
    acc = rlx_wg_sum(acc);
  }
  if (gl_LocalInvocationID.x == 0u) y[pc.yoff + o] = finish(acc, nan_seen);
}
