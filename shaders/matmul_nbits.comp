#version 450
// y[m, n] = sum_k a[m, k] * (q[n, k] - zp[n, k / BS]) * scale[n, k / BS] (ONNX Runtime's
// MatMulNBits): b is [N, k_blocks, BS * BITS / 8] u8, consecutive K values in a byte from the low
// bits up; zero points u8 packed the same way per row (HAS_ZP 0: 2^(BITS - 1)). Both stay bytes on
// the device, read through 32-bit words. One invocation per output, f32 accumulation: the general
// kernel (any bits, block size, K and row count); few rows of 4-bit weights take
// matmul_nbits_gemv.comp.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint BITS = 4;
layout(constant_id = 1) const uint HAS_ZP = 0;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer A { float a[]; };
layout(std430, binding = 1) restrict readonly buffer B { uint b8[]; };
layout(std430, binding = 2) restrict readonly buffer S { float s[]; };
layout(std430, binding = 3) restrict readonly buffer Z { uint z8[]; };
layout(std430, binding = 4) restrict writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
  uint n, N, K, BS, kb, blob, zcols, aoff, boff, soff, zoff, yoff;
} pc;

uint byte_at(uint w, uint i) { return (w >> ((i & 3u) * 8u)) & 0xffu; }

void main() {
  uint i = rlx_global_index();
  if (i >= pc.n) return;
  uint col = i % pc.N, row = i / pc.N;
  const uint per_byte = 8u / BITS, mask = (1u << BITS) - 1u;
  float acc = 0.0;
  for (uint blk = 0u; blk < pc.kb; ++blk) {
    float zp = float(1u << (BITS - 1u));
    if (HAS_ZP != 0u) {
      uint zi = pc.zoff + col * pc.zcols + blk / per_byte;
      zp = float((byte_at(z8[zi >> 2], zi) >> ((blk % per_byte) * BITS)) & mask);
    }
    float sc = s[pc.soff + col * pc.kb + blk];
    uint k0 = blk * pc.BS, k1 = min(k0 + pc.BS, pc.K);
    for (uint k = k0; k < k1; ++k) {
      uint j = k - k0, bi = pc.boff + (col * pc.kb + blk) * pc.blob + j / per_byte;
      uint q = (byte_at(b8[bi >> 2], bi) >> ((j % per_byte) * BITS)) & mask;
      acc += a[pc.aoff + row * pc.K + k] * ((float(q) - zp) * sc);
    }
  }
  y[pc.yoff + i] = acc;
}
