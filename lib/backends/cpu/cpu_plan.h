#pragma once
// Compiled CPU plans (CpuExecutor::record / replay): each step of a recorded plan with its
// prepacked weights, fused epilogue or prologue, oneDNN convolution and blocked-layout links.
// record_cpu_plan builds the steps once; the executor replays them (cpu_executor.cpp).
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/dnnl_conv.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/qgemm.h"
#include "runtime/executor.h"

namespace rlx::cpu {

// ---------------- compiled plans: prepacked weights, fused epilogues ----------------
// record() looks at each f32 matrix product of the plan once:
//  - a constant right-hand operand (a param or constant: Kernel::const_inputs) is packed with
//    pack_b for the product's row count; for more than 16 rows (OpenBLAS) that is the
//    weight itself, read in place with no copy; for 1..16 rows on AVX-512, panels for the
//    skinny kernel (a copy, whose bytes --dump-plan reports);
//  - when the next kernel is elementwise (a node or a fused program) that reads the product's
//    output and nothing later reads that output, it runs in the product's epilogue: on each
//    block of C right after a task computed it, while it is in cache.
struct PlanStep {
  Kernel k;
  std::shared_ptr<const PackedB> packed;
  std::shared_ptr<const PackedQB> qpacked;  // matmul_integer[_scaled]'s constant B (qgemm.h)
  bool pack_later = false;  // a product of more than 16 rows: packed before the plan's second run
  // conv2d through oneDNN (dnnl_conv.h); null: rlx's kernel, then the epilogue's kernel.
  std::shared_ptr<const DnnlConv> conv;
  std::string conv_rule;  // why the per-shape rule prefers rlx's kernel at converted edges ("": it does not)
  // A chain of oneDNN convolutions: the output stays in the blocked layout in blocked_out, which
  // the next convolution reads as blocked_in (neither converts; the NCHW tensor is never written).
  std::shared_ptr<std::vector<float>> blocked_out, blocked_in;
  FusedProgram epi_blocked;  // with blocked_out: the epilogue as a flat program over the blocked buffer
  // With blocked_out: per epilogue input, the blocked buffer it reads (null: the convolution's
  // own output); empty when the epilogue reads nothing but that output.
  std::vector<std::shared_ptr<std::vector<float>>> epi_blocked_ins;
  bool write_nchw = false;  // with blocked_out: also converted to NCHW (some step reads it so)
  // A pool, concat or global mean run on blocked inputs (blocked_ops.h; "" when not): bins are
  // its inputs' blocked buffers; pools and concats write blocked_out (and NCHW if write_nchw).
  std::string bkind;
  std::vector<std::shared_ptr<std::vector<float>>> bins;
  size_t line = SIZE_MAX;    // its line of the plan's description
  // Squeeze-excitation's scale folded in: the kernel before, y = mul(x, s) with s [N, C, 1, 1],
  // whose only reader is this convolution: the convolution reads x and scales each channel by s
  // while converting it (has_pre; `pre` runs on its own when rlx's kernel runs the convolution).
  bool has_pre = false;
  Kernel pre;
  int pre_x = 0;  // pre's input that is x (the other is s)
  bool has_epi = false;
  // The epilogue (an activation of the convolution's output alone) runs inside oneDNN's kernel
  // as post-ops (dnnl_conv.h): the primitive writes the epilogue's result, nothing runs after it.
  bool epi_in_conv = false;
  Kernel epi;                      // the consumer folded into the epilogue
  FusedProgram epi_prog;           // its program (built here for a single node)
  std::vector<char> epi_reads_c;   // per consumer input: it is the product's output
};

struct CpuRecording : Recording {
  std::vector<PlanStep> steps;
  int runs = 0;
  std::string text;
  std::string describe() const override { return text; }
};

struct Product {
  int64_t rows = 0, N = 0, K = 0;
  bool tb = false;
  int64_t ldb = 0;
};

// Whether k is an f32 product run as one GEMM, and its geometry.
bool as_product(const Kernel& k, Product& p);
// The pack of constant weight w for product p, shared across steps and plans while w's memory
// lives (reused: set when an earlier plan or step made it).
std::shared_ptr<const PackedB> shared_pack(const TensorRef& w, const Product& p, bool* reused = nullptr);
// A conv2d/conv3d over f32 whose weight (and bias) are constant: oneDNN may run it.
bool dnnl_conv_candidate(const Kernel& k);
// One step of a replay: a packed product with its epilogue; a convolution through oneDNN (false:
// oneDNN failed, run rlx's kernels); a pool, concat or mean on blocked inputs.
void run_product_step(const PlanStep& st);
bool run_conv_step(const PlanStep& st);
// A convolution rlx's kernel runs (oneDNN refused it, its rule prefers rlx's, or it failed),
// its epilogue, if any, fused into the kernel's tasks (the prologue `pre` is run before by the caller).
void run_rlx_conv_step(const PlanStep& st);
void run_blocked_step(const PlanStep& st);
// The plan of `kernels`: packs, epilogues, oneDNN convolutions, blocked links, its description.
std::unique_ptr<CpuRecording> record_cpu_plan(const std::vector<Kernel>& kernels);

}  // namespace rlx::cpu
