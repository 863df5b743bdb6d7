// Lowering of the quantization ops on Vulkan: quantize and dequantize (quant.comp),
// matmul_integer (matmul_integer.comp), matmul_nbits (matmul_nbits.comp; a gemv for few rows).
// i8/u8 live as bytes on the device (storage kinds 3/4, read through 32-bit words); i32 as f32
// values (exact within 2^24).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backends/vulkan/kernels.h"
#include "core/error.h"
#include "ir/op_registry.h"

namespace rlx::vk {
namespace {

using ir::Op;

constexpr int64_t kGemvRows = 8;  // matmul_nbits rows (of a) that take the gemv kernel

void quant(LowerCtx& L, bool quantize) {
  const Kernel& k = L.kernel();
  const TensorRef &x = k.inputs[0], &s = k.inputs[1];
  const int64_t n = k.output.numel();
  if (n >= ((int64_t)1 << 32)) L.fail("a tensor of " + std::to_string(n) + " elements is too large for 32-bit indexing");
  std::string err;
  const ir::QuantParams q = ir::quant_params(k.node->attrs, x.shape, s.shape, &err);
  if (!err.empty()) L.fail(err);
  int64_t dim = 1, inner = 1, sdim = 1;
  if (q.kind != ir::QuantParams::PerTensor) {
    dim = x.shape[q.axis];
    for (size_t d = q.axis + 1; d < x.shape.size(); ++d) inner *= x.shape[d];
    sdim = q.kind == ir::QuantParams::Blocked ? (dim + q.block_size - 1) / q.block_size : dim;
  }
  const bool has_zp = k.inputs.size() == 3;
  const DeviceCaps& caps = L.caps();
  Dispatch& d = L.add("quant", {quantize ? 0u : 1u, (uint32_t)q.kind, has_zp ? 1u : 0u, storage_kind(caps, x.dtype),
                                has_zp ? storage_kind(caps, k.inputs[2].dtype) : 0u, storage_kind(caps, k.output.dtype)});
  const uint32_t xo = L.read(d, x), so = L.read(d, s);
  uint32_t zo = 0;
  if (has_zp) zo = L.read(d, k.inputs[2]);
  else L.read(d, s);  // any bound buffer: HAS_ZP = 0 never reads it
  const uint32_t yo = L.write(d, k.output);
  const DType out = k.output.dtype;
  const float lo = quantize ? (float)dtype_traits(out).min : 0.f, hi = quantize ? (float)dtype_traits(out).max : 0.f;
  d.push = {(uint32_t)n, xo, so, zo, yo, (uint32_t)dim, (uint32_t)inner, (uint32_t)sdim, (uint32_t)q.block_size,
            f2u(lo), f2u(hi)};
  L.grid(d, n, 256);
}

void matmul_integer(LowerCtx& L) {
  const Kernel& k = L.kernel();
  const Shape &as = k.inputs[0].shape, &bs = k.inputs[1].shape, &os = k.output.shape;
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back(), n = k.output.numel();
  if (n >= ((int64_t)1 << 32) || k.inputs[0].numel() >= ((int64_t)1 << 32) || k.inputs[1].numel() >= ((int64_t)1 << 32))
    L.fail("tensors too large for 32-bit indexing");
  // Output batch dims with a's and b's strides (in matrices; 0 where broadcast), size-1 dims dropped.
  const size_t rb = os.size() - 2;
  std::vector<int64_t> dims, astr, bstr;
  auto strides_of = [&](const Shape& m) {
    std::vector<int64_t> st(rb, 0);
    const size_t r = m.size() - 2;
    int64_t mul = 1;
    for (size_t d = r; d-- > 0;) {
      const size_t od = d + rb - r;
      st[od] = m[d] == 1 ? 0 : mul;
      mul *= m[d];
    }
    return st;
  };
  const auto sa = strides_of(as), sb = strides_of(bs);
  for (size_t d = 0; d < rb; ++d)
    if (os[d] != 1) dims.push_back(os[d]), astr.push_back(sa[d]), bstr.push_back(sb[d]);
  if (dims.size() > 4) L.fail("more than 4 batch dims (after dropping size-1 ones)");
  auto zmode = [&](size_t idx, int64_t vec) -> uint32_t {
    if (k.inputs.size() <= idx) return 0;
    const Shape& z = k.inputs[idx].shape;
    if (shape_numel(z) == 1 && z.size() <= 1) return 1;
    if (z.size() == 1 && z[0] == vec) return 2;
    return 3;
  };
  const uint32_t za = zmode(2, M), zb = zmode(3, N);
  const DeviceCaps& caps = L.caps();
  auto sk = [&](size_t idx) { return k.inputs.size() > idx ? storage_kind(caps, k.inputs[idx].dtype) : 0u; };
  Dispatch& d = L.add("matmul_integer", {za, zb, (uint32_t)dims.size(), sk(0), sk(1), za ? sk(2) : 0u, zb ? sk(3) : 0u});
  const uint32_t ao = L.read(d, k.inputs[0]), bo = L.read(d, k.inputs[1]);
  const uint32_t zao = za ? L.read(d, k.inputs[2]) : (L.read(d, k.inputs[0]), 0u);
  const uint32_t zbo = zb ? L.read(d, k.inputs[3]) : (L.read(d, k.inputs[1]), 0u);
  L.bind_error(d);
  const uint32_t yo = L.write(d, k.output);
  d.push = {(uint32_t)n, (uint32_t)M, (uint32_t)N, (uint32_t)K, ao, bo, zao, zbo, yo, L.kernel_id()};
  for (size_t i = 0; i < 4; ++i) d.push.push_back(i < dims.size() ? (uint32_t)dims[i] : 1u);
  for (size_t i = 0; i < 4; ++i) d.push.push_back(i < dims.size() ? (uint32_t)astr[i] : 0u);
  for (size_t i = 0; i < 4; ++i) d.push.push_back(i < dims.size() ? (uint32_t)bstr[i] : 0u);
  L.grid(d, n, 64);
}

void matmul_nbits(LowerCtx& L) {
  const Kernel& k = L.kernel();
  const auto& at = k.node->attrs;
  const int64_t K = at.i("k"), N = at.i("n"), bits = at.i("bits"), bs = at.i("block_size");
  const int64_t kb = (K + bs - 1) / bs, blob = bs * bits / 8, zcols = (kb * bits + 7) / 8;
  const int64_t n = k.output.numel();
  if (n >= ((int64_t)1 << 32) || k.inputs[0].numel() >= ((int64_t)1 << 32) || k.inputs[1].numel() >= ((int64_t)1 << 32))
    L.fail("tensors too large for 32-bit indexing");
  const bool has_zp = k.inputs.size() == 4;
  const int64_t rows = K ? k.inputs[0].numel() / K : 0;
  // Few rows of 4-bit weights: the gemv kernel (128-bit loads of the packed weights).
  if (bits == 4 && rows >= 1 && rows <= kGemvRows && K % 32 == 0 && bs % 32 == 0 && !std::getenv("RLX_VK_NBITS_GENERIC")) {
    // Group shape measured on the H200 (docs/benchmarks.md): 64 invocations, 4 outputs, one
    // chunk per pass, no unroll hints. RLX_VK_NBITS_GEMV="WGxNC[xCPI[xU]]" overrides it for
    // tuning: WG invocations, NC outputs per group, CPI chunks loaded per pass, U 1 for the
    // variant with [[unroll]] on its constant-trip loops.
    uint32_t wg = 64, nc = 4, cpi = 1, unroll = 0;
    if (const char* e = std::getenv("RLX_VK_NBITS_GEMV")) {
      unsigned w = 0, c = 0, p = 1, u = 0;
      if (std::sscanf(e, "%ux%ux%ux%u", &w, &c, &p, &u) >= 2 && w >= 8 && (w & (w - 1)) == 0 && w <= 1024 && c >= 1 &&
          c <= 16 && p >= 1 && p <= 8 && u <= 1)
        wg = w, nc = c, cpi = p, unroll = u;
    }
    // The shader's reduction keeps 64 partial sums per output: one per subgroup, or per invocation.
    const DeviceCaps& caps = L.caps();
    if (caps.subgroup_arithmetic ? wg / std::max<uint32_t>(1, caps.subgroup_size) > 64 : wg > 64) wg = 64;
    if (wg > caps.max_wg_invocations) wg = 64;
    Dispatch& d = L.add(std::string(unroll ? "matmul_nbits_gemv_unroll" : "matmul_nbits_gemv") +
                            (caps.subgroup_arithmetic ? ".sg" : ""),
                        {});
    const uint32_t ao = L.read(d, k.inputs[0]), bo = L.read(d, k.inputs[1]), so = L.read(d, k.inputs[2]);
    const uint32_t zo = has_zp ? L.read(d, k.inputs[3]) : (L.read(d, k.inputs[2]), 0u);
    const uint32_t yo = L.write(d, k.output);
    if (ao % 4 == 0 && bo % 16 == 0) {
      d.spec = {(uint32_t)rows, nc, has_zp ? 1u : 0u, cpi};
      d.spec.resize(11, 0);
      d.spec[10] = wg;
      d.push = {(uint32_t)N, (uint32_t)K, (uint32_t)bs, (uint32_t)kb, (uint32_t)zcols, ao / 4, bo / 16, so, zo, yo,
                (uint32_t)(kb * blob / 16)};
      L.grid(d, (uint64_t)(N + nc - 1) / nc * wg, wg);
      return;
    }
    L.drop_last();  // operands not aligned for vector loads: the general kernel
  }
  Dispatch& d = L.add("matmul_nbits", {(uint32_t)bits, has_zp ? 1u : 0u});
  const uint32_t ao = L.read(d, k.inputs[0]), bo = L.read(d, k.inputs[1]), so = L.read(d, k.inputs[2]);
  const uint32_t zo = has_zp ? L.read(d, k.inputs[3]) : (L.read(d, k.inputs[2]), 0u);
  const uint32_t yo = L.write(d, k.output);
  d.push = {(uint32_t)n, (uint32_t)N, (uint32_t)K, (uint32_t)bs, (uint32_t)kb, (uint32_t)blob, (uint32_t)zcols, ao, bo, so, zo, yo};
  L.grid(d, n, 64);
}

}  // namespace

bool lower_quant_op(LowerCtx& L) {
  const Kernel& k = L.kernel();
  if (!k.node) return false;
  switch (k.node->op) {
    case Op::Quantize: quant(L, true); return true;
    case Op::Dequantize: quant(L, false); return true;
    case Op::MatmulInteger: matmul_integer(L); return true;
    case Op::MatmulNbits: matmul_nbits(L); return true;
    default: return false;
  }
}

}  // namespace rlx::vk
