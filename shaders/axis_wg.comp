#version 450
// Work-group passes over lines too long for one invocation to walk (kernels_long.cpp, issue 30):
// one work group of WG invocations per (line, chunk of CHUNK = WG * PER elements), every
// invocation reading PER elements (coalesced: element k * WG + its lane) and the group combining
// them with a shared-memory tree, so every loop here is at most PER or log2(WG) iterations
// (llvmpipe ends an invocation's loops after 65535 iterations in all). x is viewed as
// [outer, len, inner] as in axis_op.comp (line = o * inner + i); (value bits, index) pairs travel
// in uint scratch (PI in, PO out), so indices and NaN payloads stay exact.
//   OP 0 argmax, 1 argmin: the chunk's best (value, index) by axis_op.comp's rule: the first NaN
//        wins, else the extreme value, ties to the lowest index (FLAGS bit 0 select_last_index:
//        the highest). The order is total (indices differ), so the tree's grouping does not
//        matter. Reads x (bit 2 clear) or the pairs of a previous pass (bit 2 set, `len` pairs
//        per line); writes pairs, or (bit 3 set, one chunk per line) the index into y.
//   OP 2 cumsum block sums: the f32 sum of the chunk of scan positions (bit 1 reverse) to PO.
//   OP 3 cumsum: the chunk, staged in shared memory, scanned (each invocation PER consecutive
//        positions, an exclusive scan of the invocations' sums, then each invocation's run) from
//        the chunk's offset (the exclusive scan of the block sums, PI; bit 4: none, offset 0),
//        bit 0 exclusive, bit 1 reverse, and stored coalesced.
#extension GL_GOOGLE_include_directive : require
const uint WG = 256u, PER = 8u, CHUNK = WG * PER;  // CHUNK: kernels.h's kWgChunk
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer Y { float y[]; };
layout(std430, binding = 2) restrict readonly buffer PI { uint pi[]; };
layout(std430, binding = 3) restrict writeonly buffer PO { uint po[]; };
layout(push_constant) uniform PC {
  uint lines, len, inner, xoff, yoff, flags;
  uint nchunks;  // chunks of CHUNK elements per line
  uint pioff, pooff;
} pc;

shared float sv[WG];
shared uint si[WG];
shared float buf[CHUNK];  // OP 3's chunk

const uint NONE = 0xffffffffu;

// whether (bv, bi) is preferred to (av, ai) as OP's result (an index NONE: no element)
bool better(float av, uint ai, float bv, uint bi, bool last) {
  if (bi == NONE) return false;
  if (ai == NONE) return true;
  bool na = isnan(av), nb = isnan(bv);
  if (na || nb) return nb && (!na || bi < ai);
  if (bv != av) return OP == 0u ? bv > av : bv < av;
  return last ? bi > ai : bi < ai;
}

uint xbase(uint line) { return (line / pc.inner) * pc.len * pc.inner + line % pc.inner; }

void main() {
  uint g = rlx_group_index(), lid = gl_LocalInvocationID.x;
  if (g >= pc.lines * pc.nchunks) return;  // the whole group: the grid's spare groups
  uint line = g / pc.nchunks, c = g % pc.nchunks;
  uint j0 = c * CHUNK, j1 = min(pc.len, j0 + CHUNK);
  if (OP <= 1u) {
    bool last = (pc.flags & 1u) != 0u, from_pairs = (pc.flags & 4u) != 0u;
    uint base = from_pairs ? pc.pioff + 2u * line * pc.len : pc.xoff + xbase(line);
    float bv = 0.0;
    uint bi = NONE;
    for (uint k = 0u; k < PER; ++k) {
      uint j = j0 + k * WG + lid;
      if (j >= j1) break;
      float v = from_pairs ? uintBitsToFloat(pi[base + 2u * j]) : x[base + j * pc.inner];
      uint i = from_pairs ? pi[base + 2u * j + 1u] : j;
      if (better(bv, bi, v, i, last)) {
        bv = v;
        bi = i;
      }
    }
    sv[lid] = bv;
    si[lid] = bi;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
      if (lid < s && better(sv[lid], si[lid], sv[lid + s], si[lid + s], last)) {
        sv[lid] = sv[lid + s];
        si[lid] = si[lid + s];
      }
      barrier();
    }
    if (lid == 0u) {
      if ((pc.flags & 8u) != 0u) {
        y[pc.yoff + line] = float(si[0]);
      } else {
        po[pc.pooff + 2u * g] = floatBitsToUint(sv[0]);
        po[pc.pooff + 2u * g + 1u] = si[0];
      }
    }
  } else if (OP == 2u || OP == 3u) {
    bool excl = (pc.flags & 1u) != 0u, rev = (pc.flags & 2u) != 0u;
    uint base = pc.xoff + xbase(line);
    if (OP == 2u) {
      float s = 0.0;
      for (uint k = 0u; k < PER; ++k) {
        uint q = j0 + k * WG + lid;
        if (q >= j1) break;
        s += x[base + (rev ? pc.len - 1u - q : q) * pc.inner];
      }
      sv[lid] = s;
      barrier();
      for (uint st = WG / 2u; st > 0u; st >>= 1) {
        if (lid < st) sv[lid] += sv[lid + st];
        barrier();
      }
      if (lid == 0u) po[pc.pooff + g] = floatBitsToUint(sv[0]);
      return;
    }
    // stage the chunk (scan positions j0.., coalesced), 0 past its end
    for (uint k = 0u; k < PER; ++k) {
      uint p = k * WG + lid, q = j0 + p;
      buf[p] = q < j1 ? x[base + (rev ? pc.len - 1u - q : q) * pc.inner] : 0.0;
    }
    barrier();
    // this invocation's run of PER consecutive positions: its sum, then the runs' exclusive scan
    float s = 0.0;
    for (uint k = 0u; k < PER; ++k) s += buf[lid * PER + k];
    sv[lid] = s;
    barrier();
    for (uint d = 1u; d < WG; d <<= 1) {  // inclusive scan (Hillis-Steele)
      float add = lid >= d ? sv[lid - d] : 0.0;
      barrier();
      sv[lid] += add;
      barrier();
    }
    float run = (pc.flags & 16u) != 0u ? 0.0 : uintBitsToFloat(pi[pc.pioff + g]);
    if (lid > 0u) run += sv[lid - 1u];
    for (uint k = 0u; k < PER; ++k) {
      uint p = lid * PER + k;
      float v = buf[p];
      if (excl) buf[p] = run;
      run += v;
      if (!excl) buf[p] = run;
    }
    barrier();
    uint ybase = pc.yoff + xbase(line);
    for (uint k = 0u; k < PER; ++k) {
      uint p = k * WG + lid, q = j0 + p;
      if (q < j1) y[ybase + (rev ? pc.len - 1u - q : q) * pc.inner] = buf[p];
    }
  }
}
