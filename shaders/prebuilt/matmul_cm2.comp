#version 450
// Prebuilt (shaders/prebuilt/README.md): compiled by a newer glslang than Debian 12's, the
// SPIR-V committed beside this source. f16 x f16 (or, built with -DRLX_BF16=1, bf16 x bf16)
// matrix product on tensor cores through VK_NV_cooperative_matrix2: y = op(a) . op(b) (+ bias),
// products accumulated in f32 and rounded once into y's dtype.
//
// A work group owns a BM x BN tile as one workgroup-scope accumulator; each BK-deep slice of a
// and b is loaded straight from device memory with tensor addressing (coopMatLoadTensorNV), the
// driver doing the staging that the NV_cooperative_matrix kernel (shaders/matmul_coop.comp)
// does by hand in 48 KiB of shared memory. Tiles wholly inside the matrices with K a multiple
// of BK take unclamped loads; the others clamp (zeros outside). Bias is added per element
// (coopMatPerElementNV), per column (BIAS 1: linear's bias) or per row (BIAS 2: a convolution's
// bias when the product is w . col, kernels_conv_gemm.cpp). With BATCH = 1 work group z is a
// batch index: a, b and y start abat, bbat, ybat elements further per z (a convolution's images,
// whose outputs land in NCHW as they are). Then, in f32 before the one rounding: RES = 1 adds
// r (binding 4, y's type and layout: a residual), ACT applies ReLU (1) or GELU (2 erf form,
// 3 tanh form): the product's consumer folded in (executor.cpp, kernels_conv_gemm.cpp). With SPLIT = 1 work group z multiplies K range [z*kchunk,
// (z+1)*kchunk) and writes its f32 partial product to y + z*M*N; matmul_splitk sums them.
// The in-bounds path tells the compiler that rows and offsets are 16-byte aligned (the host
// checks): without that the H200 ran 4096^3 at 10-67 TFLOP/s instead of 253. SWZ orders the
// tiles for L2 reuse (below); the host picks tile, unrolling, split and order per product
// (kernels_coopmat.cpp). RESL = 1 loads r as one matrix per tile instead of per element.
// ACTS = 1 (16-bit y): the activation is applied after the rounding, as the separate unary
// kernel would apply it to the stored product (the same bits): the rounded tile is stored to
// shared memory, then each invocation widens 8 values at a time, applies ACT in f32 and writes
// them rounded (rlx_to16) with 16-byte stores. The per-element callback with GELU's erf made
// ViT-S/16's MLP products slower than the gelu kernel it saved (docs/benchmarks.md, session 12);
// so did this staging, by more (fc1 0.07 -> 0.23 ms on the H200, session 16). ACTS = 2: the
// same without shared memory: the rounded tile is stored to y as usual, then (after a barrier)
// each invocation reads 8 values back (from L2), applies ACT as the unary kernel does
// (rlx_from16x2, rlx_to16) and writes them over.
// YFOLD = P > 0 (a convolution's product with the batch folded into its columns,
// kernels_conv_fold.cpp; SPLIT 0, RESL where RES): column j of the product is image j / P,
// position j % P, and y and r are NCHW, [N / P, M, P]: each tile is stored (and r loaded) once per
// image its columns reach, through a layout of that image, [M, P], sliced at column n0 - i*P
// (negative past the first image: a signed offset, SPV_NV_cooperative_matrix2), whose bounds
// discard (load as zero) the columns of the other images.
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
#ifdef RLX_BF16
#extension GL_EXT_bfloat16 : require
#define T bfloat16_t
#else
#define T float16_t
#endif
// f32 -> 16-bit conversions round to nearest even (SPV_KHR_float_controls RoundingModeRTE, 16 bits)
spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4467], 4462, 16);
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 32;
layout(constant_id = 4) const uint TA = 0;  // a is [K, M]
layout(constant_id = 5) const uint TB = 1;  // b is [N, K] (linear's weight)
layout(constant_id = 6) const uint BIAS = 0;
layout(constant_id = 7) const uint BIASDT = 0;  // bias storage: 0 f32, 1 f16, 2 bf16
layout(constant_id = 8) const uint YDT = 1;     // y: 0 f32, else T
layout(constant_id = 9) const uint SPLIT = 0;
layout(constant_id = 10) const uint UNROLL = 4;  // K slices per trip of the in-bounds loop
layout(constant_id = 11) const uint BATCH = 0;   // 1: z is a batch index (SPLIT 0)
layout(constant_id = 12) const uint RES = 0;     // 1: + r[same index as y] (SPLIT 0)
layout(constant_id = 13) const uint ACT = 0;     // 1: ReLU, 2: GELU (erf), 3: GELU (tanh) (SPLIT 0)
layout(constant_id = 14) const uint SWZ = 0;     // > 0: work groups walk tiles in bands of SWZ tile rows (L2 reuse)
layout(constant_id = 15) const uint FSTORE = 1;  // 1: whole tiles with aligned rows stored unclamped
layout(constant_id = 16) const uint PREF = 0;    // 1: load slice k+1 before multiplying slice k (measuring only: slower)
layout(constant_id = 17) const uint RESL = 0;    // RES: 1 loads r as a matrix (tensor addressing), 0 per element
layout(constant_id = 18) const uint ACTS = 0;    // ACT after rounding: 1 staged through shared memory, 2 through y (YDT != 0, SPLIT 0)
layout(constant_id = 19) const uint YFOLD = 0;   // > 0: y and r are [N / YFOLD, M, YFOLD] (above)
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer A { T a[]; };
layout(std430, binding = 1) restrict readonly buffer B { T b[]; };
layout(std430, binding = 2) restrict readonly buffer Bias { float bias[]; };
layout(std430, binding = 2) restrict readonly buffer Bias16 { uint16_t bias16[]; };
layout(std430, binding = 3) restrict writeonly buffer Y { float y[]; };
layout(std430, binding = 3) restrict writeonly buffer YT { T yt[]; };
layout(std430, binding = 3) restrict writeonly buffer Y8 { uvec4 y8[]; };
layout(std430, binding = 3) restrict writeonly buffer Y16 { uint16_t y16[]; };
layout(std430, binding = 4) restrict readonly buffer Res { T res[]; };
layout(std430, binding = 3) coherent buffer YC { T yc[]; };  // ACTS 2: y written, read back and written again
layout(std430, binding = 3) coherent buffer YC8 { uvec4 yc8[]; };
layout(std430, binding = 3) coherent buffer YC16 { uint16_t yc16[]; };
shared T stile[ACTS == 1u ? BM * BN : 1u];  // ACTS 1: the rounded tile
layout(push_constant) uniform PC {
  uint m, n, k, aoff, boff, biasoff, yoff, kchunk, abat, bbat, ybat, roff;
} pc;
uint g_m0, g_n0, g_rbase;  // the tile's origin and r's first element for this z (RES)

float add_bias(const in uint32_t r, const in uint32_t c, const in float e, const in uint32_t n0) {
  uint gn = min(n0 + c, pc.n - 1u);
  return e + (BIASDT != 0u ? rlx_from16(BIASDT, uint(bias16[pc.biasoff + gn])) : bias[pc.biasoff + gn]);
}
float add_bias_row(const in uint32_t r, const in uint32_t c, const in float e, const in uint32_t m0) {
  uint gm = min(m0 + r, pc.m - 1u);
  return e + (BIASDT != 0u ? rlx_from16(BIASDT, uint(bias16[pc.biasoff + gm])) : bias[pc.biasoff + gm]);
}

float act(const in float e) {
  float v = e;
  if (ACT == 1u) v = v < 0.0 ? 0.0 : v;  // NaN stays NaN, as elementwise.def's relu
  if (ACT == 2u) v = rlx_gelu_erf(v);
  if (ACT == 3u) v = rlx_gelu_tanh(v);
  return v;
}
uint act2(const in T lo, const in T hi) {
  const uint DT = YDT;  // 1 f16, 2 bf16
  return rlx_to16(DT, act(float(lo))) | (rlx_to16(DT, act(float(hi))) << 16);
}

uint act2w(const in uint w) {  // unary_vec.comp's op2: both halves of a word
  const uint DT = YDT;
  const vec2 f = rlx_from16x2(DT, w);
  return rlx_to16(DT, act(f.x)) | (rlx_to16(DT, act(f.y)) << 16);
}

// The residual and (ACTS 0) the activation, in f32.
float epilogue(const in uint32_t r, const in uint32_t c, const in float e) {
  float v = e;
  if (RES != 0u && RESL == 0u && g_m0 + r < pc.m && g_n0 + c < pc.n) v += float(res[g_rbase + (g_m0 + r) * pc.n + g_n0 + c]);
  if (ACTS == 0u) v = act(v);
  return v;
}

// The driver's f32 -> bf16 conversion does not round to nearest even (seen on NVIDIA 580): each
// value is rounded here (common.glsl) to one that bf16 holds exactly, which any conversion keeps.
float round_bf16(const in uint32_t r, const in uint32_t c, const in float e) { return uintBitsToFloat(rlx_f2bf(e) << 16); }

void main() {
  const uint M = pc.m, N = pc.n, K = pc.k;
  const uint z = gl_WorkGroupID.z;
  uint kbeg = 0u, kend = K;
  const uint aoff = pc.aoff + (BATCH != 0u ? z * pc.abat : 0u), boff = pc.boff + (BATCH != 0u ? z * pc.bbat : 0u);
  if (SPLIT != 0u) {
    kbeg = z * pc.kchunk;
    kend = min(K, kbeg + pc.kchunk);
  }
  // The tile. SWZ 0: x walks the tile columns, y the rows, as dispatched (one row of tiles after
  // another: each tile row reads all of b). SWZ > 0: the dispatch's linear index walks bands of
  // SWZ tile rows column by column, so that the groups in flight share a's rows and b's columns
  // in L2 (Triton's "grouped ordering").
  uint tx = gl_WorkGroupID.x, ty = gl_WorkGroupID.y;
  if (SWZ != 0u) {
    const uint gx = gl_NumWorkGroups.x, gy = gl_NumWorkGroups.y;
    const uint pid = ty * gx + tx, band = pid / (SWZ * gx), first = band * SWZ, rows = min(gy - first, SWZ);
    const uint r = pid - band * SWZ * gx;
    ty = first + r % rows;
    tx = r / rows;
  }
  const uint m0 = ty * BM, n0 = tx * BN;

  // a as stored: [M, K] (TA 0) or [K, M]; b: [N, K] (TB 1) or [K, N]. kend bounds the K extent
  // (split-K chunks clamp there).
  tensorLayoutNV<2> la = createTensorLayoutNV(2);
  tensorLayoutNV<2> lb = createTensorLayoutNV(2);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lac = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lbc = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> ly = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  if (TA == 0u) {
    la = setTensorLayoutDimensionNV(la, M, kend);
    lac = setTensorLayoutDimensionNV(lac, M, kend);
  } else {
    la = setTensorLayoutDimensionNV(la, kend, M);
    lac = setTensorLayoutDimensionNV(lac, kend, M);
  }
  if (TB != 0u) {
    lb = setTensorLayoutDimensionNV(lb, N, kend);
    lbc = setTensorLayoutDimensionNV(lbc, N, kend);
  } else {
    lb = setTensorLayoutDimensionNV(lb, kend, N);
    lbc = setTensorLayoutDimensionNV(lbc, kend, N);
  }
  uint sa = TA == 0u ? K : M, sb = TB != 0u ? K : N;
  lac = setTensorLayoutStrideNV(lac, sa, 1);
  lbc = setTensorLayoutStrideNV(lbc, sb, 1);
  ly = setTensorLayoutDimensionNV(ly, M, N);
  ly = setTensorLayoutStrideNV(ly, N, 1);
  tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);

  coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
      coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
  coopmat<T, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> ma;
  coopmat<T, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> mb;
  uint kk = kbeg;
  const bool inside = m0 + BM <= M && n0 + BN <= N && (kend - kbeg) % BK == 0u && kbeg % 256u == 0u &&
                      sa % 8u == 0u && sb % 8u == 0u && aoff % 8u == 0u && boff % 8u == 0u;
  if (inside) {
    // Tells the compiler what was just checked (16-byte aligned rows and offsets, K slices at
    // multiples of 256), so that it can load 16 bytes at a time.
    la = setTensorLayoutStrideNV(la, sa & ~7u, 1);
    lb = setTensorLayoutStrideNV(lb, sb & ~7u, 1);
    kk &= ~255u;
    const uint ao = aoff & ~7u, bo = boff & ~7u;
#define LOAD_AB(MA, MB, K0)                                                                              \
  if (TA == 0u) coopMatLoadTensorNV(MA, a, ao, sliceTensorLayoutNV(la, m0, BM, K0, BK));                 \
  else coopMatLoadTensorNV(MA, a, ao, sliceTensorLayoutNV(la, K0, BK, m0, BM), tr);                      \
  if (TB != 0u) coopMatLoadTensorNV(MB, b, bo, sliceTensorLayoutNV(lb, n0, BN, K0, BK), tr);             \
  else coopMatLoadTensorNV(MB, b, bo, sliceTensorLayoutNV(lb, K0, BK, n0, BN));
    if (PREF != 0u && kk < kend) {
      // Software pipelining by hand: the next slice's loads are issued before this slice's
      // product, in a second pair of matrices.
      coopmat<T, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> ma2;
      coopmat<T, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> mb2;
      LOAD_AB(ma, mb, kk)
      for (kk += BK; kk + BK <= kend; kk += 2u * BK) {
        LOAD_AB(ma2, mb2, kk)
        acc = coopMatMulAdd(ma, mb, acc);
        if (kk + BK >= kend) {
          ma = ma2, mb = mb2;
          kk += BK;
          break;
        }
        LOAD_AB(ma, mb, kk + BK)
        acc = coopMatMulAdd(ma2, mb2, acc);
      }
      acc = coopMatMulAdd(ma, mb, acc);
      kk = kend;
    }
    for (; kk + UNROLL * BK <= kend;) {
      [[unroll]] for (uint u = 0u; u < UNROLL; ++u, kk += BK) {
        if (TA == 0u) coopMatLoadTensorNV(ma, a, ao, sliceTensorLayoutNV(la, m0, BM, kk, BK));
        else coopMatLoadTensorNV(ma, a, ao, sliceTensorLayoutNV(la, kk, BK, m0, BM), tr);
        if (TB != 0u) coopMatLoadTensorNV(mb, b, bo, sliceTensorLayoutNV(lb, n0, BN, kk, BK), tr);
        else coopMatLoadTensorNV(mb, b, bo, sliceTensorLayoutNV(lb, kk, BK, n0, BN));
        acc = coopMatMulAdd(ma, mb, acc);
      }
    }
    for (; kk < kend; kk += BK) {
      if (TA == 0u) coopMatLoadTensorNV(ma, a, ao, sliceTensorLayoutNV(la, m0, BM, kk, BK));
      else coopMatLoadTensorNV(ma, a, ao, sliceTensorLayoutNV(la, kk, BK, m0, BM), tr);
      if (TB != 0u) coopMatLoadTensorNV(mb, b, bo, sliceTensorLayoutNV(lb, n0, BN, kk, BK), tr);
      else coopMatLoadTensorNV(mb, b, bo, sliceTensorLayoutNV(lb, kk, BK, n0, BN));
      acc = coopMatMulAdd(ma, mb, acc);
    }
  } else {
    for (; kk < kend; kk += BK) {
      if (TA == 0u) coopMatLoadTensorNV(ma, a, aoff, sliceTensorLayoutNV(lac, m0, BM, kk, BK));
      else coopMatLoadTensorNV(ma, a, aoff, sliceTensorLayoutNV(lac, kk, BK, m0, BM), tr);
      if (TB != 0u) coopMatLoadTensorNV(mb, b, boff, sliceTensorLayoutNV(lbc, n0, BN, kk, BK), tr);
      else coopMatLoadTensorNV(mb, b, boff, sliceTensorLayoutNV(lbc, kk, BK, n0, BN));
      acc = coopMatMulAdd(ma, mb, acc);
    }
  }
  if (BIAS == 1u && SPLIT == 0u) coopMatPerElementNV(acc, acc, add_bias, n0);
  if (BIAS == 2u && SPLIT == 0u) coopMatPerElementNV(acc, acc, add_bias_row, m0);
  uint ybase = pc.yoff + (SPLIT != 0u ? z * M * N : BATCH != 0u ? z * pc.ybat : 0u);
  // A whole tile with 16-byte aligned rows is stored unclamped, the alignment spelled out as for
  // the loads.
  const uint yal = YDT == 0u || SPLIT != 0u ? 3u : 7u;
  const bool whole = FSTORE != 0u && m0 + BM <= M && n0 + BN <= N && (N & yal) == 0u && (ybase & yal) == 0u;
  tensorLayoutNV<2> lyu = createTensorLayoutNV(2);
  lyu = setTensorLayoutDimensionNV(lyu, M, N);
  lyu = setTensorLayoutStrideNV(lyu, N & ~yal, 1);
  // YFOLD: the images first..last that the tile's columns reach; image i's part goes through
  // lf ([M, P] at y + i*M*P) sliced at (m0, n0 - i*P): element (m, j) lands at y[i, m, j - i*P],
  // the columns of other images fall outside [0, P) and are discarded (stores) or read as zero.
  const uint ffirst = YFOLD != 0u ? n0 / YFOLD : 0u, flast = YFOLD != 0u ? (min(n0 + BN, N) - 1u) / YFOLD : 0u;
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lf = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lf = setTensorLayoutDimensionNV(lf, M, YFOLD);
  lf = setTensorLayoutStrideNV(lf, YFOLD, 1);
  if (SPLIT == 0u && RES != 0u && RESL != 0u && YFOLD != 0u) {
    // r's tile, one load per image (zeros outside its columns), each added in f32
    for (uint i = ffirst; i <= flast; ++i) {
      coopmat<T, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> ri;
      coopMatLoadTensorNV(ri, res, pc.roff + i * M * YFOLD, sliceTensorLayoutNV(lf, m0, BM, n0 - i * YFOLD, BN));
      acc += coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(ri);
    }
  }
  if (SPLIT == 0u && RES != 0u && RESL != 0u && YFOLD == 0u) {
    // r's tile as one matrix (16 bytes a load where aligned), added in f32 as the per-element
    // epilogue would
    const uint rb = pc.roff + (BATCH != 0u ? z * pc.ybat : 0u);
    coopmat<T, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> rm;
    if (m0 + BM <= M && n0 + BN <= N && (N & 7u) == 0u && (rb & 7u) == 0u) {
      tensorLayoutNV<2> lr = createTensorLayoutNV(2);
      lr = setTensorLayoutDimensionNV(lr, M, N);
      lr = setTensorLayoutStrideNV(lr, N & ~7u, 1);
      coopMatLoadTensorNV(rm, res, rb & ~7u, sliceTensorLayoutNV(lr, m0, BM, n0, BN));
    } else {
      coopMatLoadTensorNV(rm, res, rb, sliceTensorLayoutNV(ly, m0, BM, n0, BN));
    }
    acc += coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(rm);
  }
  if (SPLIT == 0u && ((RES != 0u && RESL == 0u) || (ACT != 0u && ACTS == 0u))) {
    g_m0 = m0;
    g_n0 = n0;
    g_rbase = pc.roff + (BATCH != 0u ? z * pc.ybat : 0u);
    coopMatPerElementNV(acc, acc, epilogue);
  }
  if (YFOLD != 0u && SPLIT == 0u) {
#ifdef RLX_BF16
    if (YDT != 0u) coopMatPerElementNV(acc, acc, round_bf16);
#endif
    coopmat<T, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> h =
        coopmat<T, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
    for (uint i = ffirst; i <= flast; ++i) {
      const uint fo = ybase + i * M * YFOLD;
      if (YDT == 0u) coopMatStoreTensorNV(acc, y, fo, sliceTensorLayoutNV(lf, m0, BM, n0 - i * YFOLD, BN));
      else coopMatStoreTensorNV(h, yt, fo, sliceTensorLayoutNV(lf, m0, BM, n0 - i * YFOLD, BN));
    }
  } else if (YDT == 0u || SPLIT != 0u) {
    if (whole) coopMatStoreTensorNV(acc, y, ybase & ~yal, sliceTensorLayoutNV(lyu, m0, BM, n0, BN));
    else coopMatStoreTensorNV(acc, y, ybase, sliceTensorLayoutNV(ly, m0, BM, n0, BN));
  } else {
#ifdef RLX_BF16
    coopMatPerElementNV(acc, acc, round_bf16);
#endif
    coopmat<T, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> h =
        coopmat<T, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
    if (ACTS == 2u && ACT != 0u) {
      // The rounded tile to y, then read back by runs of 8 values of one row and written over.
      if (whole) coopMatStoreTensorNV(h, yc, ybase & ~yal, sliceTensorLayoutNV(lyu, m0, BM, n0, BN));
      else coopMatStoreTensorNV(h, yc, ybase, sliceTensorLayoutNV(ly, m0, BM, n0, BN));
      memoryBarrierBuffer();
      barrier();
      const uint VR = BN / 8u;
      for (uint v = gl_LocalInvocationID.x; v < BM * VR; v += WG) {
        const uint r = v / VR, c = (v - r * VR) * 8u;
        const uint gm = m0 + r, gn = n0 + c;
        if (gm >= M || gn >= N) continue;
        const uint yi = ybase + gm * N + gn;
        if (whole) {
          const uvec4 w = yc8[yi >> 3];
          yc8[yi >> 3] = uvec4(act2w(w.x), act2w(w.y), act2w(w.z), act2w(w.w));
        } else {
          [[unroll]] for (uint j = 0u; j < 8u; ++j)
            if (gn + j < N) yc16[yi + j] = uint16_t(rlx_to16(YDT, act(rlx_from16(YDT, uint(yc16[yi + j])))));
        }
      }
      return;
    }
    if (ACTS == 1u && ACT != 0u) {
      // The rounded tile through shared memory; each invocation then takes runs of 8 values of
      // one row: widened exactly, ACT in f32, rounded once (the unary kernel's arithmetic).
      coopMatStore(h, stile, 0u, BN, gl_CooperativeMatrixLayoutRowMajor);
      barrier();
      const uint VR = BN / 8u;
      const bool vec = whole && (N & 7u) == 0u && (ybase & 7u) == 0u;
      for (uint v = gl_LocalInvocationID.x; v < BM * VR; v += WG) {
        const uint r = v / VR, c = (v - r * VR) * 8u, s0 = r * BN + c;
        const uint gm = m0 + r, gn = n0 + c;
        if (gm >= M || gn >= N) continue;
        T e[8];
        [[unroll]] for (uint j = 0u; j < 8u; ++j) e[j] = stile[s0 + j];
        const uint yi = ybase + gm * N + gn;
        if (vec) {
          y8[yi >> 3] = uvec4(act2(e[0], e[1]), act2(e[2], e[3]), act2(e[4], e[5]), act2(e[6], e[7]));
        } else {
          [[unroll]] for (uint j = 0u; j < 8u; ++j)
            if (gn + j < N) y16[yi + j] = uint16_t(rlx_to16(YDT, act(float(e[j]))));
        }
      }
      return;
    }
    if (whole) coopMatStoreTensorNV(h, yt, ybase & ~yal, sliceTensorLayoutNV(lyu, m0, BM, n0, BN));
    else coopMatStoreTensorNV(h, yt, ybase, sliceTensorLayoutNV(ly, m0, BM, n0, BN));
  }
}
