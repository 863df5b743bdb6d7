#pragma once
// `rlx convert` of an rlx JSON graph (an ONNX model: onnx_binding.h): the graph loaded (checked,
// attribute defaults filled in) and written again, with the parameters it reads, by name, in
// one safetensors file. Every dtype is kept as it is: a quantized graph (rlx quantize) stays
// quantized.
#include <string>
#include <vector>

namespace rlx {

void convert_graph(const std::string& graph, const std::vector<std::string>& params, const std::string& graph_out,
                   const std::string& params_out);

}  // namespace rlx
