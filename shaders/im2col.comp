#version 450
// im2col for a 2-D convolution as a matrix product (kernels_conv_gemm.cpp): x [N, C, H, W]
// becomes col [R, K], R = N * OH * OW rows (n, oh, ow), K = C * kH * kW columns (c, kh, kw),
// the order of a weight [M, C, kH, kW] viewed as [M, K]; taps in the padding read 0. A 32x32
// tile goes through shared memory: read with consecutive invocations on consecutive output
// positions (neighbouring x elements), written along col's rows, so both sides coalesce.
// KP = 1 writes col as [N, K, OH*OW] instead (per image, the product's B operand [K, P]; the
// tensor-core route of kernels_conv_gemm.cpp): consecutive invocations then write consecutive
// output positions directly, without the shared tile. KP = 2 writes col as [K, N*OH*OW] (the
// batch folded into the columns: kernels_conv_fold.cpp's one product), rows r in the same order.
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_HALF  // the ".h16" variant: f16/bf16 x and col in 2-byte storage
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x = 32, local_size_y = 8) in;
layout(constant_id = 0) const uint DT = 0;  // storage kind of x and col (common.glsl): 0 f32, 1 f16, 2 bf16
layout(constant_id = 1) const uint KP = 0;  // 1: col is [N, K, OH*OW]; 2: [K, R]
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer Y { float y[]; };
#ifdef RLX_HALF
layout(std430, binding = 0) restrict readonly buffer X16 { uint16_t x16[]; };
layout(std430, binding = 1) restrict writeonly buffer Y16 { uint16_t y16[]; };
#endif
layout(push_constant) uniform PC {
  uint R, K, C, H, W, OH, OW, kH, kW;
  int sH, sW, dH, dW, pt, pl;
  uint xoff, yoff;
} pc;

shared float tile[32][33];  // [k][r], +1: no bank conflicts on the transposed read

float load_x(uint i) {
#ifdef RLX_HALF
  if (DT != 0u) return rlx_from16(DT, uint(x16[i]));
#endif
  return x[i];
}
void store_y(uint i, float v) {
#ifdef RLX_HALF
  if (DT != 0u) {
    y16[i] = uint16_t(rlx_to16(DT, v));
    return;
  }
#endif
  y[i] = v;
}

void main() {
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  uint k0 = gl_WorkGroupID.x * 32u, r0 = gl_WorkGroupID.y * 32u;
  uint r = r0 + tx;
  uint ow = r % pc.OW, t = r / pc.OW, oh = t % pc.OH, n = t / pc.OH;
  uint kk = pc.kH * pc.kW;
  for (uint j = 0u; j < 32u; j += 8u) {
    uint k = k0 + ty + j;
    float v = 0.0;
    if (r < pc.R && k < pc.K) {
      uint c = k / kk, q = k % kk, kh = q / pc.kW, kw = q % pc.kW;
      int ih = int(oh) * pc.sH - pc.pt + int(kh) * pc.dH, iw = int(ow) * pc.sW - pc.pl + int(kw) * pc.dW;
      if (ih >= 0 && ih < int(pc.H) && iw >= 0 && iw < int(pc.W))
        v = load_x(pc.xoff + ((n * pc.C + c) * pc.H + uint(ih)) * pc.W + uint(iw));
    }
    if (KP == 2u) {
      if (r < pc.R && k < pc.K) store_y(pc.yoff + k * pc.R + r, v);
    } else if (KP != 0u) {
      if (r < pc.R && k < pc.K) store_y(pc.yoff + (n * pc.K + k) * (pc.OH * pc.OW) + oh * pc.OW + ow, v);
    } else {
      tile[ty + j][tx] = v;
    }
  }
  if (KP != 0u) return;
  barrier();
  for (uint j = 0u; j < 32u; j += 8u) {
    uint rr = r0 + ty + j, k = k0 + tx;
    if (rr < pc.R && k < pc.K) store_y(pc.yoff + rr * pc.K + k, tile[tx][ty + j]);
  }
}
