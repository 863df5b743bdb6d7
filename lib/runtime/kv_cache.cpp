#include "runtime/kv_cache.h"

#include <cstring>

#include "core/error.h"

namespace rlx {

CapacityGraph capacity_step_graph(const ir::Graph& g, const std::vector<std::string>& past, const std::vector<std::string>& present) {
  CapacityGraph r;
  auto out = std::make_shared<ir::Graph>(g);
  for (size_t k = 0; k < present.size(); ++k) {
    int j = -1;
    for (size_t o = 0; o < g.outputs.size(); ++o)
      if (g.nodes[g.outputs[o]].id == present[k]) j = (int)o;
    if (j < 0) {
      r.why_not = "output '" + present[k] + "' is missing from the specialised graph";
      return r;
    }
    const ir::Node& n = g.nodes[g.outputs[j]];
    const int64_t axis = n.op == ir::Op::Concat ? n.attrs.i("axis") : 0;
    if (n.op != ir::Op::Concat || n.inputs.size() != 2 || !(axis == 2 || axis == -2) ||
        g.nodes[n.inputs[0]].op != ir::Op::Input || g.nodes[n.inputs[0]].id != past[k]) {
      r.why_not = "output '" + present[k] + "' is not a concatenation of input '" + past[k] + "' and the new rows along the past axis";
      return r;
    }
    out->outputs[j] = n.inputs[1];
    r.new_rows.push_back(j);
  }
  r.graph = std::move(out);
  return r;
}

int64_t KvCache::capacity_for(int64_t needed) {
  int64_t c = 64;
  while (c < needed) c *= 2;
  return c;
}

KvCache::KvCache(std::vector<int64_t> kv_heads, std::vector<int64_t> head_dim, std::vector<DType> dtypes, int64_t capacity)
    : heads_(std::move(kv_heads)), dim_(std::move(head_dim)), dtypes_(std::move(dtypes)), capacity_(capacity) {
  for (size_t k = 0; k < heads_.size(); ++k) slots_.emplace_back(Shape{1, heads_[k], capacity_, dim_[k]}, dtypes_[k]);
}

std::vector<std::pair<size_t, size_t>> KvCache::write(size_t k, const Tensor& rows_in) {
  const Tensor rows = rows_in.astype(dtypes_[k]);
  const Shape& s = rows.shape();
  if (s.size() != 4 || s[0] != 1 || s[1] != heads_[k] || s[3] != dim_[k])
    throw RuntimeError("KV cache: new rows of shape " + shape_str(s) + ", expected [1, " + std::to_string(heads_[k]) + ", t, " +
                       std::to_string(dim_[k]) + "]");
  const int64_t t = s[2];
  if (length_ + t > capacity_)
    throw RuntimeError("internal: KV cache: " + std::to_string(length_ + t) + " positions exceed the capacity " + std::to_string(capacity_));
  const size_t es = dtype_size(dtypes_[k]), row = (size_t)dim_[k] * es;
  uint8_t* dst = static_cast<uint8_t*>(slots_[k].mutable_raw());
  const uint8_t* src = static_cast<const uint8_t*>(rows.raw());
  std::vector<std::pair<size_t, size_t>> ranges;
  for (int64_t h = 0; h < heads_[k]; ++h) {
    const size_t at = ((size_t)h * capacity_ + length_) * row;
    std::memcpy(dst + at, src + (size_t)h * t * row, t * row);
    ranges.emplace_back(at, t * row);
  }
  return ranges;
}

void KvCache::grow(int64_t capacity) {
  if (capacity < length_) throw RuntimeError("internal: KV cache: capacity " + std::to_string(capacity) + " below its length");
  for (size_t k = 0; k < slots_.size(); ++k) {
    Tensor next(Shape{1, heads_[k], capacity, dim_[k]}, dtypes_[k]);
    const size_t row = (size_t)dim_[k] * dtype_size(dtypes_[k]);
    for (int64_t h = 0; h < heads_[k] && length_ > 0; ++h)
      std::memcpy(static_cast<uint8_t*>(next.mutable_raw()) + (size_t)h * capacity * row,
                  static_cast<const uint8_t*>(slots_[k].raw()) + (size_t)h * capacity_ * row, length_ * row);
    slots_[k] = std::move(next);
  }
  capacity_ = capacity;
}

Tensor KvCache::valid(size_t k) const {
  Tensor r(Shape{1, heads_[k], length_, dim_[k]}, dtypes_[k]);
  if (length_ == 0) return r;
  const size_t row = (size_t)dim_[k] * dtype_size(dtypes_[k]);
  for (int64_t h = 0; h < heads_[k]; ++h)
    std::memcpy(static_cast<uint8_t*>(r.mutable_raw()) + (size_t)h * length_ * row,
                static_cast<const uint8_t*>(slots_[k].raw()) + (size_t)h * capacity_ * row, length_ * row);
  return r;
}

int64_t KvCache::bytes() const {
  int64_t b = 0;
  for (const auto& s : slots_) b += (int64_t)s.nbytes();
  return b;
}

}  // namespace rlx
