#pragma once
// `rlx run|compare|bench|inspect|convert` on ONNX files: the model is parsed once, inputs
// are read (their shapes bind the symbolic dims), then the model is specialised for those
// shapes into an rlx graph whose params are the model's initializers.
#include <memory>
#include <string>
#include <vector>

#include "onnx/model.h"
#include "runtime/runner.h"

namespace rlx {

// True when `path` holds an ONNX model (by content; the extension alone is not enough).
bool is_onnx_file(const std::string& path);
// Splits NAME=SPEC where NAME is one of `names` (the longest that matches, so names and SPECs
// that contain '=' split right); otherwise at the first '='.
std::pair<std::string, std::string> split_named_assignment(const std::string& s, const std::string& flag,
                                                           const std::vector<std::string>& names);
Loaded load_onnx_binding(const Binding& b);
// `rlx convert`: specialise for --dim/--input shapes and write graph JSON (+ safetensors).
void convert_onnx(const Binding& b, const std::string& graph_out, const std::string& params_out);
// The specialised graph of an ONNX file for `rlx inspect` (symbolic dims from --dim).
std::shared_ptr<ir::Graph> onnx_graph_for(const std::string& path, const std::vector<std::string>& dims);
// `rlx onnx-ops`: the importer's operator table, as Markdown or JSON.
std::string onnx_ops_text(bool json);

}  // namespace rlx
