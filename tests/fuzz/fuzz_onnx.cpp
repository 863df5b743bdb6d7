// libFuzzer harness: the ONNX model parser (protobuf + every hostile-file check) and, when a
// model parses, the importer: specialisation for its declared input shapes with every
// symbolic dimension bound to 2 (shape folding, op mapping, registry shape inference), then
// every initializer decoded to a tensor. External data is refused (no folder: bytes only).
#include "fuzz_onnx_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return rlx::fuzz::onnx_one_input(data, size); }
