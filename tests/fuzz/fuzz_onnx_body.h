#pragma once
// The ONNX harness body shared by fuzz_onnx (byte-level mutations) and fuzz_onnx_struct
// (ModelProto-aware mutations): parse, decode every initializer, specialise.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "fuzz_common.h"
#include "onnx/model.h"

namespace rlx::fuzz {

inline int onnx_one_input(const uint8_t* data, size_t size) {
  onnx::Limits lim;
  lim.max_nodes = 4096;
  lim.max_tensor_elements = int64_t(1) << 24;  // keep a fuzz run's allocations small
  lim.max_folded_elements = int64_t(1) << 16;
  std::shared_ptr<onnx::Model> m;
  expect_only_rlx_errors("fuzz_onnx(parse)", [&] { m = onnx::Model::parse(data, size, "fuzz.onnx", "", lim); });
  if (!m) return 0;
  expect_only_rlx_errors("fuzz_onnx(tensors)", [&] {
    for (const auto& [name, td] : m->initializers()) {
      Tensor t = onnx::to_tensor(*td, "fuzz.onnx: " + name);
      volatile double sink = 0;
      for (int64_t i = 0; i < t.numel(); ++i) sink = sink + t.at(i);
    }
  });
  expect_only_rlx_errors("fuzz_onnx(specialize)", [&] {
    std::map<std::string, Shape> shapes;
    std::map<std::string, int64_t> dims;
    for (const auto& vi : m->inputs()) {
      if (m->is_default_input(vi.name)) continue;
      Shape s;
      for (const auto& d : vi.dims) {
        if (!d.symbol.empty()) dims[d.symbol] = 2;
        s.push_back(d.symbol.empty() ? d.value : 2);
      }
      int64_t n = 1;
      for (auto d : s) n = (d && n > (int64_t(1) << 24) / d) ? (int64_t(1) << 25) : n * d;
      if (n > (int64_t(1) << 24)) return;  // an input the harness will not describe
      shapes[vi.name] = s;
    }
    auto sp = m->specialize(shapes, dims);
    (void)sp->graph->nodes.size();
  });
  return 0;
}

}  // namespace rlx::fuzz
