// The CPU elementwise engine: every unary/binary node and every fused chain runs
// here as a FusedProgram, evaluated block by block so each instruction is a tight
// vectorisable loop over a block held in cache.
//
// The block loops and row kernels (fused_kernels.inc) are compiled twice: for the
// baseline x86-64 ISA and for AVX2+FMA, chosen at run time (RLX_CPU_ISA=base forces
// the baseline), so the binary stays portable. The AVX2 clone contracts a*b+c into
// FMAs: its results differ from the baseline's by rounding only. Contiguous inputs are read in place and scalar
// operands (constants, broadcast scalars) stay scalars: no block is filled or
// copied for them. A result too large for the caches is written with
// non-temporal stores.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cpu/cpu_executor.h"
#include "backends/cpu/fast_math.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/thread_pool.h"

namespace rlx::cpu {

namespace {

constexpr int64_t kBlock = 1024;

// Input access pattern after collapsing dimensions.
struct Access {
  const float* data;
  std::vector<int64_t> strides;  // over the collapsed output dims
  enum Kind { Contiguous, Scalar, Strided } kind;
};

struct Layout {
  Shape dims;                  // collapsed output dims
  std::vector<Access> inputs;  // one per program input
};

Layout make_layout(const FusedProgram& p, const std::vector<const float*>& ptrs) {
  const Shape& out = p.out_shape;
  size_t r = out.size();
  std::vector<std::vector<int64_t>> st;
  for (const auto& s : p.input_shapes) st.push_back(broadcast_strides(s, out));
  // Collapse adjacent dims k, k+1 when every input can be addressed as one dim.
  Shape dims;
  std::vector<std::vector<int64_t>> cst(st.size());
  for (size_t k = 0; k < r; ++k) {
    if (out[k] == 1) continue;  // size-1 dims never move the index
    bool merge = !dims.empty();
    for (size_t i = 0; merge && i < st.size(); ++i) merge = cst[i].back() == st[i][k] * out[k];
    if (merge) {
      dims.back() *= out[k];
      for (size_t i = 0; i < st.size(); ++i) cst[i].back() = st[i][k];
    } else {
      dims.push_back(out[k]);
      for (size_t i = 0; i < st.size(); ++i) cst[i].push_back(st[i][k]);
    }
  }
  if (dims.empty()) {
    dims.push_back(1);
    for (auto& c : cst) c.push_back(0);
  }
  Layout L;
  L.dims = dims;
  for (size_t i = 0; i < st.size(); ++i) {
    Access a{ptrs[i], cst[i], Access::Strided};
    bool scalar = std::all_of(cst[i].begin(), cst[i].end(), [](int64_t s) { return s == 0; });
    bool contig = dims.size() == 1 && cst[i][0] == 1;
    a.kind = scalar ? Access::Scalar : contig ? Access::Contiguous : Access::Strided;
    L.inputs.push_back(std::move(a));
  }
  return L;
}

// Loads elements [start, start+n) of the broadcast view into dst.
void load(const Layout& L, const Access& a, int64_t start, int64_t n, float* dst) {
  switch (a.kind) {
    case Access::Contiguous: std::memcpy(dst, a.data + start, n * 4); return;
    case Access::Scalar: std::fill(dst, dst + n, a.data[0]); return;
    case Access::Strided: break;
  }
  size_t r = L.dims.size();
  int64_t coord[16];
  int64_t rem = start, off = 0;
  for (size_t k = r; k-- > 0;) {
    coord[k] = rem % L.dims[k];
    rem /= L.dims[k];
    off += coord[k] * a.strides[k];
  }
  const int64_t inner = L.dims[r - 1], is = a.strides[r - 1];
  int64_t j = 0;
  while (j < n) {
    int64_t run = std::min(n - j, inner - coord[r - 1]);
    if (is == 1) std::memcpy(dst + j, a.data + off, run * 4);
    else if (is == 0) std::fill(dst + j, dst + j + run, a.data[off]);
    else for (int64_t t = 0; t < run; ++t) dst[j + t] = a.data[off + t * is];
    j += run;
    off += run * is;
    coord[r - 1] += run;
    // carry into outer dims
    for (size_t k = r - 1; k > 0 && coord[k] == L.dims[k]; --k) {
      off -= coord[k] * a.strides[k];
      coord[k] = 0;
      coord[k - 1]++;
      off += a.strides[k - 1];
    }
  }
}

// One register of a block: a vector (p, kBlock floats) or a scalar s.
struct Reg {
  const float* p;
  float s;
  bool scalar;
};

struct BlockPlan {
  const FusedProgram* program;
  const Layout* layout;
  std::vector<int> slot;  // scratch slot per instruction
  int slots = 0;
  int64_t total = 0;
  float* out = nullptr;
  bool stream = false;  // write the result with non-temporal stores
};

}  // namespace

#define RLX_ISA_NS isa_base
#include "backends/cpu/fused_kernels.inc"
#undef RLX_ISA_NS

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=fast")
#define RLX_ISA_NS isa_avx2
#include "backends/cpu/fused_kernels.inc"
#undef RLX_ISA_NS
#pragma GCC pop_options

// Results larger than this are streamed past the caches.
constexpr int64_t kStreamBytes = 16 << 20;

const char* fused_isa() { return isa_avx2_fma() ? "avx2+fma" : "x86-64"; }

void norm_row(const float* x, float* y, int64_t D, float eps, bool layer, const float* w, const float* bias) {
  if (isa_avx2_fma()) isa_avx2::norm_row(x, y, D, eps, layer, w, bias);
  else isa_base::norm_row(x, y, D, eps, layer, w, bias);
}

void softmax_row(float* x, int64_t valid, int64_t n, float scale) {
  if (isa_avx2_fma()) isa_avx2::softmax_row(x, valid, n, scale);
  else isa_base::softmax_row(x, valid, n, scale);
}

namespace {
// The scratch slots of a program's registers (the block plan without its output).
void assign_slots(const FusedProgram& p, const Layout& L, BlockPlan& plan) {
  // Scratch slots: a register whose last use has passed gives its slot back (a
  // register never shares a slot with its own operands).
  const size_t ni = p.code.size();
  std::vector<int> last_use(ni, -1);
  for (size_t i = 0; i < ni; ++i) {
    const auto& in = p.code[i];
    if (in.kind == FusedInstr::Unary) last_use[in.a] = (int)i;
    if (in.kind == FusedInstr::Binary) last_use[in.a] = last_use[in.b] = (int)i;
  }
  last_use[p.result] = (int)ni;
  plan.slot.assign(ni, 0);
  {
    std::vector<int> free_slots;
    for (size_t i = 0; i < ni; ++i) {
      const auto& in = p.code[i];
      // Contiguous and scalar loads and constants are read in place: no slot.
      bool in_place = (int)i != p.result &&
                      (in.kind == FusedInstr::Const ||
                       (in.kind == FusedInstr::Load && L.inputs[in.a].kind != Access::Strided));
      if (!in_place) {
        if (free_slots.empty()) plan.slot[i] = plan.slots++;
        else { plan.slot[i] = free_slots.back(); free_slots.pop_back(); }
      }
      auto release = [&](int r) {
        const auto& d = p.code[r];
        bool had_slot = (int)r == p.result || !(d.kind == FusedInstr::Const ||
                                                (d.kind == FusedInstr::Load && L.inputs[d.a].kind != Access::Strided));
        if (last_use[r] == (int)i && had_slot) free_slots.push_back(plan.slot[r]);
      };
      if (in.kind == FusedInstr::Unary) release(in.a);
      if (in.kind == FusedInstr::Binary) { release(in.a); if (in.b != in.a) release(in.b); }
    }
  }
}
}  // namespace

void run_fused(const FusedProgram& p, const std::vector<const float*>& inputs, float* out) {
  const int64_t total = shape_numel(p.out_shape);
  if (total == 0) return;
  Layout L = make_layout(p, inputs);
  BlockPlan plan;
  plan.program = &p;
  plan.layout = &L;
  plan.total = total;
  plan.out = out;
  plan.stream = total * 4 >= kStreamBytes;
  assign_slots(p, L, plan);
  const bool avx2 = isa_avx2_fma();
  const int64_t blocks = (total + kBlock - 1) / kBlock;
  // At least 16k elements per task: smaller programs are not worth waking a thread for.
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 14) / kBlock);
  ThreadPool::global().parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    float stack_scratch[8 * kBlock];
    std::vector<float> heap_scratch;
    float* scratch = stack_scratch;
    if (plan.slots > 8) {
      heap_scratch.resize((size_t)plan.slots * kBlock);
      scratch = heap_scratch.data();
    }
    if (avx2) isa_avx2::run_blocks(plan, b0, b1, scratch);
    else isa_base::run_blocks(plan, b0, b1, scratch);
  });
}

struct FusedSpans::Impl {
  FusedProgram program;
  Layout layout;
  BlockPlan plan;
  bool avx2 = false;
};

FusedSpans::FusedSpans(const FusedProgram& p, const std::vector<const float*>& inputs, float* out)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.program = p;
  m.layout = make_layout(m.program, inputs);
  m.plan.program = &m.program;
  m.plan.layout = &m.layout;
  m.plan.total = shape_numel(p.out_shape);
  m.plan.out = out;
  m.plan.stream = false;  // the caller's block is in cache: keep it there
  assign_slots(m.program, m.layout, m.plan);
  m.avx2 = isa_avx2_fma();
}

FusedSpans::~FusedSpans() = default;

void FusedSpans::run(int64_t s0, int64_t s1) const {
  const Impl& m = *impl_;
  if (s1 <= s0) return;
  float stack_scratch[8 * kBlock];
  std::vector<float> heap_scratch;
  float* scratch = stack_scratch;
  if (m.plan.slots > 8) {
    heap_scratch.resize((size_t)m.plan.slots * kBlock);
    scratch = heap_scratch.data();
  }
  if (m.avx2) isa_avx2::run_span(m.plan, s0, s1, scratch);
  else isa_base::run_span(m.plan, s0, s1, scratch);
}

}  // namespace rlx::cpu
