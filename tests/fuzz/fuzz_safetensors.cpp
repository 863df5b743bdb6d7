// libFuzzer harness: the safetensors reader. from_memory validates the header;
// then get() on every tensor (which reads its data), and a lookup of a missing name.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "fuzz_common.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size heap copy, so ASan sees any read past the end.
  auto bytes = std::make_shared<const std::vector<uint8_t>>(data, data + size);
  rlx::fuzz::expect_only_rlx_errors("fuzz_safetensors", [&] {
    auto f = rlx::io::SafetensorsFile::from_memory(bytes, "fuzz.safetensors");
    volatile float sink = 0;
    for (const auto& name : f.names()) {
      const rlx::io::TensorInfo& info = f.info(name);
      rlx::Tensor t = f.get(name);
      if (t.shape() != info.shape) __builtin_trap();
      for (int64_t i = 0; i < t.numel(); ++i) sink = sink + t.data()[i];
    }
    (void)f.metadata();
    rlx::fuzz::expect_only_rlx_errors("fuzz_safetensors(missing name)", [&] { (void)f.get("\x01no such tensor"); });
  });
  return 0;
}
