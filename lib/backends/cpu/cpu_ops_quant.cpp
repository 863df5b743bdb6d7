// CPU kernels of quantize, dequantize, matmul_integer, matmul_integer_scaled and matmul_nbits
// (conv2d_integer_scaled: qconv.cpp)
// (ONNX QuantizeLinear, DequantizeLinear, MatMulInteger, ONNX Runtime's MatMulNBits;
// docs/graph-format.md). Integer products run qgemm (qgemm.h, exact on every ISA path) where
// the shapes allow, 4-bit products with up to 16 rows the AVX-512 decode kernel; the plain
// reference loops below run everything else (and everything with RLX_QGEMM_REFERENCE=1).
#include "backends/cpu/ops_quant.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/access.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/qgemm.h"
#include "backends/cpu/thread_pool.h"
#include "ir/op_registry.h"

namespace rlx::cpu {
namespace {

using ir::Op;

void parallel(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  ThreadPool::global().parallel_for(n, grain, fn);
}

// The scale element of each x element (ir::QuantParams).
struct ScaleIndex {
  ir::QuantParams q;
  int64_t dim = 1, inner = 1, sdim = 1;
  ScaleIndex(const Kernel& k) {
    std::string err;
    q = ir::quant_params(k.node->attrs, k.inputs[0].shape, k.inputs[1].shape, &err);
    if (!err.empty()) throw RuntimeError(k.label + ": " + err);
    const Shape& x = k.inputs[0].shape;
    if (q.kind != ir::QuantParams::PerTensor) {
      dim = x[q.axis];
      for (size_t d = q.axis + 1; d < x.size(); ++d) inner *= x[d];
      sdim = q.kind == ir::QuantParams::Blocked ? (dim + q.block_size - 1) / q.block_size : dim;
    }
  }
  int64_t operator()(int64_t i) const {
    switch (q.kind) {
      case ir::QuantParams::PerTensor: return 0;
      case ir::QuantParams::PerAxis: return (i / inner) % dim;
      case ir::QuantParams::Blocked: {
        const int64_t in = i % inner, c = (i / inner) % dim, outer = i / (inner * dim);
        return (outer * sdim + c / q.block_size) * inner + in;
      }
    }
    return 0;
  }
};

// f32 values of a float tensor (any float dtype, or an adapter's f32 copy).
std::vector<float> floats_of(const TensorRef& t) {
  std::vector<float> v((size_t)std::max<int64_t>(t.numel(), 0));
  convert_elements(bytes(t), stored_dtype(t), v.data(), DType::f32, t.numel());
  return v;
}
std::vector<int32_t> ints_of(const TensorRef& t) {
  std::vector<int32_t> v((size_t)std::max<int64_t>(t.numel(), 0));
  convert_elements(bytes(t), stored_dtype(t), v.data(), DType::i32, t.numel());
  return v;
}

// quantize's per-tensor f32 fast path: the reference's operations (x / scale in f32, round half
// to even, + zero point, saturate; NaN gives the zero point) on a contiguous run, vectorised.
inline __attribute__((always_inline)) void quantize_run_body(const float* __restrict x, int64_t n, float s, float zp,
                                                              float lo, float hi, uint8_t* __restrict y) {
  for (int64_t i = 0; i < n; ++i) {
    float v = std::nearbyint(x[i] / s) + zp;
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    v = v != v ? zp : v;
    y[i] = (uint8_t)(int32_t)v;
  }
}
__attribute__((target("avx2"))) void quantize_run_avx2(const float* x, int64_t n, float s, float zp, float lo, float hi,
                                                        uint8_t* y) {
  quantize_run_body(x, n, s, zp, lo, hi, y);
}
void quantize_run_base(const float* x, int64_t n, float s, float zp, float lo, float hi, uint8_t* y) {
  quantize_run_body(x, n, s, zp, lo, hi, y);
}

void run_quantize(const Kernel& k) {
  const ScaleIndex si(k);
  if (si.q.kind == ir::QuantParams::PerTensor && stored_dtype(k.inputs[0]) == DType::f32) {
    const float s = floats_of(k.inputs[1])[0];
    const float zp = k.inputs.size() == 3 ? (float)ints_of(k.inputs[2])[0] : 0.f;
    const DType out = k.output.dtype;
    const float lo = (float)dtype_traits(out).min, hi = (float)dtype_traits(out).max;
    const float* x = reinterpret_cast<const float*>(bytes(k.inputs[0]));
    uint8_t* y = bytes(k.output);
    const bool avx2 = isa_avx2_fma();  // RLX_CPU_ISA caps it (isa.h)
    parallel(k.output.numel(), 16384, [&](int64_t b, int64_t e) {
      (avx2 ? quantize_run_avx2 : quantize_run_base)(x + b, e - b, s, zp, lo, hi, y + b);
    });
    return;
  }
  const std::vector<float> x = floats_of(k.inputs[0]), s = floats_of(k.inputs[1]);
  std::vector<int32_t> zp(s.size(), 0);
  if (k.inputs.size() == 3) zp = ints_of(k.inputs[2]);
  const DType out = k.output.dtype;
  const float lo = (float)dtype_traits(out).min, hi = (float)dtype_traits(out).max;
  uint8_t* y = bytes(k.output);
  parallel((int64_t)x.size(), 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t j = si(i);
      // x / scale in f32, rounded half to even (the default rounding mode), plus the zero
      // point, saturated; NaN quantizes as 0 does (to the zero point).
      float v = std::nearbyint(x[i] / s[j]);
      v = v != v ? (float)zp[j] : std::fmin(std::fmax(v + (float)zp[j], lo), hi);
      y[i] = (uint8_t)(int32_t)v;  // the u8, or the two's complement byte of the i8
    }
  });
}

void run_dequantize(const Kernel& k) {
  const ScaleIndex si(k);
  const std::vector<int32_t> q = ints_of(k.inputs[0]);
  const std::vector<float> s = floats_of(k.inputs[1]);
  std::vector<int32_t> zp(s.size(), 0);
  if (k.inputs.size() == 3) zp = ints_of(k.inputs[2]);
  std::vector<float> y(q.size());
  parallel((int64_t)q.size(), 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t j = si(i);
      y[i] = ((float)q[i] - (float)zp[j]) * s[j];  // as ONNX's reference: in f32
    }
  });
  convert_elements(y.data(), DType::f32, bytes(k.output), k.output.dtype, (int64_t)y.size());
}

bool is_byte(DType t) { return t == DType::u8 || t == DType::i8; }

// Zero points as int32 (a: [1] or per row, b: [1] or per column).
std::vector<int32_t> zero_points(const Kernel& k, size_t i) {
  return k.inputs.size() > i ? ints_of(k.inputs[i]) : std::vector<int32_t>{0};
}

}  // namespace

// The fast path (qgemm.h): B a matrix (or batch dims of one), A's rows contiguous, zero points
// scalar, per row of A (repeated over A's batches, or one per batch row) and per column of B.
// Returns false when the shapes take the reference loops.
bool matmul_integer_fast(const Kernel& k, const PackedQB* packed, const QEpilogue& ep, void* out) {
  const Shape &as = k.inputs[0].shape, &bs = k.inputs[1].shape;
  if (as.size() < 2 || bs.size() < 2) return false;
  if (!is_byte(stored_dtype(k.inputs[0])) || !is_byte(stored_dtype(k.inputs[1]))) return false;
  if (shape_numel(Shape(bs.begin(), bs.end() - 2)) != 1) return false;
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  const int64_t rows = shape_numel(as) / std::max<int64_t>(K, 1);
  if (k.output.shape.size() != as.size()) return false;  // B's extra batch dims broadcast A
  const std::vector<int32_t> za = zero_points(k, 2), zb = zero_points(k, 3);
  if (!(za.size() == 1 || za.size() == (size_t)M || za.size() == (size_t)rows)) return false;
  if (!(zb.size() == 1 || zb.size() == (size_t)N)) return false;
  if (!packed) {  // B packed for this call, into this thread's reused buffer
    static thread_local PackedQB scratch;
    pack_qb_into(scratch, bytes(k.inputs[1]), stored_dtype(k.inputs[1]) == DType::i8, K, N, N);
    packed = &scratch;
  }
  const bool a_signed = stored_dtype(k.inputs[0]) == DType::i8;
  if (za.size() == 1 || za.size() == (size_t)rows) {
    qgemm(rows, bytes(k.inputs[0]), a_signed, K, za.data(), za.size() > 1, *packed, zb.data(), zb.size() > 1,
          static_cast<int32_t*>(out), N, ep);
  } else {  // per row of each batch's M rows
    std::vector<int32_t> zr((size_t)rows);
    for (int64_t r = 0; r < rows; ++r) zr[r] = za[r % M];
    qgemm(rows, bytes(k.inputs[0]), a_signed, K, zr.data(), true, *packed, zb.data(), zb.size() > 1,
          static_cast<int32_t*>(out), N, ep);
  }
  return true;
}

namespace {

// RLX_QGEMM_REFERENCE=1: the plain loops below (for comparisons).
bool reference_only() {
  static const bool yes = std::getenv("RLX_QGEMM_REFERENCE") != nullptr;
  return yes;
}

void matmul_integer_reference(const Kernel& k, int32_t* y);

void run_matmul_integer(const Kernel& k) {
  if (!reference_only() && matmul_integer_fast(k, nullptr, {}, bytes(k.output))) return;
  matmul_integer_reference(k, reinterpret_cast<int32_t*>(bytes(k.output)));
}

// matmul_integer_scaled: the integer product, then f32(acc) * scale [+ bias].
void run_matmul_integer_scaled(const Kernel& k, const PackedQB* packed) {
  const std::vector<float> sc = floats_of(k.inputs[4]);
  const std::vector<float> bias = k.inputs.size() > 5 ? floats_of(k.inputs[5]) : std::vector<float>{};
  QEpilogue ep;
  ep.to_float = true;
  ep.b_scale = sc.data();
  ep.b_scale_per_col = sc.size() > 1;
  ep.bias = bias.empty() ? nullptr : bias.data();
  if (!reference_only() && matmul_integer_fast(k, packed, ep, bytes(k.output))) return;
  const int64_t N = k.inputs[1].shape.back(), total = k.output.numel();
  std::vector<int32_t> acc((size_t)total);
  matmul_integer_reference(k, acc.data());
  float* y = reinterpret_cast<float*>(bytes(k.output));
  for (int64_t i = 0; i < total; ++i) {
    float v = (float)acc[i] * sc[sc.size() > 1 ? i % N : 0];
    if (!bias.empty()) v += bias[i % N];
    y[i] = v;
  }
}

void matmul_integer_reference(const Kernel& k, int32_t* y) {
  const Shape &as = k.inputs[0].shape, &bs = k.inputs[1].shape, &os = k.output.shape;
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  const std::vector<int32_t> a = ints_of(k.inputs[0]), b = ints_of(k.inputs[1]);
  std::vector<int32_t> azp{0}, bzp{0};
  if (k.inputs.size() > 2) azp = ints_of(k.inputs[2]);
  if (k.inputs.size() > 3) bzp = ints_of(k.inputs[3]);

  // Batch index of a and b for each output batch (NumPy broadcasting of the leading dims).
  const Shape ob(os.begin(), os.end() - 2);
  const int64_t batches = shape_numel(ob);
  const BatchIndex bix = broadcast_batch_index(Shape(as.begin(), as.end() - 2), Shape(bs.begin(), bs.end() - 2), ob);
  parallel(batches * M, 4, [&](int64_t lo, int64_t hi) {
    std::vector<int32_t> col((size_t)K);
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t bt = row / M, m = row % M;
      const int64_t ab = bix.a[bt], bb = bix.b[bt];
      const int32_t* ar = a.data() + (ab * M + m) * K;
      const int32_t* bm = b.data() + bb * K * N;
      // a's zero point: scalar, per row [M], or [..., M, 1] (a's batch)
      const int32_t za = azp.size() == 1 ? azp[0] : azp[(azp.size() == (size_t)M ? 0 : ab * M) + m];
      for (int64_t n = 0; n < N; ++n) {
        const int32_t zb = bzp.size() == 1 ? bzp[0] : bzp[(bzp.size() == (size_t)N ? 0 : bb * N) + n];
        int32_t acc = 0;  // |terms| <= 255^2 and K <= 33025 (the registry): no overflow
        for (int64_t kk = 0; kk < K; ++kk) acc += (ar[kk] - za) * (bm[kk * N + n] - zb);
        y[row * N + n] = acc;
      }
    }
  });
}

// The one-row kernel's interleaved copy of a constant 4-bit weight (PackedNbits4, qgemm.h), made
// on the weight's first one-row product in any mode and kept while the weight's memory and its
// scales' live (weak references to their owners, as cpu_plan.cpp's shared_pack), keyed by their
// addresses and the shape: every step of a generation, and every plan of its capacities, reads
// the one copy. Only for weights used in place (CpuBuffer::external: a model's initializers, a
// merged product's weights), whose addresses no other tensor takes while they live; and off with
// RLX_NBITS_PACK=0 (ONNX's layout read directly). The copy costs the weight's size in memory once.
std::shared_ptr<const PackedNbits4> row1_pack(const Kernel& k, int64_t N, int64_t K) {
  static const bool on = [] {
    const char* e = std::getenv("RLX_NBITS_PACK");
    return !(e && std::string(e) == "0");
  }();
  if (!on || (k.const_inputs & 6u) != 6u) return nullptr;
  const auto* bb = static_cast<const CpuBuffer*>(k.inputs[1].buf);
  const auto* sb = static_cast<const CpuBuffer*>(k.inputs[2].buf);
  if (!bb->external || !sb->external || bb->f32_view || sb->f32_view) return nullptr;
  using Key = std::tuple<const uint8_t*, const uint8_t*, int64_t, int64_t>;
  struct Entry {
    std::weak_ptr<uint8_t> b_owner, s_owner;
    std::shared_ptr<const PackedNbits4> pack;  // null: the kernel takes no copy (cached too)
  };
  static std::mutex mu;
  static auto* cache = new std::map<Key, Entry>;  // never destroyed: packs outlive static destructors
  const Key key{bytes(k.inputs[1]), bytes(k.inputs[2]), N, K};
  {
    std::lock_guard<std::mutex> l(mu);
    auto it = cache->find(key);
    if (it != cache->end() && !it->second.b_owner.expired() && !it->second.s_owner.expired()) return it->second.pack;
  }
  auto pack = pack_nbits4_row1(bytes(k.inputs[1]), reinterpret_cast<const float*>(bytes(k.inputs[2])), N, K);
  std::lock_guard<std::mutex> l(mu);
  for (auto it = cache->begin(); it != cache->end();)
    it = it->second.b_owner.expired() || it->second.s_owner.expired() ? cache->erase(it) : std::next(it);
  (*cache)[key] = Entry{bb->mem, sb->mem, pack};
  return pack;
}

// ONNX Runtime's MatMulNBits: B [N, k_blocks, block_size * bits / 8] u8, consecutive K values
// in a byte from the low bits up; w[n, k] = (q - zp) * scale[n, k / block_size]; zero points
// packed the same way per row, default 2^(bits - 1). The reference: B dequantized into an f32
// [N, K] copy, then one product (RLX_QGEMM_REFERENCE=1, and dtypes other than f32; f32 runs
// nbits4_small_m, nbits_f32_blocked or nbits4_int8, qgemm.h).
void run_matmul_nbits(const Kernel& k) {
  const auto& at = k.node->attrs;
  const int64_t K = at.i("k"), N = at.i("n"), bits = at.i("bits"), bs = at.i("block_size");
  // accuracy_level 4: int8 activations and integer products (qgemm.h, nbits4_int8), f32 only
  if (at.has("accuracy_level") && at.i("accuracy_level") == 4 && bits == 4 && nbits4_int8_supported(K, bs) &&
      stored_dtype(k.inputs[0]) == DType::f32 && k.output.dtype == DType::f32 && stored_dtype(k.inputs[2]) == DType::f32) {
    const int64_t M = k.inputs[0].numel() / K;
    const uint8_t* zp = k.inputs.size() == 4 ? bytes(k.inputs[3]) : nullptr;
    nbits4_int8(M, reinterpret_cast<const float*>(bytes(k.inputs[0])), K, bytes(k.inputs[1]),
                reinterpret_cast<const float*>(bytes(k.inputs[2])), zp, N, bs, reinterpret_cast<float*>(bytes(k.output)),
                !reference_only());
    return;
  }
  // M <= 16 rows, 4 bits, f32: the decode kernel (qgemm.h), reading each weight byte once.
  if (!reference_only() && stored_dtype(k.inputs[0]) == DType::f32 && k.output.dtype == DType::f32 &&
      stored_dtype(k.inputs[2]) == DType::f32) {
    const int64_t M = K ? k.inputs[0].numel() / K : 0;
    const uint8_t* zp = k.inputs.size() == 4 ? bytes(k.inputs[3]) : nullptr;
    const auto pk = bits == 4 && M == 1 && bs == 32 ? row1_pack(k, N, K) : nullptr;
    if (bits == 4 && nbits4_small_m(M, reinterpret_cast<const float*>(bytes(k.inputs[0])), K, bytes(k.inputs[1]),
                       reinterpret_cast<const float*>(bytes(k.inputs[2])), zp, N, bs,
                       reinterpret_cast<float*>(bytes(k.output)), Threads::Pool, pk.get()))
      return;
    // More rows (or no AVX-512): weights expanded block-wise into per-thread panels for the f32 GEMM.
    if (nbits_f32_blocked(M, reinterpret_cast<const float*>(bytes(k.inputs[0])), K, bytes(k.inputs[1]),
                          reinterpret_cast<const float*>(bytes(k.inputs[2])), zp, N, bits, bs,
                          reinterpret_cast<float*>(bytes(k.output))))
      return;
  }
  const int64_t kb = (K + bs - 1) / bs, blob = bs * bits / 8, zcols = (kb * bits + 7) / 8;
  const int64_t per_byte = 8 / bits;
  const uint32_t mask = (1u << bits) - 1;
  const uint8_t* b = bytes(k.inputs[1]);
  const std::vector<float> sc = floats_of(k.inputs[2]);
  const uint8_t* zp = k.inputs.size() == 4 ? bytes(k.inputs[3]) : nullptr;
  std::vector<float> w((size_t)(N * K));
  parallel(N, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n)
      for (int64_t kk = 0; kk < K; ++kk) {
        const int64_t blk = kk / bs, j = kk % bs;
        const uint32_t q = (b[(n * kb + blk) * blob + j / per_byte] >> ((j % per_byte) * bits)) & mask;
        const uint32_t z = zp ? (zp[n * zcols + blk / per_byte] >> ((blk % per_byte) * bits)) & mask : 1u << (bits - 1);
        w[n * K + kk] = ((float)q - (float)z) * sc[n * kb + blk];
      }
  });
  const std::vector<float> a = floats_of(k.inputs[0]);
  const int64_t M = K ? (int64_t)a.size() / K : 0;
  std::vector<float> y((size_t)(M * N));
  gemm(false, true, M, N, K, 1.f, a.data(), K, w.data(), K, y.data(), N);
  convert_elements(y.data(), DType::f32, bytes(k.output), k.output.dtype, (int64_t)y.size());
}

}  // namespace

bool is_quant_op(const Kernel& k) {
  if (k.fused || !k.node) return false;
  return k.node->op == Op::Quantize || k.node->op == Op::Dequantize || k.node->op == Op::MatmulInteger ||
         k.node->op == Op::MatmulNbits || k.node->op == Op::MatmulIntegerScaled || k.node->op == Op::Conv2dIntegerScaled;
}

bool run_quant_op(const Kernel& k) {
  if (!is_quant_op(k)) return false;
  switch (k.node->op) {
    case Op::Quantize: run_quantize(k); return true;
    case Op::Dequantize: run_dequantize(k); return true;
    case Op::MatmulNbits: run_matmul_nbits(k); return true;
    case Op::MatmulIntegerScaled: run_matmul_integer_scaled(k, nullptr); return true;
    case Op::Conv2dIntegerScaled: run_qconv(k, nullptr); return true;
    default: run_matmul_integer(k); return true;
  }
}

std::shared_ptr<const PackedQB> pack_quant_weight(const Kernel& k) {
  if (k.node && k.node->op == Op::Conv2dIntegerScaled) return (k.const_inputs & 2u) ? pack_qconv_weight(k) : nullptr;
  if (!k.node || (k.node->op != Op::MatmulInteger && k.node->op != Op::MatmulIntegerScaled)) return nullptr;
  if (!(k.const_inputs & 2u) || k.inputs[1].shape.size() != 2) return nullptr;
  if (!is_byte(stored_dtype(k.inputs[0])) || !is_byte(stored_dtype(k.inputs[1]))) return nullptr;
  const Shape& b = k.inputs[1].shape;
  return pack_qb(bytes(k.inputs[1]), stored_dtype(k.inputs[1]) == DType::i8, b[0], b[1], b[1]);
}

void run_quant_packed(const Kernel& k, const PackedQB& packed) {
  if (k.node->op == Op::Conv2dIntegerScaled) return run_qconv(k, &packed);
  if (k.node->op == Op::MatmulIntegerScaled) return run_matmul_integer_scaled(k, &packed);
  if (reference_only() || !matmul_integer_fast(k, &packed, {}, bytes(k.output)))
    matmul_integer_reference(k, reinterpret_cast<int32_t*>(bytes(k.output)));
}

}  // namespace rlx::cpu
