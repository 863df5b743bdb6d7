#version 450
// MODE 0 gather: y[o, p, c] = data[o, wrap(idx[p]), c] (data as [outer, D, inner], idx flat).
// MODE 1 gather_elements: y[coords] = data[coords with coords[axis] = wrap(idx[coords])].
// Indices in [-D, D) wrap; any other index writes zero and records (kernel id + 1, index, D,
// signed range) in the error buffer, which flush() reports naming the node.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint MODE = 0;
layout(constant_id = 1) const uint RANK = 1;
layout(constant_id = 2) const uint DDT = 0;  // storage kinds (common.glsl): 0 f32, 3 i8, 4 u8
layout(constant_id = 3) const uint IDT = 0;
layout(constant_id = 4) const uint YDT = 0;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer D { float data[]; };
layout(std430, binding = 1) restrict readonly buffer I { float idx[]; };
layout(std430, binding = 2) buffer E { uint err[]; };
layout(std430, binding = 3) restrict writeonly buffer Y { float y[]; };
layout(std430, binding = 0) restrict readonly buffer D8 { uint data8[]; };
layout(std430, binding = 1) restrict readonly buffer I8 { uint idx8[]; };
layout(std430, binding = 3) buffer Y8 { uint y8[]; };
float ld_data(uint i) { return DDT >= 3u ? rlx_b2f(DDT, data8[i >> 2], i) : data[i]; }
float ld_idx(uint i) { return IDT >= 3u ? rlx_b2f(IDT, idx8[i >> 2], i) : idx[i]; }
void st_y(uint i, float v) {
  if (YDT >= 3u) {
    RLX_STORE8(y8, i, v);
  } else {
    y[i] = v;
  }
}
layout(push_constant) uniform PC {
  uint n, dlen, doff, ioff, yoff, kernel_id, nidx, inner, axis;
  uint idims[8], dstrides[8];
} pc;

void main() {
  uint i = rlx_global_index();
  if (i >= pc.n) return;
  uint p = MODE == 0u ? (i / pc.inner) % pc.nidx : i;
  float fi = ld_idx(pc.ioff + p);
  float D = float(pc.dlen);
  if (!(fi >= -D && fi < D)) {  // also catches NaN
    if (atomicCompSwap(err[0], 0u, pc.kernel_id + 1u) == 0u) {
      err[1] = floatBitsToUint(fi);
      err[2] = pc.dlen;
      err[3] = 1u;
    }
    st_y(pc.yoff + i, 0.0);
    return;
  }
  int j = int(fi);
  uint row = uint(j < 0 ? j + int(pc.dlen) : j);
  uint src;
  if (MODE == 0u) {
    uint o = i / (pc.inner * pc.nidx), c = i % pc.inner;
    src = (o * pc.dlen + row) * pc.inner + c;
  } else {
    src = 0u;
    uint r = i;
    for (int d = int(RANK) - 1; d >= 0; --d) {
      uint k = r % pc.idims[d];
      r /= pc.idims[d];
      src += (uint(d) == pc.axis ? row : k) * pc.dstrides[d];
    }
  }
  st_y(pc.yoff + i, ld_data(pc.doff + src));
}
