#version 450
// y = op(a, b) with NumPy broadcasting: a and b are read through strides
// (0 along broadcast dims) over the output shape (up to 8 dims); y is contiguous.
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_HALF  // the ".h16" variant: f16/bf16 operands in 2-byte storage
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint RANK = 1;
layout(constant_id = 1) const uint OP = 0;  // uint(EwOp)
layout(constant_id = 2) const uint EPT = 8;  // elements per invocation, gl_WorkGroupSize.x apart
#include "common.glsl"
#include "ew_ops.glsl"

layout(std430, binding = 0) restrict readonly buffer A { float a[]; };
layout(std430, binding = 1) restrict readonly buffer B { float b[]; };
layout(std430, binding = 2) restrict writeonly buffer Y { float y[]; };
#ifdef RLX_HALF
layout(constant_id = 3) const uint ADT = 0;  // storage: 0 f32, 1 f16, 2 bf16
layout(constant_id = 4) const uint BDT = 0;
layout(constant_id = 5) const uint YDT = 0;
layout(std430, binding = 0) restrict readonly buffer A16 { uint16_t a16[]; };
layout(std430, binding = 1) restrict readonly buffer B16 { uint16_t b16[]; };
layout(std430, binding = 2) restrict writeonly buffer Y16 { uint16_t y16[]; };
float load_a(uint i) { return ADT != 0u ? rlx_from16(ADT, uint(a16[i])) : a[i]; }
float load_b(uint i) { return BDT != 0u ? rlx_from16(BDT, uint(b16[i])) : b[i]; }
void store_y(uint i, float v) {
  if (YDT != 0u) y16[i] = uint16_t(rlx_to16(YDT, v));
  else y[i] = v;
}
#else
float load_a(uint i) { return a[i]; }
float load_b(uint i) { return b[i]; }
void store_y(uint i, float v) { y[i] = v; }
#endif
layout(push_constant) uniform PC {
  uint n, aoff, boff, yoff;
  uint dims[8], as[8], bs[8];
} pc;

void main() {
  uint base = rlx_group_index() * gl_WorkGroupSize.x * EPT + gl_LocalInvocationID.x;
  float va[EPT], vb[EPT];
  // All loads first, then all stores: keeps 2 * EPT loads in flight per invocation.
  for (uint e = 0u; e < EPT; ++e) {
    uint i = base + e * gl_WorkGroupSize.x;
    uint ai = pc.aoff, bi = pc.boff;
    if (RANK == 1) {
      ai += i * pc.as[0];
      bi += i * pc.bs[0];
    } else {
      uint r = i;
      for (int d = int(RANK) - 1; d >= 0; --d) {
        uint c = r % pc.dims[d];
        r /= pc.dims[d];
        ai += c * pc.as[d];
        bi += c * pc.bs[d];
      }
    }
    bool ok = i < pc.n;
    va[e] = ok ? load_a(ai) : 0.0;
    vb[e] = ok ? load_b(bi) : 0.0;
  }
  for (uint e = 0u; e < EPT; ++e) {
    uint i = base + e * gl_WorkGroupSize.x;
    if (i >= pc.n) break;
    store_y(pc.yoff + i, rlx_ew_binary(OP, va[e], vb[e]));
  }
}
