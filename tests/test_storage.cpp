// Real dtypes in memory: the f16/bf16 matrix products (every instruction-set level against a
// plain double-precision reference loop written here), zero-copy host buffers, exact
// integer arithmetic over the whole i64 range, 1-byte bool.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/half_gemm.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "ir/loader.h"
#include "runtime/executor.h"
#include "runtime/session.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

using namespace rlx;

namespace {

// Round-to-nearest-even f32 -> bf16 / f16, written independently of core/dtype.h:
// bf16 by integer rounding of the bit pattern, f16 through the hardware-independent
// definition (nearest representable value with 11 significant bits, ties to even).
uint16_t ref_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t lsb = (u >> 16) & 1;
  return (uint16_t)((u + 0x7FFF + lsb) >> 16);
}
float ref_bf16_value(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
double ref_f16_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  const double v = e == 0 ? std::ldexp((double)m, -24) : std::ldexp(1024.0 + m, e - 25);
  return s ? -v : v;
}
uint16_t ref_f16(float f) {  // finite values in f16 range only (what the tests use)
  uint16_t best = 0;
  double bd = INFINITY;
  // Search the 2^15 non-negative patterns' neighbourhood: binary search on the ordered values.
  const double a = std::fabs((double)f);
  int lo = 0, hi = 0x7BFF;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (ref_f16_value((uint16_t)mid) <= a) lo = mid;
    else hi = mid - 1;
  }
  for (int c : {lo, std::min(lo + 1, 0x7BFF)}) {
    const double d = std::fabs(ref_f16_value((uint16_t)c) - a);
    if (d < bd || (d == bd && (c & 1) == 0)) bd = d, best = (uint16_t)c;
  }
  return (uint16_t)(best | (f < 0 ? 0x8000 : 0));
}

double half_ref(uint16_t h, DType t) { return t == DType::f16 ? ref_f16_value(h) : ref_bf16_value(h); }
uint16_t to_half(float f, DType t) { return t == DType::f16 ? ref_f16(f) : ref_bf16(f); }

TEST(HalfReference, RoundingAgreesWithCoreDtype) {
  std::mt19937 g(7);
  std::normal_distribution<float> d(0.f, 3.f);
  for (int i = 0; i < 20000; ++i) {
    const float x = d(g) * (i % 7 == 0 ? 1e-3f : 1.f);
    ASSERT_EQ(ref_bf16(x), f32_to_bf16(x)) << x;
    ASSERT_EQ(ref_f16(x), f32_to_f16(x)) << x;
  }
}

struct Case {
  int64_t M, N, K;
};

// One level over every dtype combination and layout, against a double-precision reference with
// the f32 accumulation error bound: |got - want| <= (K + 2) * 2^-24 * sum_k |a_k b_k| (+ a denormal floor).
void check_half_level(cpu::HalfIsa isa, bool threaded, const std::vector<Case>& cases, std::mt19937& g) {
  std::normal_distribution<float> d(0.f, 1.f);
  for (DType bt : {DType::bf16, DType::f16})
    for (DType at : {DType::f32, DType::f16, DType::bf16})
      for (bool trans : {true, false})
        for (const auto& c : cases) {
          SCOPED_TRACE(std::string(cpu::half_isa_name(isa)) + (threaded ? "" : " single-threaded") + " A " +
                       dtype_name(at) + " B " + dtype_name(bt) + (trans ? " [N,K]" : " [K,N]") + " M" +
                       std::to_string(c.M) + " N" + std::to_string(c.N) + " K" + std::to_string(c.K));
          const int64_t lda = c.K + 3, ldb = (trans ? c.K : c.N) + 5, ldc = c.N + 2;
          std::vector<float> a32(c.M * lda);
          std::vector<uint16_t> a16(c.M * lda), b((trans ? c.N : c.K) * ldb);
          std::vector<double> av(c.M * lda);
          for (size_t i = 0; i < a32.size(); ++i) {
            const float x = d(g);
            if (at == DType::f32) a32[i] = x, av[i] = x;
            else a16[i] = to_half(x, at), av[i] = half_ref(a16[i], at);
          }
          for (auto& x : b) x = to_half(d(g), bt);
          std::vector<float> C(c.M * ldc, -99.f);
          cpu::half_gemm(c.M, c.N, c.K, at == DType::f32 ? (const void*)a32.data() : (const void*)a16.data(), at,
                         lda, b.data(), bt, ldb, trans, C.data(), ldc, isa, threaded);
          for (int64_t m = 0; m < c.M; ++m)
            for (int64_t n = 0; n < c.N; ++n) {
              double want = 0, mag = 0;
              for (int64_t k = 0; k < c.K; ++k) {
                const double p = av[m * lda + k] * half_ref(b[trans ? n * ldb + k : k * ldb + n], bt);
                want += p;
                mag += std::fabs(p);
              }
              const double tol = (c.K + 2) * std::ldexp(1.0, -24) * mag + 1e-30;
              ASSERT_NEAR(C[m * ldc + n], want, tol) << "m " << m << " n " << n;
            }
          for (int64_t m = 0; m < c.M; ++m)  // the padding between rows is untouched
            for (int64_t n = c.N; n < ldc; ++n) ASSERT_EQ(C[m * ldc + n], -99.f);
        }
}

// Every level this CPU has.
TEST(HalfGemm, EveryLevelMatchesTheReferenceLoop) {
  std::mt19937 g(11);
  const std::vector<Case> cases = {{1, 1, 1}, {1, 37, 100}, {1, 200, 1024}, {3, 9, 33}, {5, 70, 64},
                                   {17, 33, 15}, {8, 64, 257}, {2, 5, 31},
                                   // M > 16, bf16 x bf16: oneDNN (several column slices and a shorter last one)
                                   {40, 1100, 96}, {33, 600, 70}};
  int levels = 0;
  for (auto isa : {cpu::HalfIsa::Plain, cpu::HalfIsa::F16C, cpu::HalfIsa::Avx512Bf16}) {
    if (!cpu::half_isa_supported(isa)) continue;
    ++levels;
    check_half_level(isa, true, cases, g);
  }
  EXPECT_GE(levels, 1);
  // This project's machines have AVX512_BF16 (see docs/benchmarks.md): say so when one does not.
  if (!cpu::half_isa_supported(cpu::HalfIsa::Avx512Bf16))
    std::printf("note: this CPU lacks AVX512_BF16; tested levels up to %s\n", cpu::half_isa_name(cpu::half_isa_best()));
}

// On the calling thread alone (attention's products: its tasks are the parallel unit), where
// bf16 x bf16 of more than 16 rows stays in rlx's own kernels (no oneDNN).
TEST(HalfGemm, SingleThreadedMatchesTheReferenceLoop) {
  std::mt19937 g(12);
  const std::vector<Case> cases = {{1, 37, 100}, {8, 257, 33}, {8, 21, 37}, {24, 64, 257}, {40, 300, 96}};
  for (auto isa : {cpu::HalfIsa::Plain, cpu::HalfIsa::F16C, cpu::HalfIsa::Avx512Bf16})
    if (cpu::half_isa_supported(isa)) check_half_level(isa, false, cases, g);
}

TEST(HalfGemm, KZeroGivesZeros) {
  std::vector<float> C(6, 5.f);
  std::vector<uint16_t> b(1);
  float a = 0;
  cpu::half_gemm(2, 3, 0, &a, DType::f32, 0, b.data(), DType::bf16, 0, true, C.data(), 3);
  for (float v : C) EXPECT_EQ(v, 0.f);
}

// ------------------------------------------------------------ executor level

std::shared_ptr<ir::Graph> graph_of(const std::string& nodes, const std::string& outputs) {
  return std::make_shared<ir::Graph>(ir::load_graph_text(
      R"({"format": "rlx.graph", "version": 1, "nodes": [)" + nodes + R"(], "outputs": )" + outputs + "}", "t.json"));
}

TEST(HostBuffers, CpuWrapsHostMemoryWithoutCopying) {
  auto ex = make_executor("cpu");
  Tensor w = Tensor::from_vector({4}, {1.f, -2.f, 3.5f, 0.25f}, DType::bf16);
  auto buf = ex->wrap_host(w.raw(), w.nbytes(), DType::bf16, w.keepalive());
  ASSERT_NE(buf, nullptr);
  EXPECT_EQ(buf->capacity, 8u);  // 2 bytes per element: the tensor's own bytes, not a widened copy
  // Reads go to the tensor's memory: a later change of the tensor's bytes is seen.
  Tensor w2 = w;
  uint16_t v = f32_to_bf16(7.f);
  std::memcpy(const_cast<void*>(w2.raw()), &v, 2);
  uint16_t back[4];
  ex->download(*buf, 0, back, 8, DType::bf16);
  EXPECT_EQ(bf16_to_f32(back[0]), 7.f);
  EXPECT_EQ(bf16_to_f32(back[3]), 0.25f);
}

// A bf16-weight linear (f32 activations, bf16 result) in every mode: f32 accumulation of the
// exact products, one rounding into bf16. Reference: a double loop here, rounded with ref_bf16.
TEST(HalfExecutor, Bf16WeightsWithF32ActivationsInEveryMode) {
  const int64_t In = 40, Out = 24, S = 3;
  auto g = graph_of(R"({"id": "x", "op": "input", "shape": [1, 3, 40]},
      {"id": "w", "op": "param", "shape": [24, 40], "dtype": "bf16"},
      {"id": "b", "op": "param", "shape": [24], "dtype": "bf16"},
      {"id": "y", "op": "linear", "inputs": ["x", "w", "b"]},
      {"id": "yb", "op": "cast", "inputs": ["y"], "attrs": {"dtype": "bf16"}})",
                    R"(["y", "yb"])");
  std::mt19937 gen(3);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(S * In), wf(Out * In), bf(Out);
  for (auto& v : x) v = d(gen);
  for (auto& v : wf) v = ref_bf16_value(ref_bf16(d(gen)));
  for (auto& v : bf) v = ref_bf16_value(ref_bf16(d(gen)));
  std::map<std::string, Tensor> params = {{"w", Tensor::from_vector({Out, In}, wf, DType::bf16)},
                                          {"b", Tensor::from_vector({Out}, bf, DType::bf16)}};
  auto ex = make_executor("cpu");
  for (Mode m : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {
    SCOPED_TRACE(mode_name(m));
    Session s(g, *ex, params);
    s.set_input("x", Tensor::from_vector({1, S, In}, x));
    auto outs = s.run(m);
    ASSERT_EQ(outs[0].dtype(), DType::f32);
    ASSERT_EQ(outs[1].dtype(), DType::bf16);
    EXPECT_EQ(outs[1].nbytes(), (size_t)(S * Out * 2));
    for (int64_t r = 0; r < S; ++r)
      for (int64_t o = 0; o < Out; ++o) {
        double want = bf[o], mag = std::fabs(bf[o]);
        for (int64_t k = 0; k < In; ++k) {
          want += (double)x[r * In + k] * wf[o * In + k];
          mag += std::fabs((double)x[r * In + k] * wf[o * In + k]);
        }
        const double got = outs[0].at(r * Out + o);
        EXPECT_NEAR(got, want, (In + 3) * std::ldexp(1.0, -24) * mag) << r << "," << o;
        // The bf16 result is the f32 result rounded once (to nearest even).
        EXPECT_EQ(outs[1].data<uint16_t>()[r * Out + o], ref_bf16((float)got)) << r << "," << o;
      }
  }
}

// Integers are exact in their own width: i64 beyond 2^53, two's complement wrap-around.
TEST(IntegerStorage, I64ArithmeticIsExactBeyondFloatRange) {
  auto g = graph_of(R"({"id": "a", "op": "input", "shape": [4], "dtype": "i64"},
      {"id": "b", "op": "input", "shape": [4], "dtype": "i64"},
      {"id": "s", "op": "add", "inputs": ["a", "b"]},
      {"id": "p", "op": "mul", "inputs": ["a", "b"]},
      {"id": "q", "op": "sub", "inputs": ["b", "a"]})",
                    R"(["s", "p", "q"])");
  const std::vector<int64_t> a = {(INT64_C(1) << 60) + 1, -7, INT64_MAX, 16777217};
  const std::vector<int64_t> b = {3, 2, 1, 16777219};
  auto ex = make_executor("cpu");
  for (Mode m : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {
    SCOPED_TRACE(mode_name(m));
    Session s(g, *ex, {});
    s.set_input("a", Tensor::from_ints({4}, a));
    s.set_input("b", Tensor::from_ints({4}, b));
    auto outs = s.run(m);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(outs[0].data<int64_t>()[i], (int64_t)((uint64_t)a[i] + (uint64_t)b[i])) << i;
      EXPECT_EQ(outs[1].data<int64_t>()[i], (int64_t)((uint64_t)a[i] * (uint64_t)b[i])) << i;
      EXPECT_EQ(outs[2].data<int64_t>()[i], (int64_t)((uint64_t)b[i] - (uint64_t)a[i])) << i;
    }
  }
}

TEST(IntegerStorage, EmbeddingTakesI64IndicesBeyond2To24) {
  const int64_t V = (1 << 24) + 3, D = 1;  // 16.8M rows of one f16 element: 32 MiB
  auto g = graph_of(R"({"id": "t", "op": "param", "shape": [16777219, 1], "dtype": "f16"},
      {"id": "i", "op": "input", "shape": [3], "dtype": "i64"},
      {"id": "e", "op": "embedding", "inputs": ["t", "i"]})",
                    R"(["e"])");
  Tensor table({V, D}, DType::f16);
  auto* p = table.mutable_data<uint16_t>();
  p[16777216] = f32_to_f16(1.f);  // 2^24 and 2^24 + 1 are the same f32: not the same index
  p[16777217] = f32_to_f16(2.f);
  p[16777218] = f32_to_f16(3.f);
  auto ex = make_executor("cpu");
  Session s(g, *ex, {{"t", table}});
  s.set_input("i", Tensor::from_ints({3}, {16777217, 16777216, 16777218}));
  auto out = s.run(Mode::Eager)[0];
  ASSERT_EQ(out.dtype(), DType::f16);
  EXPECT_EQ(out.to_vector(), (std::vector<float>{2.f, 1.f, 3.f}));
}

TEST(BoolStorage, OneBytePerElement) {
  Tensor t = Tensor::from_vector({5}, {1.f, 0.f, -2.f, NAN, 0.f}, DType::boolean);
  EXPECT_EQ(t.nbytes(), 5u);
  const uint8_t* b = t.data<uint8_t>();
  EXPECT_EQ(std::vector<int>(b, b + 5), (std::vector<int>{1, 0, 1, 1, 0}));
}

}  // namespace

// ------------------------------------------------------------ command line

namespace {

std::string tmpdir() {
  auto d = std::filesystem::temp_directory_path() / ("rlx_storage_" + std::to_string(getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

std::string slurp_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// --output writes the node's dtype: bf16 as '<f4' holding the bf16 numbers (NumPy has no
// bfloat16), f16 as '<f2'; safetensors keeps BF16 / F16. Expected values: the NumPy reference.
TEST(HalfCli, OutputWritesTheNodesDtype) {
  const std::string d = tmpdir();
  const std::string g = rlx::test::src("graphs/llama_block_bf16.json");
  auto r = rlx::test::run_rlx("run '" + g + "' -p '" + rlx::test::src("graphs/llama_block_bf16.safetensors") +
                              "' -i x=@'" + rlx::test::src("graphs/llama_block_bf16.inputs/x.npy") +
                              "' --output mlp_residual='" + d + "/b.npy' --output mlp_residual='" + d + "/b.safetensors'");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string npy = slurp_file(d + "/b.npy");
  EXPECT_NE(npy.find("'descr': '<f4'"), std::string::npos);
  Tensor got = io::read_npy(d + "/b.npy");
  ASSERT_EQ(got.dtype(), DType::f32);
  for (int64_t i = 0; i < got.numel(); ++i) {  // every value is a bf16 number
    const float v = got.data()[i];
    ASSERT_EQ(bf16_to_f32(f32_to_bf16(v)), v) << i;
  }
  Tensor want = io::read_npy(rlx::test::src("tests/golden/example_llama_block_bf16/expected_mlp_residual.npy"));
  ASSERT_EQ(want.shape(), got.shape());
  for (int64_t i = 0; i < got.numel(); ++i)  // the golden tolerance (docs/goldens.md, half_chain_bf16)
    ASSERT_NEAR(got.data()[i], want.data()[i], 0.046875 * (1 + std::fabs(want.data()[i]))) << i;
  auto st = io::SafetensorsFile::open(d + "/b.safetensors");
  EXPECT_EQ(st.info("mlp_residual").dtype, DType::bf16);
  EXPECT_EQ(st.get("mlp_residual").to_vector(), got.to_vector());

  const std::string c = rlx::test::src("tests/golden/op_linear_f16/");
  r = rlx::test::run_rlx("run '" + c + "graph.json' -p '" + c + "params.safetensors' -i x=@'" + c +
                         "x.npy' --output y='" + d + "/h.npy' --output y='" + d + "/h.safetensors'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(slurp_file(d + "/h.npy").find("'descr': '<f2'"), std::string::npos);
  Tensor h = io::read_npy(d + "/h.npy");
  EXPECT_EQ(h.dtype(), DType::f16);
  EXPECT_EQ(io::SafetensorsFile::open(d + "/h.safetensors").info("y").dtype, DType::f16);
  std::filesystem::remove_all(d);
}

// --dtype bf16 runs an f32 graph in bf16: outputs are bf16 and within bf16 precision of the
// NumPy reference of the f32 graph (3 roundings of inputs/weights and 3 computing stages: 8 * 2^-8).
TEST(HalfCli, DtypeBf16RunsAnF32GraphInHalfPrecision) {
  const std::string c = rlx::test::src("tests/golden/example_mlp/");
  auto r = rlx::test::run_rlx("run '" + rlx::test::src("graphs/mlp.json") + "' -p '" +
                              rlx::test::src("graphs/mlp.safetensors") + "' -i x=@'" +
                              rlx::test::src("graphs/mlp.inputs/x.npy") + "' --dtype bf16 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["outputs"][0]["dtype"], "bf16");
  Tensor want = io::read_npy(c + "expected_y.npy");
  const auto& v = j["outputs"][0]["values"];
  ASSERT_EQ((int64_t)v.size(), want.numel());
  for (int64_t i = 0; i < want.numel(); ++i) {
    const float got = v[i].get<float>();
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(got)), got) << i;
    EXPECT_NEAR(got, want.data()[i], 8 * std::ldexp(1.0, -8) * (1 + std::fabs(want.data()[i]))) << i;
  }
  // compare: the reference runs the graph as declared; a bf16-sized tolerance passes, 1e-6 does not.
  const std::string args = "compare '" + rlx::test::src("graphs/mlp.json") + "' -p '" +
                           rlx::test::src("graphs/mlp.safetensors") + "' -i x=@'" +
                           rlx::test::src("graphs/mlp.inputs/x.npy") + "' --dtype bf16";
  r = rlx::test::run_rlx(args + " --atol 0.03 --rtol 0.03");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("reference runs the graph as declared"), std::string::npos) << r.out;
  r = rlx::test::run_rlx(args + " --atol 1e-6 --rtol 1e-6");
  EXPECT_NE(r.code, 0) << r.out;
  r = rlx::test::run_rlx("run '" + rlx::test::src("graphs/mlp.json") + "' --random-params -i x=random --dim batch=2 --dtype i32");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--dtype i32: expected bf16, f16 or f32"), std::string::npos) << r.out;
}

// inspect: the parameters' bytes per dtype, counted here from the graph's param shapes.
TEST(HalfCli, InspectReportsBytesPerDtype) {
  auto r = rlx::test::run_rlx("inspect '" + rlx::test::src("graphs/decode_step_bf16.json") + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  auto g = nlohmann::json::parse(slurp_file(rlx::test::src("graphs/decode_step_bf16.json")));
  int64_t values = 0;
  for (const auto& n : g["nodes"])
    if (n["op"] == "param") {
      int64_t k = 1;
      for (const auto& d : n["shape"]) k *= d.get<int64_t>();
      values += k;
    }
  const std::string line = "  bf16  " + std::to_string(values) + " values, " + std::to_string(2 * values) + " bytes";
  EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  EXPECT_NE(r.out.find("computed values by dtype"), std::string::npos) << r.out;
}

}  // namespace
