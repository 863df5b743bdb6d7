#version 450
// Ops along lines too long for one invocation to walk (kernels_long.cpp): llvmpipe (lavapipe) ends
// an invocation's loops after 65535 iterations in all, silently, so here every invocation walks a
// bounded part of a line (a chunk of `span` elements, or a binary search) and the passes combine
// the parts. Argmax/argmin and cumsum (OP 0-3) run here on the serial route (a CPU device such
// as lavapipe, or RLX_VK_LONG_ROUTE=serial: kernels.h's long_wg), as work-group passes
// (axis_wg.comp) elsewhere; TopK (OP 4, 5) always runs here. x is viewed as [outer, len, inner]
// as in axis_op.comp (line = o * inner + i); pairs (value bits, index) travel in uint scratch
// (PI in, PO out), so indices and NaN payloads stay exact.
//   OP 0 argmax, 1 argmin: one invocation per (line, chunk) keeps the chunk's best (value, index)
//        with axis_op.comp's rule (FLAGS bit 0 select_last_index; the first NaN wins); reads x
//        (bit 2 clear) or the pairs of a previous pass (bit 2 set, `len` pairs per line); writes
//        pairs, or (bit 3 set, one chunk per line) the index into y.
//   OP 2 cumsum block sums: one invocation per (line, chunk of scan positions; bit 1 reverse) writes
//        the chunk's Kahan sum (f32 bits) to PO.
//   OP 3 cumsum: one invocation per (line, chunk) scans its chunk from the chunk's offset (the
//        exclusive scan of the block sums, PI) as axis_op.comp does (bit 0 exclusive, bit 1 reverse).
//   OP 4 topk runs: one invocation per element ranks it within its chunk of `span` elements (the
//        elements before it in axis_op.comp's order: value, NaN above every number, then lower
//        index; bit 0 largest) and writes itself at that rank of the chunk's run when below cap_out.
//   OP 5 topk merge: runs r and r ^ 1 (sorted, each the first cap_in of `span` elements) become
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
  uint span;      // elements of a line per chunk (OP 0-4) or per input run (OP 5)
  uint nchunks;   // chunks (OP 0-4) or input runs (OP 5) per line
  uint cap_in;    // OP 5: stored elements per input run
  uint nout;      // OP 4, 5: output runs per line
  uint cap_out;   // OP 4, 5: stored elements per output run
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
  if (OP <= 1u) {
    if (t >= pc.lines * pc.nchunks) return;
    uint line = t / pc.nchunks, c = t % pc.nchunks;
    uint j0 = c * pc.span, j1 = min(pc.len, j0 + pc.span);
    bool last = (pc.flags & 1u) != 0u, from_pairs = (pc.flags & 4u) != 0u;
    uint base = from_pairs ? pc.pioff + 2u * line * pc.len : xbase(line);
    uint best = from_pairs ? pi[base + 2u * j0 + 1u] : j0;
    float bv = from_pairs ? uintBitsToFloat(pi[base + 2u * j0]) : x[base + j0 * pc.inner];
    for (uint j = j0 + 1u; j < j1 && !isnan(bv); ++j) {
      float cv = from_pairs ? uintBitsToFloat(pi[base + 2u * j]) : x[base + j * pc.inner];
      bool better = isnan(cv) || (OP == 0u ? cv > bv : cv < bv) || (last && cv == bv);
      if (better) {
        best = from_pairs ? pi[base + 2u * j + 1u] : j;
        bv = cv;
      }
    }
    if ((pc.flags & 8u) != 0u) {
      y[pc.yoff + line] = float(best);
    } else {
      po[pc.pooff + 2u * t] = floatBitsToUint(bv);
      po[pc.pooff + 2u * t + 1u] = best;
    }
  } else if (OP <= 3u) {
    if (t >= pc.lines * pc.nchunks) return;
    uint line = t / pc.nchunks, c = t % pc.nchunks;
    uint q0 = c * pc.span, q1 = min(pc.len, q0 + pc.span);
    bool excl = (pc.flags & 1u) != 0u, rev = (pc.flags & 2u) != 0u;
    uint base = xbase(line);
    uint ybase = pc.yoff + (line / pc.inner) * pc.len * pc.inner + line % pc.inner;
    precise float s = OP == 2u ? 0.0 : uintBitsToFloat(pi[pc.pioff + t]), comp = 0.0;
    for (uint q = q0; q < q1; ++q) {
      uint j = rev ? pc.len - 1u - q : q;
      float v = x[base + j * pc.inner];
      if (OP == 3u && excl) y[ybase + j * pc.inner] = s;
      precise float tv = v - comp;
      precise float w = s + tv;
      comp = isinf(w) ? 0.0 : (w - s) - tv;  // no inf - inf once the sum is infinite
      s = w;
      if (OP == 3u && !excl) y[ybase + j * pc.inner] = s;
    }
    if (OP == 2u) po[pc.pooff + t] = floatBitsToUint(s);
  } else if (OP == 4u) {
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
  } else if (OP == 5u) {
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
