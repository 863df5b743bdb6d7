#pragma once
// `rlx quantize MODEL --out OUT.json --format int8|q4`: weights to int8 per channel or 4-bit
// blocks, the output error against f32 reported (docs/quantize.md).
#include <CLI/CLI.hpp>
#include <string>

#include "runtime/quantize.h"

namespace rlx {

struct QuantizeFlags {
  QuantizeRequest req;
  std::string format, mode;
  bool symmetric = false, asymmetric = false, json = false;
};

void add_quantize_options(CLI::App* app, QuantizeFlags& f);
int cmd_quantize(QuantizeFlags& f);

}  // namespace rlx
