// The CPU's f64 kernels (ONNX models' double tensors; the graph format's JSON has no f64):
// elementwise ops (the formulas of lib/ir/elementwise.def evaluated in double), the sum / mean
// / max reductions and matrix products (OpenBLAS dgemm). Every value is computed in double,
// never through the executor's f32 adapter. Data movement, cast and the index ops (min, prod,
// cumsum, argmax, topk, gather, slice, pad, where, ...) run f64 natively elsewhere (bytes or
// cpu_ops_index.cpp); an op with neither is refused when the plan is built (f64_refusal).
#include "backends/cpu/ops_f64.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/access.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/thread_pool.h"
#include "core/error.h"
#include "ir/op_registry.h"

namespace rlx::cpu {

using ir::Op;

namespace {

void parallel(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  ThreadPool::global().parallel_for(n, grain, fn);
}

// A tensor's elements as f64: the tensor itself when it is f64, else an exact copy (integers
// up to 2^53 and every f32/f16/bf16/bool value are exact in double).
struct F64View {
  const double* p = nullptr;
  std::vector<double> copy;
  explicit F64View(const TensorRef& t) {
    if (stored_dtype(t) == DType::f64) {
      p = reinterpret_cast<const double*>(bytes(t));
      return;
    }
    copy.resize((size_t)std::max<int64_t>(t.numel(), 1));
    convert_elements(bytes(t), stored_dtype(t), copy.data(), DType::f64, t.numel());
    p = copy.data();
  }
};

// The output as f64: written in place when it is f64, else into scratch stored into its dtype
// (a compare's bool) by finish().
struct F64Out {
  const TensorRef& t;
  double* p = nullptr;
  std::vector<double> scratch;
  explicit F64Out(const TensorRef& out) : t(out) {
    if (out.dtype == DType::f64) {
      p = reinterpret_cast<double*>(bytes(out));
    } else {
      scratch.resize((size_t)std::max<int64_t>(out.numel(), 1));
      p = scratch.data();
    }
  }
  void finish() {
    if (t.dtype != DType::f64) convert_elements(p, DType::f64, bytes(t), t.dtype, t.numel());
  }
};

void run_elementwise(const Kernel& k) {
  const Shape& os = k.output.shape;
  const int64_t total = k.output.numel();
  const EwOp op = ir::node_ew_op(*k.node);
  const bool unary = ew_is_unary(op);
  F64View a(k.inputs[0]);
  std::unique_ptr<F64View> bv;
  if (!unary) bv = std::make_unique<F64View>(k.inputs[1]);
  const double* A = a.p;
  const double* B = unary ? nullptr : bv->p;
  F64Out y(k.output);
  const auto sa = broadcast_strides(k.inputs[0].shape, os);
  const auto sb = unary ? std::vector<int64_t>(os.size(), 0) : broadcast_strides(k.inputs[1].shape, os);
  const bool plain = k.inputs[0].shape == os && (unary || k.inputs[1].shape == os);
  parallel(total, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      int64_t ia = i, ib = i;
      if (!plain) {
        ia = ib = 0;
        int64_t rem = i;
        for (size_t d = os.size(); d-- > 0;) {
          const int64_t c = rem % os[d];
          rem /= os[d];
          ia += c * sa[d];
          ib += c * sb[d];
        }
      }
      y.p[i] = unary ? ew_apply_f64(op, A[ia]) : ew_apply_f64(op, A[ia], B[ib]);
    }
  });
  y.finish();
}

// sum, mean, max over `axes` (all when absent); max propagates NaN, as the f32 kernel.
void run_reduce(const Kernel& k) {
  const Shape& xs = k.inputs[0].shape;
  const int r = (int)xs.size();
  std::vector<bool> red(r, !k.node->attrs.has("axes"));
  if (k.node->attrs.has("axes"))
    for (auto ax : k.node->attrs.ints("axes")) red[ax < 0 ? ax + r : ax] = true;
  const auto cs = contiguous_strides(xs);
  Shape kd, rd;
  std::vector<int64_t> ks, rs;
  for (int d = 0; d < r; ++d) {
    (red[d] ? rd : kd).push_back(xs[d]);
    (red[d] ? rs : ks).push_back(cs[d]);
  }
  const int64_t R = shape_numel(rd), rows = k.output.numel();
  std::vector<int64_t> roff((size_t)R);  // offsets of one output's reduced elements
  for (int64_t j = 0; j < R; ++j) {
    int64_t rem = j, off = 0;
    for (size_t d = rd.size(); d-- > 0;) {
      off += (rem % rd[d]) * rs[d];
      rem /= rd[d];
    }
    roff[(size_t)j] = off;
  }
  F64View xv(k.inputs[0]);
  F64Out y(k.output);
  const double* x = xv.p;
  const Op op = k.node->op;
  parallel(rows, 16, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      int64_t rem = o, base = 0;
      for (size_t d = kd.size(); d-- > 0;) {
        base += (rem % kd[d]) * ks[d];
        rem /= kd[d];
      }
      if (op == Op::Max) {
        double m = -INFINITY;
        for (int64_t j = 0; j < R; ++j) {
          const double v = x[base + roff[(size_t)j]];
          m = (v > m || v != v) && m == m ? v : m;
        }
        y.p[o] = m;
      } else {
        double s = 0;
        for (int64_t j = 0; j < R; ++j) s += x[base + roff[(size_t)j]];
        y.p[o] = op == Op::Mean ? (R ? s / (double)R : NAN) : s;
      }
    }
  });
  y.finish();
}

void run_matmul(const Kernel& k) {
  const Shape &as = k.inputs[0].shape, &bs = k.inputs[1].shape, &os = k.output.shape;
  const bool ta = k.node->attrs.b("transpose_a"), tb = k.node->attrs.b("transpose_b");
  const int64_t M = os[os.size() - 2], N = os.back();
  const int64_t K = ta ? as[as.size() - 2] : as.back();
  F64View av(k.inputs[0]), bv(k.inputs[1]);
  F64Out y(k.output);
  const Shape ob(os.begin(), os.end() - 2), ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const int64_t batches = shape_numel(ob);
  if (batches > 0 && M > 0 && N > 0) {
    const auto bix = broadcast_batch_index(ab, bb, ob);
    for (int64_t bi = 0; bi < batches; ++bi) {
      const int64_t oa = bix.a[bi], obb = bix.b[bi];
      dgemm(ta, tb, M, N, K, av.p + oa * M * K, ta ? M : K, bv.p + obb * K * N, tb ? K : N, y.p + bi * M * N, N);
    }
  }
  y.finish();
}

void run_linear(const Kernel& k) {
  const Shape& ws = k.inputs[1].shape;
  const int64_t Out = ws[0], In = ws[1], rows = Out ? k.output.numel() / Out : 0;
  F64View xv(k.inputs[0]), wv(k.inputs[1]);
  F64Out y(k.output);
  if (rows > 0 && Out > 0) {
    dgemm(false, true, rows, Out, In, xv.p, In, wv.p, In, y.p, Out);
    if (k.inputs.size() == 3) {
      F64View bias(k.inputs[2]);
      parallel(rows, 64, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t j = 0; j < Out; ++j) y.p[r * Out + j] += bias.p[j];
      });
    }
  }
  y.finish();
}

bool has_f64(const Kernel& k) {
  if (k.output.dtype == DType::f64) return true;
  for (const auto& t : k.inputs)
    if (t.dtype == DType::f64) return true;
  return false;
}

}  // namespace

bool touches_f64(const Kernel& k) { return !k.fused && k.node && has_f64(k); }

void run_f64(const Kernel& k) {
  const auto cat = ir::op_info(k.node->op).category;
  switch (k.node->op) {
    case Op::Sum: case Op::Mean: case Op::Max: return run_reduce(k);
    case Op::Matmul: return run_matmul(k);
    case Op::Linear: return run_linear(k);
    default: break;
  }
  if ((cat == ir::Category::Unary || cat == ir::Category::Binary) && k.node->op != Op::Cast) return run_elementwise(k);
  throw RuntimeError(k.label + ": internal: the CPU executor has no f64 kernel for " + ir::op_name(k.node->op));
}

std::string f64_refusal(const ir::Node& n) {
  const auto cat = ir::op_info(n.op).category;
  switch (cat) {
    case ir::Category::Leaf: case ir::Category::Unary: case ir::Category::Binary: case ir::Category::Shape:
    case ir::Category::Control:
      return "";
    default: break;
  }
  switch (n.op) {
    case Op::Sum: case Op::Mean: case Op::Max: case Op::Min: case Op::Prod:  // reductions
    case Op::Matmul: case Op::Linear: case Op::Embedding:
    case Op::Where: case Op::ArgMax: case Op::ArgMin: case Op::CumSum: case Op::TopK: case Op::Gather:
    case Op::GatherElements: case Op::Slice: case Op::Pad: case Op::Trilu:
      return "";
    default:
      return std::string("the CPU executor has no f64 kernel for ") + ir::op_name(n.op) +
             " (f64 runs elementwise ops, reductions, matmul/linear, cast, shape and index ops); cast to f32 first";
  }
}

}  // namespace rlx::cpu
