#pragma once
#include <string>
#include <vector>

namespace rlx {
// `rlx inspect`: nodes by op, parameters (count, bytes), FLOPs per run, output shapes; or DOT;
// or (json) one JSON object. An ONNX model whose symbolic dimensions are not all given with
// --dim is summarised from the model itself (symbolic input and declared output shapes).
std::string inspect_text(const std::string& graph_path, const std::vector<std::string>& dims, bool dot, bool json = false);
// `rlx devices`: every device of the named backend(s) ("cpu", "vulkan", "all").
std::string devices_text(const std::string& backend);
}  // namespace rlx
