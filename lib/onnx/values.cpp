// Values known on the host: Constant, ConstantOfShape, Range, EyeLike, and Shape and Size
// (which depend on shapes alone), all folded to exact values; Identity, an alias.
#include "onnx/importer.h"

#include <cmath>

namespace rlx::onnx {

namespace {

struct Values : Importer {
  using Importer::Importer;

  // Identity: an alias (a host value stays host).
  bool fold_Identity() {
    if (!inputs_known()) return false;
    Val& x = in(0);
    auto hx = host(0);
    set_host(0, x.shape, x.et, *hx);
    return true;
  }
  void map_Identity() {
    Val v = in(0);
    return set_out(0, v);
  }

  bool fold_Shape() {
    const Shape& s = in(0).shape;
    int64_t r = (int64_t)s.size(), st = ai("start", 0), en = ai("end", r);
    if (st < 0) st += r;
    if (en < 0) en += r;
    st = std::clamp<int64_t>(st, 0, r);
    en = std::clamp<int64_t>(en, 0, r);
    Host h;
    for (int64_t k = st; k < en; ++k) h.i.push_back(s[k]);
    set_host(0, {(int64_t)h.i.size()}, kInt64, h);
    return true;
  }
  bool fold_Size() {
    Host h;
    h.i.push_back(shape_numel(in(0).shape));
    set_host(0, {}, kInt64, h);
    return true;
  }
  bool fold_Constant() {
    Host h;
    if (auto a = attr("value", kAttrTensor)) {
      if (!a->t) fail("attribute 'value' holds no tensor");
      Val v;
      v.init = a->t;
      auto hv = host_of(v, L_.max_folded_elements);
      if (!hv) {  // large constant: keep it as a tensor
        Val big;
        big.init = a->t;
        big.shape = a->t->shape;
        big.et = a->t->elem_type;
        set_out(0, big);
        return true;
      }
      set_host(0, a->t->shape, a->t->elem_type, *hv);
    } else if (auto a = attr("value_float", kAttrFloat)) { h.f = {a->f}; set_host(0, {}, kFloat, h); }
    else if (auto a = attr("value_floats", kAttrFloats)) { h.f = a->floats; set_host(0, {(int64_t)a->floats.size()}, kFloat, h); }
    else if (auto a = attr("value_int", kAttrInt)) { h.i = {a->i}; set_host(0, {}, kInt64, h); }
    else if (auto a = attr("value_ints", kAttrInts)) { h.i = a->ints; set_host(0, {(int64_t)a->ints.size()}, kInt64, h); }
    else unsupported("Constant without value, value_float(s) or value_int(s) (attribute '" + (cur_->attrs.empty() ? std::string("?") : cur_->attrs[0].name) + "')");
    return true;
  }
  bool fold_ConstantOfShape() {
    auto dims = need_ints(0, "the shape");
    Shape s(dims.begin(), dims.end());
    for (auto d : s) if (d < 0) fail("negative dimension in the shape");
    int64_t n = shape_numel(s);
    Host h;
    int et = kFloat;
    double v = 0;
    if (auto a = attr("value", kAttrTensor)) {
      if (!a->t || a->t->numel != 1) fail("attribute 'value' must be a one-element tensor");
      Val tv;
      tv.init = a->t;
      auto hv = host_of(tv, 1);
      if (!hv) unsupported("value of element type " + std::string(elem_type_name(a->t->elem_type)));
      et = a->t->elem_type;
      v = hv->d(0);
    }
    if (n < 0 || n > L_.max_folded_elements) {  // too large to hold on the host: the value broadcast at run time
      int y = emit("broadcast_to", {scalar(v, to_dtype(et, where()))}, {{"shape", std::vector<int64_t>(s.begin(), s.end())}}, out_name());
      check_size(y);
      set_node(0, y);
      return true;
    }
    if (float_et(et)) h.f.assign(n, v);
    else h.i.assign(n, sat_i64(v));
    set_host(0, s, et, h);
    return true;
  }
  bool fold_Range() {
    auto a = need_scalar(0, "start"), b = need_scalar(1, "limit"), c = need_scalar(2, "delta");
    int et = in(0).et;
    Host h;
    if (float_et(et)) {
      double st = a->d(0), lim = b->d(0), dl = c->d(0);
      // NaN compares false everywhere, so the count below would silently become 0.
      const double vs[3] = {st, lim, dl};
      const char* names[3] = {"start", "limit", "delta"};
      for (size_t k = 0; k < 3; ++k)
        if (!std::isfinite(vs[k]))
          fail(std::string(names[k]) + " (input " + std::to_string(k) + " '" + cur_->inputs[k] + "') must be finite, got " +
               (std::isnan(vs[k]) ? "NaN" : vs[k] > 0 ? "inf" : "-inf"));
      if (dl == 0) fail("delta is 0");
      double cnt = std::max(0.0, std::ceil((lim - st) / dl));
      if (cnt > (double)L_.max_folded_elements) unsupported("Range too long to fold");
      for (int64_t k = 0; k < (int64_t)cnt; ++k) h.f.push_back(st + k * dl);
      set_host(0, {(int64_t)cnt}, et, h);
    } else {
      int64_t st = a->n(0), lim = b->n(0), dl = c->n(0);
      if (dl == 0) fail("delta is 0");
      double cnt = std::max(0.0, std::ceil(((double)lim - (double)st) / (double)dl));
      if (cnt > (double)L_.max_folded_elements) unsupported("Range too long to fold");
      for (int64_t k = 0; k < (int64_t)cnt; ++k) h.i.push_back(st + k * dl);
      set_host(0, {(int64_t)cnt}, et, h);
    }
    return true;
  }
  bool fold_EyeLike() {  // ones on the k-th diagonal of a 2-D shape: depends on the shape alone
    const Shape& s = in(0).shape;
    if (s.size() != 2) fail("input must be 2-D, got " + shape_str(s));
    int et = (int)ai("dtype", in(0).et);
    to_dtype(et, where());  // a type rlx cannot hold is refused here
    const int64_t k = ai("k", 0);
    if (shape_numel(s) > L_.max_folded_elements) unsupported("EyeLike of shape " + shape_str(s) + " is too large to fold");
    Host h;
    h.i.assign(shape_numel(s), 0);
    for (int64_t r = 0; r < s[0]; ++r)
      if (r + k >= 0 && r + k < s[1]) h.i[r * s[1] + r + k] = 1;
    set_host(0, s, et, h);
    return true;
  }
};

}  // namespace

void values_ops(std::vector<OpDef>& t) {
  using F = Values;
  t.insert(t.end(), {
      {"Shape", "", 1, nullptr, fold<&F::fold_Shape>, "folded", "", "start/end (opset 15)"},
      {"Size", "", 1, nullptr, fold<&F::fold_Size>, "folded", "", ""},
      {"ConstantOfShape", "", 1, nullptr, fold<&F::fold_ConstantOfShape>, "folded (broadcast_to beyond 2^22 values)", "", "larger than 2^22 values: the value broadcast at run time"},
      {"EyeLike", "", 1, nullptr, fold<&F::fold_EyeLike>, "folded", "", "depends on the input's shape only"},
      {"Range", "", 1, nullptr, fold<&F::fold_Range>, "folded", "", "inputs must be known"},
      {"Identity", "", 1, map<&F::map_Identity>, fold<&F::fold_Identity>, "alias", "", ""},
      {"Constant", "", 1, nullptr, fold<&F::fold_Constant>, "folded", "", ""},
  });
}

}  // namespace rlx::onnx
