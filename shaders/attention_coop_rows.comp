#version 450
// Flash attention on tensor cores (VK_NV_cooperative_matrix) for f16 q, k and v, with each
// subgroup owning 16 query rows end to end: the variant of attention_coop.comp for many query
// rows per work group and few barriers. Same push constants, bindings and results as
// attention_coop.comp (masks, causality, GQA packing, strided q/k/v/o); chosen by shape in
// kernels_coopmat.cpp.
// Per work group: NW subgroups of 32, BR = 16·NW packed query rows of one (batch, kv head).
// Per subgroup: its 16 q rows as cooperative matrices in registers (loaded once), and its output
// accumulators O (16 × DV, f32) in registers for the whole key loop. For each block of BC keys:
//   the k and v blocks are stored from registers into one of two shared buffers (double
//   buffering), one workgroup barrier, then the next block's global loads are issued into
//   registers (they land while this block computes);
//   S = Q · Kᵀ (the subgroup's 16 rows × BC keys) stored f32 to the subgroup's own shared region;
//   2 lanes a row (lane & 15 the row, lane >> 4 the half of the keys): scale, mask, row max,
//   P = exp(S - m) rounded to f16 over S in the region; where some row's maximum moved, O's rows
//   rescaled by exp(m_old - m_new): the NV extension says nothing of which lane holds which
//   element, so (RS 0, default) O is divided componentwise by a matrix whose row i holds 1 / row
//   i's factor (it divides matrices componentwise but does not multiply them), or (RS 1) a
//   matrix of row indices loaded once tells each lane its components' rows and the factors come
//   by subgroup shuffle from the lanes that own the rows; O += P · V.
// Only subgroup barriers inside the subgroup's phases: one workgroup barrier per key block (a
// buffer is refilled two blocks after it was read, and every subgroup passed the barrier of the
// block between). At the end O / l goes through the region to o (any storage kind, rounded once).
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_spirv_intrinsics : require
// f32 -> f16 conversions (P) round to nearest even
spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4467], 4462, 16);
#define RLX_HALF 1
layout(local_size_x = 128, local_size_x_id = 10) in;  // 32 · NW
layout(constant_id = 0) const uint D = 64;   // q/k head dim (multiple of 16, <= 128)
layout(constant_id = 1) const uint DV = 64;  // v head dim (multiple of 16, <= 128)
layout(constant_id = 6) const uint MDT = 0;  // mask storage kind (0 f32, 1 f16, 2 bf16)
layout(constant_id = 7) const uint ODT = 1;  // o storage kind
layout(constant_id = 8) const uint NW = 4;   // subgroups (of 32) per work group
layout(constant_id = 9) const uint BC = 32;  // keys per block: 32 or 64
layout(constant_id = 11) const uint RS = 0;  // O's per-row rescale: 0 divide by a matrix of factors, 1 shuffle
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer Q { uvec4 q8[]; };
layout(std430, binding = 1) restrict readonly buffer Kt { uvec4 k8[]; };
layout(std430, binding = 2) restrict readonly buffer V { uvec4 v8[]; };
layout(std430, binding = 3) restrict readonly buffer Mk { float mask[]; };
layout(std430, binding = 3) restrict readonly buffer Mk16 { uint16_t mask16[]; };
layout(std430, binding = 4) restrict writeonly buffer O { float o[]; };
layout(std430, binding = 4) restrict writeonly buffer O16 { uint16_t o16[]; };
float ld_mask(uint i) { return RLX_LD(MDT, mask, mask16, i); }
void st_o(uint i, float val) RLX_ST(ODT, o, o16, i, val)
layout(push_constant) uniform PC {
  uint sq, sk, hq, group, hkv, qoff, koff, voff, moff, ooff;
  float scale;
  uint msb, msh, msi, msj;
  uint kchunk, nsplit;
  uint mask_kind;  // 0 none, 1 float (added), 2 bool (0 hides)
  uint causal, split;
  uint qsb, qsh, qss, ksb, ksh, kss, vsb, vsh, vss, osb, osh, oss;
} pc;

const uint NT = 32u * NW, BR = 16u * NW;
// Shared memory in uvec4 units (8 halves, 4 floats); rows padded by one uvec4 against bank
// conflicts. Two k/v buffers, then one region per subgroup: S (16 × BC f32, rows of BC + 4),
// reused for P (16 × BC f16), and at the start for the row-index matrix, at the end for O's tiles.
// The q block is staged once in the k/v buffers (the host checks that it fits).
const uint QRS = D / 8u + 1u, KRS = D / 8u + 1u, VRS = DV / 8u + 1u;
const uint KVB = BC * (KRS + VRS);          // one buffer: k rows, then v rows
const uint SRS4 = BC / 4u + 1u;             // S row stride
const uint PRS = BC / 8u + 1u;              // P row stride
const uint PA = 16u * PRS;                  // the matrix of row factors (rows of 4) after P
const uint SGR = 16u * SRS4;                // one subgroup's region
shared uvec4 sm[2u * KVB + NW * SGR];

const uint KLD = (BC * (D / 8u) + NT - 1u) / NT;   // k block uvec4s per invocation
const uint VLD = (BC * (DV / 8u) + NT - 1u) / NT;  // v block uvec4s per invocation
const uint KPL = BC / 2u;                          // keys per lane (two lanes a row)

#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define HLF fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>

void main() {
  uint qb = gl_WorkGroupID.x, kvh = gl_WorkGroupID.y, bi = gl_WorkGroupID.z;
  uint t = gl_LocalInvocationID.x, w = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  uint r = lane & 15u, hf = lane >> 4;
  uint nrows = pc.group * pc.sq;
  uint g0 = qb * BR + w * 16u, gr = g0 + r;
  uint h = kvh * pc.group + gr / pc.sq, qi = gr % pc.sq;
  bool row_ok = gr < nrows;
  uint kbase = pc.koff + bi * pc.ksb + kvh * pc.ksh;
  uint vbase = pc.voff + bi * pc.vsb + kvh * pc.vsh;
  uint mbase = pc.moff + bi * pc.msb + h * pc.msh + qi * pc.msi;
  int shift = int(pc.sk) - int(pc.sq);

  // keys the work group (for the loads) and this subgroup (for the products) need
  uint kend = pc.sk, kend_sg = g0 < nrows ? pc.sk : 0u;
  if (pc.causal != 0u) {
    uint w0 = qb * BR, w1 = min(w0 + BR, nrows) - 1u;
    uint imax = w0 / pc.sq != w1 / pc.sq ? pc.sq - 1u : w1 % pc.sq;
    kend = min(kend, uint(clamp(int(imax) + shift + 1, 0, int(pc.sk))));
    if (g0 < nrows) {
      uint s1 = min(g0 + 16u, nrows) - 1u;
      uint smax = g0 / pc.sq != s1 / pc.sq ? pc.sq - 1u : s1 % pc.sq;
      kend_sg = min(kend, uint(clamp(int(smax) + shift + 1, 0, int(pc.sk))));
    }
  }

  // q block, staged once in the k/v buffers (rows past the end are zeros)
  for (uint e = t; e < BR * (D / 8u); e += NT) {
    uint rr = e / (D / 8u), d8 = e % (D / 8u), gi = qb * BR + rr;
    uint qh = kvh * pc.group + gi / pc.sq, qs = gi % pc.sq;
    sm[rr * QRS + d8] = gi < nrows ? q8[(pc.qoff + bi * pc.qsb + qh * pc.qsh + qs * pc.qss) / 8u + d8] : uvec4(0u);
  }
  uvec4 kreg[KLD], vreg[VLD];
  [[unroll]] for (uint i = 0u; i < KLD; ++i) {
    uint e = t + NT * i, kk = e / (D / 8u), d8 = e % (D / 8u);
    kreg[i] = e < BC * (D / 8u) && kk < kend ? k8[(kbase + kk * pc.kss) / 8u + d8] : uvec4(0u);
  }
  [[unroll]] for (uint i = 0u; i < VLD; ++i) {
    uint e = t + NT * i, kk = e / (DV / 8u), d8 = e % (DV / 8u);
    vreg[i] = e < BC * (DV / 8u) && kk < kend ? v8[(vbase + kk * pc.vss) / 8u + d8] : uvec4(0u);
  }
  barrier();
  HLF fq[D / 16u];
  [[unroll]] for (uint i = 0u; i < D / 16u; ++i) coopMatLoadNV(fq[i], sm, w * 16u * QRS + 2u * i, QRS, false);
  ACC acc[DV / 16u];
  [[unroll]] for (uint j = 0u; j < DV / 16u; ++j) acc[j] = ACC(0.0);
  float m_run = -rlx_inf(), l_run = 0.0;  // l_run: this lane's share of the row sum
  const uint rg = 2u * KVB + w * SGR;      // this subgroup's region
  // which row each component of this lane's accumulators holds (the extension does not say):
  // a matrix of row indices through the region, read back as an accumulator
  ACC rowof;
  if (RS == 1u) {
    sm[rg + r * 4u + 2u * hf] = floatBitsToUint(vec4(float(r)));
    sm[rg + r * 4u + 2u * hf + 1u] = floatBitsToUint(vec4(float(r)));
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    coopMatLoadNV(rowof, sm, rg, 4u, false);
  }
  barrier();                               // q's staging is read: the k/v buffers take over

  uint n = 0u;
  for (uint kb = 0u; kb < kend; kb += BC, ++n) {
    uint kbuf = (n & 1u) * KVB, vbuf = kbuf + BC * KRS;
    [[unroll]] for (uint i = 0u; i < KLD; ++i) {
      uint e = t + NT * i;
      if (e < BC * (D / 8u)) sm[kbuf + (e / (D / 8u)) * KRS + e % (D / 8u)] = kreg[i];
    }
    [[unroll]] for (uint i = 0u; i < VLD; ++i) {
      uint e = t + NT * i;
      if (e < BC * (DV / 8u)) sm[vbuf + (e / (DV / 8u)) * VRS + e % (DV / 8u)] = vreg[i];
    }
    barrier();
    // the next block's loads, in flight while this one computes
    [[unroll]] for (uint i = 0u; i < KLD; ++i) {
      uint e = t + NT * i, kk = e / (D / 8u), d8 = e % (D / 8u), gj = kb + BC + kk;
      kreg[i] = e < BC * (D / 8u) && gj < kend ? k8[(kbase + gj * pc.kss) / 8u + d8] : uvec4(0u);
    }
    [[unroll]] for (uint i = 0u; i < VLD; ++i) {
      uint e = t + NT * i, kk = e / (DV / 8u), d8 = e % (DV / 8u), gj = kb + BC + kk;
      vreg[i] = e < BC * (DV / 8u) && gj < kend ? v8[(vbase + gj * pc.vss) / 8u + d8] : uvec4(0u);
    }
    if (kb >= kend_sg) continue;  // uniform in the subgroup: its rows see none of these keys
    {  // S = Q · Kᵀ into the region
      ACC s[BC / 16u];
      [[unroll]] for (uint j = 0u; j < BC / 16u; ++j) s[j] = ACC(0.0);
      [[unroll]] for (uint i = 0u; i < D / 16u; ++i)
        [[unroll]] for (uint j = 0u; j < BC / 16u; ++j) {
          HLF fk;
          coopMatLoadNV(fk, sm, kbuf + j * 16u * KRS + 2u * i, KRS, true);
          s[j] = coopMatMulAddNV(fq[i], fk, s[j]);
        }
      [[unroll]] for (uint j = 0u; j < BC / 16u; ++j) coopMatStoreNV(s[j], sm, rg + 4u * j, SRS4, false);
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    // online softmax: this lane's KPL contiguous keys of row r
    float p[KPL];
    float mb = -rlx_inf();
    [[unroll]] for (uint j4 = 0u; j4 < KPL / 4u; ++j4) {
      vec4 sv = uintBitsToFloat(sm[rg + r * SRS4 + hf * (KPL / 4u) + j4]);
      [[unroll]] for (uint c = 0u; c < 4u; ++c) {
        uint kk = hf * KPL + 4u * j4 + c, gj = kb + kk;
        float sc = sv[c] * pc.scale;
        bool visible = gj < kend && row_ok;
        if (pc.causal != 0u) visible = visible && int(gj) <= int(qi) + shift;
        if (pc.mask_kind != 0u && visible) {
          float mv = ld_mask(mbase + gj * pc.msj);
          if (pc.mask_kind == 1u) sc += mv;
          else visible = mv != 0.0;
        }
        p[4u * j4 + c] = visible ? sc : -rlx_inf();
        mb = max(mb, p[4u * j4 + c]);
      }
    }
    mb = max(mb, subgroupShuffleXor(mb, 16u));
    float m_new = max(m_run, mb);
    // alpha: the factor O and l are rescaled by (1 where O is still 0)
    float alpha = m_run != -rlx_inf() ? exp(m_run - m_new) : 1.0, lsum = 0.0;
    if (m_new != -rlx_inf()) {
      [[unroll]] for (uint j = 0u; j < KPL; ++j) {
        // rounded to f16 here, so that the sum matches the weights the product uses
        p[j] = p[j] == -rlx_inf() ? 0.0 : float(float16_t(exp(p[j] - m_new)));
        lsum += p[j];
      }
    } else {
      [[unroll]] for (uint j = 0u; j < KPL; ++j) p[j] = 0.0;
    }
    l_run = l_run * alpha + lsum;
    m_run = m_new;
    subgroupMemoryBarrierShared();
    subgroupBarrier();  // every lane read S: P and the rescale matrix go over it
    [[unroll]] for (uint j8 = 0u; j8 < KPL / 8u; ++j8) {
      uvec4 pk;
      pk.x = packFloat2x16(f16vec2(p[8u * j8], p[8u * j8 + 1u]));
      pk.y = packFloat2x16(f16vec2(p[8u * j8 + 2u], p[8u * j8 + 3u]));
      pk.z = packFloat2x16(f16vec2(p[8u * j8 + 4u], p[8u * j8 + 5u]));
      pk.w = packFloat2x16(f16vec2(p[8u * j8 + 6u], p[8u * j8 + 7u]));
      sm[rg + r * PRS + hf * (KPL / 8u) + j8] = pk;
    }
    // RS 0: a matrix whose row i holds 1 / row i's factor, O divided by it componentwise (the NV
    // extension divides matrices componentwise but does not multiply them); inf where the
    // factor is 0: O / inf = 0
    bool rescale = RS == 0u && !subgroupAll(alpha == 1.0);
    if (rescale) {
      uvec4 av = floatBitsToUint(vec4(1.0 / alpha));
      sm[rg + PA + r * 4u + 2u * hf] = av;
      sm[rg + PA + r * 4u + 2u * hf + 1u] = av;
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    {  // O = O · alpha (per row: each component takes its row's factor from lane row) + P · V
      if (RS == 1u && !subgroupAll(alpha == 1.0)) {  // else no row's maximum moved
        [[unroll]] for (int k = 0; k < rowof.length(); ++k) {
          float f = subgroupShuffle(alpha, uint(rowof[k]));
          [[unroll]] for (uint j = 0u; j < DV / 16u; ++j) acc[j][k] *= f;
        }
      }
      if (RS == 0u && rescale) {
        ACC am;
        coopMatLoadNV(am, sm, rg + PA, 4u, false);
        [[unroll]] for (uint j = 0u; j < DV / 16u; ++j) acc[j] = acc[j] / am;
      }
      [[unroll]] for (uint kk = 0u; kk < BC / 16u; ++kk) {
        HLF fp;
        coopMatLoadNV(fp, sm, rg + 2u * kk, PRS, false);
        [[unroll]] for (uint j = 0u; j < DV / 16u; ++j) {
          HLF fv;
          coopMatLoadNV(fv, sm, vbuf + 16u * kk * VRS + 2u * j, VRS, false);
          acc[j] = coopMatMulAddNV(fp, fv, acc[j]);
        }
      }
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();  // P and the rescale matrix read: the next S may go over them
  }

  // O / l (rows without a visible key: 0), then out through the region, BC columns at a time
  float l = l_run + subgroupShuffleXor(l_run, 16u), linv = l > 0.0 ? 1.0 / l : 0.0;
  if (RS == 1u) {
    [[unroll]] for (int k = 0; k < rowof.length(); ++k) {
      float f = subgroupShuffle(linv, uint(rowof[k]));
      [[unroll]] for (uint j = 0u; j < DV / 16u; ++j) acc[j][k] *= f;
    }
  } else {  // divided by a matrix of row sums (1 for rows without a visible key: O is 0 there)
    uvec4 lv = floatBitsToUint(vec4(l > 0.0 ? l : 1.0));
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    sm[rg + PA + r * 4u + 2u * hf] = lv;
    sm[rg + PA + r * 4u + 2u * hf + 1u] = lv;
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    ACC lm;
    coopMatLoadNV(lm, sm, rg + PA, 4u, false);
    [[unroll]] for (uint j = 0u; j < DV / 16u; ++j) acc[j] = acc[j] / lm;
    subgroupMemoryBarrierShared();
    subgroupBarrier();
  }
  const uint TPP = BC / 16u;  // O tiles per pass
  [[unroll]] for (uint j0 = 0u; j0 < DV / 16u; j0 += TPP) {
    [[unroll]] for (uint jj = 0u; jj < TPP; ++jj)
      if (j0 + jj < DV / 16u) coopMatStoreNV(acc[j0 + jj], sm, rg + 4u * jj, SRS4, false);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    uint ncols = min(BC, DV - 16u * j0);
    for (uint e = lane; e < 16u * ncols; e += 32u) {
      uint rr = e / ncols, cc = e % ncols, gi = g0 + rr;
      if (gi < nrows) {
        uint oh = kvh * pc.group + gi / pc.sq, os = gi % pc.sq;
        st_o(pc.ooff + bi * pc.osb + oh * pc.osh + os * pc.oss + 16u * j0 + cc,
             uintBitsToFloat(sm[rg + rr * SRS4 + cc / 4u][cc & 3u]));
      }
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
  }
}
