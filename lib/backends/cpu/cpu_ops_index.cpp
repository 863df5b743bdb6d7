// CPU kernels of the ONNX-style ops: min/prod reductions, where, argmax/argmin, cumsum,
// topk, gather, gather_elements, slice, pad, trilu, and compares of integer tensors
// (see ops_index.h).
//
// Tensors are stored in their dtype (backends/cpu/access.h). These kernels are native
// (index_op_native): they run on the stored elements themselves, so i64 values, indices
// and bools are exact; where index_op_native says no (e.g. f16 data with an f32 output),
// the executor's adapter hands them f32 copies and they run with f32 elements. Either
// way every kernel looks at stored_dtype(). Integer and bool elements of index, cond and
// index-output tensors are read and written ONLY through the helpers below (index_at,
// store_index, truths).
#include "backends/cpu/ops_index.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "backends/cpu/access.h"
#include "backends/cpu/minmax.h"
#include "backends/cpu/thread_pool.h"
#include "core/error.h"
#include "ir/op_registry.h"

namespace rlx::cpu {
namespace {

using ir::Op;
using Strides = std::vector<int64_t>;

// ---------------- element access of integer and bool tensors ----------------
DType stored(const TensorRef& t) { return stored_dtype(t); }
template <class T>
T* at(const TensorRef& t) {
  return reinterpret_cast<T*>(bytes(t));
}
// Element i of an index tensor: exact for i32/i64; a float (adapter copy) truncates toward zero.
int64_t index_of(const TensorRef& t, int64_t i) { return index_at(t, i); }
// Element i of an index output (i64, or f32 in an adapter copy).
void store_index(const TensorRef& t, int64_t i, int64_t v) {
  switch (stored(t)) {
    case DType::i64: at<int64_t>(t)[i] = v; return;
    case DType::i32: at<int32_t>(t)[i] = (int32_t)v; return;
    case DType::f32: at<float>(t)[i] = (float)v; return;
    default: throw RuntimeError(std::string("internal: an index output stored as ") + dtype_name(stored(t)));
  }
}
// A cond tensor as 0/1 bytes: nonzero (and NaN) is true.
std::vector<uint8_t> truths(const TensorRef& t) {
  std::vector<uint8_t> r((size_t)t.numel());
  convert_elements(bytes(t), stored(t), r.data(), DType::boolean, t.numel());
  return r;
}

// Calls f(T{}) with T the C++ type of the stored numeric dtype (f32, f64, i32, i64).
template <class F>
void numeric(const Kernel& k, const TensorRef& t, F&& f) {
  switch (stored(t)) {
    case DType::f32: f(float{}); return;
    case DType::f64: f(double{}); return;
    case DType::i32: f(int32_t{}); return;
    case DType::i64: f(int64_t{}); return;
    default: throw RuntimeError(k.label + ": internal: no kernel for " + dtype_name(stored(t)) + " elements");
  }
}
// Calls f(U{}) with U an unsigned type of the element size (elements moved unchanged).
template <class F>
void by_size(const TensorRef& t, F&& f) {
  switch (dtype_size(stored(t))) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    default: f(uint64_t{}); return;
  }
}

void parallel(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  ThreadPool::global().parallel_for(n, grain, fn);
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

[[noreturn]] void index_error(const Kernel& k, int64_t v, int64_t pos, int64_t dim) {
  throw RuntimeError(k.label + ": index " + std::to_string(v) + " at position " + std::to_string(pos) +
                     " is outside [" + std::to_string(-dim) + ", " + std::to_string(dim) + ")");
}

// ---------------- min / prod over axes ----------------
template <class T>
void run_min_prod_t(const Kernel& k) {
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
  const T* x = at<const T>(k.inputs[0]);
  T* y = at<T>(k.output);
  const bool is_min = k.node->op == Op::Min;
  if constexpr (std::is_same_v<T, float>) {
    // min over trailing axes of a contiguous f32 tensor (a whole-tensor min, as dynamic
    // quantization takes): each output reads one contiguous run; 16 running minima break the
    // dependency chain (and let the compiler vectorise), NaN propagates as above.
    bool suffix = true;
    for (int d = 0; d + 1 < r; ++d) suffix = suffix && !(red[d] && !red[d + 1]);
    if (is_min && suffix && nred > 0) {
      auto run_min = [](const float* p, int64_t n, bool* nan) {
        float m[16];
        bool bad[16] = {};
        for (int j = 0; j < 16; ++j) m[j] = INFINITY;
        int64_t i = 0;
        for (; i + 16 <= n; i += 16)
          for (int j = 0; j < 16; ++j) {
            const float v = p[i + j];
            bad[j] |= v != v;
            m[j] = v < m[j] ? v : m[j];
          }
        float acc = INFINITY;
        bool any = false;
        for (; i < n; ++i) any |= p[i] != p[i], acc = p[i] < acc ? p[i] : acc;
        for (int j = 0; j < 16; ++j) any |= bad[j], acc = m[j] < acc ? m[j] : acc;
        *nan = *nan || any;
        return acc;
      };
      if (nout == 1) {  // a whole-tensor min: one vector pass (minmax.h)
        y[0] = minmax_f32(x, nred).min;
      } else {
        parallel(nout, std::max<int64_t>(1, 4096 / nred), [&](int64_t b, int64_t e) {
          for (int64_t o = b; o < e; ++o) {
            bool nan = false;
            const float v = run_min(x + o * nred, nred, &nan);
            y[o] = nan ? NAN : v;
          }
        });
      }
      return;
    }
  }
  parallel(nout, 16, [&](int64_t b, int64_t e) {
    walk(kd, {ks}, {0}, b, e, [&](int64_t o, const std::vector<int64_t>& base) {
      if constexpr (std::is_floating_point_v<T>) {
        double acc = is_min ? INFINITY : 1.0;
        bool nan = false;
        walk(rd, {rs}, {base[0]}, 0, nred, [&](int64_t, const std::vector<int64_t>& off) {
          T v = x[off[0]];
          nan = nan || v != v;
          acc = is_min ? std::min<double>(acc, v) : acc * v;
        });
        y[o] = nan ? (T)NAN : (T)acc;
      } else {  // integers: exact, prod wraps in two's complement (as NumPy)
        int64_t mn = INT64_MAX;
        uint64_t pr = 1;
        walk(rd, {rs}, {base[0]}, 0, nred, [&](int64_t, const std::vector<int64_t>& off) {
          int64_t v = x[off[0]];
          mn = std::min(mn, v);
          pr *= (uint64_t)v;
        });
        y[o] = is_min ? (T)mn : (T)(int64_t)pr;
      }
    });
  });
}

// ---------------- where ----------------
void run_where(const Kernel& k) {
  const Shape& os = k.output.shape;
  std::vector<Strides> st;
  for (int j = 0; j < 3; ++j) st.push_back(broadcast_strides(k.inputs[j].shape, os));
  const std::vector<uint8_t> c = truths(k.inputs[0]);
  by_size(k.output, [&](auto u) {
    using U = decltype(u);
    const U *x = at<const U>(k.inputs[1]), *yv = at<const U>(k.inputs[2]);
    U* out = at<U>(k.output);
    parallel(k.output.numel(), 1 << 12, [&](int64_t b, int64_t e) {
      walk(os, st, {0, 0, 0}, b, e, [&](int64_t i, const std::vector<int64_t>& off) {
        out[i] = c[off[0]] ? x[off[1]] : yv[off[2]];
      });
    });
  });
}

// ---------------- argmax / argmin ----------------
template <class T>
void run_arg_t(const Kernel& k) {
  const Shape& xs = k.inputs[0].shape;
  Axis3 v = around(xs, axis_attr(k, "axis", (int)xs.size()));
  const bool is_max = k.node->op == Op::ArgMax, last = k.node->attrs.b("select_last_index");
  const T* x = at<const T>(k.inputs[0]);
  parallel(v.outer * v.inner, 64, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const T* row = x + (t / v.inner) * v.len * v.inner + t % v.inner;
      int64_t best = 0;
      T bv = row[0];
      // NaN counts as the extreme value (as NumPy): the first NaN wins.
      for (int64_t j = 1; j < v.len && bv == bv; ++j) {
        T c = row[j * v.inner];
        bool better = c != c || (is_max ? c > bv : c < bv) || (last && c == bv);
        if (better) best = j, bv = c;
      }
      store_index(k.output, t, best);
    }
  });
}

// ---------------- cumsum ----------------
template <class T>
void run_cumsum_t(const Kernel& k) {
  const Shape& xs = k.inputs[0].shape;
  Axis3 v = around(xs, axis_attr(k, "axis", (int)xs.size()));
  const bool excl = k.node->attrs.b("exclusive"), rev = k.node->attrs.b("reverse");
  const T* x = at<const T>(k.inputs[0]);
  T* y = at<T>(k.output);
  // Floats sum in double; integers exactly, wrapping in two's complement (as NumPy).
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;
  parallel(v.outer * v.inner, 64, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t base = (t / v.inner) * v.len * v.inner + t % v.inner;
      Acc s = 0;
      for (int64_t q = 0; q < v.len; ++q) {
        int64_t j = rev ? v.len - 1 - q : q;
        T xv = x[base + j * v.inner];
        if (!excl) s += (Acc)xv;
        y[base + j * v.inner] = std::is_floating_point_v<T> ? (T)s : (T)(int64_t)s;
        if (excl) s += (Acc)xv;
      }
    }
  });
}

// ---------------- topk ----------------
template <class T>
void run_topk_t(const Kernel& k) {
  const Shape& xs = k.inputs[0].shape;
  const int axis = axis_attr(k, "axis", (int)xs.size());
  Axis3 v = around(xs, axis);
  const int64_t K = k.output.shape[axis];
  const bool largest = k.node->attrs.b("largest"), want_idx = k.node->attrs.s("select") == "indices";
  const T* x = at<const T>(k.inputs[0]);
  if (K == 0) return;
  parallel(v.outer * v.inner, 16, [&](int64_t b, int64_t e) {
    std::vector<int64_t> ord(v.len);
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / v.inner, i = t % v.inner;
      const T* row = x + o * v.len * v.inner + i;
      for (int64_t j = 0; j < v.len; ++j) ord[j] = j;
      // Value order (NaN above every number), ties to the lower index: a strict weak order.
      auto before = [&](int64_t a, int64_t c) {
        T va = row[a * v.inner], vc = row[c * v.inner];
        bool na = va != va, nc = vc != vc;
        if (na || nc) {
          if (na && nc) return a < c;
          return largest ? na : nc;
        }
        if (va != vc) return largest ? va > vc : va < vc;
        return a < c;
      };
      std::partial_sort(ord.begin(), ord.begin() + K, ord.end(), before);
      const int64_t out0 = o * K * v.inner + i;
      for (int64_t j = 0; j < K; ++j) {
        if (want_idx) store_index(k.output, out0 + j * v.inner, ord[j]);
        else at<T>(k.output)[out0 + j * v.inner] = row[ord[j] * v.inner];
      }
    }
  });
}

// ---------------- gather / gather_elements ----------------
void run_gather(const Kernel& k) {
  const Shape& ds = k.inputs[0].shape;
  const int axis = axis_attr(k, "axis", (int)ds.size());
  Axis3 v = around(ds, axis);
  const int64_t n = k.inputs[1].numel(), D = v.len;
  const size_t es = dtype_size(stored(k.output)), row = (size_t)v.inner * es;
  const uint8_t* data = bytes(k.inputs[0]);
  uint8_t* y = bytes(k.output);
  std::vector<int64_t> rows(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t j = index_of(k.inputs[1], i);
    if (j < -D || j >= D) index_error(k, j, i, D);
    rows[i] = j < 0 ? j + D : j;
  }
  if (row == 0) return;
  parallel(v.outer * n, 64, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / n, i = t % n;
      std::memcpy(y + t * row, data + (o * D + rows[i]) * row, row);
    }
  });
}

void run_gather_elements(const Kernel& k) {
  const Shape &ds = k.inputs[0].shape, &is = k.inputs[1].shape;
  const int r = (int)ds.size(), axis = axis_attr(k, "axis", r);
  const int64_t D = ds[axis], n = k.output.numel();
  Strides dst = contiguous_strides(ds), walk_st = dst;
  walk_st[axis] = 0;  // the axis coordinate comes from the index
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t j = index_of(k.inputs[1], i);
    if (j < -D || j >= D) index_error(k, j, i, D);
    idx[i] = j < 0 ? j + D : j;
  }
  by_size(k.output, [&](auto u) {
    using U = decltype(u);
    const U* data = at<const U>(k.inputs[0]);
    U* y = at<U>(k.output);
    parallel(n, 1 << 12, [&](int64_t b, int64_t e) {
      walk(is, {walk_st}, {0}, b, e, [&](int64_t i, const std::vector<int64_t>& off) {
        y[i] = data[off[0] + idx[i] * dst[axis]];
      });
    });
  });
}

// ---------------- slice / pad / trilu ----------------
void run_slice(const Kernel& k) {
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
  by_size(k.output, [&](auto u) {
    using U = decltype(u);
    const U* x = at<const U>(k.inputs[0]);
    U* y = at<U>(k.output);
    // Row by row of the last axis (a row's source offset from its index, then a copy or a
    // strided gather along the row): im2col's slices of large images are this kernel's load.
    const Shape& os = k.output.shape;
    const int64_t inner = os.empty() ? 1 : os.back(), rows = inner ? k.output.numel() / inner : 0;
    const int64_t step = os.empty() ? 1 : st.back();
    parallel(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        int64_t off = base, rem = row;
        for (size_t d = os.empty() ? 0 : os.size() - 1; d-- > 0;) {
          off += (rem % os[d]) * st[d];
          rem /= os[d];
        }
        U* dst = y + row * inner;
        if (step == 1) {
          std::memcpy(dst, x + off, (size_t)inner * sizeof(U));
        } else {
          const U* src = x + off;
          for (int64_t j = 0; j < inner; ++j) dst[j] = src[j * step];
        }
      }
    });
  });
}

// The pad value in the output's stored dtype (integers: truncated toward zero and saturated,
// as Cast; bool: nonzero).
template <class U>
U pad_value(DType t, double v) {
  U u{};
  convert_elements(&v, DType::f64, &u, t, 1);  // the cast's rules, from the exact value
  return u;
}

void run_pad(const Kernel& k) {
  const Shape &xs = k.inputs[0].shape, &os = k.output.shape;
  const int r = (int)xs.size();
  const auto& pads = k.node->attrs.ints("pads");
  const std::string& mode = k.node->attrs.s("mode");
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
  by_size(k.output, [&](auto u) {
    using U = decltype(u);
    const U value = pad_value<U>(stored(k.output), k.node->attrs.f("value"));
    const U* x = at<const U>(k.inputs[0]);
    U* y = at<U>(k.output);
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
        U* yr = y + row * inner;
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
  });
}

void run_trilu(const Kernel& k) {
  const Shape& xs = k.inputs[0].shape;
  const int64_t N = xs[xs.size() - 2], M = xs.back(), kk = k.node->attrs.i("k");
  const bool upper = k.node->attrs.b("upper");
  by_size(k.output, [&](auto u) {
    using U = decltype(u);
    const U* x = at<const U>(k.inputs[0]);
    U* y = at<U>(k.output);  // zero bits are 0 in every dtype
    const int64_t rows = M ? k.output.numel() / M : 0;
    parallel(rows, 64, [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const int64_t i = row % N;
        for (int64_t j = 0; j < M; ++j) {
          bool keep = upper ? j - i >= kk : j - i <= kk;
          y[row * M + j] = keep ? x[row * M + j] : U{0};
        }
      }
    });
  });
}

// ---------------- compares of integer tensors (exact beyond 2^24) ----------------
bool int_compare(Op op) {
  switch (op) {
    case Op::Equal: case Op::Less: case Op::LessEqual: case Op::Greater: case Op::GreaterEqual: return true;
    default: return false;
  }
}

template <class A, class B>
void run_int_compare_t(const Kernel& k) {
  const Shape& os = k.output.shape;
  std::vector<Strides> st = {broadcast_strides(k.inputs[0].shape, os), broadcast_strides(k.inputs[1].shape, os)};
  const A* a = at<const A>(k.inputs[0]);
  const B* b = at<const B>(k.inputs[1]);
  uint8_t* y = at<uint8_t>(k.output);
  const Op op = k.node->op;
  parallel(k.output.numel(), 1 << 12, [&](int64_t lo, int64_t hi) {
    walk(os, st, {0, 0}, lo, hi, [&](int64_t i, const std::vector<int64_t>& off) {
      const int64_t u = a[off[0]], v = b[off[1]];
      bool r = false;
      switch (op) {
        case Op::Equal: r = u == v; break;
        case Op::Less: r = u < v; break;
        case Op::LessEqual: r = u <= v; break;
        case Op::Greater: r = u > v; break;
        default: r = u >= v; break;
      }
      y[i] = r;
    });
  });
}

void run_int_compare(const Kernel& k) {
  const bool a64 = stored(k.inputs[0]) == DType::i64, b64 = stored(k.inputs[1]) == DType::i64;
  if (a64 && b64) run_int_compare_t<int64_t, int64_t>(k);
  else if (a64) run_int_compare_t<int64_t, int32_t>(k);
  else if (b64) run_int_compare_t<int32_t, int64_t>(k);
  else run_int_compare_t<int32_t, int32_t>(k);
}

// The integer dtypes the compare kernel reads (i32, i64).
bool wide_int(DType t) { return t == DType::i32 || t == DType::i64; }

bool numeric_dtype(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::i32 || t == DType::i64; }

}  // namespace

bool index_op_native(const Kernel& k) {
  if (k.fused || !k.node) return false;
  const DType out = k.output.dtype, in = k.inputs.empty() ? out : k.inputs[0].dtype;
  switch (k.node->op) {
    case Op::Min: case Op::Prod: case Op::CumSum: return numeric_dtype(in) && out == in;
    case Op::ArgMax: case Op::ArgMin: return numeric_dtype(in) && out == DType::i64;
    case Op::TopK: return numeric_dtype(in) && (out == in || out == DType::i64);
    case Op::Where: return k.inputs[1].dtype == out && k.inputs[2].dtype == out;
    case Op::Gather: case Op::GatherElements: case Op::Slice: case Op::Pad: case Op::Trilu: return in == out;
    case Op::Equal: case Op::Less: case Op::LessEqual: case Op::Greater: case Op::GreaterEqual:
      return out == DType::boolean && wide_int(k.inputs[0].dtype) && wide_int(k.inputs[1].dtype);
    default: return false;
  }
}

bool run_index_op(const Kernel& k) {
  if (!k.node) return false;
  switch (k.node->op) {
    case Op::Min: case Op::Prod:
      numeric(k, k.inputs[0], [&](auto t) { run_min_prod_t<decltype(t)>(k); });
      return true;
    case Op::Where: run_where(k); return true;
    case Op::ArgMax: case Op::ArgMin:
      numeric(k, k.inputs[0], [&](auto t) { run_arg_t<decltype(t)>(k); });
      return true;
    case Op::CumSum:
      numeric(k, k.inputs[0], [&](auto t) { run_cumsum_t<decltype(t)>(k); });
      return true;
    case Op::TopK:
      numeric(k, k.inputs[0], [&](auto t) { run_topk_t<decltype(t)>(k); });
      return true;
    case Op::Gather: run_gather(k); return true;
    case Op::GatherElements: run_gather_elements(k); return true;
    case Op::Slice: run_slice(k); return true;
    case Op::Pad: run_pad(k); return true;
    case Op::Trilu: run_trilu(k); return true;
    default:
      // Compares of integer tensors that are stored as integers; the rest is elementwise.
      if (int_compare(k.node->op) && wide_int(stored(k.inputs[0])) && wide_int(stored(k.inputs[1]))) {
        run_int_compare(k);
        return true;
      }
      return false;
  }
}

}  // namespace rlx::cpu
