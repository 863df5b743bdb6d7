// Tensor-core matrix products (f16 x f16 or bf16 x bf16, f32 accumulation), in order of
// preference: VK_NV_cooperative_matrix2 (prebuilt matmul_cm2: workgroup-scope matrices loaded
// from device memory with tensor addressing), VK_KHR_cooperative_matrix (prebuilt matmul_cm1:
// subgroup matrices, hand-staged through shared memory), VK_NV_cooperative_matrix (matmul_coop,
// f16 only, built with Debian's glslang). matmul_cm1p (KHR, register-pipelined) is tried first
// only where asked for (RLX_VK_KHRP=1, pipe_wanted: slower than matmul_cm2 where measured).
// kernels.cpp's shared-memory kernel is the last resort.
// Each kernel is used only for shapes and types the device lists (DeviceCaps, coopmat_caps.cpp).
// RLX_VK_COOPMAT=nv|khr|cm2 caps the route (device.cpp); RLX_VK_CM2 and RLX_VK_COOP set tiles
// and RLX_VK_SPLITK the K split, for tuning (scripts/device_run.sh); RLX_VK_CM2_PICK=old,
// RLX_VK_CM2_SWZ, RLX_VK_CM2_FSTORE=0 and RLX_VK_CM2_PREF=1 select matmul_cm2 variants for
// same-call comparisons (bench/cm2_bench.py). Figures: docs/benchmarks.md.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "backends/vulkan/kernels.h"

namespace rlx::vk {
namespace {

uint32_t cdiv(uint64_t a, uint64_t b) { return (uint32_t)((a + b - 1) / b); }

// Split-K towards ~256 work groups while chunks stay >= 1024 deep (or RLX_VK_SPLITK); chunks
// are multiples of `align`.
// The split partials (f32, M x N each) must fit one binding (`budget` bytes).
uint32_t split_for(uint64_t tiles, int64_t K, uint32_t align, uint64_t mn, uint64_t budget) {
  uint64_t want = 1;
  while (tiles * want < 256 && (uint64_t)K / (2 * want) >= 1024) want *= 2;
  if (const char* e = std::getenv("RLX_VK_SPLITK"); e && *e) want = std::max(1, std::atoi(e));
  while (want > 1 && want * mn * 4 > budget) want /= 2;
  return (uint32_t)(cdiv(cdiv(K, want), align) * align);  // kchunk
}

// The split partial products' sum (+ bias, rounded into y's dtype).
void splitk_sum(LowerCtx& L, const MatmulOperands& m, const TensorRef& part, uint32_t nsplit) {
  const DeviceCaps& c = L.caps();
  const uint32_t biask = m.bias ? storage_kind(c, m.bias->dtype) : 0u, yk = storage_kind(c, m.y.dtype);
  Dispatch& r = L.add("matmul_splitk.h16", {m.bias ? 1u : 0u, biask, yk});
  uint32_t pr = L.read(r, part), bo = m.bias ? L.read(r, *m.bias) : (L.bind_dummy(r), 0u), yo = L.write(r, m.y);
  r.push = {(uint32_t)(m.M * m.N), (uint32_t)m.N, nsplit, pr, bo, yo};
  L.grid(r, cdiv(m.M * m.N, 4), 256);
}

constexpr uint64_t kGroups = 120;  // about one work group per SM of an H100/H200 (132 SMs)

// matmul_cm2's tile: WG invocations own a BM x BN tile of y and step BK deep (UNROLL slices per
// trip of the in-bounds loop); SWZ > 0 walks tiles in bands of SWZ tile rows (the shader says how).
struct Cm2Tile {
  uint32_t wg, bm, bn, bk, unroll = 4, swz = 0;
};

// The tile choice of session 12 (RLX_VK_CM2_PICK=old, kept for same-call comparisons): the largest
// tile that gives about one work group per SM of an H100/H200 (132 SMs; >= 120 groups) without
// splitting K; else 128x128 tiles (64x64 for M <= 64) with K split until they do (chunks >= 1024).
// Measured on the H200 (docs/benchmarks.md): the d-4096 decoder's gate/up linears (M 512,
// N 14336) ran best on 128x256 tiles, q/o (N 4096, K 4096) on unsplit 128x128, k/v (N 1024)
// on 128x128 split 4 ways; more groups (two per SM) or deeper splits were slower.
const Cm2Tile* cm2_pick_old(const MatmulOperands& m, const std::vector<Cm2Tile>& tiles,
                            const std::function<bool(const Cm2Tile&)>& fits) {
  const Cm2Tile* pick = nullptr;
  const Cm2Tile* mid = nullptr;  // the 128x128 tile, for split-K
  // A tile mostly past the matrix's edge is skipped while a smaller one remains: ResNet's
  // convolutions as products have N (output channels) 64 or 128, where 128x256 tiles computed
  // 4x or 2x what was kept.
  auto used = [&](const Cm2Tile& t) {
    return (double)m.N / ((double)cdiv(m.N, t.bn) * t.bn) * ((double)m.M / ((double)cdiv(m.M, t.bm) * t.bm));
  };
  for (const auto& t : tiles) {
    if (!fits(t)) continue;
    if (!mid && t.bm == 128 && t.bn == 128) mid = &t;
    if (used(t) < 0.7 && &t != &tiles.back()) continue;
    if ((uint64_t)cdiv(m.M, t.bm) * cdiv(m.N, t.bn) * m.batch >= kGroups) {
      pick = &t;
      break;
    }
  }
  // A batch of products (a convolution's images) has groups to spare: the tile that wastes
  // least past the edges (ResNet-50's 28x28 outputs: 784 columns fill 128-wide tiles to 88%,
  // 256-wide ones to 77%).
  if (m.batch > 1 && pick)
    for (const auto& t : tiles)
      if (fits(t) && used(t) > used(*pick) + 0.05 && (uint64_t)cdiv(m.M, t.bm) * cdiv(m.N, t.bn) * m.batch >= kGroups)
        pick = &t;
  if (!pick && m.M > 64) pick = mid;
  if (!pick)  // few rows: the smallest tile that fits
    for (auto it = tiles.rbegin(); it != tiles.rend(); ++it)
      if (!pick && fits(*it)) pick = &*it;
  return pick;
}

// Short products (K < 1024: ViT's linears, ResNet's 1x1 convolutions), measured on the H200
// (docs/benchmarks.md, session 13): 128x256 tiles lost to 128x128 ones on every one (a few
// K-steps per tile leave the prologue and the store exposed; smaller tiles keep more groups in
// flight), and 64x64 tiles of 128 invocations won where 128-wide tiles would be mostly past the
// edge (N = 49 or M = 64) or K <= 128.
const Cm2Tile* cm2_pick_short(const MatmulOperands& m, const std::vector<Cm2Tile>& tiles,
                              const std::function<bool(const Cm2Tile&)>& fits) {
  const Cm2Tile *mid = nullptr, *small = nullptr;
  for (const auto& t : tiles) {
    if (!fits(t)) continue;
    if (!mid && t.bm == 128 && t.bn == 128) mid = &t;
    if (!small && t.bm == 64 && t.bn == 64) small = &t;
  }
  if (!mid || !small) return mid ? mid : small;
  auto used = [&](const Cm2Tile& t) {
    return (double)m.N / ((double)cdiv(m.N, t.bn) * t.bn) * ((double)m.M / ((double)cdiv(m.M, t.bm) * t.bm));
  };
  return m.K <= 128 || used(*small) > used(*mid) + 0.1 ? small : mid;
}

// matmul_cm2: a BM x BN tile per work group of WG invocations, BK-deep slices.

bool cm2(LowerCtx& L, const MatmulOperands& m, uint32_t tk) {
  const DeviceCaps& c = L.caps();
  const auto& flex = tk == 1 ? c.cm2_f16 : c.cm2_bf16;
  if (flex.empty()) return false;
  using Tile = Cm2Tile;
  std::vector<Tile> tiles = {{256, 128, 256, 64}, {256, 128, 128, 64}, {128, 64, 64, 64}};
  bool forced = false;
  const char* forced_tile = std::getenv("RLX_VK_CM2");
  if (!(forced_tile && *forced_tile) && !m.tile.empty()) forced_tile = m.tile.c_str();
  if (const char* e = forced_tile; e && *e) {
    Tile t{};
    t.unroll = 4;
    int got = std::sscanf(e, "%ux%ux%ux%ux%ux%u", &t.wg, &t.bm, &t.bn, &t.bk, &t.unroll, &t.swz);
    if (got < 4 || !t.wg || !t.bm || !t.bn || !t.bk || !t.unroll)
      L.fail("RLX_VK_CM2 must be WGxBMxBNxBK[xUNROLL[xSWZ]]");
    tiles = {t};
    forced = true;
  }
  std::function<bool(const Tile&)> fits = [&](const Tile& t) {
    if (t.bm > c.cm2_max_dim || t.bn > c.cm2_max_dim || t.bk > c.cm2_max_dim || t.wg > c.cm2_max_wg ||
        t.wg > c.max_wg_invocations)
      return false;
    for (const auto& f : flex)
      if (f.wg == t.wg && t.bm % f.mg == 0 && t.bn % f.ng == 0 && t.bk % f.kg == 0) return true;
    return false;
  };
  const char* pk = std::getenv("RLX_VK_CM2_PICK");
  const bool old = pk && std::strcmp(pk, "old") == 0;
  if (pk && *pk && !old) L.fail("RLX_VK_CM2_PICK must be old (or unset)");
  const Tile* pick = forced || old || m.K >= 1024 ? cm2_pick_old(m, tiles, fits) : cm2_pick_short(m, tiles, fits);
  if (!pick) return false;
  Tile t = *pick;
  // The 128x256 tile over b as [K, N] (a . b, one product): 32-deep slices, 8 per trip, measured
  // 3-4% faster on 4096^3 in three calls (H200, session 13); over b as [N, K] (linear's weight)
  // they were 3-6% slower, and batches of convolution products were not measured.
  if (!forced && !old && t.bm == 128 && t.bn == 256 && t.bk == 64 && !m.ta && !m.tb && m.batch == 1 &&
      m.K >= 1024)
    t.bk = 32, t.unroll = 8;
  if (const char* e = std::getenv("RLX_VK_CM2_SWZ"); e && *e && !forced) t.swz = (uint32_t)std::atoi(e);
  const char* fst = std::getenv("RLX_VK_CM2_FSTORE");
  const uint32_t fstore = fst && *fst == '0' ? 0u : 1u;
  // The prefetching loop: for measuring only (1.8x slower on the H200, docs/benchmarks.md).
  const char* pf = std::getenv("RLX_VK_CM2_PREF");
  const uint32_t pref = pf && *pf == '1' ? 1u : 0u;
  // A residual loaded as one matrix per tile (spec constant RESL) unless RLX_VK_CM2_RESL=0 (one
  // load per element in the epilogue, as before session 15)
  const char* rl = std::getenv("RLX_VK_CM2_RESL");
  const uint32_t resl = m.residual && !(rl && *rl == '0') ? 1u : 0u;
  // GELU folded in (m.act 2, 3; kernels_conv_gemm.cpp says when) runs after the rounding (spec
  // constant ACTS): by default (2) over the rounded tile stored to y, read back and written
  // over by the same work group; RLX_VK_CM2_ACTS=1 stages the tile in shared memory instead
  // (measured slower; where it does not fit beside the driver's reserved shared memory the
  // product is not taken with its GELU), =0 applies it per element before the rounding (slower).
  const char* as = std::getenv("RLX_VK_CM2_ACTS");
  uint32_t acts = 0;
  if (m.act >= 2) {
    acts = as && *as ? (uint32_t)std::atoi(as) : 2u;
    if (acts > 2) L.fail("RLX_VK_CM2_ACTS must be 0, 1 or 2");
    if (acts == 1 && (uint64_t)t.bm * t.bn * 2 + c.cm2_reserved_shared > c.max_shared_bytes) return false;
  }
  if (m.fold_p && (m.batch != 1 || m.partials || (m.residual && !resl) || m.N % m.fold_p)) return false;
  uint64_t gx = cdiv(m.N, t.bn), gy = cdiv(m.M, t.bm);
  if (gx > c.max_groups[0] || gy > c.max_groups[1] || (uint64_t)m.batch > c.max_groups[2]) return false;
  if ((uint64_t)m.batch * std::max({m.abat, m.bbat, m.ybat}) > UINT32_MAX) return false;
  // chunks at multiples of 256 keep the split parts on the shader's aligned path
  // (Not with a bias per row: matmul_splitk adds the bias per column. A batch-1 convolution's
  // product with few tiles and K >= 2048 split here and got its bias added per column.)
  uint64_t want = 1;
  const bool may_split = m.batch == 1 && (m.fold_p ? !m.fold_unsplit : !(m.bias && m.bias_rows && !m.partials));
  while (may_split && gx * gy * want < kGroups && (uint64_t)m.K / (2 * want) >= 1024) want *= 2;
  if (const char* e = std::getenv("RLX_VK_SPLITK"); e && *e && may_split) want = std::max(1, std::atoi(e));
  while (want > 1 && want * (uint64_t)m.M * m.N * 4 > view_budget(c)) want /= 2;  // the partials must fit a binding
  const uint32_t align = std::max<uint32_t>(256, t.bk);
  const uint32_t kchunk = cdiv(cdiv(m.K, want), align) * align, nsplit = cdiv(m.K, kchunk);
  if (nsplit > c.max_groups[2]) return false;
  const bool split = nsplit > 1;
  if (m.fold_p && split) return false;  // the caller's split route (partials summed into NCHW)
  const uint32_t biask = m.bias ? storage_kind(c, m.bias->dtype) : 0u, yk = storage_kind(c, m.y.dtype);
  if (!split && yk != 0 && yk != tk) return false;  // y is f32 or the operands' type
  if ((m.residual || m.act) && (split || yk != tk || storage_kind(c, m.residual ? m.residual->dtype : m.y.dtype) != yk))
    return false;  // the epilogue: unsplit, in the operands' 16-bit type
  if (m.partials && (m.residual || m.act)) return false;  // the caller sums and finishes
  TensorRef part;
  if (split) part = L.scratch((int64_t)nsplit * m.M * m.N);
  Dispatch& d = L.add(tk == 1 ? "matmul_cm2.f16" : "matmul_cm2.bf16",
                      {t.wg, t.bm, t.bn, t.bk, m.ta, m.tb, m.bias && !split ? (m.bias_rows ? 2u : 1u) : 0u, biask,
                       split ? 0u : yk, split ? 1u : 0u, t.unroll, m.batch > 1 ? 1u : 0u, m.residual ? 1u : 0u,
                       m.act, t.swz, fstore, pref, resl, acts, (uint32_t)m.fold_p});
  uint32_t ao = L.read(d, m.A), bo = L.read(d, m.B);
  uint32_t biaso = m.bias && !split ? L.read(d, *m.bias) : (L.bind_dummy(d), 0u);
  uint32_t yo = L.write(d, split ? part : m.y);
  uint32_t ro = m.residual ? L.read(d, *m.residual) : (L.bind_dummy(d), 0u);
  d.push = {(uint32_t)m.M, (uint32_t)m.N, (uint32_t)m.K, ao, bo, biaso, yo, kchunk,
            (uint32_t)m.abat, (uint32_t)m.bbat, (uint32_t)m.ybat, ro};
  d.groups[0] = (uint32_t)gx;
  d.groups[1] = (uint32_t)gy;
  d.groups[2] = m.batch > 1 ? (uint32_t)m.batch : nsplit;
  if (m.partials) {
    *m.partials = split ? part : m.y;
    *m.nsplit = nsplit;
  } else if (split) {
    splitk_sum(L, m, part, nsplit);
  }
  return true;
}

// matmul_cm1 (KHR) and matmul_coop (NV): subgroup matrices of shape LM x LN x LK; shaders/matmul_coop.comp
// says how. Needs rows of 8 halves (K, and M or N where they are the contiguous dim, and the
// offsets, multiples of 8) for the 16-byte loads.
// The subgroup kernels' (matmul_cm1, matmul_cm1p) operands, push constants and grid on d, then
// split-K's sum where `part` (the partial products) is given; false, with d dropped, where a or b
// is not 16-byte aligned (the caller's next route then).
bool bind_subgroup_product(LowerCtx& L, Dispatch& d, const MatmulOperands& m, const TensorRef* part, uint32_t yk,
                           uint32_t kchunk, uint64_t gx, uint64_t gy, uint32_t nsplit) {
  uint32_t ao = L.read(d, m.A), bo = L.read(d, m.B);
  uint32_t biaso = m.bias && !part ? L.read(d, *m.bias) : (L.bind_dummy(d), 0u);
  uint32_t yo = L.write(d, part ? *part : m.y);
  const uint32_t ydt = part ? 0u : yk, align = ydt == 0 ? 4 : 8;  // 16-byte rows for direct stores
  d.spec[17] = ydt != 2 && yo % align == 0 && m.N % align == 0;
  if (ao % 8 || bo % 8) {
    L.drop_last();
    return false;
  }
  d.push = {(uint32_t)m.M, (uint32_t)m.N, (uint32_t)m.K, ao, bo, biaso, yo, kchunk};
  d.groups[0] = (uint32_t)gx;
  d.groups[1] = (uint32_t)gy;
  d.groups[2] = nsplit;
  if (part) splitk_sum(L, m, *part, nsplit);
  return true;
}

bool subgroup_coop(LowerCtx& L, const MatmulOperands& m, const std::string& shader,
                   const std::vector<DeviceCaps::CoopShape>& shapes) {
  const DeviceCaps& c = L.caps();
  const DeviceCaps::CoopShape* sh = nullptr;
  // 16x8x16 (the hardware's mma shape on NVIDIA) measured a little faster than 16x16x16 on the H100.
  std::vector<std::array<uint32_t, 3>> prefer = {{16, 8, 16}, {16, 16, 16}};
  if (const char* e = std::getenv("RLX_VK_COOP_SHAPE")) {
    uint32_t a = 0, b = 0, k = 0;
    std::sscanf(e, "%ux%ux%u", &a, &b, &k);
    prefer = {{a, b, k}};
  }
  for (const auto& want : prefer)
    for (const auto& q : shapes)
      if (!sh && q.m == want[0] && q.n == want[1] && q.k == want[2]) sh = &q;
  for (const auto& q : shapes)
    if (!sh && q.m % 8 == 0 && q.n % 8 == 0 && q.k % 8 == 0 && 32 % q.m == 0 && 64 % q.n == 0 && 32 % q.k == 0) sh = &q;
  if (!sh) return false;
  const int64_t M = m.M, N = m.N, K = m.K;
  if (K % 8 || (m.ta && M % 8) || (!m.tb && N % 8)) return false;
  // 8 subgroups per work group, 128x128 tiles of 64x32 per subgroup: on the H100 this beat
  // 64x64, 64x128 and 128x64 tiles and 4 subgroups of 64x64 for the 4096^3 product and every
  // linear of the d-4096 decoder (M 512), few tiles being better served by split-K below.
  uint32_t BM = 128, BN = 128, BK = 32, WM = 64, WN = 32;
  if (const char* e = std::getenv("RLX_VK_COOP")) {  // benchmarking: "BMxBNxWMxWN[xBK]"
    int got = std::sscanf(e, "%ux%ux%ux%ux%u", &BM, &BN, &WM, &WN, &BK);
    if (got < 4 || !WM || !WN || BM % WM || BN % WN || WM % sh->m || WN % sh->n || BM % 8 || BN % 8 || BK % sh->k ||
        BK % 8)
      L.fail("RLX_VK_COOP must be BMxBNxWMxWN[xBK] with BM % WM = BN % WN = 0, WM, WN multiples of the MMA shape, "
             "BK of its K");
  }
  const uint32_t SG = c.subgroup_size, warps = (BM / WM) * (BN / WN), wg = warps * SG;
  uint64_t shared = 16ull * 2 * ((m.ta ? BK * (BM + 8) : BM * (BK + 8)) / 8 + (m.tb ? BN * (BK + 8) : BK * (BN + 8)) / 8) +
                    4ull * std::max<uint64_t>((uint64_t)warps * sh->m * sh->n, (uint64_t)sh->m * BN);
  if (wg > c.max_wg_invocations || shared > c.max_shared_bytes) return false;
  uint64_t gx = cdiv(N, BN), gy = cdiv(M, BM);
  if (gx > c.max_groups[0] || gy > c.max_groups[1]) return false;
  const uint32_t kchunk = split_for(gx * gy, K, BK, (uint64_t)M * N, view_budget(c)), nsplit = cdiv(K, kchunk);
  if (nsplit > c.max_groups[2]) return false;
  const uint32_t biask = m.bias ? storage_kind(c, m.bias->dtype) : 0u, yk = storage_kind(c, m.y.dtype);
  bool split = nsplit > 1;
  TensorRef part;
  if (split) part = L.scratch((int64_t)nsplit * M * N);
  Dispatch& d = L.add(shader, {BM, BN, BK, WM, WN, m.ta, m.tb, m.bias && !split ? 1u : 0u, sh->m, sh->n, wg, sh->k,
                               split ? 1u : 0u, biask, split ? 0u : yk, SG});
  d.spec.resize(18, 0);
  if (const char* e = std::getenv("RLX_VK_COOP_PROBE")) d.spec[16] = (uint32_t)std::atoi(e);  // tuning only
  return bind_subgroup_product(L, d, m, split ? &part : nullptr, yk, kchunk, gx, gy, nsplit);
}

// matmul_cm1p (KHR, prebuilt; shaders/prebuilt/matmul_cm1p.comp says how): subgroup matrices,
// per-subgroup tiles of WM x WN, PD register sets of global loads in flight. Same operand
// requirements as matmul_cm1 (rows of 8 halves for the 16-byte loads). Tile from
// RLX_VK_CM1P=BMxBNxWMxWNxBKxPD[xSWZ] (tuning), else 128x128 tiles of 4 subgroups of 64x64,
// 32-deep slices, one set in flight (two measured 1.3-1.6x slower on the H200, session 15);
// the fragment shape 16x16x16 where listed (RLX_VK_CM1P_SHAPE=MxNxK forces another).
struct PipeTile {
  uint32_t bm = 128, bn = 128, wm = 64, wn = 64, bk = 32, pd = 1, swz = 0;
};

bool subgroup_pipe(LowerCtx& L, const MatmulOperands& m, const std::string& shader,
                   const std::vector<DeviceCaps::CoopShape>& shapes) {
  const DeviceCaps& c = L.caps();
  std::array<uint32_t, 3> want = {16, 16, 16};
  if (const char* e = std::getenv("RLX_VK_CM1P_SHAPE"); e && *e) std::sscanf(e, "%ux%ux%u", &want[0], &want[1], &want[2]);
  const DeviceCaps::CoopShape* sh = nullptr;
  for (const auto& q : shapes)
    if (!sh && q.m == want[0] && q.n == want[1] && q.k == want[2]) sh = &q;
  if (!sh || sh->m % 8 || sh->n % 8 || sh->k % 8 || (sh->m * sh->n) % 4) return false;
  const int64_t M = m.M, N = m.N, K = m.K;
  if (K % 8 || (m.ta && M % 8) || (!m.tb && N % 8)) return false;
  PipeTile t;
  if (const char* e = std::getenv("RLX_VK_CM1P"); e && *e) {
    int got = std::sscanf(e, "%ux%ux%ux%ux%ux%ux%u", &t.bm, &t.bn, &t.wm, &t.wn, &t.bk, &t.pd, &t.swz);
    if (got < 6 || !t.wm || !t.wn || t.bm % t.wm || t.bn % t.wn || t.bm % 8 || t.bn % 8 || !t.bk || t.bk % 8 ||
        (t.pd != 1 && t.pd != 2))
      L.fail("RLX_VK_CM1P must be BMxBNxWMxWNxBKxPD[xSWZ] with BM % WM = BN % WN = 0, BK a multiple of 8, PD 1 or 2");
  }
  if (t.wm % sh->m || t.wn % sh->n || t.bk % sh->k || (t.bn * sh->m) % 4) return false;
  const uint32_t SG = c.subgroup_size, warps = (t.bm / t.wm) * (t.bn / t.wn), wg = warps * SG;
  const uint64_t asz = m.ta ? t.bk * (t.bm + 8) / 8 : t.bm * (t.bk + 8) / 8,
                 bsz = m.tb ? t.bn * (t.bk + 8) / 8 : t.bk * (t.bn + 8) / 8,
                 csv = std::max<uint64_t>((uint64_t)warps * sh->m * sh->n, (uint64_t)sh->m * t.bn) / 4;
  const uint64_t shared = 16 * std::max<uint64_t>(2 * (asz + bsz), csv);
  if (wg > c.max_wg_invocations || shared > c.max_shared_bytes) return false;
  uint64_t gx = cdiv(N, t.bn), gy = cdiv(M, t.bm);
  if (gx > c.max_groups[0] || gy > c.max_groups[1]) return false;
  const uint32_t kchunk = split_for(gx * gy, K, t.bk, (uint64_t)M * N, view_budget(c)), nsplit = cdiv(K, kchunk);
  if (nsplit > c.max_groups[2]) return false;
  const uint32_t biask = m.bias ? storage_kind(c, m.bias->dtype) : 0u, yk = storage_kind(c, m.y.dtype);
  const bool split = nsplit > 1;
  TensorRef part;
  if (split) part = L.scratch((int64_t)nsplit * M * N);
  Dispatch& d = L.add(shader, {t.bm, t.bn, t.bk, t.wm, t.wn, m.ta, m.tb, m.bias && !split ? 1u : 0u, sh->m, sh->n, wg,
                               sh->k, split ? 1u : 0u, biask, split ? 0u : yk, SG, t.pd, 0u, t.swz});
  return bind_subgroup_product(L, d, m, split ? &part : nullptr, yk, kchunk, gx, gy, nsplit);
}

// Whether matmul_cm1p is tried before matmul_cm2: RLX_VK_KHRP=1 (or a forced RLX_VK_CM1P tile)
// for every product it takes; never by default. Measured on the H200 (docs/benchmarks.md,
// session 15) it lost 1.3-1.8x to matmul_cm2 on 4096^3, ViT-S's linears and the d-4096
// decoder's q/o, gate/up and down linears; it won on long-K products over few tiles in some
// shapes (the decoder's k/v, M 512 N 1024 K 4096: 1.25x and 1.1x in two calls; K 14336: 1.4x)
// and lost 1.4x on their neighbours (N 2048, M 256 or 1024), so no default rule was kept.
bool pipe_wanted(const MatmulOperands&) {
  const char* e = std::getenv("RLX_VK_KHRP");
  if (e && *e) return *e == '1';
  const char* t = std::getenv("RLX_VK_CM1P");
  return t && *t;
}

}  // namespace

bool lower_matmul_tensor_cores(LowerCtx& L, const MatmulOperands& m) {
  const DeviceCaps& c = L.caps();
  if (m.M == 0 || m.N == 0 || m.K == 0) return false;
  const uint32_t ak = storage_kind(c, m.A.dtype), bk = storage_kind(c, m.B.dtype);
  if (ak != bk || (ak != 1 && ak != 2)) return false;
  const bool plain = m.batch == 1 && !m.bias_rows && !m.residual && !m.act && !m.partials && !m.fold_p;  // cm2 alone has the rest
  if (plain && c.coop_khr && pipe_wanted(m) &&
      subgroup_pipe(L, m, ak == 1 ? "matmul_cm1p.f16" : "matmul_cm1p.bf16", ak == 1 ? c.khr_f16 : c.khr_bf16))
    return true;
  if (c.cm2 && cm2(L, m, ak)) return true;
  if (!plain) return false;
  if (c.coop_khr && subgroup_coop(L, m, ak == 1 ? "matmul_cm1.f16" : "matmul_cm1.bf16", ak == 1 ? c.khr_f16 : c.khr_bf16))
    return true;
  if (ak == 1 && c.coop_nv) {
    const char* s16 = std::getenv("RLX_VK_COOP_S16");
    return subgroup_coop(L, m, s16 && *s16 == '1' ? "matmul_coop.s16" : "matmul_coop", c.coop_f16);
  }
  return false;
}

const DeviceCaps::CoopShape* flash_attention_shape(const DeviceCaps& c, uint32_t qk) {
  if (const char* e = std::getenv("RLX_VK_FLASH_COOP"); e && *e == '0') return nullptr;  // turned off
  if (c.subgroup_size != 32 || c.max_wg_invocations < 128) return nullptr;
  // f16: attention_coop (VK_NV_cooperative_matrix); bf16: the prebuilt attention_cm1.bf16
  // (VK_KHR_cooperative_matrix, where the device lists bf16 shapes; shaders/prebuilt/)
  if (qk == 1 ? !c.coop_nv_usable() : (qk != 2 || !c.coop_khr)) return nullptr;
  for (uint32_t n : {16u, 8u})
    for (const auto& s : qk == 1 ? c.coop_f16 : c.khr_bf16)
      if (s.m == 16 && s.n == n && s.k == 16) return &s;
  return nullptr;
}

namespace {

// attention_coop_rows.comp's shape: nw subgroups of 16 query rows each, bc keys per block (nw 0:
// attention_coop.comp instead).
struct RowsVariant {
  uint32_t nw = 0, bc = 0;
};

// Shared memory attention_coop_rows.comp uses (bytes): two k/v buffers of bc rows and one
// 16 x (bc + 4) f32 region per subgroup; 0 where the q block (16 nw rows) does not fit in the
// k/v buffers, where the shader stages it.
uint64_t rows_shared_bytes(uint64_t D, uint64_t Dv, uint32_t nw, uint32_t bc) {
  const uint64_t kvb = bc * (D / 8 + 1 + Dv / 8 + 1);
  if (16ull * nw * (D / 8 + 1) > 2 * kvb) return 0;
  return 16 * (2 * kvb + nw * 16ull * (bc / 4 + 1));
}

// The f16 kernel by shape: many query rows per work group and one barrier per key block
// (attention_coop_rows.comp) where it fits the device, attention_coop.comp otherwise. Blocks of
// 32 keys; as many subgroups as shared memory allows (at most 16), then as few as cover the
// packed rows of one (batch, kv head) in that many work groups (ViT-S's 197 rows: 13 subgroups,
// one work group). RLX_VK_FLASH_ROWS=0 keeps attention_coop.comp; =NW:BC forces that shape
// (tuning, tests).
RowsVariant rows_variant(const DeviceCaps& c, const AttentionOperands& a) {
  auto fits = [&](uint32_t nw, uint32_t bc) {
    const uint64_t bytes = rows_shared_bytes(a.D, a.Dv, nw, bc);
    return bytes && bytes <= c.max_shared_bytes && 32 * nw <= c.max_wg_invocations;
  };
  if (const char* e = std::getenv("RLX_VK_FLASH_ROWS"); e && *e) {
    unsigned nw = 0, bc = 0;
    if (std::sscanf(e, "%u:%u", &nw, &bc) != 2 || nw < 1 || nw > 16 || (bc != 32 && bc != 64) || !fits(nw, bc)) return {};
    return {nw, bc};
  }
  if (a.D > 64 || a.Dv > 64) return {};  // head dim 128 (the d-4096 block): attention_coop.comp measured faster
  uint32_t most = 0;
  for (uint32_t nw = 1; nw <= 16; ++nw)
    if (fits(nw, 32)) most = nw;
  if (most < 2) return {};
  const uint64_t nrows = (uint64_t)(a.Hq / a.Hkv) * a.Sq, groups = cdiv(nrows, 16 * most);
  return {cdiv(nrows, 16 * groups), 32};
}

// attention_coop_rows.comp's per-row rescale of O (spec constant RS): 0 a matrix of factors through
// shared memory, O divided by it; RLX_VK_FLASH_RESCALE=shuffle: each component's factor by
// subgroup shuffle (for comparison).
uint32_t rows_rescale() {
  const char* e = std::getenv("RLX_VK_FLASH_RESCALE");
  return e && std::strcmp(e, "shuffle") == 0 ? 1u : 0u;
}

}  // namespace

bool lower_attention_tensor_cores(LowerCtx& L, const AttentionOperands& a) {
  const DeviceCaps& c = L.caps();
  const char* env = std::getenv("RLX_VK_FLASH_COOP");
  const bool force = env && *env == '1';  // even for few query rows (=0: flash_attention_shape)
  const uint32_t qk = storage_kind(c, a.q.dtype);
  if (storage_kind(c, a.k.dtype) != qk || storage_kind(c, a.v.dtype) != qk) return false;
  const DeviceCaps::CoopShape* sh = flash_attention_shape(c, qk);
  if (!sh) return false;
  if (a.D % 16 || a.Dv % 16 || a.D > 128 || a.Dv > 128 || a.D == 0 || a.Dv == 0) return false;
  const uint64_t nrows = (uint64_t)(a.Hq / a.Hkv) * a.Sq;
  if (nrows < 64 && !force) return false;
  // shared memory as the shader lays it out (32 query rows, 64 keys per block)
  const uint64_t qrs = a.D / 8 + 1, vrs = a.Dv / 8 + 1, shared = 16 * (32 * qrs + 64 * std::max(qrs, vrs) + 32 * 9) +
                                                               4 * 32 * std::max<uint64_t>(68, a.Dv + 4);
  const RowsVariant rows = qk == 1 && sh->n == 16 ? rows_variant(c, a) : RowsVariant{};
  if (!rows.nw && shared > c.max_shared_bytes) return false;
  for (int t = 0; t < 4; ++t)
    for (int j = 0; j < 3; ++j)
      if (a.st[t][j] < 0 || a.st[t][j] > UINT32_MAX || (t < 3 && a.st[t][j] % 8)) return false;
  if (qk != 1 && a.strided) return false;  // attention_cm1 (prebuilt) has no strides
  const uint64_t br = rows.nw ? 16 * rows.nw : 32, qblocks = cdiv(nrows, br);
  if (qblocks > c.max_groups[0] || (uint64_t)a.Hkv > c.max_groups[1] || (uint64_t)a.B > c.max_groups[2]) return false;
  const uint32_t mk = a.mask ? storage_kind(c, a.mask->dtype) : 0u, ok = storage_kind(c, a.y.dtype);
  Dispatch& d = rows.nw ? L.add("attention_coop_rows", {(uint32_t)a.D, (uint32_t)a.Dv, 16u, 16u, 16u, 0u, mk, ok,
                                                        rows.nw, rows.bc, 32 * rows.nw, rows_rescale()})
                        : L.add(qk == 1 ? "attention_coop" : "attention_cm1.bf16",
                                {(uint32_t)a.D, (uint32_t)a.Dv, sh->m, sh->n, sh->k, 0u, mk, ok});
  uint32_t qo = L.read(d, a.q), ko = L.read(d, a.k), vo = L.read(d, a.v);
  uint32_t mo = a.mask ? L.read(d, *a.mask) : (L.bind_dummy(d), 0u);
  uint32_t oo = L.write(d, a.y);
  if (qo % 8 || ko % 8 || vo % 8) {  // not 16-byte aligned: the scalar kernels instead
    L.drop_last();
    return false;
  }
  auto f2u = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  d.push = {(uint32_t)a.Sq, (uint32_t)a.Sk, (uint32_t)a.Hq, (uint32_t)(a.Hq / a.Hkv), (uint32_t)a.Hkv, qo, ko, vo,
            mo, oo, f2u(a.scale), (uint32_t)a.msb, (uint32_t)a.msh, (uint32_t)a.msi, (uint32_t)a.msj,
            (uint32_t)a.Sk, 1u, a.mask_kind, a.causal, 0u};
  for (int t = 0; t < 4; ++t)  // appended: the prebuilt bf16 kernel's 20 words keep their places
    for (int j = 0; j < 3; ++j) d.push.push_back((uint32_t)a.st[t][j]);
  d.groups[0] = (uint32_t)qblocks;
  d.groups[1] = (uint32_t)a.Hkv;
  d.groups[2] = (uint32_t)a.B;
  return true;
}

}  // namespace rlx::vk
