#version 450
// Prebuilt (shaders/prebuilt/README.md): compiled by a newer glslang than Debian 12's, the
// SPIR-V committed beside this source. shaders/attention_coop.comp (read it for the design) in
// GL_KHR_cooperative_matrix's syntax, for bf16 q, k and v (built with -DRLX_BF16=1; the f16
// kernel is attention_coop.comp on VK_NV_cooperative_matrix): Q.K^T and P.V as bf16 x bf16 -> f32
// subgroup matrices of a shape the device lists for bf16, P rounded to bf16 (round to nearest
// even), the row sums adding the rounded weights.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#ifdef RLX_BF16
#extension GL_EXT_bfloat16 : require
#define T bfloat16_t
#else
#define T float16_t
#endif
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

#ifdef RLX_BF16
// p in [0, 1]: round to nearest even by bits; pack16 takes values already rounded (exact)
float rnd16(float x) { uint b = floatBitsToUint(x); return uintBitsToFloat((b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u); }
uint pack16(float a, float b) { return (floatBitsToUint(a) >> 16) | (floatBitsToUint(b) & 0xffff0000u); }
#else
float rnd16(float x) { return float(float16_t(x)); }
uint pack16(float a, float b) { return packFloat2x16(f16vec2(a, b)); }
#endif

void main() {
  uint qb = gl_WorkGroupID.x, kvh = gl_WorkGroupID.y, bi = gl_WorkGroupID.z;
  uint t = gl_LocalInvocationID.x, r = t / TPR, c = t % TPR, w = gl_SubgroupID;
  uint nrows = pc.group * pc.sq;
  uint row0 = (bi * pc.hq + kvh * pc.group) * pc.sq;
  uint gr = qb * BR + r;
  uint h = kvh * pc.group + gr / pc.sq, qi = gr % pc.sq;
  bool row_ok = gr < nrows;
  uint kbase = pc.koff + (bi * pc.hkv + kvh) * pc.sk * D;
  uint vbase = pc.voff + (bi * pc.hkv + kvh) * pc.sk * DV;
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
    Qs[rr * QRS + d8] = gi < nrows ? q8[(pc.qoff + (row0 + gi) * D) / 8u + d8] : uvec4(0u);
  }

  float acc[OPT];
  [[unroll]] for (uint u = 0u; u < OPT; ++u) acc[u] = 0.0;
  float m_run = -rlx_inf(), l_run = 0.0;  // l_run: this invocation's share of the row sum

  // k and v blocks pass through registers so that their global loads are in flight while the
  // products run: block kb's v is issued before S = Q . K^T, block kb+BC's k before P . V.
  uvec4 kreg[KLD], vreg[VLD];
  [[unroll]] for (uint i = 0u; i < KLD; ++i) {
    uint e = t + 128u * i, kk = e / (D / 8u), d8 = e % (D / 8u);
    kreg[i] = kk < kend ? k8[(kbase + kk * D) / 8u + d8] : uvec4(0u);
  }
  for (uint kb = 0u; kb < kend; kb += BC) {
    [[unroll]] for (uint i = 0u; i < KLD; ++i) {
      uint e = t + 128u * i;
      KVs[(e / (D / 8u)) * KRS + e % (D / 8u)] = kreg[i];
    }
    [[unroll]] for (uint i = 0u; i < VLD; ++i) {
      uint e = t + 128u * i, kk = e / (DV / 8u), d8 = e % (DV / 8u), gj = kb + kk;
      vreg[i] = gj < kend ? v8[(vbase + gj * DV) / 8u + d8] : uvec4(0u);
    }
    barrier();
    {  // S = Q . K^T
      coopmat<float, gl_ScopeSubgroup, LM, LN, gl_MatrixUseAccumulator> s[FM][FNS];
      [[unroll]] for (uint i = 0u; i < FM; ++i)
        [[unroll]] for (uint j = 0u; j < FNS; ++j) s[i][j] = coopmat<float, gl_ScopeSubgroup, LM, LN, gl_MatrixUseAccumulator>(0.0);
      [[unroll]] for (uint kk = 0u; kk < D; kk += LK) {
        coopmat<T, gl_ScopeSubgroup, LM, LK, gl_MatrixUseA> fq[FM];
        [[unroll]] for (uint i = 0u; i < FM; ++i) coopMatLoad(fq[i], Qs, i * LM * QRS + kk / 8u, QRS, gl_CooperativeMatrixLayoutRowMajor);
        [[unroll]] for (uint j = 0u; j < FNS; ++j) {
          uint nt = j * NW + w;
          if (nt < BC / LN) {
            coopmat<T, gl_ScopeSubgroup, LK, LN, gl_MatrixUseB> fk;
            coopMatLoad(fk, KVs, nt * LN * KRS + kk / 8u, KRS, gl_CooperativeMatrixLayoutColumnMajor);
            [[unroll]] for (uint i = 0u; i < FM; ++i) s[i][j] = coopMatMulAdd(fq[i], fk, s[i][j]);
          }
        }
      }
      [[unroll]] for (uint i = 0u; i < FM; ++i)
        [[unroll]] for (uint j = 0u; j < FNS; ++j) {
          uint nt = j * NW + w;
          if (nt < BC / LN) coopMatStore(s[i][j], SOs, i * LM * SRS + nt * LN, SRS, gl_CooperativeMatrixLayoutRowMajor);
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
      kreg[i] = gj < kend ? k8[(kbase + gj * D) / 8u + d8] : uvec4(0u);
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
        p[j] = p[j] == -rlx_inf() ? 0.0 : rnd16(exp(p[j] - m_new));
        lsum += p[j];
      }
    } else {
      [[unroll]] for (uint j = 0u; j < KPT; ++j) p[j] = 0.0;
    }
    l_run = l_run * alpha + lsum;
    m_run = m_new;
    [[unroll]] for (uint j8 = 0u; j8 < KPT / 8u; ++j8) {
      uvec4 pk;
      pk.x = pack16(p[8u * j8], p[8u * j8 + 1u]);
      pk.y = pack16(p[8u * j8 + 2u], p[8u * j8 + 3u]);
      pk.z = pack16(p[8u * j8 + 4u], p[8u * j8 + 5u]);
      pk.w = pack16(p[8u * j8 + 6u], p[8u * j8 + 7u]);
      Ps[r * PRS + (c * KPT) / 8u + j8] = pk;
    }
    barrier();
    {  // P . V -> SOs (over S, read above)
      coopmat<float, gl_ScopeSubgroup, LM, LN, gl_MatrixUseAccumulator> ov[FM][FNV];
      [[unroll]] for (uint i = 0u; i < FM; ++i)
        [[unroll]] for (uint j = 0u; j < FNV; ++j) ov[i][j] = coopmat<float, gl_ScopeSubgroup, LM, LN, gl_MatrixUseAccumulator>(0.0);
      [[unroll]] for (uint kk = 0u; kk < BC; kk += LK) {
        coopmat<T, gl_ScopeSubgroup, LM, LK, gl_MatrixUseA> fp[FM];
        [[unroll]] for (uint i = 0u; i < FM; ++i) coopMatLoad(fp[i], Ps, i * LM * PRS + kk / 8u, PRS, gl_CooperativeMatrixLayoutRowMajor);
        [[unroll]] for (uint j = 0u; j < FNV; ++j) {
          uint nt = j * NW + w;
          if (nt < DV / LN) {
            coopmat<T, gl_ScopeSubgroup, LK, LN, gl_MatrixUseB> fv;
            coopMatLoad(fv, KVs, kk * VRS + nt * LN / 8u, VRS, gl_CooperativeMatrixLayoutRowMajor);
            [[unroll]] for (uint i = 0u; i < FM; ++i) ov[i][j] = coopMatMulAdd(fp[i], fv, ov[i][j]);
          }
        }
      }
      [[unroll]] for (uint i = 0u; i < FM; ++i)
        [[unroll]] for (uint j = 0u; j < FNV; ++j) {
          uint nt = j * NW + w;
          if (nt < DV / LN) coopMatStore(ov[i][j], SOs, i * LM * ORS + nt * LN, ORS, gl_CooperativeMatrixLayoutRowMajor);
        }
    }
    barrier();
    [[unroll]] for (uint u = 0u; u < OPT; ++u) acc[u] = acc[u] * alpha + SOs[r * ORS + c + TPR * u];
    // the next block's k staging and S store wait at its first barrier for every read here
  }

  float l = subgroupClusteredAdd(l_run, TPR);
  if (!row_ok) return;
  float inv = l > 0.0 ? 1.0 / l : 0.0;
  uint obase = pc.ooff + (row0 + gr) * DV;
  [[unroll]] for (uint u = 0u; u < OPT; ++u) st_o(obase + c + TPR * u, acc[u] * inv);
}
