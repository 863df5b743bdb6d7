// Signal processing: the Hann, Hamming and Blackman windows and MelWeightMatrix (folded on the
// host), DFT and STFT (products with constant cosine and sine matrices built on the host: a
// matmul per part, so every backend and mode runs them with its GEMM; O(n^2) per transform,
// meant for the frame lengths of speech front ends, not for long FFTs).
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

  bool fold_MelWeightMatrix() {  // as ONNX's reference (onnx/backend/test/case/node/melweightmatrix.py)
    const int64_t mels = need_scalar(0, "num_mel_bins")->n(0), dft = need_scalar(1, "dft_length")->n(0);
    const int64_t rate = need_scalar(2, "sample_rate")->n(0);
    const double lo = need_scalar(3, "lower_edge_hertz")->d(0), hi = need_scalar(4, "upper_edge_hertz")->d(0);
    if (mels <= 0 || dft <= 0 || rate <= 0) fail("num_mel_bins, dft_length and sample_rate must be positive");
    const int64_t bins = dft / 2 + 1;
    if (bins * mels > L_.max_folded_elements) unsupported("a mel matrix of " + std::to_string(bins * mels) + " elements is too large to fold");
    const int et = (int)ai("output_datatype", kFloat);
    if (!float_et(et)) fail("output_datatype must be a floating-point type");
    const double mlo = 2595 * std::log10(1 + lo / 700), mhi = 2595 * std::log10(1 + hi / 700);
    const double step = (mhi - mlo) / (double)(mels + 2);
    std::vector<int64_t> f((size_t)(mels + 2));
    for (int64_t k = 0; k < mels + 2; ++k) {
      const double hz = 700 * (std::pow(10.0, ((double)k * step + mlo) / 2595) - 1);
      f[(size_t)k] = (int64_t)std::floor((double)(dft + 1) * hz / (double)rate);
      if (f[(size_t)k] < 0 || f[(size_t)k] >= bins) fail("the mel band edges fall outside the " + std::to_string(bins) + " frequency bins");
    }
    Host h;
    h.is_float = true;
    h.f.assign((size_t)(bins * mels), 0.0);
    auto at = [&](int64_t j, int64_t i) -> double& { return h.f[(size_t)(j * mels + i)]; };
    for (int64_t i = 0; i < mels; ++i) {
      const int64_t l = f[i], c = f[i + 1], r = f[i + 2];
      if (c == l) at(c, i) = 1;
      else
        for (int64_t j = l; j <= c; ++j) at(j, i) = (double)(j - l) / (double)(c - l);
      if (r > c)
        for (int64_t j = c; j < r; ++j) at(j, i) = (double)(r - j) / (double)(r - c);
    }
    set_host(0, {bins, mels}, et, h);
    return true;
  }

  // The DFT of xr (+ i xi; xi < 0: a real signal) along their last axis, of length n, into m
  // bins, as products with constant [n, m] matrices: y_re = xr C + xi S, y_im = xi C - xr S with
  // C = cos(2 pi k j / n), S = sin(...) (forward), S negated and both divided by n (inverse).
  // Returns (y_re, y_im). `n_in` values are read along the axis (rows beyond n are zero: the
  // signal is cut to n; fewer rows: it is padded with zeros).
  std::pair<int, int> dft_last(int xr, int xi, int64_t n_in, int64_t n, int64_t m, bool inverse) {
    if (n_in * m > (int64_t(1) << 24)) unsupported("a DFT of " + std::to_string(n) + " points as a dense product is too large");
    std::vector<double> c((size_t)(n_in * m), 0.0), sn((size_t)(n_in * m), 0.0), msn((size_t)(n_in * m), 0.0);
    const double scale = inverse ? 1.0 / (double)n : 1.0, sign = inverse ? -1.0 : 1.0;
    for (int64_t j = 0; j < std::min(n_in, n); ++j)
      for (int64_t k = 0; k < m; ++k) {
        const double t = 2 * M_PI * (double)((j * k) % n) / (double)n;  // exact phase for large j k
        c[(size_t)(j * m + k)] = std::cos(t) * scale;
        sn[(size_t)(j * m + k)] = sign * std::sin(t) * scale;
        msn[(size_t)(j * m + k)] = -sign * std::sin(t) * scale;
      }
    const DType dt = ts_.dtypes[xr];
    const int C = constant({n_in, m}, c, dt), S = constant({n_in, m}, sn, dt), MS = constant({n_in, m}, msn, dt);
    int re = emit("matmul", {xr, C});
    int im = emit("matmul", {xr, MS});
    if (xi >= 0) {
      re = emit("add", {re, emit("matmul", {xi, S})});
      im = emit("add", {im, emit("matmul", {xi, C})});
    }
    return {re, im};
  }

  // Real and imaginary parts of x [..., 1 or 2] as nodes of shape [...] (imaginary: -1 if real).
  std::pair<int, int> parts(int x) {
    Shape s = shp(x);
    const int64_t c = s.back();
    if (c != 1 && c != 2) fail("the last axis holds the real (1) or real and imaginary (2) parts, it has length " + std::to_string(c));
    const int last = (int)s.size() - 1;
    s.pop_back();
    if (c == 1) return {reshape(x, s), -1};
    return {reshape(narrow(x, last, 0, 1), s), reshape(narrow(x, last, 1, 1), s)};
  }

  // [..., m] real and imaginary parts stacked into [..., m, 2], under the node's output name.
  int stack_parts(int re, int im) {
    Shape s = shp(re);
    s.push_back(1);
    return emit("concat", {reshape(re, s), reshape(im, s)}, {{"axis", (int64_t)s.size() - 1}}, out_name());
  }

  void map_DFT() {
    const int x = node(0);
    const Shape xs = shp(x);
    if (xs.size() < 2) fail("the input must have a signal axis and the complex axis, it has shape " + shape_str(xs));
    const int r = (int)xs.size();
    const int axis = axis_of(ai("axis", 1), r);
    if (axis == r - 1) fail("axis must not be the last axis (it holds the real and imaginary parts)");
    const bool inverse = ai("inverse", 0) != 0, onesided = ai("onesided", 0) != 0;
    const int64_t n_in = xs[axis];
    const int64_t n = has_in(1) ? need_scalar(1, "dft_length")->n(0) : n_in;
    if (n <= 0) fail("dft_length must be positive, it is " + std::to_string(n));
    if (onesided && xs.back() == 2) fail("onesided needs a real input (the last axis of length 1)");
    if (onesided && inverse) unsupported("an inverse onesided DFT");
    const int64_t m = onesided ? n / 2 + 1 : n;
    auto [xr, xi] = parts(x);
    // the signal axis last: transpose there and back
    std::vector<int64_t> perm;
    for (int k = 0; k < r - 1; ++k)
      if (k != axis) perm.push_back(k);
    perm.push_back(axis);
    std::vector<int64_t> back((size_t)(r - 1));
    for (int k = 0; k < r - 1; ++k) back[(size_t)perm[k]] = k;
    const bool moved = axis != r - 2;
    auto to_last = [&](int v) { return v < 0 || !moved ? v : emit("transpose", {v}, {{"perm", perm}}); };
    auto from_last = [&](int v) { return !moved ? v : emit("transpose", {v}, {{"perm", back}}); };
    auto [re, im] = dft_last(to_last(xr), to_last(xi), n_in, n, m, inverse);
    set_node(0, stack_parts(from_last(re), from_last(im)));
  }

  void map_STFT() {
    const int x = node(0);
    const Shape xs = shp(x);
    if (xs.size() != 3) fail("the signal must be [batch, length, 1 or 2], got " + shape_str(xs));
    const int64_t step = need_scalar(1, "frame_step")->n(0);
    if (step <= 0) fail("frame_step must be positive, it is " + std::to_string(step));
    int64_t len = -1;
    int win = -1;
    if (has_in(2)) {
      win = node(2);
      if (shp(win).size() != 1) fail("the window must be 1-D, it has shape " + shape_str(shp(win)));
      len = shp(win)[0];
    }
    if (has_in(3)) {
      const int64_t fl = need_scalar(3, "frame_length")->n(0);
      if (len >= 0 && fl != len) fail("frame_length " + std::to_string(fl) + " differs from the window's length " + std::to_string(len));
      len = fl;
    }
    if (len < 0) fail("needs a window or a frame_length");
    if (len <= 0 || len > xs[1]) fail("the frame length " + std::to_string(len) + " must be within [1, " + std::to_string(xs[1]) + "]");
    const bool onesided = ai("onesided", 1) != 0;
    if (onesided && xs[2] == 2) fail("onesided needs a real signal (the last axis of length 1)");
    const int64_t frames = (xs[1] - len) / step + 1, m = onesided ? len / 2 + 1 : len;
    if (frames * len > (int64_t(1) << 24)) unsupported("STFT frames of " + std::to_string(frames * len) + " values");
    std::vector<double> idx;
    for (int64_t f = 0; f < frames; ++f)
      for (int64_t j = 0; j < len; ++j) idx.push_back((double)(f * step + j));
    const int fr = emit("gather", {x, constant({frames, len}, idx, DType::i64)}, {{"axis", (int64_t)1}});  // [B, F, len, c]
    auto [xr, xi] = parts(fr);
    if (win >= 0) {
      const int w = cast(win, ts_.dtypes[xr]);
      xr = emit("mul", {xr, w});
      if (xi >= 0) xi = emit("mul", {xi, w});
    }
    auto [re, im] = dft_last(xr, xi, len, len, m, false);
    set_node(0, stack_parts(re, im));
  }
};

}  // namespace

void signal_ops(std::vector<OpDef>& t) {
  using F = Signal;
  t.insert(t.end(), {
      {"HannWindow", "", 1, nullptr, fold<&F::fold_window>, "folded", "", "the size must be known (a constant, or an input bound by value)"},
      {"HammingWindow", "", 1, nullptr, fold<&F::fold_window>, "folded", "", "as HannWindow"},
      {"BlackmanWindow", "", 1, nullptr, fold<&F::fold_window>, "folded", "", "as HannWindow"},
      {"MelWeightMatrix", "", 17, nullptr, fold<&F::fold_MelWeightMatrix>, "folded", "",
       "every input must be known (constants, or inputs bound by value); as ONNX's reference"},
      {"DFT", "", 17, map<&F::map_DFT>, nullptr, "matmul, add, transpose, concat", "matmul",
       "opset 17 form (axis attribute): products with constant cosine and sine matrices (O(n^2)); dft_length known at "
       "specialisation; inverse; onesided for real inputs"},
      {"STFT", "", 17, map<&F::map_STFT>, nullptr, "gather, mul, matmul, add, concat", "gather matmul",
       "frame_step and frame_length known at specialisation; frames gathered by constant indices, windowed, and "
       "transformed as DFT"},
  });
}

}  // namespace rlx::onnx
