#version 450
// Register-blocked matrix product y = op(a) . op(b) (+ bias) for large tiles:
// shared-memory tiles of BM x BK and BK x BN held as vec4 rows, double-buffered
// (the next tile's global loads are in flight while the current one is
// multiplied: one barrier per BK step); each invocation computes TM x TN outputs
// in TM/4 x TN/4 blocks of 4 x 4, spaced so that shared reads are whole vec4s.
// Global loads are vec4 along the operand's contiguous dimension when VEC = 1
// (the host checked that offsets and strides are multiples of 4), else scalar.
// Same bindings and push constants as matmul.comp, plus kchunk: with SPLIT = 1
// (split-K, no batch), work group z multiplies K range [z*kchunk, (z+1)*kchunk)
// and writes its partial product to y + z*M*N (no bias); matmul_splitk sums them.
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_HALF  // the ".h16" variant: f16/bf16 operands in 2-byte storage, widened to f32 on load
#extension GL_EXT_shader_16bit_storage : require
// The conversions make the loop bodies larger: unrolling is forced so that the register arrays
// (acc, ra, rb) are never indexed dynamically (which would move them to memory).
#extension GL_EXT_control_flow_attributes : require
#define UNROLL [[unroll]]
#else
#define UNROLL
#endif
layout(local_size_x = 256, local_size_x_id = 10) in;
layout(constant_id = 0) const uint BM = 128;
layout(constant_id = 1) const uint BN = 128;
layout(constant_id = 2) const uint BK = 8;
layout(constant_id = 3) const uint TM = 8;  // 4 or 8
layout(constant_id = 4) const uint TN = 8;  // 4 or 8
layout(constant_id = 5) const uint TA = 0;
layout(constant_id = 6) const uint TB = 0;
layout(constant_id = 7) const uint BIAS = 0;
layout(constant_id = 8) const uint NB = 0;  // collapsed batch rank, 0..3
layout(constant_id = 9) const uint VEC = 0;
layout(constant_id = 11) const uint SPLIT = 0;
layout(constant_id = 12) const uint DB = 1;  // 1: double-buffered tiles; 0: one buffer, two barriers per step
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer A { float a[]; };
layout(std430, binding = 0) restrict readonly buffer A4 { vec4 a4[]; };
layout(std430, binding = 1) restrict readonly buffer B { float b[]; };
layout(std430, binding = 1) restrict readonly buffer B4 { vec4 b4[]; };
layout(std430, binding = 2) restrict readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) restrict writeonly buffer Y { float y[]; };
layout(std430, binding = 3) restrict writeonly buffer Y4 { vec4 y4[]; };
#ifdef RLX_HALF
// Storage of each operand: 0 f32, 1 f16, 2 bf16 (products still accumulate in f32; the
// result is rounded once to y's dtype). Vector loads of 2-byte operands read 4 elements as a uvec2.
layout(constant_id = 13) const uint ADT = 0;
layout(constant_id = 14) const uint BDT = 0;
layout(constant_id = 15) const uint BIASDT = 0;
layout(constant_id = 16) const uint YDT = 0;
layout(std430, binding = 0) restrict readonly buffer A16 { uint16_t a16[]; };
layout(std430, binding = 0) restrict readonly buffer A2 { uvec2 a2[]; };
layout(std430, binding = 1) restrict readonly buffer B16 { uint16_t b16[]; };
layout(std430, binding = 1) restrict readonly buffer B2 { uvec2 b2[]; };
layout(std430, binding = 2) restrict readonly buffer Bias16 { uint16_t bias16[]; };
layout(std430, binding = 3) restrict writeonly buffer Y16 { uint16_t y16[]; };
layout(std430, binding = 3) restrict writeonly buffer Y2 { uvec2 y2[]; };
vec4 unpack4(uint kind, uvec2 w) {
  return vec4(rlx_from16(kind, w.x & 0xffffu), rlx_from16(kind, w.x >> 16), rlx_from16(kind, w.y & 0xffffu),
              rlx_from16(kind, w.y >> 16));
}
float ld(bool isa, uint i) {
  uint k = isa ? ADT : BDT;
  if (k != 0u) return rlx_from16(k, isa ? uint(a16[i]) : uint(b16[i]));
  return isa ? a[i] : b[i];
}
vec4 ld4(bool isa, uint i) {  // i % 4 == 0
  uint k = isa ? ADT : BDT;
  if (k != 0u) return unpack4(k, isa ? a2[i / 4u] : b2[i / 4u]);
  return isa ? a4[i / 4u] : b4[i / 4u];
}
float ld_bias(uint i) { return BIASDT != 0u ? rlx_from16(BIASDT, uint(bias16[i])) : bias[i]; }
void st(uint i, float v) {
  if (YDT != 0u) y16[i] = uint16_t(rlx_to16(YDT, v));
  else y[i] = v;
}
void st4(uint i, vec4 v) {  // i % 4 == 0
  if (YDT != 0u)
    y2[i / 4u] = uvec2(rlx_to16(YDT, v.x) | (rlx_to16(YDT, v.y) << 16), rlx_to16(YDT, v.z) | (rlx_to16(YDT, v.w) << 16));
  else
    y4[i / 4u] = v;
}
#else
float ld(bool isa, uint i) { return isa ? a[i] : b[i]; }
vec4 ld4(bool isa, uint i) { return isa ? a4[i / 4u] : b4[i / 4u]; }
float ld_bias(uint i) { return bias[i]; }
void st(uint i, float v) { y[i] = v; }
void st4(uint i, vec4 v) { y4[i / 4u] = v; }
#endif
layout(push_constant) uniform PC {
  uint m, n, k, aoff, boff, biasoff, yoff, zbase;
  uint bd[3], as[3], bs[3];
  uint kchunk;
} pc;

const uint WG = (BM / TM) * (BN / TN);
const uint TX = BN / TN, TY = BM / TM;  // invocations along n and m
const uint AV = BM * BK / 4, BV = BK * BN / 4;  // vec4s per tile
const uint LA = (AV + WG - 1) / WG, LB = (BV + WG - 1) / WG;
shared vec4 As[2 * BK * (BM / 4)];  // [buf][k][m/4]
shared vec4 Bs[2 * BK * (BN / 4)];  // [buf][k][n/4]

uint M, N, K, abase, bbase, m0, n0, kend;

// 4 consecutive elements of a row-contiguous operand, zero outside [0, rows) x [0, cols).
vec4 load4(bool isa, uint base, uint r, uint c, uint rows, uint cols, uint lda) {
  if (r >= rows) return vec4(0.0);
  if (VEC != 0u && c + 3u < cols) return ld4(isa, base + r * lda + c);
  vec4 v = vec4(0.0);
  UNROLL for (uint i = 0u; i < 4u; ++i)
    if (c + i < cols) v[i] = ld(isa, base + r * lda + c + i);
  return v;
}

// Global loads of the tiles at k0 into registers.
void load_tiles(uint k0, inout vec4 ra[LA], inout vec4 rb[LB]) {
  uint tid = gl_LocalInvocationID.x;
  UNROLL for (uint l = 0u; l < LA; ++l) {
    uint e = tid + l * WG;
    if (e >= AV) break;
    if (TA == 0u) {  // [M, K]: vec4 along k
      uint r = e / (BK / 4u), kq = e % (BK / 4u);
      ra[l] = load4(true, abase, m0 + r, k0 + kq * 4u, M, kend, K);
    } else {  // [K, M]: vec4 along m
      uint kk = e / (BM / 4u), mq = e % (BM / 4u);
      ra[l] = load4(true, abase, k0 + kk < kend ? k0 + kk : ~0u, m0 + mq * 4u, ~0u - 1u, M, M);
    }
  }
  UNROLL for (uint l = 0u; l < LB; ++l) {
    uint e = tid + l * WG;
    if (e >= BV) break;
    if (TB == 0u) {  // [K, N]: vec4 along n
      uint kk = e / (BN / 4u), nq = e % (BN / 4u);
      rb[l] = load4(false, bbase, k0 + kk < kend ? k0 + kk : ~0u, n0 + nq * 4u, ~0u - 1u, N, N);
    } else {  // [N, K]: vec4 along k
      uint r = e / (BK / 4u), kq = e % (BK / 4u);
      rb[l] = load4(false, bbase, n0 + r, k0 + kq * 4u, N, kend, K);
    }
  }
}

void store_tiles(uint buf, vec4 ra[LA], vec4 rb[LB]) {
  uint tid = gl_LocalInvocationID.x;
  uint abuf = buf * BK * (BM / 4u), bbuf = buf * BK * (BN / 4u);
  UNROLL for (uint l = 0u; l < LA; ++l) {
    uint e = tid + l * WG;
    if (e >= AV) break;
    if (TA == 0u) {
      uint r = e / (BK / 4u), kq = e % (BK / 4u);
      UNROLL for (uint i = 0u; i < 4u; ++i) As[abuf + (kq * 4u + i) * (BM / 4u) + r / 4u][r % 4u] = ra[l][i];
    } else {
      As[abuf + e] = ra[l];
    }
  }
  UNROLL for (uint l = 0u; l < LB; ++l) {
    uint e = tid + l * WG;
    if (e >= BV) break;
    if (TB == 0u) {
      Bs[bbuf + e] = rb[l];
    } else {
      uint r = e / (BK / 4u), kq = e % (BK / 4u);
      UNROLL for (uint i = 0u; i < 4u; ++i) Bs[bbuf + (kq * 4u + i) * (BN / 4u) + r / 4u][r % 4u] = rb[l][i];
    }
  }
}

void main() {
  M = pc.m;
  N = pc.n;
  K = pc.k;
  uint z = gl_WorkGroupID.z + pc.zbase;
  abase = pc.aoff;
  bbase = pc.boff;
  uint kbeg = 0u;
  kend = K;
  if (SPLIT != 0u) {
    kbeg = z * pc.kchunk;
    kend = min(K, kbeg + pc.kchunk);
  } else {
    uint zr = z;
    UNROLL for (int d = int(NB) - 1; d >= 0; --d) {
      uint c = zr % pc.bd[d];
      zr /= pc.bd[d];
      abase += c * pc.as[d];
      bbase += c * pc.bs[d];
    }
  }
  uint ybase = pc.yoff + z * M * N;
  m0 = gl_WorkGroupID.y * BM;
  n0 = gl_WorkGroupID.x * BN;
  uint tid = gl_LocalInvocationID.x;
  uint tx = tid % TX, ty = tid / TX;

  vec4 acc[TM][TN / 4];
  UNROLL for (uint i = 0u; i < TM; ++i)
    UNROLL for (uint j = 0u; j < TN / 4u; ++j) acc[i][j] = vec4(0.0);

  vec4 ra[LA], rb[LB];
  uint steps = kend > kbeg ? (kend - kbeg + BK - 1u) / BK : 0u;
  if (DB == 0u) {
    for (uint s = 0u; s < steps; ++s) {
      load_tiles(kbeg + s * BK, ra, rb);
      barrier();
      store_tiles(0u, ra, rb);
      barrier();
      UNROLL for (uint kk = 0u; kk < BK; ++kk) {
        vec4 av[TM / 4], bv[TN / 4];
        UNROLL for (uint i = 0u; i < TM / 4u; ++i) av[i] = As[kk * (BM / 4u) + i * TY + ty];
        UNROLL for (uint j = 0u; j < TN / 4u; ++j) bv[j] = Bs[kk * (BN / 4u) + j * TX + tx];
        UNROLL for (uint i = 0u; i < TM / 4u; ++i)
          UNROLL for (uint ii = 0u; ii < 4u; ++ii)
            UNROLL for (uint j = 0u; j < TN / 4u; ++j) acc[i * 4u + ii][j] = fma(vec4(av[i][ii]), bv[j], acc[i * 4u + ii][j]);
      }
    }
    steps = 0u;
  }
  if (steps > 0u) {
    load_tiles(kbeg, ra, rb);
    store_tiles(0u, ra, rb);
  }
  barrier();
  for (uint s = 0u; s < steps; ++s) {
    uint cur = s & 1u;
    if (s + 1u < steps) load_tiles(kbeg + (s + 1u) * BK, ra, rb);
    uint abuf = cur * BK * (BM / 4u), bbuf = cur * BK * (BN / 4u);
    UNROLL for (uint kk = 0u; kk < BK; ++kk) {
      vec4 av[TM / 4], bv[TN / 4];
      UNROLL for (uint i = 0u; i < TM / 4u; ++i) av[i] = As[abuf + kk * (BM / 4u) + i * TY + ty];
      UNROLL for (uint j = 0u; j < TN / 4u; ++j) bv[j] = Bs[bbuf + kk * (BN / 4u) + j * TX + tx];
      UNROLL for (uint i = 0u; i < TM / 4u; ++i)
        UNROLL for (uint ii = 0u; ii < 4u; ++ii)
          UNROLL for (uint j = 0u; j < TN / 4u; ++j) acc[i * 4u + ii][j] = fma(vec4(av[i][ii]), bv[j], acc[i * 4u + ii][j]);
    }
    if (s + 1u < steps) store_tiles(cur ^ 1u, ra, rb);
    barrier();
  }

  bool vec_out = VEC != 0u && (N % 4u) == 0u;
  UNROLL for (uint i = 0u; i < TM / 4u; ++i)
    UNROLL for (uint ii = 0u; ii < 4u; ++ii) {
      uint gm = m0 + (i * TY + ty) * 4u + ii;
      if (gm >= M) continue;
      UNROLL for (uint j = 0u; j < TN / 4u; ++j) {
        uint gn = n0 + (j * TX + tx) * 4u;
        if (gn >= N) continue;
        vec4 v = acc[i * 4u + ii][j];
        if (BIAS != 0u && SPLIT == 0u)
          UNROLL for (uint c = 0u; c < 4u; ++c) v[c] += gn + c < N ? ld_bias(pc.biasoff + gn + c) : 0.0;
        if (vec_out && gn + 3u < N) {
          st4(ybase + gm * N + gn, v);
        } else {
          UNROLL for (uint c = 0u; c < 4u; ++c)
            if (gn + c < N) st(ybase + gm * N + gn + c, v[c]);
        }
      }
    }
}
