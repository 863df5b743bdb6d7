// gemm_candidates: times the GEMM libraries rlx could use, on rlx's shapes, in one process.
//   gemm_candidates openblas   OpenBLAS loaded with dlopen (so OPENBLAS_CORETYPE set in the
//                              environment by the caller picks its kernel set), cblas_sgemm/sgemv
//   gemm_candidates dnnl       oneDNN (Debian 12's libdnnl 2.6): dnnl_sgemm, and the matmul
//                              primitive with weights reordered once into its blocked format
//   gemm_candidates rlx        rlx's own entry point, rlx::cpu::gemm (lib/backends/cpu/gemm.h):
//                              what the CPU backend runs (OpenBLAS with its kernel set chosen
//                              from the CPU's features, rlx's pool, skinny kernels for M <= 16)
// Shapes: sgemm 2048^3; the decoder block's seven linears x * W^T (M 256, d 1024, kv 256, FFN 2816);
// the same linears at M = 1, 4, 16 (decode), for rlx also with the weights prepacked once
// (cpu::pack_b, what compiled mode does: "_pk": skinny panels for M <= 16, oneDNN's matmul
// primitive inside rlx's pool for M = 256), for OpenBLAS also with W as K x N ("_kn").
//   gemm_candidates bandwidth  streaming reads by rlx's pool: the seven weights (45 MB, the
//                              decode step's working set) and a 1 GiB buffer (memory, no cache)
//   gemm_candidates half_pages the d-2048 decode step's seven linears at M = 1 (bench/graphs/
//                              decode_step_2048.json: 44 M weights) in bf16 (half_gemm, bf16
//                              activations) with the weights on 2 MiB pages (host_alloc) and on
//                              4 KiB pages (plain new[]), and in f32 prepacked (what the f32 step
//                              runs), the three alternating in every rep: what the page size costs
// Threads: RLX_NUM_THREADS (default 2).
// Prints one line per shape: name, median milliseconds over `reps` runs, GFLOP/s, and GB/s of
// weights read (the decode-step figure: M = 1 reads every weight once).
// bench/gemm_candidates.sh runs the variants side by side, alternating, and prints ratios.
#include <dlfcn.h>
#include <immintrin.h>

#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/half_gemm.h"
#include "backends/cpu/host_memory.h"
#include "backends/cpu/thread_pool.h"
#include "stream_read.h"

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
struct Lin { int N, K; };
const Lin kLinears[] = {{1024, 1024}, {256, 1024}, {256, 1024}, {1024, 1024}, {2816, 1024}, {2816, 1024}, {1024, 2816}};

std::vector<float> rnd(size_t n, unsigned seed) {
  std::vector<float> v(n);
  for (auto& x : v) { seed = seed * 1664525u + 1013904223u; x = ((seed >> 9) & 0xffff) / 65536.f - 0.5f; }
  return v;
}


using sgemm_t = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
using sgemv_t = void (*)(int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
}  // namespace

int main(int argc, char** argv) {
  std::string lib = argc > 1 ? argv[1] : "openblas";
  int reps = argc > 2 ? std::atoi(argv[2]) : 7;
  int threads = std::getenv("RLX_NUM_THREADS") ? std::atoi(std::getenv("RLX_NUM_THREADS")) : 2;
  double wbytes = 0;
  for (auto l : kLinears) wbytes += 4.0 * l.N * l.K;
  auto time = [&](const char* name, double flops, const std::function<void()>& f) {
    f();
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) { double t0 = now(); f(); t.push_back(now() - t0); }
    double m = median(t);
    bool lin = std::strncmp(name, "linears", 7) == 0 || std::strncmp(name, "read_", 5) == 0;
    std::printf("%-16s %9.3f ms %7.1f GFLOP/s %7.1f GB/s %9.3f min_ms\n", name, m * 1e3, flops / m * 1e-9,
                lin ? wbytes / m * 1e-9 : 0.0, *std::min_element(t.begin(), t.end()) * 1e3);
    std::fflush(stdout);
  };
  const int S = 2048;
  auto A = rnd(size_t(S) * S, 1), B = rnd(size_t(S) * S, 2);
  std::vector<float> C(size_t(S) * S);
  std::vector<std::vector<float>> W;
  for (auto l : kLinears) W.push_back(rnd(size_t(l.N) * l.K, l.N + l.K));
  auto X = rnd(256 * 2816, 7);
  std::vector<float> Y(256 * 2816);
  double lin_flops = 0;
  for (auto l : kLinears) lin_flops += 2.0 * 256 * l.N * l.K;

  if (lib == "openblas") {
    void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) { std::fprintf(stderr, "%s\n", dlerror()); return 3; }
    auto sgemm = (sgemm_t)dlsym(h, "cblas_sgemm");
    auto sgemv = (sgemv_t)dlsym(h, "cblas_sgemv");
    auto setnt = (void (*)(int))dlsym(h, "openblas_set_num_threads");
    auto corename = (char* (*)())dlsym(h, "openblas_get_corename");
    setnt(threads);
    std::printf("# openblas core %s, %d threads, OPENBLAS_CORETYPE=%s\n", corename ? corename() : "?", threads,
                std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "(unset)");
    time("sgemm2048", 2.0 * S * S * S, [&] { sgemm(101, 111, 111, S, S, S, 1.f, A.data(), S, B.data(), S, 0.f, C.data(), S); });
    time("linears_m256", lin_flops, [&] {
      for (size_t i = 0; i < 7; ++i)
        sgemm(101, 111, 112, 256, kLinears[i].N, kLinears[i].K, 1.f, X.data(), kLinears[i].K, W[i].data(), kLinears[i].K, 0.f, Y.data(), kLinears[i].N);
    });
    // The layout question for prepacking: W as K x N (NoTrans) instead of N x K.
    {
      std::vector<std::vector<float>> WT;
      for (size_t i = 0; i < 7; ++i) {
        int N = kLinears[i].N, K = kLinears[i].K;
        WT.emplace_back(size_t(N) * K);
        for (int n = 0; n < N; ++n)
          for (int k = 0; k < K; ++k) WT[i][size_t(k) * N + n] = W[i][size_t(n) * K + k];
      }
      time("linears_m256_kn", lin_flops, [&] {
        for (size_t i = 0; i < 7; ++i)
          sgemm(101, 111, 111, 256, kLinears[i].N, kLinears[i].K, 1.f, X.data(), kLinears[i].K, WT[i].data(), kLinears[i].N, 0.f, Y.data(), kLinears[i].N);
      });
    }
    for (int M : {1, 4, 16}) {
      std::string n = "linears_m" + std::to_string(M);
      time(n.c_str(), lin_flops / 256 * M, [&] {
        for (size_t i = 0; i < 7; ++i) {
          if (M == 1) sgemv(101, 111, kLinears[i].N, kLinears[i].K, 1.f, W[i].data(), kLinears[i].K, X.data(), 1, 0.f, Y.data(), 1);
          else sgemm(101, 111, 112, M, kLinears[i].N, kLinears[i].K, 1.f, X.data(), kLinears[i].K, W[i].data(), kLinears[i].K, 0.f, Y.data(), kLinears[i].N);
        }
      });
    }
    return 0;
  }
  if (lib == "bandwidth") {
    // The memory read bandwidth the decode step is measured against (bench/compare_ort.py runs
    // this between its rounds): the pool's threads sum their shares of (a) the decoder's seven
    // weights, 45 MB, the decode step's working set, and (b) a 1 GiB buffer, beyond any cache.
    namespace cpu = rlx::cpu;
    std::printf("# streaming read, rlx pool of %d\n", cpu::ThreadPool::global().size());
    // One task per thread; task t reads the t-th share of every buffer, sequentially.
    auto read_all = [&](const std::vector<const float*>& bufs, const std::vector<size_t>& sizes) {
      const int64_t parts = cpu::ThreadPool::global().size();
      std::vector<float> part(parts, 0.f);
      cpu::ThreadPool::global().parallel_for(parts, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t)
          for (size_t i = 0; i < bufs.size(); ++i) {
            size_t n = sizes[i], chunk = (n + parts - 1) / parts, lo = std::min(n, t * chunk);
            part[t] += read_sum(bufs[i] + lo, std::min(n, lo + chunk) - lo);
          }
      });
      volatile float sink = part[0];
      (void)sink;
    };
    // In memory from the executor's allocator (transparent huge pages, as rlx's packed weights):
    // with 4 KiB pages the hardware prefetchers stop at every page boundary and the same loop
    // reads markedly slower, which would understate what the machine can do.
    auto huge_copy = [](const float* src, size_t n) {
      size_t cap = 0;
      float* d = static_cast<float*>(cpu::host_alloc(n * 4, &cap));
      if (src) std::memcpy(d, src, n * 4);
      else std::fill(d, d + n, 1.f);
      return d;
    };
    std::vector<const float*> wb;
    std::vector<size_t> ws;
    for (auto& w : W) { wb.push_back(huge_copy(w.data(), w.size())); ws.push_back(w.size()); }
    time("read_weights", 0, [&] { read_all(wb, ws); });
    const size_t big = size_t(1) << 28;  // floats: 1 GiB
    const float* G = huge_copy(nullptr, big);
    const double saved = wbytes;
    wbytes = 4.0 * big;
    time("read_1gib", 0, [&] { read_all({G}, {big}); });
    wbytes = saved;
    return 0;  // (the blocks are freed by the process's exit)
  }
  if (lib == "half_pages") {
    namespace cpu = rlx::cpu;
    const Lin lins[] = {{2048, 2048}, {256, 2048}, {256, 2048}, {2048, 2048}, {5632, 2048}, {5632, 2048}, {2048, 5632}};
    double n_w = 0;
    for (auto l : lins) n_w += double(l.N) * l.K;
    std::printf("# d-2048 decode linears, M = 1, %.1f M weights, pool of %d; GB/s of weights read\n", n_w * 1e-6,
                cpu::ThreadPool::global().size());
    std::vector<const uint16_t*> huge, small;
    std::vector<std::shared_ptr<const cpu::PackedB>> packed;
    for (auto l : lins) {
      const size_t n = size_t(l.N) * l.K;
      auto w = rnd(n, l.N + 3 * l.K);
      size_t cap = 0;
      auto* h = static_cast<uint16_t*>(cpu::host_alloc(n * 2, &cap));  // madvise(MADV_HUGEPAGE)
      auto* q = new uint16_t[n];                                        // 4 KiB pages
      for (size_t i = 0; i < n; ++i) h[i] = q[i] = rlx::f32_to_bf16(w[i]);
      huge.push_back(h);
      small.push_back(q);
      packed.push_back(cpu::pack_b(true, l.K, l.N, w.data(), l.K, 1));
    }
    std::vector<uint16_t> x(5632, rlx::f32_to_bf16(0.5f));
    std::vector<float> xf(5632, 0.5f), y(5632);
    auto run = [&](const std::vector<const uint16_t*>& w) {
      for (size_t i = 0; i < 7; ++i)
        cpu::half_gemm(1, lins[i].N, lins[i].K, x.data(), rlx::DType::bf16, lins[i].K, w[i], rlx::DType::bf16, lins[i].K,
                       true, y.data(), lins[i].N);
    };
    auto run_f32 = [&] {
      for (size_t i = 0; i < 7; ++i) cpu::gemm_packed(1, xf.data(), lins[i].K, *packed[i], y.data(), lins[i].N);
    };
    std::vector<double> th, ts, tf;
    run(huge), run(small), run_f32();
    for (int r = 0; r < reps; ++r) {
      double t0 = now();
      run(huge);
      double t1 = now();
      run(small);
      double t2 = now();
      run_f32();
      double t3 = now();
      th.push_back(t1 - t0), ts.push_back(t2 - t1), tf.push_back(t3 - t2);
    }
    auto line = [&](const char* name, std::vector<double> t, double bytes) {
      const double m = median(t), mn = *std::min_element(t.begin(), t.end());
      std::printf("%-22s %8.3f ms %7.1f GB/s   min %8.3f ms %7.1f GB/s\n", name, m * 1e3, bytes / m * 1e-9, mn * 1e3,
                  bytes / mn * 1e-9);
    };
    line("bf16_2mib_pages", th, 2 * n_w);
    line("bf16_4kib_pages", ts, 2 * n_w);
    line("f32_packed", tf, 4 * n_w);
    std::vector<double> ratio;
    for (int r = 0; r < reps; ++r) ratio.push_back(th[r] / ts[r]);
    std::printf("2 MiB / 4 KiB pages, median of per-rep ratios: %.3f\n", median(ratio));
    ratio.clear();
    for (int r = 0; r < reps; ++r) ratio.push_back(th[r] / tf[r]);
    std::printf("bf16 (2 MiB pages) / f32 packed, median of per-rep ratios: %.3f\n", median(ratio));
    ratio.clear();
    for (int r = 0; r < reps; ++r) ratio.push_back(ts[r] / tf[r]);
    std::printf("bf16 (4 KiB pages) / f32 packed, median of per-rep ratios: %.3f\n", median(ratio));
    return 0;
  }
  if (lib == "rlx") {
    namespace cpu = rlx::cpu;
    std::printf("# rlx::cpu::gemm: %s, pool of %d\n", cpu::gemm_description().c_str(), cpu::ThreadPool::global().size());
    time("sgemm2048", 2.0 * S * S * S, [&] { cpu::gemm(false, false, S, S, S, 1.f, A.data(), S, B.data(), S, C.data(), S); });
    for (int M : {256, 1, 4, 16}) {
      std::string n = "linears_m" + std::to_string(M);
      time(n.c_str(), lin_flops / 256 * M, [&] {
        for (size_t i = 0; i < 7; ++i)
          cpu::gemm(false, true, M, kLinears[i].N, kLinears[i].K, 1.f, X.data(), kLinears[i].K, W[i].data(),
                    kLinears[i].K, Y.data(), kLinears[i].N);
      });
    }
    // Weights prepacked once (what compiled mode does): cpu::pack_b for that number of rows.
    for (int M : {256, 1, 4, 16}) {
      std::vector<std::shared_ptr<const cpu::PackedB>> P;
      double t0 = now();
      for (size_t i = 0; i < 7; ++i) P.push_back(cpu::pack_b(true, kLinears[i].K, kLinears[i].N, W[i].data(), kLinears[i].K, M));
      std::fprintf(stderr, "packing the 7 weights for M = %d: %.1f ms\n", M, (now() - t0) * 1e3);
      std::string n = "linears_m" + std::to_string(M) + "_pk";
      time(n.c_str(), lin_flops / 256 * M, [&] {
        for (size_t i = 0; i < 7; ++i) cpu::gemm_packed(M, X.data(), kLinears[i].K, *P[i], Y.data(), kLinears[i].N);
      });
    }
    return 0;
  }
  if (lib != "dnnl") { std::fprintf(stderr, "usage: gemm_candidates openblas|dnnl|rlx|bandwidth [reps]\n"); return 2; }
  // oneDNN (OpenMP runtime in Debian's build: OMP_NUM_THREADS from the caller)
  std::printf("# onednn %d.%d.%d, %d threads\n", dnnl_version()->major, dnnl_version()->minor, dnnl_version()->patch, threads);
  time("sgemm2048", 2.0 * S * S * S, [&] { dnnl_sgemm('N', 'N', S, S, S, 1.f, A.data(), S, B.data(), S, 0.f, C.data(), S); });
  time("linears_m256_sg", lin_flops, [&] {
    for (size_t i = 0; i < 7; ++i)
      dnnl_sgemm('N', 'T', 256, kLinears[i].N, kLinears[i].K, 1.f, X.data(), kLinears[i].K, W[i].data(), kLinears[i].K, 0.f, Y.data(), kLinears[i].N);
  });
  using namespace dnnl;
  engine eng(engine::kind::cpu, 0);
  stream st(eng);
  using dt = memory::data_type;
  using tag = memory::format_tag;
  auto matmul_set = [&](int M, std::vector<memory>& packed, std::vector<matmul>& prims, std::vector<memory>& srcs, std::vector<memory>& dsts) {
    for (size_t i = 0; i < 7; ++i) {
      int N = kLinears[i].N, K = kLinears[i].K;
      memory::desc a({M, K}, dt::f32, tag::ab), b_any({K, N}, dt::f32, tag::any), c({M, N}, dt::f32, tag::ab);
      matmul::primitive_desc pd(matmul::desc(a, b_any, c), eng);
      memory w_user({{K, N}, dt::f32, tag::ba}, eng, W[i].data());  // W [N,K] row-major = [K,N] "ba"
      memory w_packed(pd.weights_desc(), eng);
      reorder(w_user, w_packed).execute(st, w_user, w_packed);
      packed.push_back(w_packed);
      prims.emplace_back(pd);
      srcs.emplace_back(a, eng, X.data());
      dsts.emplace_back(c, eng, Y.data());
    }
    st.wait();
  };
  for (int M : {256, 1, 4, 16}) {
    std::vector<memory> packed, srcs, dsts;
    std::vector<matmul> prims;
    matmul_set(M, packed, prims, srcs, dsts);
    std::string n = "linears_m" + std::to_string(M) + "_mm";
    time(n.c_str(), lin_flops / 256 * M, [&] {
      for (size_t i = 0; i < 7; ++i)
        prims[i].execute(st, {{DNNL_ARG_SRC, srcs[i]}, {DNNL_ARG_WEIGHTS, packed[i]}, {DNNL_ARG_DST, dsts[i]}});
      st.wait();
    });
  }
  {  // 2048^3 through the matmul primitive with B prepacked
    memory::desc a({S, S}, dt::f32, tag::ab), b_any({S, S}, dt::f32, tag::any), c({S, S}, dt::f32, tag::ab);
    matmul::primitive_desc pd(matmul::desc(a, b_any, c), eng);
    memory bu({{S, S}, dt::f32, tag::ab}, eng, B.data()), bp(pd.weights_desc(), eng), am(a, eng, A.data()), cm(c, eng, C.data());
    reorder(bu, bp).execute(st, bu, bp);
    matmul mm(pd);
    time("mm2048_packed", 2.0 * S * S * S, [&] { mm.execute(st, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bp}, {DNNL_ARG_DST, cm}}); st.wait(); });
  }
  return 0;
}
