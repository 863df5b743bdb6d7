#version 450
// Prebuilt (shaders/prebuilt/README.md). matmul_cm1.comp (subgroup matrices through
// GL_KHR_cooperative_matrix, f16 x f16 or, built with -DRLX_BF16=1, bf16 x bf16 operands, f32
// accumulators) with a deeper software pipeline, for measuring against matmul_cm2 (issue 22;
// kernels_coopmat.cpp says where it is used):
//
// - PD register sets of global loads in flight (1 or 2). Vulkan has no asynchronous copy into
//   shared memory (no cp.async / TMA), so a K slice travels global -> registers -> shared, and
//   the pipeline's depth is in registers: with PD = 2 the loads of slice s + 2 are issued as
//   slice s's products start and written to shared memory only at the end of slice s + 1, about
//   two slices of products later. Two shared buffers suffice for any PD (slice s + 1 is written
//   into the buffer slice s - 1 was read from, after the barrier that ended slice s - 1), so
//   more shared "stages" would buy nothing here; one barrier per slice.
// - Large per-subgroup tiles (WM x WN of LM x LN fragments, e.g. 64 x 64 = 16 accumulators of
//   16 x 16), rows padded by 16 bytes in shared memory (80-byte rows for BK 32: the 8 rows an
//   ldmatrix reads fall in distinct banks), one shared array for both operands' buffers and the
//   epilogue's staging (aliased: the staging is used before the first slice and after the last).
// - SWZ > 0: work groups walk the tiles in bands of SWZ tile rows (Triton's grouped order).
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
layout(constant_id = 16) const uint PD = 2;  // register sets of global loads in flight (1 or 2)
layout(constant_id = 17) const uint DIRECT = 0;  // whole fragments stored straight from the accumulators
layout(constant_id = 18) const uint SWZ = 0;  // tiles walked in bands of SWZ tile rows (0: row by row)
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
// (TB 1) or [BK][BN+8] (TB 0); two buffers of each, a's first.
const uint ARS = TA == 0u ? (BK + 8u) / 8u : (BM + 8u) / 8u;  // row stride
const uint BRS = TB != 0u ? (BK + 8u) / 8u : (BN + 8u) / 8u;
const uint ASZ = TA == 0u ? BM * ARS : BK * ARS;
const uint BSZ = TB != 0u ? BN * BRS : BK * BRS;
const uint BOFF = 2u * ASZ;
const uint AV = BM * BK / 8u, BV = BN * BK / 8u;  // uvec4s per slice
const uint LA = (AV + WG - 1u) / WG, LB = (BV + WG - 1u) / WG;
// The staging (f32, 4 per uvec4): one LM x LN fragment per subgroup for ragged stores, or the
// bias rows (LM copies of the tile's BN bias values).
const uint CS_WARPS = (WG / SG) * LM * LN, CS_BIAS = LM * BN;
const uint CSV = (CS_WARPS > CS_BIAS ? CS_WARPS : CS_BIAS) / 4u;
const uint SV = 2u * (ASZ + BSZ) > CSV ? 2u * (ASZ + BSZ) : CSV;
shared uvec4 S[SV];

void cs_put(uint i, float v) { S[i / 4u][i % 4u] = floatBitsToUint(v); }
float cs_get(uint i) { return uintBitsToFloat(S[i / 4u][i % 4u]); }

uint M, N, K, m0, n0, kend;
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
    S[buf * ASZ + (e / tc8) * ARS + e % tc8] = ra[l];
  }
  [[unroll]] for (uint l = 0u; l < LB; ++l) {
    uint e = tid + l * WG;
    if (e >= BV) break;
    uint tc8 = (TB != 0u ? BK : BN) / 8u;
    S[BOFF + buf * BSZ + (e / tc8) * BRS + e % tc8] = rb[l];
  }
}

coopmat<float, gl_ScopeSubgroup, LM, LN, gl_MatrixUseAccumulator> acc[FM][FN];
uint wm0, wn0;

void products(uint cur) {
  [[unroll]] for (uint kk = 0u; kk < BK; kk += LK) {
    coopmat<T, gl_ScopeSubgroup, LM, LK, gl_MatrixUseA> fa[FM];
    coopmat<T, gl_ScopeSubgroup, LK, LN, gl_MatrixUseB> fb[FN];
    // Offsets and strides in uvec4 units (8 halves); kk and the m/n offsets are multiples of 8.
    [[unroll]] for (uint i = 0u; i < FM; ++i) {
      uint mm = wm0 + i * LM;
      if (TA == 0u) coopMatLoad(fa[i], S, cur * ASZ + mm * ARS + kk / 8u, ARS, gl_CooperativeMatrixLayoutRowMajor);
      else coopMatLoad(fa[i], S, cur * ASZ + kk * ARS + mm / 8u, ARS, gl_CooperativeMatrixLayoutColumnMajor);
    }
    [[unroll]] for (uint j = 0u; j < FN; ++j) {
      uint nn = wn0 + j * LN;
      if (TB != 0u) coopMatLoad(fb[j], S, BOFF + cur * BSZ + nn * BRS + kk / 8u, BRS, gl_CooperativeMatrixLayoutColumnMajor);
      else coopMatLoad(fb[j], S, BOFF + cur * BSZ + kk * BRS + nn / 8u, BRS, gl_CooperativeMatrixLayoutRowMajor);
    }
    [[unroll]] for (uint i = 0u; i < FM; ++i)
      [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = coopMatMulAdd(fa[i], fb[j], acc[i][j]);
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
  uint tx = gl_WorkGroupID.x, ty = gl_WorkGroupID.y;
  if (SWZ != 0u) {  // bands of SWZ tile rows, column by column within a band
    uint gx = gl_NumWorkGroups.x, gy = gl_NumWorkGroups.y, pid = ty * gx + tx, band = SWZ * gx;
    uint first = (pid / band) * SWZ, rows = min(gy - first, SWZ);
    ty = first + (pid % band) % rows;
    tx = (pid % band) / rows;
  }
  m0 = ty * BM;
  n0 = tx * BN;
  setup_loads();
  uint w = gl_SubgroupID;
  wm0 = (w / (BN / WN)) * WM;
  wn0 = (w % (BN / WN)) * WN;

  if (BIAS != 0u && SPLIT == 0u) {
    for (uint e = gl_LocalInvocationID.x; e < LM * BN; e += WG) {
      uint gn = n0 + e % BN;
      cs_put(e, gn < N ? (BIASDT != 0u ? rlx_from16(BIASDT, uint(bias16[pc.biasoff + gn])) : bias[pc.biasoff + gn]) : 0.0);
    }
    barrier();
    [[unroll]] for (uint i = 0u; i < FM; ++i)
      [[unroll]] for (uint j = 0u; j < FN; ++j) coopMatLoad(acc[i][j], S, (wn0 + j * LN) / 4u, BN / 4u, gl_CooperativeMatrixLayoutRowMajor);
    barrier();
  } else {
    [[unroll]] for (uint i = 0u; i < FM; ++i)
      [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = coopmat<float, gl_ScopeSubgroup, LM, LN, gl_MatrixUseAccumulator>(0.0);
  }

  // Register sets: slice t travels in set t % PD (the loop below is unrolled by PD, so every
  // index into ra0/ra1 is a constant).
  uvec4 ra0[LA], rb0[LB], ra1[LA], rb1[LB];
  uint steps = kend > kbeg ? (kend - kbeg + BK - 1u) / BK : 0u;
  if (steps > 0u) load_slices(kbeg, ra0, rb0);
  if (PD > 1u && steps > 1u) load_slices(kbeg + BK, ra1, rb1);
  if (steps > 0u) store_slices(0u, ra0, rb0);
  barrier();
  for (uint s = 0u; s < steps; s += PD) {
    [[unroll]] for (uint p = 0u; p < PD; ++p) {
      uint t = s + p;
      if (t < steps) {
        // the loads of slice t + PD, into the set slice t was stored from
        if (t + PD < steps) {
          if (p == 0u) load_slices(kbeg + (t + PD) * BK, ra0, rb0);
          else load_slices(kbeg + (t + PD) * BK, ra1, rb1);
        }
        products(t & 1u);
        // slice t + 1 (in set (t + 1) % PD) into the buffer slice t - 1 was read from
        if (t + 1u < steps) {
          if (PD == 1u || p == 1u) store_slices((t + 1u) & 1u, ra0, rb0);
          else store_slices((t + 1u) & 1u, ra1, rb1);
        }
        barrier();
      }
    }
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
        coopMatStore(acc[i][j], S, cbase / 4u, LN / 4u, gl_CooperativeMatrixLayoutRowMajor);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        [[unroll]] for (uint q = 0u; q < (LM * LN + SG - 1u) / SG; ++q) {
          uint e = lane + q * SG;
          uint gm = fm + e / LN, gn = fn + e % LN;
          if (e < LM * LN && gm < M && gn < N) {
            float v = cs_get(cbase + e);
            if (YDT != 0u) y16[ybase + gm * N + gn] = uint16_t(rlx_to16(YDT, v));
            else y[ybase + gm * N + gn] = v;
          }
        }
        subgroupBarrier();
      }
    }
}
