// Layout ONNX operators: reshapes, transposes, concatenation, splits, slices, padding,
// tiling and the depth/space rearrangements. Reshape-like operators keep a value known on the
// host known (shape arithmetic); Concat, Slice, Transpose and Expand fold when their inputs are.
#include <set>
#include "onnx/importer.h"

namespace rlx::onnx {

namespace {

struct Layout : Importer {
  using Importer::Importer;

  // Reshape, Flatten, Squeeze and Unsqueeze keep a host value host (shape arithmetic).
  void keep_host_reshape(const Shape& o) {
    Val& x = in(0);
    if (auto h = host(0, L_.max_folded_elements); h && shape_numel(o) <= L_.max_folded_elements) {
      set_host(0, o, x.et, *h);
      return;
    }
    auto iv = x.input_value;
    auto from = x.value_from;
    set_node(0, emit("reshape", {node(0)}, {{"shape", std::vector<int64_t>(o.begin(), o.end())}}, out_name()));
    if (iv && (int64_t)iv->size() == shape_numel(o)) {  // values that follow from inputs given by value: the same, reshaped
      Val& y = vals_[cur_->outputs[0]];
      y.input_value = iv;
      y.value_from = from;
    }
  }
  // Slice's starts, ends, axes and steps (attributes before opset 10, inputs since), with the
  // defaults filled in (axes 0, 1, ...; steps 1) and their lengths checked.
  struct SliceArgs {
    std::vector<int64_t> st, en, ax, sp;
  };
  SliceArgs slice_args();

  void map_Reshape() {
    const int64_t opset = m_.opset();
    Shape s = in(0).shape;
    std::vector<int64_t> t = opset < 5 ? aints("shape").value_or(std::vector<int64_t>{}) : need_ints(1, "the target shape");
    bool allowzero = ai("allowzero", 0);
    int neg = -1;
    Shape given;  // the entries other than -1
    for (size_t k = 0; k < t.size(); ++k) {
      if (t[k] == 0 && !allowzero) {
        if (k >= s.size()) fail("shape entry 0 copies a dimension the input does not have");
        t[k] = s[k];
      }
      if (t[k] == -1) {
        if (neg >= 0) fail("more than one -1 in the shape");
        neg = (int)k;
      } else if (t[k] < 0) fail("negative dimension in the shape");
      else given.push_back(t[k]);
    }
    const int64_t known = shape_numel(given);
    if (known < 0) fail("the target shape " + shape_str(Shape(t.begin(), t.end())) + " has more elements than int64 can count");
    int64_t total = shape_numel(s);
    if (neg >= 0) {
      if (known == 0 || total % known) fail("cannot reshape " + shape_str(s) + " to " + shape_str(Shape(t.begin(), t.end())));
      t[neg] = total / known;
    }
    if (shape_numel(Shape(t.begin(), t.end())) != total) fail("cannot reshape " + shape_str(s) + " to " + shape_str(Shape(t.begin(), t.end())));
    return keep_host_reshape(Shape(t.begin(), t.end()));
  }
  void map_Flatten() {
    Shape s = in(0).shape;
    int64_t a = ai("axis", 1);
    if (a < 0) a += (int64_t)s.size();
    if (a < 0 || a > (int64_t)s.size()) fail("axis out of range");
    int64_t o = 1, i = 1;
    for (int64_t k = 0; k < (int64_t)s.size(); ++k) (k < a ? o : i) *= s[k];
    return keep_host_reshape({o, i});
  }
  void map_Squeeze_Unsqueeze() {
    const std::string& op = cur_->op_type;
    const int64_t opset = m_.opset();
    Shape s = in(0).shape;
    std::optional<std::vector<int64_t>> axes;
    if (opset >= 13) { if (has_in(1)) axes = need_ints(1, "axes"); }
    else axes = aints("axes");
    Shape o;
    if (op == "Squeeze") {
      std::set<int> ax;
      if (axes) for (auto a : *axes) {
        int k = axis_of(a, s.size());
        if (s[k] != 1) fail("cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(s[k]));
        ax.insert(k);
      }
      for (size_t k = 0; k < s.size(); ++k)
        if (axes ? !ax.count((int)k) : s[k] != 1) o.push_back(s[k]);
    } else {
      if (!axes) fail("Unsqueeze needs axes");
      size_t r = s.size() + axes->size();
      if (r > L_.max_rank)
        fail("axes has " + std::to_string(axes->size()) + " entries for a rank-" + std::to_string(s.size()) + " input: the result's rank " +
             std::to_string(r) + " is above the limit of " + std::to_string(L_.max_rank));
      std::set<int> ax;
      for (auto a : *axes) if (!ax.insert(axis_of(a, r)).second) fail("axes lists an axis twice");
      size_t j = 0;
      for (size_t k = 0; k < r; ++k) o.push_back(ax.count((int)k) ? 1 : s[j++]);
    }
    return keep_host_reshape(o);
  }
  void map_Transpose() {
    std::map<std::string, ir::AttrValue> a;
    if (auto p = aints("perm")) a["perm"] = *p;
    return set_node(0, emit("transpose", {node(0)}, a, out_name()));
  }
  void map_Concat() {
    const NodeDef& n = *cur_;
    std::vector<int> ins;
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (has_in(k) && shape_numel(in(k).shape) > 0) ins.push_back(node(k));
    if (ins.empty()) {  // every input empty: an empty result of the concatenated shape ([0, 1] x 4 -> [0, 4])
      Shape o = in(0).shape;
      const int a = axis_of(ai("axis", 0), o.size());
      o[a] = 0;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        if (!has_in(k)) continue;
        const Shape& sk = in(k).shape;
        if (sk.size() != o.size()) fail("inputs 0 and " + std::to_string(k) + " differ in rank");
        for (size_t d = 0; d < o.size(); ++d)
          if ((int)d != a && sk[d] != o[d]) fail("input " + std::to_string(k) + " has shape " + shape_str(sk) + ", input 0 " + shape_str(in(0).shape));
        o[a] += sk[a];
      }
      return set_node(0, reshape_out(constant(o, {}, to_dtype(in(0).et, where())), o));
    }
    int a = axis_of(ai("axis", 0), shp(ins[0]).size());
    if (ins.size() == 1) return set_node(0, ins[0]);
    if (ins.size() > 64) return set_node(0, concat_many(ins, a));  // the registry op takes at most 64 inputs
    return set_node(0, emit("concat", ins, {{"axis", (int64_t)a}}, out_name()));
  }
  void map_Expand() {
    auto dims = need_ints(1, "shape");
    bool ok;
    Shape o = bcast(in(0).shape, Shape(dims.begin(), dims.end()), ok);
    if (!ok) fail("cannot expand " + shape_str(in(0).shape) + " to " + shape_str(Shape(dims.begin(), dims.end())));
    int x = node(0);
    if (shp(x) == o) return set_node(0, x);
    return set_node(0, emit("broadcast_to", {x}, {{"shape", std::vector<int64_t>(o.begin(), o.end())}}, out_name()));
  }
  void map_Tile() {
    auto rep = need_ints(1, "repeats");
    int x = node(0);
    Shape s = shp(x);
    if (rep.size() != s.size()) fail("repeats has " + std::to_string(rep.size()) + " entries for rank " + std::to_string(s.size()));
    Shape a, b, o;
    for (size_t k = 0; k < s.size(); ++k) {
      if (rep[k] < 0) fail("negative repeat");
      int64_t d;
      if (__builtin_mul_overflow(rep[k], s[k], &d))
        fail("repeats[" + std::to_string(k) + "] = " + std::to_string(rep[k]) + " times dimension " + std::to_string(s[k]) + " overflows int64");
      a.push_back(1); a.push_back(s[k]);
      b.push_back(rep[k]); b.push_back(s[k]);
      o.push_back(d);
    }
    int y = emit("broadcast_to", {reshape(x, a)}, {{"shape", std::vector<int64_t>(b.begin(), b.end())}});
    return set_node(0, emit("reshape", {y}, {{"shape", std::vector<int64_t>(o.begin(), o.end())}}, out_name()));
  }
  // Split's pieces along axis a of shape s: `split` (an input from opset 13, an attribute
  // before), else equal pieces, one per output; checked to cover the axis exactly.
  std::vector<int64_t> split_parts(const Shape& s, int a) {
    std::vector<int64_t> parts;
    if (m_.opset() >= 13) { if (has_in(1)) parts = need_ints(1, "split"); }
    else parts = aints("split").value_or(std::vector<int64_t>{});
    const size_t no = cur_->outputs.size();
    if (no == 0) fail("has no outputs; Split needs at least one");
    if (parts.empty()) {
      if (s[a] % (int64_t)no) fail("axis of size " + std::to_string(s[a]) + " does not split evenly into " + std::to_string(no));
      parts.assign(no, s[a] / (int64_t)no);
    }
    if (parts.size() != no) fail("split has " + std::to_string(parts.size()) + " entries for " + std::to_string(no) + " outputs");
    int64_t sum = 0;
    for (int64_t p : parts) {
      if (p < 0) fail("split holds a negative size (" + std::to_string(p) + ")");
      sum += p;
    }
    if (sum != s[a])
      fail("split sizes sum to " + std::to_string(sum) + ", but axis " + std::to_string(a) + " of the input (shape " + shape_str(s) + ") has " +
           std::to_string(s[a]));
    return parts;
  }

  void map_Split() {
    const int x = node(0);
    const Shape s = shp(x);
    const int a = axis_of(ai("axis", 0), s.size());
    const std::vector<int64_t> parts = split_parts(s, a);
    int64_t st = 0;
    for (size_t k = 0; k < parts.size(); ++k) {
      if (!cur_->outputs[k].empty())
        set_node(k, emit("narrow", {x}, {{"axis", (int64_t)a}, {"start", st}, {"length", parts[k]}}, out_name(k)));
      st += parts[k];
    }
  }
  // A one-element integer node as (base node, constant offset): through reshapes (Unsqueeze,
  // Squeeze, Reshape) and the addition or subtraction of a one-element constant, so that
  // Unsqueeze(i) and Unsqueeze(Add(i, 1)) are (i, 0) and (i, 1).
  std::pair<int, int64_t> offset_root(int v) {
    int64_t off = 0;
    for (;;) {
      const ir::Node& nd = g_->nodes[(size_t)v];
      if (shape_numel(shp(v)) != 1 || is_float(ts_.dtypes[v])) break;
      if (nd.op == ir::Op::Reshape) {
        v = nd.inputs[0];
        continue;
      }
      if ((nd.op == ir::Op::Add || nd.op == ir::Op::Sub) && nd.inputs.size() == 2) {
        auto konst = [&](int u) { return g_->nodes[(size_t)u].op == ir::Op::Constant && shape_numel(shp(u)) == 1; };
        const int a = nd.inputs[0], b = nd.inputs[1];
        if (konst(b) && !konst(a)) {
          const int64_t c = host_from_tensor(g_->nodes[(size_t)b].constant)->n(0);
          off += nd.op == ir::Op::Add ? c : -c;
          v = a;
          continue;
        }
        if (nd.op == ir::Op::Add && konst(a) && !konst(b)) {
          off += host_from_tensor(g_->nodes[(size_t)a].constant)->n(0);
          v = b;
          continue;
        }
      }
      break;
    }
    return {v, off};
  }
  // Slice whose start is known only at run time (e.g. a loop's iteration number) on one axis,
  // with ends = starts + c (c a constant: the output length): a gather of start + 0..c-1. A
  // start outside [0, D - c] (where ONNX would clamp the slice shorter, or count from the end)
  // becomes an out-of-range index, so the run stops with exit 3 instead of a wrong length.
  void slice_at_run_time() {
    int x = node(0);
    const Shape s = shp(x);
    if (shape_numel(in(1).shape) != 1 || shape_numel(in(2).shape) != 1)
      unsupported("starts (input 1 '" + cur_->inputs[1] + "') known only at run time on more than one axis");
    std::vector<int64_t> ax = has_in(3) ? need_ints(3, "axes") : std::vector<int64_t>{0};
    std::vector<int64_t> sp = has_in(4) ? need_ints(4, "steps") : std::vector<int64_t>{1};
    if (ax.size() != 1 || sp.size() != 1) fail("starts, ends, axes and steps differ in length");
    if (sp[0] != 1) unsupported("starts (input 1 '" + cur_->inputs[1] + "') known only at run time with steps != 1");
    const int64_t a = axis_of(ax[0], s.size()), D = s[(size_t)a];
    auto [bs, ds] = offset_root(node(1));
    auto [be, de] = offset_root(node(2));
    const int64_t c = de - ds;
    if (bs != be || c <= 0 || c > D)
      unsupported("starts (input 1 '" + cur_->inputs[1] + "') known only at run time, and ends not starts plus a constant in [1, " +
                  std::to_string(D) + "]: a data-dependent shape");
    int st = cast(reshape(node(1), {1}), DType::i64);
    int idx = emit("add", {st, positions({c})});
    idx = emit("where", {emit("less", {st, scalar(0, DType::i64)}), constant({1}, {(double)D}, DType::i64), idx});
    return set_node(0, emit("gather", {x, idx}, {{"axis", a}}, out_name()));
  }
  void map_Slice() {
    if (m_.opset() >= 10 && has_in(1) && has_in(2) && !value_of(1)) return slice_at_run_time();
    auto [st, en, ax, sp] = slice_args();
    int x = node(0);
    Shape s = shp(x);
    bool unit = std::all_of(sp.begin(), sp.end(), [](int64_t p) { return p == 1; });
    if (!unit) {
      for (auto& a : ax) a = axis_of(a, s.size());
      return set_node(0, emit("slice", {x}, {{"starts", st}, {"ends", en}, {"axes", ax}, {"steps", sp}}, out_name()));
    }
    int y = x;
    for (size_t k = 0; k < st.size(); ++k) {
      int a = axis_of(ax[k], s.size());
      int64_t d = s[a], b = st[k], e = en[k];
      if (b < 0) b += d;
      if (e < 0) e += d;
      b = std::clamp<int64_t>(b, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
      int64_t len = std::max<int64_t>(0, e - b);
      if (b == 0 && len == d) continue;
      y = emit("narrow", {y}, {{"axis", (int64_t)a}, {"start", b}, {"length", len}});
    }
    if (y == x) return set_node(0, x);
    return set_node(0, y);
  }
  void map_Pad() {
    const int64_t opset = m_.opset();
    std::string mode = as("mode", "constant");
    if (mode != "constant" && mode != "reflect" && mode != "edge") unsupported("Pad attribute 'mode' = \"" + mode + "\"");
    std::vector<int64_t> pads;
    double value = 0;
    if (opset < 11) {
      pads = aints("pads").value_or(std::vector<int64_t>{});
      value = af("value", 0);
    } else {
      pads = need_ints(1, "pads");
      if (has_in(2)) value = need_scalar(2, "constant_value")->d(0);
      if (has_in(3)) unsupported("Pad with an 'axes' input");
    }
    if (pads.size() != 2 * rank(0)) fail("pads has " + std::to_string(pads.size()) + " entries for rank " + std::to_string(rank(0)));
    if (std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; })) return set_node(0, node(0));
    return set_node(0, emit("pad", {node(0)}, {{"pads", pads}, {"mode", mode}, {"value", value}}, out_name()));
  }
  void map_DepthToSpace_SpaceToDepth() {
    const std::string& op = cur_->op_type;
    int x = node(0);
    const Shape& s = shp(x);
    if (s.size() != 4) fail("input must be 4-D [N, C, H, W], got " + shape_str(s));
    const int64_t b = ai("blocksize", 0);
    if (b < 1) fail("blocksize must be a positive integer, got " + std::to_string(b));
    const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
    if (op == "DepthToSpace") {
      if (C % (b * b)) fail("channels (" + std::to_string(C) + ") must be a multiple of blocksize^2 (" + std::to_string(b * b) + ")");
      const std::string mode = as("mode", "DCR");
      if (mode != "DCR" && mode != "CRD") fail("mode must be DCR or CRD, got \"" + mode + "\"");
      const bool dcr = mode == "DCR";
      int r = reshape(x, dcr ? Shape{N, b, b, C / (b * b), H, W} : Shape{N, C / (b * b), b, b, H, W});
      int t = emit("transpose", {r}, {{"perm", dcr ? std::vector<int64_t>{0, 3, 4, 1, 5, 2} : std::vector<int64_t>{0, 1, 4, 2, 5, 3}}});
      return set_node(0, reshape_out(t, {N, C / (b * b), H * b, W * b}));
    }
    if (H % b || W % b) fail("height and width (" + std::to_string(H) + ", " + std::to_string(W) + ") must be multiples of blocksize " + std::to_string(b));
    int r = reshape(x, {N, C, H / b, b, W / b, b});
    int t = emit("transpose", {r}, {{"perm", std::vector<int64_t>{0, 3, 5, 1, 2, 4}}});
    return set_node(0, reshape_out(t, {N, C * b * b, H / b, W / b}));
  }
  void map_Trilu() {
    int64_t k = has_in(1) ? need_scalar(1, "k")->n(0) : 0;  // one element, like TopK's k
    return set_node(0, emit("trilu", {node(0)}, {{"upper", (bool)ai("upper", 1)}, {"k", k}}, out_name()));
  }
  bool fold_Concat() {
    if (!inputs_known()) return false;
    Val& x = in(0);
    int a = axis_of(ai("axis", 0), x.shape.size());
    Shape os = x.shape;
    os[a] = 0;
    std::vector<Val*> vs;
    for (size_t k = 0; k < cur_->inputs.size(); ++k) {
      if (!has_in(k)) continue;
      vs.push_back(&in(k));
      const Shape& sk = vs.back()->shape;
      if (sk.size() != os.size()) fail("inputs differ in rank");
      for (size_t d = 0; d < sk.size(); ++d)
        if ((int)d != a && sk[d] != os[d])
          fail("input " + std::to_string(k) + " has shape " + shape_str(sk) + "; off axis " + std::to_string(a) + " it must match " + shape_str(x.shape));
      // (found by fuzz_onnx_struct: the axis sum overflowed int64, UBSan)
      if (__builtin_add_overflow(os[a], sk[a], &os[a])) fail("the concatenated axis " + std::to_string(a) + " overflows int64");
    }
    int64_t outer = 1;
    for (int k = 0; k < a; ++k) outer *= os[k];
    Host h;
    h.is_float = float_et(x.et);
    for (int64_t o = 0; o < outer; ++o)
      for (size_t k = 0; k < vs.size(); ++k) {
        auto hk = host_of(*vs[k], L_.max_folded_elements);
        int64_t chunk = outer ? shape_numel(vs[k]->shape) / std::max<int64_t>(outer, 1) : 0;
        for (int64_t i = 0; i < chunk; ++i) {
          if (h.is_float) h.f.push_back(hk->d(o * chunk + i));
          else h.i.push_back(hk->n(o * chunk + i));
        }
      }
    set_host(0, os, x.et, h);
    return true;
  }
  bool fold_Slice() {
    if (!inputs_known()) return false;
    Val& x = in(0);
    auto hx = host(0);
    auto [st, en, ax, sp] = slice_args();
    // The registry's slice semantics (clamping, negative steps), the same as the kernels'.
    ir::Attrs sa;
    sa.values = {{"starts", st}, {"ends", en}, {"axes", ax}, {"steps", sp}};
    std::string err;
    std::vector<ir::SliceAxis> plan = ir::slice_plan(sa, x.shape, &err);
    if (!err.empty()) fail(err);
    size_t r = x.shape.size();
    std::vector<int64_t> S(r), P(r);
    Shape os(r);
    for (size_t a = 0; a < r; ++a) S[a] = plan[a].start, P[a] = plan[a].step, os[a] = plan[a].len;
    auto ist = strides_of(x.shape);
    int64_t n = shape_numel(os);
    Host h;
    h.is_float = hx->is_float;
    for (int64_t j = 0; j < n; ++j) {
      int64_t rem = j, src = 0;
      for (size_t a = r; a-- > 0;) {
        int64_t c = rem % os[a];
        rem /= os[a];
        src += (S[a] + c * P[a]) * ist[a];
      }
      if (h.is_float) h.f.push_back(hx->f[src]);
      else h.i.push_back(hx->i[src]);
    }
    set_host(0, os, x.et, h);
    return true;
  }
  bool fold_Transpose() {
    if (!inputs_known()) return false;
    Val& x = in(0);
    auto hx = host(0);
    size_t r = x.shape.size();
    std::vector<int64_t> perm = aints("perm").value_or(std::vector<int64_t>{});
    if (perm.empty()) for (size_t k = 0; k < r; ++k) perm.push_back((int64_t)(r - 1 - k));
    if (perm.size() != r) fail("perm has the wrong length");
    Shape os(r);
    for (size_t k = 0; k < r; ++k) os[k] = x.shape[axis_of(perm[k], r)];
    auto ist = strides_of(x.shape);
    Host h;
    h.is_float = hx->is_float;
    int64_t n = shape_numel(os);
    for (int64_t j = 0; j < n; ++j) {
      int64_t rem = j, src = 0;
      for (size_t k = r; k-- > 0;) {
        int64_t c = rem % os[k];
        rem /= os[k];
        src += c * ist[perm[k]];
      }
      if (h.is_float) h.f.push_back(hx->f[src]);
      else h.i.push_back(hx->i[src]);
    }
    set_host(0, os, x.et, h);
    return true;
  }
  // Split and Tile of host values (shape arithmetic: repeat_interleave's export splits and tiles
  // a shape vector) fold to host values, so a shape computed through them stays known.
  bool fold_Split() {
    if (!inputs_known()) return false;
    const NodeDef& n = *cur_;
    Val& x = in(0);
    auto hx = host(0);
    const Shape& s = x.shape;
    if (s.empty()) fail("cannot split a scalar");
    const int a = axis_of(ai("axis", 0), s.size());
    const std::vector<int64_t> parts = split_parts(s, a);
    int64_t st = 0;
    for (size_t k = 0; k < parts.size(); ++k) {
      Shape os = s;
      os[a] = parts[k];
      if (!n.outputs[k].empty()) set_host(k, os, x.et, host_slice(*hx, s, (size_t)a, st, parts[k]));
      st += parts[k];
    }
    return true;
  }
  bool fold_Tile() {
    if (!inputs_known()) return false;
    Val& x = in(0);
    auto hx = host(0);
    auto rep = need_ints(1, "repeats");
    const Shape& s = x.shape;
    if (rep.size() != s.size()) fail("repeats has " + std::to_string(rep.size()) + " entries for rank " + std::to_string(s.size()));
    Shape os(s.size());
    for (size_t k = 0; k < s.size(); ++k) {
      if (rep[k] < 0) fail("negative repeat");
      os[k] = s[k] * rep[k];
    }
    const int64_t n = shape_numel(os);
    if (n > L_.max_folded_elements) return false;
    auto ist = strides_of(s);
    Host h;
    h.is_float = hx->is_float;
    for (int64_t j = 0; j < n; ++j) {
      int64_t rem = j, src = 0;
      for (size_t k = os.size(); k-- > 0;) {
        src += (rem % os[k]) % s[k] * ist[k];
        rem /= os[k];
      }
      if (h.is_float) h.f.push_back(hx->f[src]);
      else h.i.push_back(hx->i[src]);
    }
    set_host(0, os, x.et, h);
    return true;
  }
  bool fold_Expand() {
    if (!inputs_known()) return false;
    Val& x = in(0);
    auto hx = host(0);
    auto dims = need_ints(1, "shape");
    bool ok;
    Shape os = bcast(x.shape, Shape(dims.begin(), dims.end()), ok);
    if (!ok) fail("cannot expand " + shape_str(x.shape) + " to " + shape_str(Shape(dims.begin(), dims.end())));
    Host h;
    h.is_float = hx->is_float;
    int64_t n = shape_numel(os);
    if (n > L_.max_folded_elements) return false;
    for (int64_t j = 0; j < n; ++j) {
      int64_t s = bidx(x.shape, os, j);
      if (h.is_float) h.f.push_back(hx->f[s]);
      else h.i.push_back(hx->i[s]);
    }
    set_host(0, os, x.et, h);
    return true;
  }
};

Layout::SliceArgs Layout::slice_args() {
  SliceArgs a;
  if (m_.opset() < 10) {
    a.st = aints("starts").value_or(std::vector<int64_t>{});
    a.en = aints("ends").value_or(std::vector<int64_t>{});
    a.ax = aints("axes").value_or(std::vector<int64_t>{});
  } else {
    a.st = need_ints(1, "starts");
    a.en = need_ints(2, "ends");
    if (has_in(3)) a.ax = need_ints(3, "axes");
    if (has_in(4)) a.sp = need_ints(4, "steps");
  }
  if (a.ax.empty())
    for (size_t k = 0; k < a.st.size(); ++k) a.ax.push_back((int64_t)k);
  if (a.sp.empty()) a.sp.assign(a.st.size(), 1);
  if (a.en.size() != a.st.size() || a.ax.size() != a.st.size() || a.sp.size() != a.st.size())
    fail("starts, ends, axes and steps differ in length");
  return a;
}

}  // namespace

void layout_ops(std::vector<OpDef>& t) {
  using F = Layout;
  t.insert(t.end(), {
      {"Reshape", "", 1, map<&F::map_Reshape>, nullptr, "reshape", "reshape", "0 and -1 resolved; allowzero; the shape must be known (constant, folded, or a small input bound by value)"},
      {"Transpose", "", 1, map<&F::map_Transpose>, fold<&F::fold_Transpose>, "transpose", "transpose", ""},
      {"Concat", "", 1, map<&F::map_Concat>, fold<&F::fold_Concat>, "concat", "concat", "folded when all inputs are known"},
      {"Slice", "", 1, map<&F::map_Slice>, fold<&F::fold_Slice>, "narrow (unit steps) or slice; gather for a run-time start", "narrow", "starts/ends/axes/steps constants, or (one axis, step 1) a start known only at run time with ends = starts + a constant (a gather; a start outside [0, D - length] stops the run, exit 3)"},
      {"Split", "", 1, map<&F::map_Split>, fold<&F::fold_Split>, "narrow", "narrow", "folded when its inputs are known"},
      {"Squeeze", "", 1, map<&F::map_Squeeze_Unsqueeze>, nullptr, "reshape", "reshape", ""},
      {"Unsqueeze", "", 1, map<&F::map_Squeeze_Unsqueeze>, nullptr, "reshape", "reshape", ""},
      {"Flatten", "", 1, map<&F::map_Flatten>, nullptr, "reshape", "reshape", ""},
      {"Expand", "", 1, map<&F::map_Expand>, fold<&F::fold_Expand>, "broadcast_to", "broadcast_to", ""},
      {"Tile", "", 1, map<&F::map_Tile>, fold<&F::fold_Tile>, "reshape, broadcast_to, reshape", "broadcast_to", "folded when its inputs are known"},
      {"DepthToSpace", "", 1, map<&F::map_DepthToSpace_SpaceToDepth>, nullptr, "reshape, transpose, reshape", "transpose", "modes DCR and CRD"},
      {"SpaceToDepth", "", 1, map<&F::map_DepthToSpace_SpaceToDepth>, nullptr, "reshape, transpose, reshape", "transpose", ""},
      {"Pad", "", 1, map<&F::map_Pad>, nullptr, "pad", "pad", "modes constant, reflect, edge"},
      {"Trilu", "", 1, map<&F::map_Trilu>, nullptr, "trilu", "trilu", ""},
  });
}

}  // namespace rlx::onnx
