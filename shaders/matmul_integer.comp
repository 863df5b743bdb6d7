#version 450
// y[b, m, n] = sum_k (a[ab, m, k] - za) * (b[bb, k, n] - zb) in exact 32-bit integers (ONNX
// MatMulInteger). Batch dims broadcast (ab, bb from the output batch through per-dim
// strides). Zero points: ZA/ZB 0 none, 1 scalar, 2 per row of a [M] / per column of b [N],
// 3 per row [..., M, 1] / column [..., 1, N] with a's / b's batch. a, b and the zero points are
// i8/u8 bytes (*DT 3 i8, 4 u8: read through 32-bit words) or f32 values (*DT 0). The i32 result
// travels as f32: one beyond 2^24 cannot be stored exactly, so it writes 0 and reports itself
// through the error buffer (kernel id + 1, value, 2^24, kind 2), which flush() turns into an error.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint ZA = 0;
layout(constant_id = 1) const uint ZB = 0;
layout(constant_id = 2) const uint NB = 0;  // batch dims (<= 4)
layout(constant_id = 3) const uint ADT = 0;  // storage kinds (common.glsl): 0 f32, 3 i8, 4 u8
layout(constant_id = 4) const uint BDT = 0;
layout(constant_id = 5) const uint ZADT = 0;
layout(constant_id = 6) const uint ZBDT = 0;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer A { float a[]; };
layout(std430, binding = 1) restrict readonly buffer B { float b[]; };
layout(std430, binding = 2) restrict readonly buffer ZAB { float za[]; };
layout(std430, binding = 3) restrict readonly buffer ZBB { float zb[]; };
layout(std430, binding = 4) buffer E { uint err[]; };
layout(std430, binding = 5) restrict writeonly buffer Y { float y[]; };
layout(std430, binding = 0) restrict readonly buffer A8 { uint a8[]; };
layout(std430, binding = 1) restrict readonly buffer B8 { uint b8[]; };
layout(std430, binding = 2) restrict readonly buffer ZAB8 { uint za8[]; };
layout(std430, binding = 3) restrict readonly buffer ZBB8 { uint zb8[]; };
int ld_a(uint i) { return ADT >= 3u ? int(rlx_b2f(ADT, a8[i >> 2], i)) : int(a[i]); }
int ld_b(uint i) { return BDT >= 3u ? int(rlx_b2f(BDT, b8[i >> 2], i)) : int(b[i]); }
int ld_za(uint i) { return ZADT >= 3u ? int(rlx_b2f(ZADT, za8[i >> 2], i)) : int(za[i]); }
int ld_zb(uint i) { return ZBDT >= 3u ? int(rlx_b2f(ZBDT, zb8[i >> 2], i)) : int(zb[i]); }
layout(push_constant) uniform PC {
  uint n, M, N, K, aoff, boff, zaoff, zboff, yoff, kernel_id;
  uint bdims[4], astr[4], bstr[4];
} pc;

void main() {
  uint i = rlx_global_index();
  if (i >= pc.n) return;
  uint col = i % pc.N, row = (i / pc.N) % pc.M, bt = i / (pc.N * pc.M);
  uint ab = 0u, bb = 0u, r = bt;
  for (int d = int(NB) - 1; d >= 0; --d) {
    uint c = r % pc.bdims[d];
    r /= pc.bdims[d];
    ab += c * pc.astr[d];
    bb += c * pc.bstr[d];
  }
  int zav = 0, zbv = 0;
  if (ZA == 1u) zav = ld_za(pc.zaoff);
  if (ZA == 2u) zav = ld_za(pc.zaoff + row);
  if (ZA == 3u) zav = ld_za(pc.zaoff + ab * pc.M + row);
  if (ZB == 1u) zbv = ld_zb(pc.zboff);
  if (ZB == 2u) zbv = ld_zb(pc.zboff + col);
  if (ZB == 3u) zbv = ld_zb(pc.zboff + bb * pc.N + col);
  uint ai = pc.aoff + (ab * pc.M + row) * pc.K, bi = pc.boff + bb * pc.K * pc.N + col;
  int acc = 0;
  uint k = 0u;
  if (ADT >= 3u) {
    // a's row is contiguous bytes: after the bytes up to a word boundary, four per 32-bit load,
    // unpacked with bitfieldExtract (sign-extending for i8). No integer dot-product instruction:
    // Debian 12's glslang does not know GL_EXT_integer_dot_product.
    for (; k < pc.K && ((ai + k) & 3u) != 0u; ++k) acc += (ld_a(ai + k) - zav) * (ld_b(bi + k * pc.N) - zbv);
    for (; k + 4u <= pc.K; k += 4u) {
      uint w = a8[(ai + k) >> 2];
      ivec4 av = ADT == 3u ? ivec4(bitfieldExtract(int(w), 0, 8), bitfieldExtract(int(w), 8, 8),
                                   bitfieldExtract(int(w), 16, 8), bitfieldExtract(int(w), 24, 8))
                           : ivec4(w & 0xffu, (w >> 8) & 0xffu, (w >> 16) & 0xffu, w >> 24);
      ivec4 bv = ivec4(ld_b(bi + k * pc.N), ld_b(bi + (k + 1u) * pc.N), ld_b(bi + (k + 2u) * pc.N),
                       ld_b(bi + (k + 3u) * pc.N));
      ivec4 p = (av - zav) * (bv - zbv);
      acc += p.x + p.y + p.z + p.w;
    }
  }
  for (; k < pc.K; ++k) acc += (ld_a(ai + k) - zav) * (ld_b(bi + k * pc.N) - zbv);
  if (abs(acc) > 16777216) {
    if (atomicCompSwap(err[0], 0u, pc.kernel_id + 1u) == 0u) {
      err[1] = floatBitsToUint(float(acc));
      err[2] = 16777216u;
      err[3] = 2u;
    }
    y[pc.yoff + i] = 0.0;
    return;
  }
  y[pc.yoff + i] = float(acc);
}
