// Work-group reductions for row kernels: every invocation of the work group
// must call them (they contain barriers) and all get the result. Built with
// RLX_SUBGROUP (subgroup arithmetic; work groups up to 1024 invocations) or
// with a shared-memory tree (a power of two <= 256 invocations).
#ifndef RLX_REDUCE_WG_GLSL
#define RLX_REDUCE_WG_GLSL

shared float rlx_wg_scratch[256];

#ifdef RLX_SUBGROUP
float rlx_wg_sum(float v) {
  v = subgroupAdd(v);
  if (subgroupElect()) rlx_wg_scratch[gl_SubgroupID] = v;
  barrier();
  float r = 0.0;
  for (uint i = 0u; i < gl_NumSubgroups; ++i) r += rlx_wg_scratch[i];
  barrier();
  return r;
}
// max ignoring NaN (callers propagate NaN separately where it matters)
float rlx_wg_max(float v) {
  v = subgroupMax(v);
  if (subgroupElect()) rlx_wg_scratch[gl_SubgroupID] = v;
  barrier();
  float r = -rlx_inf();
  for (uint i = 0u; i < gl_NumSubgroups; ++i) r = max(r, rlx_wg_scratch[i]);
  barrier();
  return r;
}
#else
float rlx_wg_sum(float v) {
  uint t = gl_LocalInvocationID.x;
  rlx_wg_scratch[t] = v;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2u; s > 0u; s >>= 1) {
    if (t < s) rlx_wg_scratch[t] += rlx_wg_scratch[t + s];
    barrier();
  }
  float r = rlx_wg_scratch[0];
  barrier();
  return r;
}
float rlx_wg_max(float v) {
  uint t = gl_LocalInvocationID.x;
  rlx_wg_scratch[t] = v;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2u; s > 0u; s >>= 1) {
    if (t < s) rlx_wg_scratch[t] = max(rlx_wg_scratch[t], rlx_wg_scratch[t + s]);
    barrier();
  }
  float r = rlx_wg_scratch[0];
  barrier();
  return r;
}
#endif

#endif
