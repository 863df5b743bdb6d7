#version 450
// TopK along lines too long for one invocation to walk (kernels_long.cpp): llvmpipe (lavapipe)
// ends an invocation's loops after 65535 iterations in all, silently, so here every invocation
// walks a bounded part of a line (a run of `span` elements, or a binary search) and the passes
// merge the parts. (argmax/argmin and cumsum along such lines: axis_wg.comp.) x is viewed as
// [outer, len, inner] as in axis_op.comp (line = o * inner + i); pairs (value bits, index) travel
// in uint scratch (PI in, PO out), so indices and NaN payloads stay exact.
//   OP 0 topk runs: one invocation per element ranks it within its chunk of `span` elements (the
//        elements before it in axis_op.comp's order: value, NaN above every number, then lower
//        index; bit 0 largest) and writes itself at that rank of the chunk's run when below cap_out.
//   OP 1 topk merge: runs r and r ^ 1 (sorted, each the first cap_in of `span` elements) become
//        one run: each element's place is its place in its run plus the count of the other run's
//        elements before it (a binary search; the order is total, as indices differ), kept when
//        below cap_out; with bit 3 (the last merge) written to y (bit 1: the index, else the value).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint OP = 0;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer Y { float y[]; };
layout(std430, binding = 2) restrict readonly buffer PI { uint pi[]; };
layout(std430, binding = 3) restrict writeonly buffer PO { uint po[]; };
layout(push_constant) uniform PC {
  uint lines, len, inner, k, xoff, yoff, flags;
  uint span;      // elements of a line per chunk (OP 0) or per input run (OP 1)
  uint nchunks;   // input runs per line (OP 1)
  uint cap_in;    // OP 1: stored elements per input run
  uint nout;      // output runs per line
  uint cap_out;   // stored elements per output run
  uint pioff, pooff;
} pc;

// true when (va, ia) comes before (vb, ib) in topk order (as axis_op.comp)
bool before(float va, uint ia, float vb, uint ib, bool largest) {
  bool na = isnan(va), nb = isnan(vb);
  if (na || nb) {
    if (na && nb) return ia < ib;
    return largest ? na : nb;
  }
  if (va != vb) return largest ? va > vb : va < vb;
  return ia < ib;
}

uint xbase(uint line) { return pc.xoff + (line / pc.inner) * pc.len * pc.inner + line % pc.inner; }

void main() {
  uint t = rlx_global_index();
  if (OP == 0u) {
    if (t >= pc.lines * pc.len) return;
    uint line = t / pc.len, j = t % pc.len, c = j / pc.span;
    uint base = xbase(line), j0 = c * pc.span, j1 = min(pc.len, j0 + pc.span);
    bool largest = (pc.flags & 1u) != 0u;
    float v = x[base + j * pc.inner];
    uint rank = 0u;
    for (uint q = j0; q < j1 && rank < pc.cap_out; ++q)
      if (before(x[base + q * pc.inner], q, v, j, largest)) ++rank;
    if (rank < pc.cap_out) {
      uint o = pc.pooff + 2u * ((line * pc.nout + c) * pc.cap_out + rank);
      po[o] = floatBitsToUint(v);
      po[o + 1u] = j;
    }
  } else if (OP == 1u) {
    uint per_line = pc.nchunks * pc.cap_in;
    if (t >= pc.lines * per_line) return;
    uint line = t / per_line, r = (t % per_line) / pc.cap_in, i = t % pc.cap_in;
    if (i >= min(pc.cap_in, pc.len - r * pc.span)) return;  // past the end of a short last run
    bool largest = (pc.flags & 1u) != 0u;
    uint me = pc.pioff + 2u * ((line * pc.nchunks + r) * pc.cap_in + i);
    float v = uintBitsToFloat(pi[me]);
    uint idx = pi[me + 1u], pos = i;
    uint p = r ^ 1u;
    if (p < pc.nchunks) {  // count the partner run's elements before this one
      uint pb = pc.pioff + 2u * (line * pc.nchunks + p) * pc.cap_in;
      uint lo = 0u, hi = min(pc.cap_in, pc.len - p * pc.span);
      while (lo < hi) {
        uint mid = (lo + hi) / 2u;
        if (before(uintBitsToFloat(pi[pb + 2u * mid]), pi[pb + 2u * mid + 1u], v, idx, largest)) lo = mid + 1u;
        else hi = mid;
      }
      pos += lo;
    }
    if (pos >= pc.cap_out) return;
    if ((pc.flags & 8u) != 0u) {
      uint o = line / pc.inner, ii = line % pc.inner;
      y[pc.yoff + o * pc.k * pc.inner + ii + pos * pc.inner] = (pc.flags & 2u) != 0u ? float(idx) : v;
    } else {
      uint o = pc.pooff + 2u * ((line * pc.nout + r / 2u) * pc.cap_out + pos);
      po[o] = floatBitsToUint(v);
      po[o + 1u] = idx;
    }
  }
}
