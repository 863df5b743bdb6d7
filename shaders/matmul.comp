#version 450
// Tiled matrix product y[z] = op(a[z]) . op(b[z]) (+ bias), shared-memory tiles
// of BM x BK and BK x BN, each invocation computing TM x TN outputs held in
// registers (rows ty + i*(BM/TM), columns tx + j*(BN/TN): conflict-free shared
// reads, coalesced stores). a is [M, K] ([K, M] with TA), b is [K, N] ([N, K]
// with TB: linear's weight layout). Batch z (grid z + zbase) walks up to 3
// collapsed batch dims with per-operand strides (0 = broadcast); y is contiguous.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256, local_size_x_id = 10) in;
layout(constant_id = 0) const uint BM = 64;
layout(constant_id = 1) const uint BN = 64;
layout(constant_id = 2) const uint BK = 16;
layout(constant_id = 3) const uint TM = 4;
layout(constant_id = 4) const uint TN = 4;
layout(constant_id = 5) const uint TA = 0;
layout(constant_id = 6) const uint TB = 0;
layout(constant_id = 7) const uint BIAS = 0;
layout(constant_id = 8) const uint NB = 0;  // collapsed batch rank, 0..3
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer A { float a[]; };
layout(std430, binding = 1) restrict readonly buffer B { float b[]; };
layout(std430, binding = 2) restrict readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) restrict writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
  uint m, n, k, aoff, boff, biasoff, yoff, zbase;
  uint bd[3], as[3], bs[3];
} pc;

const uint PAD = 1;
const uint WG = (BM / TM) * (BN / TN);
shared float As[BK * (BM + PAD)];
shared float Bs[BK * (BN + PAD)];

void main() {
  uint M = pc.m, N = pc.n, K = pc.k;
  uint z = gl_WorkGroupID.z + pc.zbase;
  uint abase = pc.aoff, bbase = pc.boff;
  uint zr = z;
  for (int d = int(NB) - 1; d >= 0; --d) {
    uint c = zr % pc.bd[d];
    zr /= pc.bd[d];
    abase += c * pc.as[d];
    bbase += c * pc.bs[d];
  }
  uint ybase = pc.yoff + z * M * N;
  uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
  uint tid = gl_LocalInvocationID.x;
  uint tx = tid % (BN / TN), ty = tid / (BN / TN);

  float acc[TM * TN];
  for (uint i = 0u; i < TM * TN; ++i) acc[i] = 0.0;

  for (uint k0 = 0u; k0 < K; k0 += BK) {
    for (uint e = tid; e < BM * BK; e += WG) {
      uint mm, kk;
      if (TA == 0u) { mm = e / BK; kk = e % BK; }  // k fastest: coalesced for [M, K]
      else { kk = e / BM; mm = e % BM; }           // m fastest: coalesced for [K, M]
      uint gm = m0 + mm, gk = k0 + kk;
      float v = 0.0;
      if (gm < M && gk < K) v = a[abase + (TA == 0u ? gm * K + gk : gk * M + gm)];
      As[kk * (BM + PAD) + mm] = v;
    }
    for (uint e = tid; e < BK * BN; e += WG) {
      uint nn, kk;
      if (TB == 0u) { kk = e / BN; nn = e % BN; }  // n fastest: coalesced for [K, N]
      else { nn = e / BK; kk = e % BK; }           // k fastest: coalesced for [N, K]
      uint gn = n0 + nn, gk = k0 + kk;
      float v = 0.0;
      if (gn < N && gk < K) v = b[bbase + (TB == 0u ? gk * N + gn : gn * K + gk)];
      Bs[kk * (BN + PAD) + nn] = v;
    }
    barrier();
    for (uint kk = 0u; kk < BK; ++kk) {
      float av[TM], bv[TN];
      for (uint i = 0u; i < TM; ++i) av[i] = As[kk * (BM + PAD) + ty + i * (BM / TM)];
      for (uint j = 0u; j < TN; ++j) bv[j] = Bs[kk * (BN + PAD) + tx + j * (BN / TN)];
      for (uint i = 0u; i < TM; ++i)
        for (uint j = 0u; j < TN; ++j) acc[i * TN + j] = fma(av[i], bv[j], acc[i * TN + j]);
    }
    barrier();
  }

  for (uint i = 0u; i < TM; ++i) {
    uint gm = m0 + ty + i * (BM / TM);
    if (gm >= M) continue;
    for (uint j = 0u; j < TN; ++j) {
      uint gn = n0 + tx + j * (BN / TN);
      if (gn >= N) continue;
      float v = acc[i * TN + j];
      if (BIAS != 0u) v += bias[pc.biasoff + gn];
      y[ybase + gm * N + gn] = v;
    }
  }
}
