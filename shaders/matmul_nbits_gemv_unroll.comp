#version 450
// matmul_nbits_gemv.comp with [[unroll]] on its constant-trip loops (see matmul_nbits_gemv.glsl).
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#extension GL_EXT_control_flow_attributes : require
#define UNROLL [[unroll]]
#include "matmul_nbits_gemv.glsl"
