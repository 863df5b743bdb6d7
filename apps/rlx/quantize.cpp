// rlx quantize: flags and output only; the work is lib/runtime/quantize.cpp.
#include "quantize.h"

#include <iostream>

#include "core/error.h"
#include "runtime/session.h"

namespace rlx {

void add_quantize_options(CLI::App* app, QuantizeFlags& f) {
  QuantizeRequest& r = f.req;
  app->add_option("model", r.binding.graph, "Graph file (rlx.graph JSON, with --params) or ONNX model")->required();
  app->add_option("--params,-p", r.binding.params, "Parameter file of a JSON graph (.safetensors, NAME.npy or a directory; repeatable)")
      ->allow_extra_args(false);
  app->add_option("--out,-o", r.out, "Quantized graph to write (.json)")->required();
  app->add_option("--params-out", r.params_out, "Its weights (.safetensors; default: OUT with .json replaced by .safetensors)");
  app->add_option("--format,-f", f.format, "int8 (per output channel, activations quantized at run time) or q4 (4-bit blocks, matmul_nbits)")
      ->required();
  app->add_option("--block-size", r.options.block_size, "q4: K values per block, a power of 2 >= 16 that divides each weight's K")
      ->capture_default_str();
  app->add_flag("--symmetric", f.symmetric, "q4: blocks scaled by max|w| / 7, zero point 8 (no zero points stored)");
  app->add_flag("--asymmetric", f.asymmetric, "q4: blocks from min to max with a zero point each (the default); int8 is always symmetric");
  app->add_option("--min-size", r.options.min_size, "Weights with fewer elements stay f32")->capture_default_str();
  app->add_option("--exclude", r.options.exclude, "A weight (node id or parameter name) that stays f32 (repeatable)")->allow_extra_args(false);
  app->add_option("--input,-i", r.binding.inputs,
                  "Input ID=SPEC the error is measured on (as rlx run; repeatable). Inputs not given get random values")
      ->allow_extra_args(false);
  app->add_option("--dim", r.binding.dims, "Size of a symbolic dimension for random inputs, NAME=SIZE")->allow_extra_args(false);
  app->add_option("--seed", r.seed, "Seed of the random inputs")->capture_default_str();
  app->add_option("--mode,-m", f.mode, "Mode both graphs run in for the error report (default: $RLX_MLX_MODE or lazy)");
  app->add_option("--backend,-b", r.backend, "Executor for the error report: cpu or vulkan")->capture_default_str();
  app->add_flag("--json", f.json, "Print the report as one JSON document");
  app->footer(
      "Examples:\n"
      "  rlx quantize graphs/tiny_llama.json -p graphs/tiny_llama.safetensors --format int8 --out tl_int8.json \\\n"
      "      --input tokens=@graphs/tiny_llama.inputs/tokens.npy\n"
      "  rlx quantize graphs/mlp.json -p graphs/mlp.safetensors --format q4 --block-size 16 --min-size 0 \\\n"
      "      --out mlp_q4.json --dim batch=4 --json && rlx run mlp_q4.json -p mlp_q4.safetensors -i x=random:1 --dim batch=4\n"
      "Every f32 weight matrix feeding a matmul or linear is quantized; biases, norms, embeddings (gathers)\n"
      "and weights below --min-size stay f32. The report gives, per output, the max abs error, the relative\n"
      "RMS error and the argmax agreement against the f32 graph, and the bytes of the weights before and\n"
      "after. An ONNX model is written for the input shapes it is measured on (as rlx convert). See\n"
      "docs/quantize.md.");
}

int cmd_quantize(QuantizeFlags& f) {
  QuantizeRequest& r = f.req;
  if (f.format == "int8") r.options.format = passes::QuantFormat::Int8;
  else if (f.format == "q4") r.options.format = passes::QuantFormat::Q4;
  else throw InputError("--format " + f.format + ": unknown format; valid: int8, q4");
  if (f.symmetric && f.asymmetric) throw InputError("--symmetric and --asymmetric: give one of them");
  if (r.options.format == passes::QuantFormat::Int8) {
    if (f.asymmetric) throw InputError("--asymmetric: int8 weights are always symmetric (zero point 0, per output channel); it applies to --format q4");
  }
  r.options.symmetric = f.symmetric;
  r.mode = f.mode.empty() ? mode_name(mode_from_env()) : f.mode;
  if (r.backend != "cpu" && r.backend != "vulkan") throw InputError("--backend " + r.backend + ": valid: cpu, vulkan");
  QuantizeReport rep = run_quantize(r);
  if (f.json) std::cout << rep.json().dump(2) << "\n";
  else std::cout << rep.text();
  return 0;
}

}  // namespace rlx
