// Indexing ONNX operators: gathers, scatters, OneHot, TopK and ReverseSequence. Gather and
// ScatterND fold on the host when their inputs are known (shape arithmetic, Swin's masks).
#include <set>
#include "onnx/importer.h"

namespace rlx::onnx {

namespace {

struct Index : Importer {
  using Importer::Importer;

  // ScatterND's shapes: data [d0..dr), indices [..., k], updates indices.shape[:-1] + data.shape[k:]. Returns k.
  int64_t scatter_nd_depth(const Shape& ds, const Shape& is, const Shape& us) {
    if (ds.empty()) fail("data must have rank >= 1");
    if (is.empty()) fail("indices must have rank >= 1");
    const int64_t k = is.back();
    if (k < 1 || k > (int64_t)ds.size())
      fail("the last dimension of indices (" + std::to_string(k) + ") must be between 1 and the rank of data (" + std::to_string(ds.size()) + ")");
    Shape want(is.begin(), is.end() - 1);
    want.insert(want.end(), ds.begin() + k, ds.end());
    if (us != want) fail("updates have shape " + shape_str(us) + ", expected " + shape_str(want));
    return k;
  }
  // Run-time scatters match output positions against update entries along axis 1 of the
  // boolean table `hit`. The last entry naming each position (i64) and whether any does.
  std::pair<int, int> last_match(int hit) {
    int hitf = cast(hit, DType::f32);
    int who = emit("argmax", {hitf}, {{"axis", (int64_t)1}, {"keepdims", false}, {"select_last_index", true}});
    int any = emit("greater", {emit("max", {hitf}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", false}}), scalar(0.5)});
    return {who, any};
  }
  // data + (or *) every update entry `hit` matches: upd and hit broadcast together, folded over axis 1.
  int fold_matches(int data, int hit, int upd, bool add) {
    int contrib = emit("where", {hit, upd, scalar(add ? 0 : 1, ts_.dtypes[data])});
    int folded = emit(add ? "sum" : "prod", {contrib}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", false}});
    return emit(add ? "add" : "mul", {data, folded});
  }
  // Row numbers of index tuples ([N, k] i64) into a tensor whose leading axes are `dims`: each
  // coordinate goes through a gather on its axis's positions 0..D-1 first, which wraps negative
  // values and reports one out of range (naming the node) as Gather does, even where the row
  // it would make exists. [N] i64.
  int tuple_rows(int tuples, const Shape& dims) {
    const int64_t n = shp(tuples)[0];
    int64_t stride = 1;
    for (auto d : dims) stride *= d;
    int lin = -1;
    for (size_t j = 0; j < dims.size(); ++j) {
      const int64_t D = dims[j];
      stride /= std::max<int64_t>(D, 1);
      int c = reshape(narrow(tuples, 1, (int64_t)j, 1), {n});
      c = emit("gather", {positions({D}), c}, {{"axis", (int64_t)0}});
      if (stride != 1) c = emit("mul", {c, scalar((double)stride, DType::i64)});
      lin = lin < 0 ? c : emit("add", {lin, c});
    }
    return lin;
  }

  void map_Gather() {
    int64_t a0 = ai("axis", 0);
    Val& d = in(0);
    int a = axis_of(a0, d.shape.size());
    auto hi = host(1, L_.max_folded_elements);
    if (hi && hi->size() == 1) {  // one index: a narrow, then drop (or keep) the axis
      int64_t t = hi->n(0), D = d.shape[a];
      if (t < 0) t += D;
      if (t < 0 || t >= D) fail("index " + std::to_string(hi->n(0)) + " is out of range for an axis of size " + std::to_string(D));
      int y = emit("narrow", {node(0)}, {{"axis", (int64_t)a}, {"start", t}, {"length", (int64_t)1}});
      Shape o;
      for (size_t k = 0; k < d.shape.size(); ++k) {
        if ((int)k == a) { for (auto q : in(1).shape) o.push_back(q); continue; }
        o.push_back(d.shape[k]);
      }
      return set_node(0, emit("reshape", {y}, {{"shape", std::vector<int64_t>(o.begin(), o.end())}}, out_name()));
    }
    if (a == 0 && d.shape.size() == 2 && is_integer(to_dtype(in(1).et, where())))
      return set_node(0, emit("embedding", {node(0), node(1)}, {}, out_name()));
    return set_node(0, emit("gather", {node(0), node(1)}, {{"axis", (int64_t)a}}, out_name()));
  }
  void map_GatherND() {
    // Each index tuple becomes one row number into data viewed as [batch * rows, slice...].
    int data = node(0), idx = node(1);
    const Shape ds = shp(data), is = shp(idx);
    if (!is_integer(ts_.dtypes[idx])) fail("indices must be integers");
    if (is.empty()) fail("indices must have rank >= 1");
    const int64_t q = (int64_t)is.size(), r = (int64_t)ds.size(), k = is.back(), b = ai("batch_dims", 0);
    if (b < 0 || b >= std::min(q, r)) fail("batch_dims " + std::to_string(b) + " must be below the ranks of data and indices");
    if (k < 1 || b + k > r)
      fail("the last dimension of indices (" + std::to_string(k) + ") must be between 1 and the rank of data less batch_dims (" + std::to_string(r - b) + ")");
    int64_t B = 1, rows = 1, nT = 1;
    for (int64_t j = 0; j < b; ++j) {
      if (ds[j] != is[j]) fail("batch dimension " + std::to_string(j) + " is " + std::to_string(ds[j]) + " in data and " + std::to_string(is[j]) + " in indices");
      B *= ds[j];
    }
    for (int64_t j = b; j < b + k; ++j) rows *= ds[j];
    for (int64_t j = b; j < q - 1; ++j) nT *= is[j];
    int lin = reshape(tuple_rows(reshape(cast(idx, DType::i64), {B * nT, k}), Shape(ds.begin() + b, ds.begin() + b + k)), {B, nT});
    if (b > 0) {
      std::vector<double> base(B);
      for (int64_t t = 0; t < B; ++t) base[t] = (double)(t * rows);
      lin = emit("add", {lin, constant({B, 1}, base, DType::i64)});
    }
    Shape flat{B * rows}, out(is.begin(), is.end() - 1);
    flat.insert(flat.end(), ds.begin() + b + k, ds.end());
    out.insert(out.end(), ds.begin() + b + k, ds.end());
    int y = emit("gather", {reshape(data, flat), reshape(lin, {B * nT})}, {{"axis", (int64_t)0}});
    return set_node(0, reshape_out(y, out));
  }
  void map_GatherElements() {
    int a = axis_of(ai("axis", 0), rank(0));
    return set_node(0, emit("gather_elements", {node(0), node(1)}, {{"axis", (int64_t)a}}, out_name()));
  }
  void map_ScatterElements() {
    const std::string& op = cur_->op_type;
    // out = data, then out[c with c[axis] = indices[c]] (op)= updates[c] for every position c of
    // indices. Along the axis, each output position p is matched against the J index entries
    // of its line: a [.., J, P, ..] table; none takes the last entry naming p (as ONNX Runtime
    // applies them in order), add and mul fold all of them in.
    int data = node(0), idx = node(1), upd = node(2);
    const Shape ds = shp(data), is = shp(idx), us = shp(upd);
    const int r = (int)ds.size();
    if (r == 0) fail("data must have rank >= 1");
    if (!is_integer(ts_.dtypes[idx])) fail("indices must be integers");
    if (is.size() != ds.size()) fail("indices " + shape_str(is) + " must have the rank of data " + shape_str(ds));
    if (us != is) fail("updates have shape " + shape_str(us) + ", expected the indices' " + shape_str(is));
    if (ts_.dtypes[upd] != ts_.dtypes[data]) fail("updates and data differ in element type");
    const int a = axis_of(ai("axis", 0), r);
    for (int d = 0; d < r; ++d)
      if (d != a && is[d] != ds[d])
        unsupported("ScatterElements whose indices cover part of data across the axis (indices " + shape_str(is) + ", data " +
                    shape_str(ds) + ", axis " + std::to_string(a) + ")");
    const std::string red = op == "Scatter" ? "none" : as("reduction", "none");
    if (red != "none" && red != "add" && red != "mul") unsupported("ScatterElements reduction \"" + red + "\"");
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < a; ++d) outer *= ds[d];
    for (int d = a + 1; d < r; ++d) inner *= ds[d];
    const int64_t J = is[a], P = ds[a];
    if (J == 0 || shape_numel(ds) == 0) return set_node(0, reshape_out(data, ds));
    // Beyond 2^22 entries (torchvision's MultiScaleRoIAlign writes K pooled boxes into N rows:
    // K x N x C*7*7), a host step: linear in the entries, run on the host.
    if ((double)outer * J * P * inner > (double)(int64_t(1) << 22)) return map_scatter_elements_step(*this);
    // Positions: each index range-checked and wrapped through a gather on 0..P-1.
    int at = emit("gather", {positions({P}), reshape(cast(idx, DType::i64), {outer * J * inner})}, {{"axis", (int64_t)0}});
    int hit = emit("equal", {reshape(at, {outer, J, 1, inner}), positions({1, 1, P, 1})});  // [outer, J, P, inner]
    int d3 = reshape(data, {outer, P, inner});
    int y;
    if (red == "none") {
      auto [who, any] = last_match(hit);  // [outer, P, inner]
      int picked = emit("gather_elements", {reshape(upd, {outer, J, inner}), who}, {{"axis", (int64_t)1}});
      y = emit("where", {any, picked, d3});
    } else {
      y = fold_matches(d3, hit, reshape(upd, {outer, J, 1, inner}), red == "add");
    }
    return set_node(0, reshape_out(y, ds));
  }
  void map_ScatterND() {
    // Values known only at run time (a KV cache written at a position): each row of data viewed
    // as [rows, slice...] takes the slice of the last update tuple that names it, else keeps its
    // own. The row-by-tuple match table is rows x tuples booleans.
    int data = node(0), idx = node(1), upd = node(2);
    const Shape ds = shp(data), is = shp(idx);
    const int64_t k = scatter_nd_depth(ds, is, shp(upd));
    if (!is_integer(ts_.dtypes[idx])) fail("indices must be integers");
    if (ts_.dtypes[upd] != ts_.dtypes[data]) fail("updates and data differ in element type");
    const std::string red = as("reduction", "none");
    if (red != "none" && red != "add" && red != "mul")
      unsupported("ScatterND reduction \"" + red + "\" on values known only at run time (it is folded when data, indices "
                  "and updates are all known when the model is loaded)");
    int64_t rows = 1, T = 1, sl = 1;
    for (int64_t j = 0; j < k; ++j) rows *= ds[j];
    for (size_t j = 0; j + 1 < is.size(); ++j) T *= is[j];
    for (size_t j = k; j < ds.size(); ++j) sl *= ds[j];
    if (T == 0 || rows == 0) return set_node(0, reshape_out(data, ds));
    // none: a rows x tuples match table; add and mul also spread the slices over it.
    const double table = (double)rows * (double)T * (red == "none" ? 1.0 : (double)sl);
    if (table > (double)(int64_t(1) << 26))
      unsupported("ScatterND on values known only at run time with " + std::to_string(rows) + " rows and " + std::to_string(T) +
                  " update tuples (the match table would exceed 2^26 entries)");
    int lin = tuple_rows(reshape(cast(idx, DType::i64), {T, k}), Shape(ds.begin(), ds.begin() + k));
    int hit = emit("equal", {positions({rows, 1}), reshape(lin, {1, T})});  // [rows, T]
    if (red != "none")  // data + sum (or * prod) over the tuples naming each row
      return set_node(0, reshape_out(fold_matches(reshape(data, {rows, sl}), reshape(hit, {rows, T, 1}), reshape(upd, {1, T, sl}), red == "add"), ds));
    auto [who, any] = last_match(hit);
    Shape slice(ds.begin() + k, ds.end()), flat{rows}, upd_rows{T}, mask(1 + slice.size(), 1);
    flat.insert(flat.end(), slice.begin(), slice.end());
    upd_rows.insert(upd_rows.end(), slice.begin(), slice.end());
    mask[0] = rows;
    int picked = emit("gather", {reshape(upd, upd_rows), who}, {{"axis", (int64_t)0}});
    int y = emit("where", {reshape(any, mask), picked, reshape(data, flat)});
    return set_node(0, reshape_out(y, ds));
  }
  void map_OneHot() {  // values[1] where the (wrapped) index equals the position along `axis`, else values[0]
    int idx = node(0);
    auto depth_h = need_scalar(1, "depth");
    const int64_t depth = depth_h->n(0);
    if (depth < 1) fail("depth must be positive, got " + std::to_string(depth));
    const Shape is = shp(idx);
    const int r = (int)is.size() + 1;
    const int a = axis_of(ai("axis", -1), r);
    if (float_et(in(0).et)) idx = emit("floor", {idx});  // float indices are truncated, as ONNX Runtime does
    const DType it = is_float(ts_.dtypes[idx]) ? ts_.dtypes[idx] : DType::i64;
    idx = cast(idx, it);
    // negative indices count from the end: i + depth where i < 0
    idx = emit("where", {emit("less", {idx, scalar(0, it)}), emit("add", {idx, scalar((double)depth, it)}), idx});
    Shape us = is;
    us.insert(us.begin() + a, 1);
    Shape ps(r, 1);
    ps[a] = depth;
    int hit = emit("equal", {reshape(idx, us), positions(ps, it)});
    int vals = node(2);
    if (shape_numel(shp(vals)) != 2) fail("values must have two elements [off, on], got " + shape_str(shp(vals)));
    vals = reshape(vals, {2});
    auto pick = [&](int64_t k) { return reshape(narrow(vals, 0, k, 1), {}); };
    return set_node(0, emit("where", {hit, pick(1), pick(0)}, {}, out_name()));
  }
  void map_TopK() {
    const NodeDef& n = *cur_;
    const int64_t opset = m_.opset();
    if (opset >= 10 && has_in(1) && !value_of(1)) return map_topk_dynamic(*this);  // k known only at run time
    // (need_scalar: an empty k was read with .at(0), found by fuzz_onnx_struct)
    int64_t k = opset < 10 ? ai("k", 1) : need_scalar(1, "k")->n(0);
    std::map<std::string, ir::AttrValue> a{{"k", k}, {"axis", ai("axis", -1)}, {"largest", (bool)ai("largest", 1)}, {"sorted", (bool)ai("sorted", 1)}};
    int x = node(0);
    auto av = a;
    av["select"] = std::string("values");
    set_node(0, emit("topk", {x}, av, out_name(0)));
    if (n.outputs.size() > 1 && !n.outputs[1].empty()) {
      a["select"] = std::string("indices");
      set_node(1, emit("topk", {x}, a, out_name(1)));
    }
    return;
  }
  void map_ReverseSequence() {
    // y[t, b] = x[len[b] - 1 - t, b] for t < len[b], else x[t, b]: a gather_elements along the
    // time axis (a length beyond the axis is an index error there).
    int x = node(0);
    const Shape xs = shp(x);
    if (xs.size() < 2) fail("the input must have rank >= 2, got " + shape_str(xs));
    const int ta = axis_of(ai("time_axis", 0), xs.size()), ba = axis_of(ai("batch_axis", 1), xs.size());
    if (ta + ba != 1) fail("time_axis and batch_axis must be 0 and 1 in some order");
    const int64_t T = xs[ta], B = xs[ba];
    int lens = cast(node(1), DType::i64);
    if (shp(lens) != Shape{B}) fail("sequence_lens has shape " + shape_str(shp(lens)) + ", expected [" + std::to_string(B) + "]");
    Shape lt(2, 1), tt(2, 1);
    lt[ba] = B;
    tt[ta] = T;
    lens = reshape(lens, lt);
    int t = positions(tt);
    int src = emit("where", {emit("less", {t, lens}), emit("sub", {emit("sub", {lens, scalar(1, DType::i64)}), t}), t});  // [T, B] or [B, T]
    Shape s2 = {xs[0], xs[1]};
    for (size_t k = 2; k < xs.size(); ++k) s2.push_back(1);
    src = emit("broadcast_to", {reshape(src, s2)}, {{"shape", std::vector<int64_t>(xs.begin(), xs.end())}});
    return set_node(0, emit("gather_elements", {x, src}, {{"axis", (int64_t)ta}}, out_name()));
  }
  bool fold_Gather() {
    if (!inputs_known()) return false;
    Val& x = in(0);
    auto hx = host(0);
    auto idx = need_host(1, "indices");
    int a = axis_of(ai("axis", 0), x.shape.size());
    const Shape& ds = x.shape;
    Shape is = in(1).shape, os;
    for (int k = 0; k < a; ++k) os.push_back(ds[k]);
    for (auto d : is) os.push_back(d);
    for (size_t k = a + 1; k < ds.size(); ++k) os.push_back(ds[k]);
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < a; ++k) outer *= ds[k];
    for (size_t k = a + 1; k < ds.size(); ++k) inner *= ds[k];
    int64_t n = ds[a];
    Host h;
    h.is_float = hx->is_float;
    for (int64_t o = 0; o < outer; ++o)
      for (size_t j = 0; j < idx->size(); ++j) {
        int64_t t = idx->n(j);
        if (t < 0) t += n;
        if (t < 0 || t >= n) fail("index " + std::to_string(idx->n(j)) + " is out of range for axis of size " + std::to_string(n));
        for (int64_t i = 0; i < inner; ++i) {
          int64_t src = (o * n + t) * inner + i;
          if (h.is_float) h.f.push_back(hx->f[src]);
          else h.i.push_back(hx->i[src]);
        }
      }
    set_host(0, os, x.et, h);
    return true;
  }
  bool fold_ScatterND() {
    if (!inputs_known()) return false;
    Val& x = in(0);
    auto hx = host(0);
    // output = data; output[indices[i]] (op)= updates[i] for each index tuple i, in order.
    // Swin Transformer's shifted-window mask is built this way from shapes alone.
    const Shape& ds = x.shape;
    const Shape& is = in(1).shape;
    auto idx = host(1);
    auto up = host(2);
    const int64_t k = scatter_nd_depth(ds, is, in(2).shape);
    const std::string red = as("reduction", "none");
    if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min")
      unsupported("ScatterND reduction \"" + red + "\"");
    int64_t slice = 1;
    for (size_t a = k; a < ds.size(); ++a) slice *= ds[a];
    const int64_t tuples = shape_numel(is) / k;
    auto st = strides_of(ds);
    auto combine = [&red](auto a, auto b) -> decltype(a) {
      return red == "add" ? a + b : red == "mul" ? a * b : red == "max" ? std::max(a, b) : red == "min" ? std::min(a, b) : b;
    };
    Host h = *hx;
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = 0;
      for (int64_t a = 0; a < k; ++a) {
        int64_t v = idx->n(t * k + a);
        if (v < 0) v += ds[a];
        if (v < 0 || v >= ds[a])
          fail("index " + std::to_string(idx->n(t * k + a)) + " is out of range for axis " + std::to_string(a) +
               " of size " + std::to_string(ds[a]));
        off += v * st[a];
      }
      for (int64_t e = 0; e < slice; ++e) {
        const int64_t o = off + e, u = t * slice + e;
        if (h.is_float) h.f[o] = combine(h.f[o], up->d(u));
        else h.i[o] = combine(h.i[o], up->n(u));
      }
    }
    set_host(0, ds, x.et, h);
    return true;
  }
};

}  // namespace

void index_ops(std::vector<OpDef>& t) {
  using F = Index;
  t.insert(t.end(), {
      {"OneHot", "", 1, map<&F::map_OneHot>, nullptr, "equal, where", "equal where", "depth must be known; negative indices wrap"},
      {"TopK", "", 1, map<&F::map_TopK>, nullptr, "topk (values and indices); topk_dynamic, result",
       "topk", "k known at specialisation (a constant, shape arithmetic or a small input given by value): topk; else a host "
       "step of a data-dependent size (topk_dynamic, as NonZero)"},
      {"Gather", "", 1, map<&F::map_Gather>, fold<&F::fold_Gather>, "narrow (one constant index), embedding (axis 0 of a 2-D table) or gather", "", "folded when data and indices are known"},
      {"GatherElements", "", 1, map<&F::map_GatherElements>, nullptr, "gather_elements", "gather_elements", ""},
      {"ReverseSequence", "", 1, map<&F::map_ReverseSequence>, nullptr, "less, sub, where, broadcast_to, gather_elements", "where gather_elements", "time and batch axes 0 and 1; lengths at run time"},
      {"GatherND", "", 1, map<&F::map_GatherND>, nullptr, "gather (per coordinate, then of rows)", "gather", "batch_dims; coordinates range-checked and wrapped as Gather's"},
      {"ScatterElements", "", 1, map<&F::map_ScatterElements>, nullptr, "gather, equal, argmax, gather_elements, where (add/mul: where, sum/prod)", "equal argmax gather_elements where", "reductions none (the last entry wins), add, mul; indices must span data across the axis; a host step where matching every position against every index would take more than 2^22 entries"},
      {"Scatter", "", 1, map<&F::map_ScatterElements>, nullptr, "as ScatterElements", "equal argmax gather_elements where", "opsets 9 and 10"},
      {"ScatterND", "", 1, map<&F::map_ScatterND>, fold<&F::fold_ScatterND>, "folded; at run time: gather, equal, argmax, max, where (add/mul: where, sum/prod)", "equal argmax where", "folded when data, indices and updates are known (reductions none, add, mul, max, min); at run time none (the last update of a row wins), add, mul"},
  });
}

}  // namespace rlx::onnx
