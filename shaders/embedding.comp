#version 450
// y[r, :] = table[indices[r], :]. An index outside [0, V) writes zeros and
// records (kernel id + 1, index) in the error buffer, reported by flush().
// A table larger than one binding is bound in parts of its rows (kernels_split.cpp): this
// dispatch sees rows [vbase, vbase + vocab) of a table of vall rows and writes only the rows of y
// whose index falls there; the part with vbase 0 also reports bad indices. Whole: vbase 0, vall V.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer T { float table[]; };
layout(std430, binding = 1) restrict readonly buffer I { float idx[]; };
layout(std430, binding = 2) buffer E { uint err[]; };
layout(std430, binding = 3) restrict writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
  uint n, d, vocab, toff, ioff, yoff, kernel_id, vbase, vall;
} pc;

void main() {
  uint i = rlx_global_index();
  if (i >= pc.n) return;
  uint r = i / pc.d, c = i % pc.d;
  float fi = idx[pc.ioff + r];
  if (!(fi >= 0.0 && fi < float(pc.vall))) {  // also catches NaN
    if (pc.vbase != 0u) return;
    if (c == 0u && atomicCompSwap(err[0], 0u, pc.kernel_id + 1u) == 0u) {
      err[1] = floatBitsToUint(fi);
      err[2] = pc.vall;
    }
    y[pc.yoff + i] = 0.0;
    return;
  }
  uint v = uint(fi) - pc.vbase;  // wraps below vbase
  if (v >= pc.vocab) return;
  y[pc.yoff + i] = table[pc.toff + v * pc.d + c];
}
