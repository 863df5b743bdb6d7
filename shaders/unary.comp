#version 450
// y = op(x) over a strided iteration space of up to 8 dims: elementwise unary
// ops, copies (reshape, transpose, broadcast_to, narrow, concat pieces) and cast.
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_HALF  // the ".h16" variant: f16/bf16 operands in 2-byte storage
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint RANK = 1;
layout(constant_id = 1) const uint OP = 255;   // uint(EwOp); 255 = copy
layout(constant_id = 2) const uint ROUND = 0;  // cast rounding (rlx_round)
layout(constant_id = 3) const uint EPT = 8;    // elements per invocation, gl_WorkGroupSize.x apart
#include "common.glsl"
#include "ew_ops.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer Y { float y[]; };
// Storage kinds (common.glsl): 0 f32, 1 f16, 2 bf16 (".h16" variant only), 3 i8, 4 u8 (bytes,
// read through words, written with RLX_STORE8).
layout(constant_id = 4) const uint XDT = 0;
layout(constant_id = 5) const uint YDT = 0;
layout(std430, binding = 0) restrict readonly buffer X8 { uint x8[]; };
layout(std430, binding = 1) buffer Y8 { uint y8[]; };
#ifdef RLX_HALF
layout(std430, binding = 0) restrict readonly buffer X16 { uint16_t x16[]; };
layout(std430, binding = 1) restrict writeonly buffer Y16 { uint16_t y16[]; };
#endif
float load_x(uint i) {
  if (XDT >= 3u) return rlx_b2f(XDT, x8[i >> 2], i);
#ifdef RLX_HALF
  if (XDT != 0u) return rlx_from16(XDT, uint(x16[i]));
#endif
  return x[i];
}
void store_y(uint i, float v) {
  if (YDT >= 3u) {
    RLX_STORE8(y8, i, v);
    return;
  }
#ifdef RLX_HALF
  if (YDT != 0u) {
    y16[i] = uint16_t(rlx_to16(YDT, v));
    return;
  }
#endif
  y[i] = v;
}
layout(push_constant) uniform PC {
  uint n, xoff, yoff, pad;
  uint dims[8], xs[8], ys[8];  // iteration shape; element strides of x and y
} pc;

void main() {
  uint base = rlx_group_index() * gl_WorkGroupSize.x * EPT + gl_LocalInvocationID.x;
  uint xi[EPT], yi[EPT];
  float v[EPT];
  // All loads first, then all stores: keeps EPT loads in flight per invocation.
  for (uint e = 0u; e < EPT; ++e) {
    uint i = base + e * gl_WorkGroupSize.x;
    xi[e] = pc.xoff;
    yi[e] = pc.yoff;
    if (RANK == 1) {
      xi[e] += i * pc.xs[0];
      yi[e] += i * pc.ys[0];
    } else {
      uint r = i;
      for (int d = int(RANK) - 1; d >= 0; --d) {
        uint c = r % pc.dims[d];
        r /= pc.dims[d];
        xi[e] += c * pc.xs[d];
        yi[e] += c * pc.ys[d];
      }
    }
    v[e] = i < pc.n ? load_x(xi[e]) : 0.0;
  }
  for (uint e = 0u; e < EPT; ++e) {
    if (base + e * gl_WorkGroupSize.x >= pc.n) break;
    float r = v[e];
    if (OP != 255u) r = rlx_ew_unary(OP, r);
    store_y(yi[e], rlx_round(r, ROUND));
  }
}
