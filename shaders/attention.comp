#version 450
// Flash attention (online softmax; the score matrix is never materialised).
// The query rows of the Hq / Hkv heads sharing a key/value head are packed
// (they are consecutive rows of q): one work group computes BR of them for one
// (batch, kv head), so k and v are read once per group. It walks the keys
// in blocks of BC, forms the BR x BC scores from D-chunks of q and k staged in
// shared memory, updates the running max / sum per row, rescales its output
// accumulators and adds P . V from Dv-chunks of v. 8 invocations share a row:
// each owns 4 keys of a block and every 8th output column.
// GQA: head h reads k/v head h / (Hq / Hkv). Causal: key j visible to query i
// iff j <= i + Sk - Sq. mask_kind 1: float mask added; 2: bool mask, 0 hides. The
// mask is read through (b, h, i, j) strides (0 = broadcast). A row with every
// key hidden produces zeros.
// split (flash decoding, for few query rows): grid z = B * nsplit and each work
// group covers keys [split * kchunk, +kchunk), writing its unnormalised output
// row, running max and sum (DV + 2 floats per row and split) to scratch at
// ooff; attention_combine.comp merges the splits.
// RLX_CPU_DEVICE (variant "attention.cpu", for devices that run shaders on the host CPU, as
// lavapipe does): the loops over a block's keys and a chunk's dims stay rolled. A GPU's compiler
// unrolls them to keep s[], p[] and acc[] in registers; a CPU JIT (LLVM) pays for every
// unrolled copy when the pipeline is created (twice the time here) and runs no faster for them.
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_HALF
#extension GL_EXT_shader_16bit_storage : require
#endif
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint D = 64;   // q/k head dim
layout(constant_id = 1) const uint DV = 64;  // v head dim
// Mask kind, causality and splitting are push constants (uniform branches): one
// pipeline per head-dim pair.
#include "common.glsl"
#ifdef RLX_CPU_DEVICE
#define RLX_ROLLED [[dont_unroll]]
#else
#define RLX_ROLLED
#endif

layout(std430, binding = 0) restrict readonly buffer Q { float q[]; };
layout(std430, binding = 1) restrict readonly buffer Kt { float k[]; };
layout(std430, binding = 2) restrict readonly buffer V { float v[]; };
layout(std430, binding = 3) restrict readonly buffer Mk { float mask[]; };
layout(std430, binding = 4) restrict writeonly buffer O { float o[]; };
// Storage kinds (".h16" variant; 0 f32, 1 f16, 2 bf16): q, k, v and a float mask are widened
// as they are staged, everything is computed in f32 and o rounded once on store.
layout(constant_id = 3) const uint QDT = 0;
layout(constant_id = 4) const uint KDT = 0;
layout(constant_id = 5) const uint VDT = 0;
layout(constant_id = 6) const uint MDT = 0;
layout(constant_id = 7) const uint ODT = 0;
// 1: q, k and v are all 2-byte with even offsets and head dims: staged two values per 32-bit load
// (the float[] view's bits, rlx_from16x2), half the loads and conversions of one by one
layout(constant_id = 8) const uint PAIRS = 0;
#ifdef RLX_HALF
layout(std430, binding = 0) restrict readonly buffer Q16 { uint16_t q16[]; };
layout(std430, binding = 1) restrict readonly buffer Kt16 { uint16_t k16[]; };
layout(std430, binding = 2) restrict readonly buffer V16 { uint16_t v16[]; };
layout(std430, binding = 3) restrict readonly buffer Mk16 { uint16_t mask16[]; };
layout(std430, binding = 4) restrict writeonly buffer O16 { uint16_t o16[]; };
#endif
float ld_q(uint i) { return RLX_LD(QDT, q, q16, i); }
float ld_k(uint i) { return RLX_LD(KDT, k, k16, i); }
float ld_v(uint i) { return RLX_LD(VDT, v, v16, i); }
float ld_mask(uint i) { return RLX_LD(MDT, mask, mask16, i); }
void st_o(uint i, float val) RLX_ST(ODT, o, o16, i, val)
layout(push_constant) uniform PC {
  uint sq, sk, hq, group, hkv, qoff, koff, voff, moff, ooff;
  float scale;
  uint msb, msh, msi, msj;
  uint kchunk, nsplit;
  uint mask_kind;  // 0 none, 1 float (added), 2 bool (0 hides)
  uint causal, split;
} pc;

const uint BR = 16, BC = 32, DC = 64, VC = 64, TPR = 8;
const uint KPT = BC / TPR;               // keys per invocation
const uint CPT = VC / TPR;               // output columns per invocation per chunk
const uint NVC = (DV + VC - 1) / VC;     // Dv chunks
shared float Qs[BR * (DC + 1)];
shared float Ks[BC * (DC + 1)];
shared float Ss[BR * (BC + 1)];
shared float Vs[BC * VC];

void main() {
  uint qb = gl_WorkGroupID.x, kvh = gl_WorkGroupID.y, bi = gl_WorkGroupID.z, split = 0u;
  if (pc.split != 0u) {
    split = bi % pc.nsplit;
    bi /= pc.nsplit;
  }
  uint t = gl_LocalInvocationID.x, r = t / TPR, c = t % TPR;
  uint nrows = pc.group * pc.sq;                        // packed rows of this kv head
  uint row0 = (bi * pc.hq + kvh * pc.group) * pc.sq;  // their first row in q / o
  uint gr = qb * BR + r;                               // this invocation's packed row
  uint h = kvh * pc.group + gr / pc.sq, qi = gr % pc.sq;
  bool row_ok = gr < nrows;
  uint kbase = pc.koff + (bi * pc.hkv + kvh) * pc.sk * D;
  uint vbase = pc.voff + (bi * pc.hkv + kvh) * pc.sk * DV;
  uint mbase = pc.moff + bi * pc.msb + h * pc.msh + qi * pc.msi;
  int shift = int(pc.sk) - int(pc.sq);

  // Keys of this work group: [kbeg, kend), cut after the last one any row may see.
  uint kbeg = 0u, kend = pc.sk;
  if (pc.split != 0u) {
    kbeg = split * pc.kchunk;
    kend = min(pc.sk, kbeg + pc.kchunk);
  }
  if (pc.causal != 0u) {
    uint g0 = qb * BR, g1 = min(g0 + BR, nrows) - 1u;
    uint imax = g0 / pc.sq != g1 / pc.sq ? pc.sq - 1u : g1 % pc.sq;
    kend = min(kend, uint(clamp(int(imax) + shift + 1, 0, int(pc.sk))));
  }

  float acc[NVC * CPT];
  for (uint i = 0u; i < NVC * CPT; ++i) acc[i] = 0.0;
  float m_run = -rlx_inf(), l_run = 0.0;

  for (uint kb = kbeg; kb < kend; kb += BC) {
    float s[KPT];
    for (uint j = 0u; j < KPT; ++j) s[j] = 0.0;
    for (uint dc = 0u; dc < D; dc += DC) {
      if (PAIRS != 0u) {
        for (uint e = t; e < BR * DC / 2u; e += 128u) {
          uint rr = e / (DC / 2u), dd = 2u * (e % (DC / 2u)), gi = qb * BR + rr;
          vec2 w = (gi < nrows && dc + dd < D) ? rlx_from16x2(QDT, floatBitsToUint(q[(pc.qoff + (row0 + gi) * D + dc + dd) / 2u])) : vec2(0.0);
          Qs[rr * (DC + 1) + dd] = w.x;
          Qs[rr * (DC + 1) + dd + 1u] = w.y;
        }
      } else {
        for (uint e = t; e < BR * DC; e += 128u) {
          uint rr = e / DC, dd = e % DC, gi = qb * BR + rr;
          Qs[rr * (DC + 1) + dd] = (gi < nrows && dc + dd < D) ? ld_q(pc.qoff + (row0 + gi) * D + dc + dd) : 0.0;
        }
      }
      if (PAIRS != 0u) {
        for (uint e = t; e < BC * DC / 2u; e += 128u) {
          uint kk = e / (DC / 2u), dd = 2u * (e % (DC / 2u)), gj = kb + kk;
          vec2 w = (gj < kend && dc + dd < D) ? rlx_from16x2(KDT, floatBitsToUint(k[(kbase + gj * D + dc + dd) / 2u])) : vec2(0.0);
          Ks[kk * (DC + 1) + dd] = w.x;
          Ks[kk * (DC + 1) + dd + 1u] = w.y;
        }
      } else {
        for (uint e = t; e < BC * DC; e += 128u) {
          uint kk = e / DC, dd = e % DC, gj = kb + kk;
          Ks[kk * (DC + 1) + dd] = (gj < kend && dc + dd < D) ? ld_k(kbase + gj * D + dc + dd) : 0.0;
        }
      }
      barrier();
      RLX_ROLLED for (uint dd = 0u; dd < DC; ++dd) {
        float qv = Qs[r * (DC + 1) + dd];
        for (uint j = 0u; j < KPT; ++j) s[j] = fma(qv, Ks[(c + TPR * j) * (DC + 1) + dd], s[j]);
      }
      barrier();
    }
    for (uint j = 0u; j < KPT; ++j) {
      uint kk = c + TPR * j, gj = kb + kk;
      float sc = s[j] * pc.scale;
      bool visible = gj < kend && row_ok;
      if (pc.causal != 0u) visible = visible && int(gj) <= int(qi) + shift;
      if (pc.mask_kind != 0u && visible) {
        float mv = ld_mask(mbase + gj * pc.msj);
        if (pc.mask_kind == 1u) sc += mv;
        else visible = mv != 0.0;
      }
      Ss[r * (BC + 1) + kk] = visible ? sc : -rlx_inf();
    }
    barrier();
    // Online softmax update; every invocation of a row computes the same stats.
    float p[BC];
    float mb = -rlx_inf();
    RLX_ROLLED for (uint j = 0u; j < BC; ++j) {
      p[j] = Ss[r * (BC + 1) + j];
      mb = max(mb, p[j]);
    }
    float m_new = max(m_run, mb);
    float alpha = 1.0, lsum = 0.0;
    if (m_new != -rlx_inf()) {
      alpha = exp(m_run - m_new);
      for (uint j = 0u; j < BC; ++j) {
        p[j] = p[j] == -rlx_inf() ? 0.0 : exp(p[j] - m_new);
        lsum += p[j];
      }
    } else {
      for (uint j = 0u; j < BC; ++j) p[j] = 0.0;
    }
    l_run = l_run * alpha + lsum;
    m_run = m_new;
    [[unroll]] for (uint cc = 0u; cc < NVC; ++cc) {  // unrolled: acc[] stays in registers
      if (PAIRS != 0u) {
        for (uint e = t; e < BC * VC / 2u; e += 128u) {
          uint kk = e / (VC / 2u), c2 = 2u * (e % (VC / 2u)), col = cc * VC + c2, gj = kb + kk;
          vec2 w = (gj < kend && col < DV) ? rlx_from16x2(VDT, floatBitsToUint(v[(vbase + gj * DV + col) / 2u])) : vec2(0.0);
          Vs[kk * VC + c2] = w.x;
          Vs[kk * VC + c2 + 1u] = w.y;
        }
      } else {
        for (uint e = t; e < BC * VC; e += 128u) {
          uint kk = e / VC, col = cc * VC + e % VC, gj = kb + kk;
          Vs[e] = (gj < kend && col < DV) ? ld_v(vbase + gj * DV + col) : 0.0;
        }
      }
      barrier();
      for (uint u = 0u; u < CPT; ++u) {
        float sum = 0.0;
        RLX_ROLLED for (uint j = 0u; j < BC; ++j) sum = fma(p[j], Vs[j * VC + c + TPR * u], sum);
        acc[cc * CPT + u] = acc[cc * CPT + u] * alpha + sum;
      }
      barrier();
    }
  }

  if (!row_ok) return;
  if (pc.split != 0u) {
    uint pbase = pc.ooff + ((row0 + gr) * pc.nsplit + split) * (DV + 2u);
    for (uint cc = 0u; cc < NVC; ++cc)
      for (uint u = 0u; u < CPT; ++u) {
        uint col = cc * VC + c + TPR * u;
        if (col < DV) st_o(pbase + col, acc[cc * CPT + u]);
      }
    if (c == 0u) {
      st_o(pbase + DV, m_run);
      st_o(pbase + DV + 1u, l_run);
    }
    return;
  }
  float inv = l_run > 0.0 ? 1.0 / l_run : 0.0;
  uint obase = pc.ooff + (row0 + gr) * DV;
  for (uint cc = 0u; cc < NVC; ++cc)
    for (uint u = 0u; u < CPT; ++u) {
      uint col = cc * VC + c + TPR * u;
      if (col < DV) st_o(obase + col, acc[cc * CPT + u] * inv);
    }
}
