#version 450
// pad: y[o] = x[src(o)] per axis src = o - begin, outside [0, n): MODE 0 the constant value,
// 1 edge (clamped), 2 reflect (one reflection: pads are at most n - 1). Negative begins crop.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint RANK = 1;
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const uint XDT = 0;  // storage kinds (common.glsl): 0 f32, 3 i8, 4 u8
layout(constant_id = 3) const uint YDT = 0;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer Y { float y[]; };
layout(std430, binding = 0) restrict readonly buffer X8 { uint x8[]; };
layout(std430, binding = 1) buffer Y8 { uint y8[]; };
float ld_x(uint i) { return XDT >= 3u ? rlx_b2f(XDT, x8[i >> 2], i) : x[i]; }
layout(push_constant) uniform PC {
  uint n, xoff, yoff, value;
  uint odims[8], idims[8], begin[8];
} pc;

void main() {
  uint i = rlx_global_index();
  if (i >= pc.n) return;
  uint r = i, off = 0u, stride = 1u;
  bool outside = false;
  for (int d = int(RANK) - 1; d >= 0; --d) {
    int o = int(r % pc.odims[d]);
    r /= pc.odims[d];
    int n = int(pc.idims[d]);
    int s = o - int(pc.begin[d]);
    if (s < 0 || s >= n) {
      if (MODE == 1u) s = clamp(s, 0, n - 1);
      else if (MODE == 2u) s = s < 0 ? -s : 2 * (n - 1) - s;
      else outside = true;
    }
    off += uint(max(s, 0)) * stride;
    stride *= pc.idims[d];
  }
  float v = outside ? uintBitsToFloat(pc.value) : ld_x(pc.xoff + off);
  if (YDT >= 3u) {
    RLX_STORE8(y8, pc.yoff + i, v);
  } else {
    y[pc.yoff + i] = v;
  }
}
