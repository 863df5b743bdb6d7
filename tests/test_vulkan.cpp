// Tests of the Vulkan executor on whatever device 0 is (lavapipe in CI). Every
// kernel is compared with a plain reference loop written here.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <tuple>

#include "backends/vulkan/vulkan_executor.h"
#include "core/error.h"
#include "ir/op_registry.h"
#include "attention_ref.h"
#include "scoped_env.h"
#include "vulkan_test_util.h"

namespace rlx {
namespace {

using ir::Op;

// ---------------------------------------------------------------- harness

using test::node;
using test::ref_attention;
using test::vk;

// A device tensor placed at an odd offset inside a larger buffer, so kernels
// are exercised with unaligned element offsets.
struct Dev {
  std::unique_ptr<DeviceBuffer> buf;
  TensorRef ref;
};

Dev put(Executor& e, const Shape& s, const std::vector<float>& v, DType dt = DType::f32, size_t offset = 3) {
  Dev d;
  int64_t n = shape_numel(s);
  EXPECT_EQ((size_t)n, v.size());
  // Offsets are bytes: `offset` elements of the device's storage dtype.
  const size_t es = dtype_size(e.storage_dtype(dt));
  d.buf = e.allocate((n + offset + 5) * es);
  d.ref = {d.buf.get(), offset * es, s, dt};
  const Tensor host = Tensor::from_vector(s, v, dt);
  if (n) e.upload(*d.buf, d.ref.offset, host.raw(), host.nbytes(), dt);
  return d;
}

Dev empty(Executor& e, const Shape& s, size_t offset = 1) { return put(e, s, std::vector<float>(shape_numel(s), -7.f), DType::f32, offset); }

std::vector<float> get(Executor& e, const Dev& d) {
  Tensor host(d.ref.shape, d.ref.dtype);
  if (host.numel()) e.download(*d.buf, d.ref.offset, host.mutable_raw(), host.nbytes(), d.ref.dtype);
  return host.to_vector();
}

// Runs one node on device tensors and returns the output values.
std::vector<float> run(const ir::Node& n, const std::vector<const Dev*>& ins, const Shape& out_shape,
                       Executor& e = vk()) {
  Dev out = empty(e, out_shape);
  Kernel k;
  k.node = &n;
  for (const Dev* d : ins) k.inputs.push_back(d->ref);
  k.output = out.ref;
  k.label = n.id;
  e.launch(k);
  e.flush();
  return get(e, out);
}

std::vector<float> randn(size_t n, uint32_t seed, float lo = -2.f, float hi = 2.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double atol, double rtol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double g = got[i], w = want[i];
    bool ok = (std::isnan(w) && std::isnan(g)) || (std::isinf(w) && g == w) ||
              std::fabs(g - w) <= atol + rtol * std::fabs(w);
    if (!ok && bad++ < 5) ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w;
  }
  EXPECT_EQ(bad, 0) << what;
}

std::vector<double> dbl(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// Index of `out` coordinates into a tensor of shape `s` broadcast to `out_shape`.
int64_t bidx(const Shape& s, const Shape& out_shape, const std::vector<int64_t>& c) {
  int64_t idx = 0;
  size_t off = out_shape.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) idx = idx * s[i] + (s[i] == 1 ? 0 : c[off + i]);
  return idx;
}
std::vector<int64_t> coords(int64_t i, const Shape& s) {
  std::vector<int64_t> c(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    c[d] = i % s[d];
    i /= s[d];
  }
  return c;
}

// ---------------------------------------------------------------- device

TEST(VulkanDevice, ListsDevices) {
  auto devs = vulkan_devices();
  ASSERT_FALSE(devs.empty());
  EXPECT_FALSE(devs[0].name.empty());
  bool has_subgroup = false;
  for (const auto& [k, v] : devs[0].properties) has_subgroup = has_subgroup || k == "subgroup size";
  EXPECT_TRUE(has_subgroup);
  EXPECT_EQ(vk().name(), "vulkan");
}

TEST(VulkanDevice, BadIndexIsAClearError) {
  try {
    make_vulkan_executor(99);
    FAIL();
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

TEST(VulkanDevice, NoDriverIsAClearError) {
  test::ScopedEnv env;
  env.set("VK_ICD_FILENAMES", "/nonexistent/rlx_icd.json");
  try {
    make_vulkan_executor(0);
    ADD_FAILURE() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("mesa-vulkan-drivers"), std::string::npos) << e.what();
  }
}

// Issue 22: the tensor-core route override names itself when misspelt (an input error, exit 2).
TEST(VulkanDevice, BadTensorCoreRouteIsAClearError) {
  test::ScopedEnv env;
  env.set("RLX_VK_COOPMAT", "wmma");
  try {
    make_vulkan_executor(0);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("RLX_VK_COOPMAT must be nv, khr or cm2 (got 'wmma')"), std::string::npos)
        << e.what();
  }
  for (const char* ok : {"nv", "khr", "cm2"}) {  // each accepted, whatever the device has
    env.set("RLX_VK_COOPMAT", ok);
    EXPECT_NO_THROW(make_vulkan_executor(0)) << ok;
  }
}

TEST(VulkanMemory, UploadDownloadAndLimits) {
  Executor& e = vk();
  auto v = randn(1000, 1);
  Dev d = put(e, {1000}, v, DType::f32, 17);
  EXPECT_EQ(get(e, d), v);
  // A dedicated block (> half a suballocation block).
  auto big = e.allocate((40u << 20) * 4);
  std::vector<float> tail(10, 2.5f), back(10);
  e.upload(*big, ((40u << 20) - 10) * 4, tail.data(), 40, DType::f32);
  e.download(*big, ((40u << 20) - 10) * 4, back.data(), 40, DType::f32);
  EXPECT_EQ(back, tail);
  auto zero = e.allocate(0);
  EXPECT_EQ(zero->capacity, 0u);
  try {
    e.allocate((size_t)1 << 40);
    FAIL();
  } catch (const RuntimeError& err) {
    EXPECT_NE(std::string(err.what()).find("out of device memory allocating"), std::string::npos) << err.what();
  }
}

// ---------------------------------------------------------------- elementwise

double ref_unary(Op op, double x, const std::string& approx = "none") {
  switch (op) {
    case Op::Neg: return -x;
    case Op::Exp: return std::exp(x);
    case Op::Log: return std::log(x);
    case Op::Sqrt: return std::sqrt(x);
    case Op::Rsqrt: return 1 / std::sqrt(x);
    case Op::Abs: return std::fabs(x);
    case Op::Tanh: return std::tanh(x);
    case Op::Sigmoid: return 1 / (1 + std::exp(-x));
    case Op::Relu: return x > 0 ? x : 0;
    case Op::Silu: return x / (1 + std::exp(-x));
    case Op::Erf: return std::erf(x);
    case Op::Sin: return std::sin(x);
    case Op::Cos: return std::cos(x);
    case Op::Square: return x * x;
    case Op::Gelu:
      return approx == "tanh" ? 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)))
                              : 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    default: return NAN;
  }
}

TEST(VulkanElementwise, UnaryOps) {
  std::vector<float> x = randn(999, 2, -6.f, 6.f);
  x[0] = 0.f, x[1] = -0.3f, x[2] = 20.f, x[3] = -20.f, x[4] = 1e-3f, x[5] = 0.6f, x[6] = -0.54f;
  std::vector<float> pos(x.size());
  for (size_t i = 0; i < x.size(); ++i) pos[i] = std::fabs(x[i]) + 1e-3f;
  Dev dx = put(vk(), {9, 111}, x), dp = put(vk(), {9, 111}, pos);
  for (Op op : {Op::Neg, Op::Exp, Op::Log, Op::Sqrt, Op::Rsqrt, Op::Abs, Op::Tanh, Op::Sigmoid, Op::Relu, Op::Silu,
                Op::Erf, Op::Sin, Op::Cos, Op::Square, Op::Gelu}) {
    for (std::string approx : {"none", "tanh"}) {
      if (approx == "tanh" && op != Op::Gelu) continue;
      bool positive = op == Op::Log || op == Op::Sqrt || op == Op::Rsqrt;
      const auto& in = positive ? pos : x;
      ir::Node n = node(op, op == Op::Gelu ? std::map<std::string, ir::AttrValue>{{"approximate", approx}}
                                            : std::map<std::string, ir::AttrValue>{});
      auto got = run(n, {positive ? &dp : &dx}, {9, 111});
      std::vector<double> want;
      for (float v : in) want.push_back(ref_unary(op, v, approx));
      expect_close(got, want, 2e-6, 4e-6, std::string(ir::op_name(op)) + "/" + approx);
    }
  }
}

TEST(VulkanElementwise, BinaryOpsBroadcast) {
  struct Case { Shape a, b, out; };
  std::vector<Case> cases = {{{2, 3, 4}, {3, 1}, {2, 3, 4}},
                             {{5}, {1}, {5}},
                             {{2, 1, 4}, {3, 1}, {2, 3, 4}},
                             {{1, 3, 1, 2}, {4, 1, 5, 1}, {4, 3, 5, 2}},
                             {{}, {7, 3}, {7, 3}}};
  for (const auto& c : cases) {
    auto a = randn(shape_numel(c.a), 3, -3.f, 3.f), b = randn(shape_numel(c.b), 4, -3.f, 3.f);
    if (a.size() > 2) a[1] = NAN;
    Dev da = put(vk(), c.a, a), db = put(vk(), c.b, b);
    for (Op op : {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Maximum, Op::Minimum, Op::SiluVjp, Op::GeluVjp}) {
      auto got = run(node(op), {&da, &db}, c.out);
      std::vector<double> want;
      for (int64_t i = 0; i < shape_numel(c.out); ++i) {
        auto co = coords(i, c.out);
        double x = a[bidx(c.a, c.out, co)], y = b[bidx(c.b, c.out, co)];
        double r;
        switch (op) {
          case Op::Add: r = x + y; break;
          case Op::Sub: r = x - y; break;
          case Op::Mul: r = x * y; break;
          case Op::Div: r = x / y; break;
          case Op::Maximum: r = (std::isnan(x) || std::isnan(y)) ? NAN : std::max(x, y); break;
          case Op::Minimum: r = (std::isnan(x) || std::isnan(y)) ? NAN : std::min(x, y); break;
          case Op::SiluVjp: {
            double s = 1 / (1 + std::exp(-y));
            r = x * s * (1 + y * (1 - s));
            break;
          }
          default: {  // gelu_vjp, erf form
            double cdf = 0.5 * (1 + std::erf(y / std::sqrt(2.0))), pdf = std::exp(-0.5 * y * y) / std::sqrt(2 * M_PI);
            r = x * (cdf + y * pdf);
          }
        }
        want.push_back(r);
      }
      expect_close(got, want, 1e-6, 4e-6, std::string(ir::op_name(op)) + " " + shape_str(c.a) + shape_str(c.b));
    }
  }
}

TEST(VulkanElementwise, PowFollowsC) {
  std::vector<float> a = {2.f, -2.f, -2.f, 0.f, 0.f, -8.f, 1.5f, 3.f, -1.f, 10.f, 0.5f, NAN};
  std::vector<float> b = {3.f, 3.f, 2.f, 2.f, -1.f, 1.f / 3, 2.5f, -2.f, INFINITY, 7.3f, 0.5f, 0.f};
  Dev da = put(vk(), {12}, a), db = put(vk(), {12}, b);
  auto got = run(node(Op::Pow), {&da, &db}, {12});
  std::vector<double> want;
  for (size_t i = 0; i < a.size(); ++i) want.push_back(std::pow((double)a[i], (double)b[i]));
  expect_close(got, want, 0, 3e-6, "pow");
}

TEST(VulkanElementwise, CastRounds) {
  std::vector<float> x = {1.0001f, 65520.f, 65519.f, 1e-7f, 3e-8f, -2.7f, 2.7f, NAN, 0.f, -0.f, 1.00390625f, 1e30f,
                          5.96e-8f, 2049.f, 0.3f};
  Dev dx = put(vk(), {(int64_t)x.size()}, x);
  for (DType t : {DType::f16, DType::bf16, DType::i32, DType::i64, DType::boolean, DType::f32}) {
    auto got = run(node(Op::Cast, {{"dtype", std::string(dtype_name(t))}}), {&dx}, {(int64_t)x.size()});
    std::vector<double> want;
    for (float v : x) want.push_back(round_to_dtype(v, t));
    expect_close(got, want, 0, 0, std::string("cast to ") + dtype_name(t));
  }
}

// ---------------------------------------------------------------- reductions, rows

TEST(VulkanReduce, SumMeanMaxOverAxes) {
  Shape s = {3, 4, 5, 6};
  auto x = randn(shape_numel(s), 5);
  Dev dx = put(vk(), s, x);
  std::vector<std::vector<int64_t>> axes_list = {{}, {1}, {0, 2}, {-1}, {1, 3}, {0, 1, 2, 3}, {0}};
  for (Op op : {Op::Sum, Op::Mean, Op::Max})
    for (size_t ai = 0; ai < axes_list.size(); ++ai) {
      bool all = axes_list[ai].empty();
      std::vector<bool> red(4, all);
      for (int64_t a : axes_list[ai]) red[(a + 4) % 4] = true;
      Shape os;
      for (int d = 0; d < 4; ++d)
        if (!red[d]) os.push_back(s[d]);
      std::map<std::string, ir::AttrValue> attrs;
      if (!all) attrs["axes"] = axes_list[ai];
      auto got = run(node(op, attrs), {&dx}, os);
      std::vector<double> acc(shape_numel(os), op == Op::Max ? -INFINITY : 0.0);
      std::vector<int> cnt(acc.size(), 0);
      for (int64_t i = 0; i < shape_numel(s); ++i) {
        auto c = coords(i, s);
        int64_t o = 0;
        for (int d = 0; d < 4; ++d)
          if (!red[d]) o = o * s[d] + c[d];
        acc[o] = op == Op::Max ? std::max(acc[o], (double)x[i]) : acc[o] + x[i];
        cnt[o]++;
      }
      if (op == Op::Mean)
        for (size_t o = 0; o < acc.size(); ++o) acc[o] /= cnt[o];
      expect_close(got, acc, 2e-5, 2e-5, std::string(ir::op_name(op)) + " case " + std::to_string(ai));
    }
  // max propagates NaN; long rows
  auto y = randn(2 * 5000, 6);
  y[7] = NAN;
  Dev dy = put(vk(), {2, 5000}, y);
  auto got = run(node(Op::Max, {{"axes", std::vector<int64_t>{1}}}), {&dy}, {2});
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_EQ(got[1], *std::max_element(y.begin() + 5000, y.end()));
  auto sum = run(node(Op::Sum, {{"axes", std::vector<int64_t>{0}}}), {&dy}, {5000});
  std::vector<double> want(5000);
  for (int j = 0; j < 5000; ++j) want[j] = (double)y[j] + y[5000 + j];
  expect_close(sum, want, 1e-6, 1e-6, "column sum");
}

std::vector<double> ref_softmax(const std::vector<float>& x, int64_t rows, int64_t len, double scale = 1,
                                std::function<bool(int64_t, int64_t)> visible = nullptr) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < len; ++j)
      if (!visible || visible(r, j)) m = std::max(m, scale * x[r * len + j]);
    for (int64_t j = 0; j < len; ++j)
      if (!visible || visible(r, j)) s += std::exp(scale * x[r * len + j] - m);
    for (int64_t j = 0; j < len; ++j)
      y[r * len + j] = (visible && (!visible(r, j) || m == -INFINITY)) ? 0 : std::exp(scale * x[r * len + j] - m) / s;
  }
  return y;
}

TEST(VulkanRows, Softmax) {
  for (int64_t len : {7, 300, 3000, 40000}) {
    auto x = randn(5 * len, 7, -5, 5);
    Dev dx = put(vk(), {5, len}, x);
    expect_close(run(node(Op::Softmax), {&dx}, {5, len}), ref_softmax(x, 5, len), 1e-6, 1e-5,
                 "softmax len " + std::to_string(len));
  }
  // along axis 1 of [2, 9, 3]
  auto x = randn(54, 8);
  Dev dx = put(vk(), {2, 9, 3}, x);
  std::vector<float> t(54);  // transpose to [2, 3, 9] for the reference
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 9; ++b)
      for (int c = 0; c < 3; ++c) t[(a * 3 + c) * 9 + b] = x[(a * 9 + b) * 3 + c];
  auto rt = ref_softmax(t, 6, 9);
  std::vector<double> want(54);
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 9; ++b)
      for (int c = 0; c < 3; ++c) want[(a * 9 + b) * 3 + c] = rt[(a * 3 + c) * 9 + b];
  expect_close(run(node(Op::Softmax, {{"axis", int64_t(1)}}), {&dx}, {2, 9, 3}), want, 1e-6, 1e-5, "softmax axis 1");
  // softmax_vjp along the last axis
  auto y = ref_softmax(randn(4 * 33, 9), 4, 33);
  std::vector<float> yf(y.begin(), y.end());
  auto dy = randn(4 * 33, 10);
  Dev ddy = put(vk(), {4, 33}, dy), dyy = put(vk(), {4, 33}, yf);
  std::vector<double> vjp(4 * 33);
  for (int r = 0; r < 4; ++r) {
    double dot = 0;
    for (int j = 0; j < 33; ++j) dot += dy[r * 33 + j] * yf[r * 33 + j];
    for (int j = 0; j < 33; ++j) vjp[r * 33 + j] = yf[r * 33 + j] * (dy[r * 33 + j] - dot);
  }
  expect_close(run(node(Op::SoftmaxVjp), {&ddy, &dyy}, {4, 33}), vjp, 1e-6, 1e-5, "softmax_vjp");
}

TEST(VulkanRows, ScaledMaskedSoftmaxCausal) {
  // Tq = 6 > Tk = 4: the first two query rows see no key at all (zeros).
  int64_t B = 3, Tq = 6, Tk = 4;
  auto x = randn(B * Tq * Tk, 11);
  Dev dx = put(vk(), {B, Tq, Tk}, x);
  auto got = run(node(Op::ScaledMaskedSoftmax, {{"scale", 0.7}, {"causal", true}}), {&dx}, {B, Tq, Tk});
  auto want = ref_softmax(x, B * Tq, Tk, 0.7, [&](int64_t r, int64_t j) { return j <= r % Tq + Tk - Tq; });
  expect_close(got, want, 1e-6, 1e-5, "scaled_masked_softmax causal");
  auto plain = run(node(Op::ScaledMaskedSoftmax, {{"scale", 2.0}}), {&dx}, {B, Tq, Tk});
  expect_close(plain, ref_softmax(x, B * Tq, Tk, 2.0), 1e-6, 1e-5, "scaled_masked_softmax");
}

TEST(VulkanRows, Norms) {
  for (int64_t D : {5, 64, 2500}) {
    int64_t R = 6;
    auto x = randn(R * D, 12, -3, 5), w = randn(D, 13), b = randn(D, 14), dy = randn(R * D, 15);
    Dev dx = put(vk(), {2, 3, D}, x), dw = put(vk(), {D}, w), db = put(vk(), {D}, b), ddy = put(vk(), {2, 3, D}, dy);
    std::vector<double> ln(R * D), lnw(R * D), rms(R * D), rmsw(R * D), lnv(R * D), rmsv(R * D);
    double eps = 1e-5, eps2 = 1e-6;
    for (int64_t r = 0; r < R; ++r) {
      const float* xr = &x[r * D];
      const float* gr = &dy[r * D];
      double mean = 0, var = 0, ms = 0;
      for (int64_t j = 0; j < D; ++j) mean += xr[j], ms += (double)xr[j] * xr[j];
      mean /= D, ms /= D;
      for (int64_t j = 0; j < D; ++j) var += (xr[j] - mean) * (xr[j] - mean);
      var /= D;
      double rstd = 1 / std::sqrt(var + eps), rr = 1 / std::sqrt(ms + eps2);
      double mg = 0, mgx = 0, mgxr = 0;
      for (int64_t j = 0; j < D; ++j) {
        double xh = (xr[j] - mean) * rstd;
        ln[r * D + j] = xh;
        lnw[r * D + j] = xh * w[j] + b[j];
        rms[r * D + j] = xr[j] * (1 / std::sqrt(ms + eps));
        rmsw[r * D + j] = xr[j] * rr * w[j];
        mg += gr[j], mgx += gr[j] * xh, mgxr += (double)gr[j] * xr[j];
      }
      mg /= D, mgx /= D, mgxr /= D;
      for (int64_t j = 0; j < D; ++j) {
        double xh = (xr[j] - mean) * rstd;
        lnv[r * D + j] = rstd * (gr[j] - mg - xh * mgx);
        rmsv[r * D + j] = rr * gr[j] - xr[j] * rr * rr * rr * mgxr;
      }
    }
    std::string sd = " D=" + std::to_string(D);
    Shape s = {2, 3, D};
    expect_close(run(node(Op::LayerNorm), {&dx}, s), ln, 2e-5, 2e-5, "layer_norm" + sd);
    expect_close(run(node(Op::LayerNorm), {&dx, &dw, &db}, s), lnw, 2e-5, 2e-5, "layer_norm w b" + sd);
    expect_close(run(node(Op::RmsNorm, {{"eps", 1e-5}}), {&dx}, s), rms, 2e-5, 2e-5, "rms_norm" + sd);
    expect_close(run(node(Op::RmsNorm), {&dx, &dw}, s), rmsw, 2e-5, 2e-5, "rms_norm w" + sd);
    expect_close(run(node(Op::LayerNormVjp), {&ddy, &dx}, s), lnv, 5e-5, 5e-5, "layer_norm_vjp" + sd);
    expect_close(run(node(Op::RmsNormVjp), {&ddy, &dx}, s), rmsv, 5e-5, 5e-5, "rms_norm_vjp" + sd);
  }
}

TEST(VulkanRows, SharedMemoryReductionVariants) {
  // The variants used on devices without subgroup arithmetic.
  auto e = [] {
    test::ScopedEnv env;
    env.set("RLX_VK_NO_SUBGROUP_OPS", "1");
    return make_vulkan_executor(0);
  }();
  for (int64_t len : {7, 3000}) {
    auto x = randn(3 * len, 110, -5, 5);
    Dev dx = put(*e, {3, len}, x);
    expect_close(run(node(Op::Softmax), {&dx}, {3, len}, *e), ref_softmax(x, 3, len), 1e-6, 1e-5, "softmax (shared)");
    std::vector<double> sums(3), maxs(3, -INFINITY);
    for (int r = 0; r < 3; ++r)
      for (int64_t j = 0; j < len; ++j) sums[r] += x[r * len + j], maxs[r] = std::max(maxs[r], (double)x[r * len + j]);
    expect_close(run(node(Op::Sum, {{"axes", std::vector<int64_t>{1}}}), {&dx}, {3}, *e), sums, 1e-4, 1e-5, "sum (shared)");
    expect_close(run(node(Op::Max, {{"axes", std::vector<int64_t>{1}}}), {&dx}, {3}, *e), maxs, 0, 0, "max (shared)");
    std::vector<double> rms(3 * len);
    for (int r = 0; r < 3; ++r) {
      double ms = 0;
      for (int64_t j = 0; j < len; ++j) ms += (double)x[r * len + j] * x[r * len + j];
      for (int64_t j = 0; j < len; ++j) rms[r * len + j] = x[r * len + j] / std::sqrt(ms / len + 1e-6);
    }
    expect_close(run(node(Op::RmsNorm), {&dx}, {3, len}, *e), rms, 2e-5, 2e-5, "rms_norm (shared)");
  }
}

// ---------------------------------------------------------------- matmul

std::vector<double> ref_matmul(const std::vector<float>& a, const Shape& as, bool ta, const std::vector<float>& b,
                               const Shape& bs, bool tb, Shape& out_shape) {
  size_t ra = as.size(), rb = bs.size();
  int64_t M = ta ? as[ra - 1] : as[ra - 2], K = ta ? as[ra - 2] : as[ra - 1], N = tb ? bs[rb - 2] : bs[rb - 1];
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  size_t r = std::max(ab.size(), bb.size());
  Shape ob(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i + ab.size() >= r ? ab[i + ab.size() - r] : 1, db = i + bb.size() >= r ? bb[i + bb.size() - r] : 1;
    ob[i] = std::max(da, db);
  }
  out_shape = ob;
  out_shape.push_back(M);
  out_shape.push_back(N);
  std::vector<double> y(shape_numel(out_shape));
  for (int64_t z = 0; z < shape_numel(ob); ++z) {
    auto c = coords(z, ob);
    int64_t za = ab.empty() ? 0 : bidx(ab, ob, c), zb = bb.empty() ? 0 : bidx(bb, ob, c);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += (double)a[za * M * K + (ta ? k * M + m : m * K + k)] * b[zb * K * N + (tb ? n * K + k : k * N + n)];
        y[(z * M + m) * N + n] = s;
      }
  }
  return y;
}

TEST(VulkanMatmul, RaggedTilesTransposesAndBatchBroadcast) {
  struct Case { Shape a, b; bool ta, tb; };
  std::vector<Case> cases = {
      {{67, 131}, {131, 45}, false, false},  {{131, 67}, {131, 45}, true, false},
      {{67, 131}, {45, 131}, false, true},   {{131, 67}, {45, 131}, true, true},
      {{2, 1, 19, 33}, {3, 33, 21}, false, false}, {{1, 40}, {40, 300}, false, false},
      {{300, 70}, {70, 260}, false, false},  {{4, 5, 8}, {8, 3}, false, false},
      {{5, 300}, {70, 300}, false, true},    {{2, 1, 4, 33}, {3, 33, 21}, false, false},  // gemv
      {{300, 3}, {300, 50}, true, false},    {{13, 200}, {90, 200}, false, true},
      // gemv of b [K, N]: K split over slices of a work group (8, 16 or 32 columns each)
      {{3, 2048}, {2048, 264}, false, false}, {{1, 1000}, {1000, 4100}, false, false},
      // b shared by a's batches: one product of 2 * 7 rows (gemv), of 3 * 50 rows (tiled)
      {{2, 7, 33}, {33, 45}, false, false},  {{3, 50, 40}, {1, 40, 30}, false, false},
  };
  uint32_t seed = 20;
  for (const auto& c : cases) {
    auto a = randn(shape_numel(c.a), seed++), b = randn(shape_numel(c.b), seed++);
    Dev da = put(vk(), c.a, a), db = put(vk(), c.b, b);
    Shape os;
    auto want = ref_matmul(a, c.a, c.ta, b, c.b, c.tb, os);
    auto got = run(node(Op::Matmul, {{"transpose_a", c.ta}, {"transpose_b", c.tb}}), {&da, &db}, os);
    expect_close(got, want, 1e-4, 1e-4, "matmul " + shape_str(c.a) + (c.ta ? "T" : "") + " x " + shape_str(c.b) +
                                            (c.tb ? "T" : ""));
  }
}

TEST(VulkanMatmul, Linear) {
  int64_t In = 37, Out = 29;
  auto x = randn(2 * 5 * In, 40), w = randn(Out * In, 41), b = randn(Out, 42);
  Dev dx = put(vk(), {2, 5, In}, x), dw = put(vk(), {Out, In}, w), db = put(vk(), {Out}, b);
  std::vector<double> want(10 * Out), want_b(10 * Out);
  for (int r = 0; r < 10; ++r)
    for (int o = 0; o < Out; ++o) {
      double s = 0;
      for (int i = 0; i < In; ++i) s += (double)x[r * In + i] * w[o * In + i];
      want[r * Out + o] = s;
      want_b[r * Out + o] = s + b[o];
    }
  expect_close(run(node(Op::Linear), {&dx, &dw}, {2, 5, Out}), want, 1e-4, 1e-4, "linear");
  expect_close(run(node(Op::Linear), {&dx, &dw, &db}, {2, 5, Out}), want_b, 1e-4, 1e-4, "linear + bias");
  // few rows: the gemv path
  Dev dx3 = put(vk(), {3, In}, std::vector<float>(x.begin(), x.begin() + 3 * In));
  expect_close(run(node(Op::Linear), {&dx3, &dw, &db}, {3, Out}),
               std::vector<double>(want_b.begin(), want_b.begin() + 3 * Out), 1e-4, 1e-4, "linear + bias, 3 rows");
}

// The register-blocked kernel's other paths: vec4 loads and stores (offsets and
// strides multiples of 4), split-K (few tiles, long K) with and without bias,
// K not a multiple of 4 or of the tile depth, transposed operands.
TEST(VulkanMatmul, VectorLoadsAndSplitK) {
  struct Case { Shape a, b; bool ta, tb; size_t off; };
  std::vector<Case> cases = {
      {{130, 2048}, {2048, 132}, false, false, 0},  // 128x128 tiles, 4 of them: split-K, vec4
      {{130, 2048}, {2048, 132}, false, false, 1},  // the same, scalar loads
      {{128, 1030}, {1030, 128}, false, false, 0},  // K % 4 != 0: scalar, split with a short last chunk
      {{512, 160}, {512, 136}, true, false, 0},     // transposed a, no split
      {{96, 1024}, {72, 1024}, false, true, 4},     // linear layout, 64x64 tiles, split
      {{48, 1100}, {1100, 40}, false, false, 0},    // 32-row tiles
      {{200, 300}, {300, 520}, false, false, 0},    // 128x256 tiles, ragged on both sides
      {{300, 200}, {520, 300}, true, true, 0},      // 128x256 tiles, both transposed
      {{130, 2048}, {2048, 300}, false, false, 0},  // 128x256 tiles, split-K
  };
  uint32_t seed = 90;
  for (const auto& c : cases) {
    auto a = randn(shape_numel(c.a), seed++), b = randn(shape_numel(c.b), seed++);
    Dev da = put(vk(), c.a, a, DType::f32, c.off), db = put(vk(), c.b, b, DType::f32, c.off);
    Shape os;
    auto want = ref_matmul(a, c.a, c.ta, b, c.b, c.tb, os);
    ir::Node n = node(Op::Matmul, {{"transpose_a", c.ta}, {"transpose_b", c.tb}});
    Dev out = empty(vk(), os, c.off);
    Kernel k;
    k.node = &n;
    k.inputs = {da.ref, db.ref};
    k.output = out.ref;
    k.label = "mm";
    vk().launch(k);
    vk().flush();
    expect_close(get(vk(), out), want, 1e-3, 1e-4,
                 "matmul " + shape_str(c.a) + (c.ta ? "T" : "") + " x " + shape_str(c.b) + (c.tb ? "T" : "") +
                     " at offset " + std::to_string(c.off));
  }
  // linear + bias through split-K (the bias is added once, by the summing pass)
  int64_t M = 200, In = 2048, Out = 100;
  auto x = randn(M * In, 97), w = randn(Out * In, 98), bias = randn(Out, 99);
  Dev dx = put(vk(), {M, In}, x, DType::f32, 0), dw = put(vk(), {Out, In}, w, DType::f32, 0),
      dbias = put(vk(), {Out}, bias, DType::f32, 0);
  std::vector<double> want(M * Out);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t o = 0; o < Out; ++o) {
      double s = bias[o];
      for (int64_t i = 0; i < In; ++i) s += (double)x[r * In + i] * w[o * In + i];
      want[r * Out + o] = s;
    }
  expect_close(run(node(Op::Linear), {&dx, &dw, &dbias}, {M, Out}), want, 1e-3, 1e-4, "linear + bias, split-K");
}

// Transfers through the staging ring (forced on drivers whose device memory is
// host-visible): several chunks in flight each way, unaligned offsets and sizes,
// and the transfer counters.
TEST(VulkanMemory, StagedTransfersRoundTrip) {
  std::unique_ptr<Executor> e = [] {
    test::ScopedEnv env;
    env.set("RLX_VK_FORCE_STAGING", "1");
    return make_vulkan_executor(0);
  }();
  e->take_device_stats();
  size_t n = (40u << 20) / 4 + 12345;  // 40 MiB and change: three 16 MiB chunks
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (float)(i % 1000003) * 0.5f;
  auto buf = e->allocate((n + 7) * 4);
  e->upload(*buf, 7 * 4, v.data(), n * 4, DType::f32);
  std::vector<float> back(n, -1.f);
  e->download(*buf, 7 * 4, back.data(), n * 4, DType::f32);
  EXPECT_TRUE(back == v) << "40 MiB round trip through the staging ring";
  std::vector<float> part(1001, -1.f);  // a small read in the middle
  e->download(*buf, (7 + 5000000) * 4, part.data(), part.size() * 4, DType::f32);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), v.begin() + 5000000));
  std::vector<float> small = {1.5f, -2.f, 3.25f};  // a small write then a kernel reading it
  e->upload(*buf, 8 * 4, small.data(), 3 * 4, DType::f32);
  e->download(*buf, 7 * 4, back.data(), 5 * 4, DType::f32);
  EXPECT_EQ(back[0], v[0]);
  EXPECT_EQ(back[1], 1.5f);
  EXPECT_EQ(back[3], 3.25f);
  EXPECT_EQ(back[4], v[4]);
  DeviceStats st = e->take_device_stats();
  EXPECT_EQ(st.upload_bytes, (uint64_t)(n + 3) * 4);
  EXPECT_EQ(st.download_bytes, (uint64_t)(n + 1001 + 5) * 4);
  EXPECT_GT(st.upload_s, 0.0);
  EXPECT_EQ(e->take_device_stats().upload_bytes, 0u);
}

// ---------------------------------------------------------------- shape ops

// Transposes through the tiled kernel (batched 2-D after merging adjacent dims and
// dropping size-1 ones: ragged tiles, NCHW -> NHWC, a size-1 dim in between) and through
// the strided copy (innermost axis kept), against a reference loop.
TEST(VulkanShape, TransposeTiledAndStrided) {
  struct Case { Shape s; std::vector<int64_t> perm; };
  std::vector<Case> cases = {
      {{67, 45}, {1, 0}},         {{3, 40, 33}, {0, 2, 1}},     {{2, 5, 7, 9}, {0, 2, 3, 1}},
      {{2, 1, 37, 70}, {0, 3, 1, 2}}, {{4, 6, 5}, {1, 0, 2}},   {{1, 1, 64}, {2, 0, 1}},
      {{5, 4, 3, 2}, {3, 2, 1, 0}},
  };
  uint32_t seed = 300;
  for (const auto& c : cases) {
    int r = (int)c.s.size();
    int64_t n = shape_numel(c.s);
    auto x = randn(n, seed++);
    Dev dx = put(vk(), c.s, x);
    Shape os(r);
    for (int d = 0; d < r; ++d) os[d] = c.s[c.perm[d]];
    auto xs = contiguous_strides(c.s);
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) {
      auto oc = coords(i, os);
      int64_t src = 0;
      for (int d = 0; d < r; ++d) src += oc[d] * xs[c.perm[d]];
      want[i] = x[src];
    }
    expect_close(run(node(Op::Transpose, {{"perm", c.perm}}), {&dx}, os), want, 0, 0,
                 "transpose " + shape_str(c.s));
  }
}

TEST(VulkanShape, ReshapeTransposeBroadcastNarrowConcat) {
  Shape s = {2, 3, 4};
  auto x = randn(24, 50);
  Dev dx = put(vk(), s, x);
  expect_close(run(node(Op::Reshape, {{"shape", std::vector<int64_t>{4, 6}}}), {&dx}, {4, 6}), dbl(x), 0, 0, "reshape");

  for (std::vector<int64_t> perm : {std::vector<int64_t>{2, 0, 1}, std::vector<int64_t>{}}) {
    std::vector<int64_t> p = perm.empty() ? std::vector<int64_t>{2, 1, 0} : perm;
    Shape os = {s[p[0]], s[p[1]], s[p[2]]};
    std::vector<double> want(24);
    for (int64_t i = 0; i < 24; ++i) {
      auto c = coords(i, os);
      std::vector<int64_t> src(3);
      for (int d = 0; d < 3; ++d) src[p[d]] = c[d];
      want[i] = x[(src[0] * 3 + src[1]) * 4 + src[2]];
    }
    std::map<std::string, ir::AttrValue> attrs;
    if (!perm.empty()) attrs["perm"] = perm;
    expect_close(run(node(Op::Transpose, attrs), {&dx}, os), want, 0, 0, "transpose");
  }

  Dev dr = put(vk(), {3, 1}, {1.f, 2.f, 3.f});
  std::vector<double> bw;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) bw.push_back(b + 1);
  expect_close(run(node(Op::BroadcastTo, {{"shape", std::vector<int64_t>{2, 3, 4}}}), {&dr}, {2, 3, 4}), bw, 0, 0,
               "broadcast_to");

  std::vector<double> nw;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 1; c < 3; ++c) nw.push_back(x[(a * 3 + b) * 4 + c]);
  expect_close(run(node(Op::Narrow, {{"axis", int64_t(-1)}, {"start", int64_t(1)}, {"length", int64_t(2)}}), {&dx},
                   {2, 3, 2}),
               nw, 0, 0, "narrow");

  auto y = randn(2 * 1 * 4, 51), z = randn(2 * 2 * 4, 52);
  Dev dy = put(vk(), {2, 1, 4}, y), dz = put(vk(), {2, 2, 4}, z);
  std::vector<double> cw;
  for (int a = 0; a < 2; ++a) {
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) cw.push_back(x[(a * 3 + b) * 4 + c]);
    for (int c = 0; c < 4; ++c) cw.push_back(y[a * 4 + c]);
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 4; ++c) cw.push_back(z[(a * 2 + b) * 4 + c]);
  }
  expect_close(run(node(Op::Concat, {{"axis", int64_t(1)}}), {&dx, &dy, &dz}, {2, 6, 4}), cw, 0, 0, "concat");
}

// ---------------------------------------------------------------- gather, rope

TEST(VulkanGather, EmbeddingAndOutOfRange) {
  int64_t V = 7, D = 5;
  auto table = randn(V * D, 60);
  Dev dt = put(vk(), {V, D}, table);
  std::vector<float> idx = {3, 0, 6, 2, 2, 5};
  Dev di = put(vk(), {2, 3}, idx, DType::i32);
  std::vector<double> want;
  for (float i : idx)
    for (int d = 0; d < D; ++d) want.push_back(table[(int)i * D + d]);
  expect_close(run(node(Op::Embedding), {&dt, &di}, {2, 3, D}), want, 0, 0, "embedding");

  Dev bad = put(vk(), {3}, {1, 7, 2}, DType::i32);
  ir::Node n = node(Op::Embedding);
  n.id = "tok_embed";
  try {
    run(n, {&dt, &bad}, {3, D});
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("tok_embed"), std::string::npos) << m;
    EXPECT_NE(m.find("[0, 7)"), std::string::npos) << m;
  }
  // The executor is usable afterwards.
  expect_close(run(node(Op::Embedding), {&dt, &di}, {2, 3, D}), want, 0, 0, "embedding after error");
}

TEST(VulkanRope, HalfSplitInterleavedOffsets) {
  int64_t H = 2, S = 5, D = 12;
  auto x = randn(H * S * D, 70);
  Dev dx = put(vk(), {H, S, D}, x);
  Dev doff = put(vk(), {}, {4000.f}, DType::i32);
  for (bool trad : {false, true})
    for (int64_t dims : {D, int64_t(8)})
      for (int mode = 0; mode < 2; ++mode) {  // 0: offset attr, 1: offset input
        double base = 10000, scale = 0.5;
        int64_t offset = mode == 0 ? 37 : 4000;
        std::map<std::string, ir::AttrValue> attrs = {{"traditional", trad}, {"dims", dims}, {"scale", scale}};
        if (mode == 0) attrs["offset"] = offset;
        std::vector<const Dev*> ins = {&dx};
        if (mode == 1) ins.push_back(&doff);
        auto got = run(node(Op::Rope, attrs), ins, {H, S, D});
        std::vector<double> want = dbl(x);
        for (int64_t h = 0; h < H; ++h)
          for (int64_t s = 0; s < S; ++s) {
            const float* xr = &x[(h * S + s) * D];
            double* yr = &want[(h * S + s) * D];
            for (int64_t i = 0; i < dims / 2; ++i) {
              double th = (offset + s) * scale * std::pow(base, -2.0 * i / dims);
              int64_t ia = trad ? 2 * i : i, ib = trad ? 2 * i + 1 : i + dims / 2;
              yr[ia] = xr[ia] * std::cos(th) - xr[ib] * std::sin(th);
              yr[ib] = xr[ia] * std::sin(th) + xr[ib] * std::cos(th);
            }
          }
        expect_close(got, want, 2e-5, 2e-5,
                     std::string("rope trad=") + (trad ? "1" : "0") + " dims=" + std::to_string(dims) + " mode " +
                         std::to_string(mode));
      }
}

// ---------------------------------------------------------------- attention

struct AttnCase {
  int64_t B, Hq, Hkv, Sq, Sk, D, Dv;
  bool causal;
  int mask;  // 0 none, 1 float [Sq, Sk], 2 bool [B, 1, Sq, Sk] with fully hidden rows
  int rank = 4;
};

void check_attention(const AttnCase& c, Executor& e = vk()) {
  auto q = randn(c.B * c.Hq * c.Sq * c.D, 80), k = randn(c.B * c.Hkv * c.Sk * c.D, 81),
       v = randn(c.B * c.Hkv * c.Sk * c.Dv, 82);
  std::vector<float> m;
  Shape ms;
  if (c.mask == 1) m = randn(c.Sq * c.Sk, 83, -3, 1), ms = {c.Sq, c.Sk};
  if (c.mask == 2) {
    ms = {c.B, 1, c.Sq, c.Sk};
    m.resize(shape_numel(ms));
    std::mt19937 g(84);
    for (auto& x : m) x = (g() % 3) ? 1.f : 0.f;
    for (int64_t j = 0; j < c.Sk; ++j) m[(0 * c.Sq + 1) * c.Sk + j] = 0;  // row 1 of batch 0 fully hidden
  }
  auto shp = [&](int64_t H, int64_t S, int64_t D) {
    if (c.rank == 4) return Shape{c.B, H, S, D};
    if (c.rank == 3) return Shape{H, S, D};
    return Shape{S, D};
  };
  Dev dq = put(e, shp(c.Hq, c.Sq, c.D), q), dk = put(e, shp(c.Hkv, c.Sk, c.D), k), dv = put(e, shp(c.Hkv, c.Sk, c.Dv), v);
  Dev dm = put(e, ms.empty() ? Shape{1} : ms, m.empty() ? std::vector<float>{0} : m,
               c.mask == 2 ? DType::boolean : DType::f32);
  std::vector<const Dev*> ins = {&dq, &dk, &dv};
  if (c.mask) ins.push_back(&dm);
  auto got = run(node(Op::Attention, {{"causal", c.causal}}), ins, shp(c.Hq, c.Sq, c.Dv), e);
  auto at = [](const std::vector<float>& x) { return [&x](int64_t i) { return x[i]; }; };
  auto want = ref_attention(c, at(q), at(k), at(v), at(m), at(m));
  expect_close(got, want, 2e-5, 1e-4,
               "attention Sq=" + std::to_string(c.Sq) + " Sk=" + std::to_string(c.Sk) + " D=" + std::to_string(c.D) +
                   " causal=" + std::to_string(c.causal) + " mask=" + std::to_string(c.mask));
  if (c.mask == 2) {  // the fully hidden row is exactly zero
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t e2 = 0; e2 < c.Dv; ++e2) EXPECT_EQ(got[(h * c.Sq + 1) * c.Dv + e2], 0.f);
  }
}

TEST(VulkanAttention, FlashTilesGqaCausalMasks) {
  // (head dims are specialization constants: the cases share D=40, Dv=24 to
  // keep pipeline compilation on lavapipe short)
  check_attention({2, 4, 2, 37, 70, 40, 24, false, 0});  // several query and key blocks, GQA
  check_attention({1, 2, 1, 37, 70, 40, 24, true, 0});   // causal with Sk > Sq (decode-style shift)
  check_attention({1, 2, 2, 20, 45, 40, 24, true, 1});   // float mask broadcast over batch and heads
  check_attention({2, 2, 1, 9, 33, 40, 24, false, 2});   // bool mask with a fully hidden row
  check_attention({1, 1, 1, 50, 50, 80, 130, true, 0});  // D and Dv spanning several chunks
  check_attention({1, 3, 3, 5, 1, 40, 24, false, 0, 3});  // rank 3, one key
  check_attention({1, 1, 1, 17, 17, 40, 24, true, 0, 2});  // rank 2
  check_attention({1, 4, 2, 1, 300, 40, 24, true, 0});    // decode: keys split over work groups
  check_attention({2, 2, 1, 5, 260, 40, 24, false, 2});   // split keys with a fully hidden row
  // >= 64 packed query rows: the register-tiled kernel
  check_attention({2, 4, 2, 70, 150, 40, 24, false, 0});  // GQA, ragged row and key blocks
  check_attention({1, 2, 1, 100, 100, 40, 24, true, 1});  // causal + float mask, blocks spanning heads
  check_attention({2, 2, 2, 65, 90, 40, 24, true, 2});    // bool mask with a fully hidden row
  check_attention({1, 1, 1, 80, 80, 80, 130, true, 0});   // D and Dv spanning several chunks
}

TEST(VulkanAttention, GpuVariantOnAHostDevice) {
  // A device that runs shaders on the host CPU (lavapipe in CI) gets "attention.cpu", its loops
  // kept rolled; the GPU variant (unrolled) is checked here on the same device.
  auto e = [] {
    test::ScopedEnv env;
    env.set("RLX_VK_GPU_VARIANTS", "1");
    return make_vulkan_executor(0);
  }();
  check_attention({2, 4, 2, 37, 70, 40, 24, false, 0}, *e);
  check_attention({1, 2, 2, 20, 45, 40, 24, true, 1}, *e);
  check_attention({2, 2, 1, 9, 33, 40, 24, false, 2}, *e);
  check_attention({1, 1, 1, 50, 50, 80, 130, true, 0}, *e);
  check_attention({1, 4, 2, 1, 300, 40, 24, true, 0}, *e);
}

// ---------------------------------------------------------------- fused

TEST(VulkanFused, BroadcastProgram) {
  // out = gelu(in0 * in1 + 0.5) - in2 ; in0 [4,1,6], in1 [5,6], in2 [4,5,1]; out [4,5,6]
  FusedProgram p;
  using I = FusedInstr;
  p.code = {{I::Load, EwOp::Add, 0, 0, 0.f},   {I::Load, EwOp::Add, 1, 0, 0.f},  {I::Binary, EwOp::Mul, 0, 1, 0.f},
            {I::Const, EwOp::Add, 0, 0, 0.5f}, {I::Binary, EwOp::Add, 2, 3, 0.f}, {I::Unary, EwOp::GeluErf, 4, 0, 0.f},
            {I::Load, EwOp::Add, 2, 0, 0.f},   {I::Binary, EwOp::Sub, 5, 6, 0.f}};
  p.result = 7;
  p.input_shapes = {{4, 1, 6}, {5, 6}, {4, 5, 1}};
  p.out_shape = {4, 5, 6};
  auto a = randn(24, 90), b = randn(30, 91), c = randn(20, 92);
  Dev da = put(vk(), p.input_shapes[0], a), db = put(vk(), p.input_shapes[1], b), dc = put(vk(), p.input_shapes[2], c);
  Dev out = empty(vk(), p.out_shape);
  Kernel k;
  k.fused = &p;
  k.inputs = {da.ref, db.ref, dc.ref};
  k.output = out.ref;
  k.label = "fused[a,b,c]";
  vk().launch(k);
  vk().flush();
  std::vector<double> want;
  for (int64_t i = 0; i < 120; ++i) {
    auto co = coords(i, p.out_shape);
    double t = (double)a[bidx(p.input_shapes[0], p.out_shape, co)] * b[bidx(p.input_shapes[1], p.out_shape, co)] + 0.5;
    want.push_back(0.5 * t * (1 + std::erf(t / std::sqrt(2.0))) - c[bidx(p.input_shapes[2], p.out_shape, co)]);
  }
  expect_close(get(vk(), out), want, 1e-5, 1e-5, "fused");
}

// ---------------------------------------------------------------- batching, record/replay, profiling

// y1 = x @ w ; y2 = y1 + x2 ; y3 = softmax(y2) ; then x is overwritten from y3 (WAR on x)
struct Chain {
  ir::Node mm = node(Op::Matmul), add = node(Op::Add), sm = node(Op::Softmax), copy = node(Op::Reshape,
                                                                                            {{"shape", std::vector<int64_t>{8, 8}}});
  Dev x, w, x2, y1, y2, y3;
  std::vector<Kernel> kernels;
  Chain(Executor& e, uint32_t seed) {
    x = put(e, {8, 8}, randn(64, seed)), w = put(e, {8, 8}, randn(64, seed + 1)), x2 = put(e, {8, 8}, randn(64, seed + 2));
    y1 = empty(e, {8, 8}), y2 = empty(e, {8, 8}), y3 = empty(e, {8, 8});
    auto k = [&](const ir::Node& n, std::vector<TensorRef> in, const Dev& out, const char* label) {
      Kernel kk;
      kk.node = &n;
      kk.inputs = std::move(in);
      kk.output = out.ref;
      kk.label = label;
      kk.flops = 1;
      kernels.push_back(kk);
    };
    k(mm, {x.ref, w.ref}, y1, "mm");
    k(add, {y1.ref, x2.ref}, y2, "add");
    k(sm, {y2.ref}, y3, "softmax");
    k(copy, {y3.ref}, x, "copy_back");
  }
  std::vector<double> expected(const std::vector<float>& xv, Executor& e) {
    Shape os;
    auto y = ref_matmul(xv, {8, 8}, false, get(e, w), {8, 8}, false, os);
    auto b = get(e, x2);
    std::vector<float> yf(64);
    for (int i = 0; i < 64; ++i) yf[i] = (float)(y[i] + b[i]);
    return ref_softmax(yf, 8, 8);
  }
};

TEST(VulkanExecution, LazyBatchOrdersDependentKernels) {
  Chain c(vk(), 100);
  auto x0 = get(vk(), c.x);
  for (const auto& k : c.kernels) vk().launch(k);
  vk().flush();
  auto want = c.expected(x0, vk());
  expect_close(get(vk(), c.y3), want, 1e-5, 1e-4, "lazy chain");
  expect_close(get(vk(), c.x), want, 1e-5, 1e-4, "lazy chain write-back");
}

TEST(VulkanExecution, RecordReplayAndProfile) {
  Executor& e = vk();
  Chain c(e, 200);
  auto rec = e.record(c.kernels);
  for (int it = 0; it < 3; ++it) {
    auto x0 = get(e, c.x);
    e.replay(*rec);
    auto want = c.expected(x0, e);
    expect_close(get(e, c.y3), want, 1e-5, 1e-4, "replay " + std::to_string(it));
  }
  e.set_profiling(true);
  e.replay(*rec);
  for (const auto& k : c.kernels) e.launch(k);
  e.flush();
  e.set_profiling(false);
  auto prof = e.take_profile();
  ASSERT_EQ(prof.size(), 8u);
  EXPECT_EQ(prof[0].label, "mm");
  EXPECT_EQ(prof[0].op, "matmul");
  EXPECT_EQ(prof[2].op, "softmax");
  for (const auto& p : prof) EXPECT_GE(p.seconds, 0.0);
}

// ---------------------------------------------------------------- validation layer

TEST(VulkanValidation, KernelsRunCleanUnderValidation) {
  std::unique_ptr<Executor> e;
  try {
    test::ScopedEnv env;
    env.set("RLX_VK_VALIDATION", "1");
    e = make_vulkan_executor(0);
  } catch (const RuntimeError& err) {
    GTEST_SKIP() << err.what();
  }
  // A mix of kernels: matmul, elementwise, reductions, rows, attention, fused, record/replay.
  Chain c(*e, 300);
  for (const auto& k : c.kernels) e->launch(k);
  e->flush();
  auto rec = e->record(c.kernels);
  e->replay(*rec);
  e->replay(*rec);
  check_attention({1, 2, 1, 20, 40, 40, 24, true, 1}, *e);
  check_attention({1, 2, 1, 40, 300, 40, 24, true, 2}, *e);  // tiled kernel
  check_attention({1, 4, 1, 1, 300, 40, 24, false, 0}, *e);  // split keys + combine
  auto x = randn(60, 301);
  Dev dx = put(*e, {3, 4, 5}, x);
  run(node(Op::Sum, {{"axes", std::vector<int64_t>{1}}}), {&dx}, {3, 5}, *e);
  run(node(Op::LayerNorm), {&dx}, {3, 4, 5}, *e);
  run(node(Op::Transpose), {&dx}, {5, 4, 3}, *e);
  EXPECT_EQ(vulkan_validation_error_count(*e), 0u);
  // The messenger path: an error message makes the next flush throw.
  vulkan_inject_validation_error(*e, "rlx test: injected validation error");
  EXPECT_EQ(vulkan_validation_error_count(*e), 1u);
  try {
    e->flush();
    FAIL() << "flush did not report the validation error";
  } catch (const RuntimeError& err) {
    EXPECT_NE(std::string(err.what()).find("injected validation error"), std::string::npos) << err.what();
  }
}

TEST(VulkanLimits, TensorBeyondStorageBufferRange) {
  auto devs = vulkan_devices();
  uint64_t range = 0;
  for (const auto& [k, v] : devs[0].properties)
    if (k == "max storage buffer range") range = std::stoull(v);
  if (range == 0 || range > (512ull << 20)) GTEST_SKIP() << "range too large to test cheaply";
  size_t n = range / 4 + 16;
  auto buf = vk().allocate(n * 4);
  auto obuf = vk().allocate(4);
  ir::Node sum = node(Op::Sum);
  Kernel k;
  k.node = &sum;
  k.inputs = {{buf.get(), 0, {(int64_t)n}, DType::f32}};
  k.output = {obuf.get(), 0, {}, DType::f32};
  k.label = "huge";
  try {
    vk().launch(k);
    vk().flush();
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("maxStorageBufferRange"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("huge"), std::string::npos) << e.what();
  }
}

// Issue 30: a weight larger than the device's own maxStorageBufferRange (no lowered limit): the
// linear is split over several bindings, by the weight's rows. Values are multiples of 1/64 whose
// products and sums are exact in f32, so every result is compared bit for bit with a host loop.
TEST(VulkanLimits, LinearWeightBeyondStorageBufferRange) {
  auto devs = vulkan_devices();
  uint64_t range = 0;
  for (const auto& [k, v] : devs[0].properties)
    if (k == "max storage buffer range") range = std::stoull(v);
  if (range == 0 || range > (512ull << 20)) GTEST_SKIP() << "range too large to test cheaply";
  const int64_t K = 1024, N = (int64_t)(range / (4 * K)) + 40;  // just over the range
  std::vector<float> w((size_t)(N * K)), x(2 * K), b(N);
  for (int64_t i = 0; i < N * K; ++i) w[i] = (float)((i * 7 + i / K * 3) % 17 - 8) / 8.f;
  for (int64_t i = 0; i < 2 * K; ++i) x[i] = (float)((i * 5) % 13 - 6) / 8.f;
  for (int64_t i = 0; i < N; ++i) b[i] = (float)(i % 9) / 4.f;
  Dev dw = put(vk(), {N, K}, w), db = put(vk(), {N}, b);
  ASSERT_GT((uint64_t)N * K * 4, range);
  for (int64_t M : {1, 2}) {  // one row: straight into y; two: through scratch and a strided copy
    Dev dx = put(vk(), {M, K}, std::vector<float>(x.begin(), x.begin() + M * K));
    std::vector<float> got = run(node(Op::Linear), {&dx, &dw, &db}, {M, N});
    int64_t bad = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = b[n];
        for (int64_t k = 0; k < K; ++k) s += (double)x[m * K + k] * w[n * K + k];
        if (got[m * N + n] != (float)s && bad++ < 5)
          ADD_FAILURE() << "y[" << m << ", " << n << "] = " << got[m * N + n] << ", want " << s;
      }
    EXPECT_EQ(bad, 0) << M << " rows";
  }
}

}  // namespace
}  // namespace rlx

// ---------------------------------------------------------------- performance (manual)
// Run with --gtest_also_run_disabled_tests --gtest_filter='*Perf*' on a real GPU.

namespace rlx {
namespace {

double time_kernel(Executor& e, const Kernel& k, int reps) {
  e.launch(k);  // pipeline creation
  e.flush();
  // Bring the GPU to its working clocks: ~50 ms of this kernel first.
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(50)) {
    for (int i = 0; i < 4; ++i) e.launch(k);
    e.flush();
  }
  reps *= 3;
  e.set_profiling(true);
  for (int i = 0; i < reps; ++i) e.launch(k);
  e.flush();
  e.set_profiling(false);
  auto prof = e.take_profile();
  double best = 1e30;
  for (const auto& p : prof) best = std::min(best, p.seconds);
  return best;
}

TEST(VulkanPerf, DISABLED_Matmul) {
  Executor& e = vk();
  std::printf("device: %s\n", e.description().c_str());
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{4096, 4096, 4096}, {4096, 512, 14336}, {1, 4096, 4096},
                         {16, 4096, 4096}, {512, 512, 512}}) {
    Dev a = put(e, {M, K}, randn(M * K, 1)), b = put(e, {N, K}, randn(N * K, 2)), y = empty(e, {M, N});
    ir::Node lin = node(Op::Linear);
    Kernel k{&lin, nullptr, {a.ref, b.ref}, y.ref, "linear"};
    double s = time_kernel(e, k, 5);
    std::printf("linear M=%ld N=%ld K=%ld: %.3f ms, %.2f TFLOP/s\n", (long)M, (long)N, (long)K, s * 1e3,
                2.0 * M * N * K / s * 1e-12);
  }
}

TEST(VulkanPerf, DISABLED_Memory) {
  Executor& e = vk();
  {
    int64_t R = 4096, L = 32000;
    Dev x = put(e, {R, L}, randn(R * L, 3)), y = empty(e, {R, L});
    ir::Node sm = node(Op::Softmax);
    double s = time_kernel(e, {&sm, nullptr, {x.ref}, y.ref, "softmax"}, 5);
    std::printf("softmax %ldx%ld: %.3f ms, %.0f GB/s\n", (long)R, (long)L, s * 1e3, 8.0 * R * L / s * 1e-9);
    Dev x2 = put(e, {R, L}, randn(R * L, 4));
    ir::Node add = node(Op::Add);
    s = time_kernel(e, {&add, nullptr, {x.ref, x2.ref}, y.ref, "add"}, 5);
    std::printf("add %ldx%ld: %.3f ms, %.0f GB/s\n", (long)R, (long)L, s * 1e3, 12.0 * R * L / s * 1e-9);
    ir::Node copy = node(Op::Reshape, {{"shape", std::vector<int64_t>{R, L}}});
    s = time_kernel(e, {&copy, nullptr, {x.ref}, y.ref, "copy"}, 5);
    std::printf("copy %ldx%ld: %.3f ms, %.0f GB/s\n", (long)R, (long)L, s * 1e3, 8.0 * R * L / s * 1e-9);
    for (int64_t len : {1024, 4096}) {
      TensorRef xs = x.ref, ys = y.ref;
      xs.shape = ys.shape = {R * L / len, len};
      s = time_kernel(e, {&sm, nullptr, {xs}, ys, "softmax"}, 5);
      std::printf("softmax rows of %ld: %.3f ms, %.0f GB/s\n", (long)len, s * 1e3, 8.0 * R * L / s * 1e-9);
      ir::Node rms1 = node(Op::RmsNorm);
      s = time_kernel(e, {&rms1, nullptr, {xs}, ys, "rms"}, 5);
      std::printf("rms_norm rows of %ld: %.3f ms, %.0f GB/s\n", (long)len, s * 1e3, 8.0 * R * L / s * 1e-9);
      ir::Node sum1 = node(Op::Sum, {{"axes", std::vector<int64_t>{1}}});
      TensorRef ysum = ys;
      ysum.shape = {R * L / len};
      s = time_kernel(e, {&sum1, nullptr, {xs}, ysum, "sum"}, 5);
      std::printf("sum rows of %ld: %.3f ms, %.0f GB/s\n", (long)len, s * 1e3, 4.0 * R * L / s * 1e-9);
    }
    ir::Node rms = node(Op::RmsNorm);
    s = time_kernel(e, {&rms, nullptr, {x.ref}, y.ref, "rms"}, 5);
    std::printf("rms_norm %ldx%ld: %.3f ms, %.0f GB/s\n", (long)R, (long)L, s * 1e3, 8.0 * R * L / s * 1e-9);
    ir::Node sum = node(Op::Sum, {{"axes", std::vector<int64_t>{1}}});
    Dev ys = empty(e, {R});
    s = time_kernel(e, {&sum, nullptr, {x.ref}, ys.ref, "sum"}, 5);
    std::printf("sum rows %ldx%ld: %.3f ms, %.0f GB/s\n", (long)R, (long)L, s * 1e3, 4.0 * R * L / s * 1e-9);
  }
}

TEST(VulkanPerf, DISABLED_Attention) {
  Executor& e = vk();
  for (auto [B, H, Hkv, Sq, Sk, D] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>{1, 32, 8, 2048, 2048, 128},
                                      {1, 32, 8, 1, 4096, 128}, {4, 16, 16, 1024, 1024, 64}}) {
    Dev q = put(e, {B, H, Sq, D}, randn(B * H * Sq * D, 4)), kk = put(e, {B, Hkv, Sk, D}, randn(B * Hkv * Sk * D, 5)),
        v = put(e, {B, Hkv, Sk, D}, randn(B * Hkv * Sk * D, 6)), o = empty(e, {B, H, Sq, D});
    ir::Node at = node(Op::Attention, {{"causal", true}});
    double s = time_kernel(e, {&at, nullptr, {q.ref, kk.ref, v.ref}, o.ref, "attention"}, 3);
    double fl = 4.0 * B * H * Sq * Sk * D * (Sq > 1 ? 0.5 : 1.0);
    std::printf("attention B=%ld H=%ld/%ld Sq=%ld Sk=%ld D=%ld causal: %.3f ms, %.2f TFLOP/s\n", (long)B, (long)H,
                (long)Hkv, (long)Sq, (long)Sk, (long)D, s * 1e3, fl / s * 1e-12);
  }
}


// TopK along a line of len elements. Up to kMaxWalk (32768) elements one invocation per element
// walks the whole line; beyond, kernels_long.cpp's passes (runs of 64 ranked, then merged by
// binary search) keep every invocation's walk short, so a device that JITs shaders for the host
// (lavapipe: llvmpipe ends an invocation's loops after 65535 iterations, which gave wrong top
// values for RetinaNet's anchor scores) gives the sort's answer too, as a GPU does. (Every mode,
// ties, NaN, argmax, cumsum, min/prod: test_long_lines.cpp.)
TEST(VulkanIndex, TopKOverLongLinesIsRight) {
  Executor& e = vk();
  for (int64_t len : {int64_t(32768), int64_t(65536), int64_t(70000), int64_t(1048320)}) {
    SCOPED_TRACE("len " + std::to_string(len));
    const auto x = randn((size_t)len, 11);
    std::vector<double> want(x.begin(), x.end());
    std::sort(want.begin(), want.end(), std::greater<double>());
    want.resize(1000);
    Dev dx = put(e, {len}, x);
    const ir::Node n = node(Op::TopK, {{"k", int64_t(1000)}, {"axis", int64_t(0)}});
    expect_close(run(n, {&dx}, {1000}), want, 0, 0, "topk");
  }
}
}  // namespace
}  // namespace rlx
