#pragma once
// Tensor SPECs used by --input and --expect:
//   @file.npy | file.npy                 a .npy file
//   file.safetensors:NAME                one tensor of a safetensors file
//   2x3xf32=1,2,3,4,5,6                  inline values (dims 'x'-separated, then dtype)
//   f32=3.5 | i32=7                      inline scalar (rank 0)
//   random | random:SEED                 seeded uniform values in [-1, 1) with the
//                                        node's shape (integers: [0, high))
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace rlx::io {

struct TensorSpec {
  enum Kind { File, SafetensorsTensor, Inline, Random } kind = File;
  std::string text;    // the spec as given (for messages)
  std::string path;    // File, SafetensorsTensor
  std::string tensor;  // SafetensorsTensor
  Shape shape;         // Inline
  DType dtype = DType::f32;  // Inline
  std::vector<double> values;  // Inline
  std::vector<int64_t> ints;   // Inline, integer and bool dtypes: the exact values
  uint64_t seed = 0;           // Random
};

// Throws InputError with an example of the accepted forms on a malformed spec.
TensorSpec parse_tensor_spec(const std::string& text);

// Produces the tensor. For Random, `shape`/`dtype` give what to generate and
// `int_high` the exclusive upper bound for integer dtypes.
Tensor load_tensor_spec(const TensorSpec& spec, const Shape& shape = {}, DType dtype = DType::f32,
                        int64_t int_high = 16);

// Deterministic pseudo-random tensors (same values on every platform).
// Uniform in [lo, hi) for floats; integers uniform in [0, int_high).
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, float lo = -1.f, float hi = 1.f,
                     int64_t int_high = 16);

}  // namespace rlx::io
