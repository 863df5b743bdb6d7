#pragma once
// The one GEMM interface of the CPU backend (f32, row-major):
//   C = alpha * op(A) * op(B) [+ bias] [+ residual], then [activation]
// op(A) is M x K, op(B) is K x N, C is M x N with leading dimension ldc.
// Which library does the work is decided in gemm.cpp only (see README, Dependencies):
//   M > 16  : OpenBLAS sgemm, single-threaded per task, run on rlx's thread pool with the
//             output split into column blocks (one pool: OpenBLAS's own threads stay idle);
//             OpenBLAS is loaded with dlopen after OPENBLAS_CORETYPE is chosen from the CPU's
//             features (AVX-512 F/BW/VL/DQ -> SkylakeX, AVX2+FMA -> Haswell); an inherited
//             OPENBLAS_CORETYPE is not used for that load, RLX_OPENBLAS_CORETYPE forces one.
//   M <= 16 : rlx's own skinny kernels (AVX-512 or AVX2 chosen at run time): weights are
//             streamed once at memory bandwidth, threads split along N.
//   prepacked (pack_b, compiled mode): M <= 16: panels for the skinny AVX-512 kernel; M > 16:
//             oneDNN's matmul primitive with the weight reordered once into its blocked layout
//             (libdnnl.so.2 loaded with dlopen; each pool task runs its column slices with
//             OpenMP set to one thread; RLX_GEMM_DNNL=0 or no oneDNN: OpenBLAS, weight in place).
// The epilogue (bias, residual, activation) is applied to each thread's block of C right
// after it is computed, while it is still in cache.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ir/elementwise.h"

namespace rlx::cpu {

struct Epilogue {
  const float* bias = nullptr;      // [N], added to every row
  const float* residual = nullptr;  // [M, N] with leading dimension ldr, added after bias
  int64_t ldr = 0;
  bool has_act = false;  // then act (a unary EwOp: relu, silu, gelu_erf, gelu_tanh, ...) last
  EwOp act = EwOp::Add;
  // Anything else (the CPU executor's fused elementwise consumers): called last on each block
  // C[m0:m1, n0:n1] a task has just computed, on that task's thread (never concurrently on
  // the same block).
  std::function<void(float* C, int64_t ldc, int64_t m0, int64_t m1, int64_t n0, int64_t n1)> custom;
  bool any() const { return bias || residual || has_act || custom; }
};

// How a call may use threads. Pool: split over rlx's pool (the caller is not a pool task).
// Single: run on the calling thread (the caller is already inside a parallel region).
enum class Threads { Pool, Single };

// C = alpha * op(A) op(B) + epilogue. K == 0 gives the epilogue applied to zeros.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float* C, int64_t ldc, const Epilogue& ep = {}, Threads th = Threads::Pool);

// f64: C = op(A) op(B) with OpenBLAS's cblas_dgemm (the same library as the f32 products, split
// over rlx's pool by rows); no epilogue, no prepacking.
void dgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
           int64_t ldb, double* C, int64_t ldc);

// A batch of products of one shape: product i reads A + a_off[i] and B + b_off[i] (offsets in
// floats; broadcasting repeats offsets) and writes C + i * c_stride. Many small products run
// in parallel, one per task; few large ones each use the pool.
void gemm_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const int64_t* a_off, const float* B, int64_t ldb, const int64_t* b_off, float* C, int64_t ldc,
                  int64_t c_stride, int64_t batches);

// A constant right-hand operand (a linear's weight, a matmul's param B) in the layout the
// GEMM reads fastest, made once (compiled mode) and reused by every call. The handle owns
// its copy if it made one (bytes() > 0); otherwise it points at the caller's memory, which
// must then outlive it (a panel-packed handle also keeps pointing at the caller's B, which it
// reads for calls with more than 16 rows).
class PackedB {
 public:
  int64_t K = 0, N = 0;
  size_t bytes() const { return (owned_ ? owned_floats_ * 4 : 0) + dnnl_bytes_; }
  // Read by gemm_packed: op(B) = B if !trans, B^T if trans, leading dimension ld.
  const float* data = nullptr;
  bool trans = false;
  int64_t ld = 0;
  // Panels for the skinny (M <= 16) AVX-512 kernel, or null: op(B) cut into ceil(N / 16)
  // panels of 16 columns, each stored k-major ([panel][k][16], zero-padded past N), so one
  // 64-byte load gives 16 output columns and the weights are read as a few sequential streams.
  const float* panels = nullptr;
  // Panels of 32 columns for rlx's large-M AVX-512 kernel ([panel][k][32]), or null.
  const float* wide = nullptr;
  // "panels 16 (skinny avx512)", "as given (no copy)", "transposed copy": for --dump-plan.
  std::string layout() const;

 private:
  friend std::shared_ptr<const PackedB> pack_b(bool, int64_t, int64_t, const float*, int64_t, int64_t);
  std::shared_ptr<float> owned_;
  size_t owned_floats_ = 0;

 public:
  struct DnnlPack;  // oneDNN primitives and weights, for products of one row count
  std::shared_ptr<DnnlPack> dnnl_;
  size_t dnnl_bytes_ = 0;
};

// Packs op(B) (K x N; B is N x K when trans_b) for products with `rows` rows of A (0: unknown,
// several sizes). The layout depends on the path those rows take (measured: README):
//   rows 1..16 on an AVX-512 CPU: panels for the skinny kernel (a copy, zero-padded to N / 16);
//   more rows with oneDNN available: its blocked layout, primitives made for exactly `rows`
//   rows and C with leading dimension N (other calls fall back to OpenBLAS on the caller's B);
//   otherwise (OpenBLAS, which packs B itself on every call and offers no pre-packed entry
//   point; it is as fast with B as N x K as with K x N): op(B) as N x K contiguous, which is
//   the caller's memory with no copy for a contiguous linear weight, else a transposed copy.
std::shared_ptr<const PackedB> pack_b(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb,
                                      int64_t rows = 0);

// Whether pack_b for products of `rows` rows makes a layout that is read faster than B as
// given (panels for the skinny kernel; rlx's large-M kernel when RLX_GEMM_WIDE=1). When not,
// callers read B in place (OpenBLAS: no copy).
bool prepack_pays(int64_t rows);

// C = A * op(B) + epilogue with a packed B (A not transposed, M x K, leading dimension lda).
void gemm_packed(int64_t M, const float* A, int64_t lda, const PackedB& B, float* C, int64_t ldc,
                 const Epilogue& ep = {}, Threads th = Threads::Pool);

// "OpenBLAS 0.3.21 (SkylakeX kernels) + rlx skinny (avx512)": for reports and `rlx devices`.
std::string gemm_description();

// C[m * ldc + n] = sum_k A[m * lda + k] * op(B)(k, n) with bf16 A and B and f32 C, through
// oneDNN's matmul (AMX tiles on CPUs that have them, else its AVX-512 BF16 kernels), the
// columns split over rlx's pool. False when oneDNN is unavailable, refuses the shape or fails
// (C may then be partly written: the caller computes it whole), or M <= 16 (the caller's own
// kernels serve those). op(B)(k, n) = B[n * ldb + k]
// when trans_b, else B[k * ldb + n].
bool dnnl_bf16_gemm(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
                    bool trans_b, float* C, int64_t ldc);

}  // namespace rlx::cpu
