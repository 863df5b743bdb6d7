#version 450
// Work-group passes over lines too long for one invocation to walk (kernels_long.cpp, issue 30;
// the wg route: every device but a CPU one, whose serial walks are axis_long.comp's OP 0-3):
// one work group of WG invocations per (line, chunk of CHUNK = WG * PER elements), every
// invocation reading PER elements (coalesced: element k * WG + its lane) and the group combining
// its 256 results in two levels through shared memory (16 invocations each over 16 results, then
// one over those: three or four barriers, which llvmpipe pays for in every group, where a
// log2(WG) tree took nine and ran 2x slower there), so every loop here is at most PER or 16
// iterations (llvmpipe ends an invocation's loops after 65535 iterations in all). x is viewed as
// [outer, len, inner] as in axis_op.comp (line = o * inner + i); (value bits, index) pairs travel
// in uint scratch (PI in, PO out), so indices and NaN payloads stay exact.
//   OP 0 argmax, 1 argmin: the chunk's best (value, index) by axis_op.comp's rule: the first NaN
//        wins, else the extreme value, ties to the lowest index (FLAGS bit 0 select_last_index:
//        the highest). The order is total (indices differ), so how results are grouped does not
//        matter. Reads x (bit 2 clear) or the pairs of a previous pass (bit 2 set, `len` pairs
//        per line); writes pairs, or (bit 3 set, one chunk per line) the index into y.
//   OP 2 cumsum block sums: the f32 sum of the chunk of scan positions (bit 1 reverse) to PO.
//   OP 3 cumsum: the chunk, staged in shared memory, scanned (each invocation PER consecutive
//        positions: their sum, the exclusive scan of those sums, then the run again) from
//        the chunk's offset (the exclusive scan of the block sums, PI; bit 4: none, offset 0),
//        bit 0 exclusive, bit 1 reverse, and stored coalesced.
#extension GL_GOOGLE_include_directive : require
const uint WG = 256u;
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0;
layout(constant_id = 1) const uint PER = 16;  // elements per invocation (kernels.h's wg_chunk / WG)
layout(constant_id = 2) const uint STAGE = 1;  // OP 3: PER (its staged chunk); others 1
const uint CHUNK = WG * PER;
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
// OP 3's chunk, one word of padding after every 32 (pad()): an invocation's PER consecutive
// positions then fall in different banks across a subgroup
shared float buf[WG * STAGE + WG * STAGE / 32u];
uint pad(uint p) { return p + (p >> 5); }

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
    // this invocation's elements, in index order: axis_op.comp's scan (a NaN ends it)
    float bv = 0.0;
    uint bi = NONE;
    uint j = j0 + lid;
    if (j < j1) {
      if (from_pairs) {
        bv = uintBitsToFloat(pi[base + 2u * j]);
        bi = pi[base + 2u * j + 1u];
        for (uint k = 1u; k < PER; ++k) {
          j += WG;
          if (j >= j1) break;
          float v = uintBitsToFloat(pi[base + 2u * j]);
          if (!isnan(bv) && (isnan(v) || (OP == 0u ? v > bv : v < bv) || (last && v == bv))) {
            bv = v;
            bi = pi[base + 2u * j + 1u];
          }
        }
      } else {
        bv = x[base + j * pc.inner];
        bi = j;
        for (uint k = 1u; k < PER; ++k) {
          j += WG;
          if (j >= j1) break;
          float v = x[base + j * pc.inner];
          if (!isnan(bv) && (isnan(v) || (OP == 0u ? v > bv : v < bv) || (last && v == bv))) {
            bv = v;
            bi = j;
          }
        }
      }
    }
    // the group's best: 16 invocations each over 16 lanes' results, then invocation 0 over
    // those (three barriers: llvmpipe pays for every one in every group)
    sv[lid] = bv;
    si[lid] = bi;
    barrier();
    if (lid < 16u) {
      for (uint k = 1u; k < 16u; ++k)
        if (better(bv, bi, sv[lid + 16u * k], si[lid + 16u * k], last)) {
          bv = sv[lid + 16u * k];
          bi = si[lid + 16u * k];
        }
    }
    barrier();
    if (lid < 16u) {
      sv[lid] = bv;
      si[lid] = bi;
    }
    barrier();
    if (lid == 0u) {
      for (uint k = 1u; k < 16u; ++k)
        if (better(bv, bi, sv[k], si[k], last)) {
          bv = sv[k];
          bi = si[k];
        }
      if ((pc.flags & 8u) != 0u) {
        y[pc.yoff + line] = float(bi);
      } else {
        po[pc.pooff + 2u * g] = floatBitsToUint(bv);
        po[pc.pooff + 2u * g + 1u] = bi;
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
      // the group's sum: 16 invocations each over 16 lanes' sums, then invocation 0 over those
      sv[lid] = s;
      barrier();
      if (lid < 16u)
        for (uint k = 1u; k < 16u; ++k) s += sv[lid + 16u * k];
      barrier();
      if (lid < 16u) sv[lid] = s;
      barrier();
      if (lid == 0u) {
        for (uint k = 1u; k < 16u; ++k) s += sv[k];
        po[pc.pooff + g] = floatBitsToUint(s);
      }
      return;
    }
    // stage the chunk (scan positions j0.., coalesced), 0 past its end
    for (uint k = 0u; k < PER; ++k) {
      uint p = k * WG + lid, q = j0 + p;
      buf[pad(p)] = q < j1 ? x[base + (rev ? pc.len - 1u - q : q) * pc.inner] : 0.0;
    }
    barrier();
    // this invocation's run of PER consecutive positions: its sum; then the runs' exclusive scan
    // in two levels (16 invocations each over 16 runs' sums in order, invocation 0 over those)
    float s = 0.0;
    for (uint k = 0u; k < PER; ++k) s += buf[pad(lid * PER + k)];
    sv[lid] = s;
    barrier();
    float t = 0.0;  // lid < 16: the sum of runs 16 lid .. 16 lid + 15
    if (lid < 16u) {
      for (uint k = 0u; k < 16u; ++k) {
        float v = sv[16u * lid + k];
        sv[16u * lid + k] = t;  // exclusive within its 16
        t += v;
      }
      si[lid] = floatBitsToUint(t);
    }
    barrier();
    if (lid == 0u) {
      float u = 0.0;
      for (uint k = 0u; k < 16u; ++k) {
        float v = uintBitsToFloat(si[k]);
        si[k] = floatBitsToUint(u);
        u += v;
      }
    }
    barrier();
    float run = (pc.flags & 16u) != 0u ? 0.0 : uintBitsToFloat(pi[pc.pioff + g]);
    run += uintBitsToFloat(si[lid / 16u]);
    run += sv[lid];
    for (uint k = 0u; k < PER; ++k) {
      uint p = pad(lid * PER + k);
      float v = buf[p];
      if (excl) buf[p] = run;
      run += v;
      if (!excl) buf[p] = run;
    }
    barrier();
    uint ybase = pc.yoff + xbase(line);
    for (uint k = 0u; k < PER; ++k) {
      uint p = k * WG + lid, q = j0 + p;
      if (q < j1) y[ybase + (rev ? pc.len - 1u - q : q) * pc.inner] = buf[pad(p)];
    }
  }
}
