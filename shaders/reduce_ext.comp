#version 450
// min (OP 0) / prod (OP 1) over arbitrary axes, one invocation per output. The host collapses
// the input into up to 4 kept and 4 reduced dims (element strides), as for reduce.comp.
// min propagates NaN; prod accumulates in f32 (in order). A reduction longer than one invocation
// may walk (llvmpipe ends an invocation's loops after 65535 iterations) runs in passes
// (kernels_index.cpp's min_prod): one invocation per (output, chunk of `chunk` reduced elements)
// writes the chunk's result to y[output * nchunks + chunk], and passes over those reduce them by
// chunks again, on the serial route (a CPU device such as lavapipe, or RLX_VK_LONG_ROUTE=serial);
// elsewhere as work-group passes (reduce_ext_wg.comp).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint KR = 1;  // kept rank, 0..4
layout(constant_id = 1) const uint RR = 1;  // reduced rank, 1..4
layout(constant_id = 2) const uint OP = 0;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
  uint nout, nred, xoff, yoff;
  uint kd[4], ks[4], rd[4], rs[4];
  uint chunk, nchunks;  // one pass: nred, 1
} pc;

void main() {
  uint t = rlx_global_index();
  if (t >= pc.nout * pc.nchunks) return;
  uint o = t / pc.nchunks, r0 = (t % pc.nchunks) * pc.chunk, r1 = min(pc.nred, r0 + pc.chunk);
  uint base = pc.xoff, rem = o;
  for (int d = int(KR) - 1; d >= 0; --d) {
    base += (rem % pc.kd[d]) * pc.ks[d];
    rem /= pc.kd[d];
  }
  float acc = OP == 0u ? rlx_inf() : 1.0;
  bool nan_seen = false;
  for (uint r = r0; r < r1; ++r) {
    uint off = 0u, q = r;
    for (int d = int(RR) - 1; d >= 0; --d) {
      off += (q % pc.rd[d]) * pc.rs[d];
      q /= pc.rd[d];
    }
    float v = x[base + off];
    nan_seen = nan_seen || isnan(v);
    acc = OP == 0u ? min(acc, v) : acc * v;
  }
  y[pc.yoff + t] = nan_seen ? rlx_nan() : acc;
}
