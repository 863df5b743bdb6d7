// Reductions, the softmax family, normalisations and losses. ReduceSum, ReduceProd, ReduceMax
// and ReduceMin of a 0-D/1-D value known on the host (a shape) fold.
#include <cmath>
#include <set>
#include "onnx/importer.h"

namespace rlx::onnx {

namespace {

struct ReduceNorm : Importer {
  using Importer::Importer;

  std::optional<std::vector<int64_t>> reduce_axes(bool input_form) {
    std::optional<std::vector<int64_t>> axes;
    if (input_form && has_in(1)) axes = need_ints(1, "axes");
    else if (!input_form) axes = aints("axes");
    if (axes && axes->empty()) axes.reset();
    if (!axes && ai("noop_with_empty_axes", 0)) axes = std::vector<int64_t>{};
    if (axes) {
      std::set<int64_t> seen;
      for (auto& a : *axes) {
        a = axis_of(a, rank(0));
        if (!seen.insert(a).second) fail("axes lists an axis twice");
      }
    }
    return axes;
  }
  int softmax_like(int x, int64_t axis_attr, bool log) {
    size_t r = shp(x).size();
    int a = axis_of(axis_attr, r);
    Shape orig = shp(x);
    bool flat = m_.opset() < 13 && a != (int)r - 1;
    int y = flat ? flatten_2d(x, a) : x;
    int ax = flat ? 1 : a;
    int out = log ? log_softmax(y, ax) : emit("softmax", {y}, {{"axis", (int64_t)ax}});
    return flat ? reshape(out, orig) : out;
  }

  void map_reduce() {
    const std::string& op = cur_->op_type;
    const int64_t opset = m_.opset();
    bool input_form = (op == "ReduceSum" && opset >= 13);
    auto axes = reduce_axes(input_form);
    bool keep = ai("keepdims", 1);
    int x = node(0);
    if (axes && axes->empty()) return set_node(0, x);
    if (op == "ReduceSum") return set_node(0, reduce_node("sum", x, axes, keep, out_name()));
    if (op == "ReduceMean") return set_node(0, reduce_node("mean", x, axes, keep, out_name()));
    if (op == "ReduceMax") return set_node(0, reduce_node("max", x, axes, keep, out_name()));
    if (op == "ReduceMin") return set_node(0, reduce_node("min", x, axes, keep, out_name()));
    if (op == "ReduceProd") return set_node(0, reduce_node("prod", x, axes, keep, out_name()));
    if (op == "ReduceL1") return set_node(0, reduce_node("sum", emit("abs", {x}), axes, keep, out_name()));
    if (op == "ReduceSumSquare") return set_node(0, reduce_node("sum", emit("square", {x}), axes, keep, out_name()));
    if (op == "ReduceL2") return set_node(0, emit("sqrt", {reduce_node("sum", emit("square", {x}), axes, keep)}, {}, out_name()));
    if (op == "ReduceLogSum") return set_node(0, emit("log", {reduce_node("sum", x, axes, keep)}, {}, out_name()));
    if (op == "ReduceLogSumExp") {
      int mk = reduce_node("max", x, axes, true);
      int s = reduce_node("sum", emit("exp", {emit("sub", {x, mk})}), axes, true);
      int y = emit("add", {emit("log", {s}), mk});
      if (!keep) {
        Shape o;
        std::set<int64_t> ax;
        if (axes) ax.insert(axes->begin(), axes->end());
        for (size_t k = 0; k < shp(x).size(); ++k) if (axes && !ax.count((int64_t)k)) o.push_back(shp(x)[k]);
        y = reshape(y, o);
      }
      return set_node(0, y);
    }
  }
  void map_ArgMax_ArgMin() {
    const std::string& op = cur_->op_type;
    return set_node(0, emit(op == "ArgMax" ? "argmax" : "argmin", {node(0)},
                            {{"axis", ai("axis", 0)}, {"keepdims", (bool)ai("keepdims", 1)}, {"select_last_index", (bool)ai("select_last_index", 0)}},
                            out_name()));
  }
  void map_CumSum() {
    auto ax = need_ints(1, "axis");
    if (ax.size() != 1) fail("axis must hold one value");
    return set_node(0, emit("cumsum", {node(0)}, {{"axis", ax[0]}, {"exclusive", (bool)ai("exclusive", 0)}, {"reverse", (bool)ai("reverse", 0)}}, out_name()));
  }
  void map_Softmax_LogSoftmax() {
    const std::string& op = cur_->op_type;
    const int64_t opset = m_.opset();
    int64_t axis = ai("axis", opset < 13 ? 1 : -1);
    int y = softmax_like(node(0), axis, op == "LogSoftmax");
    return set_node(0, y);
  }
  void map_Hardmax() {  // 1 at the first maximum along the axis, 0 elsewhere
    const int64_t opset = m_.opset();
    int x = node(0);
    const Shape s = shp(x);
    int a = axis_of(ai("axis", opset < 13 ? 1 : -1), s.size());
    int xv = x;
    if (opset < 13) xv = flatten_2d(x, a), a = 1;
    const Shape vs = shp(xv);  // a copy: emit() grows the shape table
    int am = emit("argmax", {xv}, {{"axis", (int64_t)a}, {"keepdims", true}});
    Shape is(vs.size(), 1);
    is[a] = vs[a];
    int y = cast(emit("equal", {am, positions(is)}), ts_.dtypes[x]);
    return set_node(0, reshape_out(y, s));
  }
  void map_loss() {
    const std::string& op = cur_->op_type;
    // loss[n, d..] = -x[n, target[n, d..], d..] * weight[target] (0 where target == ignore_index),
    // x = log_softmax(scores, axis 1) for SoftmaxCrossEntropyLoss; reduced by none, sum or mean
    // (mean: over the weights of the counted targets).
    const bool sce = op == "SoftmaxCrossEntropyLoss";
    int x = node(0), t = node(1);
    const Shape xs = shp(x), ts = shp(t);
    if (xs.size() < 2) fail("the input must be [N, C, ...], got " + shape_str(xs));
    Shape want = xs;
    want.erase(want.begin() + 1);
    if (ts != want) fail("the target has shape " + shape_str(ts) + ", expected " + shape_str(want));
    if (!is_integer(ts_.dtypes[t])) fail("the target must hold integers");
    const std::string red = as("reduction", "mean");
    if (red != "none" && red != "sum" && red != "mean") fail("reduction must be none, sum or mean, got \"" + red + "\"");
    const int64_t C = xs[1];
    int logp = x;
    if (sce) logp = log_softmax(x, 1);
    t = cast(t, DType::i64);
    int valid = -1;
    if (auto ig = attr("ignore_index", kAttrInt)) {
      valid = emit("logical_not", {emit("equal", {t, scalar((double)ig->i, DType::i64)})});
      t = emit("where", {valid, t, scalar(0, DType::i64)});
    }
    Shape t1 = ts;
    t1.insert(t1.begin() + 1, 1);
    int picked = reshape(emit("gather_elements", {logp, reshape(t, t1)}, {{"axis", (int64_t)1}}), ts);  // range-checked
    int w = -1;  // per-element weight, or none (all 1)
    if (has_in(2)) {
      int wv = node(2);
      if (shp(wv) != Shape{C}) fail("the weights have shape " + shape_str(shp(wv)) + ", expected [" + std::to_string(C) + "]");
      w = emit("gather", {wv, t}, {{"axis", (int64_t)0}});
    }
    if (valid >= 0) w = emit("where", {valid, w >= 0 ? w : scalar_like(1, x), scalar_like(0, x)});
    int loss = emit("neg", {w >= 0 ? emit("mul", {picked, w}) : picked});
    std::vector<int64_t> all;
    for (size_t k = 0; k < ts.size(); ++k) all.push_back((int64_t)k);
    std::map<std::string, ir::AttrValue> every{{"axes", all}, {"keepdims", false}};
    int y = loss;
    if (red == "sum") y = emit("sum", {loss}, every);
    if (red == "mean") {
      if (w < 0) y = emit("mean", {loss}, every);
      else y = emit("div", {emit("sum", {loss}, every), emit("sum", {emit("broadcast_to", {w}, {{"shape", std::vector<int64_t>(ts.begin(), ts.end())}})}, every)});
    }
    set_node(0, reshape_out(y, shp(y)));
    if (sce) set_node(1, logp);
    return;
  }
  void map_LayerNormalization() {
    const NodeDef& n = *cur_;
    int x = node(0);
    Shape s = shp(x);
    int a = axis_of(ai("axis", -1), s.size());
    double eps = af("epsilon", 1e-5);
    int64_t inner = 1, outer = 1;
    for (size_t k = 0; k < s.size(); ++k) ((int)k < a ? outer : inner) *= s[k];
    int w = has_in(1) ? node(1) : -1, b = has_in(2) ? node(2) : -1;
    bool stats = false;
    for (size_t k = 1; k < n.outputs.size(); ++k) stats = stats || !n.outputs[k].empty();
    if (stats) {  // Mean and InvStdDev asked for too: the decomposed form, in f32
      if (ts_.dtypes[x] != DType::f32) unsupported("LayerNormalization's Mean/InvStdDev outputs for a non-float32 input");
      int x2 = reshape(x, {outer, inner});
      std::map<std::string, ir::AttrValue> ax{{"axes", std::vector<int64_t>{1}}, {"keepdims", true}};
      int mu = emit("mean", {x2}, ax);
      int d = emit("sub", {x2, mu});
      int var = emit("mean", {emit("square", {d})}, ax);
      int inv = emit("div", {scalar(1.0), emit("sqrt", {emit("add", {var, scalar(eps)})})});
      int y = reshape(emit("mul", {d, inv}), s);
      if (w >= 0) y = emit("mul", {y, w});
      if (b >= 0) y = emit("add", {y, b});
      Shape st(s.begin(), s.begin() + a);
      st.resize(s.size(), 1);
      set_node(0, y);
      if (n.outputs.size() > 1 && !n.outputs[1].empty()) set_node(1, reshape(mu, st));
      if (n.outputs.size() > 2 && !n.outputs[2].empty()) set_node(2, reshape(inv, st));
      return;
    }
    if (a == (int)s.size() - 1 && (w < 0 || shp(w) == Shape{inner}) && (b < 0 || shp(b) == Shape{inner})) {
      std::vector<int> ins{x};
      if (w >= 0) ins.push_back(w);
      if (b >= 0) {
        if (w < 0) ins.push_back(constant({inner}, std::vector<double>(inner, 1.0), DType::f32));
        ins.push_back(b);
      }
      return set_node(0, emit("layer_norm", ins, {{"eps", eps}}, out_name()));
    }
    int y = reshape(emit("layer_norm", {reshape(x, {outer, inner})}, {{"eps", eps}}), s);
    if (w >= 0) y = emit("mul", {y, w});
    if (b >= 0) y = emit("add", {y, b});
    return set_node(0, y);
  }
  void map_InstanceNormalization() {
    int x = node(0);
    Shape s = shp(x);
    if (s.size() < 3) fail("X must have rank >= 3");
    int64_t sp = 1;
    for (size_t k = 2; k < s.size(); ++k) sp *= s[k];
    int y = reshape(emit("layer_norm", {reshape(x, {s[0], s[1], sp})}, {{"eps", af("epsilon", 1e-5)}}), s);
    Shape cs{s[1]};
    for (size_t k = 2; k < s.size(); ++k) cs.push_back(1);
    y = emit("mul", {y, reshape(node(1), cs)});
    return set_node(0, emit("add", {y, reshape(node(2), cs)}, {}, out_name()));
  }
  void map_MeanVarianceNormalization() {  // (x - mean) / (sqrt(mean(x^2) - mean^2) + 1e-9), as ONNX's function body
    int x = node(0);
    std::vector<int64_t> axes = aints("axes").value_or(std::vector<int64_t>{0, 2, 3});
    for (auto& v : axes) v = axis_of(v, shp(x).size());
    int mu = reduce_node("mean", x, axes, true);
    int var = emit("sub", {reduce_node("mean", emit("square", {x}), axes, true), emit("square", {mu})});
    int sd = emit("add", {emit("sqrt", {var}), scalar_like(1e-9, x)});
    return set_node(0, emit("div", {emit("sub", {x, mu}), sd}, {}, out_name()));
  }
  bool fold_reduce() {
    if (!inputs_known()) return false;
    Val& x = in(0);
    auto hx = host(0);
    const std::string& op = cur_->op_type;
    if (x.shape.size() > 1) return false;  // only 0-D/1-D shape vectors fold here
    Host h;
    bool fl = hx->is_float;
    double acc = op == "ReduceProd" ? 1 : op == "ReduceSum" ? 0 : op == "ReduceMax" ? -INFINITY : INFINITY;
    for (size_t k = 0; k < hx->size(); ++k) {
      double v = hx->d(k);
      if (op == "ReduceProd") acc *= v;
      else if (op == "ReduceSum") acc += v;
      else if (op == "ReduceMax") acc = std::max(acc, v);
      else acc = std::min(acc, v);
    }
    bool keep = ai("keepdims", 1);
    if (fl) h.f.push_back(acc);
    else h.i.push_back(sat_i64(acc));
    set_host(0, keep && !x.shape.empty() ? Shape{1} : Shape{}, x.et, h);
    return true;
  }
};

}  // namespace

void reduce_norm_ops(std::vector<OpDef>& t) {
  using F = ReduceNorm;
  t.insert(t.end(), {
      {"ReduceSum", "", 1, map<&F::map_reduce>, fold<&F::fold_reduce>, "sum", "sum", "axes attribute (< 13) or input"},
      {"ReduceMean", "", 1, map<&F::map_reduce>, nullptr, "mean", "mean", ""},
      {"ReduceMax", "", 1, map<&F::map_reduce>, fold<&F::fold_reduce>, "max", "max", ""},
      {"ReduceMin", "", 1, map<&F::map_reduce>, fold<&F::fold_reduce>, "min", "min", ""},
      {"ReduceProd", "", 1, map<&F::map_reduce>, fold<&F::fold_reduce>, "prod", "prod", ""},
      {"ReduceSumSquare", "", 1, map<&F::map_reduce>, nullptr, "square, sum", "square sum", ""},
      {"ReduceL1", "", 1, map<&F::map_reduce>, nullptr, "abs, sum", "abs sum", ""},
      {"ReduceL2", "", 1, map<&F::map_reduce>, nullptr, "square, sum, sqrt", "square sum sqrt", ""},
      {"ReduceLogSumExp", "", 1, map<&F::map_reduce>, nullptr, "max, sub, exp, sum, log, add", "max exp sum log", ""},
      {"ReduceLogSum", "", 1, map<&F::map_reduce>, nullptr, "sum, log", "sum log", ""},
      {"ArgMax", "", 1, map<&F::map_ArgMax_ArgMin>, nullptr, "argmax", "argmax", ""},
      {"ArgMin", "", 1, map<&F::map_ArgMax_ArgMin>, nullptr, "argmin", "argmin", ""},
      {"Hardmax", "", 1, map<&F::map_Hardmax>, nullptr, "argmax, equal, cast", "argmax equal cast", "opset < 13: over the flattened trailing axes"},
      {"CumSum", "", 1, map<&F::map_CumSum>, nullptr, "cumsum", "cumsum", "axis must be a constant"},
      {"Softmax", "", 1, map<&F::map_Softmax_LogSoftmax>, nullptr, "softmax (opset < 13: over the flattened trailing axes)", "softmax", ""},
      {"LogSoftmax", "", 1, map<&F::map_Softmax_LogSoftmax>, nullptr, "max, sub, exp, sum, log", "max sub exp sum log", ""},
      {"NegativeLogLikelihoodLoss", "", 1, map<&F::map_loss>, nullptr, "gather_elements, gather, where, neg, sum/mean", "gather_elements where sum", "weights, ignore_index, reductions none/sum/mean"},
      {"SoftmaxCrossEntropyLoss", "", 1, map<&F::map_loss>, nullptr, "log-softmax over axis 1, then as NegativeLogLikelihoodLoss", "gather_elements where sum exp log", "log_prob output too"},
      {"LayerNormalization", "", 1, map<&F::map_LayerNormalization>, nullptr, "layer_norm (other axes: reshape + layer_norm + mul/add)", "layer_norm", "Mean/InvStdDev outputs: decomposed (mean, sub, square, sqrt, div)"},
      {"InstanceNormalization", "", 1, map<&F::map_InstanceNormalization>, nullptr, "reshape, layer_norm, mul, add", "layer_norm", ""},
      {"MeanVarianceNormalization", "", 1, map<&F::map_MeanVarianceNormalization>, nullptr, "mean, square, sub, sqrt, add, div", "mean square sqrt", "as ONNX's function body (1e-9 added to the deviation)"},
  });
}

}  // namespace rlx::onnx
