// oneDNN convolution primitives for compiled plans (dnnl_conv.h says what and when).
#include "backends/cpu/dnnl_conv.h"

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <immintrin.h>
#include <unordered_map>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/dnnl_api.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/thread_pool.h"
#include "ir/spatial.h"

namespace rlx::cpu {
namespace {

// RLX_CONV_DNNL: 0 = off (rlx's kernels only); all = every convolution oneDNN runs with a jit
// kernel, whatever the rule below says (for measuring); unset or 1 = the rule.
std::string conv_switch() {
  const char* e = std::getenv("RLX_CONV_DNNL");
  return e ? e : "";
}

// oneDNN's table (dnnl_api.h) as the convolutions use it: off under RLX_CONV_DNNL=0.
const DnnlApi& api() {
  static DnnlApi a = [] {
    DnnlApi r;
    if (conv_switch() == "0") {
      r.why = "off: RLX_CONV_DNNL=0";
      return r;
    }
    return dnnl_api();
  }();
  return a;
}

// One slice of the output channels (dense) or of the groups: its primitive and packed weights.
struct Slice {
  int64_t c0 = 0;       // first input channel it reads (0 for a dense conv)
  int64_t m0 = 0, m1 = 0;  // output channels [m0, m1)
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_desc_t src_md{}, w_md{}, b_md{}, dst_md{};
  dnnl_memory_t weights = nullptr;
  DnnlScratch scratch;
};

}  // namespace

struct DnnlConv {
  uint64_t id = 0;  // unique per plan made (keys the threads' reused memory objects)
  ir::Conv2dGeom g;
  int64_t B = 16;          // channel block of the layout
  bool plain_src = false;  // the primitive reads x as NCHW (few input channels: no conversion)
  int64_t CP = 0, MP = 0;  // channels padded to B
  int64_t IS = 0, OS = 0;  // input and output pixels per channel (D H W, OD OH OW)
  // Columns of zeros rlx writes at the left and right of each input row as it converts x, for
  // the shapes whose left or right pad oneDNN's jit kernels refuse (a wide 1-D kernel's pad of
  // 16 or 23: oneDNN would run its reference loop); the primitive then sees a wider input.
  int64_t xpl = 0, xpr = 0;
  int64_t WP() const { return g.W + xpl + xpr; }
  bool padded() const { return xpl || xpr; }
  std::vector<float> bias;  // padded to MP
  std::vector<DnnlEltwise> post;  // post-ops its primitives apply (empty: none)
  bool folded = false;         // the epilogue's leading x * a + b is in the weights and bias
  bool epi_in_kernel = false;  // the epilogue is computed by the primitives (post and folded)
  std::vector<Slice> slices;
  std::string impl;
  ~DnnlConv() {
    const DnnlApi& a = api();
    for (auto& s : slices) {
      if (s.prim) a.prim_destroy(s.prim);
      if (s.weights) a.mem_destroy(s.weights);
    }
  }
};

namespace {

// NCHW planes [c, c + B) of one image (channels past C read as zeros) -> one block of B-channel
// pixels, dst[p * B + j] = src[(c + j) * HW + p].
// (HW pixels; channel j's start at src + j * cs.)
void to_blocked(const float* src, int64_t avail, int64_t HW, int64_t cs, int64_t B, float* dst, const float* scale) {
  constexpr int64_t P = 16;
  for (int64_t p0 = 0; p0 < HW; p0 += P) {
    const int64_t pn = std::min(P, HW - p0);
    for (int64_t j = 0; j < B; ++j) {
      float* d = dst + p0 * B + j;
      if (j < avail) {
        const float* s = src + j * cs + p0;
        const float f = scale ? scale[j] : 1.f;
        if (scale) for (int64_t p = 0; p < pn; ++p) d[p * B] = s[p] * f;
        else for (int64_t p = 0; p < pn; ++p) d[p * B] = s[p];
      } else {
        for (int64_t p = 0; p < pn; ++p) d[p * B] = 0.f;
      }
    }
  }
}

// The inverse for the first `avail` channels of a block.
void from_blocked(const float* src, int64_t avail, int64_t HW, int64_t B, float* dst) {
  constexpr int64_t P = 16;
  for (int64_t p0 = 0; p0 < HW; p0 += P) {
    const int64_t pn = std::min(P, HW - p0);
    for (int64_t j = 0; j < avail; ++j) {
      const float* s = src + p0 * B + j;
      float* d = dst + j * HW + p0;
      for (int64_t p = 0; p < pn; ++p) d[p] = s[p * B];
    }
  }
}

// The same for B = 16 with AVX-512: 16 x 16 tiles transposed in registers (the loops above
// move one float at a time; on a depthwise conv they took 4 times the convolution's own time).
__attribute__((target("avx512f"))) inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]),
                  c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}

__attribute__((target("avx512f"))) void to_blocked16(const float* src, int64_t avail, int64_t HW, int64_t cs,
                                                     float* dst, const float* scale) {
  for (int64_t p0 = 0; p0 < HW; p0 += 16) {
    const int64_t pn = std::min<int64_t>(16, HW - p0);
    const __mmask16 m = (__mmask16)((1u << pn) - 1);
    __m512 r[16];
    for (int j = 0; j < 16; ++j) r[j] = j < avail ? _mm512_maskz_loadu_ps(m, src + j * cs + p0) : _mm512_setzero_ps();
    if (scale)
      for (int j = 0; j < avail; ++j) r[j] = _mm512_mul_ps(r[j], _mm512_set1_ps(scale[j]));
    transpose16(r);
    for (int64_t p = 0; p < pn; ++p) _mm512_storeu_ps(dst + (p0 + p) * 16, r[p]);
  }
}

__attribute__((target("avx512f"))) void from_blocked16(const float* src, int64_t avail, int64_t HW, float* dst) {
  for (int64_t p0 = 0; p0 < HW; p0 += 16) {
    const int64_t pn = std::min<int64_t>(16, HW - p0);
    const __mmask16 m = (__mmask16)((1u << pn) - 1);
    __m512 r[16];
    for (int p = 0; p < 16; ++p) r[p] = p < pn ? _mm512_loadu_ps(src + (p0 + p) * 16) : _mm512_setzero_ps();
    transpose16(r);
    for (int64_t j = 0; j < avail; ++j) _mm512_mask_storeu_ps(dst + j * HW + p0, m, r[j]);
  }
}

// HW pixels of one block of B channels, each channel j < avail scaled by scale[j], the padding
// channels (their values unused) written as zeros.
__attribute__((target("avx512f"))) void scale_blocked16(const float* src, int64_t avail, int64_t HW, const float* scale,
                                                        float* dst) {
  const __mmask16 m = (__mmask16)((1u << avail) - 1);
  const __m512 f = _mm512_maskz_loadu_ps(m, scale);
  for (int64_t p = 0; p < HW; ++p) _mm512_storeu_ps(dst + p * 16, _mm512_maskz_mul_ps(m, _mm512_loadu_ps(src + p * 16), f));
}
void scale_blocked(const float* src, int64_t avail, int64_t HW, int64_t B, const float* scale, float* dst) {
  if (B == 16) {
    scale_blocked16(src, avail, HW, scale, dst);
    return;
  }
  for (int64_t p = 0; p < HW; ++p)
    for (int64_t j = 0; j < B; ++j) dst[p * B + j] = j < avail ? src[p * B + j] * scale[j] : 0.f;
}

void to_blocked_any(const float* src, int64_t avail, int64_t HW, int64_t cs, int64_t B, float* dst,
                    const float* scale) {
  if (B == 16) to_blocked16(src, avail, HW, cs, dst, scale);
  else to_blocked(src, avail, HW, cs, B, dst, scale);
}
void from_blocked_any(const float* src, int64_t avail, int64_t HW, int64_t B, float* dst) {
  if (B == 16) from_blocked16(src, avail, HW, dst);
  else from_blocked(src, avail, HW, B, dst);
}

// Which convolutions oneDNN runs (RLX_CONV_DNNL unset or 1), from measurements on this
// project's machine (docs/benchmarks.md, "oneDNN convolutions"): "" when oneDNN, else why not.
// Per conv (`rlx run --profile`, rlx's kernel against oneDNN with the conversions at its edges;
// mobilenet_v3_small, mnasnet0_5, resnet18/50, efficientnet_b0 at 224x224, 2 threads):
// depthwise 0.07-0.8x rlx's time (one 1.1x); dense 3x3 / 7x7 0.5-0.7x; 1x1 convs are where rlx's
// GEMM reads x in place and the two conversions cost as much as the product: 1.2-2.5x rlx's time
// with few channels (C=240 -> M=48 at 14x14: 1.2x; 72 -> 24 at 28x28: 2.4x), 0.5-0.9x with many
// (576 -> 96 at 7x7: 0.6-0.8x; 160 -> 1280: 0.54x). The product's work per converted element
// is C M / (C + M): 1x1 convs go to oneDNN from 64 up. On a 1x1 map (squeeze-excitation) rlx's one
// product over the batch is 2-5x faster than the primitive.
// 1-D convolutions (2-D with H = 1; `rlx bench` of one conv + ReLU over a row of 1601, and the
// zoo's wav2letter and conv_tasnet per conv; load 5-7, so ratios within 20% are even): depthwise
// k=3 (dilation 1 or 16, conv_tasnet's) 2.4-5x rlx's time, all conversion; 1x1 128 -> 512 1.4-2.7x,
// 512 -> 128 and 512 -> 512 even; wav2letter's 2000 -> 2000 over 51 steps 0.32x; its kernel-7 and
// kernel-32 convs 0.5-0.67x (kernel 32 pad 16 only with rlx's columns of zeros: oneDNN would
// otherwise run its reference loop). So 1-D depthwise stays with rlx, 1-D 1x1 from C M / (C + M)
// = 256 up goes to oneDNN.
// 3-D convolutions (zoo's r3d_18, mc3_18, r2plus1d_18, s3d per conv, `RLX_CONV_DNNL=0` against the
// rule off): full 3-D kernels 0.42-0.72x rlx's time (3x3x3 at every width and stride, the 3x7x7
// stems); 1x1x1 1.1-3.1x (downsamples and s3d's pointwise ones, a few 0.8-0.95); the temporal
// halves of separable convs (kx1x1) 1.3-2.4x (0.8-0.9 on s3d's 14x14 and 7x7 maps); the spatial
// halves (1xkxk) 0.64-0.9x in mc3_18 (C = M, 16 frames) but 1.1-1.8x in r2plus1d_18 (M = 2.25 C)
// and 0.5-1.5x in s3d, no rule found that separates them: they stay with rlx, except a
// few-channel first layer (1x7x7 stems: 0.9x).
// 3-D: oneDNN 2.6's jit kernels win on full 3-D kernels (kD > 1 and kH kW > 1) and first layers
// (few input channels, read as NCDHW); the separable (2+1)-D halves and 1x1x1 convs are faster in
// rlx's kernel even where a chain keeps them blocked (r2plus1d_18's), so this one holds for
// chains too: "" or why rlx's kernel.
std::string rule_refusal_3d(const ir::Conv2dGeom& g) {
  if (g.nd != 3 || (g.groups == 1 && g.C < 8)) return "";
  if (g.kD == 1 && g.kH == 1 && g.kW == 1) return "1x1x1 3-D: rlx's kernel is faster than oneDNN's";
  if (g.kD == 1) return "1xkxk 3-D (the spatial half of a separable conv): rlx's kernel is faster than oneDNN's";
  if (g.kH * g.kW == 1) return "kx1x1 3-D (the temporal half of a separable conv): rlx's kernel is faster than oneDNN's";
  return "";
}

std::string rule_refusal(const ir::Conv2dGeom& g) {
  const bool pointwise = g.kD == 1 && g.kH == 1 && g.kW == 1 && g.sD == 1 && g.sH == 1 && g.sW == 1 && g.pf == 0 &&
                         g.pk == 0 && g.pt == 0 && g.pl == 0 && g.pb == 0 && g.pr == 0;
  // A 1-D convolution (imported as 2-D with H = 1): one row per channel, little work per
  // converted element for a depthwise or a narrow pointwise one.
  const bool row = g.nd == 2 && g.H == 1;
  if (row && g.groups > 1 && g.Cg == 1 && g.Mg == 1)
    return "depthwise over 1-D rows: rlx's kernel is faster than the two layout conversions";
  if (!pointwise) return "";
  if (row && g.groups == 1 && (double)g.C * g.M / (double)(g.C + g.M) < 256)
    return "1x1 over 1-D rows with C M / (C + M) < 256: rlx's GEMM reads x in place";
  if (g.D * g.H * g.W == 1) return "1x1 on a 1x1 map: rlx's one product over the batch is faster";
  if (g.groups == 1 && (double)g.C * g.M / (double)(g.C + g.M) < 64)
    return "1x1 with C M / (C + M) < 64: rlx's GEMM reads x in place, the layout conversions would cost more";
  return "";
}

// Winograd (oneDNN's jit_wino_4x3 / jit_fp32_wino_2x3, AVX-512 only) or direct for a dense
// 3x3 stride-1 convolution. RLX_CONV_WINOGRAD=0: never; =1: every shape the primitive takes;
// unset: the rule. Measured per conv on this project's machine (docs/benchmarks.md, "Winograd
// 3x3 convolutions": one primitive per half of the output channels, each on one thread, as
// dnnl_conv_run runs them): 1.2-3x direct's speed on the 3x3 convs of ResNet-18/34/50 and VGG
// at batch 1 and 2 from 14x14 up; on 7x7 maps 0.9-2.3x in the bench (noisy) and 1.6x inside
// rlx (ResNet-18's layer4, 6 alternating runs). Smaller maps (unmeasured) stay direct.
// Its error is a few times direct's (the transforms' rounding), well inside the zoo's tolerances.
bool winograd_wanted(const ir::Conv2dGeom& g, bool plain_src) {
  const bool fits = g.nd == 2 && g.groups == 1 && !plain_src && g.kH == 3 && g.kW == 3 && g.sH == 1 && g.sW == 1 && g.dH == 1 &&
                    g.dW == 1;
  if (!fits) return false;
  const char* e = std::getenv("RLX_CONV_WINOGRAD");
  const std::string sw = e ? e : "";
  if (sw == "0") return false;
  if (sw == "1") return true;
  return g.OH * g.OW >= 7 * 7;
}

}  // namespace

namespace {

void release_slices(DnnlConv& c) {
  const DnnlApi& a = api();
  for (auto& s : c.slices) {
    if (s.prim) a.prim_destroy(s.prim);
    if (s.weights) a.mem_destroy(s.weights);
  }
  c.slices.clear();
}

// c's slices (primitives and packed weights) for its geometry, input pads (c.xpl, c.xpr) and
// slicing (S slices of `units` units of `unit`); "" or why not (c.slices then empty).
std::string make_slices(DnnlConv& c, const float* w, int64_t unit, int64_t units, int64_t S) {
  const DnnlApi& a = api();
  const ir::Conv2dGeom& g = c.g;
  const int64_t B = c.B;
  const bool d3 = g.nd == 3;
  const int nds = d3 ? 5 : 4;  // dims of x, y and a dense weight
  const int64_t KS = g.kD * g.kH * g.kW;
  const dnnl_format_tag_t blocked =
      d3 ? (B == 16 ? dnnl_nCdhw16c : dnnl_nCdhw8c) : (B == 16 ? dnnl_nChw16c : dnnl_nChw8c);
  const dnnl_format_tag_t plain = d3 ? dnnl_ncdhw : dnnl_nchw;
  // oneDNN wants the right pads that make the output size exact: a floor division may have left
  // input rows or columns unused, which shrinks the pad (below zero when they were not padding).
  // Columns rlx pads itself (c.xpl, c.xpr) are part of the input it sees.
  const int64_t pk = (g.OD - 1) * g.sD + g.ext_d() - g.D - g.pf;
  const int64_t pb = (g.OH - 1) * g.sH + g.ext_h() - g.H - g.pt;
  const int64_t pr = (g.OW - 1) * g.sW + g.ext_w() - g.W - g.pl - c.xpr;
  const int64_t pl = g.pl - c.xpl, WP = c.WP();
  dnnl_dims_t strides, dil, padl, padr;
  {
    const int64_t v[4][3] = {{g.sD, g.sH, g.sW}, {g.dD - 1, g.dH - 1, g.dW - 1}, {g.pf, g.pt, pl}, {pk, pb, pr}};
    int64_t* out[4] = {strides, dil, padl, padr};
    for (int q = 0; q < 4; ++q)
      for (int j = 0; j < g.nd; ++j) out[q][j] = v[q][3 - g.nd + j];
  }
  // dims [a, b, spatial...] of x / y / a weight
  auto dims = [&](dnnl_dims_t d, std::initializer_list<int64_t> lead, int64_t D, int64_t H, int64_t W) {
    int i = 0;
    for (int64_t v : lead) d[i++] = v;
    if (d3) d[i++] = D;
    d[i++] = H;
    d[i++] = W;
    return i;
  };
  a.omp_threads(1);
  // The primitives' attributes: the caller's scratchpad, and the post-ops if any.
  dnnl_primitive_attr_t attr = a.user_scratchpad, own_attr = nullptr;
  if (!c.post.empty()) {
    dnnl_post_ops_t po = nullptr;
    bool ok = a.post_ops_ok && a.attr_create(&own_attr) == dnnl_success &&
              a.attr_set_scratchpad_mode(own_attr, dnnl_scratchpad_mode_user) == dnnl_success &&
              a.post_ops_create(&po) == dnnl_success;
    for (const auto& e : c.post)
      ok = ok && a.post_ops_append_eltwise(po, 1.f, (dnnl_alg_kind_t)e.alg, e.alpha, e.beta) == dnnl_success;
    ok = ok && a.attr_set_post_ops(own_attr, po) == dnnl_success;
    if (po) a.post_ops_destroy(po);
    if (!ok) {
      if (own_attr) a.attr_destroy(own_attr);
      return "oneDNN refuses the post-ops";
    }
    attr = own_attr;
  }
  dnnl_stream_t st = nullptr;
  if (a.stream_create(&st, a.engine, dnnl_stream_default_flags) != dnnl_success) {
    if (own_attr) a.attr_destroy(own_attr);
    return "oneDNN stream";
  }
  std::string fail;
  for (int64_t s = 0; s < S && fail.empty(); ++s) {
    const int64_t u0 = units * s / S, u1 = units * (s + 1) / S;
    Slice sl;
    dnnl_memory_desc_t w_any{}, w_user{};
    dnnl_dims_t sd, wd, bd, dd;
    bool ok;
    if (g.groups == 1) {
      sl.m0 = u0 * B;
      sl.m1 = std::min(g.M, u1 * B);
      const int64_t ms = sl.m1 - sl.m0;
      dims(sd, {1, g.C}, g.D, g.H, WP);
      dims(wd, {ms, g.C}, g.kD, g.kH, g.kW);
      dims(dd, {1, ms}, g.OD, g.OH, g.OW);
      bd[0] = ms;
      ok = a.md_by_tag(&sl.src_md, nds, sd, dnnl_f32, c.plain_src ? plain : blocked) == dnnl_success &&
           a.md_by_tag(&w_any, nds, wd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
           a.md_by_tag(&w_user, nds, wd, dnnl_f32, d3 ? dnnl_oidhw : dnnl_oihw) == dnnl_success;
    } else {
      const int64_t g0 = u0 * unit, g1 = std::min(g.groups, u1 * unit), gs = g1 - g0;
      sl.c0 = g0 * g.Cg;
      sl.m0 = g0 * g.Mg;
      sl.m1 = g1 * g.Mg;
      dims(sd, {1, gs * g.Cg}, g.D, g.H, WP);
      wd[0] = gs;
      dims(wd + 1, {g.Mg, g.Cg}, g.kD, g.kH, g.kW);
      dims(dd, {1, gs * g.Mg}, g.OD, g.OH, g.OW);
      bd[0] = gs * g.Mg;
      ok = a.md_by_tag(&sl.src_md, nds, sd, dnnl_f32, blocked) == dnnl_success &&
           a.md_by_tag(&w_any, nds + 1, wd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
           a.md_by_tag(&w_user, nds + 1, wd, dnnl_f32, d3 ? dnnl_goidhw : dnnl_goihw) == dnnl_success;
    }
    ok = ok && a.md_by_tag(&sl.b_md, 1, bd, dnnl_f32, dnnl_x) == dnnl_success &&
         a.md_by_tag(&sl.dst_md, nds, dd, dnnl_f32, blocked) == dnnl_success;
    dnnl_convolution_desc_t cd{};
    dnnl_primitive_desc_t pd = nullptr, rpd = nullptr;
    // Winograd where wanted and oneDNN has it for the shape (AVX-512), else direct.
    for (dnnl_alg_kind_t alg : {dnnl_convolution_winograd, dnnl_convolution_direct}) {
      if (pd || (alg == dnnl_convolution_winograd && !winograd_wanted(g, c.plain_src))) continue;
      if (!(ok && a.conv_desc(&cd, dnnl_forward_inference, alg, &sl.src_md, &w_any, &sl.b_md, &sl.dst_md, strides,
                              dil, padl, padr) == dnnl_success &&
            a.pd_create(&pd, &cd, attr, a.engine, nullptr) == dnnl_success))
        pd = nullptr;
    }
    ok = ok && pd;
    if (!ok) {
      fail = "oneDNN refuses the shape";
    } else {
      const char* impl = nullptr;
      a.pd_query(pd, dnnl_query_impl_info_str, 0, &impl);
      const std::string name = impl ? impl : "?";
      // A reference loop or oneDNN's own im2col + GEMM is no better than rlx's kernel.
      if (name.rfind("ref", 0) == 0 || name.find("gemm") != std::string::npos) fail = "oneDNN would run " + name;
      c.impl = name;
    }
    const dnnl_memory_desc_t* wmd = fail.empty() ? a.pd_query_md(pd, dnnl_query_weights_md, 0) : nullptr;
    dnnl_memory_t user = nullptr;
    dnnl_primitive_t reorder = nullptr;
    const float* wsrc = w + sl.m0 * g.Cg * KS;
    if (fail.empty()) {
      sl.w_md = *wmd;
      ok = a.mem_create(&sl.weights, wmd, a.engine, DNNL_MEMORY_ALLOCATE) == dnnl_success &&
           a.mem_create(&user, &w_user, a.engine, const_cast<float*>(wsrc)) == dnnl_success &&
           a.reorder_pd(&rpd, &w_user, a.engine, wmd, a.engine, nullptr) == dnnl_success &&
           a.prim_create(&reorder, rpd) == dnnl_success;
      if (ok) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, sl.weights}};
        ok = a.execute(reorder, st, 2, args) == dnnl_success && a.stream_wait(st) == dnnl_success;
      }
      ok = ok && a.prim_create(&sl.prim, pd) == dnnl_success;
      if (ok) sl.scratch = dnnl_scratch_of(a, pd);
      if (!ok) fail = "oneDNN failed to pack the weights";
    }
    if (reorder) a.prim_destroy(reorder);
    if (rpd) a.pd_destroy(rpd);
    if (pd) a.pd_destroy(pd);
    if (user) a.mem_destroy(user);
    c.slices.push_back(sl);  // destroyed with c, even when incomplete
  }
  a.stream_destroy(st);
  if (own_attr) a.attr_destroy(own_attr);
  if (!fail.empty()) release_slices(c);
  return fail;
}

}  // namespace

std::shared_ptr<const DnnlConv> dnnl_conv_plan(const Kernel& k, const float* w, const float* bias, std::string* why,
                                               std::string* rule, const std::vector<DnnlEltwise>* post) {
  auto refuse = [&](const std::string& s) {
    *why = s;
    return nullptr;
  };
  const DnnlApi& a = api();
  if (!a.ok) return refuse(a.why);
  std::vector<Shape> ins;
  for (const auto& t : k.inputs) ins.push_back(t.shape);
  const ir::Conv2dGeom g = ir::conv2d_geom(*k.node, ins, k.label);
  if (g.nd != 2 && g.nd != 3) return refuse("not 2-D or 3-D");
  if (g.N * g.M * g.OD * g.OH * g.OW == 0 || g.Cg == 0) return refuse("empty");
  *rule = conv_switch() == "all" ? "" : rule_refusal(g);
  if (const std::string r3 = conv_switch() == "all" ? "" : rule_refusal_3d(g); !r3.empty()) return refuse(r3);
  const int64_t pk = (g.OD - 1) * g.sD + g.ext_d() - g.D - g.pf;
  const int64_t pb = (g.OH - 1) * g.sH + g.ext_h() - g.H - g.pt, pr = (g.OW - 1) * g.sW + g.ext_w() - g.W - g.pl;
  if (pk > g.pk || pb > g.pb || pr > g.pr) return refuse("padding oneDNN cannot express");

  auto c = std::make_shared<DnnlConv>();
  static std::atomic<uint64_t> next_id{1};
  c->id = next_id++;
  c->g = g;
  c->B = isa_avx512() ? 16 : 8;
  const int64_t B = c->B;
  c->CP = (g.C + B - 1) / B * B;
  c->MP = (g.M + B - 1) / B * B;
  c->IS = g.D * g.H * g.W;
  c->OS = g.OD * g.OH * g.OW;
  c->plain_src = g.groups == 1 && g.C < B;
  c->bias.assign(c->MP, 0.f);
  if (bias) std::copy(bias, bias + g.M, c->bias.begin());

  // Slices: whole blocks of B channels on both sides. A dense conv splits its output channels;
  // a grouped one its groups, in units of u groups (u * Cg and u * Mg multiples of B).
  const int64_t T = ThreadPool::global().size();
  int64_t unit = 1, units = 0;  // unit: output channels (dense) or groups per unit
  if (g.groups == 1) {
    unit = B;
    units = (g.M + B - 1) / B;
  } else {
    while (unit <= B && ((unit * g.Cg) % B || (unit * g.Mg) % B)) ++unit;
    if (unit > B) return refuse("groups of " + std::to_string(g.Cg) + " -> " + std::to_string(g.Mg) + " channels");
    units = (g.groups + unit - 1) / unit;
  }
  int64_t want = g.N >= T ? 1 : (T + g.N - 1) / g.N;
  // When the pool's threads sleep between jobs (RLX_POOL_SPIN_US=0, or `auto` on a loaded
  // machine), waking one costs more than half of a small convolution: one slice below 4M
  // multiply-adds (MobileNetV3-Small on 2 threads without polling: 1.30-1.37 ms -> 0.98-1.07,
  // docs/benchmarks.md, "Session 12").
  const double macs = (double)g.N * g.M * g.OD * g.OH * g.OW * g.Cg * g.kD * g.kH * g.kW;
  if (ThreadPool::global().spin_us() == 0 && macs < 4e6) want = 1;
  const int64_t S = std::max<int64_t>(1, std::min(units, want));
  const char* pe = std::getenv("RLX_CONV_POSTOPS");
  if (post && !post->empty() && !(pe && std::string(pe) == "0")) {
    // A leading x * a + b is folded into the weights and bias (a w, a bias + b). oneDNN 2.6's jit
    // kernels computed a chain with two linear post-ops around a HardSwish wrongly (PP-LCNet's
    // affine HardSwish, measured here), so a chain with more than one left stays with rlx.
    std::vector<DnnlEltwise> rest = *post;
    float fa = 1.f, fb = 0.f;
    if (rest[0].alg == dnnl_eltwise_linear) {
      fa = rest[0].alpha;
      fb = rest[0].beta;
      rest.erase(rest.begin());
    }
    const auto linears = std::count_if(rest.begin(), rest.end(), [](const DnnlEltwise& e) { return e.alg == dnnl_eltwise_linear; });
    if (linears <= 1) {
      std::vector<float> wf(w, w + g.M * g.Cg * g.kD * g.kH * g.kW);
      for (float& v : wf) v *= fa;
      for (float& v : c->bias) v = v * fa + fb;
      c->post = rest;
      c->folded = fa != 1.f || fb != 0.f;
      // With the post-ops, or (refused, or only a reference loop would take them) without.
      if (make_slices(*c, wf.data(), unit, units, S).empty()) {
        c->epi_in_kernel = true;
      } else {
        c->post.clear();
        c->folded = false;
        c->bias.assign(c->MP, 0.f);
        if (bias) std::copy(bias, bias + g.M, c->bias.begin());
      }
    }
  }
  std::string fail = c->epi_in_kernel ? "" : make_slices(*c, w, unit, units, S);
  // oneDNN's jit kernels refuse a left or right pad wider than the columns they compute at a
  // time: with those columns of zeros written by rlx into the converted input, they take it.
  if (!fail.empty() && fail.rfind("oneDNN would run", 0) == 0 && (g.pl > 0 || pr > 0)) {
    c->xpl = g.pl;
    c->xpr = std::max<int64_t>(pr, 0);
    const std::string again = make_slices(*c, w, unit, units, S);
    if (again.empty()) fail.clear();
    else c->xpl = c->xpr = 0;
  }
  if (!fail.empty()) return refuse(fail);
  return c;
}

std::string dnnl_conv_describe(const DnnlConv& c) {
  const bool d3 = c.g.nd == 3;
  std::string s = "oneDNN " + c.impl + ", " + (d3 ? "nCdhw" : "nChw") + (c.B == 16 ? "16c" : "8c");
  if (c.plain_src) s += d3 ? " (input read as NCDHW)" : " (input read as NCHW)";
  if (c.padded())
    s += ", input rows padded by rlx (" + std::to_string(c.xpl) + " + " + std::to_string(c.xpr) + " columns)";
  s += ", " + std::to_string(c.slices.size()) + (c.slices.size() == 1 ? " slice" : " slices");
  if (c.epi_in_kernel)
    s += ", " + std::string(c.folded ? "x * a + b folded into its weights" : "") + (c.folded && !c.post.empty() ? ", " : "") +
         (c.post.empty() ? "" : dnnl_post_ops_describe(c.post) + " in its kernel");
  return s;
}

bool dnnl_conv_post_ops(const DnnlConv& c) { return c.epi_in_kernel; }

namespace {

bool same_op(const DnnlEltwise& a, const DnnlEltwise& b) { return a.alg == b.alg && a.alpha == b.alpha && a.beta == b.beta; }

// ops with neighbours merged: x * a + b steps into one, ReLU or max(x, lo) then min(x, hi) into
// one clip(lo, hi) (and min then max).
std::vector<DnnlEltwise> merged(const std::vector<DnnlEltwise>& ops) {
  std::vector<DnnlEltwise> v;
  for (DnnlEltwise e : ops) {
    if (e.alg == dnnl_eltwise_relu) e = {dnnl_eltwise_clip, 0.f, INFINITY};  // max(x, 0); back to relu below
    if (!v.empty()) {
      DnnlEltwise& l = v.back();
      if (l.alg == dnnl_eltwise_linear && e.alg == dnnl_eltwise_linear) {
        l = DnnlEltwise{dnnl_eltwise_linear, l.alpha * e.alpha, l.beta * e.alpha + e.beta};
        continue;
      }
      if (l.alg == dnnl_eltwise_clip && e.alg == dnnl_eltwise_clip) {
        const bool max_min = std::isinf(l.beta) && l.beta > 0 && std::isinf(e.alpha) && e.alpha < 0;
        const bool min_max = std::isinf(l.alpha) && l.alpha < 0 && std::isinf(e.beta) && e.beta > 0;
        const float lo = max_min ? l.alpha : e.alpha, hi = max_min ? e.beta : l.beta;
        if ((max_min || min_max) && lo <= hi) {
          l = DnnlEltwise{dnnl_eltwise_clip, lo, hi};
          continue;
        }
      }
    }
    v.push_back(e);
  }
  std::vector<DnnlEltwise> r;
  for (const auto& e : v) {
    if (e.alg == dnnl_eltwise_linear && e.alpha == 1.f && e.beta == 0.f) continue;  // x * 1 + 0
    if (e.alg == dnnl_eltwise_clip && e.alpha == 0.f && std::isinf(e.beta) && e.beta > 0) r.push_back({dnnl_eltwise_relu, 0.f, 0.f});
    else r.push_back(e);
  }
  return r;
}

// g with F = g(U) where U and F are merged post-ops of x: U a prefix of F, except that U's last
// x * a1 + b1 may have been folded into F's x * a2 + b2 (the fuser folds (x + c) + 3 into one
// add): g then starts with the step between them. False when F does not extend U so.
bool after(const std::vector<DnnlEltwise>& U, const std::vector<DnnlEltwise>& F, std::vector<DnnlEltwise>* g) {
  if (U.size() > F.size()) return false;
  const size_t n = U.size();
  for (size_t j = 0; j + 1 < n; ++j)
    if (!same_op(U[j], F[j])) return false;
  g->clear();
  if (n > 0 && !same_op(U[n - 1], F[n - 1])) {
    const DnnlEltwise &l1 = U[n - 1], &l2 = F[n - 1];
    if (l1.alg != dnnl_eltwise_linear || l2.alg != dnnl_eltwise_linear || l1.alpha == 0.f) return false;
    const float a = l2.alpha / l1.alpha;  // l2(y) = a * l1(y) + b
    g->push_back({dnnl_eltwise_linear, a, l2.beta - a * l1.beta});
  }
  g->insert(g->end(), F.begin() + n, F.end());
  return true;
}

}  // namespace

bool dnnl_post_ops_of(const FusedProgram& p, std::vector<DnnlEltwise>* out) {
  // Each register: a constant, or the conv's output x with post-ops applied (none: x itself).
  struct Val {
    bool is_const = false;
    float k = 0.f;
    std::vector<DnnlEltwise> ops;
  };
  std::vector<Val> r(p.code.size());
  auto lin = [](float a, float b) { return DnnlEltwise{dnnl_eltwise_linear, a, b}; };
  auto clip = [](float lo, float hi) { return DnnlEltwise{dnnl_eltwise_clip, lo, hi}; };
  for (size_t i = 0; i < p.code.size(); ++i) {
    const FusedInstr& in = p.code[i];
    Val& v = r[i];
    switch (in.kind) {
      case FusedInstr::Load: break;  // every input is x
      case FusedInstr::Const:
        v.is_const = true;
        v.k = in.imm;
        break;
      case FusedInstr::Unary: {
        const Val& a = r[in.a];
        if (a.is_const) return false;
        v.ops = a.ops;
        switch (in.op) {
          case EwOp::Relu: v.ops.push_back({dnnl_eltwise_relu, 0.f, 0.f}); break;
          case EwOp::Sigmoid: v.ops.push_back({dnnl_eltwise_logistic, 0.f, 0.f}); break;
          case EwOp::Tanh: v.ops.push_back({dnnl_eltwise_tanh, 0.f, 0.f}); break;
          case EwOp::Silu: v.ops.push_back({dnnl_eltwise_swish, 1.f, 0.f}); break;
          case EwOp::Abs: v.ops.push_back({dnnl_eltwise_abs, 0.f, 0.f}); break;
          case EwOp::Neg: v.ops.push_back(lin(-1.f, 0.f)); break;
          default: return false;
        }
        break;
      }
      case FusedInstr::Binary: {
        const Val &a = r[in.a], &b = r[in.b];
        if (a.is_const && b.is_const) return false;
        if (a.is_const || b.is_const) {
          const Val& x = a.is_const ? b : a;
          const float k = a.is_const ? a.k : b.k;
          if (!std::isfinite(k)) return false;
          v.ops = x.ops;
          switch (in.op) {
            case EwOp::Mul: v.ops.push_back(lin(k, 0.f)); break;
            case EwOp::Add: v.ops.push_back(lin(1.f, k)); break;
            case EwOp::Sub: v.ops.push_back(a.is_const ? lin(-1.f, k) : lin(1.f, -k)); break;
            case EwOp::Div:
              if (a.is_const || k == 0.f) return false;
              v.ops.push_back(lin(1.f / k, 0.f));
              break;
            case EwOp::Maximum: v.ops.push_back(clip(k, INFINITY)); break;
            case EwOp::Minimum: v.ops.push_back(clip(-INFINITY, k)); break;
            default: return false;
          }
          break;
        }
        // u * f(u) with f(u) = g(u): HardSwish (g = clip(u / 6 + 1/2, 0, 1), or clip(u + 3, 0, 6),
        // which is 6 times it) or SiLU (g = sigmoid).
        if (in.op != EwOp::Mul) return false;
        const bool a_first = a.ops.size() <= b.ops.size();
        const std::vector<DnnlEltwise> U = merged(a_first ? a.ops : b.ops), F = merged(a_first ? b.ops : a.ops);
        std::vector<DnnlEltwise> g;
        if (!after(U, F, &g)) return false;
        auto near = [](float x, float want) { return std::fabs(x - want) <= 1e-5f * std::max(1.f, std::fabs(want)); };
        v.ops = U;
        if (g.size() == 2 && g[0].alg == dnnl_eltwise_linear && near(g[0].alpha, 1.f / 6.f) && near(g[0].beta, 0.5f) &&
            g[1].alg == dnnl_eltwise_clip && g[1].alpha == 0.f && g[1].beta == 1.f) {
          v.ops.push_back({dnnl_eltwise_hardswish, 0.f, 0.f});
        } else if (g.size() == 2 && g[0].alg == dnnl_eltwise_linear && near(g[0].alpha, 1.f) && near(g[0].beta, 3.f) &&
                   g[1].alg == dnnl_eltwise_clip && g[1].alpha == 0.f && g[1].beta == 6.f) {
          v.ops.push_back({dnnl_eltwise_hardswish, 0.f, 0.f});
          v.ops.push_back(lin(6.f, 0.f));
        } else if (g.size() == 1 && g[0].alg == dnnl_eltwise_logistic) {
          v.ops.push_back({dnnl_eltwise_swish, 1.f, 0.f});
        } else {
          return false;
        }
        break;
      }
    }
  }
  if (p.code.empty() || p.result != (int)p.code.size() - 1) return false;
  const Val& res = r[p.result];
  if (res.is_const) return false;
  const std::vector<DnnlEltwise> ops = merged(res.ops);
  if (ops.empty() || ops.size() > 4) return false;
  *out = ops;
  return true;
}

std::string dnnl_post_ops_describe(const std::vector<DnnlEltwise>& ops) {
  std::string s;
  for (const auto& e : ops) {
    if (!s.empty()) s += "+";
    switch (e.alg) {
      case dnnl_eltwise_relu: s += "relu"; break;
      case dnnl_eltwise_linear: s += "linear"; break;
      case dnnl_eltwise_clip: s += "clip"; break;
      case dnnl_eltwise_logistic: s += "sigmoid"; break;
      case dnnl_eltwise_tanh: s += "tanh"; break;
      case dnnl_eltwise_swish: s += "silu"; break;
      case dnnl_eltwise_abs: s += "abs"; break;
      case dnnl_eltwise_hardswish: s += "hardswish"; break;
      default: s += "?";
    }
  }
  return s;
}

int64_t dnnl_conv_blocked_out_floats(const DnnlConv& c) { return c.g.N * c.MP * c.OS; }
bool dnnl_conv_blocked_in(const DnnlConv& c) { return !c.plain_src; }

namespace {

// Per pool thread: its oneDNN stream and the memory objects (source, bias, destination,
// scratchpad) of each convolution slice it ran, given new pointers on each call instead of made
// and destroyed per call (those allocations and oneDNN's bookkeeping were 5-7% of
// MobileNetV3-Small's time). Objects of convolutions no longer alive stay until the map holds
// 4096 slices, then all go.
struct SliceMems {
  dnnl_memory_t ms = nullptr, mb = nullptr, md = nullptr, scr = nullptr;
};
struct ThreadDnnl {
  dnnl_stream_t st = nullptr;
  std::unordered_map<uint64_t, SliceMems> mems;  // key: conv id << 16 | slice
  std::vector<uint8_t> scratch;
  // (kept here: at thread exit the table's static may be gone already)
  dnnl_status_t (*destroy)(dnnl_memory_t) = api().mem_destroy;
  dnnl_status_t (*destroy_stream)(dnnl_stream_t) = api().stream_destroy;
  ~ThreadDnnl() {
    clear();
    if (st && destroy_stream) destroy_stream(st);
  }
  void clear() {
    for (auto& [k, m] : mems)
      for (dnnl_memory_t o : {m.ms, m.mb, m.md, m.scr})
        if (o && destroy) destroy(o);
    mems.clear();
  }
};
ThreadDnnl& thread_dnnl() {
  thread_local ThreadDnnl t;
  return t;
}

// Runs slice sl of c on src -> dst with the calling thread's stream; false on failure.
bool run_slice(const DnnlConv& c, size_t si, const float* src, float* dst) {
  const DnnlApi& a = api();
  const Slice& sl = c.slices[si];
  ThreadDnnl& t = thread_dnnl();
  if (!t.st && a.stream_create(&t.st, a.engine, dnnl_stream_default_flags) != dnnl_success) {
    t.st = nullptr;
    return false;
  }
  void* scr_p = nullptr;
  if (sl.scratch.bytes) {
    if (t.scratch.size() < sl.scratch.bytes + 64) t.scratch.resize(sl.scratch.bytes + 64);
    scr_p = t.scratch.data() + (64 - reinterpret_cast<uintptr_t>(t.scratch.data()) % 64) % 64;
  }
  void* bias = const_cast<float*>(c.bias.data() + sl.m0);
  bool ok = true;
  SliceMems made, *m = &made;
  if (a.mem_set_handle) {
    if (t.mems.size() >= 4096) t.clear();
    m = &t.mems[c.id << 16 | si];
    if (!m->ms) {
      ok = a.mem_create(&m->ms, &sl.src_md, a.engine, const_cast<float*>(src)) == dnnl_success &&
           a.mem_create(&m->mb, &sl.b_md, a.engine, bias) == dnnl_success &&
           a.mem_create(&m->md, &sl.dst_md, a.engine, dst) == dnnl_success &&
           (!scr_p || a.mem_create(&m->scr, &sl.scratch.md, a.engine, scr_p) == dnnl_success);
    } else {
      ok = a.mem_set_handle(m->ms, const_cast<float*>(src)) == dnnl_success && a.mem_set_handle(m->mb, bias) == dnnl_success &&
           a.mem_set_handle(m->md, dst) == dnnl_success && (!scr_p || a.mem_set_handle(m->scr, scr_p) == dnnl_success);
    }
    if (!ok) {  // made again on the next call
      for (dnnl_memory_t o : {m->ms, m->mb, m->md, m->scr})
        if (o) a.mem_destroy(o);
      *m = SliceMems{};
      return false;
    }
  } else {
    ok = a.mem_create(&m->ms, &sl.src_md, a.engine, const_cast<float*>(src)) == dnnl_success &&
         a.mem_create(&m->mb, &sl.b_md, a.engine, bias) == dnnl_success &&
         a.mem_create(&m->md, &sl.dst_md, a.engine, dst) == dnnl_success &&
         (!scr_p || a.mem_create(&m->scr, &sl.scratch.md, a.engine, scr_p) == dnnl_success);
  }
  if (ok) {
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, m->ms},
                               {DNNL_ARG_WEIGHTS, sl.weights},
                               {DNNL_ARG_BIAS, m->mb},
                               {DNNL_ARG_DST, m->md},
                               {DNNL_ARG_SCRATCHPAD, m->scr}};
    ok = a.execute(sl.prim, t.st, m->scr ? 5 : 4, args) == dnnl_success && a.stream_wait(t.st) == dnnl_success;
  }
  if (m == &made)
    for (dnnl_memory_t o : {made.ms, made.mb, made.md, made.scr})
      if (o) a.mem_destroy(o);
  return ok;
}

}  // namespace

bool dnnl_conv_run(const DnnlConv& c, const float* x, float* y, const std::function<void(int64_t, int64_t)>& epi,
                   const float* x_blocked, float* y_blocked, const float* x_scale) {
  const DnnlApi& a = api();
  const ir::Conv2dGeom& g = c.g;
  const int64_t B = c.B, IS = c.IS, OS = c.OS;
  const int64_t CB = c.CP / B;
  // What the primitive reads per image: IS, or with rlx's columns of zeros D H WP pixels per channel.
  const int64_t rows = g.D * g.H, WP = c.WP(), XS = c.padded() ? rows * WP : IS;
  // A blocked input scaled per channel (x_scale) is copied, scaled, into the conversion buffer.
  const bool convert = (!c.plain_src && !x_blocked) || c.padded() || (x_blocked && x_scale);
  const int64_t xfloats = g.N * (c.plain_src ? g.C : c.CP) * XS;
  thread_local std::vector<float> xb_store, yb_store;
  if (convert && (int64_t)xb_store.size() < xfloats) xb_store.resize(xfloats);
  if (!y_blocked && (int64_t)yb_store.size() < g.N * c.MP * OS) yb_store.resize(g.N * c.MP * OS);
  float* xconv = xb_store.data();  // (thread_local: the pool's threads get this thread's pointer)
  const float* xb = convert ? xconv : x_blocked;
  float* yb = y_blocked ? y_blocked : yb_store.data();
  ThreadPool& pool = ThreadPool::global();
  // Blocks per conversion task: with the pool's threads sleeping, at least 16384 pixels (a
  // small map's conversion takes less time than waking another thread).
  const int64_t cgrain = pool.spin_us() == 0 ? std::max<int64_t>(1, 16384 / std::max<int64_t>(XS, 1)) : 1;
  if (convert && !c.padded() && x_blocked) {
    pool.parallel_for(g.N * CB, cgrain, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t n = t / CB, cb = t % CB;
        scale_blocked(x_blocked + t * IS * B, std::min(B, g.C - cb * B), IS, B, x_scale + n * g.C + cb * B, xconv + t * IS * B);
      }
    });
  } else if (convert && !c.padded()) {
    pool.parallel_for(g.N * CB, cgrain, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t n = t / CB, cb = t % CB;
        to_blocked_any(x + (n * g.C + cb * B) * IS, std::min(B, g.C - cb * B), IS, IS, B, xconv + (n * c.CP + cb * B) * IS,
                       x_scale ? x_scale + n * g.C + cb * B : nullptr);
      }
    });
  } else if (convert && c.plain_src) {  // NCHW rows with the columns of zeros around them
    pool.parallel_for(g.N * g.C, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          float* d = xconv + (t * rows + r) * WP;
          std::fill(d, d + c.xpl, 0.f);
          std::copy(x + (t * rows + r) * g.W, x + (t * rows + r + 1) * g.W, d + c.xpl);
          std::fill(d + c.xpl + g.W, d + WP, 0.f);
        }
    });
  } else if (convert) {  // blocked rows with the columns of zeros around them
    pool.parallel_for(g.N * CB, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t n = t / CB, cb = t % CB;
        float* dblk = xconv + (n * c.CP + cb * B) * XS;
        for (int64_t r = 0; r < rows; ++r) {
          float* d = dblk + r * WP * B;
          std::fill(d, d + c.xpl * B, 0.f);
          if (x_blocked) {
            const float* s = x_blocked + (n * c.CP + cb * B) * IS + r * g.W * B;
            if (x_scale) scale_blocked(s, std::min(B, g.C - cb * B), g.W, B, x_scale + n * g.C + cb * B, d + c.xpl * B);
            else std::copy(s, s + g.W * B, d + c.xpl * B);
          } else {
            to_blocked_any(x + (n * g.C + cb * B) * IS + r * g.W, std::min(B, g.C - cb * B), g.W, IS, B, d + c.xpl * B,
                           x_scale ? x_scale + n * g.C + cb * B : nullptr);
          }
          std::fill(d + (c.xpl + g.W) * B, d + WP * B, 0.f);
        }
      }
    });
  }
  const int64_t S = (int64_t)c.slices.size();
  std::atomic<bool> failed{false};
  pool.parallel_for(g.N * S, 1, [&](int64_t b, int64_t e) {
    a.omp_threads(1);
    for (int64_t t = b; t < e && !failed; ++t) {
      const int64_t n = t / S;
      const Slice& sl = c.slices[t % S];
      const float* src = c.plain_src ? (c.padded() ? xconv : x) + n * g.C * XS : xb + (n * c.CP + sl.c0) * XS;
      float* dst = yb + (n * c.MP + sl.m0) * OS;
      if (!run_slice(c, (size_t)(t % S), src, dst)) {
        failed = true;
        break;
      }
      if (y_blocked) {  // the slice's blocks, padding channels included
        const int64_t m1 = std::min(c.MP, (sl.m1 + B - 1) / B * B);
        if (epi) epi((n * c.MP + sl.m0) * OS, (n * c.MP + m1) * OS);
        if (y)  // also NCHW, after the epilogue
          for (int64_t m = sl.m0; m < sl.m1; m += B)
            from_blocked_any(yb + (n * c.MP + m) * OS, std::min(B, sl.m1 - m), OS, B, y + (n * g.M + m) * OS);
        continue;
      }
      for (int64_t m = sl.m0; m < sl.m1; m += B)
        from_blocked_any(yb + (n * c.MP + m) * OS, std::min(B, sl.m1 - m), OS, B, y + (n * g.M + m) * OS);
      if (epi) epi((n * g.M + sl.m0) * OS, (n * g.M + sl.m1) * OS);
    }
  });
  return !failed;
}

void dnnl_from_blocked(const float* src, int64_t avail, int64_t HW, int64_t B, float* dst) {
  from_blocked_any(src, avail, HW, B, dst);
}

}  // namespace rlx::cpu
