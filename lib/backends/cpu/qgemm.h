#pragma once
// rlx's exact 8-bit integer GEMM (matmul_integer's fast path, compiled mode's integer products):
//   C[m, n] = sum_k (A[m, k] - za[m]) * (B[k, n] - zb[n])   in int32, EXACT on every path,
// A and B each u8 or i8, zero points scalar, per row of A / per column of B.
//
// Every path computes the product of u8 activations and s8 weights (MLAS's arrangement): an
// i8 A is shifted to u8 (a ^ 0x80 = a + 128, with za + 128), a u8 B to s8 (b ^ 0x80 = b - 128,
// with zb - 128). The zero points never enter the inner loop:
//   sum (a - za)(b - zb) = sum a*b - zb * rowsum(a) - za * colsum(b) + K * za * zb,
// colsum(b) made once while B is packed, rowsum(a) while A's rows are copied (padded to a
// multiple of 4). All of it in wrapping int32 arithmetic: every term is exact modulo 2^32 and
// the result fits int32 (|terms| <= 255 * 255 and K <= 33,025, the registry's limit), so it
// is the exact result.
// Paths, chosen once from cpuid (RLX_CPU_ISA caps it: base, avx2, avxvnni, avx512vnni):
//   avx512vnni  vpdpbusd zmm: 4 u8*s8 products summed into each int32 lane, wrapping, never
//               saturating (unlike vpmaddubsw, whose int16 pair sums saturate: not used);
//   avxvnni     the same instruction on ymm (VEX encoding, AVX-VNNI CPUs without AVX-512);
//   avx2        bytes widened to int16, vpmaddwd: pair sums <= 2 * 255 * 128, exact in int32;
//   base        plain loops (the reference the tests compare every path with, bit for bit).
// B is packed once ([panel of 16 columns][k / 4][16][4] s8, zero-padded) for every path.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/gemm.h"

namespace rlx::cpu {

enum class QIsa { Base = 0, Avx2 = 1, AvxVnni = 2, Avx512Vnni = 3 };
QIsa qgemm_isa();                 // the CPU's best, capped by RLX_CPU_ISA
bool qisa_supported(QIsa isa);    // the CPU runs it (tests force each supported path)
const char* qisa_name(QIsa isa);  // "avx512vnni", "avxvnni", "avx2", "base"

struct PackedQB {
  int64_t K = 0, N = 0, K4 = 0, panels = 0;
  bool b_signed = false;
  std::vector<int8_t> data;     // [panels][K4][16][4]: b' = b (i8) or b - 128 (u8), 0 past K and N
  std::vector<int32_t> colsum;  // [panels * 16]: sum over k of b'
  int bmin = 0, bmax = 0;       // range of the original values (for plan notes)
  size_t bytes() const { return data.size() + colsum.size() * 4; }
};

// Packs B (K x N, row-major with leading dimension ldb; bytes of u8 or i8 values).
std::shared_ptr<const PackedQB> pack_qb(const uint8_t* B, bool b_signed, int64_t K, int64_t N, int64_t ldb);
// The same into an existing PackedQB, reusing its buffers (a B packed on every call: no fresh
// pages to fault in each time).
void pack_qb_into(PackedQB& pk, const uint8_t* B, bool b_signed, int64_t K, int64_t N, int64_t ldb,
                  Threads th = Threads::Pool);

// A float epilogue, replacing the int32 result in place (C then holds f32):
//   C = float(acc) * a_scale[m or 0] * b_scale[n or 0] [+ bias[n]]
struct QEpilogue {
  bool to_float = false;
  const float* a_scale = nullptr;  // [1] or [M] (a_scale_per_row)
  bool a_scale_per_row = false;
  const float* b_scale = nullptr;  // [1] or [N] (b_scale_per_col)
  bool b_scale_per_col = false;
  const float* bias = nullptr;     // [N] or null
};

// C[M, N] (ldc) = (A - za)(B - zb) as above. A: M x K bytes with leading dimension lda.
// za: za_per_row ? [M] : [1]; zb: zb_per_col ? [N] : [1]; null means 0.
void qgemm(int64_t M, const uint8_t* A, bool a_signed, int64_t lda, const int32_t* za, bool za_per_row,
           const PackedQB& B, const int32_t* zb, bool zb_per_col, int32_t* C, int64_t ldc, const QEpilogue& ep = {},
           QIsa isa = qgemm_isa(), Threads th = Threads::Pool);

// matmul_nbits (4 bits, ONNX Runtime's layout) for M <= 16 rows of f32 activations: C[M, N] =
// A[M, K] * dequant(B)^T. Each weight byte is read once per group of 4 rows; a block's 4-bit
// values are widened in registers to f32 (q - zero point, exact) and multiplied with the
// activations, and the block's scale is applied once per block to the partial dot product.
// Needs AVX-512 (F/BW) and K a multiple of 16, or for one row (M = 1) AVX2 + FMA and K a multiple
// of a block size that is a multiple of 32; returns false (nothing done) otherwise.
// pk: for M = 1, the weight's PackedNbits4 (below) or null.
struct PackedNbits4;
bool nbits4_small_m(int64_t M, const float* A, int64_t K, const uint8_t* B, const float* scales, const uint8_t* zp,
                    int64_t N, int64_t block_size, float* C, Threads th = Threads::Pool,
                    const PackedNbits4* pk = nullptr);

// The one-row case of nbits4_small_m (blocks of 32, K a multiple of 128) in exact integer
// products (nbits_row1_bfp.cpp): per block of 32 the activations become 24-bit integers times the
// block's unit amax / (127 * 65536) (block floating point with f32's 24-bit significand: each x
// moves by at most 1.8e-7 |x| + 6.0e-8 amax, three f32 roundings of x and half a unit, about f32's
// own rounding of the block's largest value), split into three signed bytes, and the 4-bit values
// are multiplied with them by vpdpbusd, exactly; per 8 values the int32 sum is converted to f32
// once and scaled by weight scale * unit. Not ONNX Runtime's accuracy_level 4 (8-bit activations,
// nbits4_int8): the result stays within f32 rounding of the f32 product. 16 lanes with AVX-512
// VNNI, else 8 with AVX-VNNI's vpdpbusd or AVX2's vpmaddubsw + vpmaddwd (the same integer sums;
// RLX_CPU_ISA caps the choice). Returns false (nothing done) without AVX2 + FMA (or
// RLX_CPU_ISA=base, or RLX_NBITS_F32 set: the f32 kernels then run), for other shapes, or where
// the row holds a NaN or an infinity or a block whose values are all below 2^-100 but not all 0.
// pk: the weight's PackedNbits4 (below) or null.
bool nbits4_row1_bfp(const float* A, int64_t K, const uint8_t* B, const float* scales, const uint8_t* zp, int64_t N,
                     float* C, Threads th = Threads::Pool, const PackedNbits4* pk = nullptr);

// A constant 4-bit weight (blocks of 32, K a multiple of 128) laid out for the one-row kernel:
// ONNX's layout keeps each column's K / 2 bytes together, so the W columns taken at once are W
// short streams (1-3 KiB each for K 2048-5632), too short for the hardware prefetchers; here each
// group of W columns is one stream, [N / W][K / 128][W][64] bytes, and its scales another,
// [N / W][K / 128][W][4] f32 (zero points stay in ONNX's layout: read once per column). W is the
// columns the kernel takes at once: 8 with AVX-512 VNNI, 4 on the 8-lane (AVX-VNNI, AVX2) paths.
// The last N % W columns are not copied (read in ONNX's layout). Measured in bench/nbits_gemv:
// docs/benchmarks.md, "Session 16: the one-row 4-bit product's weights interleaved".
struct PackedNbits4 {
  int64_t N = 0, K = 0, W = 8, NW = 0;  // NW: the columns copied, N rounded down to a multiple of W
  std::shared_ptr<uint8_t> mem;         // one block of host memory (host_alloc): b, then s
  const uint8_t* b = nullptr;
  const float* s = nullptr;
  size_t nbytes = 0;
  size_t bytes() const { return nbytes; }
};
// The copy, or null where the one-row integer kernel would not read it (AVX-512 without VNNI, RLX_CPU_ISA=base,
// RLX_NBITS_F32, no AVX2 + FMA; K not a multiple of 128; fewer than W columns) or no memory is
// left for it. The kernel path (the ISA level) is the one nbits4_row1_bfp takes in this process.
std::shared_ptr<const PackedNbits4> pack_nbits4_row1(const uint8_t* B, const float* scales, int64_t N, int64_t K);

// matmul_nbits (4 or 8 bits, ONNX Runtime's layout) with f32 activations, any M (the path
// above 16 rows, prefill and batches): C[M, N] = A[M, K] * dequant(B)^T with B kept in its
// packed form. Each pool task takes a group of output columns, expands their weights block
// by block into a per-thread f32 panel (float(q - z) * scale: the reference's value, one
// rounding) and runs the f32 GEMM on it: no f32 copy of the whole weight, no packed copy
// held between calls. Returns false (nothing done) for other bit widths.
bool nbits_f32_blocked(int64_t M, const float* A, int64_t K, const uint8_t* B, const float* scales, const uint8_t* zp,
                       int64_t N, int64_t bits, int64_t block_size, float* C, Threads th = Threads::Pool);

// matmul_nbits with accuracy_level 4 (ONNX Runtime's CompInt8), any M: per row and block the
// activations are quantized to int8 (scale max|a| / 127, a times its reciprocal rounded to
// nearest even, as ONNX Runtime), the 4-bit values multiplied with them in exact int32
// (vpdpbusd with AVX-512 VNNI; the zero point through the block's activation sum) and each
// block's int32 sum scaled by a_scale * b_scale in f32. Not the f32 product: the activations'
// rounding (<= half a step of max|a| / 127 per value) is the accuracy given up. The same
// results on every path (nbits_int8.cpp says in which order); vnni = false forces the plain
// loops. Needs K a multiple of 128 and of block_size; returns false (nothing done) otherwise.
bool nbits4_int8_supported(int64_t K, int64_t block_size);
bool nbits4_int8(int64_t M, const float* A, int64_t K, const uint8_t* B, const float* scales, const uint8_t* zp,
                 int64_t N, int64_t block_size, float* C, bool vnni = true, Threads th = Threads::Pool);

}  // namespace rlx::cpu
