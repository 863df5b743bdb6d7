#pragma once
// Matrix products with 2-byte (f16 / bf16) right-hand operands read directly, never widened
// in memory: the weights of a bf16/f16 model's linear and matmul nodes. Products accumulate
// in f32 (docs/graph-format.md, compute rules); the caller rounds C into the node's dtype.
//
// Three instruction-set levels, chosen at run time from the CPU's features (cpuid):
//   avx512bf16  AVX-512 F/BW/VL + AVX512_BF16: bf16 x bf16 with vdpbf16ps (exact products,
//               f32 sums); other combinations convert 16 elements at a time in registers
//               (bf16: a 16-bit shift; f16: vcvtph2ps) and use FMA.
//   f16c        AVX2 + FMA + F16C: 8-wide conversion in registers, FMA.
//   plain       scalar loops (any x86-64 or other CPU).
// RLX_HALF_ISA=plain|f16c|avx512bf16 caps the level (tests and benchmarks compare them), and so
// does RLX_CPU_ISA (isa.h: avx2 caps it at f16c, base at plain).
#include <cstdint>

#include "core/dtype.h"

namespace rlx::cpu {

enum class HalfIsa { Plain = 0, F16C = 1, Avx512Bf16 = 2 };

bool half_isa_supported(HalfIsa isa);
// The best level this CPU supports, capped by RLX_HALF_ISA (read once).
HalfIsa half_isa_best();
const char* half_isa_name(HalfIsa isa);

// C[m * ldc + n] = sum_k A(m, k) * B(k, n) for m < M, n < N, accumulated in f32:
//   A(m, k) = A[m * lda + k], dtype a_dt (f32, f16 or bf16);
//   b_trans (the linear layout, B is [N, K]): B(k, n) = B[n * ldb + k];
//   otherwise (B is [K, N]):                  B(k, n) = B[k * ldb + n];  B's dtype b_dt is f16 or bf16.
// K == 0 gives zeros. Splits the work over the CPU thread pool, unless `threaded` is false:
// then it runs on the calling thread alone (callers that parallelise over independent
// products themselves, like attention's heads: one pool, no nested threading).
void half_gemm(int64_t M, int64_t N, int64_t K, const void* A, DType a_dt, int64_t lda, const uint16_t* B,
               DType b_dt, int64_t ldb, bool b_trans, float* C, int64_t ldc, HalfIsa isa, bool threaded = true);
inline void half_gemm(int64_t M, int64_t N, int64_t K, const void* A, DType a_dt, int64_t lda, const uint16_t* B,
                      DType b_dt, int64_t ldb, bool b_trans, float* C, int64_t ldc) {
  half_gemm(M, N, K, A, a_dt, lda, B, b_dt, ldb, b_trans, C, ldc, half_isa_best());
}

}  // namespace rlx::cpu
