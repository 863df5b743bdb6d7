// Compiled CPU plans: recording (packs, epilogues, oneDNN convolutions, blocked layout links).
#include "backends/cpu/cpu_plan.h"

#include "backends/cpu/cpu_executor.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/access.h"
#include "backends/cpu/blocked_ops.h"
#include "backends/cpu/cpu_ops_conv.h"
#include "backends/cpu/dnnl_conv.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/ops_index.h"
#include "backends/cpu/ops_quant.h"
#include "backends/cpu/qgemm.h"
#include "core/error.h"
#include "ir/op_registry.h"

namespace rlx::cpu {

using ir::Op;

namespace {

bool all_f32(const Kernel& k) {
  bool ok = k.output.dtype == DType::f32;
  for (const auto& t : k.inputs) ok = ok && t.dtype == DType::f32;
  return ok;
}

// Geometry of an f32 product run as one GEMM: C[rows, N] = A[rows, K] op(B) (+ bias).
}  // namespace

bool as_product(const Kernel& k, Product& p) {
  if (k.fused || !k.node || !all_f32(k)) return false;
  if (k.node->op == Op::Linear) {
    const Shape& ws = k.inputs[1].shape;
    p.N = ws[0];
    p.K = ws[1];
    p.rows = p.N ? k.output.numel() / p.N : 0;
    p.tb = true;
    p.ldb = p.K;
    return true;
  }
  if (k.node->op != Op::Matmul || k.node->attrs.b("transpose_a")) return false;
  const Shape &as = k.inputs[0].shape, &bs = k.inputs[1].shape, &os = k.output.shape;
  if (as.size() < 2 || bs.size() < 2 || os.size() < 2 || shape_numel(Shape(bs.begin(), bs.end() - 2)) != 1) return false;
  p.tb = k.node->attrs.b("transpose_b");
  p.N = os.back();
  p.K = as.back();
  p.rows = shape_numel(Shape(os.begin(), os.end() - 1));
  p.ldb = p.tb ? p.K : p.N;
  return true;
}

// ---------------- packed weights kept across plans ----------------
// A compiled plan packs each constant weight it multiplies (pack_b). A decoder run token by
// token is specialised, and compiled, once per cache length (docs/modes.md, "Growing shapes"):
// each compile packed every weight again (61% of a d-2048 token in `perf`). Packs of constant
// weights (those the executor uses in place, CpuBuffer::external: a model file's mapping, ONNX
// initializers; and those a plan computed once, or views of them) are kept here, keyed by the
// weight's address, layout and row count, and used only while that memory is alive (a weak
// reference to its owner), so a new plan of the same model takes them, and the steps of one
// plan that multiply the same weight share one pack (deepspeech's unrolled RNN: 398 steps).
std::shared_ptr<const cpu::PackedB> shared_pack(const TensorRef& w, const Product& p, bool* reused) {
  const auto* buf = static_cast<const CpuBuffer*>(w.buf);
  const float* data = ptr(w);
  using Key = std::tuple<const float*, bool, int64_t, int64_t, int64_t, int64_t>;
  struct Entry {
    std::weak_ptr<uint8_t> owner;
    std::shared_ptr<const cpu::PackedB> pack;
    uint64_t used = 0;
  };
  static std::mutex mu;
  static auto* cache = new std::map<Key, Entry>;  // never destroyed: packs outlive static destructors
  static uint64_t clock = 0;
  const Key key{data, p.tb, p.K, p.N, p.ldb, p.rows};
  {
    std::lock_guard<std::mutex> l(mu);
    auto it = cache->find(key);
    if (it != cache->end() && !it->second.owner.expired()) {
      it->second.used = ++clock;
      if (reused) *reused = true;
      return it->second.pack;
    }
  }
  auto pack = cpu::pack_b(p.tb, p.K, p.N, data, p.ldb, p.rows);  // outside the lock: slow
  std::lock_guard<std::mutex> l(mu);
  for (auto it = cache->begin(); it != cache->end();) it = it->second.owner.expired() ? cache->erase(it) : std::next(it);
  (*cache)[key] = Entry{buf->mem, pack, ++clock};
  // Packs no plan holds any more (only this cache does) are the ones that cost memory: the
  // least recently used of them go first beyond 64 MiB of such copies (or 256 packs).
  constexpr size_t kMaxPacks = 256, kIdleBytes = size_t(64) << 20;
  for (;;) {
    size_t idle = 0;
    auto oldest = cache->end();
    for (auto it = cache->begin(); it != cache->end(); ++it) {
      if (it->second.pack.use_count() > 1) continue;  // a plan uses it
      idle += it->second.pack->bytes();
      if (oldest == cache->end() || it->second.used < oldest->second.used) oldest = it;
    }
    if (oldest == cache->end() || (cache->size() <= kMaxPacks && idle <= kIdleBytes)) break;
    cache->erase(oldest);
  }
  return pack;
}

namespace {

std::string short_name(const Kernel& k) { return k.fused || !k.node ? k.label : "'" + k.node->id + "'"; }

size_t ref_bytes(const TensorRef& t) { return (size_t)std::max<int64_t>(t.numel(), 0) * dtype_size(t.dtype); }
bool overlaps(const TensorRef& a, const TensorRef& b) {
  if (a.buf != b.buf) return false;
  const size_t ae = a.offset + ref_bytes(a), be = b.offset + ref_bytes(b);
  return a.offset < be && b.offset < ae;
}
bool same_tensor(const TensorRef& a, const TensorRef& b) {
  return a.buf == b.buf && a.offset == b.offset && a.numel() == b.numel();
}

// Why `e` (kernels[j]) cannot run in the epilogue of product `l`, or "" when it can.
std::string epilogue_refusal(const Kernel& l, const std::vector<Kernel>& kernels, size_t j, FusedProgram& prog,
                             std::vector<char>& reads_c) {
  const Kernel& e = kernels[j];
  if (!all_f32(e)) return "not f32";
  if (e.fused) {
    prog = *e.fused;
  } else {
    const auto cat = ir::op_info(e.node->op).category;
    if (cat != ir::Category::Unary && cat != ir::Category::Binary) return "not elementwise";
    if (e.node->op == Op::Cast || e.node->op == Op::BroadcastTo || e.node->op == Op::Reshape || cpu::index_op_native(e))
      return "not a plain elementwise op";
    prog = FusedProgram{};
    prog.out_shape = e.output.shape;
    for (size_t i = 0; i < e.inputs.size(); ++i) {
      prog.code.push_back({FusedInstr::Load, EwOp::Add, (int32_t)i});
      prog.input_shapes.push_back(e.inputs[i].shape);
    }
    EwOp op = ir::node_ew_op(*e.node);
    if (ew_is_unary(op)) prog.code.push_back({FusedInstr::Unary, op, 0});
    else prog.code.push_back({FusedInstr::Binary, op, 0, 1});
    prog.result = (int)prog.code.size() - 1;
  }
  if (prog.result != (int)prog.code.size() - 1 || prog.input_shapes.size() != e.inputs.size()) return "program shape";
  if (e.output.numel() != l.output.numel()) return "output size differs from the product's";
  reads_c.assign(e.inputs.size(), 0);
  bool any = false;
  for (size_t i = 0; i < e.inputs.size(); ++i) {
    if (same_tensor(e.inputs[i], l.output)) reads_c[i] = any = true;
    else if (overlaps(e.inputs[i], l.output)) return "reads part of the product's output";
  }
  if (!any) return "does not read the product's output";
  if (l.graph_output) return "the product's output is a graph output";
  // e's output is written while the product still reads its inputs and writes its output.
  for (const auto& t : l.inputs)
    if (overlaps(e.output, t)) return "its output shares memory with the product's inputs";
  if (overlaps(e.output, l.output)) return "its output shares memory with the product's output";
  for (size_t i = 0; i < e.inputs.size(); ++i)
    if (!reads_c[i] && overlaps(e.output, e.inputs[i])) return "its output shares memory with its inputs";
  // Nothing after e reads the product's output (until something overwrites that memory).
  for (size_t q = j + 1; q < kernels.size(); ++q) {
    for (const auto& t : kernels[q].inputs)
      if (overlaps(t, l.output)) return "a later kernel reads the product's output";
    if (overlaps(kernels[q].output, l.output)) break;
  }
  return "";
}

}  // namespace

void run_product_step(const PlanStep& st) {
  const Kernel& k = st.k;
  Product p;
  as_product(k, p);
  if (p.rows == 0 || p.N == 0) return;
  const float* A = ptr(k.inputs[0]);
  float* C = ptr(k.output);
  cpu::Epilogue ep;
  if (k.node->op == Op::Linear && k.inputs.size() == 3) ep.bias = ptr(k.inputs[2]);
  std::unique_ptr<cpu::FusedSpans> spans;
  if (st.has_epi) {
    std::vector<const float*> ins;
    for (size_t i = 0; i < st.epi.inputs.size(); ++i) ins.push_back(st.epi_reads_c[i] ? C : ptr(st.epi.inputs[i]));
    spans = std::make_unique<cpu::FusedSpans>(st.epi_prog, ins, ptr(st.epi.output));
    const int64_t N = p.N;
    ep.custom = [&spans, N](float*, int64_t, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
      for (int64_t m = m0; m < m1; ++m) spans->run(m * N + n0, m * N + n1);
    };
  }
  if (st.packed) cpu::gemm_packed(p.rows, A, p.K, *st.packed, C, p.N, ep);
  else cpu::gemm(false, p.tb, p.rows, p.N, p.K, 1.f, A, p.K, ptr(k.inputs[1]), p.ldb, C, p.N, ep);
}

// A conv2d or conv3d whose weight (and bias) are constant, over f32: oneDNN may run it (dnnl_conv.h).
bool dnnl_conv_candidate(const Kernel& k) {
  if (k.fused || !k.node || (k.node->op != Op::Conv2d && k.node->op != Op::Conv3d) || !all_f32(k) || k.inputs.size() < 2)
    return false;
  const uint32_t need = k.inputs.size() == 3 ? 6u : 2u;
  return (k.const_inputs & need) == need && k.inputs[0].shape.size() == (k.node->op == Op::Conv3d ? 5u : 4u);
}

namespace {

std::shared_ptr<const cpu::DnnlConv> make_dnnl_conv(const Kernel& k, std::string* why, std::string* rule,
                                                    const std::vector<cpu::DnnlEltwise>* post) {
  return cpu::dnnl_conv_plan(k, ptr(k.inputs[1]), k.inputs.size() == 3 ? ptr(k.inputs[2]) : nullptr, why, rule, post);
}

// Runs a oneDNN convolution step, its epilogue on each slice it finishes; false if oneDNN failed.
}  // namespace

bool run_conv_step(const PlanStep& st) {
  const Kernel& k = st.k;
  float* Y = ptr(k.output);
  float* YB = st.blocked_out ? st.blocked_out->data() : nullptr;
  std::unique_ptr<cpu::FusedSpans> spans;
  std::function<void(int64_t, int64_t)> epi;
  if (st.epi_in_conv) {  // the primitive's post-ops compute the epilogue's result
    if (!YB) Y = ptr(st.epi.output);
  } else if (st.has_epi && YB) {  // in place over the blocked buffer, other inputs blocked too
    std::vector<const float*> ins(st.epi.inputs.size(), YB);
    for (size_t i = 0; i < st.epi_blocked_ins.size(); ++i)
      if (st.epi_blocked_ins[i]) ins[i] = st.epi_blocked_ins[i]->data();
    spans = std::make_unique<cpu::FusedSpans>(st.epi_blocked, ins, YB);
    epi = [&spans](int64_t b, int64_t e) { spans->run(b, e); };
  } else if (st.has_epi) {
    std::vector<const float*> ins;
    for (size_t i = 0; i < st.epi.inputs.size(); ++i) ins.push_back(st.epi_reads_c[i] ? Y : ptr(st.epi.inputs[i]));
    spans = std::make_unique<cpu::FusedSpans>(st.epi_prog, ins, ptr(st.epi.output));
    epi = [&spans](int64_t b, int64_t e) { spans->run(b, e); };
  }
  // Blocked: the NCHW result (the epilogue's output) is written after the epilogue, if at all.
  if (YB) Y = st.write_nchw ? ptr(st.has_epi ? st.epi.output : k.output) : nullptr;
  if (st.has_pre)
    return cpu::dnnl_conv_run(*st.conv, ptr(st.pre.inputs[st.pre_x]), Y, epi, st.blocked_in ? st.blocked_in->data() : nullptr,
                              YB, ptr(st.pre.inputs[1 - st.pre_x]));
  return cpu::dnnl_conv_run(*st.conv, ptr(k.inputs[0]), Y, epi, st.blocked_in ? st.blocked_in->data() : nullptr, YB);
}

void run_rlx_conv_step(const PlanStep& st) {
  const Kernel& k = st.k;
  if (!st.has_epi) return cpu::run_conv(k, ptr, nullptr);
  std::vector<const float*> ins;
  for (size_t i = 0; i < st.epi.inputs.size(); ++i) ins.push_back(st.epi_reads_c[i] ? ptr(k.output) : ptr(st.epi.inputs[i]));
  const cpu::FusedSpans spans(st.epi_prog, ins, ptr(st.epi.output));
  const cpu::SpanFn epi = [&spans](int64_t b, int64_t e) { spans.run(b, e); };
  cpu::run_conv(k, ptr, &epi);
}

// Runs a pool, concat or global mean on blocked inputs (PlanStep::bkind).
void run_blocked_step(const PlanStep& st) {
  const Kernel& k = st.k;
  const Shape& ys = k.output.shape;
  if (st.bkind == "mean") {
    const Shape& xs = k.inputs[0].shape;
    cpu::blocked_mean_hw(st.bins[0]->data(), xs[0], xs[1], xs[2] * xs[3], ptr(k.output));
    return;
  }
  float* yb = st.blocked_out->data();
  if (st.bkind == "pool") {
    const ir::Conv2dGeom g = ir::conv2d_geom(*k.node, {k.inputs[0].shape}, k.label);
    cpu::blocked_pool(g, k.node->op == Op::MaxPool2d, st.bins[0]->data(), yb);
  } else if (st.bkind == "pad") {
    const Shape& xs = k.inputs[0].shape;
    const auto& pads = k.node->attrs.ints("pads");
    cpu::blocked_pad(st.bins[0]->data(), xs[0], xs[1], xs[2], xs[3], pads[2], pads[3], ys[2], ys[3],
                     k.node->attrs.has("value") ? (float)k.node->attrs.f("value") : 0.f, yb);
  } else {
    std::vector<const float*> xs;
    std::vector<int64_t> cs;
    for (size_t i = 0; i < k.inputs.size(); ++i) {
      xs.push_back(st.bins[i]->data());
      cs.push_back(k.inputs[i].shape[1]);
    }
    cpu::blocked_concat(xs, cs, ys[0], ys[2] * ys[3], yb);
  }
  if (st.write_nchw) cpu::blocked_to_nchw(yb, ys[0], ys[1], ys[2] * ys[3], ptr(k.output));
}

// Whether kernels[j] is y = mul(x, s), s [N, C, 1, 1] per channel of x [N, C, H, W], that only
// the convolution kernels[j + 1] reads (as its input x); sets `xi` to x's input index.
namespace {

bool se_scale_before(const std::vector<Kernel>& kernels, size_t j, int& xi) {
  const Kernel& m = kernels[j];
  const Kernel& c = kernels[j + 1];
  if (m.fused || !m.node || m.node->op != Op::Mul || !all_f32(m) || m.inputs.size() != 2 || m.graph_output) return false;
  if (!same_tensor(c.inputs[0], m.output)) return false;
  const Shape& ys = m.output.shape;
  if (ys.size() != 4) return false;
  for (int i = 0; i < 2; ++i) {
    const Shape &xs = m.inputs[i].shape, &ss = m.inputs[1 - i].shape;
    if (xs == ys && ss == Shape{ys[0], ys[1], 1, 1}) {
      xi = i;
      // Nothing after the convolution reads y (until something overwrites its memory).
      for (size_t q = j + 2; q < kernels.size(); ++q) {
        for (const auto& t : kernels[q].inputs)
          if (overlaps(t, m.output)) return false;
        if (overlaps(kernels[q].output, m.output)) break;
      }
      return true;
    }
  }
  return false;
}

// Every tensor step q's kernels read and write.
template <class F>
void step_tensors(const PlanStep& q, F&& f) {
  if (q.has_pre)
    for (const auto& t : q.pre.inputs) f(t, false);
  for (const auto& t : q.k.inputs) f(t, false);
  if (q.has_epi)
    for (const auto& t : q.epi.inputs) f(t, false);
  f(q.k.output, true);
  if (q.has_epi) f(q.epi.output, true);
}

// Tensors kept in oneDNN's blocked layout between convolutions. A oneDNN convolution step whose
// epilogue, if any, reads nothing but its own output and tensors that are themselves kept
// blocked (a residual add of an earlier convolution's result, of the same shape) may produce its
// result F in a blocked buffer, its epilogue run over that buffer. Each later step that reads F
// before its memory is overwritten reads it blocked where it can: as a oneDNN convolution's input
// (blocked_in), or as an input of a convolution's epilogue run over the blocked buffer (the
// residual add, epi_blocked_ins). F is converted to NCHW as well (write_nchw) when any other step
// reads it or it is a graph output. Padding channels past a tensor's channel count hold values
// nothing uses: they meet zero weights in a convolution, and the conversion drops them. A
// producer that no step reads blocked, and whose epilogue reads nothing blocked, stays as
// before (converted in its tasks, its epilogue on NCHW). Returns the number of blocked reads.
int link_conv_chains(std::vector<PlanStep>& steps) {
  const size_t n = steps.size();
  std::vector<size_t> live;                 // producers whose result is still in its memory
  std::vector<TensorRef> result(n);         // per producer: F
  std::vector<char> nchw(n, 0), read(n, 0), epi_blocked(n, 0);
  std::vector<int> used(n, 0);  // per producer: the blocked reads of it
  std::vector<std::vector<size_t>> bsrc_of(n);  // per blocked pool / pad / concat / mean: its inputs' producers
  std::vector<size_t> last(n, 0);  // per producer: the last step that reads it blocked
  int links = 0;
  auto find_live = [&](const TensorRef& t) -> size_t {
    for (size_t a : live)
      if (same_tensor(result[a], t)) return a;
    return SIZE_MAX;
  };
  for (size_t q = 0; q < n; ++q) {
    PlanStep& sq = steps[q];
    size_t in_src = SIZE_MAX;
    // x (with squeeze-excitation's scale folded in: the product's x) read blocked where it is.
    if (sq.conv && cpu::dnnl_conv_blocked_in(*sq.conv))
      in_src = find_live(sq.has_pre ? sq.pre.inputs[sq.pre_x] : sq.k.inputs[0]);
    std::vector<size_t> srcs;
    const bool c_only = std::find(sq.epi_reads_c.begin(), sq.epi_reads_c.end(), 0) == sq.epi_reads_c.end();
    if (sq.conv && sq.has_epi) {
      epi_blocked[q] = 1;
      srcs.assign(sq.epi.inputs.size(), SIZE_MAX);
      for (size_t i = 0; i < sq.epi.inputs.size() && epi_blocked[q]; ++i) {
        if (sq.epi_reads_c[i]) continue;
        srcs[i] = find_live(sq.epi.inputs[i]);
        if (srcs[i] == SIZE_MAX || sq.epi.inputs[i].shape != sq.epi.output.shape ||
            steps[srcs[i]].k.output.shape != sq.k.output.shape)
          epi_blocked[q] = 0;
      }
      // Run over padding channels (channels off the block), the program must stay finite there.
      if (sq.k.output.shape[1] % cpu::blocked_block() && !cpu::blocked_finite(sq.epi_prog)) epi_blocked[q] = 0;
      if (c_only) epi_blocked[q] = 0;  // an activation: blocked when the result is
      if (!epi_blocked[q]) srcs.clear();
    }
    // A pool, concat or global mean whose inputs are all blocked runs on them.
    std::vector<size_t> bsrcs;
    const std::string bkind = sq.conv || sq.has_epi || sq.has_pre || sq.packed || sq.qpacked || sq.pack_later
                                  ? std::string() : cpu::blocked_kind(sq.k);
    if (!bkind.empty()) {
      for (const auto& t : sq.k.inputs) bsrcs.push_back(find_live(t));
      if (std::find(bsrcs.begin(), bsrcs.end(), SIZE_MAX) != bsrcs.end()) bsrcs.clear();
    }
    // Every read of a live result: blocked where this step can, else as NCHW.
    auto note = [&](const TensorRef& t, size_t blocked_src) {
      for (size_t a : live)
        if (overlaps(result[a], t)) {
          read[a] = 1;
          if (a == blocked_src) used[a]++, last[a] = q;
          else nchw[a] = 1;
        }
    };
    if (sq.has_pre)
      for (size_t i = 0; i < sq.pre.inputs.size(); ++i) note(sq.pre.inputs[i], (int)i == sq.pre_x ? in_src : SIZE_MAX);
    for (size_t i = 0; i < sq.k.inputs.size(); ++i)  // (with a prologue, input 0 is pre's output: never written)
      if (i > 0 || !sq.has_pre) note(sq.k.inputs[i], !bsrcs.empty() ? bsrcs[i] : i == 0 ? in_src : SIZE_MAX);
    if (sq.has_epi)
      for (size_t i = 0; i < sq.epi.inputs.size(); ++i)
        if (!sq.epi_reads_c[i]) note(sq.epi.inputs[i], srcs.empty() ? SIZE_MAX : srcs[i]);
    // Writes end the live results they overwrite; this step's result becomes live.
    step_tensors(sq, [&](const TensorRef& t, bool out) {
      if (out) live.erase(std::remove_if(live.begin(), live.end(), [&](size_t a) { return overlaps(result[a], t); }), live.end());
    });
    if (!bsrcs.empty()) {
      bsrc_of[q] = bsrcs;
      sq.bkind = bkind;
      for (size_t a : bsrcs) sq.bins.push_back(steps[a].blocked_out);
      links += (int)bsrcs.size();
    }
    if (!bsrcs.empty() && bkind != "mean") {
      result[q] = sq.k.output;
      nchw[q] = sq.k.graph_output;
      sq.blocked_out = std::make_shared<std::vector<float>>();
      epi_blocked[q] = 1;  // runs blocked: keeps its buffer
      live.push_back(q);
    } else if (sq.conv && (!sq.has_epi || epi_blocked[q] || c_only)) {
      result[q] = sq.has_epi ? sq.epi.output : sq.k.output;
      nchw[q] = sq.k.graph_output || (sq.has_epi && sq.epi.graph_output);
      sq.blocked_out = std::make_shared<std::vector<float>>();  // tentative: kept below when read blocked
      live.push_back(q);
    }
    if (in_src != SIZE_MAX) {
      sq.blocked_in = steps[in_src].blocked_out;
      links++;
    }
    for (size_t s : srcs) sq.epi_blocked_ins.push_back(s == SIZE_MAX ? nullptr : steps[s].blocked_out);
    links += epi_blocked[q];
  }
  // A concat whose result nothing reads blocked runs on NCHW after all: its inputs' blocks
  // would be copied and the whole result converted (DenseNet's concats, read by a batch norm),
  // where each input's NCHW conversion is smaller. Latest first: its inputs may be concats too.
  for (size_t q = n; q-- > 0;) {
    PlanStep& sq = steps[q];
    if (sq.bkind != "concat" || used[q]) continue;
    for (size_t a : bsrc_of[q]) {
      used[a]--;
      nchw[a] = 1;
    }
    links -= (int)sq.bins.size();
    sq.bkind.clear();
    sq.bins.clear();
    epi_blocked[q] = 0;
  }
  for (size_t a = 0; a < n; ++a) {
    PlanStep& sa = steps[a];
    if (!sa.blocked_out) continue;
    if (!used[a] && !epi_blocked[a]) {
      sa.blocked_out.reset();
      continue;
    }
    const Shape& ys = sa.k.output.shape;
    const int64_t floats = sa.conv ? cpu::dnnl_conv_blocked_out_floats(*sa.conv) : ys[0] * cpu::blocked_padded(ys[1]) * ys[2] * ys[3];
    sa.blocked_out->resize((size_t)floats);
    last[a] = std::max(last[a], a);
    sa.write_nchw = nchw[a] || !read[a];
    if (sa.has_epi) {
      sa.epi_blocked = sa.epi_prog;
      sa.epi_blocked.out_shape = {floats};
      for (auto& s : sa.epi_blocked.input_shapes) s = sa.epi_blocked.out_shape;
    }
  }
  // Buffers shared by producers whose lives do not overlap (from the producing step to the last
  // step that reads it blocked), as the arena shares the NCHW tensors' memory.
  using Buf = std::shared_ptr<std::vector<float>>;
  std::vector<std::pair<size_t, Buf>> busy;  // (last reader, buffer)
  std::vector<Buf> free_bufs;
  std::map<const std::vector<float>*, Buf> to;
  for (size_t a = 0; a < n; ++a) {
    if (!steps[a].blocked_out) continue;
    for (size_t i = 0; i < busy.size();)
      if (busy[i].first < a) {
        free_bufs.push_back(busy[i].second);
        busy.erase(busy.begin() + i);
      } else {
        ++i;
      }
    Buf mine = steps[a].blocked_out;
    if (!free_bufs.empty()) {  // the largest free one, grown if needed
      auto it = std::max_element(free_bufs.begin(), free_bufs.end(), [](const Buf& x, const Buf& y) { return x->size() < y->size(); });
      Buf b = *it;
      free_bufs.erase(it);
      if (b->size() < mine->size()) b->resize(mine->size());
      to[mine.get()] = b;
      mine->clear();
      mine->shrink_to_fit();
      mine = b;
    }
    busy.push_back({last[a], mine});
  }
  auto remap = [&](Buf& b) {
    if (!b) return;
    auto it = to.find(b.get());
    if (it != to.end()) b = it->second;
  };
  for (auto& st : steps) {
    remap(st.blocked_out);
    remap(st.blocked_in);
    for (auto& b : st.epi_blocked_ins) remap(b);
    for (auto& b : st.bins) remap(b);
  }
  return links;
}

std::string fmt_bytes_note(const std::string& layout, size_t bytes) {
  char b[64];
  std::snprintf(b, sizeof b, " packed once, %.3f MiB: ", bytes / 1048576.0);
  return b + layout;
}

}  // namespace

std::unique_ptr<CpuRecording> record_cpu_plan(const std::vector<Kernel>& kernels) {
  auto rec = std::make_unique<CpuRecording>();
  std::vector<std::string> lines;
  size_t packed_bytes = 0;
  int n_packed = 0, n_inplace = 0, n_fused = 0, n_later = 0, n_reused = 0, n_conv = 0;
  std::set<const void*> packs_seen;
  // The kernel after step st's (at i) becomes its epilogue where it can (i then skips it); the
  // plan line says which, or why not.
  auto attach_epilogue = [&](PlanStep& st, size_t& i, std::string& line) {
    if (i + 1 >= kernels.size()) return;
    const std::string why = epilogue_refusal(st.k, kernels, i + 1, st.epi_prog, st.epi_reads_c);
    if (!why.empty()) {
      line += " (next kernel " + short_name(kernels[i + 1]) + " not in the epilogue: " + why + ")";
      return;
    }
    st.has_epi = true;
    st.epi = kernels[i + 1];
    n_fused++;
    line += std::string(" + epilogue ") + (st.epi.fused ? "" : std::string(ir::op_name(st.epi.node->op)) + " ") +
            short_name(st.epi);
    ++i;
  };
  for (size_t i = 0; i < kernels.size(); ++i) {
    PlanStep st;
    st.k = kernels[i];
    if ((st.qpacked = cpu::pack_quant_weight(st.k))) {
      const auto& q = *st.qpacked;
      char b[256];
      std::snprintf(b, sizeof b, "  %s (%s, %lldx%lldx%lld): packed once, %.3f MiB: s8 panels of 16 columns + column sums "
                    "for qgemm (%s), weights in [%d, %d]\n",
                    short_name(st.k).c_str(), ir::op_name(st.k.node->op), (long long)(st.k.output.numel() / std::max<int64_t>(q.N, 1)),
                    (long long)q.N, (long long)q.K, q.bytes() / 1048576.0, cpu::qisa_name(cpu::qgemm_isa()), q.bmin, q.bmax);
      lines.push_back(b);
      packed_bytes += q.bytes();
      n_packed++;
      rec->steps.push_back(std::move(st));
      continue;
    }
    if (dnnl_conv_candidate(st.k)) {
      std::string line = "  " + short_name(st.k) + " (" + ir::op_name(st.k.node->op) + "):";
      std::string why;
      // An activation of its output alone, next, runs inside its kernel where oneDNN takes it.
      std::vector<cpu::DnnlEltwise> post;
      if (i + 1 < kernels.size()) {
        FusedProgram prog;
        std::vector<char> reads_c;
        if (epilogue_refusal(st.k, kernels, i + 1, prog, reads_c).empty() &&
            std::find(reads_c.begin(), reads_c.end(), 0) == reads_c.end() && !cpu::dnnl_post_ops_of(prog, &post))
          post.clear();
      }
      // Its primitives and packed weights are made now (a jit compilation and a reorder each).
      st.conv = make_dnnl_conv(st.k, &why, &st.conv_rule, &post);
      // A 1x1 convolution on a 1x1 map (squeeze-excitation's two products) is faster as rlx's one
      // product over the batch, in a chain too: its input and output are [N, C] either way.
      if (st.conv && !st.conv_rule.empty() && st.k.output.numel() == st.k.output.shape[0] * st.k.output.shape[1]) {
        why = st.conv_rule;
        st.conv.reset();
      }
      if (!st.conv) {  // rlx's kernel, its consumer fused all the same (run_rlx_conv_step)
        line += " rlx's kernel (" + why + ")";
        attach_epilogue(st, i, line);
        lines.push_back(line + "\n");
        rec->steps.push_back(std::move(st));
        continue;
      }
      line += " " + cpu::dnnl_conv_describe(*st.conv);
      int xi = 0;
      if (i > 0 && !rec->steps.empty() && cpu::dnnl_conv_blocked_in(*st.conv) && se_scale_before(kernels, i - 1, xi)) {
        const PlanStep& prev = rec->steps.back();
        if (!prev.has_epi && !prev.packed && !prev.qpacked && !prev.conv && !prev.pack_later && prev.k.node == kernels[i - 1].node &&
            same_tensor(prev.k.output, kernels[i - 1].output)) {
          st.has_pre = true;
          st.pre = kernels[i - 1];
          st.pre_x = xi;
          rec->steps.pop_back();
          n_fused++;
          line += " + prologue mul " + short_name(st.pre) + " (each input channel scaled while converted)";
        }
      }
      attach_epilogue(st, i, line);
      if (!st.has_epi && cpu::dnnl_conv_post_ops(*st.conv)) {  // (not expected: the same check as above)
        std::string why2, rule2;
        st.conv = make_dnnl_conv(st.k, &why2, &rule2, nullptr);
        if (!st.conv) {
          lines.push_back("  " + short_name(st.k) + " (" + ir::op_name(st.k.node->op) + "): rlx's kernel (" + why2 + ")\n");
          rec->steps.push_back(std::move(st));
          continue;
        }
      }
      if (st.has_epi && cpu::dnnl_conv_post_ops(*st.conv)) {
        st.epi_in_conv = true;
        line += " (in oneDNN's kernel)";
      }
      st.line = lines.size();
      lines.push_back(line);
      rec->steps.push_back(std::move(st));
      continue;
    }
    Product p;
    if (!as_product(st.k, p)) {
      rec->steps.push_back(std::move(st));
      continue;
    }
    std::string line = "  " + short_name(st.k) + " (" + ir::op_name(st.k.node->op) + ", " + std::to_string(p.rows) + "x" +
                       std::to_string(p.N) + "x" + std::to_string(p.K) + "):";
    if ((st.k.const_inputs & 2u) && p.rows > 16 && cpu::prepack_pays(p.rows)) {
      // Packing a large product's weight (oneDNN: creating its kernel and reordering, tens of
      // ms each) pays only when the plan runs again: a one-run process (`rlx run`) reads the
      // weight in place, and the weight is packed before the plan's second run.
      st.pack_later = true;
      n_later++;
      line += " weight read in place on the first run, packed before the second";
    } else if (st.k.const_inputs & 2u) {
      bool reused = false;
      if (cpu::prepack_pays(p.rows)) st.packed = shared_pack(st.k.inputs[1], p, &reused);
      n_reused += reused;
      if (st.packed && st.packed->bytes() > 0) {
        if (packs_seen.insert(st.packed.get()).second) packed_bytes += st.packed->bytes();  // shared: once
        n_packed++;
        line += fmt_bytes_note(st.packed->layout(), st.packed->bytes());
      } else {
        st.packed.reset();
        n_inplace++;
        line += " weight read in place, no copy";
      }
    }
    attach_epilogue(st, i, line);
    lines.push_back(line + "\n");
    rec->steps.push_back(std::move(st));
  }
  // oneDNN convolutions: chains kept blocked, then the rule for those converted at both edges.
  const int n_links = link_conv_chains(rec->steps);
  for (auto& st : rec->steps) {
    if (st.line == SIZE_MAX) continue;
    std::string& line = lines[st.line];
    if (st.conv && !st.conv_rule.empty() && !st.blocked_in && !st.blocked_out && !st.has_pre) {
      line = "  " + short_name(st.k) + " (" + ir::op_name(st.k.node->op) + "): rlx's kernel (" + st.conv_rule + ")" +
             (st.has_epi ? " + epilogue " + short_name(st.epi) + " (in rlx's kernel's tasks)" : "");
      st.conv.reset();
      st.epi_in_conv = false;
    } else if (st.conv) {
      n_conv++;
      if (st.blocked_in) line += "; input read blocked (as an earlier step left it)";
      bool epi_b = false;
      for (const auto& b : st.epi_blocked_ins) epi_b = epi_b || b;
      if (epi_b) line += "; epilogue run on the blocked layout, its other inputs read blocked";
      if (st.blocked_out) line += st.write_nchw ? "; output kept blocked for later steps, and converted to NCHW for other readers"
                                                : "; output kept blocked for later steps (no NCHW copy)";
    }
    line += "\n";
  }
  int n_blocked_ops = 0;
  for (const auto& st : rec->steps) {
    if (st.bkind.empty()) continue;
    n_blocked_ops++;
    std::string line = "  " + short_name(st.k) + " (" + ir::op_name(st.k.node->op) + "): on the blocked layout, " +
                       std::to_string(st.bins.size()) + (st.bins.size() == 1 ? " input" : " inputs") + " read blocked";
    if (st.blocked_out) line += st.write_nchw ? "; output blocked, and converted to NCHW for other readers" : "; output blocked (no NCHW copy)";
    lines.push_back(line + "\n");
  }
  if (!lines.empty()) {
    char head[512];
    std::snprintf(head, sizeof head,
                  "cpu recording: %d weights packed (%.3f MiB of packed copies; %d taken from an earlier plan), %d read "
                  "in place (no copy), %d packed before the second run, %d conv2d through oneDNN (%d links kept "
                  "blocked, %d pools/concats/means on the blocked layout), %d consumers run in a product's or convolution's epilogue\n",
                  n_packed, packed_bytes / 1048576.0, n_reused, n_inplace, n_later, n_conv, n_links, n_blocked_ops, n_fused);
    rec->text = head;
    for (const auto& l : lines) rec->text += l;
    if (n_packed)
      rec->text += "  (a packed weight's own memory is not read by this plan: a memory-mapped param stays file pages "
                   "the system may drop, not a second copy in memory)\n";
  }
  return rec;
}


}  // namespace rlx::cpu
