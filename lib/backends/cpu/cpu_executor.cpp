// The CPU executor: cpu::gemm (gemm.h) for matrix products, threaded kernels for the rest.
// Kernels run when launched; flush() has nothing to wait for.
#include "backends/cpu/cpu_executor.h"

#include <algorithm>
#include <set>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>
#include <map>
#include <memory>
#include <tuple>
#include <type_traits>
#include <mutex>
#include <string>

#include "backends/cpu/access.h"
#include "backends/cpu/half_gemm.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/cpu_ops_conv.h"
#include "backends/cpu/cpu_plan.h"
#include "backends/cpu/host_memory.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/ops_f64.h"
#include "backends/cpu/ops_index.h"
#include "backends/cpu/ops_quant.h"
#include "backends/cpu/qgemm.h"
#include "backends/cpu/minmax.h"
#include "backends/cpu/thread_pool.h"
#include "core/error.h"
#include "ir/op_registry.h"

namespace rlx {

namespace cpu {
CpuBuffer::CpuBuffer(size_t n, bool f32) : f32_view(f32) {
  capacity = n;
  renew();
}

CpuBuffer::CpuBuffer(const void* p, size_t n, std::shared_ptr<const void> keep) {
  capacity = n;
  // An aliasing pointer: shares ownership of `keep`, points at the bytes.
  mem = std::shared_ptr<uint8_t>(std::move(keep), static_cast<uint8_t*>(const_cast<void*>(p)));
  data = mem.get();
  external = true;
}

void CpuBuffer::renew() {
  size_t cap = 0;
  void* p = host_alloc(capacity, &cap);
  if (!p) throw RuntimeError("out of host memory allocating " + std::to_string(capacity) + " bytes");
  mem.reset(static_cast<uint8_t*>(p), [cap](uint8_t* q) { host_free(q, cap); });
  data = mem.get();
}
}  // namespace cpu

namespace {

using ir::Op;
using cpu::bytes;
using cpu::CpuBuffer;
using cpu::index_at;
using cpu::ptr;
using cpu::value_at;

void parallel(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  cpu::ThreadPool::global().parallel_for(n, grain, fn);
}


// ---------------- elementwise ----------------
void run_elementwise(const Kernel& k) {
  FusedProgram p;
  p.out_shape = k.output.shape;
  std::vector<const float*> ins;
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    p.code.push_back({FusedInstr::Load, EwOp::Add, (int32_t)i});
    p.input_shapes.push_back(k.inputs[i].shape);
    ins.push_back(ptr(k.inputs[i]));
  }
  if (k.node->op == Op::BroadcastTo || k.node->op == Op::Reshape) {
    p.result = 0;
  } else {
    EwOp op = ir::node_ew_op(*k.node);
    if (ew_is_unary(op)) p.code.push_back({FusedInstr::Unary, op, 0});
    else p.code.push_back({FusedInstr::Binary, op, 0, 1});
    p.result = (int)p.code.size() - 1;
  }
  cpu::run_fused(p, ins, ptr(k.output));
}

void strided_copy(const uint8_t* x, int64_t is, uint8_t* y, int64_t n, size_t es);

// Converts between any dtypes (convert_elements' rules), in parallel chunks.
void parallel_convert(const uint8_t* x, DType from, uint8_t* y, DType to, int64_t n) {
  const size_t ei = dtype_size(from), eo = dtype_size(to);
  parallel(n, 1 << 15, [&](int64_t b, int64_t e) { convert_elements(x + b * ei, from, y + b * eo, to, e - b); });
}

void run_cast(const Kernel& k) {
  parallel_convert(bytes(k.inputs[0]), k.inputs[0].dtype, bytes(k.output), k.output.dtype, k.output.numel());
}

// Broadcasts (NumPy rules) elements of any dtype: each output row of the last axis is a
// copy (or a fill, where the input's last axis is broadcast) from the input.
void run_broadcast_copy(const Kernel& k) {
  const Shape& os = k.output.shape;
  const size_t es = dtype_size(k.output.dtype);
  const int64_t total = k.output.numel();
  if (total == 0) return;
  const auto st = broadcast_strides(k.inputs[0].shape, os);
  const size_t r = os.size();
  const int64_t inner = r ? os[r - 1] : 1, rows = total / std::max<int64_t>(inner, 1);
  const int64_t is = r ? st[r - 1] : 0;
  const uint8_t* x = bytes(k.inputs[0]);
  uint8_t* y = bytes(k.output);
  parallel(rows, 64, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t rem = row, off = 0;
      for (size_t d = r - 1; d-- > 0;) {
        off += (rem % os[d]) * st[d];
        rem /= os[d];
      }
      uint8_t* dst = y + row * inner * es;
      if (is == 0)
        for (int64_t j = 0; j < inner; ++j) std::memcpy(dst + j * es, x + off * es, es);
      else
        strided_copy(x + off * es, is, dst, inner, es);
    }
  });
}

// ---------------- integer elementwise (exact, in the integer's own arithmetic) ----------------
// Unsigned arithmetic of T's width (products of 8/16-bit values are promoted to int first,
// which cannot overflow for these widths' wrap).
template <class T>
using UOf = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <class T>
T int_unary(EwOp op, T a, const Kernel& k) {
  using U = UOf<T>;
  switch (op) {
    case EwOp::Neg: return (T)(0 - (U)a);  // wraps like two's complement
    case EwOp::Abs: return std::is_signed_v<T> && a < 0 ? (T)(0 - (U)a) : a;
    case EwOp::Square: return (T)((U)a * (U)a);
    case EwOp::Relu: return a > 0 ? a : 0;
    case EwOp::Floor: case EwOp::Ceil: case EwOp::Round: return a;  // integers are already whole
    case EwOp::Sign: return (T)((a > 0) - (a < 0));
    default: break;
  }
  throw RuntimeError(k.label + ": " + ir::op_name(k.node->op) + " is not defined on integer tensors (" +
                     dtype_name(k.output.dtype) + "); cast to a float dtype first");
}

template <class T>
T int_binary(EwOp op, T a, T b, const Kernel& k) {
  using U = UOf<T>;
  switch (op) {
    case EwOp::Add: return (T)((U)a + (U)b);
    case EwOp::Sub: return (T)((U)a - (U)b);
    case EwOp::Mul: return (T)((U)a * (U)b);
    case EwOp::Div:  // truncation toward zero, as C++ and ONNX Div on integers
      if (b == 0) throw RuntimeError(k.label + ": integer division by zero");
      if constexpr (std::is_signed_v<T>)
        if (b == -1) return (T)(0 - (U)a);  // MIN / -1 wraps instead of trapping
      return a / b;
    case EwOp::Maximum: return a > b ? a : b;
    case EwOp::Minimum: return a < b ? a : b;
    case EwOp::Mod:   // ONNX Mod fmod=0: the result takes the divisor's sign (Python's %)
    case EwOp::Fmod: {  // fmod=1: C's truncated remainder
      if (b == 0) throw RuntimeError(k.label + ": integer modulo by zero");
      if constexpr (std::is_signed_v<T>) {
        if (b == -1) return 0;  // MIN % -1 would trap
        T r = a % b;
        if (op == EwOp::Mod && r != 0 && ((r < 0) != (b < 0))) r = (T)((U)r + (U)b);
        return r;
      } else {
        return a % b;
      }
    }
    case EwOp::ShiftLeft: case EwOp::ShiftRight: {  // bit_shift (unsigned): by the width or more gives 0
      const uint64_t s = (uint64_t)b;
      if (s >= 8 * sizeof(T)) return 0;
      return op == EwOp::ShiftLeft ? (T)((U)a << s) : (T)((U)a >> s);
    }
    default: break;
  }
  throw RuntimeError(k.label + ": " + ir::op_name(k.node->op) + " is not defined on integer tensors (" +
                     dtype_name(k.output.dtype) + "); cast to a float dtype first");
}

template <class T>
void run_int_elementwise_t(const Kernel& k) {
  const Shape& os = k.output.shape;
  const int64_t total = k.output.numel();
  const EwOp op = ir::node_ew_op(*k.node);
  const bool unary = ew_is_unary(op);
  const T* a = cpu::typed<T>(k.inputs[0]);
  const T* b = unary ? nullptr : cpu::typed<T>(k.inputs[1]);
  T* y = cpu::typed<T>(k.output);
  const auto sa = broadcast_strides(k.inputs[0].shape, os);
  const auto sb = unary ? std::vector<int64_t>(os.size(), 0) : broadcast_strides(k.inputs[1].shape, os);
  const bool plain = k.inputs[0].shape == os && (unary || k.inputs[1].shape == os);
  for (int64_t i = 0; i < total; ++i) {
    int64_t ia = i, ib = i;
    if (!plain) {
      ia = ib = 0;
      int64_t rem = i;
      for (size_t d = os.size(); d-- > 0;) {
        int64_t c = rem % os[d];
        rem /= os[d];
        ia += c * sa[d];
        ib += c * sb[d];
      }
    }
    y[i] = unary ? int_unary<T>(op, a[ia], k) : int_binary<T>(op, a[ia], b[ib], k);
  }
}

// ---------------- the dtype adapter ----------------
// Kernels that handle every dtype themselves (bytes moved, values exact); everything
// else is an f32 kernel run through run_f32_adapted when a tensor is not f32.
bool is_native(const Kernel& k) {
  if (k.fused) return false;
  if (cpu::index_op_native(k)) return true;  // the ONNX-style ops (cpu_ops_index.cpp)
  if (cpu::is_quant_op(k)) return true;      // quantize, dequantize, matmul_integer (cpu_ops_quant.cpp)
  switch (k.node->op) {
    case Op::Reshape: case Op::Transpose: case Op::Narrow: case Op::Concat: case Op::BroadcastTo: case Op::Cast:
    case Op::Embedding:
      // Elements move unchanged: every input must already be in the output's dtype
      // (the registry makes it so; embedding's indices are read by index_at).
      for (size_t i = 0; i < k.inputs.size(); ++i)
        if (k.inputs[i].dtype != k.output.dtype && k.node->op != Op::Cast && !(k.node->op == Op::Embedding && i == 1))
          return false;
      return true;
    default: break;
  }
  const auto cat = ir::op_info(k.node->op).category;
  if ((cat == ir::Category::Binary || cat == ir::Category::Unary) && is_integer(k.output.dtype)) {
    for (const auto& t : k.inputs)
      if (t.dtype != k.output.dtype) return false;
    return true;
  }
  return false;
}

void run_int_elementwise(const Kernel& k) {
  switch (k.output.dtype) {
    case DType::i8: return run_int_elementwise_t<int8_t>(k);
    case DType::u8: return run_int_elementwise_t<uint8_t>(k);
    case DType::i16: return run_int_elementwise_t<int16_t>(k);
    case DType::u16: return run_int_elementwise_t<uint16_t>(k);
    case DType::i32: return run_int_elementwise_t<int32_t>(k);
    case DType::u32: return run_int_elementwise_t<uint32_t>(k);
    case DType::i64: return run_int_elementwise_t<int64_t>(k);
    case DType::u64: return run_int_elementwise_t<uint64_t>(k);
    default: throw RuntimeError(k.label + ": internal: no integer kernel for " + dtype_name(k.output.dtype));
  }
}

// ---------------- shape ops ----------------
// Copies `n` elements of `es` bytes with a source stride of `is` elements.
void strided_copy(const uint8_t* x, int64_t is, uint8_t* y, int64_t n, size_t es) {
  if (is == 1) {
    std::memcpy(y, x, n * es);
    return;
  }
  switch (es) {
    case 1: for (int64_t j = 0; j < n; ++j) y[j] = x[j * is]; break;
    case 2: for (int64_t j = 0; j < n; ++j) reinterpret_cast<uint16_t*>(y)[j] = reinterpret_cast<const uint16_t*>(x)[j * is]; break;
    case 4: for (int64_t j = 0; j < n; ++j) reinterpret_cast<uint32_t*>(y)[j] = reinterpret_cast<const uint32_t*>(x)[j * is]; break;
    default: for (int64_t j = 0; j < n; ++j) std::memcpy(y + j * es, x + j * is * es, es); break;
  }
}

// Transposes elements of `es` bytes (any dtype).
void permute_copy(const void* xv, const Shape& xs, const std::vector<int>& perm, void* yv, size_t es) {
  const uint8_t* x = static_cast<const uint8_t*>(xv);
  uint8_t* y = static_cast<uint8_t*>(yv);
  size_t r = xs.size();
  Shape ys(r);
  for (size_t k = 0; k < r; ++k) ys[k] = xs[perm[k]];
  auto xst = contiguous_strides(xs);
  std::vector<int64_t> st(r);  // stride in x of each y dim
  for (size_t k = 0; k < r; ++k) st[k] = xst[perm[k]];
  int64_t total = shape_numel(ys);
  if (total == 0) return;
  int64_t inner = r ? ys[r - 1] : 1, rows = total / std::max<int64_t>(inner, 1);
  int64_t is = r ? st[r - 1] : 1;
  parallel(rows, 64, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t rem = row, off = 0;
      for (size_t k = r - 1; k-- > 0;) {
        off += (rem % ys[k]) * st[k];
        rem /= ys[k];
      }
      strided_copy(x + off * es, is, y + row * inner * es, inner, es);
    }
  });
}

void run_transpose(const Kernel& k) {
  const Shape& xs = k.inputs[0].shape;
  int r = (int)xs.size();
  std::vector<int> perm(r);
  if (k.node->attrs.has("perm")) {
    const auto& p = k.node->attrs.ints("perm");
    for (int i = 0; i < r; ++i) perm[i] = (int)(p[i] < 0 ? p[i] + r : p[i]);
  } else {
    for (int i = 0; i < r; ++i) perm[i] = r - 1 - i;
  }
  permute_copy(bytes(k.inputs[0]), xs, perm, bytes(k.output), dtype_size(k.output.dtype));
}

void run_narrow(const Kernel& k) {
  const Shape& xs = k.inputs[0].shape;
  int axis = (int)k.node->attrs.i("axis");
  if (axis < 0) axis += (int)xs.size();
  Axis3 v = around(xs, axis);
  int64_t start = k.node->attrs.i("start"), len = k.output.shape[axis];
  const size_t es = dtype_size(k.output.dtype);
  const uint8_t* x = bytes(k.inputs[0]);
  uint8_t* y = bytes(k.output);
  parallel(v.outer, 16, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o)
      std::memcpy(y + o * len * v.inner * es, x + (o * v.len + start) * v.inner * es, len * v.inner * es);
  });
}

void run_concat(const Kernel& k) {
  const Shape& ys = k.output.shape;
  int axis = (int)k.node->attrs.i("axis");
  if (axis < 0) axis += (int)ys.size();
  Axis3 v = around(ys, axis);
  const size_t es = dtype_size(k.output.dtype);
  uint8_t* y = bytes(k.output);
  int64_t at = 0;
  for (size_t j = 0; j < k.inputs.size(); ++j) {
    const TensorRef& in = k.inputs[j];
    int64_t len = in.shape[axis];
    if (j < 32 && (k.inputs_in_output >> j & 1)) {  // already in place (an in-place append)
      at += len;
      continue;
    }
    const uint8_t* x = bytes(in);
    parallel(v.outer, 16, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o)
        std::memcpy(y + (o * v.len + at) * v.inner * es, x + o * len * v.inner * es, len * v.inner * es);
    });
    at += len;
  }
}

void run_embedding(const Kernel& k) {
  const Shape& ts = k.inputs[0].shape;
  int64_t V = ts[0], D = ts[1], n = k.inputs[1].numel();
  const size_t row = (size_t)D * dtype_size(k.output.dtype);  // the table's dtype is the output's
  const uint8_t* table = bytes(k.inputs[0]);
  const TensorRef& idx = k.inputs[1];
  const bool float_idx = is_float(cpu::stored_dtype(idx));
  for (int64_t i = 0; i < n; ++i) {
    bool ok;
    std::string shown;
    if (float_idx) {
      double f = value_at(idx, i);
      ok = f >= 0 && f < (double)V && f == std::floor(f);
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.0f", f);
      shown = buf;
    } else {
      int64_t j = index_at(idx, i);
      ok = j >= 0 && j < V;
      shown = std::to_string(j);
    }
    if (!ok)
      throw RuntimeError(k.label + ": index " + shown + " at position " + std::to_string(i) + " is outside [0, " +
                         std::to_string(V) + ")");
  }
  uint8_t* y = bytes(k.output);
  parallel(n, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) std::memcpy(y + i * row, table + index_at(idx, i) * row, row);
  });
}

// ---------------- reductions ----------------
void run_reduce(const Kernel& k) {
  const Shape& xs = k.inputs[0].shape;
  int r = (int)xs.size();
  std::vector<bool> red(r, !k.node->attrs.has("axes"));
  if (k.node->attrs.has("axes"))
    for (auto a : k.node->attrs.ints("axes")) red[a < 0 ? a + r : a] = true;
  // Move reduced axes last (a copy only when they are not already trailing).
  std::vector<int> perm;
  for (int i = 0; i < r; ++i) if (!red[i]) perm.push_back(i);
  int64_t R = 1;
  for (int i = 0; i < r; ++i) if (red[i]) { perm.push_back(i); R *= xs[i]; }
  bool identity = true;
  for (int i = 0; i < r; ++i) identity = identity && perm[i] == i;
  const float* x = ptr(k.inputs[0]);
  std::vector<float> tmp;
  if (!identity) {
    tmp.resize(shape_numel(xs));
    permute_copy(x, xs, perm, tmp.data(), 4);
    x = tmp.data();
  }
  int64_t rows = k.output.numel();
  float* y = ptr(k.output);
  Op op = k.node->op;
  if (op == Op::Max && rows == 1) {  // a whole-tensor max (dynamic quantization): one vector pass
    y[0] = cpu::minmax_f32(x, R).max;
    return;
  }
  parallel(rows, 16, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const float* row = x + o * R;
      if (op == Op::Max) {
        float m = -INFINITY;
        for (int64_t j = 0; j < R; ++j) m = (row[j] > m || row[j] != row[j]) ? row[j] : m;
        y[o] = m;
      } else {
        // Eight double sums side by side (one serial chain of double adds ran at a quarter of an
        // element per cycle: squeeze-excitation's global means were 9% of EfficientNet-B0).
        double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t j = 0;
        for (; j + 8 <= R; j += 8)
          for (int l = 0; l < 8; ++l) acc[l] += row[j + l];
        double s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for (; j < R; ++j) s += row[j];
        y[o] = (float)(op == Op::Mean ? (R ? s / R : NAN) : s);
      }
    }
  });
}

// ---------------- row ops: softmax, norms, vjps ----------------
// Softmax of one strided row (scalar; cpu::softmax_row is the vectorised contiguous one).
// Entries equal to -inf are hidden; all hidden -> zeros.
void softmax_row_strided(const float* x, float* y, int64_t n, int64_t stride, float scale = 1.f) {
  float m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j * stride] * scale);
  if (m == -INFINITY) {
    for (int64_t j = 0; j < n; ++j) y[j * stride] = 0.f;
    return;
  }
  double s = 0;
  for (int64_t j = 0; j < n; ++j) {
    float e = std::exp(x[j * stride] * scale - m);
    y[j * stride] = e;
    s += e;
  }
  float inv = (float)(1.0 / s);
  for (int64_t j = 0; j < n; ++j) y[j * stride] *= inv;
}

void run_softmax(const Kernel& k) {
  const Shape& xs = k.inputs[0].shape;
  int axis = (int)k.node->attrs.i("axis");
  if (axis < 0) axis += (int)xs.size();
  Axis3 v = around(xs, axis);
  const float* x = ptr(k.inputs[0]);
  float* y = ptr(k.output);
  if (k.node->op == Op::Softmax && v.inner == 1) {  // contiguous rows: the vectorised kernel
    parallel(v.outer, 16, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        if (y != x) std::memcpy(y + o * v.len, x + o * v.len, v.len * 4);
        cpu::softmax_row(y + o * v.len, v.len, v.len, 1.f);
      }
    });
  } else if (k.node->op == Op::Softmax) {
    parallel(v.outer * v.inner, 16, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        int64_t o = t / v.inner, i = t % v.inner;
        softmax_row_strided(x + o * v.len * v.inner + i, y + o * v.len * v.inner + i, v.len, v.inner);
      }
    });
  } else {  // SoftmaxVjp(dy, y)
    const float* yy = ptr(k.inputs[1]);
    parallel(v.outer * v.inner, 16, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        int64_t base = (t / v.inner) * v.len * v.inner + t % v.inner;
        double s = 0;
        for (int64_t j = 0; j < v.len; ++j) s += (double)x[base + j * v.inner] * yy[base + j * v.inner];
        for (int64_t j = 0; j < v.len; ++j) {
          int64_t q = base + j * v.inner;
          y[q] = yy[q] * (x[q] - (float)s);
        }
      }
    });
  }
}

void run_scaled_masked_softmax(const Kernel& k) {
  const Shape& xs = k.inputs[0].shape;
  int64_t Tk = xs.back(), Tq = xs[xs.size() - 2], rows = k.output.numel() / std::max<int64_t>(Tk, 1);
  float scale = (float)k.node->attrs.f("scale");
  bool causal = k.node->attrs.b("causal");
  const float* x = ptr(k.inputs[0]);
  float* y = ptr(k.output);
  if (scale > 0) {  // hidden keys stay hidden after scaling: softmax over the visible prefix
    parallel(rows, 16, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t i = r % Tq, valid = causal ? std::clamp<int64_t>(i + (Tk - Tq) + 1, 0, Tk) : Tk;
        if (y != x) std::memcpy(y + r * Tk, x + r * Tk, valid * 4);
        cpu::softmax_row(y + r * Tk, valid, Tk, scale);
      }
    });
    return;
  }
  parallel(rows, 16, [&](int64_t b, int64_t e) {
    std::vector<float> tmp(Tk);
    for (int64_t r = b; r < e; ++r) {
      int64_t i = r % Tq, limit = causal ? i + (Tk - Tq) : Tk - 1;
      for (int64_t j = 0; j < Tk; ++j) tmp[j] = j <= limit ? x[r * Tk + j] : -INFINITY;
      softmax_row_strided(tmp.data(), y + r * Tk, Tk, 1, scale);
    }
  });
}

void run_norm(const Kernel& k) {
  Op op = k.node->op;
  const float eps = (float)k.node->attrs.f("eps");
  bool vjp = op == Op::LayerNormVjp || op == Op::RmsNormVjp;
  const float* x = ptr(k.inputs[vjp ? 1 : 0]);
  const float* dy = vjp ? ptr(k.inputs[0]) : nullptr;
  const float* w = !vjp && k.inputs.size() > 1 ? ptr(k.inputs[1]) : nullptr;
  const float* bias = !vjp && k.inputs.size() > 2 ? ptr(k.inputs[2]) : nullptr;
  int64_t D = k.output.shape.empty() ? 1 : k.output.shape.back();
  int64_t rows = D ? k.output.numel() / D : 0;
  float* y = ptr(k.output);
  bool layer = op == Op::LayerNorm || op == Op::LayerNormVjp;
  parallel(rows, 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * D;
      float* yr = y + r * D;
      if (!vjp) {
        cpu::norm_row(xr, yr, D, eps, layer, w, bias);
        continue;
      }
      double mean = 0, sq = 0;
      if (layer) {
        for (int64_t j = 0; j < D; ++j) mean += xr[j];
        mean /= D;
        for (int64_t j = 0; j < D; ++j) sq += (xr[j] - mean) * (xr[j] - mean);
      } else {
        for (int64_t j = 0; j < D; ++j) sq += (double)xr[j] * xr[j];
      }
      double inv = 1.0 / std::sqrt(sq / D + eps);
      if (!vjp) {
        for (int64_t j = 0; j < D; ++j) {
          float v = (float)((xr[j] - mean) * inv);
          if (w) v *= w[j];
          if (bias) v += bias[j];
          yr[j] = v;
        }
      } else if (layer) {
        // dx = inv * (dy - mean(dy) - xhat * mean(dy * xhat))
        const float* g = dy + r * D;
        double mg = 0, mgx = 0;
        for (int64_t j = 0; j < D; ++j) {
          double xh = (xr[j] - mean) * inv;
          mg += g[j];
          mgx += g[j] * xh;
        }
        mg /= D;
        mgx /= D;
        for (int64_t j = 0; j < D; ++j) yr[j] = (float)(inv * (g[j] - mg - (xr[j] - mean) * inv * mgx));
      } else {
        // dx = inv * dy - x * inv^3 * mean(dy * x)
        const float* g = dy + r * D;
        double dot = 0;
        for (int64_t j = 0; j < D; ++j) dot += (double)g[j] * xr[j];
        double c = inv * inv * inv * dot / D;
        for (int64_t j = 0; j < D; ++j) yr[j] = (float)(inv * g[j] - xr[j] * c);
      }
    }
  });
}

// ---------------- rope ----------------
using RopeTable = std::pair<std::vector<float>, std::vector<float>>;  // cos, sin: [S, half]

std::shared_ptr<const RopeTable> rope_table(int64_t S, int64_t half, int64_t dims, double base, double scale,
                                            double offset) {
  using Key = std::tuple<int64_t, int64_t, int64_t, double, double, double>;
  static std::mutex mu;
  static std::vector<std::pair<Key, std::shared_ptr<const RopeTable>>> cache;  // most recent last
  const Key key{S, half, dims, base, scale, offset};
  {
    std::lock_guard<std::mutex> l(mu);
    for (const auto& [k, t] : cache)
      if (k == key) return t;
  }
  auto t = std::make_shared<RopeTable>(std::vector<float>(S * half), std::vector<float>(S * half));
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = std::pow(base, -2.0 * i / dims);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t i = 0; i < half; ++i) {
      double th = (offset + s) * scale * inv_freq[i];
      t->first[s * half + i] = (float)std::cos(th);
      t->second[s * half + i] = (float)std::sin(th);
    }
  std::lock_guard<std::mutex> l(mu);
  cache.emplace_back(key, t);
  if (cache.size() > 8) cache.erase(cache.begin());
  return t;
}

void run_rope(const Kernel& k) {
  const Shape& xs = k.inputs[0].shape;
  const auto& a = k.node->attrs;
  int64_t D = xs.back(), S = xs[xs.size() - 2];
  int64_t dims = a.has("dims") ? a.i("dims") : D, half = dims / 2;
  double base = a.f("base"), scale = a.f("scale");
  bool trad = a.b("traditional");
  double offset = k.inputs.size() > 1 ? value_at(k.inputs[1], 0) : (double)a.i("offset");
  // cos/sin table [S, half] in double precision (positions can be large); the last
  // few tables are kept, so a replayed plan does not recompute them.
  auto table = rope_table(S, half, dims, base, scale, offset);
  const std::vector<float>& cs = table->first;
  const std::vector<float>& sn = table->second;
  const float* x = ptr(k.inputs[0]);
  float* y = ptr(k.output);
  int64_t rows = D ? k.output.numel() / D : 0;
  parallel(rows, 32, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* __restrict xr = x + r * D;
      float* __restrict yr = y + r * D;
      const float* c = cs.data() + (r % S) * half;
      const float* s = sn.data() + (r % S) * half;
      if (trad) {
        for (int64_t i = 0; i < half; ++i) {
          float p = xr[2 * i], q = xr[2 * i + 1];
          yr[2 * i] = p * c[i] - q * s[i];
          yr[2 * i + 1] = p * s[i] + q * c[i];
        }
      } else {
        for (int64_t i = 0; i < half; ++i) {
          float p = xr[i], q = xr[i + half];
          yr[i] = p * c[i] - q * s[i];
          yr[i + half] = p * s[i] + q * c[i];
        }
      }
      for (int64_t j = dims; j < D; ++j) yr[j] = xr[j];
    }
  });
}

// ---------------- matmul / linear ----------------
// All matrix products go through cpu::gemm (gemm.h), which owns the library choice and threading.
void run_matmul(const Kernel& k) {
  const Shape &as = k.inputs[0].shape, &bs = k.inputs[1].shape, &os = k.output.shape;
  bool ta = k.node->attrs.b("transpose_a"), tb = k.node->attrs.b("transpose_b");
  int64_t M = os[os.size() - 2], N = os.back();
  int64_t K = ta ? as[as.size() - 2] : as.back();
  const float *A = ptr(k.inputs[0]), *B = ptr(k.inputs[1]);
  float* C = ptr(k.output);
  Shape ob(os.begin(), os.end() - 2), ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  int64_t batches = shape_numel(ob);
  if (batches == 0 || M == 0 || N == 0) return;
  bool b_shared = shape_numel(bb) == 1;
  if (b_shared && !ta) {  // fold a's batch into M: one large product
    cpu::gemm(false, tb, batches * M, N, K, 1.f, A, K, B, tb ? K : N, C, N);
    return;
  }
  auto bix = broadcast_batch_index(ab, bb, ob);
  std::vector<int64_t>&a_off = bix.a, &b_off = bix.b;
  for (int64_t bi = 0; bi < batches; ++bi) {
    a_off[bi] *= M * K;
    b_off[bi] *= K * N;
  }
  cpu::gemm_batched(ta, tb, M, N, K, 1.f, A, ta ? M : K, a_off.data(), B, tb ? K : N, b_off.data(), C, N, M * N,
                    batches);
}

void run_linear(const Kernel& k) {
  const Shape& ws = k.inputs[1].shape;
  int64_t Out = ws[0], In = ws[1], rows = Out ? k.output.numel() / Out : 0;
  if (rows == 0 || Out == 0) return;
  cpu::Epilogue ep;
  if (k.inputs.size() == 3) ep.bias = ptr(k.inputs[2]);
  cpu::gemm(false, true, rows, Out, In, 1.f, ptr(k.inputs[0]), In, ptr(k.inputs[1]), In, ptr(k.output), Out, ep);
}

// ---------------- attention ----------------
// The products run with cpu::Threads::Single: the caller parallelises over independent
// products with rlx's pool (one pool, no nested threading).
// Keys and values in f16/bf16 (is_half_attention: a bf16 model's KV cache) are never copied
// whole into f32: for decode-sized tasks (at most 16 query rows over a key/value head) half_gemm
// reads them where they are, widening in registers; larger tasks (prefill) widen their head's
// visible keys and values into the task's scratch, in cache, for the f32 GEMM, whose blocking
// half_gemm's small-M kernels lack (3-5x slower there). Query rows are widened into the task's
// scratch and output rows rounded from it (f32 sums throughout).
bool is_half_attention(const Kernel& k) {
  if (k.fused || k.node->op != Op::Attention || k.inputs.size() != 3) return false;
  auto f = [](DType t) { return t == DType::f32 || is_half(t); };
  return is_half(k.inputs[1].dtype) && is_half(k.inputs[2].dtype) && f(k.inputs[0].dtype) && f(k.output.dtype);
}

void run_attention(const Kernel& k) {
  auto as4 = [](Shape s) {
    while (s.size() < 4) s.insert(s.begin(), 1);
    return s;
  };
  Shape qs = as4(k.inputs[0].shape), ks = as4(k.inputs[1].shape), vs = as4(k.inputs[2].shape);
  int64_t B = qs[0], Hq = qs[1], Sq = qs[2], D = qs[3], Hk = ks[1], Sk = ks[2], Dv = vs[3];
  int64_t G = Hq / Hk;
  float scale = k.node->attrs.has("scale") ? (float)k.node->attrs.f("scale") : (float)(1.0 / std::sqrt((double)D));
  bool causal = k.node->attrs.b("causal");
  const bool half = is_half_attention(k);
  // f32 tensors (or the adapter's f32 copies), or the half path's tensors in their own dtypes.
  const DType qdt = half ? k.inputs[0].dtype : DType::f32, odt = half ? k.output.dtype : DType::f32;
  const DType kdt = k.inputs[1].dtype, vdt = k.inputs[2].dtype;
  const uint8_t* Qb = bytes(k.inputs[0]);
  const float* Kp = half ? nullptr : ptr(k.inputs[1]);
  const float* V = half ? nullptr : ptr(k.inputs[2]);
  const uint16_t* K16 = half ? cpu::typed<uint16_t>(k.inputs[1]) : nullptr;
  const uint16_t* V16 = half ? cpu::typed<uint16_t>(k.inputs[2]) : nullptr;
  uint8_t* Ob = bytes(k.output);
  const size_t eq = dtype_size(qdt), eo = dtype_size(odt);
  if (!half) (void)ptr(k.inputs[0]), (void)ptr(k.output);  // the f32 path's storage check
  const cpu::HalfIsa isa = cpu::half_isa_best();
  const float* mask = nullptr;
  bool bool_mask = false;
  std::vector<int64_t> mst;
  if (k.inputs.size() == 4) {
    mask = ptr(k.inputs[3]);
    bool_mask = k.inputs[3].dtype == DType::boolean;
    mst = broadcast_strides(k.inputs[3].shape, Shape{B, Hq, Sq, Sk});
  }
  if (Sq == 0 || B * Hq == 0 || Dv == 0) return;
  // One task: the G query heads that share a key/value head, over a chunk of query
  // positions. With `causal`, keys past the chunk's last visible key are skipped. A task's
  // scores take G x qc x Sk floats of thread-local scratch: long key sequences get fewer query
  // rows per chunk, so the scratch stays near 16 MiB a thread (at least one row per head).
  constexpr int64_t kScoreFloats = int64_t(4) << 20;
  const int64_t qc = Sk > 0 && G <= kScoreFloats / Sk
                        ? std::clamp<int64_t>(kScoreFloats / (G * Sk), 1, std::min<int64_t>(Sq, 64))
                        : 1;
  const int64_t chunks = (Sq + qc - 1) / qc, tasks = B * Hk * chunks;
  // Scores, softmax and the value product of one row of S (row rr of head g).
  auto softmax_rows = [&](float* S, int64_t rows, int64_t kmax, int64_t b, int64_t h0, int64_t i0, int64_t nq) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t h = h0 + r / nq, i = i0 + r % nq;
      float* sr = S + r * kmax;
      const int64_t valid = causal ? std::clamp<int64_t>(i + (Sk - Sq) + 1, 0, kmax) : kmax;
      if (mask) {
        const int64_t mo = b * mst[0] + h * mst[1] + i * mst[2];
        for (int64_t j = 0; j < valid; ++j) {
          float m = mask[mo + j * mst[3]];
          if (bool_mask) sr[j] = m != 0.f ? sr[j] : -INFINITY;
          else sr[j] += m;
        }
      }
      cpu::softmax_row(sr, valid, kmax, 1.f);
    }
  };
  parallel(tasks, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> S, Qs, Os, Kw, Vw;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / (Hk * chunks), hk = (t / chunks) % Hk, c = t % chunks;
      const int64_t i0 = c * qc, nq = std::min(qc, Sq - i0), h0 = hk * G, rows = G * nq;
      // Keys [0, kmax) are visible to some row of the chunk.
      const int64_t kmax = causal ? std::clamp<int64_t>(i0 + nq + (Sk - Sq), 0, Sk) : Sk;
      const int64_t kv0 = (b * Hk + hk) * Sk;  // the head's first key/value row
      const int64_t q0 = (b * Hq + h0) * Sq + i0;  // head g's rows: q0 + g * Sq
      if (kmax == 0) {
        for (int64_t g = 0; g < G; ++g) std::memset(Ob + (q0 + g * Sq) * Dv * eo, 0, nq * Dv * eo);
        continue;
      }
      if ((int64_t)S.size() < rows * kmax) S.resize(rows * kmax);
      // One query of one head (a decode step without grouped heads): matrix-vector products. With
      // G > 1 heads over the key/value head, the group's G rows go through one product below, which
      // reads the keys and values once instead of G times (a d-2048 decoder with 16 / 2 heads at
      // past 500-1000: 1.63-1.70 ms a token against 1.73-1.95 head by head).
      if (!half && nq == 1 && G == 1) {
        const float* Kh = Kp + kv0 * D;
        const float* Vh = V + kv0 * Dv;
        for (int64_t g = 0; g < G; ++g) {
          const float* q = reinterpret_cast<const float*>(Qb) + (q0 + g * Sq) * D;
          float* sg = S.data() + g * kmax;
          cpu::gemm(false, true, 1, kmax, D, scale, q, D, Kh, D, sg, kmax, {}, cpu::Threads::Single);
          softmax_rows(sg, 1, kmax, b, h0 + g, i0, 1);
          cpu::gemm(false, false, 1, Dv, kmax, 1.f, sg, kmax, Vh, Dv, reinterpret_cast<float*>(Ob) + (q0 + g * Sq) * Dv,
                    Dv, {}, cpu::Threads::Single);
        }
        continue;
      }
      // The G heads' rows stacked [G * nq, D]: one product for the group.
      if ((int64_t)Qs.size() < rows * D) Qs.resize(rows * D);
      if ((int64_t)Os.size() < rows * Dv) Os.resize(rows * Dv);
      for (int64_t g = 0; g < G; ++g)
        convert_elements(Qb + (q0 + g * Sq) * D * eq, qdt, Qs.data() + g * nq * D, DType::f32, nq * D);
      const bool in_registers = half && rows <= 16;
      const float *Kf = half ? nullptr : Kp + kv0 * D, *Vf = half ? nullptr : V + kv0 * Dv;
      if (half && !in_registers) {
        if ((int64_t)Kw.size() < kmax * D) Kw.resize(kmax * D);
        if ((int64_t)Vw.size() < kmax * Dv) Vw.resize(kmax * Dv);
        convert_elements(K16 + kv0 * D, kdt, Kw.data(), DType::f32, kmax * D);
        convert_elements(V16 + kv0 * Dv, vdt, Vw.data(), DType::f32, kmax * Dv);
        Kf = Kw.data(), Vf = Vw.data();
      }
      if (in_registers) {
        cpu::half_gemm(rows, kmax, D, Qs.data(), DType::f32, D, K16 + kv0 * D, kdt, D, true, S.data(), kmax, isa,
                       false);
        for (int64_t i = 0; i < rows * kmax; ++i) S[i] *= scale;
      } else {
        cpu::gemm(false, true, rows, kmax, D, scale, Qs.data(), D, Kf, D, S.data(), kmax, {}, cpu::Threads::Single);
      }
      softmax_rows(S.data(), rows, kmax, b, h0, i0, nq);
      if (in_registers)
        cpu::half_gemm(rows, Dv, kmax, S.data(), DType::f32, kmax, V16 + kv0 * Dv, vdt, Dv, false, Os.data(), Dv, isa,
                       false);
      else
        cpu::gemm(false, false, rows, Dv, kmax, 1.f, S.data(), kmax, Vf, Dv, Os.data(), Dv, {}, cpu::Threads::Single);
      for (int64_t g = 0; g < G; ++g)
        convert_elements(Os.data() + g * nq * Dv, DType::f32, Ob + (q0 + g * Sq) * Dv * eo, odt, nq * Dv);
    }
  });
}

// An attention whose q, k and v are views into larger tensors and whose o is written at strides
// (the `views` attribute, docs/graph-format.md; compiled mode writes it for Vulkan's plans, a
// graph file may carry it): the views are gathered into contiguous [B, H, S, D] copies, the
// attention runs on them, and its rows are written where `views` puts them. Elements move as
// they are stored (an f32 copy of the dtype adapter, or the tensor's own dtype).
void run_attention_views(const Kernel& k) {
  std::string err;
  const ir::AttentionViews av = ir::attention_views(k.node->attrs, &err);
  if (!err.empty()) throw InputError(k.label + ": " + err);
  const int64_t B = av.B, H = av.H;
  auto elem = [](const TensorRef& t) { return dtype_size(cpu::stored_dtype(t)); };
  std::vector<std::unique_ptr<CpuBuffer>> keep;
  auto box = [&](const TensorRef& like, int64_t S, int64_t W) {
    keep.push_back(std::make_unique<CpuBuffer>((size_t)std::max<int64_t>(1, B * H * S * W) * elem(like),
                                               static_cast<const CpuBuffer*>(like.buf)->f32_view));
    return TensorRef{keep.back().get(), 0, {B, H, S, W}, like.dtype};
  };
  // Row (b, h, s) of W elements between a view (offset, strides) and a contiguous box.
  auto rows = [&](const TensorRef& view, int64_t off, const int64_t* st, const TensorRef& cont, int64_t S, int64_t W, bool gather) {
    const size_t es = elem(view), row = (size_t)W * es;
    uint8_t *v = bytes(view), *c = bytes(cont);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t s = 0; s < S; ++s) {
          uint8_t* at = v + (size_t)(off + b * st[0] + h * st[1] + s * st[2]) * es;
          uint8_t* ct = c + (size_t)((b * H + h) * S + s) * row;
          if (gather) std::memcpy(ct, at, row);
          else std::memcpy(at, ct, row);
        }
  };
  Kernel sub = k;
  const int64_t S[3] = {av.Sq, av.Sk, av.Sk}, W[3] = {av.D, av.D, av.Dv};
  for (int i = 0; i < 3; ++i) {
    sub.inputs[i] = box(k.inputs[i], S[i], W[i]);
    rows(k.inputs[i], av.off[i], av.stride[i], sub.inputs[i], S[i], W[i], true);
  }
  sub.output = box(k.output, av.Sq, av.Dv);
  ir::Node plain = *k.node;  // the contiguous attention over the copies
  plain.attrs.values.erase("views");
  plain.attrs.values.erase("out_shape");
  sub.node = &plain;
  run_attention(sub);
  rows(k.output, 0, av.stride[3], sub.output, av.Sq, av.Dv, false);
}

// ---------------- dispatch ----------------
void run_node(const Kernel& k) {
  if (cpu::run_quant_op(k)) return;
  if (cpu::run_index_op(k)) return;  // min/prod, the Index ops, integer compares (cpu_ops_index.cpp)
  switch (ir::op_info(k.node->op).category) {
    case ir::Category::Binary: case ir::Category::Unary:
      if (k.node->op == Op::Cast) run_cast(k);
      else if (is_integer(k.output.dtype) && is_native(k)) run_int_elementwise(k);
      else run_elementwise(k);
      return;
    case ir::Category::Reduce: run_reduce(k); return;
    case ir::Category::Matmul: (k.node->op == Op::Linear ? run_linear : run_matmul)(k); return;
    case ir::Category::Gather: run_embedding(k); return;
    case ir::Category::Rope: run_rope(k); return;
    case ir::Category::Attention: k.node->attrs.has("views") ? run_attention_views(k) : run_attention(k); return;
    case ir::Category::Spatial: cpu::run_spatial(k, ptr); return;
    case ir::Category::Row:
      switch (k.node->op) {
        case Op::Softmax: case Op::SoftmaxVjp: run_softmax(k); return;
        case Op::ScaledMaskedSoftmax: run_scaled_masked_softmax(k); return;
        default: run_norm(k); return;
      }
    case ir::Category::Shape:
      switch (k.node->op) {
        case Op::Reshape:
          if (bytes(k.output) != bytes(k.inputs[0]))
            std::memcpy(bytes(k.output), bytes(k.inputs[0]), k.output.numel() * dtype_size(k.output.dtype));
          return;
        case Op::Transpose: run_transpose(k); return;
        case Op::BroadcastTo: run_broadcast_copy(k); return;
        case Op::Narrow: run_narrow(k); return;
        case Op::Concat: run_concat(k); return;
        default: break;
      }
      break;
    case ir::Category::Leaf: case ir::Category::Index: case ir::Category::Quant: case ir::Category::Control: break;
  }
  throw RuntimeError(k.label + ": the CPU executor cannot run op " + ir::op_name(k.node->op));
}

void run_kernel_f32(const Kernel& k) {
  if (k.fused) {
    std::vector<const float*> ins;
    for (const auto& t : k.inputs) ins.push_back(ptr(t));
    cpu::run_fused(*k.fused, ins, ptr(k.output));
  } else {
    run_node(k);
  }
}

// Runs an f32-only kernel on tensors of other dtypes: inputs not in f32 are converted into
// f32 scratch (the TensorRef keeps its logical dtype, so e.g. attention still sees a bool
// mask as bool), and the f32 result is rounded into the output's dtype (round on store).
void run_f32_adapted(const Kernel& k) {
  Kernel a = k;
  std::vector<std::unique_ptr<CpuBuffer>> scratch;
  auto f32_copy = [&](const TensorRef& t, bool fill) {
    scratch.push_back(std::make_unique<CpuBuffer>((size_t)std::max<int64_t>(t.numel(), 1) * 4, true));
    if (fill) parallel_convert(bytes(t), t.dtype, scratch.back()->data, DType::f32, t.numel());
    return TensorRef{scratch.back().get(), 0, t.shape, t.dtype};
  };
  for (auto& t : a.inputs)
    if (t.dtype != DType::f32) t = f32_copy(t, true);
  const bool convert_out = k.output.dtype != DType::f32;
  if (convert_out) a.output = f32_copy(k.output, false);
  run_kernel_f32(a);
  if (convert_out) parallel_convert(bytes(a.output), DType::f32, bytes(k.output), k.output.dtype, k.output.numel());
}

// ---------------- matmul / linear with f16/bf16 right-hand operands (half_gemm.h) ----------------
// The 2-byte weights are read as they are (never widened in memory); A may be f32, f16 or
// bf16; products accumulate in f32, the bias is added in f32, and the result is rounded into
// the output's dtype once (docs/graph-format.md, compute rules).
bool is_half_product(const Kernel& k) {
  if (k.fused || (k.node->op != Op::Linear && k.node->op != Op::Matmul)) return false;
  if (!is_half(k.inputs[1].dtype) || !is_float(k.inputs[0].dtype) || !is_float(k.output.dtype)) return false;
  if (k.output.dtype == DType::f64 || k.inputs[0].dtype == DType::f64) return false;  // f64 products: dgemm (ops_f64.h)
  if (k.node->op == Op::Matmul && k.node->attrs.b("transpose_a")) return false;  // the adapter's f32 path
  return k.inputs.size() < 3 || is_float(k.inputs[2].dtype);
}

void run_half_product(const Kernel& k) {
  const TensorRef &a = k.inputs[0], &b = k.inputs[1];
  const Shape &as = a.shape, &bs = b.shape, &os = k.output.shape;
  const int64_t total = k.output.numel();
  if (total == 0) return;
  const bool direct = k.output.dtype == DType::f32;
  std::unique_ptr<CpuBuffer> scratch;
  if (!direct) scratch = std::make_unique<CpuBuffer>((size_t)total * 4, true);
  float* C = direct ? ptr(k.output) : reinterpret_cast<float*>(scratch->data);
  const uint8_t* A = bytes(a);
  const uint16_t* B = cpu::typed<uint16_t>(b);
  const size_t ea = dtype_size(a.dtype);
  int64_t N;
  if (k.node->op == Op::Linear) {
    const int64_t Out = bs[0], In = bs[1];
    N = Out;
    cpu::half_gemm(total / Out, Out, In, A, a.dtype, In, B, b.dtype, In, true, C, Out);
  } else {
    const bool tb = k.node->attrs.b("transpose_b");
    const int64_t M = os[os.size() - 2], K = as.back();
    N = os.back();
    Shape ob(os.begin(), os.end() - 2), ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
    const int64_t batches = shape_numel(ob);
    if (shape_numel(bb) == 1) {  // a's batch folds into M: one product
      cpu::half_gemm(batches * M, N, K, A, a.dtype, K, B, b.dtype, tb ? K : N, tb, C, N);
    } else {
      const auto bix = broadcast_batch_index(ab, bb, ob);
      for (int64_t bi = 0; bi < batches; ++bi) {
        const int64_t oa = bix.a[bi], obb = bix.b[bi];
        cpu::half_gemm(M, N, K, A + oa * M * K * ea, a.dtype, K, B + obb * K * N, b.dtype, tb ? K : N, tb,
                       C + bi * M * N, N);
      }
    }
  }
  if (k.inputs.size() == 3) {  // linear's bias, in f32
    std::vector<float> bias((size_t)N);
    convert_elements(bytes(k.inputs[2]), k.inputs[2].dtype, bias.data(), DType::f32, N);
    parallel(total / N, 64, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t j = 0; j < N; ++j) C[r * N + j] += bias[j];
    });
  }
  if (!direct) parallel_convert(scratch->data, DType::f32, bytes(k.output), k.output.dtype, total);
}

void run_kernel(const Kernel& k) {
  if (is_half_product(k)) {
    run_half_product(k);
    return;
  }
  if (is_half_attention(k)) {
    run_attention(k);
    return;
  }
  if (is_native(k)) {
    run_node(k);
    return;
  }
  if (cpu::touches_f64(k)) {  // computed in double, never through the f32 adapter
    cpu::run_f64(k);
    return;
  }
  bool all_f32 = k.output.dtype == DType::f32;
  for (const auto& t : k.inputs) all_f32 = all_f32 && t.dtype == DType::f32;
  if (all_f32) run_kernel_f32(k);
  else run_f32_adapted(k);
}

// Compiled plans: cpu_plan.h.
using cpu::CpuRecording;
using cpu::PlanStep;
using cpu::Product;
using cpu::as_product;
using cpu::dnnl_conv_candidate;
using cpu::record_cpu_plan;
using cpu::run_blocked_step;
using cpu::run_conv_step;
using cpu::run_product_step;
using cpu::shared_pack;

class CpuExecutor : public Executor {
 public:
  std::string name() const override { return "cpu"; }
  // pack_b reads a weight in either layout (and an OpenBLAS product is as fast on both), so a
  // transposed copy of matmul(x, B) + b's B would only be held next to the packed one.
  bool transposed_linear_weights() const override { return false; }
  bool integer_gemm() const override { return true; }
  std::string description() const override {
    const auto& pool = cpu::ThreadPool::global();
    return "CPU, " + std::to_string(pool.size()) + " threads (polling " + std::to_string(pool.spin_us()) + " us before sleeping, " +
           pool.spin_why() + "), " + cpu::gemm_description();
  }
  std::unique_ptr<DeviceBuffer> allocate(size_t n) override { return std::make_unique<CpuBuffer>(n); }
  // f64 runs where a kernel computes it in double (ops_f64.h); the ONNX-only integer widths
  // (i16, u16, u32, u64) where a kernel keeps them exact (data movement, cast, the integer
  // elementwise ops, bit_shift) or where the documented integer -> float rule converts them
  // into a float op's dtype. Anything else is refused here, before the run, rather than
  // computed through f32.
  void check_dtypes(const std::string& where, const ir::Node& n, const std::vector<DType>& inputs,
                    DType output) const override {
    std::vector<DType> all(inputs);
    all.push_back(output);
    bool f64 = false, wide = false;
    for (DType t : all) {
      f64 = f64 || t == DType::f64;
      wide = wide || (is_integer(t) && !dtype_traits(t).json);
    }
    if (f64)
      if (std::string why = cpu::f64_refusal(n); !why.empty()) throw InputError(where + ": " + why);
    if (!wide) return;
    const auto cat = ir::op_info(n.op).category;
    switch (n.op) {
      case Op::Where: case Op::Gather: case Op::GatherElements: case Op::Slice: case Op::Pad: case Op::Trilu:
      case Op::Embedding: case Op::Cast:
        return;
      default: break;
    }
    if (cat == ir::Category::Leaf || cat == ir::Category::Shape || cat == ir::Category::Control) return;
    if (cat == ir::Category::Unary || cat == ir::Category::Binary) {
      if (is_integer(output) || is_float(output)) return;  // native integers, or converted into a float op
    }
    std::string names;
    for (DType t : all)
      if (is_integer(t) && !dtype_traits(t).json) names = dtype_name(t);
    throw InputError(where + ": the CPU executor has no " + ir::op_name(n.op) + " kernel for " + names +
                     " tensors (they are moved, cast, shifted and computed on by the integer elementwise ops); cast "
                     "to i32, i64 or a float dtype first");
  }
  // Host memory holds every dtype as itself (storage_dtype is the logical dtype).
  void upload(DeviceBuffer& dst, size_t offset, const void* src, size_t n, DType) override {
    check(dst, offset, n, "upload");
    if (n) std::memcpy(static_cast<CpuBuffer&>(dst).data + offset, src, n);
  }
  void download(const DeviceBuffer& src, size_t offset, void* dst, size_t n, DType) override {
    check(src, offset, n, "download");
    if (n) std::memcpy(dst, static_cast<const CpuBuffer&>(src).data + offset, n);
  }
  void zero(DeviceBuffer& dst, size_t offset, size_t n) override {
    check(dst, offset, n, "zero");
    if (n) std::memset(static_cast<CpuBuffer&>(dst).data + offset, 0, n);
  }
  bool appends_in_place() const override { return true; }  // run_concat skips inputs_in_output
  void copy_ranges(const DeviceBuffer& src, DeviceBuffer& dst, const std::vector<std::pair<size_t, size_t>>& at,
                   size_t n) override {
    for (const auto& [from, to] : at) {
      check(src, from, n, "copy");
      check(dst, to, n, "copy");
      if (n) std::memmove(static_cast<CpuBuffer&>(dst).data + to, static_cast<const CpuBuffer&>(src).data + from, n);
    }
  }
  std::unique_ptr<DeviceBuffer> wrap_host(const void* data, size_t n, DType dtype,
                                          std::shared_ptr<const void> keep) override {
    if (!data || !keep || reinterpret_cast<uintptr_t>(data) % dtype_size(dtype) != 0) return nullptr;
    return std::make_unique<CpuBuffer>(data, n, std::move(keep));
  }
  void launch(const Kernel& k) override {
    auto t0 = std::chrono::steady_clock::now();
    run_kernel(k);
    if (profiling_) {
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      profile_.push_back({k.label, k.fused ? "fused" : ir::op_name(k.node->op), s, k.flops, k.bytes});
    }
  }
  void flush() override {}
  std::unique_ptr<Recording> record(const std::vector<Kernel>& kernels) override {
    if (const char* e = std::getenv("RLX_CPU_PLAIN_PLAN"); e && *e && std::string(e) != "0")
      return Executor::record(kernels);  // for comparisons: no packing, no epilogues
    return record_cpu_plan(kernels);
  }
  void replay(Recording& r) override {
    auto* rec = dynamic_cast<CpuRecording*>(&r);
    if (!rec) return Executor::replay(r);
    if (rec->runs++ == 1)
      for (auto& st : rec->steps) {
        if (st.pack_later) {
          Product p;
          as_product(st.k, p);
          st.packed = shared_pack(st.k.inputs[1], p);
          st.pack_later = false;
        }
      }
    for (const auto& st : rec->steps) {
      if (st.qpacked) {
        auto t0 = std::chrono::steady_clock::now();
        cpu::run_quant_packed(st.k, *st.qpacked);
        if (profiling_) {
          double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          profile_.push_back({st.k.label, std::string(ir::op_name(st.k.node->op)) + " (packed)", s, st.k.flops, st.k.bytes});
        }
        continue;
      }
      if (!st.bkind.empty()) {
        auto t0 = std::chrono::steady_clock::now();
        run_blocked_step(st);
        if (profiling_) {
          double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          profile_.push_back({st.k.label, std::string(ir::op_name(st.k.node->op)) + " (blocked)", s, st.k.flops, st.k.bytes});
        }
        continue;
      }
      if (st.conv || ((st.has_epi || st.has_pre) && dnnl_conv_candidate(st.k))) {
        auto t0 = std::chrono::steady_clock::now();
        if (st.conv && run_conv_step(st)) {
          if (profiling_) {
            double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::string label = st.has_epi ? st.k.label + " + " + st.epi.label : st.k.label;
            profile_.push_back({label, st.has_epi ? "conv2d+epilogue (oneDNN)" : "conv2d (oneDNN)", s,
                                st.k.flops + st.epi.flops, st.k.bytes + st.epi.bytes});
          }
          continue;
        }
        if (st.blocked_in || st.blocked_out)  // its neighbour in the chain has no NCHW tensor to use
          throw RuntimeError(st.k.label + ": oneDNN's convolution failed inside a chain of blocked convolutions");
        if (st.has_pre) launch(st.pre);
        t0 = std::chrono::steady_clock::now();
        run_rlx_conv_step(st);
        if (profiling_) {
          double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          std::string label = st.has_epi ? st.k.label + " + " + st.epi.label : st.k.label;
          profile_.push_back({label, std::string(ir::op_name(st.k.node->op)) + (st.has_epi ? "+epilogue" : ""), s,
                              st.k.flops + st.epi.flops, st.k.bytes + st.epi.bytes});
        }
        continue;
      }
      if (!st.packed && !st.has_epi) {
        launch(st.k);
        continue;
      }
      auto t0 = std::chrono::steady_clock::now();
      run_product_step(st);
      if (profiling_) {
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::string label = st.has_epi ? st.k.label + " + " + st.epi.label : st.k.label;
        std::string op = std::string(ir::op_name(st.k.node->op)) + (st.has_epi ? "+epilogue" : "") + (st.packed ? " (packed)" : "");
        profile_.push_back({label, op, s, st.k.flops + st.epi.flops, st.k.bytes + st.epi.bytes});
      }
    }
    flush();
  }
  std::shared_ptr<const void> share_memory(DeviceBuffer& buf) override {
    return std::shared_ptr<const void>(static_cast<CpuBuffer&>(buf).mem);
  }
  void renew_if_shared(DeviceBuffer& buf) override {
    auto& b = static_cast<CpuBuffer&>(buf);
    if (b.mem.use_count() > 1) b.renew();
  }

 private:
  static void check(const DeviceBuffer& b, size_t offset, size_t n, const char* what) {
    if (offset + n > b.capacity)
      throw RuntimeError(std::string("internal: ") + what + " of " + std::to_string(n) + " bytes at offset " +
                         std::to_string(offset) + " overruns a buffer of " + std::to_string(b.capacity) + " bytes");
  }
};

}  // namespace

std::unique_ptr<Executor> make_cpu_executor() { return std::make_unique<CpuExecutor>(); }


}  // namespace rlx
