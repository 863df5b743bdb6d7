#version 450
// Flash attention on tensor cores (VK_NV_cooperative_matrix) for f16 q, k and v: the products
// q.k^T and p.v run as f16 x f16 -> f32 subgroup matrices, the online softmax on scalar threads.
// Packing of query rows (GQA), causality and masks as in attention.comp; no key split (chosen
// for prefill-sized work, kernels.cpp).
// Per work group: BR = 32 packed query rows of one (batch, kv head), 4 subgroups of 32. For
// each block of BC = 64 keys:
//   k block -> shared (16-byte loads, prefetched into registers while the previous block's P . V
//   ran; the v block's loads are issued before S so they land while it runs); S = Q . K^T with cooperative matrices (subgroup w owns
//   key columns w*16..), stored f32 to shared;
//   4 invocations per row: scale, mask, row max (clustered over the 4 lanes), P = exp(S - m)
//   rounded to f16 into shared, the row's sum and rescale factor kept in registers; meanwhile
//   the v block replaces the k block in shared;
//   P . V with cooperative matrices (subgroup w owns every 4th 16-column tile of v), stored f32
//   to shared over S; each invocation rescales its row's output columns (registers) and adds
//   them. The NV extension does not say which lane holds which accumulator element, so the
//   per-row rescale happens in registers after the shared round trip.
// q/k/v rows (head dims, offsets, strides) are multiples of 8 halves: the host checks. q, k, v
// and o are read and written at batch, head and position strides (push constants: in place in
// the tensors they are views of, attention_views.cpp). o and a float
// mask may be any storage kind (RLX_LD / RLX_ST); o rounded once on store.
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_clustered : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_spirv_intrinsics : require
// f32 -> f16 conversions (P) round to nearest even
spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4467], 4462, 16);
#define RLX_HALF 1
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint D = 64;   // q/k head dim (multiple of 16, <= 128)
layout(constant_id = 1) const uint DV = 64;  // v head dim (multiple of 16, <= 128)
layout(constant_id = 2) const uint LM = 16;  // subgroup matrix shape LM x LN x LK
layout(constant_id = 3) const uint LN = 16;
layout(constant_id = 4) const uint LK = 16;
layout(constant_id = 6) const uint MDT = 0;  // mask storage kind (0 f32, 1 f16, 2 bf16)
layout(constant_id = 7) const uint ODT = 1;  // o storage kind
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
  // element (b, h, s, d) of q/k/v/o at off + b*sb + h*sh + s*ss + d (strides of q, k, v
  // multiples of 8 halves: the host checks; contiguous: sb = H*S*D, sh = S*D, ss = D)
  uint qsb, qsh, qss, ksb, ksh, kss, vsb, vsh, vss, osb, osh, oss;
} pc;

const uint BR = 32, BC = 64, NW = 4, TPR = 4;  // rows, keys per block, subgroups, invocations per row
const uint KLD = BC * (D / 8u) / 128u;         // k block uvec4s per invocation (D multiple of 16)
const uint VLD = BC * (DV / 8u) / 128u;        // v block uvec4s per invocation
const uint KPT = BC / TPR;                     // keys per invocation (contiguous)
const uint OPT = DV / TPR;                     // output columns per invocation (every TPR-th)
// Shared tiles in uvec4 units (8 halves), rows padded by one uvec4 against bank conflicts.
const uint QRS = D / 8u + 1u, KRS = D / 8u + 1u, VRS = DV / 8u + 1u, PRS = BC / 8u + 1u;
const uint KVSZ = BC * (KRS > VRS ? KRS : VRS);
const uint SRS = BC + 4u, ORS = DV + 4u;  // f32 row strides of S and of P.V's result
const uint SOSZ = BR * (SRS > ORS ? SRS : ORS);
shared uvec4 Qs[BR * QRS];
shared uvec4 KVs[KVSZ];
shared uvec4 Ps[BR * PRS];
shared float SOs[SOSZ];

const uint FM = BR / LM;                                  // row tiles (every subgroup takes all)
const uint FNS = (BC / LN + NW - 1u) / NW;                // S column tiles per subgroup
const uint FNV = (DV / LN + NW - 1u) / NW;                // P.V column tiles per subgroup

void main() {
  uint qb = gl_WorkGroupID.x, kvh = gl_WorkGroupID.y, bi = gl_WorkGroupID.z;
  uint t = gl_LocalInvocationID.x, r = t / TPR, c = t % TPR, w = gl_SubgroupID;
  uint nrows = pc.group * pc.sq;
  uint gr = qb * BR + r;
  uint h = kvh * pc.group + gr / pc.sq, qi = gr % pc.sq;
  bool row_ok = gr < nrows;
  uint kbase = pc.koff + bi * pc.ksb + kvh * pc.ksh;
  uint vbase = pc.voff + bi * pc.vsb + kvh * pc.vsh;
  uint mbase = pc.moff + bi * pc.msb + h * pc.msh + qi * pc.msi;
  int shift = int(pc.sk) - int(pc.sq);

  uint kend = pc.sk;
  if (pc.causal != 0u) {
    uint g0 = qb * BR, g1 = min(g0 + BR, nrows) - 1u;
    uint imax = g0 / pc.sq != g1 / pc.sq ? pc.sq - 1u : g1 % pc.sq;
    kend = min(kend, uint(clamp(int(imax) + shift + 1, 0, int(pc.sk))));
  }

  // q block, once (rows past the end are zeros)
  for (uint e = t; e < BR * (D / 8u); e += 128u) {
    uint rr = e / (D / 8u), d8 = e % (D / 8u), gi = qb * BR + rr;
    uint qh = kvh * pc.group + gi / pc.sq, qs = gi % pc.sq;
    Qs[rr * QRS + d8] = gi < nrows ? q8[(pc.qoff + bi * pc.qsb + qh * pc.qsh + qs * pc.qss) / 8u + d8] : uvec4(0u);
  }

  float acc[OPT];
  [[unroll]] for (uint u = 0u; u < OPT; ++u) acc[u] = 0.0;
  float m_run = -rlx_inf(), l_run = 0.0;  // l_run: this invocation's share of the row sum

  // k and v blocks pass through registers so that their global loads are in flight while the
  // products run: block kb's v is issued before S = Q . K^T, block kb+BC's k before P . V.
  uvec4 kreg[KLD], vreg[VLD];
  [[unroll]] for (uint i = 0u; i < KLD; ++i) {
    uint e = t + 128u * i, kk = e / (D / 8u), d8 = e % (D / 8u);
    kreg[i] = kk < kend ? k8[(kbase + kk * pc.kss) / 8u + d8] : uvec4(0u);
  }
  for (uint kb = 0u; kb < kend; kb += BC) {
    [[unroll]] for (uint i = 0u; i < KLD; ++i) {
      uint e = t + 128u * i;
      KVs[(e / (D / 8u)) * KRS + e % (D / 8u)] = kreg[i];
    }
    [[unroll]] for (uint i = 0u; i < VLD; ++i) {
      uint e = t + 128u * i, kk = e / (DV / 8u), d8 = e % (DV / 8u), gj = kb + kk;
      vreg[i] = gj < kend ? v8[(vbase + gj * pc.vss) / 8u + d8] : uvec4(0u);
    }
    barrier();
    {  // S = Q . K^T
      fcoopmatNV<32, gl_ScopeSubgroup, LM, LN> s[FM][FNS];
      [[unroll]] for (uint i = 0u; i < FM; ++i)
        [[unroll]] for (uint j = 0u; j < FNS; ++j) s[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, LM, LN>(0.0);
      [[unroll]] for (uint kk = 0u; kk < D; kk += LK) {
        fcoopmatNV<16, gl_ScopeSubgroup, LM, LK> fq[FM];
        [[unroll]] for (uint i = 0u; i < FM; ++i) coopMatLoadNV(fq[i], Qs, i * LM * QRS + kk / 8u, QRS, false);
        [[unroll]] for (uint j = 0u; j < FNS; ++j) {
          uint nt = j * NW + w;
          if (nt < BC / LN) {
            fcoopmatNV<16, gl_ScopeSubgroup, LK, LN> fk;
            coopMatLoadNV(fk, KVs, nt * LN * KRS + kk / 8u, KRS, true);
            [[unroll]] for (uint i = 0u; i < FM; ++i) s[i][j] = coopMatMulAddNV(fq[i], fk, s[i][j]);
          }
        }
      }
      [[unroll]] for (uint i = 0u; i < FM; ++i)
        [[unroll]] for (uint j = 0u; j < FNS; ++j) {
          uint nt = j * NW + w;
          if (nt < BC / LN) coopMatStoreNV(s[i][j], SOs, i * LM * SRS + nt * LN, SRS, false);
        }
    }
    barrier();
    // v block over the k block (the products above are done); the next k block's loads issued
    [[unroll]] for (uint i = 0u; i < VLD; ++i) {
      uint e = t + 128u * i;
      KVs[(e / (DV / 8u)) * VRS + e % (DV / 8u)] = vreg[i];
    }
    [[unroll]] for (uint i = 0u; i < KLD; ++i) {
      uint e = t + 128u * i, kk = e / (D / 8u), d8 = e % (D / 8u), gj = kb + BC + kk;
      kreg[i] = gj < kend ? k8[(kbase + gj * pc.kss) / 8u + d8] : uvec4(0u);
    }
    // online softmax: this invocation's KPT contiguous keys of row r
    float p[KPT];
    float mb = -rlx_inf();
    [[unroll]] for (uint j = 0u; j < KPT; ++j) {
      uint kk = c * KPT + j, gj = kb + kk;
      float sc = SOs[r * SRS + kk] * pc.scale;
      bool visible = gj < kend && row_ok;
      if (pc.causal != 0u) visible = visible && int(gj) <= int(qi) + shift;
      if (pc.mask_kind != 0u && visible) {
        float mv = ld_mask(mbase + gj * pc.msj);
        if (pc.mask_kind == 1u) sc += mv;
        else visible = mv != 0.0;
      }
      p[j] = visible ? sc : -rlx_inf();
      mb = max(mb, p[j]);
    }
    mb = subgroupClusteredMax(mb, TPR);
    float m_new = max(m_run, mb);
    float alpha = 1.0, lsum = 0.0;
    if (m_new != -rlx_inf()) {
      alpha = exp(m_run - m_new);
      [[unroll]] for (uint j = 0u; j < KPT; ++j) {
        // rounded to f16 here, so that the sum matches the weights the product uses
        p[j] = p[j] == -rlx_inf() ? 0.0 : float(float16_t(exp(p[j] - m_new)));
        lsum += p[j];
      }
    } else {
      [[unroll]] for (uint j = 0u; j < KPT; ++j) p[j] = 0.0;
    }
    l_run = l_run * alpha + lsum;
    m_run = m_new;
    [[unroll]] for (uint j8 = 0u; j8 < KPT / 8u; ++j8) {
      uvec4 pk;
      pk.x = packFloat2x16(f16vec2(p[8u * j8], p[8u * j8 + 1u]));
      pk.y = packFloat2x16(f16vec2(p[8u * j8 + 2u], p[8u * j8 + 3u]));
      pk.z = packFloat2x16(f16vec2(p[8u * j8 + 4u], p[8u * j8 + 5u]));
      pk.w = packFloat2x16(f16vec2(p[8u * j8 + 6u], p[8u * j8 + 7u]));
      Ps[r * PRS + (c * KPT) / 8u + j8] = pk;
    }
    barrier();
    {  // P . V -> SOs (over S, read above)
      fcoopmatNV<32, gl_ScopeSubgroup, LM, LN> ov[FM][FNV];
      [[unroll]] for (uint i = 0u; i < FM; ++i)
        [[unroll]] for (uint j = 0u; j < FNV; ++j) ov[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, LM, LN>(0.0);
      [[unroll]] for (uint kk = 0u; kk < BC; kk += LK) {
        fcoopmatNV<16, gl_ScopeSubgroup, LM, LK> fp[FM];
        [[unroll]] for (uint i = 0u; i < FM; ++i) coopMatLoadNV(fp[i], Ps, i * LM * PRS + kk / 8u, PRS, false);
        [[unroll]] for (uint j = 0u; j < FNV; ++j) {
          uint nt = j * NW + w;
          if (nt < DV / LN) {
            fcoopmatNV<16, gl_ScopeSubgroup, LK, LN> fv;
            coopMatLoadNV(fv, KVs, kk * VRS + nt * LN / 8u, VRS, false);
            [[unroll]] for (uint i = 0u; i < FM; ++i) ov[i][j] = coopMatMulAddNV(fp[i], fv, ov[i][j]);
          }
        }
      }
      [[unroll]] for (uint i = 0u; i < FM; ++i)
        [[unroll]] for (uint j = 0u; j < FNV; ++j) {
          uint nt = j * NW + w;
          if (nt < DV / LN) coopMatStoreNV(ov[i][j], SOs, i * LM * ORS + nt * LN, ORS, false);
        }
    }
    barrier();
    [[unroll]] for (uint u = 0u; u < OPT; ++u) acc[u] = acc[u] * alpha + SOs[r * ORS + c + TPR * u];
    // the next block's k staging and S store wait at its first barrier for every read here
  }

  float l = subgroupClusteredAdd(l_run, TPR);
  if (!row_ok) return;
  float inv = l > 0.0 ? 1.0 / l : 0.0;
  uint obase = pc.ooff + bi * pc.osb + h * pc.osh + qi * pc.oss;
  [[unroll]] for (uint u = 0u; u < OPT; ++u) st_o(obase + c + TPR * u, acc[u] * inv);
}
