// A 2-D convolution (groups 1, f16) as an implicit matrix product on tensor cores
// (VK_NV_cooperative_matrix2; the prebuilt shaders/prebuilt/conv_cm2.comp): per image,
// y[n] [M, OH*OW] = w [M, K] . col[n] with col's slices gathered from x inside the product, so
// no im2col matrix is written and read back (kernels_conv_gemm.cpp's route, which this one
// precedes; RLX_VK_CONV=im2col keeps that one, for comparing). Figures: docs/benchmarks.md,
// session 13.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backends/vulkan/kernels.h"
#include "ir/spatial.h"

namespace rlx::vk {
namespace {
uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
}  // namespace

bool lower_conv_implicit(LowerCtx& L, const ir::Conv2dGeom& g, const TensorRef& x, const TensorRef& w,
                         const TensorRef* bias, const TensorRef& y, const TensorRef* residual, uint32_t act,
                         bool any_shape) {
  const DeviceCaps& c = L.caps();
  if (!c.cm2 || c.cm2_f16.empty() || storage_kind(c, x.dtype) != 1u) return false;
  if (act > 1u) return false;  // ReLU only (GELU stays a kernel of its own)
  const int64_t P = g.OH * g.OW, K = g.C * g.kH * g.kW, M = g.M;
  // Where it beat the im2col route on the H200 (docs/benchmarks.md, session 13): few output
  // channels (ResNet-50's 7x7 stem and its 64- and 128-channel 3x3 convolutions); with more,
  // each of the several row tiles gathers the same slices again and the im2col route won.
  long max_m = 128;
  if (const char* e = std::getenv("RLX_VK_CONV_IMPLICIT_M"); e && *e) max_m = std::atol(e);
  if (!any_shape && M > max_m) return false;
  if ((uint64_t)g.N * M * P > UINT32_MAX || x.numel() > UINT32_MAX || (uint64_t)M * K > UINT32_MAX) return false;
  if (g.sH > INT32_MAX || g.sW > INT32_MAX || g.dH > INT32_MAX || g.dW > INT32_MAX || g.pt > INT32_MAX ||
      g.pl > INT32_MAX)
    return false;
  struct Tile {
    uint32_t wg, bm, bn, bk;
  };
  // Candidates, the best-filled first among those that give >= 120 work groups (about one per SM
  // of an H100/H200); BN divides WG (the gather's rows per pass) and BK is a multiple of WG/BN.
  // Measured on the H200 (ResNet-50 f16, batch 32; docs/benchmarks.md, session 13): 16-deep
  // slices beat 32-deep ones, 64x128 tiles for 64 output
  // channels and 128x128 for 128 beat 128x64 and 64x64 ones (layer 2's 3x3 convolutions:
  // 0.142-0.157 ms on 128x128 tiles, 0.241-0.256 on 64x64 ones, 0.206 through im2col).
  std::vector<Tile> tiles = {{256, 128, 128, 16}, {256, 64, 128, 16}};
  // RLX_VK_CONV_TILE=WGxBMxBNxBK[,WGxBMxBNxBK...] (or '+' between): the candidates instead, for tuning
  if (const char* e = std::getenv("RLX_VK_CONV_TILE"); e && *e) {
    tiles.clear();
    for (const char* q = e; q && *q; q = std::strpbrk(q, ",+") ? std::strpbrk(q, ",+") + 1 : nullptr) {
      Tile t{};
      if (std::sscanf(q, "%ux%ux%ux%u", &t.wg, &t.bm, &t.bn, &t.bk) != 4 || !t.wg || !t.bm || !t.bn || !t.bk)
        L.fail("RLX_VK_CONV_TILE must be WGxBMxBNxBK[,...]");
      tiles.push_back(t);
    }
  }
  // Two shared slices (one barrier per slice; spec constant DBUF) unless RLX_VK_CONV_DBUF=0, for
  // measuring (one slice, two barriers: layer 1's 3x3 convolutions 0.204 -> 0.254 ms)
  const char* db = std::getenv("RLX_VK_CONV_DBUF");
  const uint32_t dbuf = db && *db == '0' ? 0u : 1u;
  // RLX_VK_CONV_WSH=1: w's slices through shared memory too, fetched into registers a slice ahead
  // with the gather (spec constant WSH), instead of loaded with tensor addressing right before
  // each product; measured slower (layer 2's 3x3 convolutions 0.166 -> 0.26 ms on the H200,
  // docs/benchmarks.md, session 15), kept for tuning
  const char* ws = std::getenv("RLX_VK_CONV_WSH");
  const uint32_t wsh = ws && *ws == '1' ? 1u : 0u;
  auto fits = [&](const Tile& t) {
    if (t.bm > c.cm2_max_dim || t.bn > c.cm2_max_dim || t.bk > c.cm2_max_dim || t.wg > c.cm2_max_wg ||
        t.wg > c.max_wg_invocations || t.bn > t.wg || t.wg % t.bn || t.bk % (t.wg / t.bn) || (wsh && t.bk % 8))
      return false;
    const uint64_t sh = (dbuf ? 2ull : 1ull) * ((uint64_t)t.bk * (t.bn + 8) + (wsh ? (uint64_t)t.bm * (t.bk + 8) : 0)) * 2;
    if (sh + c.cm2_reserved_shared > c.max_shared_bytes) return false;
    for (const auto& f : c.cm2_f16)
      if (f.wg == t.wg && t.bm % f.mg == 0 && t.bn % f.ng == 0 && t.bk % f.kg == 0) return true;
    return false;
  };
  auto used = [&](const Tile& t) {
    return (double)P / ((double)cdiv(P, t.bn) * t.bn) * ((double)M / ((double)cdiv(M, t.bm) * t.bm));
  };
  const Tile* pick = nullptr;
  for (const auto& t : tiles) {
    if (!fits(t)) continue;
    const bool enough = cdiv(M, t.bm) * cdiv(P, t.bn) * (uint64_t)g.N >= 120;
    if (!pick || (enough && used(t) > used(*pick) + 0.05)) pick = &t;
  }
  if (!pick) return false;
  const Tile t = *pick;
  // Output positions per gathering invocation (spec constant VEC): consecutive ones of one output
  // row share the tap's decomposition, bounds and row address, so the gather, which bounds these
  // kernels more than the tensor cores do, takes fewer instructions per element (session 15).
  // The most of RLX_VK_CONV_VEC (default 4) that OW and the tile allow; 1 is session 13's gather.
  // Measured on the H200 (ResNet-50 f16, batch 32, docs/benchmarks.md, session 15): layer 1's
  // 3x3 convolutions 0.640 -> 0.428 ms (3), layer 2's 0.637 -> 0.462 (4), the stem 0.229 -> 0.174;
  // 8 measured the same as 4, 2 in between.
  uint32_t vec = 4;
  if (const char* e = std::getenv("RLX_VK_CONV_VEC"); e && *e) vec = (uint32_t)std::max(1, std::atoi(e));
  auto vec_ok = [&](uint32_t v) {
    if (v == 1) return true;
    if (g.OW % v || t.bn % v || t.wg % (t.bn / v)) return false;
    const uint32_t rows = t.wg / (t.bn / v);
    return rows <= t.bk && t.bk % rows == 0;
  };
  while (vec > 1 && !vec_ok(vec)) vec /= 2;
  // The kernel's size as spec constants (KHS, KWS: the gather's advance through K without a loop)
  // for kernels up to 3x3 unless RLX_VK_CONV_KCONST=0 (=1: any size up to 16x16). On the H200
  // (session 15) layer 2's 3x3 convolutions 0.463 -> 0.447 ms, layer 1's the same, the 7x7 stem
  // 0.174 -> 0.182 (hence not for it).
  const char* kc = std::getenv("RLX_VK_CONV_KCONST");
  const bool kconst = kc && *kc == '1' ? g.kH <= 16 && g.kW <= 16 : !(kc && *kc == '0') && g.kH <= 3 && g.kW <= 3;
  const uint64_t gx = cdiv(P, t.bn), gy = cdiv(M, t.bm);
  if (gx > c.max_groups[0] || gy > c.max_groups[1] || (uint64_t)g.N > c.max_groups[2]) return false;
  const uint32_t biask = bias ? storage_kind(c, bias->dtype) : 0u;
  if (bias && biask > 1u) return false;
  Dispatch& d = L.add("conv_cm2.f16", {t.wg, t.bm, t.bn, t.bk, bias ? 1u : 0u, biask, residual ? 1u : 0u, act,
                                        dbuf, wsh, vec, kconst ? (uint32_t)g.kH : 0u, kconst ? (uint32_t)g.kW : 0u});
  const uint32_t xo = L.read(d, x), wo = L.read(d, w);
  const uint32_t bo = bias ? L.read(d, *bias) : (L.bind_dummy(d), 0u);
  const uint32_t yo = L.write(d, y);
  const uint32_t ro = residual ? L.read(d, *residual) : (L.bind_dummy(d), 0u);
  auto u = [](int64_t v) { return (uint32_t)v; };
  d.push = {u(M),    u(P),    u(K),    u(g.C),  u(g.H),  u(g.W),  u(g.OW), u(g.kH), u(g.kW), u(g.sH), u(g.sW),
            u(g.dH), u(g.dW), u(g.pt), u(g.pl), xo,      wo,      bo,      yo,      ro,      u(g.C * g.H * g.W),
            u(M * P)};
  d.groups[0] = (uint32_t)gx;
  d.groups[1] = (uint32_t)gy;
  d.groups[2] = (uint32_t)g.N;
  return true;
}

}  // namespace rlx::vk
