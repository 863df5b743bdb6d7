#pragma once
// `rlx quantize` as a library (docs/quantize.md): load a graph or ONNX model with its weights,
// rewrite its f32 weight matrices (passes/quantize_weights.h), run the f32 and the quantized
// graph on the same inputs, report the output error and the bytes, write the quantized graph
// and its weights (atomically, both or neither).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "passes/quantize_weights.h"
#include "runtime/runner.h"

namespace rlx {

struct QuantizeRequest {
  Binding binding;  // the model, --params, --input (missing inputs get random values), --dim
  std::string out, params_out;  // params_out "" = OUT with .json replaced by .safetensors
  passes::QuantizeOptions options;
  std::string mode = "lazy", backend = "cpu";
  uint64_t seed = 0;  // for inputs given no --input
};

struct OutputError {
  std::string name;
  Shape shape;
  double max_abs = 0, rel_rms = 0;  // rel_rms = ||q - f||_2 / ||f||_2 (-1 when ||f|| = 0)
  int64_t rows = 0, argmax_agree = 0;  // rows over the last axis (when it has >= 2 entries)
};

struct QuantizeReport {
  std::string graph, out, params_out, format, mode, backend;
  std::vector<std::string> random_inputs;  // inputs given random values
  std::vector<passes::WeightReport> weights;
  int64_t bytes_before = 0, bytes_after = 0;  // every weight: params and constants
  std::vector<OutputError> outputs;
  std::string text() const;
  nlohmann::json json() const;
};

QuantizeReport run_quantize(const QuantizeRequest& r);

}  // namespace rlx
