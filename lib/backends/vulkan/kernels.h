#pragma once
// Lowering: a Kernel (graph op or fused program) becomes one or more Dispatches,
// each naming a pipeline, its storage-buffer bindings, push constants and grid.
// Recording them into a command buffer is the executor's job (one path for
// every op).
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backends/vulkan/fused_codegen.h"
#include "backends/vulkan/memory.h"
#include "backends/vulkan/pipelines.h"
#include "runtime/executor.h"

namespace rlx::ir {
struct Conv2dGeom;
}

namespace rlx::vk {

// An f32 push constant's bits.
inline uint32_t f2u(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct Binding {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize offset = 0, range = 0;  // the descriptor
  VkDeviceSize lo = 0, hi = 0;          // bytes the kernel may touch (hazard tracking)
  bool write = false;
  bool tracked = true;  // false for the error flag (atomics only)
};

struct Dispatch {
  std::string shader;             // embedded or generated (PipelineCache::add_shader), specialised with `spec`
  std::vector<uint32_t> spec;     // by constant_id
  std::vector<Binding> bindings;  // binding i of set 0
  std::vector<uint32_t> push;     // push-constant words (at most kPushBytes / 4)
  uint32_t groups[3] = {1, 1, 1};
};

// The dtype a tensor of logical dtype `t` is stored as on the device: i8/u8 as raw bytes (kernels
// read and write them through 32-bit words, so no 8-bit storage feature is needed); f16/bf16 as
// themselves (2 bytes) where the device has 16-bit storage buffers; every other dtype as f32
// (i32/i64 and bool travel as f32 values: exact up to 2^24, see docs/backends.md).
inline DType device_storage(const DeviceCaps& c, DType t) {
  if (t == DType::i8 || t == DType::u8) return t;
  return (t == DType::f16 || t == DType::bf16) && c.storage16 ? t : DType::f32;
}
// The shaders' storage kind (spec constants *DT): 0 f32, 1 f16, 2 bf16 (the ".h16" variants),
// 3 i8, 4 u8 (bytes, every variant of the shaders that take them).
inline uint32_t storage_kind(const DeviceCaps& c, DType t) {
  DType s = device_storage(c, t);
  return s == DType::f16 ? 1u : s == DType::bf16 ? 2u : s == DType::i8 ? 3u : s == DType::u8 ? 4u : 0u;
}
inline bool is_kind16(uint32_t k) { return k == 1u || k == 2u; }
// RLX_VK_WIDEN16=1: norms, softmax, rope, attention and pooling on 2-byte tensors go through f32 scratch
// (widen, the f32 kernel, round) as before their ".h16" variants existed, for comparison.
bool widen16_forced();
inline bool is_kind8(uint32_t k) { return k == 3u || k == 4u; }

// What lowering needs from the executor.
struct LowerEnv {
  Device& dev;
  PipelineCache& pipes;
  FusedCodegen& fused;
  Binding error;  // the device error flag: uint[2] = {kernel id + 1, bad index bits}
  Binding dummy;  // bound for absent optional inputs and empty tensors
  // rope: per pair i < dims/2, frac(scale * base^(-2i/dims) / 2pi) as a 64-bit
  // fixed-point fraction (hi, lo uint words); owned by the executor
  std::function<const VulkanBuffer&(int64_t dims, double base, double scale)> rope_table;
  // Temporary device memory for a multi-pass kernel (split attention), alive as
  // long as the command buffer being recorded.
  std::function<TensorRef(int64_t floats)> scratch;
  // A read-only table of host-computed words (e.g. resize's source taps), uploaded
  // once per distinct content and owned by the executor.
  std::function<const VulkanBuffer&(const std::vector<uint32_t>& words)> const_table;
};

struct ProductEpilogue;  // below

// What the lowering of the ONNX-style ops (kernels_index.cpp) uses of one kernel's lowering
// (implemented by kernels.cpp's Lowering).
class LowerCtx {
 public:
  virtual ~LowerCtx() = default;
  virtual const Kernel& kernel() const = 0;
  virtual uint32_t kernel_id() const = 0;
  virtual const DeviceCaps& caps() const = 0;
  virtual Dispatch& add(std::string shader, std::vector<uint32_t> spec) = 0;
  // Binds a tensor; returns the element offset of its first element in the binding.
  virtual uint32_t read(Dispatch& d, const TensorRef& t) = 0;
  virtual uint32_t write(Dispatch& d, const TensorRef& t) = 0;
  virtual void bind_error(Dispatch& d) = 0;  // the device error flag (see LowerEnv::error)
  virtual void drop_last() = 0;                // forgets the dispatch add() made last
  virtual void grid(Dispatch& d, uint64_t items, uint32_t wg) = 0;
  virtual void bind_dummy(Dispatch& d) = 0;  // an absent optional input
  // Temporary device memory of `floats` f32 values, alive while the command buffer is.
  virtual TensorRef scratch(int64_t floats) = 0;
  // y[yextra + iter . ys] = x[xextra + iter . xs] (element strides may be negative), no op, no rounding.
  virtual void strided(const TensorRef& x, int64_t xextra, const std::vector<int64_t>& xs, const TensorRef& y,
                       int64_t yextra, const std::vector<int64_t>& ys, const Shape& iter, uint32_t op,
                       uint32_t round) = 0;
  [[noreturn]] virtual void fail(const std::string& what) const = 0;
  // Appends the dispatches of `sub` (a part of this kernel: views of its tensors, or scratch),
  // lowered as a kernel of its own under this kernel's id and label.
  virtual void lower_sub(const Kernel& sub) = 0;
  // The epilogue this kernel may take over (a convolution's; null for others and sub-kernels).
  virtual ProductEpilogue* product_epilogue() { return nullptr; }
};

// ---- Tensors larger than one storage-buffer binding (kernels_split.cpp, issue 30)
// Bytes of `t` in its device storage dtype.
uint64_t device_bytes(const DeviceCaps& c, const TensorRef& t);
// Whether binding `t` whole stays within caps.max_binding_bytes (the descriptor's range as
// Lowering::bind makes it: offset aligned down, last 32-bit word included).
bool binds_whole(const DeviceCaps& c, const TensorRef& t);
// The bytes a view may cover so that its binding, wherever it starts, fits the limit.
uint64_t view_budget(const DeviceCaps& c);
// `t`'s elements [elem, elem + numel(shape)) as a tensor of `shape` (same buffer and dtype).
TensorRef view_of(const DeviceCaps& c, const TensorRef& t, int64_t elem, Shape shape);
// A strided copy y[yextra + i.ys] = x[xextra + i.xs] over `dims` whose x or y footprint exceeds
// the budget, cut into boxes whose footprints fit; `emit` gets views of x and y covering one
// box's footprint, the offsets of the box's first element in them, and the box's extents.
using EmitBox = std::function<void(const TensorRef& x, int64_t xextra, const TensorRef& y, int64_t yextra,
                                   const Shape& box)>;
void split_strided(const DeviceCaps& c, const TensorRef& x, int64_t xextra, const std::vector<int64_t>& xs,
                   const TensorRef& y, int64_t yextra, const std::vector<int64_t>& ys, const std::vector<int64_t>& dims,
                   const EmitBox& emit);
// When a tensor of L's kernel does not fit one binding: lowers the kernel as parts that fit
// (elementwise and fused kernels by slabs of the output, matmul/linear by blocks of rows,
// columns or K, the convolution family, pools, norms and softmax by batch rows) and returns
// true; false when every tensor fits or when the op's own lowering cuts its copies
// (strided copies: unary ops, cast, reshape, transpose, broadcast_to, narrow, concat, slice).
// Anything else too large is refused with a RuntimeError naming the tensor, its size and the limit.
bool lower_split(LowerCtx& L);

// Dims of `shape` (size-1 dims dropped, mergeable neighbours merged) with each operand's
// strides over them. Never empty: a scalar becomes one dim of size 1.
using Strides = std::vector<int64_t>;
struct Collapsed {
  std::vector<int64_t> dims;
  std::vector<Strides> strides;  // per operand
};
Collapsed collapse(const Shape& shape, const std::vector<Strides>& ops);

// A contiguous tensor's dims for the reduction shaders, reduced over the `axes` attribute (all
// when absent): size-1 dims dropped, adjacent dims of one kind merged, then the kept groups'
// and the reduced groups' sizes and strides (rd is never empty: {1} when nothing is reduced).
struct ReduceGroups {
  Strides kd, ks, rd, rs;
  bool last_reduced = false;  // the innermost group is a reduced one
};
ReduceGroups reduce_groups(const Shape& xs, const ir::Attrs& attrs);

// Lowers min/prod and the Index-category ops; false for any other op.
bool lower_index_op(LowerCtx& L);
// ---- Lines longer than one shader invocation may walk (kernels_long.cpp, issue 30): llvmpipe
// ends an invocation's loops after 65535 iterations in all. The one-pass kernels (axis_op.comp's
// argmax/argmin, cumsum and topk, reduce_ext.comp's min/prod) walk at most kMaxWalk elements per
// invocation; longer lines run in passes over chunks, then over the chunks' results, by one of two
// routes for argmax/argmin, cumsum and min/prod (long_wg):
//  - serial: one invocation walks each chunk of serial_chunk() elements (shaders/axis_long.comp,
//    reduce_ext.comp), the faster route on a CPU device (lavapipe: a work group's barriers cost
//    there, and its invocations run on the same few cores anyway);
//  - wg: one work group of 256 invocations per chunk of wg_chunk() elements (shaders/axis_wg.comp,
//    reduce_ext_wg.comp: 16 elements an invocation and a two-level combine in shared memory), the
//    parallel route for GPUs.
// TopK takes runs of kTopkRun, then merges by binary search (shaders/axis_long.comp), everywhere.
constexpr int64_t kMaxWalk = 32768, kTopkRun = 64;
// Whether argmax/argmin, cumsum and min/prod over long lines take the work-group passes: on every
// device but a CPU one (caps.cpu); RLX_VK_LONG_ROUTE=serial|wg forces either (A/B on one binary,
// tests of both routes on lavapipe).
bool long_wg(const DeviceCaps& caps);
// Elements an invocation of the wg passes combines, or a serial chunk's /256: 16, or at most
// RLX_VK_LONG_PER=1|2|4|8 (tests: many chunks, and three levels, on short lines).
int64_t long_per();
// Elements per work group of the wg passes: 256 * long_per(); cumsum (`scan`, whose chunk is
// staged in shared memory: 18.5 KiB) at most 2048 where the device has less than that.
int64_t wg_chunk(const DeviceCaps& caps, bool scan);
// Elements an invocation of the serial passes walks: 256 * long_per() (4096), so every loop
// stays far below 65535 iterations.
inline int64_t serial_chunk() { return 256 * long_per(); }
// Lines (reductions) longer than this take those passes: kMaxWalk, or RLX_VK_LONG_FROM=N
// (1 <= N < kMaxWalk) for argmax/argmin, cumsum and min/prod (measuring the passes on shorter
// lines; tests run the small golden cases through them).
int64_t long_from();
// argmax (op 0), argmin (1), cumsum (2), topk (3) of L's kernel along a line of a.len > kMaxWalk
// elements; flags as axis_op.comp's.
void lower_axis_long(LowerCtx& L, uint32_t op, const Axis3& a, int64_t K, uint32_t flags);
// A matrix product y = op(A) . op(B) (+ bias) without batch dims: A is [M, K] ([K, M] when ta),
// B [K, N] ([N, K] when tb), y [M, N].
struct MatmulOperands {
  const TensorRef &A, &B;
  const TensorRef* bias;
  const TensorRef& y;
  uint32_t ta, tb;
  int64_t M, N, K;
  // A batch of `batch` products (tensor cores through VK_NV_cooperative_matrix2 only): product z
  // reads A + z*abat, B + z*bbat and writes y + z*ybat (elements). bias_rows: the bias is per
  // row of y (M values) instead of per column. Other routes refuse either (false).
  int64_t batch = 1, abat = 0, bbat = 0, ybat = 0;
  bool bias_rows = false;
  // Epilogue (matmul_cm2 only, unsplit): y = act(product + bias + residual), residual in y's
  // dtype and layout (its product z at residual + z*ybat); act as ProductEpilogue::act.
  const TensorRef* residual = nullptr;
  uint32_t act = 0;
  // Where set (matmul_cm2 only, no residual or act): a product split over K leaves its f32
  // partials [*nsplit, M, N], without the bias, in *partials for the caller to sum
  // (kernels_conv_fold.cpp sums them into its NCHW output) instead of adding matmul_splitk;
  // unsplit, *partials is y, holding the product with its bias, and *nsplit is 1.
  TensorRef* partials = nullptr;
  uint32_t* nsplit = nullptr;
  // fold_p = P > 0 (matmul_cm2 only, batch 1, no partials; a residual only as one matrix per
  // tile): the product is a convolution's with the batch folded into its N = images*P columns,
  // and y (and the residual) are NCHW [images, M, P], written (read) there directly. Refused
  // (false, nothing added) where the product would split over K, unless fold_unsplit (never split).
  int64_t fold_p = 0;
  bool fold_unsplit = false;
  // matmul_cm2's tile for this product, "WGxBMxBNxBK[xUNROLL]" (as RLX_VK_CM2, which overrides
  // it); empty: picked by shape.
  std::string tile;
};
// A product's consumer folded into it (executor.cpp's build(), product_epilogue_for): the
// kernel right after a convolution or a linear layer is the only reader of its result and
// computes act(y), y + r, r + y or act(y + r) with act ReLU or GELU (a fused elementwise kernel
// or a lone relu / gelu / add node; GELU only with RLX_VK_EPILOGUE=gelu, measured slower). The product writes `out` (the consumer's output) and sets
// `done` where its route can (matmul_cm2: the per-image convolution products, unsplit linears);
// otherwise it ignores this and the consumer runs.
struct ProductEpilogue {
  TensorRef out;
  const TensorRef* residual = nullptr;
  uint32_t act = 0;  // 0 none, 1 ReLU, 2 GELU (erf), 3 GELU (tanh)
  bool done = false;
};
// On tensor cores (kernels_coopmat.cpp) where the device has them for A's and B's type; false
// where no tensor-core kernel applies (nothing added).
bool lower_matmul_tensor_cores(LowerCtx& L, const MatmulOperands& m);
// Attention with f16 q, k, v on tensor cores (shaders/attention_coop.comp, or
// attention_coop_rows.comp for head dims <= 64: 16 query rows per subgroup, many per work group;
// RLX_VK_FLASH_ROWS), same push constants as attention.comp (no key split); false (nothing added) where it does not apply: no
// VK_NV_cooperative_matrix 16x{8,16}x16 f16 shape, subgroups not of 32, head dims not multiples
// of 16 or over 128, q/k/v offsets or strides not multiples of 8 halves, bf16 q/k/v not
// contiguous (the prebuilt attention_cm1 has no strides), fewer than 64 packed query rows
// (unless forced), or RLX_VK_FLASH_COOP=0. RLX_VK_FLASH_COOP=1 forces it wherever it can run.
struct AttentionOperands {
  const TensorRef &q, &k, &v;
  const TensorRef* mask;
  const TensorRef& y;
  int64_t B, Hq, Hkv, Sq, Sk, D, Dv;
  float scale;
  uint32_t mask_kind, causal;
  int64_t msb, msh, msi, msj;
  // q, k, v, o: batch, head and position strides in elements (element (b, h, s, d) at
  // b*sb + h*sh + s*ss + d past the tensor's start; ir::AttentionViews). For q and o, h counts
  // query heads; for k and v, key/value heads.
  int64_t st[4][3];
  bool strided;  // not the contiguous layout (a views attention)
};
bool lower_attention_tensor_cores(LowerCtx& L, const AttentionOperands& a);
// The cooperative-matrix shape the tensor-core flash attention uses for 2-byte storage kind `qk`
// (1 f16: VK_NV_cooperative_matrix; 2 bf16: VK_KHR_cooperative_matrix), or null where the device
// cannot run it (no extension, subgroups not of 32, no 16x16x16 or 16x8x16 shape) or where
// RLX_VK_FLASH_COOP=0 turns it off: one test for the kernel's choice and for whether compiled
// mode fuses 16-bit attention (half_attention).
const DeviceCaps::CoopShape* flash_attention_shape(const DeviceCaps& c, uint32_t qk);
// A 2-D convolution of groups 1 as im2col + linear + transpose (kernels_conv_gemm.cpp); false
// where the direct loop (lower_spatial) runs it instead (nothing added).
bool lower_conv_gemm(LowerCtx& L);
// The same (f16, VK_NV_cooperative_matrix2) as an implicit product that gathers im2col's slices
// from x inside the product (kernels_conv_implicit.cpp): y = act(conv + bias + residual), act 0
// or 1 (ReLU), residual null or in y's layout. False (nothing added) where it does not apply, or
// (unless any_shape: RLX_VK_CONV=implicit) where the im2col route measured faster.
bool lower_conv_implicit(LowerCtx& L, const ir::Conv2dGeom& g, const TensorRef& x, const TensorRef& w,
                         const TensorRef* bias, const TensorRef& y, const TensorRef* residual, uint32_t act,
                         bool any_shape);
// im2col.comp's 16-bit variant: x (NCHW) into col, R output positions by K = C*kH*kW; layout 1:
// [N, K, OH*OW] (one product per image), 2: [K, N*OH*OW] (the batch folded, lower_conv_fold).
void add_im2col_h16(LowerCtx& L, const ir::Conv2dGeom& g, const TensorRef& x, const TensorRef& col, int64_t R,
                    int64_t K, uint32_t layout);
// The same (f16/bf16, VK_NV_cooperative_matrix2) with the batch folded into the product's columns
// (kernels_conv_fold.cpp): col [K, N*OH*OW] = im2col(x), t [M, N*OH*OW] = w . col in f32 (one
// product, split over K where its tiles are few), y = act(t + bias + residual) permuted back to
// NCHW. For small outputs (OH*OW <= RLX_VK_CONV_FOLD, default below), where per-image tiles run
// mostly past the edge (any_shape: RLX_VK_CONV=fold, wherever it can run). False (nothing added)
// where it does not apply.
bool lower_conv_fold(LowerCtx& L, const ir::Conv2dGeom& g, const TensorRef& x, const TensorRef& w,
                     const TensorRef* bias, const TensorRef& y, const TensorRef* residual, uint32_t act,
                     bool any_shape);
// Whether ks[i] is a convolution whose consumer ks[i + 1] it may fold in (ProductEpilogue's
// conditions); fills `epi`. RLX_VK_EPILOGUE=0: never.
bool product_epilogue_for(const DeviceCaps& c, const std::vector<Kernel>& ks, size_t i, ProductEpilogue& epi);
// Lowers quantize, dequantize and matmul_integer (kernels_quant.cpp); false for any other op.
bool lower_quant_op(LowerCtx& L);

// Throws RuntimeError naming k.label for what cannot run (e.g. a tensor larger
// than the device's maxStorageBufferRange).
std::vector<Dispatch> lower_kernel(LowerEnv& env, const Kernel& k, uint32_t kernel_id, ProductEpilogue* epi = nullptr);

// The convolution family (kernels_conv.cpp), appended to `out`. `bind` binds a
// tensor and returns the element offset of its first element in the binding;
// `grid` lays a 1-D grid of `items` invocations in groups of `wg`.
struct SpatialLowering {
  LowerEnv& env;
  const Kernel& k;
  std::function<uint32_t(Dispatch&, const TensorRef&, bool write)> bind;
  std::function<void(Dispatch&, uint64_t items, uint32_t wg)> grid;
};
void lower_spatial(const SpatialLowering& s, std::vector<Dispatch>& out);

}  // namespace rlx::vk
