#version 450
// Merges the key splits of a split attention (attention.comp with split): per
// output row, M = max_s m_s, L = sum_s l_s e^(m_s - M), O = sum_s O_s e^(m_s - M) / L.
// Rows where every key was hidden (M = -inf) give zeros.
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_HALF
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x = 256) in;
#include "common.glsl"

layout(std430, binding = 0) restrict readonly buffer P { float part[]; };  // [rows][nsplit][dv + 2]
layout(std430, binding = 1) restrict writeonly buffer O { float o[]; };
layout(constant_id = 0) const uint ODT = 0;  // o's storage (".h16" variant): 0 f32, 1 f16, 2 bf16
#ifdef RLX_HALF
layout(std430, binding = 1) restrict writeonly buffer O16 { uint16_t o16[]; };
#endif
void st_o(uint i, float val) RLX_ST(ODT, o, o16, i, val)
layout(push_constant) uniform PC {
  uint n, dv, nsplit, poff, ooff;
} pc;

void main() {
  uint i = rlx_global_index();
  if (i >= pc.n) return;
  uint row = i / pc.dv, col = i % pc.dv, stride = pc.dv + 2u;
  uint base = pc.poff + row * pc.nsplit * stride;
  float m = -rlx_inf();
  for (uint s = 0u; s < pc.nsplit; ++s) m = max(m, part[base + s * stride + pc.dv]);
  float l = 0.0, acc = 0.0;
  if (m != -rlx_inf()) {
    for (uint s = 0u; s < pc.nsplit; ++s) {
      float ms = part[base + s * stride + pc.dv];
      float w = ms == -rlx_inf() ? 0.0 : exp(ms - m);
      l += w * part[base + s * stride + pc.dv + 1u];
      acc += w * part[base + s * stride + col];
    }
  }
  st_o(pc.ooff + i, l > 0.0 ? acc / l : 0.0);
}
