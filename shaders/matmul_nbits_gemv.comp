#version 450
// matmul_nbits for few rows of 4-bit weights: see matmul_nbits_gemv.glsl.
#extension GL_GOOGLE_include_directive : require
#ifdef RLX_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#define UNROLL
#include "matmul_nbits_gemv.glsl"
