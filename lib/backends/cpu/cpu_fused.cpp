// The CPU elementwise engine: every unary/binary node and every fused chain runs
// here as a FusedProgram, evaluated block by block so each instruction is a tight
// vectorisable loop over a block held in cache.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_executor.h"
#include "backends/cpu/fast_math.h"
#include "backends/cpu/thread_pool.h"

namespace rlx::cpu {

namespace {

constexpr int64_t kBlock = 512;

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

void apply_unary(EwOp op, const float* __restrict x, float* __restrict r, int64_t n) {
  switch (op) {
    case EwOp::Exp: fast_exp(x, r, n); return;
    case EwOp::Tanh: fast_tanh(x, r, n); return;
    case EwOp::Erf: fast_erf(x, r, n); return;
    case EwOp::Sigmoid: fast_sigmoid(x, r, n); return;
    case EwOp::Silu: fast_silu(x, r, n); return;
    case EwOp::GeluErf: fast_gelu_erf(x, r, n); return;
    case EwOp::GeluTanh: fast_gelu_tanh(x, r, n); return;
    default: break;
  }
  switch (op) {
#define UNARY(E, C, G) \
  case EwOp::E:        \
    for (int64_t j = 0; j < n; ++j) { float x_ = x[j]; { float x = x_; r[j] = C; } } return;
#define BINARY(E, C, G)
#include "ir/elementwise.def"
#undef UNARY
#undef BINARY
    default: return;
  }
}

void apply_binary(EwOp op, const float* __restrict a, const float* __restrict b, float* __restrict r, int64_t n) {
  switch (op) {
#define UNARY(E, C, G)
#define BINARY(E, C, G) \
  case EwOp::E:         \
    for (int64_t j = 0; j < n; ++j) { float a_ = a[j], b_ = b[j]; { float a = a_, b = b_; r[j] = C; } } return;
#include "ir/elementwise.def"
#undef UNARY
#undef BINARY
    default: return;
  }
}

}  // namespace

void run_fused(const FusedProgram& p, const std::vector<const float*>& inputs, float* out) {
  const int64_t total = shape_numel(p.out_shape);
  if (total == 0) return;
  Layout L = make_layout(p, inputs);
  // Which registers are still needed after each instruction: reuse their storage.
  const size_t ni = p.code.size();
  std::vector<int> last_use(ni, -1);
  for (size_t i = 0; i < ni; ++i) {
    const auto& in = p.code[i];
    if (in.kind == FusedInstr::Unary) last_use[in.a] = (int)i;
    if (in.kind == FusedInstr::Binary) last_use[in.a] = last_use[in.b] = (int)i;
  }
  last_use[p.result] = (int)ni;
  ThreadPool::global().parallel_for((total + kBlock - 1) / kBlock, 16, [&](int64_t b0, int64_t b1) {
    std::vector<float> regs(ni * kBlock);
    std::vector<float*> reg(ni);
    std::vector<float*> free_list;
    // Slot assignment: registers whose last use has passed give their slot back.
    std::vector<int> slot(ni);
    {
      std::vector<int> free_slots;
      int next = 0;
      for (size_t i = 0; i < ni; ++i) {
        if (free_slots.empty()) slot[i] = next++;
        else { slot[i] = free_slots.back(); free_slots.pop_back(); }
        const auto& in = p.code[i];
        auto release = [&](int r) { if (last_use[r] == (int)i) free_slots.push_back(slot[r]); };
        if (in.kind == FusedInstr::Unary) release(in.a);
        if (in.kind == FusedInstr::Binary) { release(in.a); if (in.b != in.a) release(in.b); }
      }
    }
    for (size_t i = 0; i < ni; ++i) reg[i] = regs.data() + slot[i] * kBlock;
    for (int64_t blk = b0; blk < b1; ++blk) {
      int64_t start = blk * kBlock, n = std::min(kBlock, total - start);
      for (size_t i = 0; i < ni; ++i) {
        const auto& in = p.code[i];
        float* r = (int)i == p.result ? out + start : reg[i];
        switch (in.kind) {
          case FusedInstr::Load: load(L, L.inputs[in.a], start, n, r); break;
          case FusedInstr::Const: std::fill(r, r + n, in.imm); break;
          case FusedInstr::Unary: apply_unary(in.op, reg[in.a], r, n); break;
          case FusedInstr::Binary: apply_binary(in.op, reg[in.a], reg[in.b], r, n); break;
        }
        if ((int)i == p.result && (int)i != (int)ni - 1) std::memcpy(reg[i], r, n * 4);
      }
    }
  });
}

}  // namespace rlx::cpu
