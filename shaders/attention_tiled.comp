#version 450
// Flash attention for many query rows (prefill): the register-tiled sibling of
// attention.comp (same bindings and push constants; `split` is not used).
// A work group of 256 invocations computes BR = 64 packed query rows of one
// (batch, kv head) against key blocks of BC = 64. Invocation (tx, ty) of the
// 16 x 16 grid owns rows ty + 16i and keys tx + 16j (i, j < 4) of the score
// tile, and rows ty + 16i by columns tx + 16u of the output: every shared
// value it loads feeds 4 multiply-adds. Scores and probabilities go through
// shared memory (Ps) for the row statistics of the online softmax.
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_HALF
#extension GL_EXT_shader_16bit_storage : require
#endif
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint D = 64;   // q/k head dim
layout(constant_id = 1) const uint DV = 64;  // v head dim
layout(constant_id = 2) const uint VC = 64;  // v columns staged per pass (64, or 32 for 32 KiB of shared memory)
#include "common.glsl"

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

const uint BR = 64, BC = 64, DC = 16, T = 16, TR = BR / T, TK = BC / T;
const uint KC = VC / T;                // output columns per invocation per pass
const uint NVC = (DV + VC - 1) / VC;   // passes over v's columns
const uint QK_FLOATS = (BR + BC) * (DC + 1);
const uint STAGE = QK_FLOATS > BC * VC ? QK_FLOATS : BC * VC;
shared float stage[STAGE];             // q and k chunks, then v chunks
shared float Ps[BR * (BC + 1)];        // scores, then probabilities

void main() {
  uint qb = gl_WorkGroupID.x, kvh = gl_WorkGroupID.y, bi = gl_WorkGroupID.z;
  uint t = gl_LocalInvocationID.x, tx = t % T, ty = t / T;
  uint nrows = pc.group * pc.sq;
  uint row0 = (bi * pc.hq + kvh * pc.group) * pc.sq;
  uint kbase = pc.koff + (bi * pc.hkv + kvh) * pc.sk * D;
  uint vbase = pc.voff + (bi * pc.hkv + kvh) * pc.sk * DV;
  int shift = int(pc.sk) - int(pc.sq);

  uint qi[TR], mrow[TR];
  bool row_ok[TR];
  float m_run[TR], l_run[TR];
  float acc[TR * NVC * KC];
  for (uint i = 0u; i < TR; ++i) {
    uint gr = qb * BR + ty + T * i;
    row_ok[i] = gr < nrows;
    qi[i] = gr % pc.sq;
    mrow[i] = pc.moff + bi * pc.msb + (kvh * pc.group + gr / pc.sq) * pc.msh + qi[i] * pc.msi;
    m_run[i] = -rlx_inf();
    l_run[i] = 0.0;
  }
  for (uint i = 0u; i < TR * NVC * KC; ++i) acc[i] = 0.0;

  uint kend = pc.sk;
  if (pc.causal != 0u) {
    uint g0 = qb * BR, g1 = min(g0 + BR, nrows) - 1u;
    uint imax = g0 / pc.sq != g1 / pc.sq ? pc.sq - 1u : g1 % pc.sq;
    kend = min(kend, uint(clamp(int(imax) + shift + 1, 0, int(pc.sk))));
  }

  for (uint kb = 0u; kb < kend; kb += BC) {
    float s[TR * TK];
    for (uint e = 0u; e < TR * TK; ++e) s[e] = 0.0;
    for (uint dc = 0u; dc < D; dc += DC) {
      if (PAIRS != 0u) {
        for (uint e = t; e < BR * DC / 2u; e += 256u) {
          uint rr = e / (DC / 2u), dd = 2u * (e % (DC / 2u)), gi = qb * BR + rr;
          vec2 w = (gi < nrows && dc + dd < D) ? rlx_from16x2(QDT, floatBitsToUint(q[(pc.qoff + (row0 + gi) * D + dc + dd) / 2u])) : vec2(0.0);
          stage[rr * (DC + 1) + dd] = w.x;
          stage[rr * (DC + 1) + dd + 1u] = w.y;
        }
      } else {
        for (uint e = t; e < BR * DC; e += 256u) {
          uint rr = e / DC, dd = e % DC, gi = qb * BR + rr;
          stage[rr * (DC + 1) + dd] = (gi < nrows && dc + dd < D) ? ld_q(pc.qoff + (row0 + gi) * D + dc + dd) : 0.0;
        }
      }
      if (PAIRS != 0u) {
        for (uint e = t; e < BC * DC / 2u; e += 256u) {
          uint kk = e / (DC / 2u), dd = 2u * (e % (DC / 2u)), gj = kb + kk;
          vec2 w = (gj < kend && dc + dd < D) ? rlx_from16x2(KDT, floatBitsToUint(k[(kbase + gj * D + dc + dd) / 2u])) : vec2(0.0);
          stage[(BR + kk) * (DC + 1) + dd] = w.x;
          stage[(BR + kk) * (DC + 1) + dd + 1u] = w.y;
        }
      } else {
        for (uint e = t; e < BC * DC; e += 256u) {
          uint kk = e / DC, dd = e % DC, gj = kb + kk;
          stage[(BR + kk) * (DC + 1) + dd] = (gj < kend && dc + dd < D) ? ld_k(kbase + gj * D + dc + dd) : 0.0;
        }
      }
      barrier();
      for (uint dd = 0u; dd < DC; ++dd) {
        float qv[TR], kv[TK];
        for (uint i = 0u; i < TR; ++i) qv[i] = stage[(ty + T * i) * (DC + 1) + dd];
        for (uint j = 0u; j < TK; ++j) kv[j] = stage[(BR + tx + T * j) * (DC + 1) + dd];
        for (uint i = 0u; i < TR; ++i)
          for (uint j = 0u; j < TK; ++j) s[i * TK + j] = fma(qv[i], kv[j], s[i * TK + j]);
      }
      barrier();
    }
    // Scale and mask; hidden scores become -inf.
    for (uint i = 0u; i < TR; ++i)
      for (uint j = 0u; j < TK; ++j) {
        uint gj = kb + tx + T * j;
        float sc = s[i * TK + j] * pc.scale;
        bool visible = gj < kend && row_ok[i];
        if (pc.causal != 0u) visible = visible && int(gj) <= int(qi[i]) + shift;
        if (pc.mask_kind != 0u && visible) {
          float mv = ld_mask(mrow[i] + gj * pc.msj);
          if (pc.mask_kind == 1u) sc += mv;
          else visible = mv != 0.0;
        }
        s[i * TK + j] = visible ? sc : -rlx_inf();
        Ps[(ty + T * i) * (BC + 1) + tx + T * j] = s[i * TK + j];
      }
    barrier();
    float m_new[TR], alpha[TR];
    for (uint i = 0u; i < TR; ++i) {
      float mb = -rlx_inf();
      for (uint c = 0u; c < BC; ++c) mb = max(mb, Ps[(ty + T * i) * (BC + 1) + c]);
      m_new[i] = max(m_run[i], mb);
      alpha[i] = m_new[i] == -rlx_inf() ? 1.0 : exp(m_run[i] - m_new[i]);
    }
    barrier();
    for (uint i = 0u; i < TR; ++i)
      for (uint j = 0u; j < TK; ++j) {
        float sc = s[i * TK + j];
        Ps[(ty + T * i) * (BC + 1) + tx + T * j] = sc == -rlx_inf() ? 0.0 : exp(sc - m_new[i]);
      }
    barrier();
    for (uint i = 0u; i < TR; ++i) {
      float lsum = 0.0;
      for (uint c = 0u; c < BC; ++c) lsum += Ps[(ty + T * i) * (BC + 1) + c];
      l_run[i] = l_run[i] * alpha[i] + lsum;
      m_run[i] = m_new[i];
      for (uint u = 0u; u < NVC * KC; ++u) acc[i * NVC * KC + u] *= alpha[i];
    }
    [[unroll]] for (uint cc = 0u; cc < NVC; ++cc) {  // unrolled: acc[] stays in registers
      if (PAIRS != 0u) {
        for (uint e = t; e < BC * VC / 2u; e += 256u) {
          uint kk = e / (VC / 2u), c2 = 2u * (e % (VC / 2u)), col = cc * VC + c2, gj = kb + kk;
          vec2 w = (gj < kend && col < DV) ? rlx_from16x2(VDT, floatBitsToUint(v[(vbase + gj * DV + col) / 2u])) : vec2(0.0);
          stage[kk * VC + c2] = w.x;
          stage[kk * VC + c2 + 1u] = w.y;
        }
      } else {
        for (uint e = t; e < BC * VC; e += 256u) {
          uint kk = e / VC, col = cc * VC + e % VC, gj = kb + kk;
          stage[e] = (gj < kend && col < DV) ? ld_v(vbase + gj * DV + col) : 0.0;
        }
      }
      barrier();
      for (uint kk = 0u; kk < BC; ++kk) {
        float pv[TR], vv[KC];
        for (uint i = 0u; i < TR; ++i) pv[i] = Ps[(ty + T * i) * (BC + 1) + kk];
        for (uint u = 0u; u < KC; ++u) vv[u] = stage[kk * VC + tx + T * u];
        for (uint i = 0u; i < TR; ++i)
          for (uint u = 0u; u < KC; ++u)
            acc[(i * NVC + cc) * KC + u] = fma(pv[i], vv[u], acc[(i * NVC + cc) * KC + u]);
      }
      barrier();
    }
  }

  for (uint i = 0u; i < TR; ++i) {
    if (!row_ok[i]) continue;
    float inv = l_run[i] > 0.0 ? 1.0 / l_run[i] : 0.0;
    uint obase = pc.ooff + (row0 + qb * BR + ty + T * i) * DV;
    for (uint cc = 0u; cc < NVC; ++cc)
      for (uint u = 0u; u < KC; ++u) {
        uint col = cc * VC + tx + T * u;
        if (col < DV) st_o(obase + col, acc[(i * NVC + cc) * KC + u] * inv);
      }
  }
}
