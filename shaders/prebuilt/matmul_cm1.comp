#version 450
// Prebuilt (shaders/prebuilt/README.md): compiled by a newer glslang than Debian 12's, the
// SPIR-V committed beside this source. shaders/matmul_coop.comp (read it for the design) in
// GL_KHR_cooperative_matrix's syntax, for f16 x f16 or (built with -DRLX_BF16=1) bf16 x bf16
// operands, f32 accumulators; the subgroup shape LM x LN x LK is one the device lists in
// VkCooperativeMatrixPropertiesKHR for those types. Used where VK_NV_cooperative_matrix2 is
// absent; the NV_cooperative_matrix kernel is the fallback where this one is.
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
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_spirv_intrinsics : require
// f32 -> 16-bit conversions round to nearest even (SPV_KHR_float_controls RoundingModeRTE, 16 bits)
spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4467], 4462, 16);
layout(local_size_x = 128, local_size_x_id = 10) in;
layout(constant_id = 0) const uint BM = 128;
layout(constant_id = 1) const uint BN = 128;
layout(constant_id = 2) const uint BK = 32;
layout(constant_id = 3) const uint WM = 64;
layout(constant_id = 4) const uint WN = 64;
layout(constant_id = 5) const uint TA = 0;  // a is [K, M]
layout(constant_id = 6) const uint TB = 1;  // b is [N, K] (linear's weight)
layout(constant_id = 7) const uint BIAS = 0;
layout(constant_id = 8) const uint LM = 16;
layout(constant_id = 9) const uint LN = 16;
layout(constant_id = 11) const uint LK = 16;
layout(constant_id = 12) const uint SPLIT = 0;
layout(constant_id = 13) const uint BIASDT = 0;  // storage: 0 f32, 1 f16, 2 bf16
layout(constant_id = 14) const uint YDT = 1;
layout(constant_id = 15) const uint SG = 32;  // subgroup size
layout(constant_id = 16) const uint PROBE = 0;  // tuning only: 2 skips the products
layout(constant_id = 17) const uint DIRECT = 0;  // whole fragments stored straight from the accumulators
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer A { uvec4 a8[]; };
layout(std430, binding = 1) restrict readonly buffer B { uvec4 b8[]; };
layout(std430, binding = 2) restrict readonly buffer Bias { float bias[]; };
layout(std430, binding = 2) restrict readonly buffer Bias16 { uint16_t bias16[]; };
layout(std430, binding = 3) restrict writeonly buffer Y { float y[]; };
layout(std430, binding = 3) restrict writeonly buffer Y16 { uint16_t y16[]; };
layout(std430, binding = 3) restrict writeonly buffer YH { float16_t yh[]; };
layout(push_constant) uniform PC {
  uint m, n, k, aoff, boff, biasoff, yoff, kchunk;
} pc;

const uint WG = (BM / WM) * (BN / WN) * SG;
const uint FM = WM / LM, FN = WN / LN;
// Shared tiles in uvec4 units: a as [BM][BK+8] (TA 0) or [BK][BM+8] (TA 1), b as [BN][BK+8]
// (TB 1) or [BK][BN+8] (TB 0).
const uint ARS = TA == 0u ? (BK + 8u) / 8u : (BM + 8u) / 8u;  // row stride
const uint BRS = TB != 0u ? (BK + 8u) / 8u : (BN + 8u) / 8u;
const uint ASZ = TA == 0u ? BM * ARS : BK * ARS;
const uint BSZ = TB != 0u ? BN * BRS : BK * BRS;
const uint AV = BM * BK / 8u, BV = BN * BK / 8u;  // uvec4s per slice
const uint LA = (AV + WG - 1u) / WG, LB = (BV + WG - 1u) / WG;
shared uvec4 As[2 * ASZ];
shared uvec4 Bs[2 * BSZ];
const uint U = 1u;
void put8(bool isa, uint at, uvec4 w) {
  if (isa) As[at] = w;
  else Bs[at] = w;
}
// Staging for ragged fragments, and the bias rows (LM copies of the tile's BN bias values).
const uint CS_WARPS = (WG / SG) * LM * LN, CS_BIAS = LM * BN;
shared float Cs[CS_WARPS > CS_BIAS ? CS_WARPS : CS_BIAS];

uint M, N, K, m0, n0, kend;

// Per invocation and load slot: the uvec4 index of its element at k0 = 0 (set once, so that a
// step's load is one add); its k offset in the slice and whether its row (or column) is inside
// the matrix are recomputed from the invocation index (shifts of constants: fewer registers).
uint apre[LA], bpre[LB];

uint a_kk(uint e) { return TA == 0u ? (e % (BK / 8u)) * 8u : e / (BM / 8u); }
bool a_in(uint e) { return e < AV && (TA == 0u ? m0 + e / (BK / 8u) < M : m0 + (e % (BM / 8u)) * 8u < M); }
uint b_kk(uint e) { return TB != 0u ? (e % (BK / 8u)) * 8u : e / (BN / 8u); }
bool b_in(uint e) { return e < BV && (TB != 0u ? n0 + e / (BK / 8u) < N : n0 + (e % (BN / 8u)) * 8u < N); }

void setup_loads() {
  uint tid = gl_LocalInvocationID.x;
  [[unroll]] for (uint l = 0u; l < LA; ++l) {
    uint e = tid + l * WG;
    if (TA == 0u) apre[l] = (pc.aoff + (m0 + e / (BK / 8u)) * K + (e % (BK / 8u)) * 8u) / 8u;
    else apre[l] = (pc.aoff + (e / (BM / 8u)) * M + m0 + (e % (BM / 8u)) * 8u) / 8u;
  }
  [[unroll]] for (uint l = 0u; l < LB; ++l) {
    uint e = tid + l * WG;
    if (TB != 0u) bpre[l] = (pc.boff + (n0 + e / (BK / 8u)) * K + (e % (BK / 8u)) * 8u) / 8u;
    else bpre[l] = (pc.boff + (e / (BN / 8u)) * N + n0 + (e % (BN / 8u)) * 8u) / 8u;
  }
}

void load_slices(uint k0, inout uvec4 ra[LA], inout uvec4 rb[LB]) {
  uint tid = gl_LocalInvocationID.x;
  uint astep = TA == 0u ? k0 / 8u : k0 * (M / 8u), bstep = TB != 0u ? k0 / 8u : k0 * (N / 8u);
  [[unroll]] for (uint l = 0u; l < LA; ++l) {
    uint e = tid + l * WG;
    ra[l] = uvec4(0u);
    if (a_in(e) && k0 + a_kk(e) < kend) ra[l] = a8[apre[l] + astep];  // a branch: never a load outside
  }
  [[unroll]] for (uint l = 0u; l < LB; ++l) {
    uint e = tid + l * WG;
    rb[l] = uvec4(0u);
    if (b_in(e) && k0 + b_kk(e) < kend) rb[l] = b8[bpre[l] + bstep];
  }
}

void store_slices(uint buf, uvec4 ra[LA], uvec4 rb[LB]) {
  uint tid = gl_LocalInvocationID.x;
  [[unroll]] for (uint l = 0u; l < LA; ++l) {
    uint e = tid + l * WG;
    if (e >= AV) break;
    uint tc8 = (TA == 0u ? BK : BM) / 8u;
    put8(true, buf * ASZ + (e / tc8) * ARS + e % tc8, ra[l]);
  }
  [[unroll]] for (uint l = 0u; l < LB; ++l) {
    uint e = tid + l * WG;
    if (e >= BV) break;
    uint tc8 = (TB != 0u ? BK : BN) / 8u;
    put8(false, buf * BSZ + (e / tc8) * BRS + e % tc8, rb[l]);
  }
}

void main() {
  M = pc.m;
  N = pc.n;
  K = pc.k;
  uint z = gl_WorkGroupID.z;
  uint kbeg = 0u;
  kend = K;
  if (SPLIT != 0u) {
    kbeg = z * pc.kchunk;
    kend = min(K, kbeg + pc.kchunk);
  }
  m0 = gl_WorkGroupID.y * BM;
  n0 = gl_WorkGroupID.x * BN;
  setup_loads();
  uint w = gl_SubgroupID;
  uint wm0 = (w / (BN / WN)) * WM, wn0 = (w % (BN / WN)) * WN;

  coopmat<float, gl_ScopeSubgroup, LM, LN, gl_MatrixUseAccumulator> acc[FM][FN];
  if (BIAS != 0u && SPLIT == 0u) {
    for (uint e = gl_LocalInvocationID.x; e < LM * BN; e += WG) {
      uint gn = n0 + e % BN;
      Cs[e] = gn < N ? (BIASDT != 0u ? rlx_from16(BIASDT, uint(bias16[pc.biasoff + gn])) : bias[pc.biasoff + gn]) : 0.0;
    }
    barrier();
    [[unroll]] for (uint i = 0u; i < FM; ++i)
      [[unroll]] for (uint j = 0u; j < FN; ++j) coopMatLoad(acc[i][j], Cs, wn0 + j * LN, BN, gl_CooperativeMatrixLayoutRowMajor);
    barrier();
  } else {
    [[unroll]] for (uint i = 0u; i < FM; ++i)
      [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = coopmat<float, gl_ScopeSubgroup, LM, LN, gl_MatrixUseAccumulator>(0.0);
  }

  uvec4 ra[LA], rb[LB];
  uint steps = kend > kbeg ? (kend - kbeg + BK - 1u) / BK : 0u;
  if (steps > 0u) {
    load_slices(kbeg, ra, rb);
    store_slices(0u, ra, rb);
  }
  barrier();
  for (uint s = 0u; s < steps; ++s) {
    uint cur = s & 1u;
    if (s + 1u < steps) load_slices(kbeg + (s + 1u) * BK, ra, rb);
    [[unroll]] for (uint kk = 0u; kk < BK; kk += LK) {
      coopmat<T, gl_ScopeSubgroup, LM, LK, gl_MatrixUseA> fa[FM];
      coopmat<T, gl_ScopeSubgroup, LK, LN, gl_MatrixUseB> fb[FN];
      // Element offsets and strides in uvec4 units (8 halves); kk and the m/n offsets are
      // multiples of 8 halves.
      [[unroll]] for (uint i = 0u; i < FM; ++i) {
        uint mm = wm0 + i * LM;
        if (TA == 0u) coopMatLoad(fa[i], As, (cur * ASZ + mm * ARS) * U + kk * U / 8u, ARS * U, gl_CooperativeMatrixLayoutRowMajor);
        else coopMatLoad(fa[i], As, (cur * ASZ + kk * ARS) * U + mm * U / 8u, ARS * U, gl_CooperativeMatrixLayoutColumnMajor);
      }
      [[unroll]] for (uint j = 0u; j < FN; ++j) {
        uint nn = wn0 + j * LN;
        if (TB != 0u) coopMatLoad(fb[j], Bs, (cur * BSZ + nn * BRS) * U + kk * U / 8u, BRS * U, gl_CooperativeMatrixLayoutColumnMajor);
        else coopMatLoad(fb[j], Bs, (cur * BSZ + kk * BRS) * U + nn * U / 8u, BRS * U, gl_CooperativeMatrixLayoutRowMajor);
      }
      [[unroll]] for (uint i = 0u; i < FM; ++i)
        [[unroll]] for (uint j = 0u; j < FN; ++j)
          if (PROBE != 2u) acc[i][j] = coopMatMulAdd(fa[i], fb[j], acc[i][j]);
    }
    if (s + 1u < steps) store_slices(cur ^ 1u, ra, rb);
    barrier();
  }

  uint ybase = pc.yoff + (SPLIT != 0u ? z * M * N : 0u);
  uint lane = gl_SubgroupInvocationID, cbase = w * LM * LN;
  // Every loop here is unrolled (no dynamic index into acc, which would move it to memory).
  [[unroll]] for (uint i = 0u; i < FM; ++i)
    [[unroll]] for (uint j = 0u; j < FN; ++j) {
      uint fm = m0 + wm0 + i * LM, fn = n0 + wn0 + j * LN;
      if (DIRECT != 0u && YDT != 2u && fm + LM <= M && fn + LN <= N) {
        if (YDT == 0u) {
          coopMatStore(acc[i][j], y, ybase + fm * N + fn, N, gl_CooperativeMatrixLayoutRowMajor);
        } else {
          coopmat<float16_t, gl_ScopeSubgroup, LM, LN, gl_MatrixUseAccumulator> h = coopmat<float16_t, gl_ScopeSubgroup, LM, LN, gl_MatrixUseAccumulator>(acc[i][j]);
          coopMatStore(h, yh, ybase + fm * N + fn, N, gl_CooperativeMatrixLayoutRowMajor);
        }
      } else {
        coopMatStore(acc[i][j], Cs, cbase, LN, gl_CooperativeMatrixLayoutRowMajor);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        [[unroll]] for (uint q = 0u; q < (LM * LN + SG - 1u) / SG; ++q) {
          uint e = lane + q * SG;
          uint gm = fm + e / LN, gn = fn + e % LN;
          if (e < LM * LN && gm < M && gn < N) {
            float v = Cs[cbase + e];
            if (YDT != 0u) y16[ybase + gm * N + gn] = uint16_t(rlx_to16(YDT, v));
            else y[ybase + gm * N + gn] = v;
          }
        }
        subgroupBarrier();
      }
    }
}
