// Neural-network layers: convolutions, pooling, resizing, grid sampling, LRN, batch
// normalisation and Dropout (inference only).
#include <cmath>
#include <type_traits>
#include "onnx/importer.h"

namespace rlx::onnx {

namespace {

// The registry's list-of-doubles attribute type ('floats') arrives with the conv branch; until
// then AttrValue cannot hold one and the attribute is left out (resize then uses its sizes).
template <class V = ir::AttrValue>
void set_floats_attr(std::map<std::string, ir::AttrValue>& a, const char* op, const char* name, const std::vector<double>& v) {
  if constexpr (std::is_constructible_v<V, std::vector<double>>) {
    auto rop = ir::op_from_name(op);
    if (!rop) return;
    for (const auto& sp : ir::op_info(*rop).attrs)
      if (sp.name == name) a[name] = V(v);
  }
}

struct Nn : Importer {
  using Importer::Importer;

  // Dropout is the identity only in inference: training_mode (opset 12+, an input) must be
  // absent or a known false; a random mask cannot be reproduced, so it is refused.
  void check_dropout_inference() {
    if (!has_in(2)) return;
    auto h = value_of(2);
    if (!h) unsupported("Dropout's training_mode (input 2) must be a constant false (inference only)");
    bool training = false;
    for (size_t k = 0; k < h->size(); ++k) training = training || h->n(k);
    if (!training) return;
    auto r = value_of(1);  // ratio 0 keeps every element even in training
    bool zero = r && r->size() == 1 && r->d(0) == 0;
    if (!zero) unsupported("Dropout with training_mode = true (inference only: the random mask cannot be reproduced)");
  }

  bool try_fold();
  void map_node();
  void recurrent();
  // Dropout is the identity in inference; its mask output, if used, is all true.
  bool fold_Dropout() {
    if (!inputs_known()) return false;
    Val& x = in(0);
    auto hx = host(0);
    check_dropout_inference();
    set_host(0, x.shape, x.et, *hx);
    return true;
  }
  void map_Dropout() {
    const NodeDef& n = *cur_;
    check_dropout_inference();
    if (n.outputs.size() > 1 && !n.outputs[1].empty()) {
      // Dropout's mask in inference: all true.
      Host h;
      h.i.assign(shape_numel(in(0).shape), 1);
      set_host(1, in(0).shape, kBool, h);
    }
    Val v = in(0);
    return set_out(0, v);
  }

  void map_conv_pool() {
    const NodeDef& n = *cur_;
    const std::string& op = n.op_type;
    int x = node(0);
    Shape s = shp(x);
    size_t sd = s.size() >= 2 ? s.size() - 2 : 0;
    if (sd < 1 || sd > 3) unsupported(op + " on " + std::to_string(sd) + "-D data (1-D, 2-D and 3-D are supported)");
    const bool want_indices = op == "MaxPool" && n.outputs.size() > 1 && !n.outputs[1].empty();
    const int64_t storage_order = ai("storage_order", 0);
    if (storage_order != 0 && storage_order != 1) fail("attribute 'storage_order' must be 0 or 1, got " + std::to_string(storage_order));
    if (want_indices && sd == 3) unsupported("MaxPool's Indices output on 3-D data (1-D and 2-D only)");
    bool conv = op == "Conv" || op == "ConvTranspose";
    int w = conv ? node(1) : -1;
    Shape ksz;
    if (conv) {
      Shape ws = shp(w);
      if (ws.size() != s.size())  // (found by fuzz_onnx_struct: a rank-1 W read past its shape)
        fail("W (input 1) has shape " + shape_str(ws) + "; it must have rank " + std::to_string(s.size()) + " like X " + shape_str(s));
      ksz.assign(ws.begin() + 2, ws.end());
    }
    else ksz = Shape(aints("kernel_shape").value_or(std::vector<int64_t>{}));
    if (auto k = aints("kernel_shape")) ksz = Shape(k->begin(), k->end());
    if (ksz.size() != sd) fail("kernel_shape has " + std::to_string(ksz.size()) + " entries for " + std::to_string(sd) + "-D data");
    auto get = [&](const char* nm, int64_t def, size_t cnt) {
      auto v = aints(nm).value_or(std::vector<int64_t>(cnt, def));
      if (v.size() != cnt) fail(std::string("attribute '") + nm + "' has " + std::to_string(v.size()) + " entries, expected " + std::to_string(cnt));
      return v;
    };
    auto strides = get("strides", 1, sd), dil = get("dilations", 1, sd), pads = get("pads", 0, 2 * sd);
    std::string ap = as("auto_pad", "NOTSET");
    if (ap == "VALID") std::fill(pads.begin(), pads.end(), 0);
    else if ((ap == "SAME_UPPER" || ap == "SAME_LOWER") && op != "ConvTranspose") {
      for (size_t k = 0; k < sd; ++k) {
        int64_t in_d = s[2 + k], out_d = (in_d + strides[k] - 1) / strides[k];
        int64_t total = std::max<int64_t>(0, (out_d - 1) * strides[k] + (ksz[k] - 1) * dil[k] + 1 - in_d);
        pads[k] = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
        pads[k + sd] = total - pads[k];
      }
    } else if (ap != "NOTSET" && !(op == "ConvTranspose" && (ap == "SAME_UPPER" || ap == "SAME_LOWER"))) {
      unsupported(op + " attribute 'auto_pad' = \"" + ap + "\"");
    }
    std::vector<int64_t> op_pad;
    if (op == "ConvTranspose") {
      op_pad = get("output_padding", 0, sd);
      // output_shape or auto_pad SAME_*: pads generated as the ONNX spec says; a negative end
      // pad (an output longer than the full transposed convolution) is output padding.
      auto osh = aints("output_shape");
      if (osh || ap == "SAME_UPPER" || ap == "SAME_LOWER") {
        std::vector<int64_t> want(sd);
        if (osh && osh->size() != sd && osh->size() != sd + 2)
          fail("attribute 'output_shape' has " + std::to_string(osh->size()) + " entries for " + std::to_string(sd) + "-D data");
        for (size_t k = 0; k < sd; ++k) {
          want[k] = osh ? (*osh)[osh->size() - sd + k] : s[2 + k] * strides[k];
          int64_t full = strides[k] * (s[2 + k] - 1) + op_pad[k] + (ksz[k] - 1) * dil[k] + 1, total = full - want[k];
          int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // floor(total / 2)
          int64_t start = ap == "SAME_UPPER" ? half : total - half, end = total - start;
          if (end < 0) {
            op_pad[k] -= end;
            end = 0;
          }
          if (start < 0 || want[k] <= 0)
            unsupported("ConvTranspose attribute 'output_shape' = " + std::to_string(want[k]) + " on axis " + std::to_string(k) +
                        " (the transposed convolution gives " + std::to_string(full) + ")");
          pads[k] = start;
          pads[k + sd] = end;
        }
      }
    }
    // 1-D data as 2-D with H = 1.
    if (sd == 1) {
      x = reshape(x, {s[0], s[1], 1, s[2]});
      if (conv) { Shape ws = shp(w); w = reshape(w, {ws[0], ws[1], 1, ws[2]}); }
      ksz.insert(ksz.begin(), 1);
      strides.insert(strides.begin(), 1);
      dil.insert(dil.begin(), 1);
      pads = {0, pads[0], 0, pads[1]};
    }
    // 2-D: [top, left, bottom, right]; 3-D: [front, top, left, back, bottom, right]
    const std::vector<int64_t>& p4 = pads;
    const std::string nd = sd == 3 ? "3d" : "2d";
    int y;
    std::string id = sd == 1 ? "" : out_name();
    if (op == "Conv") {
      std::vector<int> ins{x, w};
      if (has_in(2)) ins.push_back(node(2));
      y = emit("conv" + nd, ins, {{"strides", strides}, {"pads", p4}, {"dilations", dil}, {"groups", ai("group", 1)}}, id);
    } else if (op == "ConvTranspose") {
      if (sd == 1) op_pad.insert(op_pad.begin(), 0);
      std::vector<int> ins{x, w};
      if (has_in(2)) ins.push_back(node(2));
      y = emit("conv_transpose" + nd, ins, {{"strides", strides}, {"pads", p4}, {"dilations", dil}, {"groups", ai("group", 1)}, {"output_padding", op_pad}}, id);
    } else if (op == "MaxPool") {
      y = emit("max_pool" + nd, {x}, {{"kernel", std::vector<int64_t>(ksz.begin(), ksz.end())}, {"strides", strides}, {"pads", p4}, {"dilations", dil}, {"ceil_mode", (bool)ai("ceil_mode", 0)}}, id);
      if (want_indices) {
        int idx = max_pool_indices(x, shp(y), ksz, strides, dil, p4, storage_order != 0, sd == 1 ? "" : out_name(1));
        if (sd == 1) idx = emit("reshape", {idx}, {{"shape", std::vector<int64_t>{s[0], s[1], shp(idx)[3]}}}, out_name(1));
        set_node(1, idx);
      }
    } else {
      if (std::any_of(dil.begin(), dil.end(), [](int64_t d) { return d != 1; })) unsupported("AveragePool attribute 'dilations' != 1");
      y = emit("avg_pool" + nd, {x}, {{"kernel", std::vector<int64_t>(ksz.begin(), ksz.end())}, {"strides", strides}, {"pads", p4}, {"ceil_mode", (bool)ai("ceil_mode", 0)}, {"count_include_pad", (bool)ai("count_include_pad", 0)}}, id);
    }
    if (sd == 1) {
      Shape o = shp(y);
      y = emit("reshape", {y}, {{"shape", std::vector<int64_t>{o[0], o[1], o[3]}}}, out_name());
    }
    return set_node(0, y);
  }
  // MaxPool's Indices output (1-D as 2-D, and 2-D): the flat index into X of each window's maximum, as ONNX
  // defines it (padding not counted): ((n * C + c) * H + h) * W + w, or with storage_order 1
  // (column-major) (n * C + c) * H * W + w * H + h. X (int8/uint8 as f32, exact) padded
  // with -inf (so a padded tap never wins), one strided slice per kernel tap stacked on a new axis, argmax
  // over it (the first tap in row-major kernel order wins a tie, as ONNX Runtime's loop);
  // the tap's offset in the window gathered from a constant, plus the window's origin.
  int max_pool_indices(int x, const Shape& ys, const Shape& ksz, const std::vector<int64_t>& strides,
                       const std::vector<int64_t>& dil, const std::vector<int64_t>& pads, bool col_major, const std::string& id) {
    const Shape s = shp(x);
    const int64_t N = s[0], C = s[1], H = s[2], W = s[3], OH = ys[2], OW = ys[3];
    if (ksz[0] * ksz[1] > 4096)
      unsupported("MaxPool's Indices output with a kernel of " + std::to_string(ksz[0] * ksz[1]) + " taps (at most 4096: one slice per tap)");
    // integer data (int8/uint8) as f32 (exact), so that -inf padding is below every value
    if (!is_float(ts_.dtypes[x])) x = cast(x, DType::f32);
    // end pads long enough for every window (ceil_mode lets the last one pass the padded end)
    std::vector<int64_t> end(2);
    const int64_t len[2] = {H, W}, out[2] = {OH, OW};
    for (int k = 0; k < 2; ++k)
      end[k] = std::max<int64_t>(pads[2 + k], (out[k] - 1) * strides[k] + (ksz[k] - 1) * dil[k] + 1 - pads[k] - len[k]);
    int xp = emit("pad", {x}, {{"pads", std::vector<int64_t>{0, 0, pads[0], pads[1], 0, 0, end[0], end[1]}}, {"value", -INFINITY}});
    std::vector<int> taps;
    std::vector<double> off;
    const int64_t mh = col_major ? 1 : W, mw = col_major ? H : 1;  // flat index = h * mh + w * mw
    for (int64_t kh = 0; kh < ksz[0]; ++kh)
      for (int64_t kw = 0; kw < ksz[1]; ++kw) {
        const int64_t b0 = kh * dil[0], b1 = kw * dil[1];
        int t = emit("slice", {xp}, {{"starts", std::vector<int64_t>{b0, b1}}, {"ends", std::vector<int64_t>{b0 + (OH - 1) * strides[0] + 1, b1 + (OW - 1) * strides[1] + 1}},
                                     {"axes", std::vector<int64_t>{2, 3}}, {"steps", std::vector<int64_t>{strides[0], strides[1]}}});
        taps.push_back(reshape(t, {N, C, 1, OH, OW}));
        off.push_back((double)(b0 * mh + b1 * mw));
      }
    int arg = emit("argmax", {concat_many(taps, 2)}, {{"axis", (int64_t)2}, {"keepdims", false}});  // [N, C, OH, OW]
    int idx = emit("gather", {constant({(int64_t)off.size()}, off, DType::i64), arg}, {{"axis", (int64_t)0}});
    std::vector<double> origin((size_t)(OH * OW)), plane((size_t)(N * C));
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) origin[(size_t)(oh * OW + ow)] = (double)((oh * strides[0] - pads[0]) * mh + (ow * strides[1] - pads[1]) * mw);
    for (int64_t k = 0; k < N * C; ++k) plane[(size_t)k] = (double)(k * H * W);
    idx = emit("add", {idx, constant({1, 1, OH, OW}, origin, DType::i64)});
    return emit("add", {idx, constant({N, C, 1, 1}, plane, DType::i64)}, {}, id);
  }
  void map_global_pool() {
    const std::string& op = cur_->op_type;
    std::vector<int64_t> axes;
    for (size_t k = 2; k < rank(0); ++k) axes.push_back((int64_t)k);
    return set_node(0, reduce_node(op == "GlobalAveragePool" ? "mean" : "max", node(0), axes, true, out_name()));
  }
  void map_Resize_Upsample() {
    const std::string& op = cur_->op_type;
    const int64_t opset = m_.opset();
    std::string mode = as("mode", "nearest");
    if (mode != "nearest" && mode != "linear" && !(mode == "cubic" && op == "Resize" && opset >= 11))
      unsupported(op + " attribute 'mode' = \"" + mode + "\"");
    std::string ctm = as("coordinate_transformation_mode", op == "Upsample" || opset < 11 ? "asymmetric" : "half_pixel");
    static const std::set<std::string> ctms = {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
    if (!ctms.count(ctm)) unsupported(op + " attribute 'coordinate_transformation_mode' = \"" + ctm + "\"");
    std::string nm = as("nearest_mode", opset < 11 ? "floor" : "round_prefer_floor");
    if (op == "Upsample" || opset < 11) nm = "floor";
    if (ai("exclude_outside", 0) && mode != "cubic") unsupported(op + " attribute 'exclude_outside' = 1 with mode " + mode);
    Shape s = in(0).shape;
    std::vector<double> scales;
    std::vector<int64_t> sizes;
    size_t si = op == "Upsample" ? 1 : opset < 11 ? 1 : 2, zi = 3;
    if (op == "Upsample" && opset < 9) { for (double v : attr("scales", kAttrFloats) ? attr("scales", kAttrFloats)->floats : std::vector<double>{}) scales.push_back(v); }
    else if (has_in(si) && shape_numel(in(si).shape) > 0) { auto h = need_host(si, "scales"); for (size_t k = 0; k < h->size(); ++k) scales.push_back(h->d(k)); }
    if (op == "Resize" && opset >= 11 && has_in(zi) && shape_numel(in(zi).shape) > 0) sizes = need_ints(zi, "sizes");
    if (sizes.empty()) {
      if (scales.size() != s.size()) fail("scales has " + std::to_string(scales.size()) + " entries for rank " + std::to_string(s.size()));
      for (size_t k = 0; k < s.size(); ++k) sizes.push_back(sat_i64(std::floor((double)s[k] * (double)(float)scales[k])));
    } else {
      if (sizes.size() != s.size()) fail("sizes has the wrong length");
      scales.clear();
    }
    std::vector<double> roi;
    if (ctm == "tf_crop_and_resize") {
      if (op != "Resize" || opset < 11 || !has_in(1) || shape_numel(in(1).shape) == 0)
        fail("coordinate_transformation_mode \"tf_crop_and_resize\" needs the roi input (input 1)");
      auto h = need_host(1, "roi");
      if (h->size() != 2 * s.size()) fail("roi has " + std::to_string(h->size()) + " entries for rank " + std::to_string(s.size()) + " (it must have 2 * rank: starts, then ends)");
      for (size_t k = 0; k < h->size(); ++k) {
        if (!std::isfinite(h->d(k))) fail("roi entry " + std::to_string(k) + " is not a finite number");
        roi.push_back(h->d(k));
      }
    }
    if (mode == "cubic" || !roi.empty()) return resize_matrices(s, sizes, scales, ctm, mode, nm, roi);
    std::map<std::string, ir::AttrValue> a{{"sizes", sizes}, {"mode", mode}, {"coordinate_transformation_mode", ctm}, {"nearest_mode", nm}};
    if (!scales.empty()) set_floats_attr(a, "resize", "scales", scales);
    return set_node(0, emit("resize", {node(0)}, a, out_name()));
  }
  // Cubic Resize, and every mode with tf_crop_and_resize, is separable: along each axis whose
  // size or scale changes (or whose roi crops), the output is a constant [out, in] matrix
  // (ONNX's cubic coefficients with cubic_coeff_a, edge-clamped neighbours, exclude_outside
  // renormalising; linear's two weights; nearest's one) applied as a matmul with that axis moved
  // last. Coordinates as for linear (ONNX Runtime's: align_corners divides by the integer
  // out - 1); tf_crop_and_resize maps o to roi_start (in - 1) + o (roi_end - roi_start)
  // (in - 1) / (out - 1) and gives extrapolation_value where that falls outside [0, in - 1]
  // on any axis (a zero column, then a where over the axes' masks), as ONNX's reference.
  void resize_matrices(const Shape& s, const std::vector<int64_t>& sizes, const std::vector<double>& scales, const std::string& ctm,
                       const std::string& mode, const std::string& nm, const std::vector<double>& roi) {
    const double A = af("cubic_coeff_a", -0.75);
    const bool excl = ai("exclude_outside", 0) != 0;
    int x = node(0);
    const int r = (int)s.size();
    int outside = -1;  // [1.., out_k, ..1] masks of extrapolated positions, summed
    for (int k = 0; k < r; ++k) {
      const int64_t in = s[k], out = sizes[k];
      const double scale = scales.empty() ? (double)out / (double)in : (double)(float)scales[k];
      const double r0 = roi.empty() ? 0 : roi[k], r1 = roi.empty() ? 1 : roi[k + r];
      if (in == out && scale == 1.0 && r0 == 0 && r1 == 1) continue;
      if (in <= 0 || out <= 0) fail(mode + " resize of an empty axis");
      if (in * out > (int64_t(1) << 24)) unsupported("a " + mode + " resize matrix of " + std::to_string(in * out) + " entries");
      std::vector<double> w((size_t)(in * out), 0.0);  // [in, out]: y = x . w
      std::vector<double> ext((size_t)out, 0.0);
      for (int64_t o = 0; o < out; ++o) {
        double xo;
        if (ctm == "tf_crop_and_resize") {
          xo = (out == 1 ? (r1 - r0) * (double)(in - 1) / 2 : (double)o * (r1 - r0) * (double)(in - 1) / (double)(out - 1)) + r0 * (double)(in - 1);
          if (xo < 0 || xo > (double)(in - 1)) {
            ext[(size_t)o] = 1;
            continue;
          }
        } else if (ctm == "align_corners") xo = out == 1 ? 0 : (double)o * (double)(in - 1) / (double)(out - 1);
        else if (ctm == "asymmetric") xo = (double)o / scale;
        else if (ctm == "pytorch_half_pixel") xo = out > 1 ? ((double)o + 0.5) / scale - 0.5 : 0;
        else if (ctm == "tf_half_pixel_for_nn") xo = ((double)o + 0.5) / scale;
        else xo = ((double)o + 0.5) / scale - 0.5;  // half_pixel
        auto at = [&](int64_t idx, double c) { w[(size_t)(std::clamp<int64_t>(idx, 0, in - 1) * out + o)] += c; };
        if (mode == "nearest") {
          const double f = std::floor(xo);
          int64_t idx;
          if (nm == "floor") idx = (int64_t)f;
          else if (nm == "ceil") idx = (int64_t)std::ceil(xo);
          else if (xo - f == 0.5) idx = (int64_t)(nm == "round_prefer_ceil" ? f + 1 : f);
          else idx = (int64_t)std::round(xo);
          at(idx, 1.0);
          continue;
        }
        if (mode == "linear") {
          const int64_t xl = (int64_t)std::floor(xo);
          at(xl, 1 - (xo - (double)xl));
          at(xl + 1, xo - (double)xl);
          continue;
        }
        int64_t xi = (int64_t)std::floor(xo);
        double t = xo - (double)xi;
        if (t == 0) t = 1, xi -= 1;  // as ONNX's reference: an integral point takes the left neighbourhood
        const double u = 1 - t;
        double c[4] = {((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A, ((A + 2) * t - (A + 3)) * t * t + 1,
                       ((A + 2) * u - (A + 3)) * u * u + 1, ((A * (u + 1) - 5 * A) * (u + 1) + 8 * A) * (u + 1) - 4 * A};
        if (excl) {
          double sum = 0;
          for (int j = 0; j < 4; ++j) {
            const int64_t idx = xi - 1 + j;
            if (idx < 0 || idx >= in) c[j] = 0;
            sum += c[j];
          }
          for (double& v : c) v = sum != 0 ? v / sum : 0;
        }
        for (int j = 0; j < 4; ++j) {
          const int64_t idx = std::clamp<int64_t>(xi - 1 + j, 0, in - 1);
          w[(size_t)(idx * out + o)] += c[j];
        }
      }
      std::vector<int64_t> perm;
      for (int q = 0; q < r; ++q)
        if (q != k) perm.push_back(q);
      perm.push_back(k);
      std::vector<int64_t> back((size_t)r);
      for (int q = 0; q < r; ++q) back[(size_t)perm[q]] = q;
      const bool moved = k != r - 1;
      int v = moved ? emit("transpose", {x}, {{"perm", perm}}) : x;
      v = emit("matmul", {v, constant({in, out}, w, ts_.dtypes[x])});
      x = moved ? emit("transpose", {v}, {{"perm", back}}) : v;
      if (std::any_of(ext.begin(), ext.end(), [](double e) { return e != 0; })) {
        Shape ms((size_t)r, 1);
        ms[(size_t)k] = out;
        int m = constant(ms, ext, DType::f32);
        outside = outside < 0 ? m : emit("add", {outside, m});
      }
    }
    const std::string id = out_name();
    if (outside >= 0)
      x = emit("where", {emit("greater", {outside, scalar(0)}), scalar_like(af("extrapolation_value", 0.0), x), reshape(x, Shape(sizes.begin(), sizes.end()))}, {}, id);
    else x = emit("reshape", {x}, {{"shape", std::vector<int64_t>(sizes.begin(), sizes.end())}}, id);
    set_node(0, x);
  }

  void map_GridSample() {
    // Sampling points from the grid, unnormalised per align_corners; each neighbour (1, 4 or
    // 16) is a gather_elements over the flattened H*W axis, masked to zero outside the image.
    // As PyTorch's grid_sample (whose outputs ONNX's tests are): padding border clamps and
    // reflection reflects (about the border pixels' centres with align_corners, else about their
    // outer edges) then clamps, the sampling point for nearest and bilinear, and each of the 16
    // neighbours for bicubic (Keys' cubic with A = -0.75 on the point itself, unpadded).
    int x = node(0), grid = node(1);
    const Shape xs = shp(x), gs = shp(grid);
    if (xs.size() != 4) fail("X must be 4-D [N, C, H, W], got " + shape_str(xs));
    if (gs.size() != 4 || gs[0] != xs[0] || gs[3] != 2) fail("grid must be [N, H_out, W_out, 2], got " + shape_str(gs));
    const std::string mode = as("mode", "bilinear"), pad = as("padding_mode", "zeros");
    if (mode != "bilinear" && mode != "nearest" && mode != "bicubic") unsupported("GridSample mode \"" + mode + "\"");
    if (pad != "zeros" && pad != "border" && pad != "reflection") unsupported("GridSample padding_mode \"" + pad + "\"");
    const bool ac = ai("align_corners", 0) != 0;
    const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], P = gs[1] * gs[2];
    int xf = reshape(x, {N, C, H * W});
    auto unnorm = [&](int64_t k, int64_t D) {  // grid component k, in pixels
      int g = reshape(narrow(grid, 3, k, 1), {N, P});
      return ac ? emit("mul", {emit("add", {g, scalar_like(1, g)}), scalar_like((double)(D - 1) / 2, g)})
                : emit("mul", {emit("sub", {emit("mul", {emit("add", {g, scalar_like(1, g)}), scalar_like((double)D, g)}), scalar_like(1, g)}), scalar_like(0.5, g)});
    };
    auto padded = [&](int u, int64_t D) {  // a point after padding_mode border or reflection
      if (pad == "zeros") return u;
      if (pad == "reflection") {
        // the triangle wave lo + span - |((|u - lo|) mod 2 span) - span| over [lo, lo + span]
        const double lo = ac ? 0.0 : -0.5, span = ac ? (double)(D - 1) : (double)D;
        if (span <= 0) return emit("mul", {u, scalar_like(0, u)});
        int d = emit("abs", {emit("sub", {u, scalar_like(lo, u)})});
        int t = emit("sub", {d, emit("mul", {emit("floor", {emit("div", {d, scalar_like(2 * span, d)})}), scalar_like(2 * span, d)})});
        u = emit("sub", {scalar_like(lo + span, t), emit("abs", {emit("sub", {t, scalar_like(span, t)})})});
      }
      return clamp(u, 0, (double)(D - 1));
    };
    auto sample = [&](int xi, int yi) {  // whole-pixel positions [N, P] -> values [N, C, P]
      int valid = emit("logical_and", {emit("logical_and", {emit("greater_equal", {xi, scalar_like(0, xi)}), emit("less_equal", {xi, scalar_like((double)(W - 1), xi)})}),
                                       emit("logical_and", {emit("greater_equal", {yi, scalar_like(0, yi)}), emit("less_equal", {yi, scalar_like((double)(H - 1), yi)})})});
      int lin = cast(emit("add", {emit("mul", {clamp(yi, 0, (double)(H - 1)), scalar_like((double)W, yi)}), clamp(xi, 0, (double)(W - 1))}), DType::i64);
      lin = emit("broadcast_to", {reshape(lin, {N, 1, P})}, {{"shape", std::vector<int64_t>{N, C, P}}});
      int v = emit("gather_elements", {xf, lin}, {{"axis", (int64_t)2}});
      return emit("where", {reshape(valid, {N, 1, P}), v, scalar_like(0, v)});
    };
    auto term = [&](int v, int wx, int wy) { return emit("mul", {v, reshape(emit("mul", {wx, wy}), {N, 1, P})}); };
    int y = -1;
    auto acc = [&](int t) { y = y < 0 ? t : emit("add", {y, t}); };
    if (mode == "nearest") {
      y = sample(emit("round", {padded(unnorm(0, W), W)}), emit("round", {padded(unnorm(1, H), H)}));
    } else if (mode == "bilinear") {
      int ux = padded(unnorm(0, W), W), uy = padded(unnorm(1, H), H);
      int x0 = emit("floor", {ux}), y0 = emit("floor", {uy});
      int x1 = emit("add", {x0, scalar_like(1, x0)}), y1 = emit("add", {y0, scalar_like(1, y0)});
      int wx1 = emit("sub", {ux, x0}), wy1 = emit("sub", {uy, y0});
      int wx0 = emit("sub", {scalar_like(1, wx1), wx1}), wy0 = emit("sub", {scalar_like(1, wy1), wy1});
      acc(term(sample(x0, y0), wx0, wy0));
      acc(term(sample(x1, y0), wx1, wy0));
      acc(term(sample(x0, y1), wx0, wy1));
      acc(term(sample(x1, y1), wx1, wy1));
    } else {  // bicubic
      int ux = unnorm(0, W), uy = unnorm(1, H);
      int x0 = emit("floor", {ux}), y0 = emit("floor", {uy});
      int tx = emit("sub", {ux, x0}), ty = emit("sub", {uy, y0});
      const double A = -0.75;
      auto near = [&](int t) {  // ((A + 2) t - (A + 3)) t^2 + 1, |t| <= 1
        return emit("add", {emit("mul", {emit("sub", {emit("mul", {t, scalar_like(A + 2, t)}), scalar_like(A + 3, t)}), emit("mul", {t, t})}), scalar_like(1, t)});
      };
      auto far = [&](int t) {  // ((A t - 5A) t + 8A) t - 4A, 1 < |t| < 2
        int a = emit("sub", {emit("mul", {t, scalar_like(A, t)}), scalar_like(5 * A, t)});
        return emit("sub", {emit("mul", {emit("add", {emit("mul", {a, t}), scalar_like(8 * A, t)}), t}), scalar_like(4 * A, t)});
      };
      auto weights = [&](int t) {
        return std::vector<int>{far(emit("add", {t, scalar_like(1, t)})), near(t), near(emit("sub", {scalar_like(1, t), t})),
                                far(emit("sub", {scalar_like(2, t), t}))};
      };
      const std::vector<int> wx = weights(tx), wy = weights(ty);
      std::vector<int> px, py;
      for (int i = 0; i < 4; ++i) {
        px.push_back(padded(emit("add", {x0, scalar_like(i - 1, x0)}), W));
        py.push_back(padded(emit("add", {y0, scalar_like(i - 1, y0)}), H));
      }
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 4; ++i) acc(term(sample(px[i], py[j]), wx[i], wy[j]));
    }
    return set_node(0, reshape_out(y, {N, C, gs[1], gs[2]}));
  }
  void map_LRN() {
    // y = x / (bias + alpha / size * (sum of x^2 over the `size` channels around c))^beta; the
    // channel window sum as an average pool over [C, H*W] that counts the zero padding.
    int x = node(0);
    const Shape s = shp(x);
    if (s.size() < 3) fail("input must be at least 3-D [N, C, ...], got " + shape_str(s));
    const int64_t size = ai("size", 0);
    if (size < 1) fail("size must be a positive integer, got " + std::to_string(size));
    const double alpha = af("alpha", 1e-4), beta = af("beta", 0.75), bias = af("bias", 1.0);
    int64_t rest = 1;
    for (size_t k = 2; k < s.size(); ++k) rest *= s[k];
    const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
    int sq = reshape(emit("square", {x}), {s[0], 1, s[1], rest});
    int avg = emit("avg_pool2d", {sq}, {{"kernel", std::vector<int64_t>{size, 1}}, {"pads", std::vector<int64_t>{lo, 0, hi, 0}},
                                        {"count_include_pad", true}});
    int den = emit("add", {emit("mul", {reshape(avg, s), scalar_like(alpha, x)}), scalar_like(bias, x)});
    return set_node(0, emit("div", {x, emit("pow", {den, scalar_like(beta, x)})}, {}, out_name()));
  }
  // training_mode = 1 (opset 14+): normalised by the batch's own mean and (population) variance
  // over every axis but the channels; the running statistics come out as
  // input * momentum + batch * (1 - momentum), as ONNX's reference computes them.
  void batch_norm_training() {
    int x = node(0);
    const Shape s = shp(x);
    if (s.size() < 2) fail("X must have rank >= 2");
    const int64_t C = s[1];
    Shape cs{C};
    for (size_t k = 2; k < s.size(); ++k) cs.push_back(1);
    std::vector<int64_t> axes{0};
    for (size_t k = 2; k < s.size(); ++k) axes.push_back((int64_t)k);
    std::map<std::string, ir::AttrValue> over{{"axes", axes}, {"keepdims", true}};
    const double eps = af("epsilon", 1e-5), mom = af("momentum", 0.9);
    int mean = emit("mean", {x}, over);  // [1, C, 1, ...]
    int d = emit("sub", {x, mean});
    int var = emit("mean", {emit("mul", {d, d})}, over);
    int y = emit("mul", {d, emit("div", {reshape(node(1), cs), emit("sqrt", {emit("add", {var, scalar_like(eps, var)})})})});
    set_node(0, emit("add", {y, reshape(node(2), cs)}, {}, out_name()));
    auto running = [&](size_t k, int in, int batch) {
      if (k >= cur_->outputs.size() || cur_->outputs[k].empty()) return;
      int r = emit("add", {emit("mul", {in, scalar_like(mom, in)}), emit("mul", {reshape(batch, {C}), scalar_like(1 - mom, in)})}, {},
                   out_name(k));
      set_node(k, r);
    };
    running(1, node(3), mean);
    running(2, node(4), var);
  }

  void map_BatchNormalization() {
    const NodeDef& n = *cur_;
    if (ai("training_mode", 0)) return batch_norm_training();
    for (size_t k = 1; k < n.outputs.size(); ++k)
      if (!n.outputs[k].empty()) unsupported("BatchNormalization's running mean/var outputs (training only)");
    int x = node(0);
    Shape s = shp(x);
    if (s.size() < 2) fail("X must have rank >= 2");
    int64_t C = s[1];
    double eps = af("epsilon", 1e-5);
    Shape cs{C};
    for (size_t k = 2; k < s.size(); ++k) cs.push_back(1);
    auto hs = host(1, L_.max_folded_elements), hb = host(2, L_.max_folded_elements), hm = host(3, L_.max_folded_elements),
         hv = host(4, L_.max_folded_elements);
    if (hs && hb && hm && hv) {  // fold into one scale and shift per channel
      const std::pair<const Host*, const char*> params[] = {{hs.get(), "scale"}, {hb.get(), "B"}, {hm.get(), "input_mean"}, {hv.get(), "input_var"}};
      for (const auto& [h, name] : params)
        if ((int64_t)h->size() != C)
          fail(std::string(name) + " has " + std::to_string(h->size()) + " elements; X has " + std::to_string(C) + " channels");
      // in f32 (the scale rounded to f32 first, as the shift then uses it), or in f64 for a double X
      const bool f64 = ts_.dtypes[x] == DType::f64;
      std::vector<double> sc(C), sh(C);
      for (int64_t c = 0; c < C; ++c) {
        const double v = hs->d(c) / std::sqrt(hv->d(c) + eps);
        sc[c] = f64 ? v : (double)(float)v;
        sh[c] = hb->d(c) - hm->d(c) * sc[c];
      }
      const DType cdt = f64 ? DType::f64 : DType::f32;
      int y = emit("mul", {x, constant(cs, sc, cdt)});
      return set_node(0, emit("add", {y, constant(cs, sh, cdt)}, {}, out_name()));
    }
    int sc = emit("div", {reshape(node(1), cs), emit("sqrt", {emit("add", {reshape(node(4), cs), scalar(eps)})})});
    int y = emit("mul", {emit("sub", {x, reshape(node(3), cs)}), sc});
    return set_node(0, emit("add", {y, reshape(node(2), cs)}, {}, out_name()));
  }
};

}  // namespace

void nn_ops(std::vector<OpDef>& t) {
  using F = Nn;
  t.insert(t.end(), {
      {"BatchNormalization", "", 1, map<&F::map_BatchNormalization>, nullptr, "mul, add (scale and shift folded per channel)", "mul add", "training_mode = 1: the batch's mean and variance (mean, sub, div, sqrt), running mean/var outputs as ONNX's reference"},
      {"Dropout", "", 1, map<&F::map_Dropout>, fold<&F::fold_Dropout>, "alias (inference)", "", "mask output: all true; training_mode = true refused unless ratio = 0"},
      {"Conv", "", 1, map<&F::map_conv_pool>, nullptr, "conv2d (1-D as 2-D), conv3d", "conv2d conv3d", "1-D, 2-D and 3-D; groups, dilations, pads, strides, auto_pad"},
      {"ConvTranspose", "", 1, map<&F::map_conv_pool>, nullptr, "conv_transpose2d, conv_transpose3d", "conv_transpose2d conv_transpose3d", "1-D, 2-D and 3-D; output_shape and auto_pad: pads generated as the spec says"},
      {"MaxPool", "", 1, map<&F::map_conv_pool>, nullptr, "max_pool2d, max_pool3d", "max_pool2d max_pool3d", "1-D, 2-D and 3-D; the Indices output (1-D and 2-D, storage_order 0 and 1) by pad, slice, argmax, gather"},
      {"AveragePool", "", 1, map<&F::map_conv_pool>, nullptr, "avg_pool2d, avg_pool3d", "avg_pool2d avg_pool3d", "1-D, 2-D and 3-D"},
      {"GlobalAveragePool", "", 1, map<&F::map_global_pool>, nullptr, "mean over the spatial axes", "mean", ""},
      {"GlobalMaxPool", "", 1, map<&F::map_global_pool>, nullptr, "max over the spatial axes", "max", ""},
      {"Resize", "", 1, map<&F::map_Resize_Upsample>, nullptr, "resize (cubic, tf_crop_and_resize: transpose, matmul, where)", "resize",
       "modes nearest and linear; cubic (opset 11+) and tf_crop_and_resize (roi, extrapolation_value) as constant matrices per resized axis (matmul), cubic_coeff_a and exclude_outside"},
      {"GridSample", "", 1, map<&F::map_GridSample>, nullptr, "gather_elements per neighbour, weights, where", "gather_elements where floor round", "modes bilinear, nearest and bicubic; padding zeros, border and reflection; align_corners (as PyTorch's grid_sample)"},
      {"Upsample", "", 1, map<&F::map_Resize_Upsample>, nullptr, "resize", "resize", "opsets 7 to 9: scales from the attribute or input; modes nearest and linear"},
      {"LRN", "", 1, map<&F::map_LRN>, nullptr, "square, avg_pool2d, mul, add, pow, div", "square avg_pool2d pow", "the channel window as a zero-padded average pool"},
  });
}

}  // namespace rlx::onnx
