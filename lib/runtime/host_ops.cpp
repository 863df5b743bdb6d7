// Host kernels of the data-dependent ops; see host_ops.h. Semantics are ONNX's (NonZero,
// Compress, Unique, TopK, NonMaxSuppression as ONNX Runtime computes them).
#include "runtime/host_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "ir/op_registry.h"

namespace rlx {

namespace {

bool nonzero_at(const Tensor& t, int64_t k) { return is_float(t.dtype()) ? t.at(k) != 0 : t.int_at(k) != 0; }

int axis_of(int64_t a, int rank, const std::string& who) {
  const int64_t x = a < 0 ? a + rank : a;
  if (x < 0 || x >= rank) throw InputError(who + ": axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
  return (int)x;
}

// x seen as [outer, len, inner] around `axis`.
struct Around {
  int64_t outer = 1, len = 1, inner = 1;
  Around(const Shape& s, int axis) {
    for (int k = 0; k < (int)s.size(); ++k) {
      if (k < axis) outer *= s[k];
      else if (k == axis) len = s[k];
      else inner *= s[k];
    }
  }
};

// The slices `picks` (positions along `axis`) of x, in that order: x's shape with axis = picks.size().
Tensor take_slices(const Tensor& x, int axis, const std::vector<int64_t>& picks) {
  Shape o = x.shape();
  o[axis] = (int64_t)picks.size();
  Tensor r(o, x.dtype());
  const Around a(x.shape(), axis);
  const size_t es = dtype_size(x.dtype()), row = (size_t)a.inner * es;
  const auto* src = static_cast<const uint8_t*>(x.raw());
  auto* dst = static_cast<uint8_t*>(r.mutable_raw());
  const int64_t n = (int64_t)picks.size();
  for (int64_t b = 0; b < a.outer; ++b)
    for (int64_t j = 0; j < n; ++j)
      std::memcpy(dst + (size_t)(b * n + j) * row, src + (size_t)(b * a.len + picks[j]) * row, row);
  return r;
}

Tensor i64_tensor(Shape s, const std::vector<int64_t>& v) { return Tensor::from_ints(std::move(s), v, DType::i64); }

HostStepResult nonzero(const Tensor& x) {
  const Shape s = x.shape().empty() ? Shape{1} : x.shape();  // a scalar as one element
  const int r = (int)s.size();
  std::vector<int64_t> flat;
  for (int64_t k = 0; k < x.numel(); ++k)
    if (nonzero_at(x, k)) flat.push_back(k);
  const int64_t n = (int64_t)flat.size();
  std::vector<int64_t> out((size_t)(r * n));
  const std::vector<int64_t> st = contiguous_strides(s);
  for (int64_t j = 0; j < n; ++j)
    for (int d = 0; d < r; ++d) out[(size_t)(d * n + j)] = flat[j] / st[d] % s[d];
  return {{i64_tensor({r, n}, out)}, n};
}

HostStepResult compress(const ir::Node& nd, const Tensor& x0, const Tensor& cond, const std::string& who) {
  Tensor x = x0;
  int axis = 0;
  if (nd.attrs.has("axis")) {
    axis = axis_of(nd.attrs.i("axis"), x.rank(), who);
  } else {
    x = x.reshaped({x.numel()});
  }
  const int64_t len = x.shape()[axis];
  std::vector<int64_t> picks;
  for (int64_t k = 0; k < cond.numel(); ++k) {
    if (!nonzero_at(cond, k)) continue;
    if (k >= len)
      throw InputError(who + ": the condition selects position " + std::to_string(k) + " along an axis of length " + std::to_string(len));
    picks.push_back(k);
  }
  return {{take_slices(x, axis, picks)}, (int64_t)picks.size()};
}

HostStepResult unique(const ir::Node& nd, const Tensor& x0, const std::string& who) {
  Tensor x = x0;
  int axis = 0;
  if (!nd.attrs.is_none("axis")) axis = axis_of(nd.attrs.i("axis"), x.rank(), who);
  else x = x.reshaped({x.numel()});
  const Around a(x.shape(), axis);
  const bool fl = is_float(x.dtype());
  // slice j's values, in row-major order of the other axes (numpy's np.unique(axis=...) compares these)
  auto value = [&](int64_t j, int64_t e) {  // element e of slice j
    const int64_t b = e / a.inner, i = e % a.inner, k = (b * a.len + j) * a.inner + i;
    return fl ? x.at(k) : (double)x.int_at(k);
  };
  const int64_t m = a.outer * a.inner;
  auto less = [&](int64_t p, int64_t q) {
    for (int64_t e = 0; e < m; ++e) {
      const double u = value(p, e), v = value(q, e);
      if (u != v) return u < v;
    }
    return false;
  };
  auto equal = [&](int64_t p, int64_t q) {
    for (int64_t e = 0; e < m; ++e)
      if (value(p, e) != value(q, e)) return false;
    return true;
  };
  // the slices in value order (stable: equal slices keep their positions' order)
  std::vector<int64_t> order((size_t)a.len);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), less);
  std::vector<int64_t> first, counts, inverse((size_t)a.len);
  for (size_t t = 0; t < order.size(); ++t) {
    if (t == 0 || !equal(order[t - 1], order[t])) {
      first.push_back(order[t]);
      counts.push_back(0);
    }
    counts.back()++;
    inverse[(size_t)order[t]] = (int64_t)first.size() - 1;
  }
  const int64_t n = (int64_t)first.size();
  if (!nd.attrs.b("sorted")) {  // in order of first occurrence
    std::vector<int64_t> by_pos((size_t)n);
    std::iota(by_pos.begin(), by_pos.end(), 0);
    std::sort(by_pos.begin(), by_pos.end(), [&](int64_t p, int64_t q) { return first[p] < first[q]; });
    std::vector<int64_t> rank((size_t)n), f2((size_t)n), c2((size_t)n);
    for (int64_t r = 0; r < n; ++r) {
      rank[(size_t)by_pos[r]] = r;
      f2[(size_t)r] = first[(size_t)by_pos[r]];
      c2[(size_t)r] = counts[(size_t)by_pos[r]];
    }
    for (auto& v : inverse) v = rank[(size_t)v];
    first = f2;
    counts = c2;
  }
  return {{take_slices(x, axis, first), i64_tensor({n}, first), i64_tensor({a.len}, inverse), i64_tensor({n}, counts)}, n};
}

HostStepResult topk(const ir::Node& nd, const Tensor& x, const Tensor& kt, const std::string& who) {
  if (kt.numel() != 1) throw InputError(who + ": k must have one element, it has " + std::to_string(kt.numel()));
  const int axis = axis_of(nd.attrs.i("axis"), x.rank(), who);
  const int64_t k = kt.int_at(0);
  const Around a(x.shape(), axis);
  if (k < 0 || k > a.len)
    throw InputError(who + ": k is " + std::to_string(k) + ", the axis has length " + std::to_string(a.len));
  const bool largest = nd.attrs.b("largest");
  Shape o = x.shape();
  o[axis] = k;
  Tensor vals(o, x.dtype());
  std::vector<int64_t> idx((size_t)shape_numel(o));
  const size_t es = dtype_size(x.dtype());
  const auto* src = static_cast<const uint8_t*>(x.raw());
  auto* dst = static_cast<uint8_t*>(vals.mutable_raw());
  const bool fl = is_float(x.dtype());
  std::vector<int64_t> pos((size_t)a.len);
  std::vector<double> v((size_t)a.len);
  for (int64_t b = 0; b < a.outer; ++b)
    for (int64_t i = 0; i < a.inner; ++i) {
      for (int64_t j = 0; j < a.len; ++j) {
        const int64_t e = (b * a.len + j) * a.inner + i;
        v[(size_t)j] = fl ? x.at(e) : (double)x.int_at(e);
      }
      std::iota(pos.begin(), pos.end(), 0);
      // larger (smaller) first; NaN counts as the largest; ties: the lower index first
      auto key_less = [&](int64_t p, int64_t q) {
        const double u = v[(size_t)p], w = v[(size_t)q];
        const bool un = std::isnan(u), wn = std::isnan(w);
        if (un || wn) return un != wn && (largest ? un : wn);
        return largest ? u > w : u < w;
      };
      std::stable_sort(pos.begin(), pos.end(), key_less);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e_out = (b * k + j) * a.inner + i, e_in = (b * a.len + pos[(size_t)j]) * a.inner + i;
        std::memcpy(dst + (size_t)e_out * es, src + (size_t)e_in * es, es);
        idx[(size_t)e_out] = pos[(size_t)j];
      }
    }
  return {{vals, i64_tensor(o, idx)}, k};
}

HostStepResult nms(const ir::Node& nd, const std::vector<Tensor>& ins, const std::string& who) {
  const Tensor& boxes = ins[0];
  const Tensor& scores = ins[1];
  if (boxes.rank() != 3 || boxes.shape()[2] != 4)
    throw InputError(who + ": boxes must be [batches, boxes, 4], got " + shape_str(boxes.shape()));
  if (scores.rank() != 3 || scores.shape()[0] != boxes.shape()[0] || scores.shape()[2] != boxes.shape()[1])
    throw InputError(who + ": scores must be [batches, classes, boxes] = [" + std::to_string(boxes.shape()[0]) + ", C, " +
                     std::to_string(boxes.shape()[1]) + "], got " + shape_str(scores.shape()));
  auto scalar = [&](size_t k, const char* what) -> const Tensor* {
    if (k >= ins.size() || !ins[k].defined() || (ins[k].numel() == 0 && !ins[k].shape().empty())) return nullptr;
    if (ins[k].numel() != 1) throw InputError(who + ": " + what + " must have one element, it has " + std::to_string(ins[k].numel()));
    return &ins[k];
  };
  const Tensor* mo = scalar(2, "max_output_boxes_per_class");
  const Tensor* it = scalar(3, "iou_threshold");
  const Tensor* st = scalar(4, "score_threshold");
  const int64_t max_out = mo ? mo->int_at(0) : 0;
  const double iou_t = it ? it->at(0) : 0.0;
  if (iou_t < 0 || iou_t > 1) throw InputError(who + ": iou_threshold must be within [0, 1], it is " + std::to_string(iou_t));
  const bool center = nd.attrs.i("center_point_box") != 0;
  const int64_t B = boxes.shape()[0], N = boxes.shape()[1], C = scores.shape()[1];
  std::vector<int64_t> out;
  if (max_out > 0) {
    for (int64_t b = 0; b < B; ++b) {
      // corners (ymin, xmin, ymax, xmax) of batch b's boxes
      std::vector<double> cor((size_t)(N * 4));
      for (int64_t i = 0; i < N; ++i) {
        const int64_t e = (b * N + i) * 4;
        const double p0 = boxes.at(e), p1 = boxes.at(e + 1), p2 = boxes.at(e + 2), p3 = boxes.at(e + 3);
        double* c = &cor[(size_t)(i * 4)];
        if (center) {  // x_center, y_center, width, height
          c[0] = p1 - p3 / 2, c[1] = p0 - p2 / 2, c[2] = p1 + p3 / 2, c[3] = p0 + p2 / 2;
        } else {  // y1, x1, y2, x2: any two diagonal corners
          c[0] = std::min(p0, p2), c[1] = std::min(p1, p3), c[2] = std::max(p0, p2), c[3] = std::max(p1, p3);
        }
      }
      auto suppress = [&](int64_t p, int64_t q) {
        const double* u = &cor[(size_t)(p * 4)];
        const double* v = &cor[(size_t)(q * 4)];
        const double au = (u[2] - u[0]) * (u[3] - u[1]), av = (v[2] - v[0]) * (v[3] - v[1]);
        if (au <= 0 || av <= 0) return false;
        const double ih = std::min(u[2], v[2]) - std::max(u[0], v[0]), iw = std::min(u[3], v[3]) - std::max(u[1], v[1]);
        if (ih <= 0 || iw <= 0) return false;
        const double inter = ih * iw;
        return inter / (au + av - inter) > iou_t;
      };
      for (int64_t c = 0; c < C; ++c) {
        std::vector<std::pair<double, int64_t>> cand;
        for (int64_t i = 0; i < N; ++i) {
          const double s = scores.at((b * C + c) * N + i);
          if (!st || s > st->at(0)) cand.push_back({s, i});
        }
        std::stable_sort(cand.begin(), cand.end(), [](const auto& p, const auto& q) { return p.first > q.first; });
        std::vector<int64_t> kept;
        for (const auto& [s, i] : cand) {
          if ((int64_t)kept.size() >= max_out) break;
          if (std::none_of(kept.begin(), kept.end(), [&](int64_t k) { return suppress(k, i); })) kept.push_back(i);
        }
        for (int64_t i : kept) out.insert(out.end(), {b, c, i});
      }
    }
  }
  const int64_t n = (int64_t)out.size() / 3;
  return {{i64_tensor({n, 3}, out)}, n};
}

// As ONNX Runtime's RoiAlign (torchvision's roi_align for avg): per box and bin, a grid of
// bilinear samples (zero beyond one pixel outside the image), averaged, or their max.
HostStepResult roi_align(const ir::Node& nd, const Tensor& x, const Tensor& rois, const Tensor& bidx, const std::string& who) {
  if (x.rank() != 4) throw InputError(who + ": x must be [N, C, H, W], got " + shape_str(x.shape()));
  if (rois.rank() != 2 || rois.shape()[1] != 4) throw InputError(who + ": rois must be [R, 4], got " + shape_str(rois.shape()));
  const int64_t R = rois.shape()[0];
  if (bidx.numel() != R) throw InputError(who + ": batch_indices has " + std::to_string(bidx.numel()) + " entries for " + std::to_string(R) + " boxes");
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t oh = nd.attrs.i("output_height"), ow = nd.attrs.i("output_width"), sr = nd.attrs.i("sampling_ratio");
  const double scale = nd.attrs.f("spatial_scale"), off = nd.attrs.b("half_pixel") ? 0.5 : 0.0;
  const bool mx = nd.attrs.s("mode") == "max";
  Tensor y({R, C, oh, ow}, DType::f32);
  float* out = y.mutable_data();
  const Tensor xf = x.dtype() == DType::f32 ? x : x.astype(DType::f32);
  const float* in = xf.data();
  for (int64_t r = 0; r < R; ++r) {
    const int64_t b = bidx.int_at(r);
    if (b < 0 || b >= N) throw InputError(who + ": batch index " + std::to_string(b) + " of box " + std::to_string(r) + " is outside [0, " + std::to_string(N) + ")");
    const double x1 = rois.at(r * 4) * scale - off, y1 = rois.at(r * 4 + 1) * scale - off;
    double rw = rois.at(r * 4 + 2) * scale - off - x1, rh = rois.at(r * 4 + 3) * scale - off - y1;
    if (off == 0) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);  // output_half_pixel: at least one pixel
    const double bh = rh / (double)oh, bw = rw / (double)ow;
    const int64_t gh = sr > 0 ? sr : (int64_t)std::ceil(rh / (double)oh), gw = sr > 0 ? sr : (int64_t)std::ceil(rw / (double)ow);
    const double count = (double)std::max<int64_t>(gh * gw, 1);
    for (int64_t c = 0; c < C; ++c) {
      const float* img = in + (b * C + c) * H * W;
      for (int64_t ph = 0; ph < oh; ++ph)
        for (int64_t pw = 0; pw < ow; ++pw) {
          double acc = 0;
          bool first = true;
          for (int64_t iy = 0; iy < gh; ++iy)
            for (int64_t ix = 0; ix < gw; ++ix) {
              double yy = y1 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
              double xx = x1 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
              double v = 0;
              if (!(yy < -1.0 || yy > (double)H || xx < -1.0 || xx > (double)W)) {
                yy = std::max(yy, 0.0), xx = std::max(xx, 0.0);
                int64_t yl = (int64_t)yy, xl = (int64_t)xx, yh, xh;
                if (yl >= H - 1) yh = yl = H - 1, yy = (double)yl;
                else yh = yl + 1;
                if (xl >= W - 1) xh = xl = W - 1, xx = (double)xl;
                else xh = xl + 1;
                const double ly = yy - (double)yl, lx = xx - (double)xl, hy = 1 - ly, hx = 1 - lx;
                const double t1 = hy * hx * img[yl * W + xl], t2 = hy * lx * img[yl * W + xh], t3 = ly * hx * img[yh * W + xl],
                             t4 = ly * lx * img[yh * W + xh];
                v = mx ? std::max(std::max(t1, t2), std::max(t3, t4)) : t1 + t2 + t3 + t4;
              }
              if (mx) acc = first ? v : std::max(acc, v);
              else acc += v;
              first = false;
            }
          out[((r * C + c) * oh + ph) * ow + pw] = (float)(mx ? acc : acc / count);
        }
    }
  }
  return {{x.dtype() == DType::f32 ? y : y.astype(x.dtype())}, R};
}

HostStepResult max_unpool(const ir::Node& nd, const Tensor& x, const Tensor& idx, const std::string& who) {
  if (idx.shape() != x.shape()) throw InputError(who + ": indices have shape " + shape_str(idx.shape()) + ", x " + shape_str(x.shape()));
  const auto& s = nd.attrs.ints("shape");
  Shape o(s.begin(), s.end());
  // indices count in `index_shape` (the unpooled shape the kernel implies) and keep their
  // coordinates in the output (as ONNX's reference, when output_shape is larger)
  const Shape is = nd.attrs.has("index_shape") ? Shape(nd.attrs.ints("index_shape").begin(), nd.attrs.ints("index_shape").end()) : o;
  if (is.size() != o.size()) throw InputError(who + ": index_shape and shape have different ranks");
  const std::vector<int64_t> ist = contiguous_strides(is), ost = contiguous_strides(o);
  const int64_t ni = shape_numel(is);
  Tensor y(o, x.dtype());
  const int64_t n = shape_numel(o);
  const size_t es = dtype_size(x.dtype());
  auto* dst = static_cast<uint8_t*>(y.mutable_raw());
  std::memset(dst, 0, (size_t)n * es);
  const auto* src = static_cast<const uint8_t*>(x.raw());
  for (int64_t k = 0; k < x.numel(); ++k) {
    const int64_t p = idx.int_at(k);
    if (p < 0 || p >= ni)
      throw InputError(who + ": index " + std::to_string(p) + " at element " + std::to_string(k) + " is outside the " + std::to_string(ni) +
                       " elements of " + shape_str(is));
    int64_t q = 0;
    for (size_t d = 0; d < is.size(); ++d) {
      const int64_t c = p / ist[d] % is[d];
      if (c >= o[d]) throw InputError(who + ": index " + std::to_string(p) + " falls outside the output shape " + shape_str(o));
      q += c * ost[d];
    }
    std::memcpy(dst + (size_t)q * es, src + (size_t)k * es, es);
  }
  return {{y}, n};
}

template <class T>
void scatter_into(T* out, const T* upd, const Tensor& idx, const Shape& is, const Shape& ds, int axis, const std::string& red,
                  const std::string& who) {
  const std::vector<int64_t> ist = contiguous_strides(is), dst = contiguous_strides(ds);
  const int r = (int)is.size();
  const int64_t P = ds[axis];
  for (int64_t k = 0; k < shape_numel(is); ++k) {
    int64_t p = idx.int_at(k);
    if (p < -P || p >= P)
      throw InputError(who + ": index " + std::to_string(p) + " at element " + std::to_string(k) + " is out of range for an axis of size " +
                       std::to_string(P));
    if (p < 0) p += P;
    int64_t q = 0;
    for (int d = 0; d < r; ++d) q += (d == axis ? p : k / ist[d] % is[d]) * dst[d];
    if (red == "add") out[q] += upd[k];
    else if (red == "mul") out[q] *= upd[k];
    else out[q] = upd[k];
  }
}

HostStepResult scatter_elements(const ir::Node& nd, const Tensor& data, const Tensor& idx, const Tensor& upd, const std::string& who) {
  const Shape& ds = data.shape();
  const Shape& is = idx.shape();
  if (upd.shape() != is) throw InputError(who + ": updates have shape " + shape_str(upd.shape()) + ", indices " + shape_str(is));
  if (upd.dtype() != data.dtype()) throw InputError(who + ": updates and data differ in dtype");
  if (is.size() != ds.size()) throw InputError(who + ": indices " + shape_str(is) + " and data " + shape_str(ds) + " differ in rank");
  const int axis = axis_of(nd.attrs.i("axis"), (int)ds.size(), who);
  for (size_t d = 0; d < ds.size(); ++d)
    if ((int)d != axis && is[d] > ds[d]) throw InputError(who + ": indices " + shape_str(is) + " exceed data " + shape_str(ds));
  const std::string red = nd.attrs.has("reduction") ? nd.attrs.s("reduction") : "none";
  Tensor y(ds, data.dtype());
  if (data.nbytes()) std::memcpy(y.mutable_raw(), data.raw(), data.nbytes());
  switch (data.dtype()) {
    case DType::f32: scatter_into(y.mutable_data<float>(), upd.data<float>(), idx, is, ds, axis, red, who); break;
    case DType::i32: scatter_into(y.mutable_data<int32_t>(), upd.data<int32_t>(), idx, is, ds, axis, red, who); break;
    case DType::i64: scatter_into(y.mutable_data<int64_t>(), upd.data<int64_t>(), idx, is, ds, axis, red, who); break;
    default: {
      if (red != "none") throw InputError(who + ": reduction " + red + " on " + dtype_name(data.dtype()) + " (f32, i32 and i64 have it)");
      // any dtype: the element's bytes (16-bit floats, bool, int8)
      if (dtype_size(data.dtype()) != 2 && dtype_size(data.dtype()) != 1) throw InputError(who + ": dtype " + dtype_name(data.dtype()));
      if (dtype_size(data.dtype()) == 2)
        scatter_into(static_cast<uint16_t*>(y.mutable_raw()), static_cast<const uint16_t*>(upd.raw()), idx, is, ds, axis, red, who);
      else
        scatter_into(static_cast<uint8_t*>(y.mutable_raw()), static_cast<const uint8_t*>(upd.raw()), idx, is, ds, axis, red, who);
    }
  }
  return {{y}, shape_numel(ds)};
}

}  // namespace

HostStepResult run_data_dependent(const ir::Node& n, const std::vector<Tensor>& ins, const std::string& who) {
  switch (n.op) {
    case ir::Op::NonZero: return nonzero(ins.at(0));
    case ir::Op::Compress: return compress(n, ins.at(0), ins.at(1), who);
    case ir::Op::Unique: return unique(n, ins.at(0), who);
    case ir::Op::TopKDynamic: return topk(n, ins.at(0), ins.at(1), who);
    case ir::Op::NonMaxSuppression: return nms(n, ins, who);
    case ir::Op::MaxUnpool: return max_unpool(n, ins.at(0), ins.at(1), who);
    case ir::Op::ScatterElements: return scatter_elements(n, ins.at(0), ins.at(1), ins.at(2), who);
    case ir::Op::RoiAlign: return roi_align(n, ins.at(0), ins.at(1), ins.at(2), who);
    default: throw InputError(who + ": not a data-dependent op");
  }
}

}  // namespace rlx
