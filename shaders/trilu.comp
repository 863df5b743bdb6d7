#version 450
// trilu over the last two axes [.., N, M]: keeps x[i, j] where j - i >= k (upper) or
// j - i <= k (lower), zero elsewhere.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer Y { float y[]; };
layout(push_constant) uniform PC {
  uint n, rows, cols, k, upper, xoff, yoff;
} pc;

void main() {
  uint t = rlx_global_index();
  if (t >= pc.n) return;
  int j = int(t % pc.cols), i = int((t / pc.cols) % pc.rows), d = j - i, k = int(pc.k);
  bool keep = pc.upper != 0u ? d >= k : d <= k;
  y[pc.yoff + t] = keep ? x[pc.xoff + t] : 0.0;
}
