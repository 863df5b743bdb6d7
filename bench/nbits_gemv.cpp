// nbits_gemv: the 4-bit one-row product (cpu::nbits4_small_m at M = 1: what a decode step runs
// for each MatMulNBits) against a streaming read, in one process, alternating.
//   memory  the 15 weights of bench/generate_bench.py's large decoder (d 2048, 2 layers, FFN
//           5632, lm_head 4096; 4 bits, block 32, f32 scales, packed zero points: 61.8 MB, twice
//           the L3), one pass over all of them per repetition
//   cache   one 2048 x 2048 weight (2.7 MB), the same pass repeated: the kernel's own rate
//           and per shape (the products of the memory pass timed one by one, the median over
//           the pass's repetitions of each shape's summed time): the 256-column k/v products
//           show what a product's start costs
//   read    rlx's pool summing a 1 GiB f32 buffer (as gemm_candidates bandwidth's read_1gib)
//   one dispatch  the memory pass with the 15 products in one pool dispatch (each thread takes
//           its share of every weight's columns, one after the other, Threads::Single) instead
//           of one dispatch per product: (time of 15 - time of 1) / 14 is what a dispatch costs
//   interleaved  the memory pass over each weight's PackedNbits4 (8 columns a stream: what the
//           executor reads for a constant weight), with its time over the ONNX layout's
// The kernel is nbits4_small_m's choice: nbits4_row1_bfp (integer products) with AVX-512 VNNI,
// RLX_NBITS_F32=1 for the f32 nbits4_row1_x8. Buffers from cpu::host_alloc (transparent huge
// pages, as the executor's weights). Threads: RLX_NUM_THREADS. Prints per round the best and
// median GB/s of each, memory / read, and the one-dispatch pass's GB/s and the cost per dispatch.
//   nbits_gemv [rounds] [reps]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "backends/cpu/host_memory.h"
#include "stream_read.h"
#include "backends/cpu/qgemm.h"
#include "backends/cpu/thread_pool.h"

namespace cpu = rlx::cpu;

namespace {

double now_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Weight {
  int64_t N, K;
  uint8_t *B, *Z;
  float* S;
  double bytes;
};

Weight make(int64_t N, int64_t K, uint32_t& s) {
  const int64_t kb = K / 32, zc = (kb + 1) / 2;
  size_t cap = 0;
  Weight w{N, K, static_cast<uint8_t*>(cpu::host_alloc(N * kb * 16, &cap)), static_cast<uint8_t*>(cpu::host_alloc(N * zc, &cap)),
           static_cast<float*>(cpu::host_alloc(N * kb * 4, &cap)), double(N * kb * 16 + N * zc + N * kb * 4)};
  for (int64_t i = 0; i < N * kb * 16; ++i) w.B[i] = (s = s * 1664525u + 1013904223u) >> 24;
  for (int64_t i = 0; i < N * zc; ++i) w.Z[i] = (s = s * 1664525u + 1013904223u) >> 24;
  for (int64_t i = 0; i < N * kb; ++i) w.S[i] = 0.01f + 1e-3f * float((s = s * 1664525u + 1013904223u) >> 28);
  return w;
}


template <class F>
std::pair<double, double> time_ms(int reps, F&& f) {  // best, median
  std::vector<double> t;
  f();
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_ms();
    f();
    t.push_back(now_ms() - t0);
  }
  std::sort(t.begin(), t.end());
  return {t[0], t[t.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5, reps = argc > 2 ? std::atoi(argv[2]) : 40;
  uint32_t seed = 7;
  std::vector<Weight> ws;
  for (int l = 0; l < 2; ++l)
    for (auto nk : {std::pair<int64_t, int64_t>{2048, 2048}, {256, 2048}, {256, 2048}, {2048, 2048}, {5632, 2048}, {5632, 2048}, {2048, 5632}})
      ws.push_back(make(nk.first, nk.second, seed));
  ws.push_back(make(4096, 2048, seed));
  double bytes = 0;
  for (auto& w : ws) bytes += w.bytes;
  std::vector<float> A(5632, 0.25f), C(5632);
  const size_t big = size_t(1) << 28;  // floats: 1 GiB
  size_t cap = 0;
  float* G = static_cast<float*>(cpu::host_alloc(big * 4, &cap));
  std::fill(G, G + big, 1.f);
  const int64_t parts = cpu::ThreadPool::global().size();
  std::printf("# one-row 4-bit product, pool of %lld; memory: %.1f MB of weights per pass, cache: %.1f MB\n", (long long)parts,
              bytes * 1e-6, ws[0].bytes * 1e-6);
  // each weight's interleaved copy (cpu::PackedNbits4, what the executor reads), where the kernel takes one
  std::vector<std::shared_ptr<const cpu::PackedNbits4>> packs;
  for (auto& w : ws) packs.push_back(cpu::pack_nbits4_row1(w.B, w.S, w.N, w.K));
  const bool packed = packs[0] != nullptr;
  std::vector<double> per(ws.size(), 0.0);  // the current repetition's time of each product, ms
  auto pass = [&](size_t first, size_t last, bool use_packs = false) {
    for (size_t i = first; i < last; ++i) {
      const double t0 = now_ms();
      if (!cpu::nbits4_small_m(1, A.data(), ws[i].K, ws[i].B, ws[i].S, ws[i].Z, ws[i].N, 32, C.data(), cpu::Threads::Pool,
                               use_packs ? packs[i].get() : nullptr)) {
        std::fprintf(stderr, "nbits4_small_m refused the shape (needs AVX-512, or AVX2 + FMA)\n");
        std::exit(2);
      }
      per[i] = now_ms() - t0;
    }
  };
  // the shapes (N x K) of the pass, each with the indices of its weights
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::vector<size_t>>> shapes;
  for (size_t i = 0; i < ws.size(); ++i) {
    auto it = std::find_if(shapes.begin(), shapes.end(), [&](auto& e) { return e.first == std::make_pair(ws[i].N, ws[i].K); });
    if (it == shapes.end()) shapes.push_back({{ws[i].N, ws[i].K}, {i}});
    else it->second.push_back(i);
  }
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::vector<double>> shape_ms(shapes.size());
    bool first_rep = true;
    auto mem = time_ms(reps, [&] {
      pass(0, ws.size());
      if (std::exchange(first_rep, false)) return;  // time_ms's warm-up
      for (size_t s = 0; s < shapes.size(); ++s) {
        double t = 0;
        for (size_t i : shapes[s].second) t += per[i];
        shape_ms[s].push_back(t);
      }
    });
    auto hot = time_ms(reps * 10, [&] { pass(0, 1); });
    // the same pass over the interleaved copies
    auto pmem = packed ? time_ms(reps, [&] { pass(0, ws.size(), true); }) : std::pair<double, double>{0, 0};
    auto rd = time_ms(std::max(3, reps / 10), [&] {
      std::vector<float> part(parts, 0.f);
      cpu::ThreadPool::global().parallel_for(parts, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const size_t chunk = (big + parts - 1) / parts, lo = std::min(big, t * chunk);
          part[t] += read_sum(G + lo, std::min(big, lo + chunk) - lo);
        }
      });
      volatile float sink = part[0];
      (void)sink;
    });
    auto one = time_ms(reps, [&] {
      cpu::ThreadPool::global().parallel_for(parts, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t)
          for (auto& w : ws) {  // this thread's columns of every weight, in multiples of 8
            const int64_t kb = w.K / 32, zc = (kb + 1) / 2, n0 = w.N * t / parts / 8 * 8,
                          n1 = t + 1 == parts ? w.N : w.N * (t + 1) / parts / 8 * 8;
            if (n1 > n0)
              cpu::nbits4_small_m(1, A.data(), w.K, w.B + n0 * kb * 16, w.S + n0 * kb, w.Z + n0 * zc, n1 - n0, 32,
                                  C.data() + n0, cpu::Threads::Single);
          }
      });
    });
    const double gm = bytes / mem.first * 1e-6, gmm = bytes / mem.second * 1e-6, gr = 4.0 * big / rd.first * 1e-6,
                 grm = 4.0 * big / rd.second * 1e-6;
    std::printf("round %d  memory %.1f GB/s best, %.1f median | cache %.1f / %.1f | read_1gib %.1f / %.1f | memory/read: best %.0f%%, "
                "median %.0f%% | one dispatch %.1f / %.1f GB/s: %.1f us per dispatch (best), %.1f (median)\n",
                r + 1, gm, gmm, ws[0].bytes / hot.first * 1e-6, ws[0].bytes / hot.second * 1e-6, gr, grm, 100 * gm / gr, 100 * gmm / grm,
                bytes / one.first * 1e-6, bytes / one.second * 1e-6, (mem.first - one.first) / 14 * 1e3,
                (mem.second - one.second) / 14 * 1e3);
    if (packed)
      std::printf("  interleaved (PackedNbits4): memory %.1f GB/s best, %.1f median; memory/read: best %.0f%%, median %.0f%%; "
                  "%.2fx the ONNX layout's median time\n",
                  bytes / pmem.first * 1e-6, bytes / pmem.second * 1e-6, 100 * bytes / pmem.first * 1e-6 / gr,
                  100 * bytes / pmem.second * 1e-6 / grm, pmem.second / mem.second);
    else
      std::printf("  interleaved (PackedNbits4): not made on this CPU (the kernel needs AVX-512 VNNI)\n");
    std::printf("  per shape from memory, median GB/s:");
    for (size_t s = 0; s < shapes.size(); ++s) {
      std::sort(shape_ms[s].begin(), shape_ms[s].end());
      double b = 0;
      for (size_t i : shapes[s].second) b += ws[i].bytes;
      std::printf(" %lldx%lld %.1f", (long long)shapes[s].first.first, (long long)shapes[s].first.second,
                  b / shape_ms[s][shape_ms[s].size() / 2] * 1e-6);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
