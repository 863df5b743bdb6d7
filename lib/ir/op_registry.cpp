#include "ir/op_registry.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "core/error.h"
#include "ir/spatial.h"

namespace rlx::ir {

// ---------------- Attrs accessors ----------------
namespace {
const AttrValue& attr_at(const Attrs& a, const std::string& k) {
  auto it = a.values.find(k);
  if (it == a.values.end()) throw InputError("internal: attribute '" + k + "' is not set");
  return it->second;
}
}  // namespace

int64_t Attrs::i(const std::string& k) const {
  const auto& v = attr_at(*this, k);
  if (auto p = std::get_if<int64_t>(&v)) return *p;
  if (auto p = std::get_if<double>(&v)) return (int64_t)*p;
  if (auto p = std::get_if<bool>(&v)) return *p ? 1 : 0;
  throw InputError("internal: attribute '" + k + "' is not an integer");
}
double Attrs::f(const std::string& k) const {
  const auto& v = attr_at(*this, k);
  if (auto p = std::get_if<double>(&v)) return *p;
  if (auto p = std::get_if<int64_t>(&v)) return (double)*p;
  throw InputError("internal: attribute '" + k + "' is not a number");
}
bool Attrs::b(const std::string& k) const {
  const auto& v = attr_at(*this, k);
  if (auto p = std::get_if<bool>(&v)) return *p;
  throw InputError("internal: attribute '" + k + "' is not a bool");
}
const std::string& Attrs::s(const std::string& k) const {
  const auto& v = attr_at(*this, k);
  if (auto p = std::get_if<std::string>(&v)) return *p;
  throw InputError("internal: attribute '" + k + "' is not a string");
}
const std::vector<int64_t>& Attrs::ints(const std::string& k) const {
  const auto& v = attr_at(*this, k);
  if (auto p = std::get_if<std::vector<int64_t>>(&v)) return *p;
  throw InputError("internal: attribute '" + k + "' is not a list of integers");
}
std::vector<double> Attrs::floats(const std::string& k) const {
  const auto& v = attr_at(*this, k);
  if (auto p = std::get_if<std::vector<double>>(&v)) return *p;
  if (auto p = std::get_if<std::vector<int64_t>>(&v)) return std::vector<double>(p->begin(), p->end());
  throw InputError("internal: attribute '" + k + "' is not a list of numbers");
}

// ---------------- The registry table ----------------
namespace {

AttrSpec opt_int(const char* n, int64_t d) { return {n, AttrType::Int, AttrValue{d}, false, {}}; }
AttrSpec opt_float(const char* n, double d) { return {n, AttrType::Float, AttrValue{d}, false, {}}; }
AttrSpec opt_bool(const char* n, bool d) { return {n, AttrType::Bool, AttrValue{d}, false, {}}; }
AttrSpec req_int(const char* n) { return {n, AttrType::Int, std::nullopt, true, {}}; }
AttrSpec req_ints(const char* n) { return {n, AttrType::Ints, std::nullopt, true, {}}; }
AttrSpec opt_ints_none(const char* n) { return {n, AttrType::Ints, std::nullopt, false, {}}; }
AttrSpec opt_int_none(const char* n) { return {n, AttrType::Int, std::nullopt, false, {}}; }
AttrSpec opt_float_none(const char* n) { return {n, AttrType::Float, std::nullopt, false, {}}; }
AttrSpec opt_ints(const char* n, std::vector<int64_t> d) { return {n, AttrType::Ints, AttrValue{std::move(d)}, false, {}}; }
AttrSpec opt_string(const char* n, const char* d, std::vector<std::string> choices) {
  return {n, AttrType::String, AttrValue{std::string(d)}, false, std::move(choices)};
}
AttrSpec approximate() { return {"approximate", AttrType::String, AttrValue{std::string("none")}, false, {"none", "tanh"}}; }

std::vector<AttrSpec> attrs_for(Op op) {
  switch (op) {
    case Op::Gelu: case Op::GeluVjp: return {approximate()};
    case Op::Sum: case Op::Mean: case Op::Max: case Op::Min: case Op::Prod: return {opt_ints_none("axes"), opt_bool("keepdims", false)};
    case Op::Softmax: case Op::SoftmaxVjp: return {opt_int("axis", -1)};
    case Op::Matmul: return {opt_bool("transpose_a", false), opt_bool("transpose_b", false)};
    case Op::Reshape: case Op::BroadcastTo: return {req_ints("shape")};
    case Op::Transpose: return {opt_ints_none("perm")};
    case Op::Narrow: return {req_int("axis"), req_int("start"), req_int("length")};
    case Op::Concat: return {req_int("axis")};
    case Op::Cast: return {{"dtype", AttrType::Dtype, std::nullopt, true, {}}};
    case Op::LayerNorm: case Op::LayerNormVjp: return {opt_float("eps", 1e-5)};
    case Op::RmsNorm: case Op::RmsNormVjp: return {opt_float("eps", 1e-6)};
    case Op::Rope:
      return {opt_int_none("dims"), opt_float("base", 10000.0), opt_bool("traditional", false),
              opt_float("scale", 1.0), opt_int("offset", 0)};
    case Op::ScaledMaskedSoftmax: return {opt_float("scale", 1.0), opt_bool("causal", false)};
    case Op::Attention:
      return {opt_float_none("scale"), opt_bool("causal", false), opt_ints_none("views"), opt_ints_none("out_shape")};
    case Op::Mod: return {opt_bool("fmod", false)};
    case Op::BitShift: return {{"direction", AttrType::String, AttrValue{std::string("left")}, false, {"left", "right"}}};
    case Op::ArgMax: case Op::ArgMin:
      return {opt_int("axis", 0), opt_bool("keepdims", true), opt_bool("select_last_index", false)};
    case Op::CumSum: return {req_int("axis"), opt_bool("exclusive", false), opt_bool("reverse", false)};
    case Op::TopK:
      return {req_int("k"), opt_int("axis", -1), opt_bool("largest", true), opt_bool("sorted", true),
              opt_string("select", "values", {"values", "indices"})};
    case Op::Gather: case Op::GatherElements: return {opt_int("axis", 0)};
    case Op::Slice: return {req_ints("starts"), req_ints("ends"), opt_ints_none("axes"), opt_ints_none("steps")};
    case Op::Pad:
      return {req_ints("pads"), opt_string("mode", "constant", {"constant", "reflect", "edge"}), opt_float("value", 0.0)};
    case Op::Trilu: return {opt_bool("upper", true), opt_int("k", 0)};
    // control flow
    case Op::If: return {opt_int("num_captures", 0)};
    case Op::Loop: return {req_int("num_carried"), opt_int("num_captures", 0)};
    case Op::Scan:
      return {req_int("num_scan_inputs"), opt_int("num_captures", 0), opt_ints("scan_input_axes", {}),
              opt_ints("scan_input_directions", {}), opt_ints("scan_output_axes", {}), opt_ints("scan_output_directions", {})};
    case Op::Result: return {req_int("index")};
    case Op::NonZero: return {opt_string("size_key", "", {})};
    case Op::Compress: return {opt_int_none("axis"), opt_string("size_key", "", {})};
    case Op::Unique: return {opt_bool("sorted", true), opt_int_none("axis"), opt_string("size_key", "", {})};
    case Op::TopKDynamic:
      return {opt_int("axis", -1), opt_bool("largest", true), opt_bool("sorted", true), opt_string("size_key", "", {})};
    case Op::NonMaxSuppression: return {opt_int("center_point_box", 0), opt_string("size_key", "", {})};
    case Op::MaxUnpool: return {req_ints("shape"), opt_ints_none("index_shape"), opt_string("size_key", "", {})};
    case Op::ScatterElements:
      return {req_int("axis"), opt_string("reduction", "none", {"none", "add", "mul"}), opt_string("size_key", "", {})};
    case Op::RoiAlign:
      return {req_int("output_height"), req_int("output_width"), opt_int("sampling_ratio", 0), opt_float("spatial_scale", 1.0),
              opt_string("mode", "avg", {"avg", "max"}), opt_bool("half_pixel", true), opt_string("size_key", "", {})};
    // 2-D: strides/dilations [H, W], pads [top, left, bottom, right]; 3-D: [D, H, W] and
    // [front, top, left, back, bottom, right]
    case Op::Conv2d: case Op::Conv2dIntegerScaled: case Op::Conv3d: {
      const int64_t nd = ir::spatial_rank(op);
      return {opt_ints("strides", std::vector<int64_t>(nd, 1)), opt_ints("pads", std::vector<int64_t>(2 * nd, 0)),
              opt_ints("dilations", std::vector<int64_t>(nd, 1)), opt_int("groups", 1)};
    }
    case Op::ConvTranspose2d: case Op::ConvTranspose3d: {
      const int64_t nd = ir::spatial_rank(op);
      return {opt_ints("strides", std::vector<int64_t>(nd, 1)), opt_ints("pads", std::vector<int64_t>(2 * nd, 0)),
              opt_ints("dilations", std::vector<int64_t>(nd, 1)), opt_int("groups", 1),
              opt_ints("output_padding", std::vector<int64_t>(nd, 0))};
    }
    case Op::MaxPool2d: case Op::MaxPool3d: {
      const int64_t nd = ir::spatial_rank(op);
      return {req_ints("kernel"), opt_ints("strides", std::vector<int64_t>(nd, 1)),
              opt_ints("pads", std::vector<int64_t>(2 * nd, 0)), opt_ints("dilations", std::vector<int64_t>(nd, 1)),
              opt_bool("ceil_mode", false)};
    }
    case Op::AvgPool2d: case Op::AvgPool3d: {
      const int64_t nd = ir::spatial_rank(op);
      return {req_ints("kernel"), opt_ints("strides", std::vector<int64_t>(nd, 1)),
              opt_ints("pads", std::vector<int64_t>(2 * nd, 0)), opt_bool("ceil_mode", false),
              opt_bool("count_include_pad", false)};
    }
    case Op::Resize:
      return {req_ints("sizes"), {"scales", AttrType::Floats, std::nullopt, false, {}},
              opt_string("mode", "nearest", {"nearest", "linear"}),
              opt_string("coordinate_transformation_mode", "half_pixel",
                         {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn"}),
              opt_string("nearest_mode", "round_prefer_floor", {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"})};
    case Op::Quantize:
      return {opt_int("axis", 1), opt_int("block_size", 0), {"dtype", AttrType::Dtype, std::nullopt, false, {}}};
    case Op::Dequantize: return {opt_int("axis", 1), opt_int("block_size", 0)};
    case Op::MatmulNbits: return {req_int("k"), req_int("n"), opt_int("bits", 4), req_int("block_size"), opt_int("accuracy_level", 0)};
    default: return {};
  }
}

OpDoc doc_for(Op op) {
  const std::map<std::string, std::string> all_axes = {{"axes", "all"}};
  switch (op) {
    case Op::Input: return {"", "bound from `--input ID=SPEC` at run time", {}};
    case Op::Param: return {"", "bound from parameter files, by `name` (default: id); `--random-params` fills the missing ones", {}};
    case Op::Constant: return {"", "its `value`", {}};
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow: case Op::Maximum: case Op::Minimum:
      return {"a, b", "elementwise; `maximum`/`minimum` propagate NaN", {}};
    case Op::Neg: case Op::Exp: case Op::Log: case Op::Sqrt: case Op::Rsqrt: case Op::Abs: case Op::Tanh:
    case Op::Sigmoid: case Op::Relu: case Op::Silu: case Op::Erf: case Op::Sin: case Op::Cos: case Op::Square:
      return {"x", "elementwise", {}};
    case Op::Asin: case Op::Acos: case Op::Atan: return {"x", "elementwise (radians; NaN outside [−1, 1] for asin and acos)", {}};
    case Op::Gelu: return {"x", "elementwise", {{"approximate", "\"none\" = erf form, or \"tanh\""}}};
    case Op::Floor: case Op::Ceil: case Op::Round: case Op::Sign:
      return {"x", "elementwise; `round` is half to even; integer inputs keep their dtype", {}};
    case Op::Softplus: return {"x", "log(1 + eˣ) as max(x, 0) + log1p(e^−\\|x\\|) (no overflow)", {}};
    case Op::LogicalNot: return {"x", "bool: x == 0", {}};
    case Op::Equal: case Op::Less: case Op::LessEqual: case Op::Greater: case Op::GreaterEqual:
      return {"a, b", "bool, NumPy broadcasting; NaN compares false", {}};
    case Op::LogicalAnd: case Op::LogicalOr: case Op::LogicalXor:
      return {"a, b", "bool, broadcasting; any nonzero value is true", {}};
    case Op::Mod:
      return {"a, b", "ONNX Mod: remainder with the divisor's sign (fmod false) or the dividend's (C fmod)", {}};
    case Op::BitShift:
      return {"a, b (unsigned integers of one dtype)",
              "a shifted by b bits (ONNX BitShift); a shift by the width or more gives 0",
              {{"direction", "\"left\" or \"right\""}}};
    case Op::Sum: case Op::Mean: case Op::Max: return {"x", "reduction", all_axes};
    case Op::Min: case Op::Prod:
      return {"x", "reduction; integer inputs keep their dtype; `min` propagates NaN", all_axes};
    case Op::Softmax: return {"x", "max-subtracted softmax", {}};
    case Op::Matmul: return {"a [..., M, K], b [..., K, N]", "batch dims broadcast", {}};
    case Op::Linear: return {"x [..., In], w [Out, In], bias [Out]?", "x·wᵀ + bias", {}};
    case Op::Reshape: return {"x", "same elements", {{"shape", "required; one entry may be -1"}}};
    case Op::Transpose: return {"x", "permuted axes", {{"perm", "reversed axes"}}};
    case Op::BroadcastTo: return {"x", "NumPy broadcast", {}};
    case Op::Narrow: return {"x", "a slice along `axis`", {}};
    case Op::Concat: return {"x1 … xn", "concatenation", {}};
    case Op::Embedding: return {"table [V, D], indices (i32/i64)", "indices.shape + [D]", {}};
    case Op::Cast: return {"x", "converted values", {}};
    case Op::Where:
      return {"cond, x, y", "x where cond is nonzero, else y; all three broadcast; x and y share a dtype", {}};
    case Op::ArgMax: case Op::ArgMin: return {"x", "i64 index of the first (or last) extreme", {}};
    case Op::CumSum: return {"x", "running sum along `axis`", {}};
    case Op::TopK: return {"x", "below", {}};
    case Op::Gather: return {"data, indices (i32/i64)", "data.shape[:axis] + indices.shape + data.shape[axis+1:]", {}};
    case Op::GatherElements:
      return {"data, indices (i32/i64, same rank)", "indices.shape; data at the index along `axis`", {}};
    case Op::Slice: return {"x", "below", {{"axes", "0, 1, …"}, {"steps", "all 1"}}};
    case Op::Pad: return {"x", "below", {{"pads", "required, [begin_0 … begin_r−1, end_0 … end_r−1]"}}};
    case Op::Trilu:
      return {"x [..., N, M]", "keeps j − i ≥ k (upper) or j − i ≤ k (lower) on the last two axes, zeros elsewhere", {}};
    case Op::LayerNorm: return {"x, weight [D]?, bias [D]?", "over the last axis, biased variance", {}};
    case Op::RmsNorm: return {"x, weight [D]?", "x / sqrt(mean(x²) + eps) · weight", {}};
    case Op::Rope: return {"x [..., S, D], offset (i32 scalar)?", "rotary embedding", {{"dims", "D"}}};
    case Op::ScaledMaskedSoftmax:
      return {"scores [..., Tq, Tk]", "softmax of scale·scores with the causal mask", {}};
    case Op::Attention:
      return {"q, k, v, mask?", "below", {{"scale", "1/sqrt(D)"}, {"views", "none (q, k, v, o contiguous)"}, {"out_shape", "q's with v's head dim"}}};
    case Op::LayerNormVjp: return {"dy, x", "∂ layer_norm (no weight/bias) / ∂x applied to dy", {}};
    case Op::RmsNormVjp: return {"dy, x", "∂ rms_norm (no weight) / ∂x applied to dy", {}};
    case Op::SoftmaxVjp: return {"dy, y", "y · (dy − sum(dy·y, axis))", {}};
    case Op::SiluVjp: return {"dy, x", "dy · silu′(x)", {}};
    case Op::GeluVjp: return {"dy, x", "dy · gelu′(x)", {}};
    case Op::Conv2d: return {"x [N, C, H, W], w [M, C/groups, kH, kW], bias [M]?", "[N, M, OH, OW], below", {}};
    case Op::ConvTranspose2d: return {"x [N, C, H, W], w [C, M/groups, kH, kW], bias [M]?", "[N, M, OH, OW], below", {}};
    case Op::MaxPool2d: return {"x [N, C, H, W]", "window maxima; padding never wins", {}};
    case Op::AvgPool2d: return {"x [N, C, H, W]", "window means", {}};
    case Op::Conv3d: return {"x [N, C, D, H, W], w [M, C/groups, kD, kH, kW], bias [M]?", "[N, M, OD, OH, OW], as conv2d", {}};
    case Op::ConvTranspose3d:
      return {"x [N, C, D, H, W], w [C, M/groups, kD, kH, kW], bias [M]?", "[N, M, OD, OH, OW], as conv_transpose2d", {}};
    case Op::MaxPool3d: return {"x [N, C, D, H, W]", "window maxima, as max_pool2d", {}};
    case Op::AvgPool3d: return {"x [N, C, D, H, W]", "window means, as avg_pool2d", {}};
    case Op::Resize: return {"x (any rank)", "below", {{"sizes", "required, the full output shape"}, {"scales", "optional"}}};
    case Op::Quantize:
      return {"x (float), scale (float), zero_point (i8/u8)?",
              "saturate(round_half_even(x / scale) + zero_point), ONNX QuantizeLinear; NaN gives the zero point; "
              "scale: scalar (per tensor), 1-D (per `axis`) or x's rank with dim `axis` = ceil(dim / block_size) (blocked)",
              {{"dtype", "zero_point's, else u8 (i8 or u8)"}, {"block_size", "0 = not blocked"}}};
    case Op::Dequantize:
      return {"q (i8/u8/i32), scale (float), zero_point (q's dtype)?",
              "(q − zero_point) × scale in f32, in scale's dtype, ONNX DequantizeLinear; granularity as `quantize`",
              {{"block_size", "0 = not blocked"}}};
    case Op::MatmulInteger:
      return {"a [..., M, K], b [..., K, N] (i8/u8), a_zero_point?, b_zero_point?",
              "i32 (a − a_zp)·(b − b_zp), exact, ONNX MatMulInteger; zero points: scalar, per row of a ([M] or "
              "[..., M, 1]) / per column of b ([N] or [..., 1, N]); batch dims broadcast",
              {}};
    case Op::MatmulIntegerScaled:
      return {"a [..., M, K], b [K, N] (i8/u8), a_zero_point, b_zero_point (as matmul_integer), scale (f32: scalar or [N]), bias [N] (f32)?",
              "f32(matmul_integer(a, b, a_zero_point, b_zero_point)) × scale [+ bias], with exactly the f32 operations of "
              "cast, mul and add; what compiled mode makes of matmul_integer → cast → mul [→ add] and of dequantize → "
              "matmul ← dequantize (CPU only: one exact integer GEMM with a float epilogue)",
              {}};
    case Op::Conv2dIntegerScaled:
      return {"x [N, C, H, W], w [M, C, kH, kW] (i8/u8), x_zero_point (x's dtype, scalar), w_zero_point (w's dtype: scalar "
              "or [M]), scale (f32: scalar or [M]), bias [M] (f32)?",
              "f32(Σ (x − x_zp)(w − w_zp[m])) × scale[m] [+ bias[m]] [N, M, OH, OW], the sum exact in i32 over C·kH·kW, padding "
              "contributing 0 (x = x_zp); attributes as conv2d (groups 1); what compiled mode makes of "
              "conv2d(dequantize(xq), dequantize(const W)) (CPU only: im2col in bytes, one exact integer GEMM, a float epilogue)",
              {}};
    case Op::MatmulNbits:
      return {"a [..., K] (float), b [N, k_blocks, block_size·bits/8] (u8), scales [N, k_blocks] (float), zero_points [N, ceil(k_blocks·bits/8)] (u8)?",
              "a · dequant(b)ᵀ [..., N] in a's float dtype (f32 accumulation), ONNX Runtime's MatMulNBits layout: consecutive "
              "K values in a byte, low bits first; w = (q − zp) × scale per block; zero points packed the same way, default 2^(bits−1)",
              {{"bits", "4 (or 8)"}, {"block_size", "required, a power of 2 >= 16"},
               {"accuracy_level", "0 (f32 activations); 4: activations quantized per block to int8 and integer products, "
                                  "as ONNX Runtime's accuracy_level 4 (CPU, 4 bits, k a multiple of 128; elsewhere 0's)"}}};
    // control flow
    case Op::If:
      return {"cond (one element), captures…", "a tuple: the outputs of `bodies[0]` (then) when cond is nonzero, else of `bodies[1]`; read with `result`", {}};
    case Op::Loop:
      return {"M (i64 scalar), cond (bool scalar), carried…, captures…",
              "a tuple: the carried values after the body ran while i < M and cond, then each scan output stacked over the iterations", {}};
    case Op::Scan:
      return {"states…, scan inputs…, captures…", "a tuple: the final states, then the scan outputs stacked along their axes",
              {{"scan_input_axes", "all 0"}, {"scan_input_directions", "all 0 (forward)"}, {"scan_output_axes", "all 0"},
               {"scan_output_directions", "all 0"}}};
    case Op::Result: return {"a control node", "its result `index`, of the node's declared shape and dtype", {}};
    case Op::NonZero:
      return {"x", "a tuple of one result: the indices of x's nonzero elements, i64 [rank, n], in row-major order (a host step)",
              {{"size_key", "the name under which an ONNX import records n (set by the importer)"}}};
    case Op::Compress:
      return {"x, condition", "a tuple of one result: the slices of x along `axis` (of x flattened when absent) where condition is nonzero (a host step)",
              {{"axis", "none: x flattened"}, {"size_key", "the name under which an ONNX import records the count"}}};
    case Op::Unique:
      return {"x", "a tuple of four results: the unique values (or slices along `axis`), their first indices, the inverse indices, "
              "the counts (i64); sorted ascending, else in order of first occurrence (a host step)",
              {{"axis", "none: x flattened"}, {"size_key", "the name under which an ONNX import records the count"}}};
    case Op::TopKDynamic:
      return {"x, k (an i64 scalar known at run time)", "a tuple of two results: the k largest (or smallest) values along `axis` and "
              "their indices (i64); ties keep the lower index first (a host step)",
              {{"size_key", "the name under which an ONNX import records k"}}};
    case Op::MaxUnpool:
      return {"x, indices (i64, x's shape)", "a tuple of one result of `shape`: zeros, with x's values at the flat positions `indices` "
              "name (MaxPool's Indices output), as ONNX's MaxUnpool (a host step)",
              {{"index_shape", "`shape`: the shape the flat indices count in; an index keeps its coordinates in `shape`"},
               {"size_key", "unused (the output shape is fixed)"}}};
    case Op::ScatterElements:
      return {"data, indices (i64), updates (indices' shape, data's dtype)",
              "a tuple of one result of data's shape: data, with updates[c] written (none), added (add) or multiplied (mul) "
              "at c with its `axis` coordinate replaced by indices[c], in order, as ONNX's ScatterElements (a host step)",
              {{"size_key", "unused (the output shape is fixed)"}}};
    case Op::RoiAlign:
      return {"x [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R] (i64)",
              "a tuple of one result [R, C, output_height, output_width]: each box's bins averaged (or max) over a grid of "
              "bilinear samples, as ONNX's RoiAlign (a host step: the grid follows the boxes)",
              {{"sampling_ratio", "0: ceil(box size / output size) samples per bin"},
               {"half_pixel", "true: ONNX's half_pixel (torchvision's aligned=True); false: output_half_pixel"},
               {"size_key", "unused (the output shape is fixed)"}}};
    case Op::NonMaxSuppression:
      return {"boxes [B, N, 4], scores [B, C, N], max_output_boxes_per_class?, iou_threshold?, score_threshold?",
              "a tuple of one result: selected indices [n, 3] (batch, class, box), i64, as ONNX's NonMaxSuppression (a host step)",
              {{"center_point_box", "0: [y1, x1, y2, x2] corners; 1: [x_center, y_center, width, height]"},
               {"size_key", "the name under which an ONNX import records n"}}};
    default: return {};  // an op without a doc: OpsDocs tests refuse it
  }
}

std::vector<OpInfo> build_table() {
  std::vector<OpInfo> t;
#define OP(E, N, MIN, MAX, CAT) t.push_back(OpInfo{Op::E, N, MIN, MAX, Category::CAT, attrs_for(Op::E)});
#include "ir/ops.def"
#undef OP
  return t;
}

const std::vector<OpInfo>& table() {
  static const std::vector<OpInfo> t = build_table();
  return t;
}

}  // namespace

const OpInfo& op_info(Op op) { return table()[(size_t)op]; }

int data_dependent_results(Op op) {
  switch (op) {
    case Op::NonZero: case Op::Compress: case Op::NonMaxSuppression: case Op::RoiAlign: case Op::MaxUnpool:
    case Op::ScatterElements: return 1;
    case Op::TopKDynamic: return 2;
    case Op::Unique: return 4;
    default: return 0;
  }
}

const OpDoc& op_doc(Op op) {
  static const std::vector<OpDoc> docs = [] {
    std::vector<OpDoc> d;
    for (const auto& info : table()) d.push_back(doc_for(info.op));
    return d;
  }();
  return docs[(size_t)op];
}
const char* op_name(Op op) { return op_info(op).name; }

std::optional<Op> op_from_name(const std::string& name) {
  static const std::map<std::string, Op> m = [] {
    std::map<std::string, Op> r;
    for (const auto& i : table()) r[i.name] = i.op;
    return r;
  }();
  auto it = m.find(name);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

const std::vector<std::string>& all_op_names() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> r;
    for (const auto& i : table()) r.push_back(i.name);
    return r;
  }();
  return v;
}

std::string node_ref(const Graph& g, const Node& n) {
  std::string f = g.file.empty() ? std::string("graph") : g.file;
  std::string at = n.json_index >= 0 ? " at nodes[" + std::to_string(n.json_index) + "]" : "";
  return f + ": node '" + printable(n.id) + "' (" + op_name(n.op) + ")" + at;
}

EwOp node_ew_op(const Node& n) {
  switch (n.op) {
    case Op::Add: return EwOp::Add;
    case Op::Sub: return EwOp::Sub;
    case Op::Mul: return EwOp::Mul;
    case Op::Div: return EwOp::Div;
    case Op::Pow: return EwOp::Pow;
    case Op::Maximum: return EwOp::Maximum;
    case Op::Minimum: return EwOp::Minimum;
    case Op::Neg: return EwOp::Neg;
    case Op::Exp: return EwOp::Exp;
    case Op::Log: return EwOp::Log;
    case Op::Sqrt: return EwOp::Sqrt;
    case Op::Rsqrt: return EwOp::Rsqrt;
    case Op::Abs: return EwOp::Abs;
    case Op::Tanh: return EwOp::Tanh;
    case Op::Sigmoid: return EwOp::Sigmoid;
    case Op::Relu: return EwOp::Relu;
    case Op::Silu: return EwOp::Silu;
    case Op::Erf: return EwOp::Erf;
    case Op::Sin: return EwOp::Sin;
    case Op::Cos: return EwOp::Cos;
    case Op::Square: return EwOp::Square;
    case Op::Gelu: return n.attrs.s("approximate") == "tanh" ? EwOp::GeluTanh : EwOp::GeluErf;
    case Op::SiluVjp: return EwOp::SiluVjp;
    case Op::GeluVjp: return n.attrs.s("approximate") == "tanh" ? EwOp::GeluTanhVjp : EwOp::GeluErfVjp;
    case Op::Floor: return EwOp::Floor;
    case Op::Ceil: return EwOp::Ceil;
    case Op::Round: return EwOp::Round;
    case Op::Softplus: return EwOp::Softplus;
    case Op::LogicalNot: return EwOp::LogicalNot;
    case Op::Sign: return EwOp::Sign;
    case Op::Asin: return EwOp::Asin;
    case Op::Acos: return EwOp::Acos;
    case Op::Atan: return EwOp::Atan;
    case Op::Equal: return EwOp::Equal;
    case Op::Less: return EwOp::Less;
    case Op::LessEqual: return EwOp::LessEqual;
    case Op::Greater: return EwOp::Greater;
    case Op::GreaterEqual: return EwOp::GreaterEqual;
    case Op::LogicalAnd: return EwOp::LogicalAnd;
    case Op::LogicalOr: return EwOp::LogicalOr;
    case Op::LogicalXor: return EwOp::LogicalXor;
    case Op::Mod: return n.attrs.b("fmod") ? EwOp::Fmod : EwOp::Mod;
    case Op::BitShift: return n.attrs.s("direction") == "right" ? EwOp::ShiftRight : EwOp::ShiftLeft;
    default: throw InputError(std::string("internal: op ") + op_name(n.op) + " is not elementwise");
  }
}

// ---------------- Shape inference ----------------
namespace {

[[noreturn]] void fail(const Graph& g, const Node& n, const std::string& what) {
  throw InputError(node_ref(g, n) + ": " + what);
}

bool is_elementwise_int_closed(Op op) {
  switch (op) {
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Maximum: case Op::Minimum:
    case Op::Neg: case Op::Abs: case Op::Square: case Op::Relu:
    case Op::Floor: case Op::Ceil: case Op::Round: case Op::Sign: case Op::Mod:
      return true;
    default: return false;
  }
}

bool is_shift(Op op) { return op == Op::BitShift; }

// Ops whose result is bool whatever their inputs (nonzero counts as true for the logical ones).
bool is_bool_result(Op op) {
  switch (op) {
    case Op::Equal: case Op::Less: case Op::LessEqual: case Op::Greater: case Op::GreaterEqual:
    case Op::LogicalAnd: case Op::LogicalOr: case Op::LogicalXor: case Op::LogicalNot:
      return true;
    default: return false;
  }
}

DType elementwise_dtype(const Graph& g, const Node& n, const TypedShapes& ts) {
  if (is_bool_result(n.op)) return DType::boolean;
  bool all_int = true, any64 = false, same = true, wide_only = true;
  for (int i : n.inputs) {
    const DType t = ts.dtypes[i];
    all_int = all_int && is_integer(t);
    any64 = any64 || t == DType::i64;
    same = same && t == ts.dtypes[n.inputs[0]];
    wide_only = wide_only && (t == DType::i32 || t == DType::i64);
  }
  if (is_shift(n.op))
    for (int i : n.inputs)
      if (dtype_traits(ts.dtypes[i]).cls != DClass::Unsigned)
        fail(g, n, std::string("bit_shift takes unsigned integers (u8, u16, u32, u64), got ") + dtype_name(ts.dtypes[i]));
  // div of integers other than i32/i64 alone (i8, u8, i16, u16, u32, u64: ONNX's integer Div)
  // divides exactly in their own type, truncating toward zero; i32/i64 div keeps the graph
  // format's rule (an f32 result)
  if (all_int && (is_elementwise_int_closed(n.op) || is_shift(n.op) || (n.op == Op::Div && !wide_only))) {
    if (same) return ts.dtypes[n.inputs[0]];  // every integer dtype computes in its own arithmetic
    if (wide_only) return any64 ? DType::i64 : DType::i32;
    fail(g, n, std::string("integer inputs of different dtypes (") + dtype_name(ts.dtypes[n.inputs[0]]) + " and " +
                   dtype_name(ts.dtypes[n.inputs.back()]) + "); cast one to the other's dtype first");
  }
  return DType::f32;
}

}  // namespace

int normalize_axis(int64_t axis, int rank, const Node& n, const Graph& g) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    fail(g, n, "axis " + std::to_string(axis) + " is out of range for a rank-" + std::to_string(rank) + " input");
  return (int)a;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const Node& n, const Graph& g) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      fail(g, n, "cannot broadcast shapes " + shape_str(a) + " and " + shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t AttentionViews::extent(int k) const {
  const int64_t S = k == 1 || k == 2 ? Sk : Sq, W = k == 0 || k == 1 ? D : Dv;
  return (k < 3 ? off[k] : 0) + (B - 1) * stride[k][0] + (H - 1) * stride[k][1] + (S - 1) * stride[k][2] + W;
}

AttentionViews attention_views(const Attrs& a, std::string* error) {
  AttentionViews v;
  const auto& x = a.ints("views");
  if (x.size() != 21) {
    *error = "views must hold 21 values (B, H, Sq, Sk, D, Dv, q/k/v offset and strides, o strides), got " +
             std::to_string(x.size());
    return v;
  }
  v.B = x[0], v.H = x[1], v.Sq = x[2], v.Sk = x[3], v.D = x[4], v.Dv = x[5];
  for (int k = 0; k < 3; ++k) {
    v.off[k] = x[6 + 4 * k];
    for (int j = 0; j < 3; ++j) v.stride[k][j] = x[7 + 4 * k + j];
  }
  for (int j = 0; j < 3; ++j) v.stride[3][j] = x[18 + j];
  if (a.has("out_shape")) v.out_shape = a.ints("out_shape");
  for (int i = 0; i < 21; ++i)
    if (x[i] < 0 || x[i] > (int64_t(1) << 40) || (i < 6 && x[i] == 0)) {
      *error = "views value " + std::to_string(i) + " (" + std::to_string(x[i]) + ") is out of range";
      return v;
    }
  if (!a.has("out_shape")) *error = "views need out_shape";
  for (auto d : v.out_shape)
    if (d < 0) *error = "out_shape has a negative dim";
  return v;
}

void set_attention_views(Attrs& a, const AttentionViews& v) {
  std::vector<int64_t> x{v.B, v.H, v.Sq, v.Sk, v.D, v.Dv};
  for (int k = 0; k < 3; ++k) x.insert(x.end(), {v.off[k], v.stride[k][0], v.stride[k][1], v.stride[k][2]});
  x.insert(x.end(), {v.stride[3][0], v.stride[3][1], v.stride[3][2]});
  a.values["views"] = x;
  a.values["out_shape"] = v.out_shape;
}

std::vector<SliceAxis> slice_plan(const Attrs& a, const Shape& x, std::string* error) {
  const int r = (int)x.size();
  std::vector<SliceAxis> plan(r);
  for (int d = 0; d < r; ++d) plan[d] = {0, 1, x[d]};
  const auto& starts = a.ints("starts");
  const auto& ends = a.ints("ends");
  auto bad = [&](const std::string& m) {
    *error = m;
    return std::vector<SliceAxis>{};
  };
  size_t n = starts.size();
  if (ends.size() != n)
    return bad("starts has " + std::to_string(n) + " entries and ends " + std::to_string(ends.size()));
  std::vector<int64_t> axes, steps(n, 1);
  if (a.has("axes")) {
    axes = a.ints("axes");
    if (axes.size() != n) return bad("axes has " + std::to_string(axes.size()) + " entries, starts " + std::to_string(n));
  } else {
    if ((int)n > r) return bad("starts has " + std::to_string(n) + " entries for a rank-" + std::to_string(r) + " input");
    for (size_t i = 0; i < n; ++i) axes.push_back((int64_t)i);
  }
  if (a.has("steps")) {
    steps = a.ints("steps");
    if (steps.size() != n) return bad("steps has " + std::to_string(steps.size()) + " entries, starts " + std::to_string(n));
  }
  std::vector<bool> seen(r, false);
  for (size_t i = 0; i < n; ++i) {
    int64_t ax = axes[i] < 0 ? axes[i] + r : axes[i];
    if (ax < 0 || ax >= r)
      return bad("axis " + std::to_string(axes[i]) + " is out of range for a rank-" + std::to_string(r) + " input");
    if (seen[ax]) return bad("axis " + std::to_string(axes[i]) + " is listed twice in axes");
    seen[ax] = true;
    int64_t st = steps[i];
    if (st == 0) return bad("steps must not be 0");
    if (st == INT64_MIN) return bad("step " + std::to_string(st) + " is out of range");
    const int64_t dim = x[ax];
    // Clamp before adding dim, so that INT64_MIN/MAX (ONNX's "to the end") cannot overflow.
    int64_t s = std::clamp<int64_t>(starts[i], -dim - 1, dim + 1), e = std::clamp<int64_t>(ends[i], -dim - 1, dim + 1);
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    int64_t len;
    if (st > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      len = e > s ? (e - s - 1) / st + 1 : 0;  // ceil((e - s) / st) without overflowing for a huge step
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      len = s > e ? (s - e - 1) / (-st) + 1 : 0;
    }
    plan[ax] = {len > 0 ? s : 0, st, len};
  }
  return plan;
}

QuantParams quant_params(const Attrs& a, const Shape& x, const Shape& scale, std::string* error) {
  QuantParams q;
  const int r = (int)x.size();
  const int64_t bs = a.i("block_size");
  auto bad = [&](const std::string& m) {
    *error = m;
    return q;
  };
  if (bs < 0) return bad("block_size must be >= 0, got " + std::to_string(bs));
  if (bs == 0 && shape_numel(scale) == 1 && scale.size() <= 1) return q;  // per tensor
  const int64_t ax = a.i("axis");
  if (r == 0) return bad("scale " + shape_str(scale) + " must be a scalar for a scalar input");
  if (ax < -r || ax >= r) return bad("axis " + std::to_string(ax) + " is out of range for a rank-" + std::to_string(r) + " input");
  q.axis = (int)(ax < 0 ? ax + r : ax);
  if (bs == 0) {
    if (scale.size() != 1 || scale[0] != x[q.axis])
      return bad("scale " + shape_str(scale) + " must be a scalar (per tensor) or [" + std::to_string(x[q.axis]) +
                 "] (per axis " + std::to_string(q.axis) + " of " + shape_str(x) + ")");
    q.kind = QuantParams::PerAxis;
    return q;
  }
  Shape want = x;
  want[q.axis] = (x[q.axis] + bs - 1) / bs;
  if (scale != want)
    return bad("blocked scale must be " + shape_str(want) + " (x " + shape_str(x) + " with axis " + std::to_string(q.axis) +
               " in blocks of " + std::to_string(bs) + "), got " + shape_str(scale));
  q.kind = QuantParams::Blocked;
  q.block_size = bs;
  return q;
}

// A tensor's element count times its element size must fit int64 (issue 24: broadcast_to
// [2^62] of f32 is 2^64 bytes, which wrapped to 0 and was allocated as such).
void check_byte_size(const Graph& g, const Node& n, const Shape& s, DType dt) {
  if (checked_nbytes(shape_numel(s), dtype_size(dt)) < 0)
    fail(g, n, "result shape " + shape_str(s) + " of " + dtype_name(dt) + " is more bytes than fit int64");
}

void infer_node(const Graph& g, int idx, TypedShapes& ts) {
  const Node& n = g.nodes[idx];
  auto in = [&](int k) -> const Shape& { return ts.shapes[n.inputs[k]]; };
  auto in_dt = [&](int k) { return ts.dtypes[n.inputs[k]]; };
  Shape out;
  DType dt = DType::f32;
  const auto& info = op_info(n.op);
  auto require_rank_at_least = [&](int k, int r, const char* what) {
    if ((int)in(k).size() < r)
      fail(g, n, std::string(what) + " must have rank >= " + std::to_string(r) + ", got shape " + shape_str(in(k)));
  };
  auto require_vec = [&](int k, int64_t d, const char* what) {
    if (in(k).size() != 1 || in(k)[0] != d)
      fail(g, n, std::string(what) + " must have shape [" + std::to_string(d) + "], got " + shape_str(in(k)));
  };

  // i8/u8 are storage types (docs/graph-format.md, compute rules): ops that move data, cast and
  // the quantization ops take them; an op that would compute on them refuses them here.
  auto takes_quant_storage = [&](size_t k) {
    switch (n.op) {
      case Op::Reshape: case Op::Transpose: case Op::BroadcastTo: case Op::Narrow: case Op::Concat: case Op::Cast:
      case Op::Slice: case Op::Pad: case Op::Gather: case Op::GatherElements: case Op::Where:
      case Op::Dequantize: case Op::MatmulInteger: case Op::MaxPool2d:
        return true;
      case Op::MatmulIntegerScaled: case Op::Conv2dIntegerScaled: return k < 4;
      case Op::MatmulNbits: return k == 1 || k == 3;
      case Op::Embedding: return k == 0;
      case Op::Quantize: return k == 2;
      default:
        // integer-closed elementwise ops and bit_shift on integers alone compute in the
        // integer's own arithmetic (8-bit wrap), never through a float
        if (is_elementwise_int_closed(n.op) || is_shift(n.op) || n.op == Op::Div) {
          for (int i : n.inputs)
            if (!is_integer(ts.dtypes[i])) return false;
          return true;
        }
        return false;
    }
  };
  for (size_t k = 0; k < n.inputs.size(); ++k)
    if (is_quant_storage(in_dt((int)k)) && !takes_quant_storage(k))
      fail(g, n, "input " + std::to_string(k) + " is " + dtype_name(in_dt((int)k)) + ", a storage type that " +
                     op_name(n.op) + " does not compute on; cast first (e.g. to f32 or i32) or dequantize");

  switch (info.category) {
    case Category::Leaf:
      return;  // set by the binder
    case Category::Control:
      if (n.op != Op::Result) {  // a tuple: its results carry the types
        ts.shapes[idx] = {};
        ts.dtypes[idx] = DType::f32;
        return;
      }
      if (op_info(g.nodes[n.inputs[0]].op).category != Category::Control || g.nodes[n.inputs[0]].op == Op::Result)
        fail(g, n, "a result reads a control node (if, loop, scan) or a data-dependent one (nonzero, compress, unique, "
                   "topk_dynamic, non_max_suppression)");
      for (const auto& d : n.decl_shape) {
        if (!d.symbol.empty() || d.value < 0) fail(g, n, "a result declares a concrete shape");
        out.push_back(d.value);
      }
      dt = n.dtype;
      break;
    case Category::Binary:
      if (n.op == Op::SiluVjp || n.op == Op::GeluVjp) {
        if (in(0) != in(1)) fail(g, n, "dy " + shape_str(in(0)) + " and x " + shape_str(in(1)) + " must have the same shape");
        out = in(0);
      } else {
        out = broadcast_shapes(in(0), in(1), n, g);
        dt = elementwise_dtype(g, n, ts);
      }
      break;
    case Category::Unary:
      out = in(0);
      if (n.op == Op::Cast) dt = *parse_dtype(n.attrs.s("dtype"));
      else dt = elementwise_dtype(g, n, ts);
      break;
    case Category::Reduce: {
      const Shape& x = in(0);
      int r = (int)x.size();
      std::vector<bool> red(r, !n.attrs.has("axes"));
      if (n.attrs.has("axes")) {
        for (int64_t a : n.attrs.ints("axes")) {
          int k = normalize_axis(a, r, n, g);
          if (red[k]) fail(g, n, "axis " + std::to_string(a) + " is listed twice in axes");
          red[k] = true;
        }
      }
      bool keep = n.attrs.b("keepdims");
      for (int k = 0; k < r; ++k) {
        if (!red[k]) out.push_back(x[k]);
        else if (keep) out.push_back(1);
        if (red[k] && x[k] == 0 && (n.op == Op::Max || n.op == Op::Min))
          fail(g, n, std::string(op_name(n.op)) + " over an empty axis");
      }
      if ((n.op == Op::Min || n.op == Op::Prod) && !is_float(in_dt(0))) dt = in_dt(0);
      break;
    }
    case Category::Row: {
      const Shape& x = in(0);
      out = x;
      switch (n.op) {
        case Op::Softmax: case Op::SoftmaxVjp:
          normalize_axis(n.attrs.i("axis"), (int)x.size(), n, g);
          break;
        case Op::ScaledMaskedSoftmax:
          require_rank_at_least(0, 2, "scores");
          break;
        case Op::LayerNorm: case Op::RmsNorm:
          require_rank_at_least(0, 1, "x");
          for (size_t k = 1; k < n.inputs.size(); ++k) require_vec((int)k, x.back(), k == 1 ? "weight" : "bias");
          break;
        default: break;
      }
      if (n.inputs.size() == 2 && (n.op == Op::LayerNormVjp || n.op == Op::RmsNormVjp || n.op == Op::SoftmaxVjp)) {
        if (in(0) != in(1)) fail(g, n, "dy " + shape_str(in(0)) + " and its second input " + shape_str(in(1)) + " must have the same shape");
        if (n.op != Op::SoftmaxVjp) require_rank_at_least(0, 1, "x");
      }
      break;
    }
    case Category::Matmul: {
      if (n.op == Op::Linear) {
        require_rank_at_least(0, 1, "x");
        const Shape &x = in(0), &w = in(1);
        if (w.size() != 2) fail(g, n, "weight must be [Out, In], got " + shape_str(w));
        if (x.back() != w[1])
          fail(g, n, "x's last dimension " + std::to_string(x.back()) + " does not match weight " + shape_str(w) + " (In = " + std::to_string(w[1]) + ")");
        if (n.inputs.size() == 3) require_vec(2, w[0], "bias");
        out = x;
        out.back() = w[0];
      } else {
        require_rank_at_least(0, 2, "a");
        require_rank_at_least(1, 2, "b");
        Shape a = in(0), b = in(1);
        if (n.attrs.b("transpose_a")) std::swap(a[a.size() - 1], a[a.size() - 2]);
        if (n.attrs.b("transpose_b")) std::swap(b[b.size() - 1], b[b.size() - 2]);
        int64_t M = a[a.size() - 2], K = a.back(), K2 = b[b.size() - 2], N = b.back();
        if (K != K2)
          fail(g, n, "inner dimensions differ: a " + shape_str(in(0)) + " and b " + shape_str(in(1)) + " give K = " +
                         std::to_string(K) + " vs " + std::to_string(K2));
        Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
        out = broadcast_shapes(ba, bb, n, g);
        out.push_back(M);
        out.push_back(N);
      }
      break;
    }
    case Category::Shape: {
      const Shape& x = in(0);
      dt = in_dt(0);
      switch (n.op) {
        case Op::Reshape: {
          const auto& s = n.attrs.ints("shape");
          int neg = -1;
          int64_t known = 1;
          for (size_t k = 0; k < s.size(); ++k) {
            if (s[k] == -1) {
              if (neg >= 0) fail(g, n, "shape has more than one -1");
              neg = (int)k;
            } else if (s[k] < 0) {
              fail(g, n, "shape has a negative dimension " + std::to_string(s[k]));
            } else {
              if (s[k] != 0 && known > INT64_MAX / s[k]) fail(g, n, "shape element count overflows");
              known *= s[k];
            }
          }
          int64_t total = shape_numel(x);
          out.assign(s.begin(), s.end());
          if (neg >= 0) {
            if (known == 0 || total % known != 0)
              fail(g, n, "cannot infer -1: " + std::to_string(total) + " elements of " + shape_str(x) + " into " + shape_str(out));
            out[neg] = total / known;
          } else if (known != total) {
            fail(g, n, "cannot reshape " + shape_str(x) + " (" + std::to_string(total) + " elements) to " + shape_str(out));
          }
          break;
        }
        case Op::Transpose: {
          int r = (int)x.size();
          std::vector<int64_t> perm(r);
          if (n.attrs.has("perm")) perm = n.attrs.ints("perm");
          else for (int k = 0; k < r; ++k) perm[k] = r - 1 - k;
          if ((int)perm.size() != r) fail(g, n, "perm has " + std::to_string(perm.size()) + " entries for a rank-" + std::to_string(r) + " input");
          std::vector<bool> seen(r, false);
          for (auto p : perm) {
            int a = normalize_axis(p, r, n, g);
            if (seen[a]) fail(g, n, "perm is not a permutation");
            seen[a] = true;
            out.push_back(x[a]);
          }
          break;
        }
        case Op::BroadcastTo: {
          const auto& s = n.attrs.ints("shape");
          out.assign(s.begin(), s.end());
          for (auto d : out) if (d < 0) fail(g, n, "shape has a negative dimension");
          if (x.size() > out.size()) fail(g, n, "cannot broadcast " + shape_str(x) + " to lower rank " + shape_str(out));
          if (broadcast_shapes(x, out, n, g) != out) fail(g, n, "cannot broadcast " + shape_str(x) + " to " + shape_str(out));
          break;
        }
        case Op::Narrow: {
          int a = normalize_axis(n.attrs.i("axis"), (int)x.size(), n, g);
          int64_t st = n.attrs.i("start"), len = n.attrs.i("length");
          if (st < 0 || len < 0 || st > x[a] || len > x[a] - st)
            fail(g, n, "start " + std::to_string(st) + " and length " + std::to_string(len) + " do not fit axis " +
                           std::to_string(a) + " of size " + std::to_string(x[a]));
          out = x;
          out[a] = len;
          break;
        }
        case Op::Concat: {
          int a = normalize_axis(n.attrs.i("axis"), (int)x.size(), n, g);
          out = x;
          out[a] = 0;
          for (size_t k = 0; k < n.inputs.size(); ++k) {
            const Shape& y = in((int)k);
            bool ok = y.size() == x.size();
            for (size_t d = 0; ok && d < y.size(); ++d) ok = (int)d == a || y[d] == x[d];
            if (!ok) fail(g, n, "input " + std::to_string(k) + " has shape " + shape_str(y) + ", incompatible with " + shape_str(x) + " along axes other than " + std::to_string(a));
            if (y[a] > INT64_MAX - out[a]) fail(g, n, "the concatenated axis " + std::to_string(a) + " overflows");
            out[a] += y[a];
          }
          break;
        }
        default: break;
      }
      break;
    }
    case Category::Gather: {
      const Shape& t = in(0);
      if (t.size() != 2) fail(g, n, "table must be [V, D], got " + shape_str(t));
      if (!is_integer(in_dt(1))) fail(g, n, std::string("indices must be i32 or i64, got ") + dtype_name(in_dt(1)));
      out = in(1);
      out.push_back(t[1]);
      dt = in_dt(0);  // the table's rows, in the table's dtype
      break;
    }
    case Category::Index: {
      const Shape& x = in(0);
      const int r = (int)x.size();
      auto value_dt = [&](DType t) { return is_float(t) ? DType::f32 : t; };
      dt = value_dt(in_dt(0));
      switch (n.op) {
        case Op::Where: {
          out = broadcast_shapes(broadcast_shapes(in(0), in(1), n, g), in(2), n, g);
          DType a = in_dt(1), b = in_dt(2);
          if (is_float(a) != is_float(b) || (!is_float(a) && a != b))
            fail(g, n, std::string("x is ") + dtype_name(a) + " and y is " + dtype_name(b) + "; where needs one dtype for both");
          dt = value_dt(a);
          break;
        }
        case Op::ArgMax: case Op::ArgMin: {
          if (r == 0) fail(g, n, "needs an input of rank >= 1, got a scalar");
          int a = normalize_axis(n.attrs.i("axis"), r, n, g);
          if (x[a] == 0) fail(g, n, std::string(op_name(n.op)) + " over an empty axis " + std::to_string(a));
          out = x;
          if (n.attrs.b("keepdims")) out[a] = 1;
          else out.erase(out.begin() + a);
          dt = DType::i64;
          break;
        }
        case Op::CumSum: {
          if (r == 0) fail(g, n, "needs an input of rank >= 1, got a scalar");
          normalize_axis(n.attrs.i("axis"), r, n, g);
          out = x;
          if (!is_integer(in_dt(0))) dt = DType::f32;
          break;
        }
        case Op::TopK: {
          if (r == 0) fail(g, n, "needs an input of rank >= 1, got a scalar");
          int a = normalize_axis(n.attrs.i("axis"), r, n, g);
          int64_t k = n.attrs.i("k");
          if (k < 0 || k > x[a])
            fail(g, n, "k " + std::to_string(k) + " is outside [0, " + std::to_string(x[a]) + "] (the size of axis " + std::to_string(a) + ")");
          out = x;
          out[a] = k;
          if (n.attrs.s("select") == "indices") dt = DType::i64;
          break;
        }
        case Op::Gather: {
          if (r == 0) fail(g, n, "data must have rank >= 1, got a scalar");
          if (!is_integer(in_dt(1))) fail(g, n, std::string("indices must be i32 or i64, got ") + dtype_name(in_dt(1)));
          int a = normalize_axis(n.attrs.i("axis"), r, n, g);
          out.assign(x.begin(), x.begin() + a);
          out.insert(out.end(), in(1).begin(), in(1).end());
          out.insert(out.end(), x.begin() + a + 1, x.end());
          break;
        }
        case Op::GatherElements: {
          if (r == 0) fail(g, n, "data must have rank >= 1, got a scalar");
          if (!is_integer(in_dt(1))) fail(g, n, std::string("indices must be i32 or i64, got ") + dtype_name(in_dt(1)));
          const Shape& is = in(1);
          if ((int)is.size() != r)
            fail(g, n, "indices " + shape_str(is) + " must have the rank of data " + shape_str(x));
          int a = normalize_axis(n.attrs.i("axis"), r, n, g);
          for (int d = 0; d < r; ++d)
            if (d != a && is[d] > x[d])
              fail(g, n, "indices " + shape_str(is) + " exceed data " + shape_str(x) + " along axis " + std::to_string(d));
          if (x[a] == 0 && shape_numel(is) > 0) fail(g, n, "gathers from an empty axis " + std::to_string(a));
          out = is;
          break;
        }
        case Op::Slice: {
          std::string err;
          auto plan = slice_plan(n.attrs, x, &err);
          if (!err.empty()) fail(g, n, err);
          for (const auto& p : plan) out.push_back(p.len);
          break;
        }
        case Op::Pad: {
          const auto& pads = n.attrs.ints("pads");
          if ((int)pads.size() != 2 * r)
            fail(g, n, "pads has " + std::to_string(pads.size()) + " entries; a rank-" + std::to_string(r) + " input needs " + std::to_string(2 * r) + " ([begin_0.., end_0..])");
          const std::string& mode = n.attrs.s("mode");
          // The pad value becomes an element of x's dtype: it must fit, as a constant's value must.
          if (std::string why = literal_value_problem(n.attrs.f("value"), in_dt(0)); !why.empty()) {
            char shown[32];
            std::snprintf(shown, sizeof shown, "%.17g", n.attrs.f("value"));
            fail(g, n, std::string("attribute 'value' ") + shown + " " + why + " (x is " + dtype_name(in_dt(0)) + ")");
          }
          for (int d = 0; d < r; ++d) {
            int64_t b = pads[d], e = pads[d + r];
            if (std::abs(b) > (int64_t)1 << 40 || std::abs(e) > (int64_t)1 << 40) fail(g, n, "pads are too large");
            int64_t len = x[d] + b + e;
            if (len < 0) fail(g, n, "pads " + std::to_string(b) + ", " + std::to_string(e) + " crop more than the " + std::to_string(x[d]) + " elements of axis " + std::to_string(d));
            if (std::max(b, e) > 0 && len > 0) {
              if (mode == "reflect" && std::max(b, e) > x[d] - 1)
                fail(g, n, "reflect pads of axis " + std::to_string(d) + " must be at most its size - 1 (" + std::to_string(x[d] - 1) + "), got " + std::to_string(std::max(b, e)));
              if (mode == "edge" && x[d] == 0) fail(g, n, "edge padding of the empty axis " + std::to_string(d));
            }
            out.push_back(len);
          }
          break;
        }
        case Op::Trilu:
          if (r < 2) fail(g, n, "needs an input of rank >= 2, got " + shape_str(x));
          out = x;
          break;
        default: break;
      }
      break;
    }
    case Category::Rope: {
      require_rank_at_least(0, 2, "x");
      const Shape& x = in(0);
      int64_t D = x.back();
      int64_t dims = n.attrs.has("dims") ? n.attrs.i("dims") : D;
      if (dims <= 0 || dims > D || dims % 2) fail(g, n, "dims " + std::to_string(dims) + " must be even and in (0, " + std::to_string(D) + "]");
      if (n.inputs.size() == 2) {
        if (shape_numel(in(1)) != 1) fail(g, n, "offset must be a scalar, got shape " + shape_str(in(1)));
        if (!is_integer(in_dt(1))) fail(g, n, std::string("offset must be i32, got ") + dtype_name(in_dt(1)));
      }
      out = x;
      break;
    }
    case Category::Attention: {
      if (n.attrs.has("views")) {  // q, k, v read in place, o written in its consumer's layout
        std::string err;
        const AttentionViews av = attention_views(n.attrs, &err);
        if (!err.empty()) fail(g, n, err);
        if (n.inputs.size() == 4) fail(g, n, "views do not take a mask");
        for (int k = 0; k < 3; ++k) {
          const char* name = k == 0 ? "q" : k == 1 ? "k" : "v";
          const int64_t ext = av.extent(k), have = shape_numel(in(k));
          if (ext > have)
            fail(g, n, std::string(name) + "'s view reaches element " + std::to_string(ext - 1) + " of " + shape_str(in(k)));
        }
        out = Shape(av.out_shape.begin(), av.out_shape.end());
        if (shape_numel(out) != av.B * av.H * av.Sq * av.Dv || av.extent(3) > shape_numel(out))
          fail(g, n, "out_shape " + shape_str(out) + " does not hold the output's view");
        break;
      }
      const Shape &q = in(0), &k = in(1), &v = in(2);
      size_t r = q.size();
      if (r < 2 || r > 4) fail(g, n, "q must have rank 2, 3 or 4, got " + shape_str(q));
      if (k.size() != r || v.size() != r) fail(g, n, "q, k and v must have the same rank: " + shape_str(q) + ", " + shape_str(k) + ", " + shape_str(v));
      int64_t D = q[r - 1], Sk = k[r - 2];
      if (k[r - 1] != D) fail(g, n, "k's head dim " + std::to_string(k[r - 1]) + " differs from q's " + std::to_string(D));
      if (v[r - 2] != Sk) fail(g, n, "v has " + std::to_string(v[r - 2]) + " positions, k has " + std::to_string(Sk));
      if (r >= 3) {
        int64_t Hq = q[r - 3], Hk = k[r - 3];
        if (v[r - 3] != Hk) fail(g, n, "k and v head counts differ: " + shape_str(k) + " vs " + shape_str(v));
        if (Hk == 0 || Hq % Hk) fail(g, n, "query heads " + std::to_string(Hq) + " must be a multiple of key/value heads " + std::to_string(Hk));
      }
      if (r == 4 && (k[0] != q[0] || v[0] != q[0])) fail(g, n, "batch sizes differ: " + shape_str(q) + ", " + shape_str(k) + ", " + shape_str(v));
      out = q;
      out.back() = v.back();
      if (n.inputs.size() == 4) {
        Shape sc = q;
        sc.back() = Sk;
        if (in(3).size() > sc.size() || broadcast_shapes(in(3), sc, n, g) != sc)
          fail(g, n, "mask " + shape_str(in(3)) + " does not broadcast to the scores " + shape_str(sc));
      }
      break;
    }
    case Category::Quant: {
      const Shape& x = in(0);
      auto zp_check = [&](int k, DType want, const Shape& shape_want, const char* what) {
        if (in_dt(k) != want)
          fail(g, n, std::string(what) + " is " + dtype_name(in_dt(k)) + "; it must be " + dtype_name(want));
        if (in(k) != shape_want)
          fail(g, n, std::string(what) + " has shape " + shape_str(in(k)) + "; it must have the scale's shape " + shape_str(shape_want));
      };
      if (n.op == Op::Quantize || n.op == Op::Dequantize) {
        const bool q = n.op == Op::Quantize;
        if (q && !is_float(in_dt(0))) fail(g, n, std::string("x must be a float tensor, got ") + dtype_name(in_dt(0)));
        if (!q && !is_quant_storage(in_dt(0)) && in_dt(0) != DType::i32)
          fail(g, n, std::string("q must be i8, u8 or i32, got ") + dtype_name(in_dt(0)));
        if (!is_float(in_dt(1))) fail(g, n, std::string("scale must be a float tensor, got ") + dtype_name(in_dt(1)));
        std::string err;
        quant_params(n.attrs, x, in(1), &err);
        if (!err.empty()) fail(g, n, err);
        out = x;
        if (q) {
          std::optional<DType> want;
          if (n.attrs.has("dtype")) {
            want = parse_dtype(n.attrs.s("dtype"));
            if (!want || !is_quant_storage(*want)) fail(g, n, "dtype must be i8 or u8, got " + n.attrs.s("dtype"));
          }
          if (n.inputs.size() == 3) {
            if (!is_quant_storage(in_dt(2)))
              fail(g, n, std::string("zero_point must be i8 or u8, got ") + dtype_name(in_dt(2)));
            if (want && *want != in_dt(2))
              fail(g, n, std::string("dtype ") + dtype_name(*want) + " differs from zero_point's " + dtype_name(in_dt(2)));
            zp_check(2, in_dt(2), in(1), "zero_point");
            want = in_dt(2);
          }
          dt = want.value_or(DType::u8);
        } else {
          if (n.inputs.size() == 3) zp_check(2, in_dt(0), in(1), "zero_point");
          dt = in_dt(1);
          if (!is_float(dt)) dt = DType::f32;
        }
        ts.shapes[idx] = out;
        ts.dtypes[idx] = dt;
        return;
      }
      if (n.op == Op::Conv2dIntegerScaled) {
        for (int k = 0; k < 2; ++k)
          if (!is_quant_storage(in_dt(k)))
            fail(g, n, std::string(k ? "w" : "x") + " must be i8 or u8, got " + dtype_name(in_dt(k)));
        if (n.attrs.i("groups") != 1) fail(g, n, "groups must be 1, got " + std::to_string(n.attrs.i("groups")));
        std::vector<Shape> cins{in(0), in(1)};
        if (n.inputs.size() == 6) cins.push_back(in(5));
        const ir::Conv2dGeom cg = conv2d_geom(n, cins, node_ref(g, n));
        const int64_t M = cg.M;
        if (cg.Cg * cg.kH * cg.kW > INT32_MAX / (255 * 255))
          fail(g, n, "C·kH·kW = " + std::to_string(cg.Cg * cg.kH * cg.kW) + " could overflow the i32 accumulator");
        const char* zname[2] = {"x_zero_point", "w_zero_point"};
        for (int k = 2; k < 4; ++k) {
          if (in_dt(k) != in_dt(k - 2))
            fail(g, n, std::string(zname[k - 2]) + " is " + dtype_name(in_dt(k)) + "; it must be " + dtype_name(in_dt(k - 2)));
          const bool scalar = shape_numel(in(k)) == 1 && in(k).size() <= 1;
          if (!scalar && !(k == 3 && in(k) == Shape{M}))
            fail(g, n, std::string(zname[k - 2]) + " has shape " + shape_str(in(k)) + "; it must be a scalar" +
                           (k == 3 ? " or [" + std::to_string(M) + "]" : std::string()));
        }
        if (in_dt(4) != DType::f32) fail(g, n, std::string("scale must be f32, got ") + dtype_name(in_dt(4)));
        if (!(shape_numel(in(4)) == 1 && in(4).size() <= 1) && in(4) != Shape{M})
          fail(g, n, "scale has shape " + shape_str(in(4)) + "; it must be a scalar or [" + std::to_string(M) + "]");
        if (n.inputs.size() == 6 && in_dt(5) != DType::f32)
          fail(g, n, std::string("bias must be f32, got ") + dtype_name(in_dt(5)));
        ts.shapes[idx] = {cg.N, M, cg.OH, cg.OW};
        ts.dtypes[idx] = DType::f32;
        return;
      }
      if (n.op == Op::MatmulNbits) {
        const int64_t K = n.attrs.i("k"), N = n.attrs.i("n"), bits = n.attrs.i("bits"), bs = n.attrs.i("block_size");
        if (bits != 4 && bits != 8) fail(g, n, "bits must be 4 or 8, got " + std::to_string(bits));
        if (bs < 16 || (bs & (bs - 1))) fail(g, n, "block_size must be a power of 2 >= 16, got " + std::to_string(bs));
        if (K <= 0 || N <= 0 || K > ((int64_t)1 << 40) || N > ((int64_t)1 << 40))
          fail(g, n, "k and n must be positive, got k = " + std::to_string(K) + ", n = " + std::to_string(N));
        require_rank_at_least(0, 1, "a");
        if (!is_float(in_dt(0))) fail(g, n, std::string("a must be a float tensor, got ") + dtype_name(in_dt(0)));
        if (x.back() != K) fail(g, n, "a's last dimension " + std::to_string(x.back()) + " differs from k = " + std::to_string(K));
        const int64_t kb = (K + bs - 1) / bs, blob = bs * bits / 8, zcols = (kb * bits + 7) / 8;
        if (in_dt(1) != DType::u8) fail(g, n, std::string("b must be u8 (packed), got ") + dtype_name(in_dt(1)));
        if (in(1) != Shape{N, kb, blob})
          fail(g, n, "b must be " + shape_str(Shape{N, kb, blob}) + " ([n, k_blocks, block_size * bits / 8]), got " + shape_str(in(1)));
        if (!is_float(in_dt(2))) fail(g, n, std::string("scales must be a float tensor, got ") + dtype_name(in_dt(2)));
        if (in(2) != Shape{N, kb} && in(2) != Shape{N * kb})
          fail(g, n, "scales must be " + shape_str(Shape{N, kb}) + " (or " + shape_str(Shape{N * kb}) + "), got " + shape_str(in(2)));
        if (n.inputs.size() == 4) {
          if (in_dt(3) != DType::u8)
            fail(g, n, std::string("zero_points must be u8 (packed like b), got ") + dtype_name(in_dt(3)));
          if (in(3) != Shape{N, zcols} && in(3) != Shape{N * zcols})
            fail(g, n, "zero_points must be " + shape_str(Shape{N, zcols}) + " (or " + shape_str(Shape{N * zcols}) + "), got " + shape_str(in(3)));
        }
        out = x;
        out.back() = N;
        ts.shapes[idx] = out;
        ts.dtypes[idx] = in_dt(0);
        if (shape_numel(out) < 0) fail(g, n, "result shape " + shape_str(out) + " overflows");
        return;
      }
      // matmul_integer
      require_rank_at_least(0, 2, "a");
      require_rank_at_least(1, 2, "b");
      const Shape &a = in(0), &b = in(1);
      for (int k = 0; k < 2; ++k)
        if (!is_quant_storage(in_dt(k)))
          fail(g, n, std::string(k ? "b" : "a") + " must be i8 or u8, got " + dtype_name(in_dt(k)));
      const int64_t M = a[a.size() - 2], K = a.back(), K2 = b[b.size() - 2], N = b.back();
      if (K != K2)
        fail(g, n, "inner dimensions differ: a " + shape_str(a) + " and b " + shape_str(b) + " give K = " +
                       std::to_string(K) + " vs " + std::to_string(K2));
      // Every product is at most 255 * 255 in magnitude: beyond this K an i32 sum could overflow.
      if (K > INT32_MAX / (255 * 255))
        fail(g, n, "K = " + std::to_string(K) + " could overflow the i32 accumulator (at most " +
                       std::to_string(INT32_MAX / (255 * 255)) + ")");
      const bool scaled = n.op == Op::MatmulIntegerScaled;
      if (scaled && b.size() != 2) fail(g, n, "b must be a matrix [K, N], got " + shape_str(b));
      for (int k = 2; k < std::min(4, (int)n.inputs.size()); ++k) {
        const Shape& z = in(k);
        const Shape& m = k == 2 ? a : b;
        const char* what = k == 2 ? "a_zero_point" : "b_zero_point";
        if (in_dt(k) != in_dt(k - 2))
          fail(g, n, std::string(what) + " is " + dtype_name(in_dt(k)) + "; it must be " + dtype_name(in_dt(k - 2)) + " like " + (k == 2 ? "a" : "b"));
        Shape full = m;  // [..., M, 1] for a, [..., 1, N] for b
        full[k == 2 ? m.size() - 1 : m.size() - 2] = 1;
        const int64_t vec = k == 2 ? M : N;
        const bool ok = (shape_numel(z) == 1 && z.size() <= 1) || (z.size() == 1 && z[0] == vec) || z == full;
        if (!ok)
          fail(g, n, std::string(what) + " has shape " + shape_str(z) + "; it must be a scalar, [" + std::to_string(vec) +
                         "] or " + shape_str(full) + (k == 2 ? " (per row of a)" : " (per column of b)"));
      }
      Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
      out = broadcast_shapes(ba, bb, n, g);
      out.push_back(M);
      out.push_back(N);
      ts.shapes[idx] = out;
      ts.dtypes[idx] = DType::i32;
      if (scaled) {
        if (in_dt(4) != DType::f32) fail(g, n, std::string("scale must be f32, got ") + dtype_name(in_dt(4)));
        if (!(shape_numel(in(4)) == 1 && in(4).size() <= 1) && in(4) != Shape{N})
          fail(g, n, "scale has shape " + shape_str(in(4)) + "; it must be a scalar or [" + std::to_string(N) + "]");
        if (n.inputs.size() == 6 && (in_dt(5) != DType::f32 || in(5) != Shape{N}))
          fail(g, n, "bias must be f32 [" + std::to_string(N) + "], got " + dtype_name(in_dt(5)) + " " + shape_str(in(5)));
        ts.dtypes[idx] = DType::f32;
      }
      if (shape_numel(out) < 0) fail(g, n, "result shape " + shape_str(out) + " overflows");
      return;
    }
    case Category::Spatial: {
      std::vector<Shape> ins;
      // max_pool2d also selects among i8/u8 values (ONNX MaxPool on int8/uint8): exact, kept in their dtype
      const bool byte_pool = n.op == Op::MaxPool2d && is_quant_storage(in_dt(0));
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        if (!is_float(in_dt((int)k)) && !byte_pool)
          fail(g, n, "input " + std::to_string(k) + " must be a float tensor, got " + dtype_name(in_dt((int)k)));
        ins.push_back(in((int)k));
      }
      out = infer_spatial(n, ins, node_ref(g, n));
      if (byte_pool) dt = in_dt(0);
      break;
    }
  }
  // Half precision (docs/graph-format.md, compute rules): an op that computes a float result
  // gives its float operands' common dtype: all f16 -> f16, all bf16 -> bf16; any f32, or f16
  // mixed with bf16, -> f32; f64 with any other float -> f64. Integer and bool operands (indices, offsets, masks) and
  // attention's mask do not count; cast and the integer-closed elementwise ops keep theirs.
  if (dt == DType::f32 && n.op != Op::Cast) {
    std::optional<DType> common;
    bool mixed = false;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (info.category == Category::Attention && k == 3) continue;
      const DType t = in_dt((int)k);
      if (!is_float(t)) continue;
      if (!common) common = t;
      else if (*common != t) mixed = true;
    }
    if (common && !mixed) dt = *common;
    if (mixed)  // f64 with any other float: f64 (widening is exact)
      for (size_t k = 0; k < n.inputs.size(); ++k)
        if (!(info.category == Category::Attention && k == 3) && in_dt((int)k) == DType::f64) dt = DType::f64;
  }
  ts.shapes[idx] = out;
  ts.dtypes[idx] = dt;
  if (shape_numel(out) < 0) fail(g, n, "result shape " + shape_str(out) + " overflows");
  check_byte_size(g, n, out, dt);
  if (n.has_decl_shape) {
    Shape decl;
    for (const auto& d : n.decl_shape) decl.push_back(d.value);
    if (decl != out) fail(g, n, "declared shape " + shape_str(decl) + " differs from the inferred " + shape_str(out));
  }
}

TypedShapes infer_shapes(const Graph& g, const std::map<std::string, Shape>& input_shapes,
                         const std::map<std::string, Shape>& param_shapes) {
  TypedShapes ts;
  ts.shapes.resize(g.nodes.size());
  ts.dtypes.resize(g.nodes.size());
  for (int i = 0; i < (int)g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op == Op::Input) {
      auto it = input_shapes.find(n.id);
      if (it == input_shapes.end()) fail(g, n, "no value given for this input (use --input " + n.id + "=SPEC)");
      const Shape& s = it->second;
      if (s.size() != n.decl_shape.size())
        fail(g, n, "expects rank " + std::to_string(n.decl_shape.size()) + ", got a tensor of shape " + shape_str(s));
      for (size_t k = 0; k < s.size(); ++k) {
        const Dim& d = n.decl_shape[k];
        if (d.symbol.empty()) {
          if (d.value != s[k]) {
            std::string decl;
            for (auto& dd : n.decl_shape) decl += (decl.empty() ? "" : ", ") + (dd.symbol.empty() ? std::to_string(dd.value) : dd.symbol);
            fail(g, n, "expects shape [" + decl + "], got " + shape_str(s));
          }
        } else {
          auto [it2, fresh] = ts.symbols.emplace(d.symbol, s[k]);
          if (!fresh && it2->second != s[k])
            fail(g, n, "dimension '" + d.symbol + "' is " + std::to_string(s[k]) + " here but was bound to " + std::to_string(it2->second) + " by an earlier input");
        }
      }
      ts.shapes[i] = s;
      ts.dtypes[i] = n.dtype;
      check_byte_size(g, n, s, n.dtype);
    } else if (n.op == Op::Param || n.op == Op::Constant) {
      Shape s;
      for (auto& d : n.decl_shape) s.push_back(d.value);
      ts.shapes[i] = s;
      ts.dtypes[i] = n.dtype;
      check_byte_size(g, n, s, n.dtype);
    } else {
      infer_node(g, i, ts);
    }
  }
  return ts;
}

double node_flops(const Graph& g, int idx, const TypedShapes& ts) {
  const Node& n = g.nodes[idx];
  double out = (double)shape_numel(ts.shapes[idx]);
  switch (op_info(n.op).category) {
    case Category::Leaf: case Category::Shape: case Category::Gather: case Category::Control: return 0;
    case Category::Index: return n.op == Op::CumSum || n.op == Op::Where ? out : 0;
    case Category::Binary: case Category::Unary: return out;
    case Category::Reduce: return (double)shape_numel(ts.shapes[n.inputs[0]]);
    case Category::Row: return 5 * out;
    case Category::Rope: return 3 * out;
    case Category::Matmul: {
      const Shape& a = ts.shapes[n.inputs[0]];
      double K = (double)(n.op == Op::Matmul && n.attrs.b("transpose_a") ? a[a.size() - 2] : a.back());
      return 2 * out * K;
    }
    case Category::Quant:
      if (n.op == Op::MatmulInteger || n.op == Op::MatmulNbits || n.op == Op::MatmulIntegerScaled) return 2 * out * (double)ts.shapes[n.inputs[0]].back();
      if (n.op == Op::Conv2dIntegerScaled) {
        const Shape& wq = ts.shapes[n.inputs[1]];
        return 2 * out * (double)(wq[1] * wq[2] * wq[3]);
      }
      return 2 * out;
    case Category::Spatial: {
      std::vector<Shape> ins;
      for (int i : n.inputs) ins.push_back(ts.shapes[i]);
      return spatial_flops(n, ins, ts.shapes[idx]);
    }
    case Category::Attention: {
      if (n.attrs.has("views")) {
        std::string err;
        const AttentionViews av = attention_views(n.attrs, &err);
        if (!err.empty()) return 0;
        return (double)av.B * av.H * av.Sq * av.Sk * (2.0 * av.D + 2.0 * av.Dv);
      }
      const Shape &q = ts.shapes[n.inputs[0]], &k = ts.shapes[n.inputs[1]];
      double Sk = (double)k[k.size() - 2], D = (double)q.back();
      double rows = (double)shape_numel(q) / D;
      return rows * Sk * (2 * D + 2 * (double)ts.shapes[idx].back());
    }
  }
  return 0;
}

}  // namespace rlx::ir
