#pragma once
// NumPy .npy files (format 1.0/2.0/3.0): f32 '<f4', f16 '<f2', i32 '<i4', i64 '<i8',
// bool '|b1', read in their dtype (memory-mapped, zero copy, when read from a file).
// NumPy has no bfloat16: a bf16 tensor is written as '<f4' (exact widening). C order only.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace rlx::io {

// Reads a .npy file. Throws InputError naming the file for: missing file, bad
// magic, truncated header or data, unsupported dtype, Fortran order, object arrays,
// element counts that overflow or exceed the file size.
Tensor read_npy(const std::string& path);
// Parses .npy bytes held in memory (`what` names the source in messages). With `keep`
// (the owner of `data`), the tensor borrows the data bytes where aligned, else copies.
Tensor parse_npy(const uint8_t* data, size_t size, const std::string& what, std::shared_ptr<const void> keep = nullptr);
// Encodes a tensor as .npy bytes in its dtype (f32/f16/i32/i64/bool; bf16 is written as
// '<f4', widened exactly, since NumPy has no bfloat16).
std::vector<uint8_t> encode_npy(const Tensor& t);
// Writes atomically (temporary file + rename).
void write_npy(const std::string& path, const Tensor& t);

}  // namespace rlx::io
