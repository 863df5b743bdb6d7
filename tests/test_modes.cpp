// Execution modes: distinct behaviour (compile cache, fusion, memory reuse, per-node
// errors), same answers, and the mode switch (RLX_MLX_MODE, --mode). Expected
// values here come from plain loops written in the test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "ir/loader.h"
#include "io/npy.h"
#include "ir/op_registry.h"
#include "passes/passes.h"
#include "runtime/runner.h"
#include "runtime/session.h"
#include "test_util.h"

using namespace rlx;

namespace {

std::shared_ptr<ir::Graph> graph_text(const std::string& nodes, const std::string& outputs) {
  return std::make_shared<ir::Graph>(ir::load_graph_text(
      R"({"format": "rlx.graph", "version": 1, "nodes": [)" + nodes + R"(], "outputs": )" + outputs + "}", "t.json"));
}

std::string write_temp(const std::string& name, const std::string& text) {
  auto dir = std::filesystem::temp_directory_path() / ("rlx_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string p = (dir / name).string();
  std::ofstream(p) << text;
  return p;
}

Tensor ramp(Shape s, float scale = 0.01f, float shift = 0.f) {
  Tensor t(s);
  float* d = t.mutable_data();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = std::sin(i * 0.37f) * 3.f * scale * 100 + shift;
  return t;
}

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

Loaded load_example(const std::string& name) {
  Binding b;
  b.graph = test::src("graphs/" + name + ".json");
  if (std::filesystem::exists(test::src("graphs/" + name + ".safetensors")))
    b.params = {test::src("graphs/" + name + ".safetensors")};
  for (const auto& e : std::filesystem::directory_iterator(test::src("graphs/" + name + ".inputs")))
    b.inputs.push_back(e.path().stem().string() + "=@" + e.path().string());
  return load_binding(b);
}

TEST(ModeSwitch, ParsesCaseInsensitivelyAndRejectsUnknown) {
  EXPECT_EQ(parse_mode("EAGER"), Mode::Eager);
  EXPECT_EQ(parse_mode("Compiled"), Mode::Compiled);
  EXPECT_EQ(parse_mode("lazy"), Mode::Lazy);
  try {
    parse_mode("fast");
    FAIL();
  } catch (const InputError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("eager, lazy, compiled"), std::string::npos) << m;
  }
}

TEST(ModeSwitch, EnvSelectsDefaultLazyAndFlagOverrides) {
  std::string args = "run '" + test::src("graphs/mlp.json") + "' --params '" + test::src("graphs/mlp.safetensors") +
                     "' --input x=random:1 --dim batch=3";
  auto r = test::run_rlx(args, "env -u RLX_MLX_MODE");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("lazy mode"), std::string::npos) << r.out;
  r = test::run_rlx(args, "RLX_MLX_MODE=Eager");
  EXPECT_NE(r.out.find("eager mode"), std::string::npos) << r.out;
  r = test::run_rlx(args + " --mode compiled", "RLX_MLX_MODE=eager");
  EXPECT_NE(r.out.find("compiled mode"), std::string::npos) << r.out;
  r = test::run_rlx(args, "RLX_MLX_MODE=turbo");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("eager, lazy, compiled"), std::string::npos) << r.out;
  r = test::run_rlx(args + " --mode compiled", "RLX_DISABLE_COMPILE=1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("RLX_DISABLE_COMPILE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lazy mode"), std::string::npos) << r.out;
}

TEST(Compiled, CacheHitsOnSameShapesAndRecompilesOnNewOnes) {
  Loaded L = load_example("gelu_chain");
  auto ex = make_executor("cpu");
  Session s(L.graph, *ex, L.params);
  s.set_input("x", ramp({4, 8, 64}));
  s.run(Mode::Compiled);
  EXPECT_TRUE(s.last_stats().compiled);
  s.run(Mode::Compiled);
  EXPECT_FALSE(s.last_stats().compiled);
  EXPECT_EQ(s.compile_count(), 1);
  s.set_input("x", ramp({4, 9, 64}));
  s.run(Mode::Compiled);
  EXPECT_EQ(s.compile_count(), 2);
  EXPECT_NE(s.last_stats().compile_reason.find("'x'"), std::string::npos) << s.last_stats().compile_reason;
  EXPECT_NE(s.last_stats().compile_reason.find("[4, 8, 64]"), std::string::npos) << s.last_stats().compile_reason;
  EXPECT_NE(s.last_stats().compile_reason.find("[4, 9, 64]"), std::string::npos) << s.last_stats().compile_reason;
  s.set_input("x", ramp({4, 8, 64}));
  s.run(Mode::Compiled);
  EXPECT_EQ(s.compile_count(), 2);  // the first plan is still cached
  // Lazy and eager never compile.
  s.run(Mode::Lazy);
  s.run(Mode::Eager);
  EXPECT_EQ(s.compile_count(), 2);
}

TEST(Compiled, GeluChainFusesIntoOneKernelAndMatchesReference) {
  Loaded L = load_example("gelu_chain");
  auto ex = make_executor("cpu");
  Session s(L.graph, *ex, L.params);
  Tensor x = ramp({4, 8, 64});
  s.set_input("x", x);
  auto out = s.run(Mode::Compiled);
  EXPECT_EQ(s.last_stats().kernels, 1);
  EXPECT_NE(s.plan_text().find("fused"), std::string::npos) << s.plan_text();
  EXPECT_EQ(s.last_stats().nodes, 5);
  for (int64_t i = 0; i < x.numel(); ++i)
    ASSERT_NEAR(out[0].data()[i], gelu_ref(x.data()[i]), 1e-5 + 1e-5 * std::fabs(gelu_ref(x.data()[i]))) << i;
  s.run(Mode::Lazy);
  EXPECT_EQ(s.last_stats().kernels, 5);
  s.run(Mode::Eager);
  EXPECT_EQ(s.last_stats().kernels, 5);
}

TEST(Compiled, DecoderBlockHasFewerKernelsThanNodes) {
  Loaded L = load_example("llama_block");
  auto ex = make_executor("cpu");
  Session s(L.graph, *ex, L.params);
  for (const auto& [id, t] : L.inputs) s.set_input(id, t);
  auto lazy = s.run(Mode::Lazy);
  int lazy_kernels = s.last_stats().kernels;
  auto comp = s.run(Mode::Compiled);
  int comp_kernels = s.last_stats().kernels;
  EXPECT_LT(comp_kernels, s.last_stats().nodes);
  EXPECT_LT(comp_kernels, lazy_kernels);
  for (size_t k = 0; k < lazy.size(); ++k) EXPECT_TRUE(compare_tensors(comp[k], lazy[k], 1e-5, 1e-5).ok());
}

TEST(Lazy, ReusesMemoryByLiveness) {
  Loaded L = load_example("llama_block");
  auto ex = make_executor("cpu");
  Session s(L.graph, *ex, L.params);
  for (const auto& [id, t] : L.inputs) s.set_input(id, t);
  s.run(Mode::Lazy);
  EXPECT_GT(s.last_stats().arena_bytes, 0);
  EXPECT_LT(s.last_stats().arena_bytes, s.last_stats().unplanned_bytes);
}

TEST(Passes, CseFoldingSimplificationAndParamsNeverMerged) {
  auto g = graph_text(R"(
    {"id": "x", "op": "input", "shape": [4]},
    {"id": "w1", "op": "param", "shape": [4]},
    {"id": "w2", "op": "param", "shape": [4]},
    {"id": "c1", "op": "constant", "shape": [], "value": 2.0},
    {"id": "c2", "op": "constant", "shape": [], "value": 3.0},
    {"id": "one", "op": "constant", "shape": [], "value": 1.0},
    {"id": "cc", "op": "mul", "inputs": ["c1", "c2"]},
    {"id": "a", "op": "mul", "inputs": ["x", "w1"]},
    {"id": "b", "op": "mul", "inputs": ["x", "w1"]},
    {"id": "d", "op": "mul", "inputs": ["x", "w2"]},
    {"id": "s", "op": "add", "inputs": ["a", "b"]},
    {"id": "t", "op": "add", "inputs": ["s", "d"]},
    {"id": "u", "op": "mul", "inputs": ["t", "one"]},
    {"id": "y", "op": "mul", "inputs": ["u", "cc"]})", R"(["y"])");
  auto ts = ir::infer_shapes(*g, {{"x", {4}}});
  auto og = passes::optimize(*g, ts);
  EXPECT_EQ(og.stats.cse_merged, 1);  // b == a; w1 and w2 are never merged
  EXPECT_GE(og.stats.folded, 1);      // cc = c1 * c2
  EXPECT_GE(og.stats.simplified, 1);  // u = t * 1
  EXPECT_NE(og.graph.find("w1"), -1);
  EXPECT_NE(og.graph.find("w2"), -1);
  // And the answer is unchanged: y = (2 x w1 + x w2) * 6.
  auto ex = make_executor("cpu");
  std::map<std::string, Tensor> params{{"w1", Tensor::from_vector({4}, {1, 2, 3, 4})},
                                       {"w2", Tensor::from_vector({4}, {-1, 0.5f, 2, 0})}};
  Session s(g, *ex, params);
  s.set_input("x", Tensor::from_vector({4}, {1, -2, 0.5f, 3}));
  auto y = s.run(Mode::Compiled)[0];
  float x[4] = {1, -2, 0.5f, 3}, w1[4] = {1, 2, 3, 4}, w2[4] = {-1, 0.5f, 2, 0};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(y.data()[i], (2 * x[i] * w1[i] + x[i] * w2[i]) * 6);
}

TEST(Eager, ErrorsSurfaceAtTheOffendingNode) {
  auto g = graph_text(R"(
    {"id": "ids", "op": "input", "shape": [3], "dtype": "i32"},
    {"id": "table", "op": "param", "shape": [4, 2]},
    {"id": "e", "op": "embedding", "inputs": ["table", "ids"]},
    {"id": "y", "op": "neg", "inputs": ["e"]})", R"(["y"])");
  auto ex = make_executor("cpu");
  Session s(g, *ex, {{"table", Tensor({4, 2})}});
  s.set_input("ids", Tensor::from_vector({3}, {0, 7, 1}, DType::i32));
  for (Mode m : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {
    try {
      s.run(m);
      FAIL() << mode_name(m);
    } catch (const RuntimeError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("'e'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("7"), std::string::npos) << msg;
    }
  }
}

TEST(Eager, CheckNumericsNamesTheFirstBadNode) {
  std::string path = write_temp("nan.json", R"({"format": "rlx.graph", "version": 1, "nodes": [
    {"id": "x", "op": "input", "shape": [3]},
    {"id": "l", "op": "log", "inputs": ["x"]},
    {"id": "y", "op": "exp", "inputs": ["l"]}], "outputs": ["y"]})");
  auto r = test::run_rlx("run '" + path + "' --input x=3xf32=1,-1,2 --mode eager --check-numerics");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("node 'l' (log)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NaN"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[3]"), std::string::npos) << r.out;  // input shapes
}

TEST(Steps, FeedCarriesOutputsIntoInputsOnTheDevice) {
  // y = x * 2 + offset_as_float; next_offset = offset + 1.
  auto g = graph_text(R"(
    {"id": "x", "op": "input", "shape": [3]},
    {"id": "off", "op": "input", "shape": [], "dtype": "i32"},
    {"id": "two", "op": "constant", "shape": [], "value": 2},
    {"id": "one", "op": "constant", "shape": [], "value": 1, "dtype": "i32"},
    {"id": "next_off", "op": "add", "inputs": ["off", "one"]},
    {"id": "offf", "op": "cast", "inputs": ["off"], "attrs": {"dtype": "f32"}},
    {"id": "x2", "op": "mul", "inputs": ["x", "two"]},
    {"id": "y", "op": "add", "inputs": ["x2", "offf"]})", R"(["y", "next_off"])");
  auto ex = make_executor("cpu");
  for (Mode m : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {
    Session s(g, *ex, {});
    s.set_input("x", Tensor::from_vector({3}, {1, 2, 3}));
    s.set_input("off", Tensor::from_vector({}, {0}, DType::i32));
    std::vector<double> ref = {1, 2, 3};
    std::vector<Tensor> outs;
    for (int step = 0; step < 4; ++step) {
      if (step) {
        s.feed("y", "x");
        s.feed("next_off", "off");
      }
      outs = s.run(m);
      for (auto& v : ref) v = v * 2 + step;
    }
    for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(outs[0].data()[i], ref[i]) << mode_name(m);
    EXPECT_EQ(outs[1].dtype(), DType::i32);
    EXPECT_EQ(outs[1].data<int32_t>()[0], 4);
    if (m == Mode::Compiled) EXPECT_EQ(s.compile_count(), 1);
  }
}

TEST(Cli, DumpPlanShowsFusedGroups) {
  auto r = test::run_rlx("run '" + test::src("graphs/gelu_chain.json") + "' --input x=random:3 --dim n=5 --mode compiled --dump-plan");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("fused"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("members: scaled,erf,erf_plus_1,x_times,y"), std::string::npos) << r.out;
}

TEST(Cli, CompareJsonIsParseableAndAgrees) {
  auto r = test::run_rlx("compare '" + test::src("graphs/llama_block.json") + "' --params '" +
                         test::src("graphs/llama_block.safetensors") + "' --input x=@'" +
                         test::src("graphs/llama_block.inputs/x.npy") + "' --backends cpu,vulkan --json 2>/dev/null");
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["reference"], "eager:cpu");
  int ok = 0, skipped = 0;
  for (const auto& e : j["results"]) {
    if (e["status"] == "skipped") {
      skipped++;
      EXPECT_FALSE(e["reason"].get<std::string>().empty());
      continue;
    }
    EXPECT_EQ(e["status"], "ok") << e.dump();
    for (const auto& o : e["outputs"]) EXPECT_GT(o["cosine"].get<double>(), 0.99999);
    ok++;
  }
  EXPECT_GE(ok, 3);
  EXPECT_EQ(ok + skipped, 6);
  EXPECT_EQ(r.code, j["ok"].get<bool>() ? 0 : 1);
}

}  // namespace

namespace {
std::string golden_args(const std::string& c) {
  std::string d = test::src("tests/golden/" + c), a = "run '" + d + "/graph.json' --params '" + d + "/params.safetensors'";
  for (const auto& e : std::filesystem::directory_iterator(d)) {
    std::string stem = e.path().stem().string();
    if (e.path().extension() != ".npy") continue;
    if (stem.rfind("expected_", 0) == 0) a += " --expect " + stem.substr(9) + "=@'" + e.path().string() + "'";
    else a += " --input " + stem + "=@'" + e.path().string() + "'";
  }
  return a + " --atol 1e-4 --rtol 1e-4 --dump-plan";
}
}  // namespace

// The CPU's compiled plans: constant weights packed once (bytes in --dump-plan) and elementwise
// consumers run in the product's epilogue, except where the product's output is needed on its
// own; values against the NumPy references of the golden cases (--expect).
TEST(Compiled, CpuPlanPacksWeightsAndFusesEpilogues) {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  auto r = test::run_rlx(golden_args("gemm_epilogue_mlp_3") + " --mode compiled", "env -u RLX_CPU_ISA");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("epilogue gelu 'g'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epilogue fused[s,y]"), std::string::npos) << r.out;
  if (avx512) {
    // 37 columns -> 3 panels of 16 x 24 floats, and 20 -> 2 panels x 37: (3*16*24 + 2*16*37) * 4 bytes
    EXPECT_NE(r.out.find("2 weights packed (0.009 MiB"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("panels of 16 columns"), std::string::npos) << r.out;
  }
  // 40 rows: OpenBLAS reads the weights in place (RLX_GEMM_DNNL=0), or oneDNN's blocked copies.
  r = test::run_rlx(golden_args("gemm_epilogue_refused_40") + " --mode compiled", "RLX_GEMM_DNNL=0");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("3 read in place (no copy)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("'qq' not in the epilogue: the product's output is a graph output"), std::string::npos) << r.out;
  r = test::run_rlx(golden_args("gemm_epilogue_mlp_40") + " --mode compiled");
  ASSERT_EQ(r.code, 0) << r.out;
  // (with oneDNN: read in place on the first run, packed into its blocked layout before the second)
  EXPECT_TRUE(r.out.find("2 read in place (no copy)") != std::string::npos ||
              r.out.find("2 packed before the second run") != std::string::npos) << r.out;
  // Eager and lazy do neither (and agree with the references too).
  for (const char* m : {"eager", "lazy"}) {
    r = test::run_rlx(golden_args("gemm_epilogue_shared_3") + " --mode " + m);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out.find("cpu recording"), std::string::npos) << r.out;
  }
  // RLX_CPU_PLAIN_PLAN=1 records the plain kernel list (for comparisons).
  r = test::run_rlx(golden_args("gemm_epilogue_shared_3") + " --mode compiled", "RLX_CPU_PLAIN_PLAN=1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("cpu recording"), std::string::npos) << r.out;
}

// A narrow that is one contiguous block of its input (leading axes of extent 1 before the
// narrowed one: q, k and v taken from a [3, ...] tensor) is a view in the input's storage when
// its byte offset keeps the plan's 64-byte alignment: no kernel runs for it. The others (not
// contiguous; contiguous at an unaligned offset) still run. Values against a plain loop, in
// every mode, on the CPU and, where built, on Vulkan.
TEST(Views, ContiguousNarrowsAreViewsAndAgree) {
  auto g = graph_text(R"(
    {"id": "x", "op": "input", "shape": [3, 4, 40]},
    {"id": "u", "op": "input", "shape": [5, 3]},
    {"id": "s", "op": "exp", "inputs": ["x"]},
    {"id": "q", "op": "narrow", "inputs": ["x"], "attrs": {"axis": 0, "start": 1, "length": 1}},
    {"id": "k", "op": "narrow", "inputs": ["s"], "attrs": {"axis": 0, "start": 2, "length": 1}},
    {"id": "qk", "op": "mul", "inputs": ["q", "k"]},
    {"id": "r", "op": "reshape", "inputs": ["k"], "attrs": {"shape": [16, 10]}},
    {"id": "m", "op": "narrow", "inputs": ["r"], "attrs": {"axis": 0, "start": 0, "length": 1}},
    {"id": "c", "op": "narrow", "inputs": ["x"], "attrs": {"axis": 2, "start": 1, "length": 3}},
    {"id": "w", "op": "narrow", "inputs": ["u"], "attrs": {"axis": 0, "start": 1, "length": 2}})",
                      R"(["qk", "q", "m", "c", "w"])");
  Tensor x = ramp({3, 4, 40}), u = ramp({5, 3}, 0.02f);
  auto X = [&](int64_t a, int64_t b, int64_t c) { return (double)x.data()[(a * 4 + b) * 40 + c]; };
  for (const std::string& b : test::built_backends())
    for (Mode mode : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {
      SCOPED_TRACE(b + " " + mode_name(mode));
      auto ex = make_executor(b);
      Session s(g, *ex, {});
      s.set_input("x", x);
      s.set_input("u", u);
      auto out = s.run(mode);
      ASSERT_EQ(out.size(), 5u);
      ASSERT_EQ(out[0].shape(), (Shape{1, 4, 40}));
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 40; ++j) {
          const double qk = X(1, i, j) * std::exp(X(2, i, j));
          ASSERT_NEAR(out[0].data()[i * 40 + j], qk, 1e-5 * (1 + std::fabs(qk))) << i << "," << j;
          ASSERT_EQ(out[1].data()[i * 40 + j], (float)X(1, i, j));
        }
      ASSERT_EQ(out[2].shape(), (Shape{1, 10}));
      for (int64_t j = 0; j < 10; ++j)
        ASSERT_NEAR(out[2].data()[j], std::exp(X(2, 0, j)), 1e-5 * std::exp(X(2, 0, j))) << j;
      ASSERT_EQ(out[3].shape(), (Shape{3, 4, 3}));
      for (int64_t a = 0; a < 3; ++a)
        for (int64_t i = 0; i < 4; ++i)
          for (int64_t j = 0; j < 3; ++j) ASSERT_EQ(out[3].data()[(a * 4 + i) * 3 + j], (float)X(a, i, j + 1));
      ASSERT_EQ(out[4].shape(), (Shape{2, 3}));
      for (int64_t i = 0; i < 6; ++i) ASSERT_EQ(out[4].data()[i], u.data()[3 + i]) << i;
      if (mode == Mode::Eager) continue;  // eager mode prints no per-kernel plan
      // q (640 bytes in), k (1280) and m (0 into k) are views; c (not contiguous) and
      // w (12 bytes in: unaligned) run as narrow kernels
      EXPECT_EQ(s.last_stats().kernels, 4);  // exp, mul, c, w
      const std::string& plan = s.plan_text();
      auto kernel_line = [&](const std::string& id) {
        for (size_t p = plan.find(" " + id + " "); p != std::string::npos; p = plan.find(" " + id + " ", p + 1)) {
          size_t bol = plan.rfind('\n', p) + 1;
          if (plan.compare(bol, 2, "  ") == 0 && plan.find("narrow", bol) < plan.find('\n', p)) return true;
        }
        return false;
      };
      EXPECT_FALSE(kernel_line("q")) << plan;
      EXPECT_FALSE(kernel_line("k")) << plan;
      EXPECT_FALSE(kernel_line("m")) << plan;
      EXPECT_TRUE(kernel_line("c")) << plan;
      EXPECT_TRUE(kernel_line("w")) << plan;
    }
}
