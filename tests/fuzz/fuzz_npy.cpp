// libFuzzer harness: the .npy reader over bytes in memory.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"
#include "io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rlx::fuzz::expect_only_rlx_errors("fuzz_npy", [&] {
    rlx::Tensor t = rlx::io::parse_npy(data, size, "fuzz.npy");
    // Touch every value so a wrong element count shows up under ASan.
    volatile float sink = 0;
    for (int64_t i = 0; i < t.numel(); ++i) sink = sink + t.data()[i];
    // Round trip: what we read must encode and read back.
    std::vector<uint8_t> again = rlx::io::encode_npy(t);
    rlx::Tensor u = rlx::io::parse_npy(again.data(), again.size(), "fuzz.npy (re-encoded)");
    if (u.shape() != t.shape()) __builtin_trap();
  });
  return 0;
}
