// Signal processing: the Hann, Hamming and Blackman windows (folded on the host).
#include <cmath>
#include "onnx/importer.h"

namespace rlx::onnx {

namespace {

struct Signal : Importer {
  using Importer::Importer;

  bool fold_window() {
    const std::string& op = cur_->op_type;
    // a0 - a1 cos(2 pi n / N') + a2 cos(4 pi n / N'), N' = N (periodic) or N - 1
    const int64_t N = need_scalar(0, "size")->n(0);
    if (N < 0) fail("size must not be negative, got " + std::to_string(N));
    if (N > L_.max_folded_elements) unsupported("a window of " + std::to_string(N) + " elements is too large to fold");
    const int et = (int)ai("output_datatype", kFloat);
    if (!float_et(et)) fail("output_datatype must be a floating-point type");
    const double a0 = op == "HannWindow" ? 0.5 : op == "HammingWindow" ? 25.0 / 46 : 0.42;
    const double a1 = op == "HannWindow" ? 0.5 : op == "HammingWindow" ? 21.0 / 46 : 0.5;
    const double a2 = op == "BlackmanWindow" ? 0.08 : 0.0;
    const double Np = ai("periodic", 1) ? (double)N : (double)N - 1;
    Host h;
    for (int64_t k = 0; k < N; ++k) {
      const double t = Np > 0 ? 2 * M_PI * (double)k / Np : 0;
      h.f.push_back(a0 - a1 * std::cos(t) + a2 * std::cos(2 * t));
    }
    set_host(0, {N}, et, h);
    return true;
  }
};

}  // namespace

void signal_ops(std::vector<OpDef>& t) {
  using F = Signal;
  t.insert(t.end(), {
      {"HannWindow", "", 1, nullptr, fold<&F::fold_window>, "folded", "", "the size must be known (a constant, or an input bound by value)"},
      {"HammingWindow", "", 1, nullptr, fold<&F::fold_window>, "folded", "", "as HannWindow"},
      {"BlackmanWindow", "", 1, nullptr, fold<&F::fold_window>, "folded", "", "as HannWindow"},
  });
}

}  // namespace rlx::onnx
