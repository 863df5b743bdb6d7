#pragma once
// NumPy .npy files (format 1.0/2.0/3.0): f32, f16, i32, i64, bool (and bf16 via
// the ml_dtypes name "<V2"? no: bf16 is refused in .npy). C order only.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace rlx::io {

// Reads a .npy file. Throws InputError naming the file for: missing file, bad
// magic, truncated header or data, unsupported dtype, Fortran order, object arrays,
// element counts that overflow or exceed the file size.
Tensor read_npy(const std::string& path);
// Parses .npy bytes held in memory (`what` names the source in messages).
Tensor parse_npy(const uint8_t* data, size_t size, const std::string& what);
// Encodes a tensor as .npy bytes in its dtype (f32/f16/i32/i64/bool; bf16 is written as f32).
std::vector<uint8_t> encode_npy(const Tensor& t);
// Writes atomically (temporary file + rename).
void write_npy(const std::string& path, const Tensor& t);

}  // namespace rlx::io
