#pragma once
// The double-precision attention reference shared by the attention tests (test_vulkan,
// test_vulkan_half): softmax(q k^T / sqrt(D) + mask) v per batch and query head, GQA by
// integer division of the heads, causal rows aligned to the end of the keys (Sk - Sq shift),
// and a row whose keys are all hidden gives zeros.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace rlx::test {

// c: any case with B, Hq, Hkv, Sq, Sk, D, Dv, causal and mask (0 none, 1 float [Sq, Sk] added
// to the scores, 2 bool [B, 1, Sq, Sk] where 0 hides a key); q, k, v, mf, mb: element getters
// by flat index (mf and mb are called only for their mask kind).
template <class Case, class Q, class K, class V, class MF, class MB>
std::vector<double> ref_attention(const Case& c, Q q, K k, V v, MF mf, MB mb) {
  std::vector<double> o(c.B * c.Hq * c.Sq * c.Dv, 0.0);
  const double scale = 1 / std::sqrt((double)c.D);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t kh = h / (c.Hq / c.Hkv);
      for (int64_t i = 0; i < c.Sq; ++i) {
        std::vector<double> s(c.Sk, 0.0);
        std::vector<bool> vis(c.Sk, true);
        double mx = -INFINITY;
        for (int64_t j = 0; j < c.Sk; ++j) {
          double d = 0;
          for (int64_t e = 0; e < c.D; ++e)
            d += (double)q(((b * c.Hq + h) * c.Sq + i) * c.D + e) * (double)k(((b * c.Hkv + kh) * c.Sk + j) * c.D + e);
          s[j] = d * scale;
          if (c.causal && j > i + c.Sk - c.Sq) vis[j] = false;
          if (c.mask == 1) s[j] += (double)mf(i * c.Sk + j);
          if (c.mask == 2 && mb((b * c.Sq + i) * c.Sk + j) == 0) vis[j] = false;
          if (vis[j]) mx = std::max(mx, s[j]);
        }
        if (mx == -INFINITY) continue;  // every key hidden: zeros
        double l = 0;
        for (int64_t j = 0; j < c.Sk; ++j) s[j] = vis[j] ? std::exp(s[j] - mx) : 0, l += s[j];
        for (int64_t e = 0; e < c.Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < c.Sk; ++j) acc += s[j] * (double)v(((b * c.Hkv + kh) * c.Sk + j) * c.Dv + e);
          o[((b * c.Hq + h) * c.Sq + i) * c.Dv + e] = acc / l;
        }
      }
    }
  return o;
}

}  // namespace rlx::test
