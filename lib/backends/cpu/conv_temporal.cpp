// The temporal half of separable 3-D convolutions (conv_temporal.h).
#include "backends/cpu/conv_temporal.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/thread_pool.h"

namespace rlx::cpu {

bool conv3d_temporal_applies(const ir::Conv2dGeom& g) {
  static const bool on = [] {
    const char* e = std::getenv("RLX_CONV_TEMPORAL");
    return !(e && std::string(e) == "0");
  }();
  return on && g.nd == 3 && g.kD > 1 && g.kH == 1 && g.kW == 1 && g.sH == 1 && g.sW == 1 && g.dD == 1 && g.pt == 0 &&
         g.pb == 0 && g.pl == 0 && g.pr == 0 && g.Cg > 0 && g.Mg > 0 && g.OH == g.H && g.OW == g.W;
}

void conv3d_temporal(const ir::Conv2dGeom& g, const float* x, const float* w, const float* bias, float* y,
                     const SpanFn* epi) {
  const int64_t P = g.H * g.W, KD = g.kD, Cg = g.Cg, Mg = g.Mg, OP = g.OD * P;
  if (g.N * g.M * OP == 0) return;
  // The weight as [M][kD][Cg]: the taps kd0..kd1-1 of one output depth are then one block of
  // columns (leading dimension kD Cg), matching the slab's consecutive rows.
  std::vector<float> wt((size_t)(g.M * KD * Cg));
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t c = 0; c < Cg; ++c)
      for (int64_t kd = 0; kd < KD; ++kd) wt[(m * KD + kd) * Cg + c] = w[(m * Cg + c) * KD + kd];
  // Position blocks of T <= 512 (a multiple of 16, the blocks balanced); each task's slab holds
  // the planes of a run of output depths, about 1 MiB at most (one L2 here). Measured per conv
  // (`rlx bench` of conv + ReLU, s3d's and r2plus1d_18's temporal shapes, fastest of 10 rounds
  // at load 2-3): T <= 512 with 1 MiB slabs 0.71-0.89x the im2col tiles' time; T <= 128 or
  // 256 with 512 KiB slabs mostly between the two.
  const int64_t threads = ThreadPool::global().size();
  constexpr int64_t TMAX = 512, SLAB = int64_t(1) << 18;
  int64_t blocks = (P + TMAX - 1) / TMAX;
  const int64_t T = std::min(P, ((P + blocks - 1) / blocks + 15) / 16 * 16);
  blocks = (P + T - 1) / T;
  const int64_t planes = g.N * g.groups;
  const int64_t fit = std::max<int64_t>(KD, SLAB / (Cg * T));  // planes a slab may hold
  int64_t drun = std::min<int64_t>(g.OD, std::max<int64_t>(1, (fit - KD) / g.sD + 1));
  // Few tasks (small maps): shorter runs of output depths, so every thread has work.
  if (planes * blocks * ((g.OD + drun - 1) / drun) < 2 * threads)
    drun = std::max<int64_t>(1, g.OD / std::max<int64_t>(1, (2 * threads + planes * blocks - 1) / (planes * blocks)));
  const int64_t dsplit = (g.OD + drun - 1) / drun;
  ThreadPool::global().parallel_for(planes * blocks * dsplit, 1, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> slab;
    for (int64_t t = b; t < e; ++t) {
      const int64_t ds = t % dsplit, blk = t / dsplit % blocks, pg = t / dsplit / blocks;
      const int64_t n = pg / g.groups, grp = pg % g.groups;
      const int64_t p0 = blk * T, tn = std::min(T, P - p0);
      const int64_t od0 = ds * drun, od1 = std::min(g.OD, od0 + drun);
      // Input depths this task reads: [i0, i1).
      const int64_t i0 = std::max<int64_t>(0, od0 * g.sD - g.pf);
      const int64_t i1 = std::min<int64_t>(g.D, (od1 - 1) * g.sD - g.pf + KD);
      if ((int64_t)slab.size() < std::max<int64_t>(i1 - i0, 1) * Cg * tn) slab.resize((size_t)(std::max<int64_t>(i1 - i0, 1) * Cg * tn));
      const float* xg = x + (n * g.C + grp * Cg) * g.D * P + p0;
      for (int64_t id = i0; id < i1; ++id)
        for (int64_t c = 0; c < Cg; ++c)
          std::memcpy(slab.data() + ((id - i0) * Cg + c) * tn, xg + (c * g.D + id) * P, (size_t)tn * 4);
      float* yg = y + (n * g.M + grp * Mg) * OP + p0;
      const float* bg = bias ? bias + grp * Mg : nullptr;
      for (int64_t od = od0; od < od1; ++od) {
        const int64_t s = od * g.sD - g.pf;  // input depth of tap 0
        const int64_t kd0 = std::max<int64_t>(0, -s), kd1 = std::min<int64_t>(KD, g.D - s);
        float* yo = yg + od * P;
        if (kd1 > kd0) {
          gemm(false, false, Mg, tn, (kd1 - kd0) * Cg, 1.f, wt.data() + (grp * Mg * KD + kd0) * Cg, KD * Cg,
               slab.data() + (s + kd0 - i0) * Cg * tn, tn, yo, OP, {}, Threads::Single);
          if (bg)
            for (int64_t m = 0; m < Mg; ++m) {
              const float bm = bg[m];
              for (float *q = yo + m * OP, *qe = q + tn; q < qe; ++q) *q += bm;
            }
        } else {  // every tap in the padding: the bias alone
          for (int64_t m = 0; m < Mg; ++m) std::fill(yo + m * OP, yo + m * OP + tn, bg ? bg[m] : 0.f);
        }
        if (epi)
          for (int64_t m = 0; m < Mg; ++m) {
            const int64_t at = yo + m * OP - y;
            (*epi)(at, at + tn);
          }
      }
    }
  });
}

}  // namespace rlx::cpu
