#pragma once
// 2-D and 3-D f32 convolutions through oneDNN's convolution primitive (forward inference), for
// compiled plans: conv2d kernels (1-D convolutions among them, imported as 2-D with H = 1) and
// conv3d kernels with a constant weight (and bias) get, once, primitives in a blocked channel
// layout (nChw16c / nCdhw16c with AVX-512, nChw8c / nCdhw8c below) and their weights reordered
// into the layout each primitive asks for (format `any`). At run time the NCHW (NCDHW) input is
// converted into the blocked layout (with columns of zeros at the ends of each row, where
// oneDNN's jit kernels refuse the row's pads), the primitives run on rlx's pool (one slice of output channels or groups,
// or one image, per task, each on a one-thread OpenMP team, as gemm.cpp's products), and each
// task converts its slice back to NCHW and runs the plan's fused consumer on it while it is in
// cache. Where oneDNN is off (RLX_CONV_DNNL=0), absent, or would run a reference or im2col
// implementation, or the measured rule (dnnl_conv.cpp) says rlx's own kernel is faster for the
// shape, the plan keeps rlx's kernel (cpu_ops_conv.cpp) and says why in --dump-plan.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "runtime/executor.h"

namespace rlx::cpu {

struct DnnlConv;

// One activation oneDNN applies to a convolution's result inside its kernel, while the result
// is in registers (a post-op): alg a dnnl_alg_kind_t (eltwise), alpha and beta its parameters.
struct DnnlEltwise {
  int alg = 0;
  float alpha = 0.f, beta = 0.f;
};
// The post-ops that compute p, a fused program whose every input is the convolution's output:
// chains of ReLU, x * a + b, max / min with a constant (clip), sigmoid, tanh, SiLU, negation,
// |x|, and x * f(x) with f = clip(x / 6 + 1/2, 0, 1) (HardSwish) or sigmoid (SiLU); false (ops
// untouched) for anything else. Their rounding differs from rlx's kernels by an ulp or so (a
// fused multiply-add, HardSwish as x * min(max(x + 3, 0), 6) / 6).
bool dnnl_post_ops_of(const FusedProgram& p, std::vector<DnnlEltwise>* ops);
// The names of post-ops ("hardswish", "linear+clip") for --dump-plan.
std::string dnnl_post_ops_describe(const std::vector<DnnlEltwise>& ops);

// The convolution of kernel k through oneDNN, or null with *why set. k is a conv2d or conv3d over f32
// whose weight (and bias, if any) are constant: w and bias point at them now and are copied.
// *rule is set to why the per-shape rule prefers rlx's kernel when its input and output are
// converted at its edges ("" when it prefers oneDNN; RLX_CONV_DNNL=all: always ""); the plan
// is made either way (a conv in a chain that stays blocked may still be faster through oneDNN).
// post, when given and not empty: the activation to apply inside the kernel; where oneDNN
// takes it (dnnl_conv_post_ops says so) its result is the activation's (RLX_CONV_POSTOPS=0: never).
std::shared_ptr<const DnnlConv> dnnl_conv_plan(const Kernel& k, const float* w, const float* bias, std::string* why,
                                               std::string* rule, const std::vector<DnnlEltwise>* post = nullptr);
// Whether c's primitives apply the post-ops it was planned with.
bool dnnl_conv_post_ops(const DnnlConv& c);

// Floats of the blocked output ([N][M padded to the block][(OD)][OH][OW][block]) and whether the
// primitive reads its input blocked (not for the few-channel first layers it reads as NCHW).
int64_t dnnl_conv_blocked_out_floats(const DnnlConv& c);
bool dnnl_conv_blocked_in(const DnnlConv& c);

// "oneDNN jit_dw:avx512_core, nChw16c, 2 slices" for --dump-plan.
std::string dnnl_conv_describe(const DnnlConv& c);

// y (NCHW / NCDHW) = conv(x (NCHW / NCDHW)); then epi(begin, end) (if set) on each range of y's flat indices a
// task has just written, on that task's thread. In a chain of convolutions (cpu_plan.cpp):
// x_blocked, when set, is the input already in the blocked layout (x is not read); y_blocked,
// when set, receives the output in the blocked layout, and epi then gets ranges of y_blocked's
// flat indices (padding channels included); y, if not null, then receives the NCHW conversion of
// each range after epi (a blocked result that other kernels also read as NCHW). x_scale, when set ([N, C]),
// scales each input channel as x is converted, or as x_blocked is copied (squeeze-excitation's
// x * s folded into the conv that reads it). False when oneDNN failed at run time (the caller then runs rlx's kernel,
// unless a blocked operand was given).
bool dnnl_conv_run(const DnnlConv& c, const float* x, float* y, const std::function<void(int64_t, int64_t)>& epi,
                   const float* x_blocked = nullptr, float* y_blocked = nullptr, const float* x_scale = nullptr);

// The first `avail` channels of one block of B-channel pixels (HW of them) -> NCHW planes
// (blocked_ops.cpp converts blocked tensors other kernels made with it).
void dnnl_from_blocked(const float* src, int64_t avail, int64_t HW, int64_t B, float* dst);

}  // namespace rlx::cpu
