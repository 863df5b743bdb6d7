#pragma once
// `rlx quantize`'s rewrite (docs/quantize.md): every f32 weight matrix feeding a matmul or linear
// becomes int8 per output channel or 4-bit blocks, stated in the graph with registry ops, so the
// written JSON graph, `rlx run`, `rlx inspect` and `rlx convert` keep it quantized.
//
//   int8  the product of ONNX Runtime's quantize_dynamic, in registry ops: the activation is
//         quantized per tensor to u8 at run time (DynamicQuantizeLinear: min/max, scale, zero
//         point, quantize), the weight is i8 [K, N] with one f32 scale per output channel (zero
//         point 0), then matmul_integer -> cast f32 -> mul(x_scale * w_scale) [-> add(bias)],
//         which compiled mode on the CPU fuses into one exact integer GEMM (matmul_integer_scaled).
//   q4    matmul_nbits (ONNX Runtime's MatMulNBits layout): the weight as u8 [N, K/bs, bs/2],
//         f32 scales [N, K/bs], u8 zero points [N, ceil(K/bs / 2)] when asymmetric; the
//         activation stays f32 [-> add(bias)].
//
// The rules (round half to even everywhere, all arithmetic in f32):
//   int8   per output channel n: s = max|w[:, n]| / 127, q = clamp(rne(w / s), -127, 127)
//          (s = 0: q = 0).
//   q4 asymmetric (default), per block of bs consecutive K values of one output channel:
//          lo = min(min w, 0), hi = max(max w, 0), s = (hi - lo) / 15,
//          zp = clamp(rne(-lo / s), 0, 15), q = clamp(rne(w / s) + zp, 0, 15)  (s = 0: zp = q = 0)
//   q4 symmetric: s = max|w| / 7, q = clamp(rne(w / s), -8, 7) + 8, zero point 8 (the op's
//          default, not written)  (s = 0: q = 8)
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace rlx::passes {

enum class QuantFormat { Int8, Q4 };

struct QuantizeOptions {
  QuantFormat format = QuantFormat::Int8;
  int64_t block_size = 32;  // q4
  bool symmetric = false;   // q4 (int8 is always symmetric)
  int64_t min_size = 4096;  // weights with fewer elements stay f32
  std::vector<std::string> exclude;  // node ids or param names that stay f32
};

// One weight matrix that was quantized, or left f32 with the reason.
struct WeightReport {
  std::string node, param, consumer, consumer_op;
  Shape shape;             // the f32 weight as declared
  std::string layout;      // e.g. "i8 [K, N] + f32 scales [N]"; empty when kept
  std::string kept_why;    // empty when quantized
  int64_t bytes_before = 0, bytes_after = 0;
};

struct QuantizedGraph {
  std::string json;                      // the rewritten graph (rlx.graph v1)
  std::map<std::string, Tensor> params;  // by param name: every param the rewritten graph reads
  std::vector<WeightReport> weights;     // quantized and kept, in graph order
};

// `g` is typed by `ts` (for the activations' ranks); `params` by node id. Throws InputError
// (exit 2) for a bad option, an excluded name that names nothing, a weight whose K the block
// size does not divide, or no weight to quantize.
QuantizedGraph quantize_weights(const ir::Graph& g, const ir::TypedShapes& ts, const std::map<std::string, Tensor>& params,
                                const QuantizeOptions& o);

// The rules above on one matrix given as [N, K] (output channel major).
struct Int8Weight { Tensor q, scale; };                 // q i8 [K, N] (transposed for matmul_integer), scale f32 [N]
Int8Weight quantize_int8_per_channel(const float* w_nk, int64_t N, int64_t K);
struct Q4Weight { Tensor blob, scales, zero_points; };  // zero_points undefined when symmetric
Q4Weight quantize_q4_blocks(const float* w_nk, int64_t N, int64_t K, int64_t block_size, bool symmetric);

}  // namespace rlx::passes
