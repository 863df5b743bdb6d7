// Google Benchmark micro-benchmarks of the CPU executor's hot kernels, called the
// way the executor calls them (no graph, no session):
//   FusedGelu       the GELU chain's fused program through rlx::cpu::run_fused
//   Softmax/RmsNorm row kernels over [rows, D]
//   Linear          the sgemm wrapper (x · wᵀ), and raw cblas_sgemm beside it
//   Attention       GQA causal attention, prefill (seq 256) and one decode step
//
//   build-bench/bench/micro_kernels                        # all
//   build-bench/bench/micro_kernels --benchmark_filter=Gelu
//   RLX_CPU_ISA=base build-bench/bench/micro_kernels ...   # the baseline (non-AVX2) loops
// Threads: RLX_NUM_THREADS (rlx's pool) and OPENBLAS_NUM_THREADS, as for rlx.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <memory>
#include <random>
#include <vector>

#include "backends/cpu/cpu_executor.h"
#include "ir/elementwise.h"
#include "ir/graph.h"
#include "runtime/executor.h"

using namespace rlx;

namespace {

Executor& cpu() {
  static auto ex = make_executor("cpu");
  return *ex;
}

struct Buf {
  std::unique_ptr<DeviceBuffer> buf;
  TensorRef ref;
};

Buf make(const Shape& s, uint32_t seed) {
  Buf b;
  int64_t n = shape_numel(s);
  b.buf = cpu().allocate(n * 4);
  std::vector<float> v(n);
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  for (auto& x : v) x = d(g);
  cpu().upload(*b.buf, 0, v.data(), n * 4, DType::f32);
  b.ref = {b.buf.get(), 0, s, DType::f32};
  return b;
}

// What passes::optimize makes of the GELU chain (mul, erf, add, mul, mul).
FusedProgram gelu_program(int64_t n) {
  FusedProgram p;
  p.out_shape = {n};
  p.input_shapes = {{n}};
  p.code = {
      {FusedInstr::Load, EwOp::Add, 0},
      {FusedInstr::Const, EwOp::Add, 0, 0, 0.7071067811865476f},
      {FusedInstr::Binary, EwOp::Mul, 0, 1},
      {FusedInstr::Unary, EwOp::Erf, 2},
      {FusedInstr::Const, EwOp::Add, 0, 0, 1.f},
      {FusedInstr::Binary, EwOp::Add, 3, 4},
      {FusedInstr::Binary, EwOp::Mul, 5, 0},
      {FusedInstr::Const, EwOp::Add, 0, 0, 0.5f},
      {FusedInstr::Binary, EwOp::Mul, 6, 7},
  };
  p.result = 8;
  return p;
}

void BM_FusedGelu(benchmark::State& st) {
  const int64_t n = st.range(0);
  FusedProgram p = gelu_program(n);
  std::vector<float> x(n), y(n);
  std::mt19937 g(1);
  std::normal_distribution<float> d(0.f, 1.f);
  for (auto& v : x) v = d(g);
  std::vector<const float*> ins{x.data()};
  for (auto _ : st) {
    cpu::run_fused(p, ins, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(st.iterations() * n * 8);
  st.SetItemsProcessed(st.iterations() * n);
  st.SetLabel(cpu::fused_isa());
}
BENCHMARK(BM_FusedGelu)->Arg(1 << 16)->Arg(1 << 20)->Arg(4 * 1000 * 4096)->Unit(benchmark::kMicrosecond)->UseRealTime();

// A single elementwise node (what eager mode runs per op): y = x * 0.5.
void BM_MulScalar(benchmark::State& st) {
  const int64_t n = st.range(0);
  FusedProgram p;
  p.out_shape = {n};
  p.input_shapes = {{n}, {}};
  p.code = {{FusedInstr::Load, EwOp::Add, 0}, {FusedInstr::Load, EwOp::Add, 1}, {FusedInstr::Binary, EwOp::Mul, 0, 1}};
  p.result = 2;
  std::vector<float> x(n, 1.f), y(n), half{0.5f};
  std::vector<const float*> ins{x.data(), half.data()};
  for (auto _ : st) {
    cpu::run_fused(p, ins, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(st.iterations() * n * 8);
}
BENCHMARK(BM_MulScalar)->Arg(1 << 20)->Arg(4 * 1000 * 4096)->Unit(benchmark::kMicrosecond)->UseRealTime();

void run_node(benchmark::State& st, ir::Node& node, std::vector<Buf>& ins, const Shape& out_shape, double bytes,
              double flops) {
  Buf out = make(out_shape, 99);
  Kernel k;
  k.node = &node;
  for (auto& b : ins) k.inputs.push_back(b.ref);
  k.output = out.ref;
  k.label = node.id;
  for (auto _ : st) {
    cpu().launch(k);
    cpu().flush();
  }
  if (bytes > 0) st.SetBytesProcessed((int64_t)(st.iterations() * bytes));
  if (flops > 0) st.counters["GFLOP/s"] = benchmark::Counter(st.iterations() * flops / 1e9, benchmark::Counter::kIsRate);
}

void BM_Softmax(benchmark::State& st) {
  const int64_t rows = st.range(0), D = st.range(1);
  ir::Node node;
  node.id = "softmax";
  node.op = ir::Op::Softmax;
  node.attrs.values["axis"] = int64_t(-1);
  std::vector<Buf> ins;
  ins.push_back(make({rows, D}, 1));
  run_node(st, node, ins, {rows, D}, rows * D * 8.0, 0);
}
BENCHMARK(BM_Softmax)->Args({4096, 257})->Args({256, 4096})->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_RmsNorm(benchmark::State& st) {
  const int64_t rows = st.range(0), D = st.range(1);
  ir::Node node;
  node.id = "rms_norm";
  node.op = ir::Op::RmsNorm;
  node.attrs.values["eps"] = 1e-5;
  std::vector<Buf> ins;
  ins.push_back(make({rows, D}, 1));
  ins.push_back(make({D}, 2));
  run_node(st, node, ins, {rows, D}, rows * D * 8.0, 0);
}
BENCHMARK(BM_RmsNorm)->Args({256, 1024})->Args({1, 1024})->Unit(benchmark::kMicrosecond)->UseRealTime();

// linear: x [M, K] · w [N, K]ᵀ through the executor (the sgemm wrapper).
void BM_Linear(benchmark::State& st) {
  const int64_t M = st.range(0), K = st.range(1), N = st.range(2);
  ir::Node node;
  node.id = "linear";
  node.op = ir::Op::Linear;
  std::vector<Buf> ins;
  ins.push_back(make({M, K}, 1));
  ins.push_back(make({N, K}, 2));
  run_node(st, node, ins, {M, N}, (M * K + N * K + M * N) * 4.0, 2.0 * M * N * K);
}
BENCHMARK(BM_Linear)
    ->Args({256, 1024, 1024})
    ->Args({256, 1024, 2816})
    ->Args({256, 2816, 1024})
    ->Args({1, 1024, 2816})
    ->Args({1, 2816, 1024})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// matmul node vs raw cblas_sgemm on the same square matrices.
void BM_MatmulNode(benchmark::State& st) {
  const int64_t n = st.range(0);
  ir::Node node;
  node.id = "matmul";
  node.op = ir::Op::Matmul;
  node.attrs.values["transpose_a"] = false;
  node.attrs.values["transpose_b"] = false;
  std::vector<Buf> ins;
  ins.push_back(make({n, n}, 1));
  ins.push_back(make({n, n}, 2));
  run_node(st, node, ins, {n, n}, 0, 2.0 * n * n * n);
}
BENCHMARK(BM_MatmulNode)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_RawSgemm(benchmark::State& st) {
  const int n = (int)st.range(0);
  std::vector<float> a((size_t)n * n, 0.5f), b((size_t)n * n, 0.25f), c((size_t)n * n);
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(st.iterations() * 2.0 * n * n * n / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_RawSgemm)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

// attention: q [1, 16, Sq, 64], k/v [1, 4, Sk, 64], causal.
void BM_Attention(benchmark::State& st) {
  const int64_t Sq = st.range(0), Sk = st.range(1);
  ir::Node node;
  node.id = "attention";
  node.op = ir::Op::Attention;
  node.attrs.values["causal"] = true;
  std::vector<Buf> ins;
  ins.push_back(make({1, 16, Sq, 64}, 1));
  ins.push_back(make({1, 4, Sk, 64}, 2));
  ins.push_back(make({1, 4, Sk, 64}, 3));
  run_node(st, node, ins, {1, 16, Sq, 64}, 0, 4.0 * 16 * Sq * Sk * 64);
}
BENCHMARK(BM_Attention)->Args({256, 256})->Args({1, 257})->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
