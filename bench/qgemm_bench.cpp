// qgemm (lib/backends/cpu/qgemm.h) on the int8 bench shapes, every ISA path this CPU runs,
// interleaved in rounds (median of rounds), in GOPS (2 * M * N * K per product).
//   build/bench/qgemm_bench [rounds] [reps]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backends/cpu/qgemm.h"

using namespace rlx::cpu;

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 5, reps = argc > 2 ? atoi(argv[2]) : 20;
  struct Shape { int64_t M, K, N; };
  const Shape shapes[] = {{128, 768, 3072}, {128, 3072, 768}, {1, 2048, 2048}, {16, 2048, 5632}};
  std::vector<QIsa> isas;
  for (QIsa i : {QIsa::Avx512Vnni, QIsa::AvxVnni, QIsa::Avx2, QIsa::Base})
    if (qisa_supported(i)) isas.push_back(i);
  for (const Shape& s : shapes) {
    std::vector<uint8_t> A(s.M * s.K), B(s.K * s.N);
    unsigned r = 1;
    for (auto& v : A) v = (uint8_t)((r = r * 1664525u + 1013904223u) >> 24);
    for (auto& v : B) v = (uint8_t)((r = r * 1664525u + 1013904223u) >> 24);
    auto pk = pack_qb(B.data(), true, s.K, s.N, s.N);
    std::vector<int32_t> C(s.M * s.N);
    const int32_t za = 128;
    std::vector<std::vector<double>> ms(isas.size());
    for (int rd = 0; rd < rounds; ++rd)
      for (size_t i = 0; i < isas.size(); ++i) {
        if (isas[i] == QIsa::Base && s.M * s.N * s.K > (int64_t)1 << 28) continue;
        std::vector<double> t;
        for (int k = 0; k < reps + 2; ++k) {
          auto t0 = std::chrono::steady_clock::now();
          qgemm(s.M, A.data(), false, s.K, &za, false, *pk, nullptr, false, C.data(), s.N, {}, isas[i]);
          t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(t.begin() + 2, t.end());
        ms[i].push_back(t[2 + reps / 2]);
      }
    for (size_t i = 0; i < isas.size(); ++i) {
      if (ms[i].empty()) continue;
      std::sort(ms[i].begin(), ms[i].end());
      const double m = ms[i][ms[i].size() / 2];
      std::printf("M=%-4lld K=%-5lld N=%-5lld %-11s %8.3f ms %8.1f GOPS %7.2f GB/s of weights\n", (long long)s.M,
                  (long long)s.K, (long long)s.N, qisa_name(isas[i]), m, 2.0 * s.M * s.N * s.K / m * 1e-6,
                  (double)s.K * s.N / m * 1e-6);
    }
  }
}
