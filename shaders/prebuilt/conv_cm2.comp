#version 450
// Prebuilt (shaders/prebuilt/README.md). A 2-D convolution (groups 1, f16) as an implicit
// matrix product on tensor cores through VK_NV_cooperative_matrix2, with no im2col matrix:
// per image n (work group z),
//   y[n] [M, P] = w [M, K] . col[n] [K, P]   (+ bias per row, + r, act)
// with K = C*kH*kW (c, kh, kw: the weight [M, C, kH, kW] viewed as [M, K]) and P = OH*OW.
// The A operand (w) is loaded from device memory with tensor addressing, as matmul_cm2 does;
// each BK x BN slice of col[n] is gathered from x [N, C, H, W] by the work group's
// invocations (consecutive invocations on consecutive output positions, so neighbouring x
// elements; VEC consecutive positions of one output row each, sharing the tap's arithmetic), written to shared memory (DBUF: two slices, alternating, one barrier per slice) and
// loaded from there as the B operand. The next slice's gather is issued before the current
// slice's product, so its loads overlap the tensor cores.
// The epilogue is matmul_cm2's (kernels_conv_gemm.cpp folds the consumer in): BIAS 1 adds a
// bias per output channel (row), RES = 1 adds r (binding 4, y's layout), ACT 1 applies ReLU,
// all in f32 before the one rounding into y.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_EXT_spirv_intrinsics : require
#define T float16_t
// f32 -> 16-bit conversions round to nearest even (SPV_KHR_float_controls RoundingModeRTE, 16 bits)
spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4467], 4462, 16);
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;  // divides WG
layout(constant_id = 3) const uint BK = 32;   // a multiple of WG / BN
layout(constant_id = 4) const uint BIAS = 0;
layout(constant_id = 5) const uint BIASDT = 0;  // bias storage: 0 f32, 1 f16
layout(constant_id = 6) const uint RES = 0;     // 1: + r[same index as y]
layout(constant_id = 7) const uint ACT = 0;     // 1: ReLU
layout(constant_id = 8) const uint DBUF = 1;    // 1: two shared slices, one barrier per slice
layout(constant_id = 9) const uint WSH = 0;     // 1: w's slices too through shared memory, fetched a slice ahead
layout(constant_id = 10) const uint VEC = 1;    // output positions per gathering invocation (one output row: OW % VEC == 0)
layout(constant_id = 11) const uint KHS = 0;    // > 0: the kernel's height and width (== pc.kh, pc.kw) as constants:
layout(constant_id = 12) const uint KWS = 0;    // the tap's advance is a division by constants, no loop
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { T x[]; };
layout(std430, binding = 1) restrict readonly buffer Wt { T w[]; };
layout(std430, binding = 1) restrict readonly buffer Wv { uvec4 wv[]; };  // WSH: 8 halves at a time
layout(std430, binding = 2) restrict readonly buffer Bias { float bias[]; };
layout(std430, binding = 2) restrict readonly buffer Bias16 { uint16_t bias16[]; };
layout(std430, binding = 3) restrict writeonly buffer Y { T y[]; };
layout(std430, binding = 4) restrict readonly buffer Res { T res[]; };
layout(push_constant) uniform PC {
  uint m, p, k, c, h, w, ow, kh, kw;
  int sh, sw, dh, dw, pt, pl;
  uint xoff, woff, biasoff, yoff, roff, xbat, ybat;
} pc;

const uint BNS = BN + 8u;  // shared row stride (halves): 16-byte rows, fewer bank conflicts
shared T sb[(DBUF != 0u ? 2u : 1u) * BK * BNS];  // DBUF: one slice written while the product reads the other
const uint GCOLS = BN / VEC;   // gathering invocations per slice row, VEC consecutive columns each
const uint ROWS = WG / GCOLS;  // slice rows gathered per pass
const uint PASSES = BK / ROWS;
// WSH: w's BM x BK slice as chunks of 8 consecutive halves of a row (BK a multiple of 8), WCH per
// invocation, fetched into registers with the next slice's gather and stored beside it
const uint BKS = BK + 8u;  // shared row stride of w's slice (halves)
const uint NCH = BM * BK / 8u, WCH = (NCH + WG - 1u) / WG;
shared T sa[WSH != 0u ? (DBUF != 0u ? 2u : 1u) * BM * BKS : 1u];
T g_wv[WSH != 0u ? WCH * 8u : 1u];
bool g_waligned;

void fetch_w(const uint m0, const uint kk, const uint tid) {
  [[unroll]] for (uint j = 0u; j < WCH; ++j) {
    const uint ch = tid + j * WG, r = ch / (BK / 8u), gm = m0 + r, gk = kk + (ch % (BK / 8u)) * 8u;
    if (ch >= NCH) break;
    if (g_waligned) {  // K and the offset multiples of 8: the chunk is wholly inside or outside
      uvec4 q = gm < pc.m && gk < pc.k ? wv[(pc.woff + gm * pc.k + gk) / 8u] : uvec4(0u);
      [[unroll]] for (uint e = 0u; e < 4u; ++e) {
        const f16vec2 h = unpackFloat2x16(q[e]);
        g_wv[j * 8u + 2u * e] = h.x;
        g_wv[j * 8u + 2u * e + 1u] = h.y;
      }
    } else {
      [[unroll]] for (uint e = 0u; e < 8u; ++e)
        g_wv[j * 8u + e] = gm < pc.m && gk + e < pc.k ? w[pc.woff + gm * pc.k + gk + e] : T(0.0);
    }
  }
}
void store_w(const uint base, const uint tid) {
  [[unroll]] for (uint j = 0u; j < WCH; ++j) {
    const uint ch = tid + j * WG;
    if (ch >= NCH) break;
    const uint o = base + (ch / (BK / 8u)) * BKS + (ch % (BK / 8u)) * 8u;
    [[unroll]] for (uint e = 0u; e < 8u; ++e) sa[o + e] = g_wv[j * 8u + e];
  }
}

uint g_m0, g_n0, g_rbase;

float add_bias_row(const in uint32_t r, const in uint32_t c, const in float e, const in uint32_t m0) {
  uint gm = min(m0 + r, pc.m - 1u);
  return e + (BIASDT != 0u ? rlx_from16(BIASDT, uint(bias16[pc.biasoff + gm])) : bias[pc.biasoff + gm]);
}
float epilogue(const in uint32_t r, const in uint32_t c, const in float e) {
  float v = e;
  if (RES != 0u && g_m0 + r < pc.m && g_n0 + c < pc.p) v += float(res[g_rbase + (g_m0 + r) * pc.p + g_n0 + c]);
  if (ACT == 1u) v = v < 0.0 ? 0.0 : v;  // NaN stays NaN, as elementwise.def's relu
  return v;
}

// The gathering invocation's state: its column (output position) and the tap (c, kh, kw) of
// its next row, advanced ROWS rows at a time through K.
int g_ih0, g_iw0;
bool g_col_ok;
uint g_c, g_kh, g_kw, g_k, g_xbase;

// One pass: this invocation's VEC columns of its next row. The tap's decomposition, the row's
// bounds and base address are shared by the VEC positions (consecutive outputs of one row, sw
// apart in x); then the tap advances ROWS rows.
T g_v[PASSES * VEC];
void gather_pass(const uint j) {
  const int ih = g_ih0 + int(g_kh) * pc.dh, iwb = g_iw0 + int(g_kw) * pc.dw;
  const bool rok = g_col_ok && g_k < pc.k && ih >= 0 && ih < int(pc.h);
  const uint rb = g_xbase + (g_c * pc.h + uint(rok ? ih : 0)) * pc.w;
  [[unroll]] for (uint e = 0u; e < VEC; ++e) {
    const int iw = iwb + int(e) * pc.sw;
    T val = T(0.0);
    if (rok && iw >= 0 && iw < int(pc.w)) val = x[rb + uint(iw)];
    g_v[j * VEC + e] = val;
  }
  g_k += ROWS;
  if (KHS != 0u && KWS != 0u) {
    const uint q = g_k % (KHS * KWS);
    g_c = g_k / (KHS * KWS);
    g_kh = q / KWS;
    g_kw = q % KWS;
    return;
  }
  g_kw += ROWS;
  while (g_kw >= pc.kw) {
    g_kw -= pc.kw;
    if (++g_kh == pc.kh) {
      g_kh = 0u;
      ++g_c;
    }
  }
}

void main() {
  const uint M = pc.m, P = pc.p, K = pc.k;
  const uint z = gl_WorkGroupID.z;
  const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
  const uint tid = gl_LocalInvocationID.x, col = (tid % GCOLS) * VEC, row0 = tid / GCOLS;

  // This invocation's columns of every slice: output positions n0 + col .. + VEC - 1 of image z
  // (all inside P or all outside: P and col are multiples of VEC)
  {
    const uint pp = n0 + col;
    g_col_ok = pp < P;
    const uint oh = g_col_ok ? pp / pc.ow : 0u, ow = g_col_ok ? pp % pc.ow : 0u;
    g_ih0 = int(oh) * pc.sh - pc.pt;
    g_iw0 = int(ow) * pc.sw - pc.pl;
    g_xbase = pc.xoff + z * pc.xbat;
    const uint khw = pc.kh * pc.kw;
    g_k = row0;
    g_c = row0 / khw;
    const uint q = row0 % khw;
    g_kh = q / pc.kw;
    g_kw = q % pc.kw;
  }

  tensorLayoutNV<2> la = createTensorLayoutNV(2);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lac = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> ly = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  la = setTensorLayoutDimensionNV(la, M, K);
  lac = setTensorLayoutDimensionNV(lac, M, K);
  lac = setTensorLayoutStrideNV(lac, K, 1);
  ly = setTensorLayoutDimensionNV(ly, M, P);
  ly = setTensorLayoutStrideNV(ly, P, 1);
  // Rows of w wholly inside, K a multiple of BK and 16-byte aligned: unclamped aligned loads
  const bool inside = m0 + BM <= M && K % BK == 0u && K % 8u == 0u && pc.woff % 8u == 0u;
  if (inside) la = setTensorLayoutStrideNV(la, K & ~7u, 1);
  const uint wo = inside ? pc.woff & ~7u : pc.woff;

  coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
      coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
  coopmat<T, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> ma;
  coopmat<T, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> mb;

  g_waligned = K % 8u == 0u && pc.woff % 8u == 0u;
  [[unroll]] for (uint j = 0u; j < PASSES; ++j) gather_pass(j);
  if (WSH != 0u) fetch_w(m0, 0u, tid);
  uint cur = 0u, cura = 0u;
  for (uint kk = 0u; kk < K; kk += BK) {
    // DBUF: sb[cur] (and sa[cura]) was last read by the product two slices back, which every
    // invocation finished before the previous slice's barrier; else the previous slice's product
    // must be done with them first
    if (DBUF == 0u) barrier();
    [[unroll]] for (uint j = 0u; j < PASSES; ++j)
      [[unroll]] for (uint e = 0u; e < VEC; ++e) sb[cur + (row0 + j * ROWS) * BNS + col + e] = g_v[j * VEC + e];
    if (WSH != 0u) store_w(cura, tid);
    barrier();
    if (kk + BK < K) {  // the next slice's gather (and w's slice), in flight during this slice's product
      [[unroll]] for (uint j = 0u; j < PASSES; ++j) gather_pass(j);
      if (WSH != 0u) fetch_w(m0, kk + BK, tid);
    }
    // (Loading w's next slice here too, a matrix ahead, made ResNet-50's convolutions 6x slower;
    // WSH takes it through registers and shared memory instead.)
    if (WSH != 0u) coopMatLoad(ma, sa, cura, BKS, gl_CooperativeMatrixLayoutRowMajor);
    else if (inside) coopMatLoadTensorNV(ma, w, wo, sliceTensorLayoutNV(la, m0, BM, kk, BK));
    else coopMatLoadTensorNV(ma, w, pc.woff, sliceTensorLayoutNV(lac, m0, BM, kk, BK));
    coopMatLoad(mb, sb, cur, BNS, gl_CooperativeMatrixLayoutRowMajor);
    acc = coopMatMulAdd(ma, mb, acc);
    if (DBUF != 0u) {
      cur ^= BK * BNS;
      cura ^= BM * BKS;
    }
  }
  if (BIAS != 0u) coopMatPerElementNV(acc, acc, add_bias_row, m0);
  if (RES != 0u || ACT != 0u) {
    g_m0 = m0;
    g_n0 = n0;
    g_rbase = pc.roff + z * pc.ybat;
    coopMatPerElementNV(acc, acc, epilogue);
  }
  coopmat<T, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> hy =
      coopmat<T, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
  coopMatStoreTensorNV(hy, y, pc.yoff + z * pc.ybat, sliceTensorLayoutNV(ly, m0, BM, n0, BN));
}
