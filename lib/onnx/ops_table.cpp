// The importer's operator table: which ONNX operators map onto which registry ops. docs/onnx.md
// is generated from this table (`rlx onnx-ops --markdown`), and the node-test driver reads it to
// tell supported cases from skipped ones. A row's `needs` lists the registry ops its mapping
// uses that this build does not have (their nodes are refused with exit 2 until they land).
#include "ir/op_registry.h"
#include "onnx/model.h"

namespace rlx::onnx {

std::vector<OpSupport> supported_ops() {
  struct Row { const char* op; const char* maps_to; const char* required; const char* notes; };
  // `required`: registry ops without which the mapping cannot run (space separated).
  static const Row rows[] = {
      {"Add", "add", "add", "folded on the host when both inputs are known"},
      {"Sub", "sub", "sub", "folded on the host when both inputs are known"},
      {"Mul", "mul", "mul", "folded on the host when both inputs are known"},
      {"Div", "div (+ cast for integers: truncation)", "div", "folded on the host when both inputs are known"},
      {"Pow", "pow", "pow", ""},
      {"Neg", "neg", "neg", ""},
      {"Exp", "exp", "exp", ""},
      {"Log", "log", "log", ""},
      {"Sqrt", "sqrt", "sqrt", ""},
      {"Reciprocal", "div", "div", ""},
      {"Tanh", "tanh", "tanh", ""},
      {"Erf", "erf", "erf", ""},
      {"Sigmoid", "sigmoid", "sigmoid", ""},
      {"Relu", "relu", "relu", ""},
      {"LeakyRelu", "mul, maximum", "mul maximum", ""},
      {"Elu", "relu, minimum, exp, sub, mul, add", "relu minimum exp", ""},
      {"Softplus", "softplus (or relu/abs/exp/log decomposition)", "relu abs exp log", "stable form max(x,0)+log1p(exp(-|x|))"},
      {"HardSigmoid", "mul, add, maximum, minimum", "maximum minimum", ""},
      {"HardSwish", "mul, add, maximum, minimum", "maximum minimum", ""},
      {"PRelu", "less, mul, where", "less where", "slope broadcasts to the input"},
      {"Selu", "minimum, exp, relu, mul, add", "minimum exp relu", ""},
      {"Celu", "minimum, div, exp, relu, mul, add", "minimum exp relu", ""},
      {"ThresholdedRelu", "greater, where", "greater where", ""},
      {"Shrink", "less, greater, add, sub, where", "less greater where", ""},
      {"Softsign", "abs, add, div", "abs div", ""},
      {"Abs", "abs", "abs", ""},
      {"Floor", "floor", "floor", ""},
      {"Ceil", "ceil", "ceil", ""},
      {"Round", "round", "round", "half to even"},
      {"Sign", "sign", "sign", ""},
      {"Sin", "sin", "sin", ""},
      {"Cos", "cos", "cos", ""},
      {"Tan", "sin, cos, div", "sin cos div", ""},
      {"Sinh", "exp, neg, sub, mul", "exp", ""},
      {"Cosh", "exp, neg, add, mul", "exp", ""},
      {"Asinh", "sign(x) log(|x| + sqrt(x^2 + 1))", "sign log sqrt", ""},
      {"Acosh", "log(x + sqrt(x^2 - 1))", "log sqrt", ""},
      {"Atanh", "log((1 + x) / (1 - x)) / 2", "log div", ""},
      {"Max", "maximum (variadic: a chain)", "maximum", ""},
      {"Min", "minimum (variadic: a chain)", "minimum", ""},
      {"Sum", "add (chain)", "add", ""},
      {"Mean", "add (chain), mul", "add mul", ""},
      {"Clip", "maximum, minimum", "maximum minimum", "min/max from attributes (opset < 11) or inputs"},
      {"Where", "where", "where", "folded when all inputs are known"},
      {"Equal", "equal", "equal", "folded when both inputs are known"},
      {"Less", "less", "less", ""},
      {"Greater", "greater", "greater", ""},
      {"LessOrEqual", "less_equal", "less_equal", ""},
      {"GreaterOrEqual", "greater_equal", "greater_equal", ""},
      {"Not", "logical_not", "logical_not", ""},
      {"IsNaN", "equal, logical_not", "equal logical_not", "x != x"},
      {"IsInf", "abs, greater, less, logical_and", "abs greater logical_and", "|x| above the largest finite value; detect_positive/negative"},
      {"And", "logical_and", "logical_and", ""},
      {"Or", "logical_or", "logical_or", ""},
      {"Xor", "logical_xor", "logical_xor", ""},
      {"Mod", "mod", "mod", ""},
      {"Cast", "cast", "cast", "to float, float16, bfloat16, int32, int64 or bool"},
      {"CastLike", "cast", "cast", ""},
      {"ReduceSum", "sum", "sum", "axes attribute (< 13) or input"},
      {"ReduceMean", "mean", "mean", ""},
      {"ReduceMax", "max", "max", ""},
      {"ReduceMin", "min", "min", ""},
      {"ReduceProd", "prod", "prod", ""},
      {"ReduceSumSquare", "square, sum", "square sum", ""},
      {"ReduceL1", "abs, sum", "abs sum", ""},
      {"ReduceL2", "square, sum, sqrt", "square sum sqrt", ""},
      {"ReduceLogSumExp", "max, sub, exp, sum, log, add", "max exp sum log", ""},
      {"ReduceLogSum", "sum, log", "sum log", ""},
      {"ArgMax", "argmax", "argmax", ""},
      {"ArgMin", "argmin", "argmin", ""},
      {"Hardmax", "argmax, equal, cast", "argmax equal cast", "opset < 13: over the flattened trailing axes"},
      {"OneHot", "equal, where", "equal where", "depth must be known; negative indices wrap"},
      {"CumSum", "cumsum", "cumsum", "axis must be a constant"},
      {"TopK", "topk (values and indices)", "topk", "k must be a constant"},
      {"MatMul", "matmul (1-D operands reshaped)", "matmul", ""},
      {"Einsum", "sum, transpose, reshape, matmul", "sum transpose matmul", "operands contracted pairwise; ellipsis and implicit output; a repeated index within one operand (a diagonal) is refused"},
      {"RNN", "unrolled: linear, add, activations, concat", "linear concat", "sequence_lens must be the full length; activations Sigmoid, Tanh, Relu, HardSigmoid, LeakyRelu, Affine, ScaledTanh, Softsign, Softplus"},
      {"GRU", "unrolled: linear, narrow, add, mul, sub, activations, concat", "linear narrow concat", "linear_before_reset 0 or 1; as RNN"},
      {"LSTM", "unrolled: linear, narrow, add, mul, activations, concat", "linear narrow concat", "peepholes, input_forget, clip; as RNN"},
      {"Gemm", "linear, or matmul + mul + add", "matmul", ""},
      {"Softmax", "softmax (opset < 13: over the flattened trailing axes)", "softmax", ""},
      {"LogSoftmax", "max, sub, exp, sum, log", "max sub exp sum log", ""},
      {"NegativeLogLikelihoodLoss", "gather_elements, gather, where, neg, sum/mean", "gather_elements where sum", "weights, ignore_index, reductions none/sum/mean"},
      {"SoftmaxCrossEntropyLoss", "log-softmax over axis 1, then as NegativeLogLikelihoodLoss", "gather_elements where sum exp log", "log_prob output too"},
      {"LayerNormalization", "layer_norm (other axes: reshape + layer_norm + mul/add)", "layer_norm", "Mean/InvStdDev outputs: decomposed (mean, sub, square, sqrt, div)"},
      {"BatchNormalization", "mul, add (scale and shift folded per channel)", "mul add", "inference only"},
      {"InstanceNormalization", "reshape, layer_norm, mul, add", "layer_norm", ""},
      {"MeanVarianceNormalization", "mean, square, sub, sqrt, add, div", "mean square sqrt", "as ONNX's function body (1e-9 added to the deviation)"},
      {"Gather", "narrow (one constant index), embedding (axis 0 of a 2-D table) or gather", "", "folded when data and indices are known"},
      {"GatherElements", "gather_elements", "gather_elements", ""},
      {"ReverseSequence", "less, sub, where, broadcast_to, gather_elements", "where gather_elements", "time and batch axes 0 and 1; lengths at run time"},
      {"GatherND", "gather (per coordinate, then of rows)", "gather", "batch_dims; coordinates range-checked and wrapped as Gather's"},
      {"ScatterElements", "gather, equal, argmax, gather_elements, where (add/mul: where, sum/prod)", "equal argmax gather_elements where", "reductions none (the last entry wins), add, mul; indices must span data across the axis"},
      {"Scatter", "as ScatterElements", "equal argmax gather_elements where", "opsets 9 and 10"},
      {"ScatterND", "folded; at run time: gather, equal, argmax, max, where (add/mul: where, sum/prod)", "equal argmax where", "folded when data, indices and updates are known (reductions none, add, mul, max, min); at run time none (the last update of a row wins), add, mul"},
      {"Reshape", "reshape", "reshape", "0 and -1 resolved; allowzero; the shape must be known (constant, folded, or a small input bound by value)"},
      {"Transpose", "transpose", "transpose", ""},
      {"Concat", "concat", "concat", "folded when all inputs are known"},
      {"Slice", "narrow (unit steps) or slice", "narrow", "starts/ends/axes/steps must be constants"},
      {"Split", "narrow", "narrow", ""},
      {"Squeeze", "reshape", "reshape", ""},
      {"Unsqueeze", "reshape", "reshape", ""},
      {"Flatten", "reshape", "reshape", ""},
      {"Expand", "broadcast_to", "broadcast_to", ""},
      {"Tile", "reshape, broadcast_to, reshape", "broadcast_to", ""},
      {"DepthToSpace", "reshape, transpose, reshape", "transpose", "modes DCR and CRD"},
      {"SpaceToDepth", "reshape, transpose, reshape", "transpose", ""},
      {"Pad", "pad", "pad", "modes constant, reflect, edge"},
      {"Shape", "folded", "", "start/end (opset 15)"},
      {"Size", "folded", "", ""},
      {"ConstantOfShape", "folded", "", ""},
      {"EyeLike", "folded", "", "depends on the input's shape only"},
      {"HannWindow", "folded", "", "the size must be known (a constant, or an input bound by value)"},
      {"HammingWindow", "folded", "", "as HannWindow"},
      {"BlackmanWindow", "folded", "", "as HannWindow"},
      {"Range", "folded", "", "inputs must be known"},
      {"Trilu", "trilu", "trilu", ""},
      {"Identity", "alias", "", ""},
      {"Dropout", "alias (inference)", "", "mask output: all true; training_mode = true refused unless ratio = 0"},
      {"Constant", "folded", "", ""},
      {"Conv", "conv2d (1-D as 2-D)", "conv2d", "groups, dilations, pads, strides, auto_pad"},
      {"ConvTranspose", "conv_transpose2d", "conv_transpose2d", "output_shape and auto_pad: pads generated as the spec says"},
      {"MaxPool", "max_pool2d", "max_pool2d", "Indices output refused"},
      {"AveragePool", "avg_pool2d", "avg_pool2d", ""},
      {"GlobalAveragePool", "mean over the spatial axes", "mean", ""},
      {"GlobalMaxPool", "max over the spatial axes", "max", ""},
      {"Resize", "resize", "resize", "modes nearest and linear"},
      {"GridSample", "gather_elements per neighbour, weights, where", "gather_elements where floor round", "modes bilinear and nearest; padding zeros and border; align_corners"},
      {"Upsample", "resize", "resize", "opsets 7 to 9: scales from the attribute or input; modes nearest and linear"},
      {"LRN", "square, avg_pool2d, mul, add, pow, div", "square avg_pool2d pow", "the channel window as a zero-padded average pool"},
  };
  std::vector<OpSupport> r;
  for (const auto& row : rows) {
    OpSupport s{row.op, row.maps_to, {}, row.notes};
    std::string req = row.required, w;
    for (size_t i = 0; i <= req.size(); ++i) {
      if (i == req.size() || req[i] == ' ') {
        if (!w.empty() && !ir::op_from_name(w)) s.needs.push_back(w);
        w.clear();
      } else {
        w += req[i];
      }
    }
    r.push_back(std::move(s));
  }
  return r;
}

}  // namespace rlx::onnx
