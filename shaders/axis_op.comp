#version 450
// Ops along one axis of x viewed as [outer, len, inner], one invocation per line (outer, inner):
//   OP 0 argmax, 1 argmin (FLAGS bit 0: select_last_index; NaN counts as the extreme, first wins)
//   OP 2 cumsum (bit 0 exclusive, bit 1 reverse; Kahan-compensated f32 sum)
//   OP 3 topk of K (bit 0 largest, bit 1 write indices instead of values): one invocation per
//        element (line, j), which counts the elements ordered before it in (value, then lower
//        index) order, NaN above every number, and writes itself at that rank when it is below K;
//        O(len) per invocation, all in parallel. (A pick-by-pick loop of K * len iterations in one
//        invocation is cut short by llvmpipe's limit of 65535 loop iterations per invocation.)
// Indices are written as float values (f32 storage).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint OP = 0;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
  uint lines, len, inner, k, xoff, yoff, flags;
} pc;

// true when (va, ia) comes before (vb, ib) in topk order
bool before(float va, uint ia, float vb, uint ib, bool largest) {
  bool na = isnan(va), nb = isnan(vb);
  if (na || nb) {
    if (na && nb) return ia < ib;
    return largest ? na : nb;
  }
  if (va != vb) return largest ? va > vb : va < vb;
  return ia < ib;
}

void main() {
  uint t = rlx_global_index();
  if (OP == 3u) {
    if (t >= pc.lines * pc.len) return;
    uint line = t / pc.len, j = t % pc.len;
    uint o = line / pc.inner, i = line % pc.inner;
    uint base = pc.xoff + o * pc.len * pc.inner + i;
    bool largest = (pc.flags & 1u) != 0u, want_idx = (pc.flags & 2u) != 0u;
    float v = x[base + j * pc.inner];
    uint rank = 0u;
    for (uint q = 0u; q < pc.len && rank < pc.k; ++q)
      if (before(x[base + q * pc.inner], q, v, j, largest)) ++rank;
    if (rank < pc.k) y[pc.yoff + o * pc.k * pc.inner + i + rank * pc.inner] = want_idx ? float(j) : v;
    return;
  }
  if (t >= pc.lines) return;
  uint o = t / pc.inner, i = t % pc.inner;
  uint base = pc.xoff + o * pc.len * pc.inner + i;
  if (OP <= 1u) {
    bool last = (pc.flags & 1u) != 0u;
    uint best = 0u;
    float bv = x[base];
    for (uint j = 1u; j < pc.len && !isnan(bv); ++j) {
      float c = x[base + j * pc.inner];
      bool better = isnan(c) || (OP == 0u ? c > bv : c < bv) || (last && c == bv);
      if (better) {
        best = j;
        bv = c;
      }
    }
    y[pc.yoff + t] = float(best);
  } else if (OP == 2u) {
    bool excl = (pc.flags & 1u) != 0u, rev = (pc.flags & 2u) != 0u;
    uint ybase = pc.yoff + o * pc.len * pc.inner + i;
    precise float s = 0.0, comp = 0.0;
    for (uint q = 0u; q < pc.len; ++q) {
      uint j = rev ? pc.len - 1u - q : q;
      float v = x[base + j * pc.inner];
      if (excl) y[ybase + j * pc.inner] = s;
      precise float tv = v - comp;
      precise float w = s + tv;
      comp = isinf(w) ? 0.0 : (w - s) - tv;  // no inf - inf once the sum is infinite
      s = w;
      if (!excl) y[ybase + j * pc.inner] = s;
    }
  }
}
