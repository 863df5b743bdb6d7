// ONNX's optimizer operators (domain ai.onnx.preview.training, version 1): Adagrad, Momentum
// (standard and Nesterov) and Adam, each an update of any number of tensors written as
// elementwise registry ops. The step count T may be known only at run time: the branches on
// T > 0 are `where` nodes. Formulas as ONNX's reference (onnx/backend/test/case/node/).
#include "onnx/importer.h"

namespace rlx::onnx {

namespace {

struct Training : Importer {
  using Importer::Importer;

  // The n tensors each group of the inputs after R and T holds, checked against `groups`.
  int64_t tensors(int groups) {
    const int64_t rest = (int64_t)cur_->inputs.size() - 2;
    if (rest <= 0 || rest % groups) fail("takes R, T and " + std::to_string(groups) + " inputs per tensor, got " + std::to_string(cur_->inputs.size()) + " inputs");
    const int64_t n = rest / groups;
    if ((int64_t)cur_->outputs.size() > n * (groups - 1)) fail("has more outputs than its tensors");
    return n;
  }
  int scalar_in(size_t k, const char* what) {
    if (shape_numel(in(k).shape) != 1) fail(std::string(what) + " must have one element, it has shape " + shape_str(in(k).shape));
    return reshape(cast(node(k), DType::f32), {});
  }
  int c(double v) { return scalar(v); }
  int mul(int a, int b) { return emit("mul", {a, b}); }
  int add(int a, int b) { return emit("add", {a, b}); }
  int sub(int a, int b) { return emit("sub", {a, b}); }
  int div(int a, int b) { return emit("div", {a, b}); }
  int positive(int t) { return emit("greater", {t, c(0)}); }
  void out(size_t k, int v) {
    if (k < cur_->outputs.size() && !cur_->outputs[k].empty())
      set_node(k, emit("reshape", {v}, {{"shape", std::vector<int64_t>(shp(v).begin(), shp(v).end())}}, out_name(k)));
  }
  int tensor(size_t k) {
    int x = node(k);
    if (!is_float(ts_.dtypes[x])) fail("input " + std::to_string(k) + " must be a float tensor");
    if (ts_.dtypes[x] == DType::f64)  // these run in f32: a double tensor is refused, never narrowed
      unsupported("input " + std::to_string(k) + " is double; the training operators run in float32");
    return cast(x, DType::f32);
  }

  void map_Adagrad() {
    const int64_t n = tensors(3);
    const int R = scalar_in(0, "R"), T = scalar_in(1, "T");
    const double decay = af("decay_factor", 0), eps = af("epsilon", 0), norm = af("norm_coefficient", 0);
    const int r = div(R, add(c(1), mul(T, c(decay))));
    for (int64_t i = 0; i < n; ++i) {
      const int x = tensor(2 + i), g = tensor(2 + n + i), h = tensor(2 + 2 * n + i);
      const int gr = add(mul(c(norm), x), g);
      const int hn = add(h, mul(gr, gr));
      out((size_t)i, sub(x, div(mul(r, gr), add(emit("sqrt", {hn}), c(eps)))));
      out((size_t)(n + i), hn);
    }
  }

  void map_Momentum() {
    const int64_t n = tensors(3);
    const int R = scalar_in(0, "R"), T = scalar_in(1, "T");
    auto need = [&](const char* a) {
      if (!attr(a, kAttrFloat)) fail(std::string("attribute '") + a + "' is required");
      return af(a, 0);
    };
    const double alpha = need("alpha"), beta = need("beta"), norm = need("norm_coefficient");
    const std::string mode = as("mode", "");
    if (mode != "standard" && mode != "nesterov") fail("mode must be \"standard\" or \"nesterov\", it is \"" + mode + "\"");
    const int b = emit("where", {positive(T), c(beta), c(1)});  // the first step's coefficient is 1
    for (int64_t i = 0; i < n; ++i) {
      const int x = tensor(2 + i), g = tensor(2 + n + i), v = tensor(2 + 2 * n + i);
      const int gr = add(mul(c(norm), x), g);
      const int vn = add(mul(c(alpha), v), mul(b, gr));
      const int step = mode == "standard" ? vn : add(gr, mul(c(alpha), vn));
      out((size_t)i, sub(x, mul(R, step)));
      out((size_t)(n + i), vn);
    }
  }

  void map_Adam() {
    const int64_t n = tensors(4);
    const int R = scalar_in(0, "R"), T = scalar_in(1, "T");
    const double alpha = af("alpha", 0.9), beta = af("beta", 0.999), eps = af("epsilon", 1e-6);
    const double norm = af("norm_coefficient", 0), post = af("norm_coefficient_post", 0);
    // bias correction once T > 0: R sqrt(1 - beta^T) / (1 - alpha^T); R itself at T = 0
    const int corrected = div(mul(R, emit("sqrt", {sub(c(1), emit("pow", {c(beta), T}))})), sub(c(1), emit("pow", {c(alpha), T})));
    const int r = emit("where", {positive(T), corrected, R});
    for (int64_t i = 0; i < n; ++i) {
      const int x = tensor(2 + i), g = tensor(2 + n + i), v = tensor(2 + 2 * n + i), h = tensor(2 + 3 * n + i);
      const int gr = add(mul(c(norm), x), g);
      const int vn = add(mul(c(alpha), v), mul(c(1 - alpha), gr));
      const int hn = add(mul(c(beta), h), mul(c(1 - beta), mul(gr, gr)));
      const int xn = sub(x, mul(r, div(vn, add(emit("sqrt", {hn}), c(eps)))));
      out((size_t)i, mul(c(1 - post), xn));
      out((size_t)(n + i), vn);
      out((size_t)(2 * n + i), hn);
    }
  }
};

}  // namespace

void training_ops(std::vector<OpDef>& t) {
  using F = Training;
  const char* d = "ai.onnx.preview.training";
  t.insert(t.end(), {
      {"Adagrad", d, 1, map<&F::map_Adagrad>, nullptr, "div, add, mul, sub, sqrt", "sqrt",
       "domain ai.onnx.preview.training; any number of tensors; float32 arithmetic"},
      {"Momentum", d, 1, map<&F::map_Momentum>, nullptr, "mul, add, sub, greater, where", "where",
       "as Adagrad; modes standard and nesterov"},
      {"Adam", d, 1, map<&F::map_Adam>, nullptr, "mul, add, sub, div, sqrt, pow, greater, where", "sqrt pow where",
       "as Adagrad; bias correction when T > 0 (T may be known only at run time)"},
  });
}

}  // namespace rlx::onnx
