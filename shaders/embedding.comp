#version 450
// y[r, :] = table[indices[r], :]. An index outside [0, V) writes zeros and
// records (kernel id + 1, index) in the error buffer, reported by flush().
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer T { float table[]; };
layout(std430, binding = 1) restrict readonly buffer I { float idx[]; };
layout(std430, binding = 2) buffer E { uint err[]; };
layout(std430, binding = 3) restrict writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
  uint n, d, vocab, toff, ioff, yoff, kernel_id;
} pc;

void main() {
  uint i = rlx_global_index();
  if (i >= pc.n) return;
  uint r = i / pc.d, c = i % pc.d;
  float fi = idx[pc.ioff + r];
  if (!(fi >= 0.0 && fi < float(pc.vocab))) {  // also catches NaN
    if (c == 0u && atomicCompSwap(err[0], 0u, pc.kernel_id + 1u) == 0u) {
      err[1] = floatBitsToUint(fi);
      err[2] = pc.vocab;
    }
    y[pc.yoff + i] = 0.0;
    return;
  }
  y[pc.yoff + i] = table[pc.toff + uint(fi) * pc.d + c];
}
