// f16/bf16 on the Vulkan executor (device 0: lavapipe in CI, where they live in 2-byte
// storage buffers): bytes per buffer, exact round trips, the shaders' widening and narrowing
// bit for bit, and f16/bf16/mixed matmul and linear against plain reference loops written here
// (their own half-precision decoding and rounding, not rlx's).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>

#include "backends/vulkan/vulkan_executor.h"
#include "core/error.h"
#include "ir/loader.h"
#include "ir/op_registry.h"
#include "attention_ref.h"
#include "scoped_env.h"
#include "runtime/runner.h"
#include "runtime/session.h"
#include "vulkan_test_util.h"

namespace rlx {
namespace {

using ir::Op;

using test::node;
using test::ref_attention;
using test::ScopedEnv;
using test::vk;

// ---- the test's own half-precision reference (IEEE binary16, bfloat16) ----

double ref_f16_value(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0) v = std::ldexp((double)m, -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = std::ldexp(1024.0 + m, e - 25);
  return s ? -v : v;
}
double ref_bf16_value(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// Nearest f16 to x (ties to even): the candidates' values are compared directly.
uint16_t ref_to_f16(double x) {
  if (std::isnan(x)) return 0x7e00;
  uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double a = std::fabs(x);
  // the largest finite f16 is 65504; halfway to the next binade step (65520) rounds to inf
  if (a >= 65520.0) return sign | 0x7c00;
  uint16_t lo = 0;
  for (int step = 1 << 14; step; step >>= 1)  // largest code with value <= a
    if (lo + step <= 0x7bff && ref_f16_value((uint16_t)(lo + step)) <= a) lo = (uint16_t)(lo + step);
  double vl = ref_f16_value(lo);
  if (vl == a) return sign | lo;
  double vh = ref_f16_value((uint16_t)(lo + 1));
  uint16_t pick = (a - vl < vh - a) ? lo : (a - vl > vh - a) ? (uint16_t)(lo + 1) : ((lo & 1) ? (uint16_t)(lo + 1) : lo);
  return sign | pick;
}
uint16_t ref_to_bf16(float x) {
  if (std::isnan(x)) return 0x7fc0;
  uint32_t u;
  std::memcpy(&u, &x, 4);
  uint16_t lo = (uint16_t)(u >> 16);
  double a = x, vl = ref_bf16_value(lo), vh = ref_bf16_value((uint16_t)(lo + 1));
  if (vl == a) return lo;
  // lo truncates toward zero; lo + 1 is the next value away from zero
  double dl = std::fabs(a - vl), dh = std::fabs(vh - a);
  return dl < dh ? lo : dl > dh ? (uint16_t)(lo + 1) : ((lo & 1) ? (uint16_t)(lo + 1) : lo);
}
double ref_value(DType t, uint16_t h) { return t == DType::f16 ? ref_f16_value(h) : ref_bf16_value(h); }
uint16_t ref_round(DType t, double x) { return t == DType::f16 ? ref_to_f16(x) : ref_to_bf16((float)x); }

// ---- device helpers ----

struct Dev {
  std::unique_ptr<DeviceBuffer> buf;
  TensorRef ref;
};

// `bytes` raw host bytes of dtype `dt` at `offset` storage elements into a fresh buffer.
Dev put_raw(const Shape& s, DType dt, const void* bytes, size_t offset = 3) {
  Executor& e = vk();
  Dev d;
  int64_t n = shape_numel(s);
  const size_t es = dtype_size(e.storage_dtype(dt));
  d.buf = e.allocate((n + offset + 5) * es);
  d.ref = {d.buf.get(), offset * es, s, dt};
  if (n) e.upload(*d.buf, d.ref.offset, bytes, n * dtype_size(dt), dt);
  return d;
}
Dev put16(const Shape& s, DType dt, const std::vector<uint16_t>& v, size_t offset = 3) {
  return put_raw(s, dt, v.data(), offset);
}
Dev put32(const Shape& s, const std::vector<float>& v, size_t offset = 3) { return put_raw(s, DType::f32, v.data(), offset); }
Dev out_like(const Shape& s, DType dt, size_t offset = 1) {
  std::vector<uint8_t> junk(shape_numel(s) * dtype_size(dt), 0x5a);
  return put_raw(s, dt, junk.data(), offset);
}
std::vector<uint16_t> get16(const Dev& d) {
  std::vector<uint16_t> v(d.ref.numel());
  if (!v.empty()) vk().download(*d.buf, d.ref.offset, v.data(), v.size() * 2, d.ref.dtype);
  return v;
}
std::vector<float> get32(const Dev& d) {
  std::vector<float> v(d.ref.numel());
  if (!v.empty()) vk().download(*d.buf, d.ref.offset, v.data(), v.size() * 4, DType::f32);
  return v;
}
void launch(const ir::Node& n, const std::vector<const Dev*>& ins, const Dev& out) {
  Kernel k;
  k.node = &n;
  for (const Dev* d : ins) k.inputs.push_back(d->ref);
  k.output = out.ref;
  k.label = n.id;
  vk().launch(k);
  vk().flush();
}

std::vector<uint16_t> random16(DType t, size_t n, uint32_t seed, double lo = -2, double hi = 2) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = ref_round(t, u(g));
  return v;
}

bool two_byte() { return vk().storage_dtype(DType::f16) == DType::f16; }

// ---------------------------------------------------------------- storage

TEST(VulkanHalf, TwoBytesPerElementOnTheDevice) {
  Executor& e = vk();
  for (DType t : {DType::f16, DType::bf16}) {
    DType st = e.storage_dtype(t);
    ASSERT_TRUE(st == t || st == DType::f32) << dtype_name(t);
    if (st == t) EXPECT_EQ(e.storage_bytes(1000, t), 2000u) << dtype_name(t);
    else EXPECT_EQ(e.storage_bytes(1000, t), 4000u) << dtype_name(t);
  }
  EXPECT_EQ(e.storage_bytes(1000, DType::f32), 4000u);
  if (!two_byte()) GTEST_SKIP() << "device without 16-bit storage buffers: f16/bf16 are kept as f32";
  // Lavapipe (CI) has storageBuffer16BitAccess: the 2-byte layout is what the goldens exercise.
  EXPECT_EQ(e.storage_dtype(DType::bf16), DType::bf16);
}

TEST(VulkanHalf, EveryBitPatternRoundTripsUnchanged) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = (uint16_t)i;
  for (DType t : {DType::f16, DType::bf16}) {
    Dev d = put16({65536}, t, all);
    std::vector<uint16_t> back = get16(d);
    int bad = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      // with f32 storage (no 16-bit storage) NaN payloads may be canonicalised: compare values there
      bool same = back[i] == all[i] ||
                  (!two_byte() && std::isnan(ref_value(t, all[i])) && std::isnan(ref_value(t, back[i])));
      if (!same && bad++ < 5) ADD_FAILURE() << dtype_name(t) << " bits " << i << " came back as " << back[i];
    }
    EXPECT_EQ(bad, 0) << dtype_name(t);
  }
}

// cast f16/bf16 -> f32 on the device widens every finite bit pattern exactly.
TEST(VulkanHalf, ShaderWideningIsExactForEveryValue) {
  std::vector<uint16_t> all;
  for (uint32_t i = 0; i < 65536; ++i) all.push_back((uint16_t)i);
  for (DType t : {DType::f16, DType::bf16}) {
    Dev x = put16({65536}, t, all);
    Dev y = out_like({65536}, DType::f32);
    launch(node(Op::Cast, {{"dtype", std::string("f32")}}), {&x}, y);
    std::vector<float> got = get32(y);
    int bad = 0;
    for (uint32_t i = 0; i < 65536; ++i) {
      double w = ref_value(t, (uint16_t)i);
      if (std::isnan(w) ? std::isnan(got[i]) : (double)got[i] == w && std::signbit(got[i]) == std::signbit(w)) continue;
      // f32 subnormals (bf16 codes with a zero exponent) may be flushed by the device's float controls
      if (t == DType::bf16 && ((i >> 7) & 0xff) == 0 && got[i] == 0.f) continue;
      if (bad++ < 5) ADD_FAILURE() << dtype_name(t) << " bits " << i << " widened to " << got[i] << ", want " << w;
    }
    EXPECT_EQ(bad, 0) << dtype_name(t);
  }
}

// cast f32 -> f16/bf16 on the device rounds to nearest even, including ties, subnormals,
// overflow to infinity and the boundary just below it.
TEST(VulkanHalf, ShaderNarrowingRoundsToNearestEven) {
  std::vector<float> xs = {0.f, -0.f, 1.f, -1.f, 65504.f, 65519.99f, 65520.f, -65520.f, 1e9f, -1e9f, INFINITY, -INFINITY,
                           5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f, 8.940697e-8f, 6.1035156e-5f, 6.0975552e-5f,
                           1.00048828125f, 1.00146484375f, 1.0009765625f, 3.14159265f, 1.00390625f, 1.01171875f, 1e-40f};
  std::mt19937 g(7);
  std::uniform_real_distribution<float> u(-70000.f, 70000.f);
  std::uniform_int_distribution<int> ex(-30, 16);
  for (int i = 0; i < 4000; ++i) xs.push_back(std::ldexp(u(g) / 70000.f, ex(g)));
  for (int i = 0; i < 1000; ++i) {  // exact ties between neighbouring f16 values
    uint16_t h = (uint16_t)(g() % 0x7bff);
    xs.push_back((float)((ref_f16_value(h) + ref_f16_value((uint16_t)(h + 1))) / 2));
  }
  for (DType t : {DType::f16, DType::bf16}) {
    Dev x = put32({(int64_t)xs.size()}, xs);
    Dev y = out_like({(int64_t)xs.size()}, t);
    launch(node(Op::Cast, {{"dtype", std::string(dtype_name(t))}}), {&x}, y);
    std::vector<uint16_t> got = get16(y);
    int bad = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      uint16_t w = ref_round(t, xs[i]);
      // f32 subnormal inputs may be flushed to zero by the device before rounding
      bool flushed = std::fpclassify(xs[i]) == FP_SUBNORMAL && (got[i] & 0x7fff) == 0;
      if (got[i] != w && !flushed && bad++ < 5)
        ADD_FAILURE() << dtype_name(t) << ": " << xs[i] << " rounded to bits " << got[i] << ", want " << w;
    }
    EXPECT_EQ(bad, 0) << dtype_name(t);
  }
}

// Mixed elementwise operands: f16 + f32 -> bf16 and bf16 * f16 -> f16 (broadcast), each value
// computed in f32 and rounded once on store.
TEST(VulkanHalf, MixedElementwiseRoundsOnStore) {
  const int64_t R = 33, C = 65;
  auto a = random16(DType::f16, R * C, 1);
  auto b = random16(DType::bf16, C, 2);
  std::vector<float> c(R * C);
  std::mt19937 g(3);
  for (auto& v : c) v = std::uniform_real_distribution<float>(-3, 3)(g);
  Dev da = put16({R, C}, DType::f16, a), db = put16({C}, DType::bf16, b), dc = put32({R, C}, c);
  Dev y1 = out_like({R, C}, DType::bf16), y2 = out_like({R, C}, DType::f16);
  launch(node(Op::Add), {&da, &dc}, y1);
  launch(node(Op::Mul), {&db, &da}, y2);
  auto g1 = get16(y1), g2 = get16(y2);
  int bad = 0;
  for (int64_t i = 0; i < R * C; ++i) {
    uint16_t w1 = ref_to_bf16((float)(ref_f16_value(a[i]) + (double)c[i]));  // the f32 sum is exact here
    float prod = (float)ref_bf16_value(b[i % C]) * (float)ref_f16_value(a[i]);
    uint16_t w2 = ref_to_f16(prod);
    if ((g1[i] != w1 || g2[i] != w2) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": add " << g1[i] << " want " << w1 << ", mul " << g2[i] << " want " << w2;
  }
  EXPECT_EQ(bad, 0);
}

// An op without native 2-byte loads (sum) goes through f32 scratch and rounds its result.
TEST(VulkanHalf, WidenedOpMatchesReference) {
  const int64_t R = 7, C = 300;
  auto x = random16(DType::bf16, R * C, 5, -6, 6);
  Dev dx = put16({R, C}, DType::bf16, x);
  Dev y = out_like({R}, DType::bf16);
  launch(node(Op::Sum, {{"axes", std::vector<int64_t>{1}}}), {&dx}, y);
  auto got = get16(y);
  int bad = 0;
  for (int64_t r = 0; r < R; ++r) {
    double w = 0, mag = 0;
    for (int64_t c = 0; c < C; ++c) w += ref_bf16_value(x[r * C + c]), mag += std::fabs(ref_bf16_value(x[r * C + c]));
    double v = ref_bf16_value(got[r]);
    if (std::fabs(v - w) > 1e-6 * mag + std::fabs(w) * (1.0 / 128) && bad++ < 5)  // one bf16 ulp
      ADD_FAILURE() << "row " << r << ": " << v << " want " << w;
  }
  EXPECT_EQ(bad, 0);
}

// Prefill-sized attention on 2-byte q/k/v (GQA: 2 query heads per kv head, 70 rows, causal),
// its result rounded once into the f16/bf16 output.
TEST(VulkanHalf, AttentionF16AgainstReference) {
  for (DType t : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t Hq = 2, Hkv = 1, Sq = 70, Sk = 70, D = 16;
    auto q = random16(t, Hq * Sq * D, 31, -1, 1), k = random16(t, Hkv * Sk * D, 32, -1, 1),
         v = random16(t, Hkv * Sk * D, 33, -1, 1);
    Dev dq = put16({1, Hq, Sq, D}, t, q), dk = put16({1, Hkv, Sk, D}, t, k), dv = put16({1, Hkv, Sk, D}, t, v);
    Dev y = out_like({1, Hq, Sq, D}, t);
    launch(node(Op::Attention, {{"causal", true}}), {&dq, &dk, &dv}, y);
    auto got = get16(y);
    const double scale = 1.0 / std::sqrt((double)D), ulp = t == DType::f16 ? 1.0 / 1024 : 1.0 / 128;
    int bad = 0;
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        std::vector<double> p(Sk, 0);
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double sc = 0;
          for (int64_t d = 0; d < D; ++d) sc += ref_value(t, q[(h * Sq + i) * D + d]) * ref_value(t, k[j * D + d]);
          p[j] = sc * scale;
          mx = std::max(mx, p[j]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += p[j] = std::exp(p[j] - mx);
        for (int64_t d = 0; d < D; ++d) {
          double w = 0;
          for (int64_t j = 0; j <= i; ++j) w += p[j] / sum * ref_value(t, v[j * D + d]);
          double g = ref_value(t, got[(h * Sq + i) * D + d]);
          if (std::fabs(g - w) > ulp * std::fabs(w) + 1e-4 && bad++ < 5)
            ADD_FAILURE() << "head " << h << " row " << i << " col " << d << ": " << g << " want " << w;
        }
      }
    EXPECT_EQ(bad, 0);
  }
}

// ---------------------------------------------------------------- row ops on 2-byte storage
// norm, softmax, rope and attention read f16/bf16 directly (their ".h16" shaders), compute in
// f32 and round once into the 2-byte output: checked against double-precision loops over the
// inputs' exact values, within one unit in the output's last place plus a small f32 term.

struct Half16 {
  DType t;
  std::vector<uint16_t> h;
  double at(size_t i) const { return ref_value(t, h[i]); }
};
Half16 half_rand(DType t, size_t n, uint32_t seed, double lo = -2, double hi = 2) {
  return {t, random16(t, n, seed, lo, hi)};
}
double out_ulp(DType t) { return t == DType::f16 ? 1.0 / 1024 : 1.0 / 128; }
// Compares a 2-byte result with its reference: |got - want| <= ulp * |want| + abs_tol (plus half
// an f16 subnormal step for f16). Reports the first few mismatches.
void expect_half_close(DType t, const std::vector<uint16_t>& got, const std::vector<double>& want, double abs_tol,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double g = ref_value(t, got[i]), w = want[i];
    double tol = out_ulp(t) * std::fabs(w) + abs_tol + (t == DType::f16 ? 3e-8 : 0.0);
    if (!(std::fabs(g - w) <= tol) && bad++ < 5)
      ADD_FAILURE() << what << " " << dtype_name(t) << ": element " << i << " = " << g << ", want " << w;
  }
  EXPECT_EQ(bad, 0) << what << " " << dtype_name(t);
}

// layer_norm (weight, bias), rms_norm (weight, and without), and both vjps; rows that are not a
// multiple of the work group, and one row longer than the register cache (re-read from memory).
// x and y at odd offsets (norm.comp), and at multiples of 4 elements with rows of 4·n (the
// forward norms on norm_rows.comp: a subgroup per row; ViT-S's 384 over 37 rows, rows of 1000
// taking 8 chunks a lane), against a double reference loop.
TEST(VulkanHalf, NormsReadTwoByteStorage) {
  if (!two_byte()) GTEST_SKIP() << "device without 16-bit storage buffers";
  for (DType t : {DType::f16, DType::bf16})
    for (auto [R, D, off] : std::vector<std::tuple<int64_t, int64_t, size_t>>{
             {5, 300, 3}, {1, 33000, 3}, {5, 300, 4}, {37, 384, 8}, {3, 1000, 4}}) {
      const std::string sz = " R" + std::to_string(R) + " D" + std::to_string(D) + " offset " + std::to_string(off);
      Half16 x = half_rand(t, R * D, 11, -3, 3), w = half_rand(t, D, 12, 0.5, 1.5), b = half_rand(t, D, 13),
             dy = half_rand(t, R * D, 14, -1, 1);
      Dev dx = put16({R, D}, t, x.h, off), dw = put16({D}, t, w.h), db = put16({D}, t, b.h), ddy = put16({R, D}, t, dy.h);
      for (int mode = 0; mode < 5; ++mode) {
        // 0 layer_norm(x, w, b), 1 rms_norm(x, w), 2 rms_norm(x), 3 layer_norm_vjp(dy, x), 4 rms_norm_vjp(dy, x)
        const bool layer = mode == 0 || mode == 3, vjp = mode >= 3;
        const double eps = layer ? 1e-5 : 1e-6;
        Dev y = out_like({R, D}, t, off == 3 ? 1 : 8);
        ir::Node n = node(mode == 0 ? Op::LayerNorm : mode <= 2 ? Op::RmsNorm : mode == 3 ? Op::LayerNormVjp : Op::RmsNormVjp);
        std::vector<const Dev*> ins = vjp ? std::vector<const Dev*>{&ddy, &dx}
                                          : mode == 0 ? std::vector<const Dev*>{&dx, &dw, &db}
                                          : mode == 1 ? std::vector<const Dev*>{&dx, &dw} : std::vector<const Dev*>{&dx};
        launch(n, ins, y);
        std::vector<double> want(R * D);
        for (int64_t r = 0; r < R; ++r) {
          double mean = 0, q = 0;
          if (layer) {
            for (int64_t j = 0; j < D; ++j) mean += x.at(r * D + j);
            mean /= D;
          }
          for (int64_t j = 0; j < D; ++j) q += (x.at(r * D + j) - mean) * (x.at(r * D + j) - mean);
          double rstd = 1 / std::sqrt(q / D + eps);
          double mg = 0, mgx = 0;
          for (int64_t j = 0; j < D; ++j) {
            double xh = (x.at(r * D + j) - mean) * rstd;
            mg += dy.at(r * D + j);
            mgx += dy.at(r * D + j) * (layer ? xh : x.at(r * D + j));
          }
          mg /= D, mgx /= D;
          for (int64_t j = 0; j < D; ++j) {
            double xv = x.at(r * D + j), xh = (xv - mean) * rstd, g = dy.at(r * D + j);
            double v = mode == 0 ? xh * w.at(j) + b.at(j)
                       : mode == 1 ? xh * w.at(j)
                       : mode == 2 ? xh
                       : mode == 3 ? rstd * (g - mg - xh * mgx)
                                   : rstd * g - xv * rstd * rstd * rstd * mgx;
            want[r * D + j] = v;
          }
        }
        expect_half_close(t, get16(y), want, 2e-5, std::string(ir::op_name(n.op)) + " mode " + std::to_string(mode) + sz);
      }
    }
}

// Unary ops over contiguous 2-byte runs (unary_vec.comp where x and y start at multiples of 8
// elements: 16-byte accesses, the last n % 8 values one by one; unary.comp otherwise), against a
// double-precision loop: gelu (erf and tanh forms, ViT's MLP), exp, sigmoid, with zeros, infinities,
// NaN and the largest finite values among the inputs. Then the same launches with
// RLX_VK_UNARY_VEC=0 (unary.comp) and =1 (f16 through the integer conversions; the default takes
// the conversion instructions) must give the same bits (the kernels widen and round alike).
TEST(VulkanHalf, UnaryOpsOverContiguousTwoByteRuns) {
  if (!two_byte()) GTEST_SKIP() << "device without 16-bit storage buffers";
  auto gelu = [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); };
  auto gelu_t = [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); };
  struct U {
    ir::Node n;
    std::function<double(double)> f;
    const char* name;
  };
  std::vector<U> ops = {{node(Op::Gelu), gelu, "gelu"},
                        {node(Op::Gelu, {{"approximate", std::string("tanh")}}), gelu_t, "gelu tanh"},
                        {node(Op::Exp), [](double x) { return std::exp(x); }, "exp"},
                        {node(Op::Sigmoid), [](double x) { return 1 / (1 + std::exp(-x)); }, "sigmoid"}};
  for (DType t : {DType::f16, DType::bf16})
    for (auto [n, xoff, yoff] : std::vector<std::tuple<int64_t, size_t, size_t>>{
             {40000, 8, 16}, {8 * 700 + 5, 16, 8}, {64, 8, 8}, {3, 8, 8}, {8 * 700 + 5, 3, 8}, {1000, 8, 1}}) {
      const std::string sz = " n " + std::to_string(n) + " offsets " + std::to_string(xoff) + "/" + std::to_string(yoff);
      std::vector<uint16_t> x = random16(t, n, 21, -6, 6);
      const std::vector<double> special = {0.0, -0.0, INFINITY, -INFINITY, NAN, t == DType::f16 ? 65504.0 : 3e38,
                                           t == DType::f16 ? -65504.0 : -3e38, 1e-7, -1e-7};
      for (size_t i = 0; i < special.size() && i < (size_t)n; ++i) x[(i * 977) % n] = ref_round(t, special[i]);
      Dev dx = put16({n}, t, x, xoff);
      for (const U& u : ops) {
        Dev y = out_like({n}, t, yoff), y0 = out_like({n}, t, yoff), ys = out_like({n}, t, yoff);
        launch(u.n, {&dx}, y);
        {
          test::ScopedEnv env;
          env.set("RLX_VK_UNARY_VEC", "0");
          launch(u.n, {&dx}, y0);
          env.set("RLX_VK_UNARY_VEC", "1");  // f16 through the integer conversions
          launch(u.n, {&dx}, ys);
        }
        auto got = get16(y), got0 = get16(y0), gots = get16(ys);
        int bad = 0, differ = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double xv = ref_value(t, x[i]), w = u.f(xv), g = ref_value(t, got[i]);
          // gelu's f32 evaluation loses the tail below x ~ -5 to 1 + erf's cancellation (absolute
          // error ~1e-7 |x|, as on the CPU); the rest within one output ulp.
          const double tol = out_ulp(t) * std::fabs(w) + (t == DType::f16 ? 6e-8 : 1e-38) +
                             (u.n.op == Op::Gelu ? 2e-7 * std::fabs(xv) : 0.0);
          const bool ok = std::isnan(w) ? std::isnan(g) : std::isinf(w) ? g == w : std::fabs(g - w) <= tol;
          if (!ok && bad++ < 5)
            ADD_FAILURE() << u.name << " " << dtype_name(t) << sz << ": x[" << i << "] = " << xv << " gave " << g
                          << ", want " << w;
          if ((got[i] != got0[i] || gots[i] != got0[i]) && differ++ < 5)
            ADD_FAILURE() << u.name << " " << dtype_name(t) << sz << ": element " << i << " " << got[i]
                          << " (integer conversions " << gots[i] << ") against unary.comp's " << got0[i];
        }
        EXPECT_EQ(bad + differ, 0) << u.name << " " << dtype_name(t) << sz;
      }
    }
}

// softmax over the last axis (cached and uncached rows) and an inner axis, scaled_masked_softmax
// (causal, every key of a row hidden for Tq > Tk), softmax_vjp.
TEST(VulkanHalf, SoftmaxReadsTwoByteStorage) {
  if (!two_byte()) GTEST_SKIP() << "device without 16-bit storage buffers";
  for (DType t : {DType::f16, DType::bf16}) {
    struct Case { Shape s; int64_t axis; };
    for (const Case& c : std::vector<Case>{{{7, 300}, -1}, {{3, 5, 4}, 1}, {{2, 40000}, -1}}) {
      const int64_t n = shape_numel(c.s), r = (int64_t)c.s.size(), ax = (c.axis + r) % r;
      int64_t len = c.s[ax], inner = 1;
      for (int64_t d = ax + 1; d < r; ++d) inner *= c.s[d];
      Half16 x = half_rand(t, n, 21, -6, 6), dy = half_rand(t, n, 22, -1, 1);
      Dev dx = put16(c.s, t, x.h), ddy = put16(c.s, t, dy.h);
      Dev y = out_like(c.s, t);
      launch(node(Op::Softmax, {{"axis", c.axis}}), {&dx}, y);
      auto y16 = get16(y);
      // the vjp takes the device's (2-byte) softmax as its y
      Dev yv = put16(c.s, t, y16), dx2 = out_like(c.s, t);
      launch(node(Op::SoftmaxVjp, {{"axis", c.axis}}), {&ddy, &yv}, dx2);
      std::vector<double> want(n), want_vjp(n);
      for (int64_t o = 0; o < n / (len * inner); ++o)
        for (int64_t in = 0; in < inner; ++in) {
          auto at = [&](int64_t j) { return (o * len + j) * inner + in; };
          double mx = -INFINITY, sum = 0, dot = 0;
          for (int64_t j = 0; j < len; ++j) mx = std::max(mx, x.at(at(j)));
          for (int64_t j = 0; j < len; ++j) sum += std::exp(x.at(at(j)) - mx);
          for (int64_t j = 0; j < len; ++j) want[at(j)] = std::exp(x.at(at(j)) - mx) / sum;
          for (int64_t j = 0; j < len; ++j) dot += dy.at(at(j)) * ref_value(t, y16[at(j)]);
          for (int64_t j = 0; j < len; ++j) want_vjp[at(j)] = ref_value(t, y16[at(j)]) * (dy.at(at(j)) - dot);
        }
      const std::string sz = " " + shape_str(c.s) + " axis " + std::to_string(c.axis);
      expect_half_close(t, y16, want, 1e-6, "softmax" + sz);
      expect_half_close(t, get16(dx2), want_vjp, 1e-5, "softmax_vjp" + sz);
    }
    // scaled_masked_softmax, causal: [2, 3, Tq, Tk] with Tq 5 > Tk 4 (the first row sees no key)
    // and with Tq 5 < Tk 9
    for (int64_t Tk : {4, 9}) {
      const int64_t Tq = 5, n = 2 * 3 * Tq * Tk;
      const double scale = 0.7;
      Half16 x = half_rand(t, n, 23, -4, 4);
      Dev dx = put16({2, 3, Tq, Tk}, t, x.h), y = out_like({2, 3, Tq, Tk}, t);
      launch(node(Op::ScaledMaskedSoftmax, {{"scale", scale}, {"causal", true}}), {&dx}, y);
      std::vector<double> want(n, 0.0);
      for (int64_t row = 0; row < n / Tk; ++row) {
        int64_t lim = std::clamp<int64_t>(row % Tq + Tk - Tq + 1, 0, Tk);
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < lim; ++j) mx = std::max(mx, x.at(row * Tk + j) * scale);
        for (int64_t j = 0; j < lim; ++j) sum += std::exp(x.at(row * Tk + j) * scale - mx);
        for (int64_t j = 0; j < lim; ++j) want[row * Tk + j] = std::exp(x.at(row * Tk + j) * scale - mx) / sum;
      }
      expect_half_close(t, get16(y), want, 1e-6, "scaled_masked_softmax Tk " + std::to_string(Tk));
    }
  }
}

// rope, half-split and interleaved, over all features and over the first `dims` (the rest copied
// bit for bit), at a non-zero offset.
TEST(VulkanHalf, RopeReadsTwoByteStorage) {
  if (!two_byte()) GTEST_SKIP() << "device without 16-bit storage buffers";
  const int64_t B = 2, H = 3, S = 7, D = 10, offset = 5;
  const double base = 10000.0;
  for (DType t : {DType::f16, DType::bf16})
    for (bool trad : {false, true})
      for (int64_t dims : {D, int64_t(6)}) {
        Half16 x = half_rand(t, B * H * S * D, 31);
        Dev dx = put16({B, H, S, D}, t, x.h), y = out_like({B, H, S, D}, t);
        launch(node(Op::Rope, {{"dims", dims}, {"traditional", trad}, {"offset", offset}}), {&dx}, y);
        std::vector<double> want(x.h.size());
        for (int64_t row = 0; row < B * H * S; ++row) {
          const double p = (double)(offset + row % S);
          for (int64_t f = 0; f < D; ++f) {
            const size_t i = row * D + f;
            if (f >= dims) {
              want[i] = x.at(i);
              continue;
            }
            int64_t pair = trad ? f / 2 : f % (dims / 2), fa = trad ? 2 * pair : pair, fb = trad ? fa + 1 : pair + dims / 2;
            double th = p * std::pow(base, -2.0 * pair / dims), a = x.at(row * D + fa), b = x.at(row * D + fb);
            want[i] = f == fa ? a * std::cos(th) - b * std::sin(th) : a * std::sin(th) + b * std::cos(th);
          }
        }
        expect_half_close(t, get16(y), want, 1e-5,
                          std::string("rope") + (trad ? " traditional" : "") + " dims " + std::to_string(dims));
      }
}

// Flash attention on 2-byte q/k/v (and a 2-byte float mask): the small-block kernel, its key
// splits (flash decoding, merged by attention_combine) and the register-tiled kernel; GQA, causal,
// float and bool masks with a fully hidden row, head dims that are not multiples of the chunks.
struct HalfAttnCase {
  int64_t B, Hq, Hkv, Sq, Sk, D, Dv;
  bool causal;
  int mask;  // 0 none, 1 float [Sq, Sk] in the same 2-byte dtype, 2 bool [B, 1, Sq, Sk] (row 1 of batch 0 hidden)
};
std::vector<uint16_t> check_half_attention(DType t, const HalfAttnCase& c, size_t offset = 3, double abs_tol = 2e-5) {
  const std::string what = "attention B" + std::to_string(c.B) + " Hq" + std::to_string(c.Hq) + " Hkv" +
                           std::to_string(c.Hkv) + " Sq" + std::to_string(c.Sq) + " Sk" + std::to_string(c.Sk) + " D" +
                           std::to_string(c.D) + " Dv" + std::to_string(c.Dv) + (c.causal ? " causal" : "") +
                           " mask " + std::to_string(c.mask) + " offset " + std::to_string(offset);
  Half16 q = half_rand(t, c.B * c.Hq * c.Sq * c.D, 41, -1, 1), k = half_rand(t, c.B * c.Hkv * c.Sk * c.D, 42, -1, 1),
         v = half_rand(t, c.B * c.Hkv * c.Sk * c.Dv, 43, -1, 1), mf = half_rand(t, c.Sq * c.Sk, 44, -3, 1);
  std::vector<uint8_t> mb(c.B * c.Sq * c.Sk);
  std::mt19937 g(45);
  for (auto& m : mb) m = (g() % 3) ? 1 : 0;
  for (int64_t j = 0; j < c.Sk && c.Sq > 1; ++j) mb[1 * c.Sk + j] = 0;
  Dev dq = put16({c.B, c.Hq, c.Sq, c.D}, t, q.h, offset), dk = put16({c.B, c.Hkv, c.Sk, c.D}, t, k.h, offset),
      dv = put16({c.B, c.Hkv, c.Sk, c.Dv}, t, v.h, offset);
  Dev dm = c.mask == 1 ? put16({c.Sq, c.Sk}, t, mf.h) : put_raw({c.B, 1, c.Sq, c.Sk}, DType::boolean, mb.data());
  Dev y = out_like({c.B, c.Hq, c.Sq, c.Dv}, t);
  std::vector<const Dev*> ins = {&dq, &dk, &dv};
  if (c.mask) ins.push_back(&dm);
  launch(node(Op::Attention, {{"causal", c.causal}}), ins, y);
  auto at = [](const Half16& x) { return [&x](int64_t i) { return x.at(i); }; };
  auto want = ref_attention(c, at(q), at(k), at(v), at(mf), [&mb](int64_t i) { return mb[i]; });
  auto got = get16(y);
  expect_half_close(t, got, want, abs_tol, what);
  if (c.mask == 2 && c.Sq > 1) {  // the fully hidden row is exactly zero
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t e = 0; e < c.Dv; ++e) EXPECT_EQ(got[(h * c.Sq + 1) * c.Dv + e], 0) << what;
  }
  return got;
}

TEST(VulkanHalf, AttentionReadsTwoByteStorage) {
  if (!two_byte()) GTEST_SKIP() << "device without 16-bit storage buffers";
  for (DType t : {DType::f16, DType::bf16})
    for (size_t offset : {3, 2}) {  // odd offsets: one value per load; even: pairs of halves per 32-bit load
      // (head dims are specialization constants: the cases share D=40, Dv=24 to keep pipeline
      // compilation on lavapipe short)
      check_half_attention(t, {2, 4, 2, 9, 45, 40, 24, true, 1}, offset);    // small blocks, GQA, causal + 2-byte mask
      check_half_attention(t, {2, 2, 1, 9, 33, 40, 24, false, 2}, offset);   // bool mask with a fully hidden row
      check_half_attention(t, {1, 4, 2, 1, 300, 40, 24, true, 0}, offset);   // decode: keys split, combined
      check_half_attention(t, {2, 2, 1, 5, 260, 40, 24, false, 1}, offset);  // split keys with a 2-byte mask
      check_half_attention(t, {2, 4, 2, 70, 150, 40, 24, false, 2}, offset); // tiled: ragged blocks, bool mask
      check_half_attention(t, {1, 2, 1, 100, 100, 40, 24, true, 1}, offset); // tiled: causal + 2-byte mask
    }
}

// The tensor-core flash kernel (attention_coop.comp: f16 q/k/v, head dims multiples of 16, rows
// of q/k/v at multiples of 8 halves), forced by RLX_VK_FLASH_COOP=1 even for few query rows; on a
// device without VK_NV_cooperative_matrix the scalar kernels run the same cases. Its weights P are
// rounded to f16 before P.V (the tensor cores' input type): each weight in [0, 1] is off by at
// most 2^-12 of itself, the row sum uses the rounded weights, so the output is a weighted mean of
// v (|v| <= 1) with weights off by <= 2^-11 relative: 1e-3 absolute covers it. The outputs of
// RLX_VK_FLASH_COOP=0 (scalar, f32 weights) are compared too: the number of elements that differ
// is printed, as evidence of which kernel ran (0 everywhere means the tensor-core one did not).
// bf16 (the prebuilt attention_cm1.bf16, on a device listing bf16 KHR cooperative-matrix shapes):
// P rounded to bf16 is off by at most 2^-8 of itself, so weights off by <= 2^-7 relative after
// normalising by the rounded sum: 8e-3 absolute (2^-7 = 7.8e-3) covers it.
TEST(VulkanHalf, AttentionOnTensorCores) {
  if (!two_byte()) GTEST_SKIP() << "device without 16-bit storage buffers";
  ScopedEnv env;
  const std::vector<HalfAttnCase> cases = {
      {2, 4, 2, 70, 150, 64, 64, true, 1},     // GQA, causal + f16 mask, ragged row and key blocks
      {2, 2, 1, 40, 100, 128, 128, false, 2},  // head dim 128, bool mask with a fully hidden row
      {1, 2, 1, 100, 100, 32, 48, true, 0},    // D != Dv, 3 column tiles of v over 4 subgroups
      {1, 1, 1, 80, 50, 64, 64, true, 0},      // causal with Sq > Sk: the first rows see no key (zeros)
      {1, 2, 2, 9, 70, 16, 16, false, 0},      // few rows, smallest head dim
  };
  for (DType t : {DType::f16, DType::bf16})
    for (const auto& c : cases) {
      env.set("RLX_VK_FLASH_COOP", "1");
      auto coop = check_half_attention(t, c, 8, t == DType::f16 ? 1e-3 : 8e-3);
      env.set("RLX_VK_FLASH_COOP", "0");
      auto scalar = check_half_attention(t, c, 8);
      size_t diff = 0;
      for (size_t i = 0; i < coop.size() && i < scalar.size(); ++i) diff += coop[i] != scalar[i];
      std::printf("attention %s Sq %lld Sk %lld D %lld: %zu of %zu elements differ from the scalar kernel's\n",
                  dtype_name(t), (long long)c.Sq, (long long)c.Sk, (long long)c.D, diff, coop.size());
    }
}

// attention_coop_rows.comp (16 query rows per subgroup, several subgroups per work group, keys in
// double-buffered blocks of 32 or 64) in its default shape ("") and shapes RLX_VK_FLASH_ROWS can
// force, and attention_coop.comp (=0), against the double reference with AttentionOnTensorCores's 1e-3: head
// dims 64 (ViT) and 128 (the decoder), causal and not, query and key lengths that are not
// multiples of the row or key blocks, GQA packing across a block's rows, f16 and bool masks
// (a fully hidden row is exactly zero: check_half_attention), Sq > Sk with causal rows that see no
// key, D != Dv. A shape that does not fit the device's shared memory falls back to
// attention_coop.comp, so each still checks a kernel. The elements that differ from
// attention_coop.comp's output are printed (0 everywhere would mean the variants did not run).
// Without VK_NV_cooperative_matrix (lavapipe) the scalar kernels take the cases once.
TEST(VulkanHalf, AttentionRowsVariantsOnTensorCores) {
  if (!two_byte()) GTEST_SKIP() << "device without 16-bit storage buffers";
  ScopedEnv env;
  bool tc = false, all = false, linear = false;
  vk().attention_views(&tc, &all, &linear);  // f16: true where the tensor-core flash kernel runs
  const std::vector<HalfAttnCase> cases = {
      {2, 2, 2, 197, 197, 64, 64, false, 0},  // ViT-S/16's shape: 197 rows and keys
      {1, 3, 3, 150, 150, 128, 128, true, 0}, // the decoder's head dim, causal
      {2, 4, 2, 70, 150, 64, 64, true, 1},    // GQA (a block's rows span both heads), causal + f16 mask
      {1, 2, 1, 77, 45, 128, 128, false, 2},  // head dim 128, bool mask with a fully hidden row
      {1, 1, 1, 80, 50, 64, 64, true, 0},     // causal with Sq > Sk: the first rows see no key
      {1, 2, 1, 100, 100, 32, 48, true, 0},   // D != Dv
  };
  const std::vector<const char*> shapes = tc ? std::vector<const char*>{"0", "", "4:32", "8:32", "13:32", "6:32", "2:64", "1:32", "4:64"}
                                             : std::vector<const char*>{""};
  env.set("RLX_VK_FLASH_COOP", "1");
  for (const auto& c : cases) {
    std::vector<uint16_t> base;
    for (const char* s : shapes) {
      env.set("RLX_VK_FLASH_ROWS", s);
      auto got = check_half_attention(DType::f16, c, 8, 1e-3);
      if (std::string(s) == "0") {
        base = got;
        continue;
      }
      size_t diff = 0;
      for (size_t i = 0; i < got.size() && i < base.size(); ++i) diff += got[i] != base[i];
      std::printf("attention rows %s Sq %lld Sk %lld D %lld%s: %zu of %zu elements differ from attention_coop's\n", *s ? s : "default",
                  (long long)c.Sq, (long long)c.Sk, (long long)c.D, c.causal ? " causal" : "", diff, got.size());
    }
  }
}

// Attention with `views` (compiled mode's attention_views pass, ir::AttentionViews): q, k, v read
// at batch, head and position strides in place in larger tensors, o written at strides. Case 1 is
// ViT's packed product: q, k and v (b, h, s, d) at 8 + s*B*3E + b*3E + {0, E, 2E} + h*D + d of
// one [8 + S*B*3E] tensor, o at s*B*E + b*E + h*D + d ([S, B, E], the layout the out projection
// reads). Case 2: Sq != Sk, causal, D != Dv, q its own [Sq, B, H, D] tensor, k and v interleaved
// in one [Sk, B, H, D + Dv] tensor, o [B, Sq, H, Dv]. Against the double reference over the
// same elements; the tensor-core kernel (RLX_VK_FLASH_COOP=1, where the device has it; 1e-3 as
// in AttentionOnTensorCores) and the copies through scratch into the scalar kernels
// (RLX_VK_FLASH_COOP=0, kernels.cpp's attention_views) both.
TEST(VulkanHalf, AttentionViewsReadAndWriteAtStrides) {
  if (!two_byte()) GTEST_SKIP() << "device without 16-bit storage buffers";
  ScopedEnv env;
  struct Case {
    int64_t B, Hq, Hkv, Sq, Sk, D, Dv;
    bool causal;
    int mask;
  };
  for (int which = 0; which < 2; ++which) {
    const DType t = DType::f16;
    Case c = which == 0 ? Case{2, 3, 3, 70, 70, 64, 64, false, 0} : Case{1, 2, 2, 40, 100, 32, 48, true, 0};
    const int64_t B = c.B, H = c.Hq, E = H * c.D;
    ir::AttentionViews av;
    av.B = B, av.H = H, av.Sq = c.Sq, av.Sk = c.Sk, av.D = c.D, av.Dv = c.Dv;
    std::vector<int64_t> sizes;  // elements of the q, k, v tensors
    if (which == 0) {
      for (int k = 0; k < 3; ++k) {
        av.off[k] = 8 + k * E;
        av.stride[k][0] = 3 * E, av.stride[k][1] = c.D, av.stride[k][2] = B * 3 * E;
      }
      av.stride[3][0] = E, av.stride[3][1] = c.D, av.stride[3][2] = B * E;
      av.out_shape = {c.Sq, B, E};
      sizes = {8 + c.Sq * B * 3 * E, 8 + c.Sq * B * 3 * E, 8 + c.Sq * B * 3 * E};
    } else {
      const int64_t W = c.D + c.Dv;
      av.off[0] = 0, av.stride[0][0] = H * c.D, av.stride[0][1] = c.D, av.stride[0][2] = B * H * c.D;
      for (int k = 1; k < 3; ++k) {
        av.off[k] = k == 1 ? 0 : c.D;
        av.stride[k][0] = H * W, av.stride[k][1] = W, av.stride[k][2] = B * H * W;
      }
      av.stride[3][0] = c.Sq * H * c.Dv, av.stride[3][1] = c.Dv, av.stride[3][2] = H * c.Dv;
      av.out_shape = {B, c.Sq, H, c.Dv};
      sizes = {c.Sq * B * H * c.D, c.Sk * B * H * W, c.Sk * B * H * W};
    }
    Half16 qb = half_rand(t, sizes[0], 51, -1, 1), kb = half_rand(t, sizes[1], 52, -1, 1);
    Half16 vb = which == 0 ? qb : kb;  // the same tensor
    if (which == 0) kb = qb;
    auto idx = [&](int k, int64_t i, int64_t S, int64_t W) {  // flat [B, H, S, W] index -> storage element
      const int64_t d = i % W, s = i / W % S, h = i / W / S % H, b = i / W / S / H;
      return (k < 3 ? av.off[k] : 0) + b * av.stride[k][0] + h * av.stride[k][1] + s * av.stride[k][2] + d;
    };
    auto want = ref_attention(
        c, [&](int64_t i) { return qb.at(idx(0, i, c.Sq, c.D)); }, [&](int64_t i) { return kb.at(idx(1, i, c.Sk, c.D)); },
        [&](int64_t i) { return vb.at(idx(2, i, c.Sk, c.Dv)); }, [](int64_t) { return 0.0; }, [](int64_t) { return 1; });
    ir::Node n = node(Op::Attention, {{"causal", c.causal}});
    ir::set_attention_views(n.attrs, av);
    for (const char* coop : {"1", "0"}) {
      env.set("RLX_VK_FLASH_COOP", coop);
      Dev dq = put16({sizes[0]}, t, qb.h, 8), dk = put16({sizes[1]}, t, kb.h, 8);
      Dev y = out_like(Shape(av.out_shape.begin(), av.out_shape.end()), t, 8);
      if (which == 0) launch(n, {&dq, &dq, &dq}, y);
      else launch(n, {&dq, &dk, &dk}, y);
      auto got = get16(y);
      std::vector<uint16_t> logical(want.size());
      for (size_t i = 0; i < want.size(); ++i) logical[i] = got.at(idx(3, (int64_t)i, c.Sq, c.Dv));
      expect_half_close(t, logical, want, 1e-3,
                        std::string("attention views case ") + std::to_string(which) + " RLX_VK_FLASH_COOP=" + coop);
    }
  }
}

// Every finite f16 / bf16 value through attention's staging of v: a bool mask shows query i only
// key i, so its output row is exactly v's row i (p = 1, every other p exactly 0), and rounding it
// back to the dtype is exact. Covers both kernels (tiled: 1024 rows; small blocks: 32 batches
// of 32) with pairs of halves per load (even offsets) and one by one (odd).
TEST(VulkanHalf, AttentionStagesEveryValueExactly) {
  if (!two_byte()) GTEST_SKIP() << "device without 16-bit storage buffers";
  for (DType t : {DType::f16, DType::bf16}) {
    std::vector<uint16_t> all(65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      const double x = ref_value(t, (uint16_t)i);
      all[i] = std::isfinite(x) ? (uint16_t)i : 0;  // 0 * inf or NaN would spread to every row
    }
    for (auto [B, S] : std::vector<std::pair<int64_t, int64_t>>{{1, 1024}, {32, 32}})
      for (size_t offset : {2, 3}) {
        const int64_t D = 2, Dv = 64;
        std::vector<uint16_t> zeros(B * S * D, 0);
        std::vector<uint8_t> eye(B * S * S, 0);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < S; ++i) eye[(b * S + i) * S + i] = 1;
        Dev dq = put16({B, 1, S, D}, t, zeros, offset), dk = put16({B, 1, S, D}, t, zeros, offset),
            dv = put16({B, 1, S, Dv}, t, all, offset);
        Dev dm = put_raw({B, 1, S, S}, DType::boolean, eye.data());
        Dev y = out_like({B, 1, S, Dv}, t);
        launch(node(Op::Attention), {&dq, &dk, &dv, &dm}, y);
        auto got = get16(y);
        int bad = 0;
        for (size_t i = 0; i < all.size(); ++i) {
          const double w = ref_value(t, all[i]), g = ref_value(t, got[i]);
          // bf16 values below f32's smallest normal are f32 denormals: f32 arithmetic may flush
          // them to zero (NVIDIA's does), here as in the f32 kernel
          if (g == 0 && std::fabs(w) < 0x1p-126) continue;
          if (g != w && bad++ < 5)
            ADD_FAILURE() << dtype_name(t) << " B" << B << " offset " << offset << ": bits " << std::hex << all[i]
                          << " came back as " << got[i] << std::dec;
        }
        EXPECT_EQ(bad, 0) << dtype_name(t) << " B" << B << " offset " << offset;
      }
  }
}

// ---------------------------------------------------------------- matmul / linear

struct Operand {
  DType dt;
  std::vector<uint16_t> h;  // 2-byte values
  std::vector<float> f;     // f32 values
  double at(int64_t i) const { return dt == DType::f32 ? (double)f[i] : ref_value(dt, h[i]); }
};
Operand make(DType dt, int64_t n, uint32_t seed) {
  Operand o{dt, {}, {}};
  if (dt == DType::f32) {
    std::mt19937 g(seed);
    o.f.resize(n);
    for (auto& v : o.f) v = std::uniform_real_distribution<float>(-1, 1)(g);
  } else {
    o.h = random16(dt, n, seed, -1, 1);
  }
  return o;
}
Dev upload(const Shape& s, const Operand& o) { return o.dt == DType::f32 ? put32(s, o.f) : put16(s, o.dt, o.h); }

// y = op(a) . op(b) (+ bias) on the device against a double-precision loop; the device sums
// in f32, so the result may differ from the double one by f32 rounding before its own
// rounding to y's dtype: allowed one unit in y's last place plus a K-scaled f32 term.
void check_matmul(bool linear, int64_t M, int64_t N, int64_t K, bool ta, bool tb, DType adt, DType bdt, DType ydt,
                  bool with_bias, uint32_t seed) {
  SCOPED_TRACE(std::string(linear ? "linear" : "matmul") + " M" + std::to_string(M) + " N" + std::to_string(N) +
               " K" + std::to_string(K) + (ta ? " ta" : "") + (tb ? " tb" : "") + " " + dtype_name(adt) + " x " +
               dtype_name(bdt) + " -> " + dtype_name(ydt) + (with_bias ? " +bias" : ""));
  if (linear) ta = false, tb = true;
  Operand a = make(adt, M * K, seed), b = make(bdt, K * N, seed + 1), bias = make(bdt, N, seed + 2);
  Shape as = ta ? Shape{K, M} : Shape{M, K}, bs = tb ? Shape{N, K} : Shape{K, N};
  Dev da = upload(as, a), db = upload(bs, b), dbias = upload({N}, bias);
  Dev y = out_like({M, N}, ydt);
  ir::Node n = linear ? node(Op::Linear) : node(Op::Matmul, {{"transpose_a", ta}, {"transpose_b", tb}});
  std::vector<const Dev*> ins = {&da, &db};
  if (with_bias) ins.push_back(&dbias);
  launch(n, ins, y);
  std::vector<double> got;
  if (ydt == DType::f32) {
    for (float v : get32(y)) got.push_back(v);
  } else {
    for (uint16_t v : get16(y)) got.push_back(ref_value(ydt, v));
  }
  const double ulp = ydt == DType::f16 ? 1.0 / 1024 : ydt == DType::bf16 ? 1.0 / 128 : 1e-6;
  int bad = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        double p = a.at(ta ? k * M + i : i * K + k) * b.at(tb ? j * K + k : k * N + j);
        acc += p;
        mag += std::fabs(p);
      }
      if (with_bias) acc += bias.at(j), mag += std::fabs(bias.at(j));
      double g = got[i * N + j];
      double tol = ulp * std::fabs(acc) + 1e-6 * mag + (ydt == DType::f16 ? 6e-8 : 1e-30);
      if (!(std::fabs(g - acc) <= tol) && bad++ < 5)
        ADD_FAILURE() << "y[" << i << "," << j << "] = " << g << ", want " << acc << " (tol " << tol << ")";
    }
  EXPECT_EQ(bad, 0);
}

TEST(VulkanHalf, MatmulF16AndBf16OddSizesAndTransposes) {
  for (DType t : {DType::f16, DType::bf16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) check_matmul(false, 37, 53, 29, ta, tb, t, t, t, false, 11);
  // tile-aligned sizes take the vector loads (and on tensor-core devices the cooperative-matrix kernel)
  check_matmul(false, 128, 256, 96, false, false, DType::f16, DType::f16, DType::f16, false, 12);
  check_matmul(false, 64, 128, 64, true, true, DType::f16, DType::f16, DType::f16, false, 13);
  check_matmul(false, 130, 72, 40, false, true, DType::bf16, DType::bf16, DType::bf16, false, 14);
  // few rows (decode-like) and long K (split-K)
  check_matmul(false, 3, 96, 64, false, true, DType::f16, DType::f16, DType::f16, false, 15);
  check_matmul(false, 64, 64, 2048, false, false, DType::f16, DType::f16, DType::f16, false, 16);
  check_matmul(false, 64, 64, 2048, false, true, DType::bf16, DType::bf16, DType::bf16, false, 17);
}

TEST(VulkanHalf, LinearMixedDtypesAndBias) {
  // bf16 weights x f32 activations -> f32 (a bf16 model run with f32 activations), and the reverse
  check_matmul(true, 21, 45, 70, false, true, DType::f32, DType::bf16, DType::f32, true, 21);
  check_matmul(true, 64, 128, 256, false, true, DType::f32, DType::bf16, DType::f32, true, 22);
  check_matmul(true, 9, 40, 24, false, true, DType::bf16, DType::f32, DType::bf16, true, 23);
  // f16 weights x f16 activations with an f16 bias, and f16 x f16 -> f32
  check_matmul(true, 64, 192, 128, false, true, DType::f16, DType::f16, DType::f16, true, 24);
  check_matmul(true, 5, 33, 17, false, true, DType::f16, DType::f16, DType::f16, true, 25);
  check_matmul(true, 32, 64, 64, false, true, DType::f16, DType::f16, DType::f32, false, 26);
  check_matmul(true, 256, 128, 2048, false, true, DType::f16, DType::f16, DType::f16, true, 27);
}

// matmul_cm2's tile choices (kernels_coopmat.cpp), each forced through the environment: tiles
// of 128 and 256 invocations, BK 32 and 64, unrolled 2-8 slices, tile-row bands (SWZ 3 over 5
// tile rows leaves a short last band), the unclamped store of whole tiles off and on, the prefetching loop, and the
// session-12 choice; shapes with edges in M, N and K next to tile-aligned ones (whole tiles
// stored unclamped beside clamped edge tiles). On a device without VK_NV_cooperative_matrix2 the
// settings would change nothing: the other routes are checked once, on the same shapes.
TEST(VulkanHalf, TensorCoreTileChoicesAgainstReference) {
  struct Env {
    const char* name;
    const char* value;
  };
  const std::vector<std::vector<Env>> settings = {
      {},
      {{"RLX_VK_CM2_PICK", "old"}},
      {{"RLX_VK_CM2_FSTORE", "0"}},
      {{"RLX_VK_CM2", "256x128x256x64"}},
      {{"RLX_VK_CM2", "256x128x256x32x8x3"}},
      {{"RLX_VK_CM2", "256x128x128x64x2x2"}},
      {{"RLX_VK_CM2", "128x64x64x64"}},
      {{"RLX_VK_CM2", "128x64x128x32x4x3"}},
      {{"RLX_VK_CM2_SWZ", "3"}},
      {{"RLX_VK_CM2_PREF", "1"}},
      {{"RLX_VK_CM2_PREF", "1"}, {"RLX_VK_CM2", "256x128x256x32"}},
  };
  // Without NV2 tensor cores (lavapipe) the settings change nothing: the default alone, to keep CI fast.
  bool cm2 = false;
  for (const auto& [k, v] : vulkan_devices().at(0).properties) cm2 |= k == "f16 tensor cores (NV2)" && v != "none";
  for (const auto& set : settings) {
    if (!cm2 && !set.empty()) continue;
    std::string trace;
    ScopedEnv env;
    for (const auto& e : set) env.set(e.name, e.value), trace += std::string(e.name) + "=" + e.value + " ";
    SCOPED_TRACE(trace.empty() ? "default" : trace);
    check_matmul(false, 640, 264, 256, false, false, DType::f16, DType::f16, DType::f16, false, 61);  // 5 x 128 rows
    check_matmul(false, 200, 300, 136, false, true, DType::bf16, DType::bf16, DType::bf16, false, 62);
    check_matmul(false, 97, 130, 72, true, false, DType::f16, DType::f16, DType::f16, false, 63);
    check_matmul(true, 150, 70, 520, false, true, DType::f16, DType::f16, DType::f16, true, 64);
    check_matmul(true, 256, 512, 64, false, true, DType::bf16, DType::bf16, DType::bf16, true, 65);
    check_matmul(false, 128, 128, 1088, false, true, DType::f16, DType::f16, DType::f32, false, 66);
  }
}

// matmul_cm1p (VK_KHR_cooperative_matrix, register-pipelined; opt in with RLX_VK_KHRP=1 or a
// forced RLX_VK_CM1P tile) against a double loop: ragged M/N, K from one slice (8) to a split
// one (4096), odd slice counts (both register sets' last turns), transposed a and b, bias in
// f32/f16/bf16, f16/bf16/f32 outputs, under the default tile and forced ones (one and two
// register sets, 256 invocations, the band order, the 16x8x16 fragment). Without KHR tensor
// cores (lavapipe) the same products run on the other kernels.
TEST(VulkanHalf, PipelinedKhrMatmulAgainstReference) {
  if (!two_byte()) GTEST_SKIP() << "device without 16-bit storage buffers";
  // All settings where the device lists KHR shapes or is an NVIDIA GPU (on the H200 the test
  // binary's device list said "none" for the KHR shapes in session 15's first call while the
  // executor used them: printed here to find out why), else the first alone (lavapipe: the
  // settings change nothing, the products run on the other kernels).
  const auto dev = vulkan_devices().at(0);
  bool full = dev.name.find("NVIDIA") != std::string::npos;
  for (const auto& [k, v] : dev.properties)
    if (k.find("tensor cores") != std::string::npos) {
      std::fprintf(stderr, "  %s: %s\n", k.c_str(), v.c_str());
      full |= k == "f16 tensor cores (KHR)" && v != "none";
    }
  const std::vector<std::vector<std::pair<const char*, const char*>>> settings = {
      {{"RLX_VK_KHRP", "1"}},
      {{"RLX_VK_CM1P", "128x128x64x64x32x2"}},
      {{"RLX_VK_CM1P", "128x256x64x64x16x2x3"}},
      {{"RLX_VK_CM1P", "256x128x64x32x32x2"}},
      {{"RLX_VK_CM1P", "64x64x32x32x32x2"}},
      {{"RLX_VK_KHRP", "1"}, {"RLX_VK_CM1P_SHAPE", "16x8x16"}},
  };
  for (const auto& set : settings) {
    if (!full && &set != &settings.front()) continue;
    test::ScopedEnv env;
    std::string trace;
    for (const auto& [k, v] : set) env.set(k, v), trace += std::string(k) + "=" + v + " ";
    SCOPED_TRACE(trace);
    check_matmul(true, 97, 130, 72, false, true, DType::f16, DType::f16, DType::f16, true, 71);
    check_matmul(false, 200, 296, 136, false, true, DType::bf16, DType::bf16, DType::bf16, false, 72);
    check_matmul(false, 136, 264, 520, true, false, DType::f16, DType::f16, DType::f32, false, 73);
    check_matmul(false, 640, 264, 1088, false, false, DType::f16, DType::f16, DType::f16, false, 74);
    check_matmul(true, 256, 512, 64, false, true, DType::bf16, DType::bf16, DType::bf16, true, 75);
    check_matmul(false, 33, 40, 8, false, false, DType::f16, DType::f16, DType::f16, false, 76);
    check_matmul(true, 64, 72, 4096, false, true, DType::f16, DType::f16, DType::f16, true, 77);  // split K
    check_matmul(true, 130, 96, 200, false, true, DType::f16, DType::f32, DType::f32, true, 78);  // f32 b: not taken
  }
}

// Decode-sized products (M <= 16) read 2-byte weights directly in the gemv kernel.
TEST(VulkanHalf, DecodeSizedProducts) {
  check_matmul(true, 1, 300, 1000, false, true, DType::bf16, DType::bf16, DType::bf16, true, 41);
  check_matmul(true, 1, 257, 512, false, true, DType::f32, DType::bf16, DType::f32, true, 42);
  check_matmul(true, 16, 96, 200, false, true, DType::f16, DType::f16, DType::f16, false, 43);
  check_matmul(false, 2, 130, 77, false, false, DType::f16, DType::f16, DType::f16, false, 44);
  check_matmul(false, 7, 33, 64, true, false, DType::bf16, DType::f32, DType::f32, false, 45);
}

// Results are rounded once, to nearest even: sums that fall exactly halfway between two
// neighbouring f16/bf16 values (and just below / above it) compared bit for bit. The f32 sums are
// exact here, so any other rounding (toward zero, ties away, or rounding twice) shows. 64x64x64
// is tile-aligned: on a device with f16 tensor cores this is the cooperative-matrix kernel.
TEST(VulkanHalf, MatmulRoundsOnceToNearestEven) {
  for (DType t : {DType::f16, DType::bf16})
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (with_bias ? " linear + bias" : " matmul"));
      const int64_t M = 64, N = 64, K = 64;
      const double half_ulp = t == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);  // in [1, 2)
      std::vector<uint16_t> a(M * K, 0), w(N * K, 0), bias(N, 0);
      const double fracs[4] = {1.0, 0.75, 1.25, 1.0};  // tie, below half, above half, tie
      for (int64_t i = 0; i < M; ++i) {
        a[i * K + 0] = ref_round(t, 1.0);
        a[i * K + 1] = ref_round(t, fracs[i % 4] * (i % 8 < 4 ? 1.0 : -1.0));
      }
      std::vector<double> base(N);
      for (int64_t j = 0; j < N; ++j) {
        base[j] = 1.0 + (2 * (j % 60) + 1) * 2 * half_ulp;  // odd last mantissa bit: ties round up
        // w is [N, K] (linear's layout): column k of op(b) = w[j, k]
        w[j * K + 0] = ref_round(t, base[j]);
        if (with_bias) bias[j] = ref_round(t, half_ulp);
        else w[j * K + 1] = ref_round(t, half_ulp);
      }
      Dev da = put16({M, K}, t, a, 0), dw = put16({N, K}, t, w, 0), db = put16({N}, t, bias, 0);
      Dev y = out_like({M, N}, t, 0);
      if (with_bias) launch(node(Op::Linear), {&da, &dw, &db}, y);
      else launch(node(Op::Matmul, {{"transpose_b", true}}), {&da, &dw}, y);
      auto got = get16(y);
      int bad = 0;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double ai1 = ref_value(t, a[i * K + 1]);
          // with bias, a's second column meets a zero weight and the bias makes the tie
          double exact = with_bias ? base[j] + half_ulp : base[j] + ai1 * half_ulp;
          uint16_t want = ref_round(t, exact);
          if (got[i * N + j] != want && bad++ < 5)
            ADD_FAILURE() << "y[" << i << "," << j << "] bits " << got[i * N + j] << ", want " << want << " (exact " << exact
                          << ")";
        }
      EXPECT_EQ(bad, 0);
    }
}


// ---------------------------------------------------------------- transposes and convolutions

// A batched 2-D transpose of 2-byte tensors (transpose2d.h16) moves the bits unchanged.
TEST(VulkanHalf, TransposeMovesBitsUnchanged) {
  if (!two_byte()) GTEST_SKIP() << "no 16-bit storage on this device";
  struct Case { int64_t B, R, C; };
  for (DType t : {DType::f16, DType::bf16})
    for (Case c : {Case{3, 6, 10}, Case{3, 7, 10}, Case{1, 65, 34}, Case{2, 40, 33}, Case{4, 64, 96}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " [" + std::to_string(c.B) + ", " + std::to_string(c.R) + ", " +
                   std::to_string(c.C) + "]");
      auto x = random16(t, c.B * c.R * c.C, (uint32_t)(c.R * 31 + c.C), -100, 100);
      Dev dx = put16({c.B, c.R, c.C}, t, x, 0), y = out_like({c.B, c.C, c.R}, t, 0);
      launch(node(Op::Transpose, {{"perm", std::vector<int64_t>{0, 2, 1}}}), {&dx}, y);
      auto got = get16(y);
      int bad = 0;
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t r = 0; r < c.R; ++r)
          for (int64_t k = 0; k < c.C; ++k) {
            uint16_t want = x[(b * c.R + r) * c.C + k], g = got[(b * c.C + k) * c.R + r];
            if (g != want && bad++ < 5) ADD_FAILURE() << "y[" << b << "," << k << "," << r << "] = " << g << " want " << want;
          }
      EXPECT_EQ(bad, 0);
    }
}

// conv2d of groups 1 on 2-byte operands: im2col + product + transpose back (kernels_conv_gemm.cpp), against a double loop over the rounded inputs; one rounding of an
// f32 sum into y's type allowed (as for the products above).
// The routes of kernels_conv_gemm.cpp: RLX_VK_CONV unset (on a device with
// VK_NV_cooperative_matrix2: per-image products straight into NCHW, f16 convolutions other than
// 1x1 / stride 1 / unpadded with few output channels as implicit products that gather x's taps
// inside the product, kernels_conv_implicit.cpp; bf16 through an im2col matrix; output sizes with
// H*W a multiple of 8 and not; outputs of at most 196 positions in a batch of 2 or more as one
// product over the whole batch, kernels_conv_fold.cpp, written into NCHW by the product where
// it is not split), "fold" (that product for every case; also always through t and conv_fold_out,
// RLX_VK_CONV_FOLD_NCHW=0, and never split, =2),
// "implicit" (the implicit product for every f16 case but the 1x1
// stride-1 unpadded ones; also with w's slices through shared memory, RLX_VK_CONV_WSH=1, and
// with 1 and 8 output positions per gathering invocation, RLX_VK_CONV_VEC, and without the
// kernel's size as spec constants, RLX_VK_CONV_KCONST=0, or with it for every size, =1; session
// 15), "im2col" (the per-image products, always through an im2col matrix) and
// "rows" (im2col rows, product, transpose back). On a device without it (lavapipe) the five are
// the same route.
// Cases: 3x3 stride 1 and 2 padded, 7x7 stride 2 pad 3 on 3 channels, 1x1 stride 2, odd channel
// counts (K not a multiple of the product's 32-deep slices), M over one 128-row tile and not a
// multiple of it, batches of 1 to 4, K = 2304 over 7x7 outputs (the folded product split over K,
// its partials summed by conv_fold_out; for one image, the product with its bias per row, which
// matmul_cm2 split and then added the bias per column).
TEST(VulkanHalf, Conv2dThroughTheProduct) {
  if (!two_byte()) GTEST_SKIP() << "no 16-bit storage on this device";
  struct Case { int64_t N, C, H, W, M, k, s, p; bool bias = true; };
  const char* saved = std::getenv("RLX_VK_CONV");
  const std::string keep = saved ? saved : "";
  const char* knobs[] = {"RLX_VK_CONV_WSH", "RLX_VK_CONV_VEC", "RLX_VK_CONV_KCONST", "RLX_VK_CONV_FOLD_NCHW"};
  for (const char* route : {"", "fold", "fold:RLX_VK_CONV_FOLD_NCHW=0", "fold:RLX_VK_CONV_FOLD_NCHW=2", "implicit", "implicit:RLX_VK_CONV_WSH=1", "implicit:RLX_VK_CONV_VEC=1",
                            "implicit:RLX_VK_CONV_VEC=8", "implicit:RLX_VK_CONV_KCONST=0", "implicit:RLX_VK_CONV_KCONST=1",
                            "im2col", "rows"})
  for (DType t : {DType::f16, DType::bf16})
    for (Case c : {Case{2, 16, 12, 10, 24, 3, 1, 1}, Case{3, 3, 17, 15, 8, 7, 2, 3}, Case{2, 32, 9, 9, 40, 1, 2, 0},
                   Case{1, 5, 11, 13, 7, 2, 3, 1}, Case{3, 24, 4, 6, 136, 1, 1, 0}, Case{2, 40, 8, 8, 72, 3, 1, 1, false},
                   Case{2, 16, 7, 7, 20, 1, 1, 0, false}, Case{4, 8, 16, 16, 264, 3, 2, 1},
                   Case{2, 67, 10, 9, 33, 3, 1, 1}, Case{2, 64, 7, 9, 130, 3, 1, 1, false},
                   Case{2, 16, 24, 24, 64, 3, 1, 1}, Case{2, 35, 13, 11, 129, 3, 2, 1},
                   Case{2, 256, 7, 7, 72, 3, 1, 1}, Case{1, 256, 7, 7, 72, 3, 1, 1}}) {
      // "route:KNOB=V" also sets one of the implicit kernel's knobs
      const std::string r = route, rname = r.substr(0, r.find(':'));
      if (!rname.empty()) setenv("RLX_VK_CONV", rname.c_str(), 1);
      else unsetenv("RLX_VK_CONV");
      for (const char* kn : knobs) unsetenv(kn);
      if (const size_t at = r.find(':'), eq = r.find('='); at != std::string::npos)
        setenv(r.substr(at + 1, eq - at - 1).c_str(), r.substr(eq + 1).c_str(), 1);
      SCOPED_TRACE(std::string(dtype_name(t)) + " route '" + route + "' N" + std::to_string(c.N) + " C" +
                   std::to_string(c.C) + " " + std::to_string(c.H) + "x" + std::to_string(c.W) + " M" +
                   std::to_string(c.M) + " k" + std::to_string(c.k) + " s" + std::to_string(c.s) + " p" +
                   std::to_string(c.p) + (c.bias ? "" : " no bias"));
      const int64_t OH = (c.H + 2 * c.p - c.k) / c.s + 1, OW = (c.W + 2 * c.p - c.k) / c.s + 1;
      auto x = random16(t, c.N * c.C * c.H * c.W, 3, -1, 1), w = random16(t, c.M * c.C * c.k * c.k, 4, -1, 1),
           bias = random16(t, c.M, 5, -1, 1);
      Dev dx = put16({c.N, c.C, c.H, c.W}, t, x, 0), dw = put16({c.M, c.C, c.k, c.k}, t, w, 0), db = put16({c.M}, t, bias, 0);
      Dev y = out_like({c.N, c.M, OH, OW}, t, 0);
      std::vector<const Dev*> ins = {&dx, &dw};
      if (c.bias) ins.push_back(&db);
      launch(node(Op::Conv2d, {{"strides", std::vector<int64_t>{c.s, c.s}}, {"pads", std::vector<int64_t>{c.p, c.p, c.p, c.p}}}),
             ins, y);
      auto got = get16(y);
      const double ulp = t == DType::f16 ? 1.0 / 1024 : 1.0 / 128;
      int bad = 0;
      for (int64_t n = 0; n < c.N; ++n)
        for (int64_t m = 0; m < c.M; ++m)
          for (int64_t oh = 0; oh < OH; ++oh)
            for (int64_t ow = 0; ow < OW; ++ow) {
              double acc = c.bias ? ref_value(t, bias[m]) : 0.0, mag = std::fabs(acc);
              for (int64_t ci = 0; ci < c.C; ++ci)
                for (int64_t kh = 0; kh < c.k; ++kh)
                  for (int64_t kw = 0; kw < c.k; ++kw) {
                    int64_t ih = oh * c.s - c.p + kh, iw = ow * c.s - c.p + kw;
                    if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                    double pr = ref_value(t, x[((n * c.C + ci) * c.H + ih) * c.W + iw]) *
                                ref_value(t, w[((m * c.C + ci) * c.k + kh) * c.k + kw]);
                    acc += pr;
                    mag += std::fabs(pr);
                  }
              double g = ref_value(t, got[((n * c.M + m) * OH + oh) * OW + ow]);
              double tol = ulp * std::fabs(acc) + 1e-6 * mag + (t == DType::f16 ? 6e-8 : 1e-30);
              if (!(std::fabs(g - acc) <= tol) && bad++ < 5)
                ADD_FAILURE() << "y[" << n << "," << m << "," << oh << "," << ow << "] = " << g << ", want " << acc;
            }
      EXPECT_EQ(bad, 0);
    }
  if (saved) setenv("RLX_VK_CONV", keep.c_str(), 1);
  else unsetenv("RLX_VK_CONV");
  for (const char* kn : knobs) unsetenv(kn);
}


// max_pool2d / avg_pool2d on 2-byte x and y (pool2d.h16, kernels_conv.cpp; before, widened into
// f32 and rounded back), against a plain loop over the 16-bit inputs: the max exact, the average
// within one rounding. 3x3 stride 2 pad 1 (ResNet-50's max-pool; the unrolled window), 2x2 stride
// 2, and a 9x9 window (81 taps: the loop over pc's window) with and without count_include_pad.
TEST(VulkanHalf, PoolOnTwoByteStorage) {
  if (!two_byte()) GTEST_SKIP() << "no 16-bit storage on this device";
  struct Case { int64_t N, C, H, W, k, s, p; bool avg, cip; };
  for (DType t : {DType::f16, DType::bf16})
    for (Case c : {Case{2, 3, 9, 11, 3, 2, 1, false, false}, Case{2, 3, 9, 11, 3, 2, 1, true, false},
                   Case{2, 3, 9, 11, 3, 2, 1, true, true}, Case{1, 2, 12, 12, 2, 2, 0, false, false},
                   Case{1, 2, 20, 17, 9, 1, 4, false, false}, Case{1, 2, 20, 17, 9, 1, 4, true, true}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (c.avg ? " avg" : " max") + " k" + std::to_string(c.k) + " s" +
                   std::to_string(c.s) + " p" + std::to_string(c.p) + (c.cip ? " count_include_pad" : ""));
      const int64_t OH = (c.H + 2 * c.p - c.k) / c.s + 1, OW = (c.W + 2 * c.p - c.k) / c.s + 1;
      auto x = random16(t, c.N * c.C * c.H * c.W, 7, -3, 3);
      Dev dx = put16({c.N, c.C, c.H, c.W}, t, x), y = out_like({c.N, c.C, OH, OW}, t);
      std::map<std::string, ir::AttrValue> at = {{"kernel", std::vector<int64_t>{c.k, c.k}},
                                                 {"strides", std::vector<int64_t>{c.s, c.s}},
                                                 {"pads", std::vector<int64_t>{c.p, c.p, c.p, c.p}}};
      if (c.avg) at["count_include_pad"] = c.cip;
      launch(node(c.avg ? Op::AvgPool2d : Op::MaxPool2d, at), {&dx}, y);
      auto got = get16(y);
      const double ulp = t == DType::f16 ? 1.0 / 1024 : 1.0 / 128;
      int bad = 0;
      for (int64_t i = 0; i < c.N * c.C; ++i)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            double acc = c.avg ? 0.0 : -INFINITY;
            int64_t cnt = 0;
            for (int64_t kh = 0; kh < c.k; ++kh)
              for (int64_t kw = 0; kw < c.k; ++kw) {
                int64_t ih = oh * c.s - c.p + kh, iw = ow * c.s - c.p + kw;
                if (c.cip) ++cnt;  // every tap of the padded input (windows never pass its edge here)
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                if (!c.cip) ++cnt;
                double v = ref_value(t, x[(i * c.H + ih) * c.W + iw]);
                acc = c.avg ? acc + v : std::max(acc, v);
              }
            if (c.avg) acc /= (double)cnt;
            double g = ref_value(t, got[(i * OH + oh) * OW + ow]);
            double tol = c.avg ? ulp * std::fabs(acc) + 1e-6 : 0.0;
            if (!(std::fabs(g - acc) <= tol) && bad++ < 5)
              ADD_FAILURE() << "y[" << i << "," << oh << "," << ow << "] = " << g << ", want " << acc;
          }
      EXPECT_EQ(bad, 0);
    }
}

// Shared by the epilogue tests below: smooth seeded values, a tensor's values as doubles, and the graph run in compiled mode on Vulkan in dtype
// dt with its outputs y and z checked against double-precision references (each intermediate the
// plan writes is rounded to the dtype: tolerances of the outputs' scale).
Tensor vals(Shape s, float scale, float phase) {
  Tensor t(s);
  float* d = t.mutable_data();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = scale * std::sin(0.37f * i + phase) + 0.1f * std::cos(1.3f * i);
  return t;
}
std::vector<double> as_doubles(const Tensor& t) {
  Tensor f = t.astype(DType::f32);
  return std::vector<double>(f.data(), f.data() + f.numel());
}
// The graph text `json` in dtype dt, run once in compiled mode on Vulkan with input x (x32 in dt).
std::vector<Tensor> run_compiled_vulkan(const std::string& json, const char* name, DType dt,
                                        const std::map<std::string, Tensor>& P, const Tensor& x32) {
  auto g = std::make_shared<ir::Graph>(ir::load_graph_text(json, name));
  convert_graph_dtype(*g, dt);
  auto ex = make_executor("vulkan");
  SessionOptions so;
  so.disk_cache = false;
  Session s(g, *ex, P, so);
  s.set_input("x", x32.astype(dt));
  return s.run(Mode::Compiled);
}
void expect_outputs_y_z(const std::string& json, DType dt, const std::map<std::string, Tensor>& P, const Tensor& x32,
                        const std::vector<double>& want_y, const std::vector<double>& want_z) {
  auto out = run_compiled_vulkan(json, "epilogue.json", dt, P, x32);
  ASSERT_EQ(out.size(), 2u);
  const double tol = dt == DType::f16 ? 8e-3 : 6e-2;
  for (int o = 0; o < 2; ++o) {
    const auto& want = o == 0 ? want_y : want_z;
    Tensor got = out[o].astype(DType::f32);
    ASSERT_EQ(got.numel(), (int64_t)want.size());
    double scale = 0, worst = 0;
    for (double v : want) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got.data()[i] - want[i]) / scale);
    EXPECT_LE(worst, tol) << (o == 0 ? "y" : "z");
  }
}

// A convolution's ReLU and residual add folded into its product (executor.cpp's build() and
// conv_epilogue_for, on devices with VK_NV_cooperative_matrix2; elsewhere, lavapipe included,
// the consumers run as their own kernels): a bottleneck-like chain in f16 and bf16, compiled
// mode, against a double-precision loop over the 16-bit inputs, with the fold on and off
// (RLX_VK_EPILOGUE=0). Folded: relu(conv) (c1), relu(conv + x) (c2), relu(x + conv) with
// no bias (c3); not folded: c4, whose result a second node also reads.
TEST(VulkanHalf, ConvolutionEpiloguesAgainstReference) {
  if (!two_byte()) GTEST_SKIP() << "no 16-bit storage on this device";
  const int64_t N = 2, C = 8, H = 8, W = 8, M1 = 16;
  const std::string json = R"({"format": "rlx.graph", "version": 1, "nodes": [
    {"id": "x", "op": "input", "shape": [2, 8, 8, 8]},
    {"id": "w1", "op": "param", "shape": [16, 8, 3, 3]}, {"id": "b1", "op": "param", "shape": [16]},
    {"id": "w2", "op": "param", "shape": [8, 16, 1, 1]}, {"id": "b2", "op": "param", "shape": [8]},
    {"id": "w3", "op": "param", "shape": [8, 8, 1, 1]},
    {"id": "w4", "op": "param", "shape": [8, 8, 3, 3]}, {"id": "b4", "op": "param", "shape": [8]},
    {"id": "c1", "op": "conv2d", "inputs": ["x", "w1", "b1"], "attrs": {"pads": [1, 1, 1, 1]}},
    {"id": "r1", "op": "relu", "inputs": ["c1"]},
    {"id": "c2", "op": "conv2d", "inputs": ["r1", "w2", "b2"]},
    {"id": "a2", "op": "add", "inputs": ["c2", "x"]},
    {"id": "r2", "op": "relu", "inputs": ["a2"]},
    {"id": "c3", "op": "conv2d", "inputs": ["r2", "w3"]},
    {"id": "a3", "op": "add", "inputs": ["x", "c3"]},
    {"id": "r3", "op": "relu", "inputs": ["a3"]},
    {"id": "c4", "op": "conv2d", "inputs": ["r3", "w4", "b4"], "attrs": {"pads": [1, 1, 1, 1]}},
    {"id": "y", "op": "relu", "inputs": ["c4"]},
    {"id": "z", "op": "add", "inputs": ["c4", "r3"]}
  ], "outputs": ["y", "z"]})";
  std::map<std::string, Tensor> P32 = {{"w1", vals({16, 8, 3, 3}, 0.3f, 0.1f)}, {"b1", vals({16}, 0.2f, 0.7f)},
                                       {"w2", vals({8, 16, 1, 1}, 0.4f, 0.5f)}, {"b2", vals({8}, 0.2f, 1.9f)},
                                       {"w3", vals({8, 8, 1, 1}, 0.5f, 0.9f)},  {"w4", vals({8, 8, 3, 3}, 0.3f, 2.3f)},
                                       {"b4", vals({8}, 0.2f, 1.3f)}};
  const Tensor x32 = vals({N, C, H, W}, 1.0f, 0.3f);
  ScopedEnv env;
  // RLX_VK_CONV_FOLD_NCHW (the folded product writing NCHW itself, kernels_conv_fold.cpp): the
  // default, 0 (through t and conv_fold_out) and 2 (never split); the fold off once
  const std::pair<const char*, const char*> settings[] = {{"1", ""}, {"1", "0"}, {"1", "2"}, {"0", ""}};
  for (DType dt : {DType::f16, DType::bf16})
    for (auto [fold, nchw] : settings) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " RLX_VK_EPILOGUE=" + fold + " RLX_VK_CONV_FOLD_NCHW=" + nchw);
      env.set("RLX_VK_EPILOGUE", fold);
      env.set("RLX_VK_CONV_FOLD_NCHW", nchw);
      // the reference reads the inputs as the 16-bit graph holds them
      std::map<std::string, Tensor> P;
      std::map<std::string, std::vector<double>> R;
      for (auto& [k, v] : P32) P[k] = v.astype(dt), R[k] = as_doubles(P[k]);
      const std::vector<double> x = as_doubles(x32.astype(dt));
      auto conv = [&](const std::vector<double>& in, int64_t Ci, const char* w, const char* b, int64_t M, int64_t k) {
        std::vector<double> o((size_t)(N * M * H * W));
        const int64_t p = k / 2;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t m = 0; m < M; ++m)
            for (int64_t oh = 0; oh < H; ++oh)
              for (int64_t ow = 0; ow < W; ++ow) {
                double acc = b ? R[b][m] : 0.0;
                for (int64_t c = 0; c < Ci; ++c)
                  for (int64_t kh = 0; kh < k; ++kh)
                    for (int64_t kw = 0; kw < k; ++kw) {
                      int64_t ih = oh - p + kh, iw = ow - p + kw;
                      if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                      acc += in[((n * Ci + c) * H + ih) * W + iw] * R[w][((m * Ci + c) * k + kh) * k + kw];
                    }
                o[((n * M + m) * H + oh) * W + ow] = acc;
              }
        return o;
      };
      auto relu = [](std::vector<double> v) {
        for (auto& e : v) e = e < 0 ? 0 : e;
        return v;
      };
      auto add = [](std::vector<double> a, const std::vector<double>& b) {
        for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
        return a;
      };
      auto r1 = relu(conv(x, C, "w1", "b1", M1, 3));
      auto r2 = relu(add(conv(r1, M1, "w2", "b2", C, 1), x));
      auto r3 = relu(add(conv(r2, C, "w3", nullptr, C, 1), x));
      auto c4 = conv(r3, C, "w4", "b4", C, 3);
      const std::vector<double> want_y = relu(c4), want_z = add(c4, r3);

      expect_outputs_y_z(json, dt, P, x32, want_y, want_z);
    }
}

// Linear layers' consumers folded into the tensor-core product the same way: gelu (erf form)
// after the first, the residual add after the second (y + x; the product [48, 16] read by the
// add through a reshape to x's [2, 24, 16], as ViT's out projection), gelu (tanh form) of a third plus
// nothing else; against a double-precision loop over the 16-bit inputs: the default (the add
// folded), RLX_VK_EPILOGUE=gelu (the GELUs too, after the rounding over the staged tile), nogelu
// (the default), 0 (nothing folded) and gelu with RLX_VK_CM2_ACTS=0 (GELU per element before
// the rounding).
TEST(VulkanHalf, LinearEpiloguesAgainstReference) {
  if (!two_byte()) GTEST_SKIP() << "no 16-bit storage on this device";
  const int64_t B = 2, S = 24, D = 16, F = 32;
  const std::string json = R"({"format": "rlx.graph", "version": 1, "nodes": [
    {"id": "x", "op": "input", "shape": [2, 24, 16]},
    {"id": "W1", "op": "param", "shape": [32, 16]}, {"id": "b1", "op": "param", "shape": [32]},
    {"id": "W2", "op": "param", "shape": [16, 32]}, {"id": "b2", "op": "param", "shape": [16]},
    {"id": "W3", "op": "param", "shape": [32, 16]}, {"id": "b3", "op": "param", "shape": [32]},
    {"id": "h", "op": "linear", "inputs": ["x", "W1", "b1"]},
    {"id": "g", "op": "gelu", "inputs": ["h"]},
    {"id": "g2", "op": "reshape", "inputs": ["g"], "attrs": {"shape": [48, 32]}},
    {"id": "o", "op": "linear", "inputs": ["g2", "W2", "b2"]},
    {"id": "o3", "op": "reshape", "inputs": ["o"], "attrs": {"shape": [2, 24, 16]}},
    {"id": "y", "op": "add", "inputs": ["o3", "x"]},
    {"id": "t", "op": "linear", "inputs": ["y", "W3", "b3"]},
    {"id": "z", "op": "gelu", "inputs": ["t"], "attrs": {"approximate": "tanh"}}
  ], "outputs": ["y", "z"]})";
  std::map<std::string, Tensor> P32 = {{"W1", vals({F, D}, 0.4f, 0.1f)}, {"b1", vals({F}, 0.2f, 0.7f)},
                                       {"W2", vals({D, F}, 0.3f, 0.5f)}, {"b2", vals({D}, 0.2f, 1.9f)},
                                       {"W3", vals({F, D}, 0.4f, 0.9f)}, {"b3", vals({F}, 0.2f, 1.3f)}};
  const Tensor x32 = vals({B, S, D}, 1.0f, 0.3f);
  ScopedEnv env;
  for (DType dt : {DType::f16, DType::bf16})
    for (const char* fold : {"1", "gelu", "nogelu", "0", "acts0"}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " RLX_VK_EPILOGUE=" + fold);
      const bool acts0 = std::strcmp(fold, "acts0") == 0;
      env.set("RLX_VK_EPILOGUE", acts0 ? "gelu" : fold);
      env.set("RLX_VK_CM2_ACTS", acts0 ? "0" : nullptr);
      std::map<std::string, Tensor> P;
      std::map<std::string, std::vector<double>> R;
      for (auto& [k, v] : P32) P[k] = v.astype(dt), R[k] = as_doubles(P[k]);
      const std::vector<double> x = as_doubles(x32.astype(dt));
      auto lin = [&](const std::vector<double>& a, int64_t K, const char* W, const char* b, int64_t N) {
        std::vector<double> o((size_t)(B * S * N));
        for (int64_t r = 0; r < B * S; ++r)
          for (int64_t n = 0; n < N; ++n) {
            double acc = R[b][n];
            for (int64_t k = 0; k < K; ++k) acc += a[r * K + k] * R[W][n * K + k];
            o[r * N + n] = acc;
          }
        return o;
      };
      auto h = lin(x, D, "W1", "b1", F);
      for (auto& e : h) e = 0.5 * e * (1 + std::erf(e / std::sqrt(2.0)));
      auto y = lin(h, F, "W2", "b2", D);
      for (size_t i = 0; i < y.size(); ++i) y[i] += x[i];
      auto z = lin(y, D, "W3", "b3", F);
      for (auto& e : z) e = 0.5 * e * (1 + std::tanh(0.79788456080286536 * (e + 0.044715 * e * e * e)));

      expect_outputs_y_z(json, dt, P, x32, y, z);
    }
}

// GELU folded into a linear layer's product as ViT's fc1 (matmul_cm2 with ACTS: the rounded tile
// staged in shared memory, then widened, GELU in f32 and rounded again, 8 values per store where
// the tile is whole and its rows 16-byte aligned, one by one elsewhere): products of whole tiles,
// ragged tiles and N not a multiple of 8, f16 and bf16, erf and tanh forms, against a
// double-precision loop over the 16-bit inputs (the product rounded to the dtype before the GELU,
// as the plan stores it); RLX_VK_EPILOGUE=gelu (folded: the tile read back from y, ACTS 2), the
// default (gelu as its own kernel), and gelu with RLX_VK_CM2_ACTS=0 (GELU per element before the
// rounding) and =1 (the tile staged in shared memory). The folded result and the gelu
// kernel's agree to an ulp of the dtype (the same arithmetic in two shaders; the GPU's compiler
// may contract differently). On devices without VK_NV_cooperative_matrix2 nothing folds.
TEST(VulkanHalf, LinearGeluFoldedAfterRounding) {
  if (!two_byte()) GTEST_SKIP() << "no 16-bit storage on this device";
  struct Case { int64_t M, K, N; const char* approx; };
  for (const Case& cs : {Case{256, 64, 256, "none"}, Case{200, 64, 196, "none"}, Case{130, 96, 136, "tanh"},
                         Case{48, 32, 20, "none"}})
    for (DType dt : {DType::f16, DType::bf16}) {
      const std::string json = R"({"format": "rlx.graph", "version": 1, "nodes": [
        {"id": "x", "op": "input", "shape": [)" + std::to_string(cs.M) + ", " + std::to_string(cs.K) + R"(]},
        {"id": "W", "op": "param", "shape": [)" + std::to_string(cs.N) + ", " + std::to_string(cs.K) + R"(]},
        {"id": "b", "op": "param", "shape": [)" + std::to_string(cs.N) + R"(]},
        {"id": "h", "op": "linear", "inputs": ["x", "W", "b"]},
        {"id": "g", "op": "gelu", "inputs": ["h"], "attrs": {"approximate": ")" + cs.approx + R"("}}
      ], "outputs": ["g"]})";
      std::map<std::string, Tensor> P = {{"W", vals({cs.N, cs.K}, 0.3f, 0.4f).astype(dt)},
                                         {"b", vals({cs.N}, 0.5f, 1.1f).astype(dt)}};
      const Tensor x32 = vals({cs.M, cs.K}, 1.0f, 0.2f);
      const std::vector<double> x = as_doubles(x32.astype(dt)), W = as_doubles(P["W"]), bb = as_doubles(P["b"]);
      const bool tanh_form = std::strcmp(cs.approx, "tanh") == 0;
      std::vector<double> want((size_t)(cs.M * cs.N));
      for (int64_t r = 0; r < cs.M; ++r)
        for (int64_t n = 0; n < cs.N; ++n) {
          double acc = bb[n];
          for (int64_t k = 0; k < cs.K; ++k) acc += x[r * cs.K + k] * W[n * cs.K + k];
          Tensor h({1});
          h.mutable_data()[0] = (float)acc;
          const double e = as_doubles(h.astype(dt))[0];  // the product as the plan rounds it
          want[r * cs.N + n] = tanh_form ? 0.5 * e * (1 + std::tanh(0.79788456080286536 * (e + 0.044715 * e * e * e)))
                                         : 0.5 * e * (1 + std::erf(e / std::sqrt(2.0)));
        }
      std::vector<std::vector<double>> got;
      ScopedEnv env;
      for (const char* mode : {"gelu", "default", "acts0", "acts1"}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " M " + std::to_string(cs.M) + " N " + std::to_string(cs.N) +
                     " " + mode);
        env.set("RLX_VK_EPILOGUE", std::strcmp(mode, "default") == 0 ? nullptr : "gelu");
        env.set("RLX_VK_CM2_ACTS", std::strcmp(mode, "acts0") == 0 ? "0" : std::strcmp(mode, "acts1") == 0 ? "1" : nullptr);
        auto out = run_compiled_vulkan(json, "gelu_fold.json", dt, P, x32);
        ASSERT_EQ(out.size(), 1u);
        got.push_back(as_doubles(out[0]));
        ASSERT_EQ(got.back().size(), want.size());
        double scale = 0, worst = 0;
        for (double v : want) scale = std::max(scale, std::fabs(v));
        for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got.back()[i] - want[i]) / scale);
        EXPECT_LE(worst, dt == DType::f16 ? 4e-3 : 3e-2);
      }
      // folded against the gelu kernel: within an ulp of the dtype (relative 2^-10 / 2^-7, or
      // the smallest normal's ulp near zero)
      const double ulp = dt == DType::f16 ? 1.0 / 1024 : 1.0 / 128, tiny = dt == DType::f16 ? 6.1e-5 / 1024 : 1e-38;
      int far = 0;
      for (size_t i = 0; i < want.size(); ++i)
        if (std::fabs(got[0][i] - got[1][i]) > std::max(ulp * std::fabs(got[1][i]), tiny)) ++far;
      EXPECT_EQ(far, 0) << dtype_name(dt) << " M " << cs.M << " N " << cs.N;
    }
}

}  // namespace
}  // namespace rlx
