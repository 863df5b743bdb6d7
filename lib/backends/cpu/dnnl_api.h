// oneDNN's C API as rlx loads it: Debian's libdnnl.so.2 opened with dlopen (no link
// dependency), its entry points looked up once, one CPU engine. One table for every kernel
// that uses oneDNN (gemm.cpp's products, dnnl_conv.cpp's convolutions), each with its own
// switch on top (RLX_GEMM_DNNL, RLX_CONV_DNNL). RLX_CPU_ISA=avx2 caps oneDNN's code generation,
// =base leaves it unloaded.
#pragma once

#include <oneapi/dnnl/dnnl.h>

#include <string>

namespace rlx::cpu {

struct DnnlApi {
  void* h = nullptr;
  dnnl_status_t (*engine_create)(dnnl_engine_t*, dnnl_engine_kind_t, size_t) = nullptr;
  dnnl_status_t (*stream_create)(dnnl_stream_t*, dnnl_engine_t, unsigned) = nullptr;
  dnnl_status_t (*stream_wait)(dnnl_stream_t) = nullptr;
  dnnl_status_t (*stream_destroy)(dnnl_stream_t) = nullptr;
  dnnl_status_t (*md_by_strides)(dnnl_memory_desc_t*, int, const dnnl_dims_t, dnnl_data_type_t, const dnnl_dims_t) = nullptr;
  dnnl_status_t (*md_by_tag)(dnnl_memory_desc_t*, int, const dnnl_dims_t, dnnl_data_type_t, dnnl_format_tag_t) = nullptr;
  dnnl_status_t (*matmul_desc_init)(dnnl_matmul_desc_t*, const dnnl_memory_desc_t*, const dnnl_memory_desc_t*,
                                    const dnnl_memory_desc_t*, const dnnl_memory_desc_t*) = nullptr;
  dnnl_status_t (*conv_desc)(dnnl_convolution_desc_t*, dnnl_prop_kind_t, dnnl_alg_kind_t, const dnnl_memory_desc_t*,
                             const dnnl_memory_desc_t*, const dnnl_memory_desc_t*, const dnnl_memory_desc_t*,
                             const dnnl_dims_t, const dnnl_dims_t, const dnnl_dims_t, const dnnl_dims_t) = nullptr;
  dnnl_status_t (*pd_create)(dnnl_primitive_desc_t*, const_dnnl_op_desc_t, const_dnnl_primitive_attr_t, dnnl_engine_t,
                             const_dnnl_primitive_desc_t) = nullptr;
  dnnl_status_t (*pd_query)(const_dnnl_primitive_desc_t, dnnl_query_t, int, void*) = nullptr;
  const dnnl_memory_desc_t* (*pd_query_md)(const_dnnl_primitive_desc_t, dnnl_query_t, int) = nullptr;
  dnnl_status_t (*pd_destroy)(dnnl_primitive_desc_t) = nullptr;
  dnnl_status_t (*prim_create)(dnnl_primitive_t*, const_dnnl_primitive_desc_t) = nullptr;
  dnnl_status_t (*prim_destroy)(dnnl_primitive_t) = nullptr;
  dnnl_status_t (*execute)(const_dnnl_primitive_t, dnnl_stream_t, int, const dnnl_exec_arg_t*) = nullptr;
  dnnl_status_t (*mem_create)(dnnl_memory_t*, const dnnl_memory_desc_t*, dnnl_engine_t, void*) = nullptr;
  dnnl_status_t (*mem_destroy)(dnnl_memory_t) = nullptr;
  dnnl_status_t (*reorder_pd)(dnnl_primitive_desc_t*, const dnnl_memory_desc_t*, dnnl_engine_t,
                              const dnnl_memory_desc_t*, dnnl_engine_t, const_dnnl_primitive_attr_t) = nullptr;
  size_t (*md_size)(const dnnl_memory_desc_t*) = nullptr;
  dnnl_status_t (*attr_create)(dnnl_primitive_attr_t*) = nullptr;
  dnnl_status_t (*attr_set_scratchpad_mode)(dnnl_primitive_attr_t, dnnl_scratchpad_mode_t) = nullptr;
  // Post-ops (a convolution's activation run inside its kernel, dnnl_conv.cpp); optional: where
  // one is missing, post_ops_ok is false and the activations run in rlx's epilogue.
  dnnl_status_t (*attr_destroy)(dnnl_primitive_attr_t) = nullptr;
  dnnl_status_t (*attr_set_post_ops)(dnnl_primitive_attr_t, const_dnnl_post_ops_t) = nullptr;
  dnnl_status_t (*post_ops_create)(dnnl_post_ops_t*) = nullptr;
  dnnl_status_t (*post_ops_destroy)(dnnl_post_ops_t) = nullptr;
  dnnl_status_t (*post_ops_append_eltwise)(dnnl_post_ops_t, float, dnnl_alg_kind_t, float, float) = nullptr;
  bool post_ops_ok = false;
  // Optional: memory objects reused with a new pointer (dnnl_conv.cpp); null: made per call.
  dnnl_status_t (*mem_set_handle)(dnnl_memory_t, void*) = nullptr;
  // Attributes for every primitive rlx makes: the scratchpad is the caller's (user mode). rlx
  // creates primitives on one thread and runs them on its pool's, often one primitive on
  // several threads at once; oneDNN's own (library) scratchpad is shared by all primitives and
  // must not migrate between threads, which gave wrong results on 2 threads.
  dnnl_primitive_attr_t user_scratchpad = nullptr;
  void (*omp_threads)(int) = nullptr;
  dnnl_engine_t engine = nullptr;
  bool ok = false;
  std::string why;  // when not ok: why oneDNN is not used (for `rlx devices`)
};

// The scratchpad a primitive needs (queried from its descriptor, made with user_scratchpad).
struct DnnlScratch {
  dnnl_memory_desc_t md{};
  size_t bytes = 0;
};
DnnlScratch dnnl_scratch_of(const DnnlApi& d, const_dnnl_primitive_desc_t pd);
// A memory over the calling thread's scratch buffer (grown as needed) for one execution;
// null when the primitive needs none. The caller destroys it after the execution.
dnnl_memory_t dnnl_scratch_memory(const DnnlApi& d, const DnnlScratch& s);

// The table, loaded on first use; `ok` false (and `why` saying why) when the library is absent,
// an entry point is missing or RLX_CPU_ISA=base.
const DnnlApi& dnnl_api();

}  // namespace rlx::cpu
