// libFuzzer harness: the inline tensor SPEC parser (--input / --expect values).
// parse_tensor_spec on the text; then load_tensor_spec for inline and random
// specs (random with a small shape and a dtype picked from the input). File
// specs are parsed but never opened: the fuzzer must not read arbitrary paths.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "io/spec.h"

using namespace rlx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_only_rlx_errors("fuzz_spec", [&] {
    io::TensorSpec spec = io::parse_tensor_spec(text);
    if (spec.kind == io::TensorSpec::Inline) {
      Tensor t = io::load_tensor_spec(spec);
      if (t.numel() != (int64_t)spec.values.size()) __builtin_trap();
    } else if (spec.kind == io::TensorSpec::Random) {
      static const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::boolean};
      const DType dt = kDtypes[(size ? data[size - 1] : 0) % 6];
      const int64_t high = size ? (int64_t)(data[0] % 40) - 4 : 16;  // includes invalid bounds <= 0
      Tensor t = io::load_tensor_spec(spec, Shape{2, 3}, dt, high);
      if (t.numel() != 6) __builtin_trap();
    }
  });
  return 0;
}
