// CPU kernels of the ONNX-style ops: min/prod reductions, where, argmax/argmin, cumsum,
// topk, gather, gather_elements, slice, pad and trilu (see ops_index.h).
//
// Values are f32 in memory today (core/dtype.h). Integer and bool elements are read and
// written ONLY through the helpers below (index_at, store_index, truth_at, store_bool),
// so that real integer storage changes these few lines, not every kernel.
#include "backends/cpu/ops_index.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "core/error.h"
#include "ir/op_registry.h"

namespace rlx::cpu {
namespace {

using ir::Op;
using Strides = std::vector<int64_t>;

// ---------------- element access of integer and bool tensors ----------------
// Element i of an integer tensor (indices). Values beyond +-2^62 (only reachable from
// a non-integer float) read as INT64_MAX, which every range check refuses.
int64_t index_at(const float* p, int64_t i) {
  float f = p[i];
  if (!(f > -0x1p62f && f < 0x1p62f)) return INT64_MAX;
  return (int64_t)f;
}
void store_index(float* p, int64_t i, int64_t v) { p[i] = (float)v; }
bool truth_at(const float* p, int64_t i) { return p[i] != 0.f; }  // bool (or any) tensor: nonzero is true

void parallel(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  ThreadPool::global().parallel_for(n, grain, fn);
}

// Views a tensor as [outer, len, inner] around `axis`.
struct Axis3 {
  int64_t outer = 1, len = 1, inner = 1;
};
Axis3 around(const Shape& s, int axis) {
  Axis3 v;
  for (int k = 0; k < (int)s.size(); ++k) {
    if (k < axis) v.outer *= s[k];
    else if (k == axis) v.len = s[k];
    else v.inner *= s[k];
  }
  return v;
}

int axis_attr(const Kernel& k, const char* name, int rank) {
  int64_t a = k.node->attrs.i(name);
  return (int)(a < 0 ? a + rank : a);
}

// Calls fn(i, off) for output elements i in [b, e) of `shape`, where off[j] is the element
// offset (base[j] + coordinates . strides[j]) of operand j. An odometer: no division per element.
template <class F>
void walk(const Shape& shape, const std::vector<Strides>& st, const std::vector<int64_t>& base, int64_t b, int64_t e,
          F&& fn) {
  const size_t r = shape.size(), m = st.size();
  std::vector<int64_t> coord(r, 0), off(base);
  int64_t rem = b;
  for (size_t d = r; d-- > 0;) {
    coord[d] = shape[d] ? rem % shape[d] : 0;
    rem = shape[d] ? rem / shape[d] : 0;
    for (size_t j = 0; j < m; ++j) off[j] += coord[d] * st[j][d];
  }
  for (int64_t i = b; i < e; ++i) {
    fn(i, off);
    for (size_t d = r; d-- > 0;) {
      for (size_t j = 0; j < m; ++j) off[j] += st[j][d];
      if (++coord[d] < shape[d]) break;
      for (size_t j = 0; j < m; ++j) off[j] -= coord[d] * st[j][d];
      coord[d] = 0;
    }
  }
}

[[noreturn]] void index_error(const Kernel& k, int64_t v, int64_t pos, int64_t dim, bool negative_ok) {
  std::string shown = v == INT64_MAX ? std::string("(not an integer in range)") : std::to_string(v);
  throw RuntimeError(k.label + ": index " + shown + " at position " + std::to_string(pos) + " is outside [" +
                     std::to_string(negative_ok ? -dim : 0) + ", " + std::to_string(dim) + ")");
}

// ---------------- min / prod over axes ----------------
void run_min_prod(const Kernel& k, TensorPtrFn ptr) {
  const Shape& xs = k.inputs[0].shape;
  const int r = (int)xs.size();
  std::vector<bool> red(r, !k.node->attrs.has("axes"));
  if (k.node->attrs.has("axes"))
    for (auto a : k.node->attrs.ints("axes")) red[a < 0 ? a + r : a] = true;
  Strides cs = contiguous_strides(xs);
  Shape kd, rd;
  Strides ks, rs;
  for (int d = 0; d < r; ++d) {
    (red[d] ? rd : kd).push_back(xs[d]);
    (red[d] ? rs : ks).push_back(cs[d]);
  }
  const int64_t nred = shape_numel(rd), nout = k.output.numel();
  const float* x = ptr(k.inputs[0]);
  float* y = ptr(k.output);
  const bool is_min = k.node->op == Op::Min;
  parallel(nout, 16, [&](int64_t b, int64_t e) {
    walk(kd, {ks}, {0}, b, e, [&](int64_t o, const std::vector<int64_t>& base) {
      double acc = is_min ? INFINITY : 1.0;
      bool nan = false;
      walk(rd, {rs}, {base[0]}, 0, nred, [&](int64_t, const std::vector<int64_t>& off) {
        float v = x[off[0]];
        nan = nan || v != v;
        acc = is_min ? std::min<double>(acc, v) : acc * v;
      });
      y[o] = nan ? NAN : (float)acc;
    });
  });
}

// ---------------- where ----------------
void run_where(const Kernel& k, TensorPtrFn ptr) {
  const Shape& os = k.output.shape;
  std::vector<Strides> st;
  for (int j = 0; j < 3; ++j) st.push_back(broadcast_strides(k.inputs[j].shape, os));
  const float *c = ptr(k.inputs[0]), *x = ptr(k.inputs[1]), *yv = ptr(k.inputs[2]);
  float* out = ptr(k.output);
  parallel(k.output.numel(), 1 << 12, [&](int64_t b, int64_t e) {
    walk(os, st, {0, 0, 0}, b, e, [&](int64_t i, const std::vector<int64_t>& off) {
      out[i] = truth_at(c, off[0]) ? x[off[1]] : yv[off[2]];
    });
  });
}

// ---------------- argmax / argmin ----------------
void run_arg(const Kernel& k, TensorPtrFn ptr) {
  const Shape& xs = k.inputs[0].shape;
  Axis3 v = around(xs, axis_attr(k, "axis", (int)xs.size()));
  const bool is_max = k.node->op == Op::ArgMax, last = k.node->attrs.b("select_last_index");
  const float* x = ptr(k.inputs[0]);
  float* y = ptr(k.output);
  parallel(v.outer * v.inner, 64, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* row = x + (t / v.inner) * v.len * v.inner + t % v.inner;
      int64_t best = 0;
      float bv = row[0];
      // NaN counts as the extreme value (as NumPy): the first NaN wins.
      for (int64_t j = 1; j < v.len && bv == bv; ++j) {
        float c = row[j * v.inner];
        bool better = c != c || (is_max ? c > bv : c < bv) || (last && c == bv);
        if (better) best = j, bv = c;
      }
      store_index(y, t, best);
    }
  });
}

// ---------------- cumsum ----------------
void run_cumsum(const Kernel& k, TensorPtrFn ptr) {
  const Shape& xs = k.inputs[0].shape;
  Axis3 v = around(xs, axis_attr(k, "axis", (int)xs.size()));
  const bool excl = k.node->attrs.b("exclusive"), rev = k.node->attrs.b("reverse");
  const float* x = ptr(k.inputs[0]);
  float* y = ptr(k.output);
  parallel(v.outer * v.inner, 64, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t base = (t / v.inner) * v.len * v.inner + t % v.inner;
      double s = 0;
      for (int64_t q = 0; q < v.len; ++q) {
        int64_t j = rev ? v.len - 1 - q : q;
        float xv = x[base + j * v.inner];
        if (!excl) s += xv;
        y[base + j * v.inner] = (float)s;
        if (excl) s += xv;
      }
    }
  });
}

// ---------------- topk ----------------
void run_topk(const Kernel& k, TensorPtrFn ptr) {
  const Shape& xs = k.inputs[0].shape;
  const int axis = axis_attr(k, "axis", (int)xs.size());
  Axis3 v = around(xs, axis);
  const int64_t K = k.output.shape[axis];
  const bool largest = k.node->attrs.b("largest"), want_idx = k.node->attrs.s("select") == "indices";
  const float* x = ptr(k.inputs[0]);
  float* y = ptr(k.output);
  if (K == 0) return;
  parallel(v.outer * v.inner, 16, [&](int64_t b, int64_t e) {
    std::vector<int64_t> ord(v.len);
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / v.inner, i = t % v.inner;
      const float* row = x + o * v.len * v.inner + i;
      for (int64_t j = 0; j < v.len; ++j) ord[j] = j;
      // Value order (NaN above every number), ties to the lower index: a strict weak order.
      auto before = [&](int64_t a, int64_t c) {
        float va = row[a * v.inner], vc = row[c * v.inner];
        bool na = va != va, nc = vc != vc;
        if (na || nc) {
          if (na && nc) return a < c;
          return largest ? na : nc;
        }
        if (va != vc) return largest ? va > vc : va < vc;
        return a < c;
      };
      std::partial_sort(ord.begin(), ord.begin() + K, ord.end(), before);
      float* out = y + o * K * v.inner + i;
      for (int64_t j = 0; j < K; ++j) {
        if (want_idx) store_index(out, j * v.inner, ord[j]);
        else out[j * v.inner] = row[ord[j] * v.inner];
      }
    }
  });
}

// ---------------- gather / gather_elements ----------------
void run_gather(const Kernel& k, TensorPtrFn ptr) {
  const Shape& ds = k.inputs[0].shape;
  const int axis = axis_attr(k, "axis", (int)ds.size());
  Axis3 v = around(ds, axis);
  const int64_t n = k.inputs[1].numel(), D = v.len;
  const float* data = ptr(k.inputs[0]);
  const float* idx = ptr(k.inputs[1]);
  float* y = ptr(k.output);
  std::vector<int64_t> rows(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t j = index_at(idx, i);
    if (j < -D || j >= D) index_error(k, j, i, D, true);
    rows[i] = j < 0 ? j + D : j;
  }
  parallel(v.outer * n, 64, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / n, i = t % n;
      std::memcpy(y + t * v.inner, data + (o * D + rows[i]) * v.inner, v.inner * 4);
    }
  });
}

void run_gather_elements(const Kernel& k, TensorPtrFn ptr) {
  const Shape &ds = k.inputs[0].shape, &is = k.inputs[1].shape;
  const int r = (int)ds.size(), axis = axis_attr(k, "axis", r);
  const int64_t D = ds[axis], n = k.output.numel();
  Strides dst = contiguous_strides(ds), ist = contiguous_strides(is), walk_st = dst;
  walk_st[axis] = 0;  // the axis coordinate comes from the index
  const float* data = ptr(k.inputs[0]);
  const float* idx = ptr(k.inputs[1]);
  float* y = ptr(k.output);
  for (int64_t i = 0; i < n; ++i) {
    int64_t j = index_at(idx, i);
    if (j < -D || j >= D) index_error(k, j, i, D, true);
  }
  parallel(n, 1 << 12, [&](int64_t b, int64_t e) {
    walk(is, {walk_st}, {0}, b, e, [&](int64_t i, const std::vector<int64_t>& off) {
      int64_t j = index_at(idx, i);
      y[i] = data[off[0] + (j < 0 ? j + D : j) * dst[axis]];
    });
  });
}

// ---------------- slice / pad / trilu ----------------
void run_slice(const Kernel& k, TensorPtrFn ptr) {
  const Shape& xs = k.inputs[0].shape;
  std::string err;
  auto plan = ir::slice_plan(k.node->attrs, xs, &err);
  if (!err.empty()) throw RuntimeError(k.label + ": " + err);
  Strides cs = contiguous_strides(xs), st(xs.size());
  int64_t base = 0;
  for (size_t d = 0; d < xs.size(); ++d) {
    base += plan[d].start * cs[d];
    st[d] = plan[d].step * cs[d];
  }
  const float* x = ptr(k.inputs[0]);
  float* y = ptr(k.output);
  parallel(k.output.numel(), 1 << 12, [&](int64_t b, int64_t e) {
    walk(k.output.shape, {st}, {base}, b, e, [&](int64_t i, const std::vector<int64_t>& off) { y[i] = x[off[0]]; });
  });
}

void run_pad(const Kernel& k, TensorPtrFn ptr) {
  const Shape &xs = k.inputs[0].shape, &os = k.output.shape;
  const int r = (int)xs.size();
  const auto& pads = k.node->attrs.ints("pads");
  const std::string& mode = k.node->attrs.s("mode");
  const float value = (float)k.node->attrs.f("value");
  // Per axis and output coordinate: the source element's offset along that axis, or -1 (the pad value).
  Strides cs = contiguous_strides(xs);
  std::vector<std::vector<int64_t>> src(r);
  for (int d = 0; d < r; ++d) {
    const int64_t n = xs[d];
    src[d].resize(os[d]);
    for (int64_t o = 0; o < os[d]; ++o) {
      int64_t i = o - pads[d];
      if (i < 0 || i >= n) {
        if (mode == "edge") i = std::clamp<int64_t>(i, 0, n - 1);
        else if (mode == "reflect") i = i < 0 ? -i : 2 * (n - 1) - i;  // pads <= n - 1: one reflection
        else i = -1;
      }
      src[d][o] = i < 0 ? -1 : i * cs[d];
    }
  }
  const float* x = ptr(k.inputs[0]);
  float* y = ptr(k.output);
  const int64_t inner = r ? os[r - 1] : 1, rows = inner ? k.output.numel() / inner : 0;
  parallel(rows, 16, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t rem = row, off = 0;
      bool pad = false;
      for (int d = r - 2; d >= 0; --d) {
        int64_t s = src[d][rem % os[d]];
        rem /= os[d];
        pad = pad || s < 0;
        off += s;
      }
      float* yr = y + row * inner;
      if (r == 0) {
        yr[0] = x[0];
        continue;
      }
      for (int64_t j = 0; j < inner; ++j) {
        int64_t s = src[r - 1][j];
        yr[j] = pad || s < 0 ? value : x[off + s];
      }
    }
  });
}

void run_trilu(const Kernel& k, TensorPtrFn ptr) {
  const Shape& xs = k.inputs[0].shape;
  const int64_t N = xs[xs.size() - 2], M = xs.back(), kk = k.node->attrs.i("k");
  const bool upper = k.node->attrs.b("upper");
  const float* x = ptr(k.inputs[0]);
  float* y = ptr(k.output);
  const int64_t rows = M ? k.output.numel() / M : 0;
  parallel(rows, 64, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const int64_t i = row % N;
      for (int64_t j = 0; j < M; ++j) {
        bool keep = upper ? j - i >= kk : j - i <= kk;
        y[row * M + j] = keep ? x[row * M + j] : 0.f;
      }
    }
  });
}

}  // namespace

bool run_index_op(const Kernel& k, TensorPtrFn ptr) {
  if (!k.node) return false;
  switch (k.node->op) {
    case Op::Min: case Op::Prod: run_min_prod(k, ptr); return true;
    case Op::Where: run_where(k, ptr); return true;
    case Op::ArgMax: case Op::ArgMin: run_arg(k, ptr); return true;
    case Op::CumSum: run_cumsum(k, ptr); return true;
    case Op::TopK: run_topk(k, ptr); return true;
    case Op::Gather: run_gather(k, ptr); return true;
    case Op::GatherElements: run_gather_elements(k, ptr); return true;
    case Op::Slice: run_slice(k, ptr); return true;
    case Op::Pad: run_pad(k, ptr); return true;
    case Op::Trilu: run_trilu(k, ptr); return true;
    default: return false;
  }
}

}  // namespace rlx::cpu
