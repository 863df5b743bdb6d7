#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rlx {

using Shape = std::vector<int64_t>;

// Number of elements; returns -1 when a dim is negative or when the product of the
// non-zero dims overflows int64 (also for an empty tensor: [0, 2^62, 2^62] would overflow
// the strides; the answer must not depend on where the 0 is).
inline int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  bool empty = false;
  for (int64_t d : s) {
    if (d < 0) return -1;
    if (d == 0) {
      empty = true;
      continue;
    }
    if (n > INT64_MAX / d) return -1;
    n *= d;
  }
  return empty ? 0 : n;
}

// Bytes of `numel` elements of `elem_size` bytes each, or -1 when numel is negative or the
// product overflows int64. Every buffer size derived from a file goes through this.
inline int64_t checked_nbytes(int64_t numel, size_t elem_size) {
  if (numel < 0 || elem_size == 0) return numel < 0 ? -1 : 0;
  if (numel > INT64_MAX / (int64_t)elem_size) return -1;
  return numel * (int64_t)elem_size;
}

inline std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

// A tensor seen as [outer, len, inner] around `axis` (0 <= axis < rank): the product of the dims
// before it, its own size, and the product of the dims after it.
struct Axis3 {
  int64_t outer = 1, len = 1, inner = 1;
};
inline Axis3 around(const Shape& s, int axis) {
  Axis3 v;
  for (int k = 0; k < (int)s.size(); ++k) (k < axis ? v.outer : k == axis ? v.len : v.inner) *= s[k];
  return v;
}

// Row-major strides in elements.
inline std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

// Strides (elements) to read a tensor of shape `in` broadcast to shape `out`
// (0 along broadcast dims). `in` is right-aligned against `out`.
inline std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  auto cs = contiguous_strides(in);
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[off + i] = (in[i] == 1 && out[off + i] != 1) ? 0 : cs[i];
  return st;
}

// For a batched product whose operands have leading (batch) dims `a` and `b`, broadcast to the
// output's leading dims `out` (NumPy rules): for each output batch, in row-major order, the index
// of the a-matrix and of the b-matrix it reads. Callers scale by the matrix sizes.
struct BatchIndex {
  std::vector<int64_t> a, b;
};
inline BatchIndex broadcast_batch_index(const Shape& a, const Shape& b, const Shape& out) {
  const auto sa = broadcast_strides(a, out), sb = broadcast_strides(b, out);
  const int64_t n = shape_numel(out);
  BatchIndex r{std::vector<int64_t>((size_t)n), std::vector<int64_t>((size_t)n)};
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, ia = 0, ib = 0;
    for (size_t d = out.size(); d-- > 0;) {
      const int64_t c = rem % out[d];
      rem /= out[d];
      ia += c * sa[d];
      ib += c * sb[d];
    }
    r.a[(size_t)i] = ia;
    r.b[(size_t)i] = ib;
  }
  return r;
}

}  // namespace rlx
