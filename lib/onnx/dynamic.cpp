// Data-dependent output shapes: NonZero, Compress, Unique, NonMaxSuppression, and TopK whose k
// is known only at run time (docs/ir-design.md section 3, docs/onnx.md). Each becomes a host step
// (a registry op of the Control category without bodies) read through `result` nodes. The
// specialisation records each such node's size under a `size_key` ("size:" and its first output's
// name): a size observed at run time is passed back as that key (Model::specialize's dims), and
// the rest of the graph is imported for it; until one is observed the size is provisional, the
// largest the node can produce. The runtime (lib/runtime/control.cpp) compares what the node
// produced with what the graph declares and continues in the graph made for the observed size.
#include "onnx/importer.h"

namespace rlx::onnx {

namespace {

struct Dynamic : Importer {
  using Importer::Importer;

  std::string size_key() const {
    for (const auto& o : cur_->outputs)
      if (!o.empty()) return "size:" + o;
    return "size:" + cur_->name;
  }

  // The size this specialisation plans for: the observed one, else `upper` (provisional).
  int64_t size_for(const std::string& key, int64_t upper) {
    auto it = dims_.find(key);
    if (it == dims_.end()) return upper;
    if (it->second < 0 || it->second > upper)
      fail("the size " + std::to_string(it->second) + " recorded for this node is outside [0, " + std::to_string(upper) + "]");
    g_->sizes[key] = it->second;
    return it->second;
  }

  // The host-step node and one result node per ONNX output (`types`: every result, in order).
  void emit_step(ir::Op op, std::vector<int> inputs, std::map<std::string, ir::AttrValue> attrs, const std::string& key,
                 const std::vector<std::pair<Shape, DType>>& types) {
    attrs["size_key"] = key;
    const int c = add_multi(op, std::move(inputs), std::move(attrs));
    for (size_t k = 0; k < cur_->outputs.size() && k < types.size(); ++k)
      if (!cur_->outputs[k].empty()) check_size(add_result(c, k, types[k].first, types[k].second));
    if (cur_->outputs.size() > types.size()) fail("has " + std::to_string(cur_->outputs.size()) + " outputs, at most " + std::to_string(types.size()));
  }

  void map_NonZero() {
    const int x = node(0);
    const Shape s = shp(x);
    const int64_t r = s.empty() ? 1 : (int64_t)s.size();
    const std::string key = size_key();
    const int64_t n = size_for(key, shape_numel(s));
    emit_step(ir::Op::NonZero, {x}, {}, key, {{{r, n}, DType::i64}});
  }

  // Compress and Unique select along the "axis" attribute when given (the other dims kept),
  // else over the flattened input: the output's full-size shape, with `a["axis"]` set.
  Shape along_axis_or_flat(const Shape& s, std::map<std::string, ir::AttrValue>& a, int* axis) {
    *axis = 0;
    if (auto at = attr("axis", kAttrInt)) {
      *axis = axis_of(at->i, s.size());
      a["axis"] = (int64_t)*axis;
      return s;
    }
    return {shape_numel(s)};
  }

  void map_Compress() {
    const int x = node(0);
    const int cond = node(1);
    if (shp(cond).size() != 1) fail("the condition must be 1-D, it has shape " + shape_str(shp(cond)));
    const Shape s = shp(x);
    std::map<std::string, ir::AttrValue> a;
    int axis = 0;
    Shape o = along_axis_or_flat(s, a, &axis);
    const std::string key = size_key();
    o[axis] = size_for(key, std::min(o[axis], shp(cond)[0]));
    emit_step(ir::Op::Compress, {x, cond}, a, key, {{o, ts_.dtypes[x]}});
  }

  void map_Unique() {
    const int x = node(0);
    const Shape s = shp(x);
    std::map<std::string, ir::AttrValue> a{{"sorted", ai("sorted", 1) != 0}};
    int axis = 0;
    Shape o = along_axis_or_flat(s, a, &axis);
    const int64_t len = o[axis];
    const std::string key = size_key();
    const int64_t n = size_for(key, len);
    o[axis] = n;
    emit_step(ir::Op::Unique, {x}, a, key, {{o, ts_.dtypes[x]}, {{n}, DType::i64}, {{len}, DType::i64}, {{n}, DType::i64}});
  }

  void map_NonMaxSuppression() {
    const int boxes = node(0), scores = node(1);
    const Shape bs = shp(boxes), ss = shp(scores);
    if (bs.size() != 3 || bs[2] != 4) fail("boxes must be [batches, boxes, 4], got " + shape_str(bs));
    if (ss.size() != 3 || ss[0] != bs[0] || ss[2] != bs[1])
      fail("scores must be [batches, classes, boxes] with batches " + std::to_string(bs[0]) + " and boxes " + std::to_string(bs[1]) +
           ", got " + shape_str(ss));
    const int64_t cpb = ai("center_point_box", 0);
    if (cpb != 0 && cpb != 1) fail("center_point_box must be 0 or 1, it is " + std::to_string(cpb));
    // optional inputs: absent ones before a given one get their defaults (0); an absent
    // score_threshold (the last) means no threshold, so it is left out
    std::vector<int> ins{boxes, scores};
    int64_t per_class = bs[1];
    const size_t last = has_in(4) ? 4 : has_in(3) ? 3 : has_in(2) ? 2 : 1;
    for (size_t k = 2; k <= last; ++k) {
      if (!has_in(k)) {
        ins.push_back(k == 2 ? scalar(0, DType::i64) : scalar(0));
        if (k == 2) per_class = 0;
        continue;
      }
      if (shape_numel(in(k).shape) != 1) fail("input " + std::to_string(k) + " must have one element, it has shape " + shape_str(in(k).shape));
      if (k == 2)
        if (auto h = value_of(2)) per_class = std::clamp<int64_t>(h->n(0), 0, bs[1]);
      ins.push_back(node(k));
    }
    if (last < 2) per_class = 0;  // max_output_boxes_per_class defaults to 0: no output
    const std::string key = size_key();
    const int64_t n = size_for(key, bs[0] * ss[1] * per_class);
    emit_step(ir::Op::NonMaxSuppression, ins, {{"center_point_box", cpb}}, key, {{{n, 3}, DType::i64}});
  }

  void map_RoiAlign() {
    const int x = node(0), rois = node(1), bidx = node(2);
    const Shape xs = shp(x), rs = shp(rois);
    if (xs.size() != 4) fail("X must be [N, C, H, W], got " + shape_str(xs));
    if (rs.size() != 2 || rs[1] != 4) fail("rois must be [num_rois, 4], got " + shape_str(rs));
    if (in(0).et == kDouble)  // the host step samples in f32: never a silent narrowing
      unsupported("RoiAlign on double X (its sampling runs in f32); cast X to float first");
    if (shp(bidx) != Shape{rs[0]}) fail("batch_indices must be [" + std::to_string(rs[0]) + "], got " + shape_str(shp(bidx)));
    const int64_t oh = ai("output_height", 1), ow = ai("output_width", 1), sr = ai("sampling_ratio", 0);
    if (oh < 1 || ow < 1) fail("output_height and output_width must be positive");
    if (sr < 0) fail("sampling_ratio must not be negative");
    const std::string mode = as("mode", "avg");
    if (mode != "avg" && mode != "max") fail("mode must be avg or max, it is '" + mode + "'");
    // opset 10 has no coordinate_transformation_mode and behaves as output_half_pixel
    const std::string ctm = m_.opset() >= 16 ? as("coordinate_transformation_mode", "half_pixel") : "output_half_pixel";
    if (ctm != "half_pixel" && ctm != "output_half_pixel") fail("coordinate_transformation_mode must be half_pixel or output_half_pixel");
    emit_step(ir::Op::RoiAlign, {x, rois, cast(bidx, DType::i64)},
              {{"output_height", oh}, {"output_width", ow}, {"sampling_ratio", sr}, {"spatial_scale", af("spatial_scale", 1.0)},
               {"mode", mode}, {"half_pixel", ctm == "half_pixel"}},
              "", {{{rs[0], xs[1], oh, ow}, ts_.dtypes[x]}});
  }

  void map_MaxUnpool() {
    const int x = node(0), idx = node(1);
    const Shape xs = shp(x);
    if (xs.size() < 3) fail("X must be [N, C, D1, ...], got " + shape_str(xs));
    if (shp(idx) != xs) fail("I must have X's shape " + shape_str(xs) + ", got " + shape_str(shp(idx)));
    const size_t sp = xs.size() - 2;
    auto k = aints("kernel_shape");
    if (!k || k->size() != sp) fail("kernel_shape must have one entry per spatial axis (" + std::to_string(sp) + ")");
    const std::vector<int64_t> st = aints("strides").value_or(std::vector<int64_t>(sp, 1)), pads = aints("pads").value_or(std::vector<int64_t>(2 * sp, 0));
    if (st.size() != sp || pads.size() != 2 * sp) fail("strides needs " + std::to_string(sp) + " entries and pads " + std::to_string(2 * sp));
    Shape inferred{xs[0], xs[1]};
    for (size_t d = 0; d < sp; ++d) inferred.push_back((xs[2 + d] - 1) * st[d] - pads[d] - pads[sp + d] + (*k)[d]);
    Shape o = inferred;
    if (has_in(2)) {
      auto v = need_ints(2, "output_shape");
      o.assign(v.begin(), v.end());
      if (o.size() != xs.size() || o[0] != xs[0] || o[1] != xs[1]) fail("output_shape must be [N, C, ...] with X's N and C, got " + shape_str(o));
    }
    for (size_t d = 0; d < o.size(); ++d)
      if (o[d] <= 0 || inferred[d] <= 0) fail("the output shape " + shape_str(o) + " (from the kernel: " + shape_str(inferred) + ") has an empty axis");
    emit_step(ir::Op::MaxUnpool, {x, cast(idx, DType::i64)},
              {{"shape", std::vector<int64_t>(o.begin(), o.end())}, {"index_shape", std::vector<int64_t>(inferred.begin(), inferred.end())}}, "",
              {{o, ts_.dtypes[x]}});
  }

  // ScatterElements as a host step (index.cpp's mapping has checked the operands).
  void map_ScatterElements_step() {
    const int data = node(0), idx = node(1), upd = node(2);
    const int a = axis_of(ai("axis", 0), shp(data).size());
    const std::string red = cur_->op_type == "Scatter" ? "none" : as("reduction", "none");
    emit_step(ir::Op::ScatterElements, {data, cast(idx, DType::i64), upd}, {{"axis", (int64_t)a}, {"reduction", red}}, "",
              {{shp(data), ts_.dtypes[data]}});
  }

  void map_TopK_dynamic() {
    const int x = node(0);
    const Shape s = shp(x);
    if (shape_numel(in(1).shape) != 1) fail("k must have one element, it has shape " + shape_str(in(1).shape));
    const int axis = axis_of(ai("axis", -1), s.size());
    const int k = cast(node(1), DType::i64);
    const std::string key = size_key();
    Shape o = s;
    o[axis] = size_for(key, s[axis]);
    emit_step(ir::Op::TopKDynamic, {x, k},
              {{"axis", (int64_t)axis}, {"largest", ai("largest", 1) != 0}, {"sorted", ai("sorted", 1) != 0}}, key,
              {{o, ts_.dtypes[x]}, {o, DType::i64}});
  }
};

}  // namespace

void map_topk_dynamic(Importer& b) { map<&Dynamic::map_TopK_dynamic>(b); }
void map_scatter_elements_step(Importer& b) { map<&Dynamic::map_ScatterElements_step>(b); }

void dynamic_ops(std::vector<OpDef>& t) {
  using F = Dynamic;
  const char* how = "a host step (the kernel runs on the host; on Vulkan its operands are downloaded): the rest of the graph is "
                    "planned for the size it produces, one plan per observed size (cached)";
  t.insert(t.end(), {
      {"NonZero", "", 9, map<&F::map_NonZero>, nullptr, "nonzero, result", "nonzero result", how},
      {"Compress", "", 9, map<&F::map_Compress>, nullptr, "compress, result", "compress result", how},
      {"Unique", "", 11, map<&F::map_Unique>, nullptr, "unique, result", "unique result", how},
      {"NonMaxSuppression", "", 10, map<&F::map_NonMaxSuppression>, nullptr, "non_max_suppression, result",
       "non_max_suppression result", how},
      {"MaxUnpool", "", 9, map<&F::map_MaxUnpool>, nullptr, "max_unpool, result", "max_unpool result",
       "a host step of a fixed output shape (the kernel runs on the host; on Vulkan its operands are downloaded): x scattered "
       "to the flat positions of I; output_shape known at specialisation, else from kernel_shape, strides and pads"},
      {"RoiAlign", "", 10, map<&F::map_RoiAlign>, nullptr, "roi_align, result", "roi_align result",
       "a host step of a fixed output shape (the kernel runs on the host; on Vulkan its operands are downloaded): avg and max "
       "(max as ONNX Runtime: of the weighted corner values), half_pixel and output_half_pixel, adaptive sampling_ratio 0"},
  });
}

}  // namespace rlx::onnx
