// Elementwise ONNX operators: arithmetic, activations, comparisons, logic and casts. Most
// are one registry op; the rest are short compositions. With every input known on the host
// (shape arithmetic), the arithmetic, comparison and logic operators fold to exact values.
#include <cmath>
#include <functional>
#include <limits>
#include "onnx/importer.h"

namespace rlx::onnx {

namespace {

const std::map<std::string, const char*> unary_ops = {
    {"Neg", "neg"}, {"Exp", "exp"}, {"Log", "log"}, {"Sqrt", "sqrt"}, {"Tanh", "tanh"}, {"Erf", "erf"},
    {"Sigmoid", "sigmoid"}, {"Relu", "relu"}, {"Abs", "abs"}, {"Sin", "sin"}, {"Cos", "cos"}, {"Floor", "floor"},
    {"Ceil", "ceil"}, {"Round", "round"}, {"Sign", "sign"}, {"Not", "logical_not"},
    {"Asin", "asin"}, {"Acos", "acos"}, {"Atan", "atan"}};
const std::map<std::string, const char*> binary_ops = {
    {"Add", "add"}, {"Sub", "sub"}, {"Mul", "mul"}, {"Pow", "pow"},
    {"Equal", "equal"}, {"Less", "less"}, {"Greater", "greater"}, {"LessOrEqual", "less_equal"},
    {"GreaterOrEqual", "greater_equal"}, {"And", "logical_and"}, {"Or", "logical_or"}, {"Xor", "logical_xor"}};

struct Elementwise : Importer {
  using Importer::Importer;

  // Ops that are one registry op of the same arity.
  void map_unary() { unary(unary_ops.at(cur_->op_type)); }
  void map_binary() {
    const std::string& op = cur_->op_type;
    if ((op == "Add" || op == "Sub" || op == "Mul") && in(0).et != in(1).et && !(float_et(in(0).et) && float_et(in(1).et)))
      fail("inputs have different element types");
    return binary(binary_ops.at(op));
  }
  void map_Div() {
    int d = emit("div", {node(0), node(1)}, {}, float_et(in(0).et) ? out_name() : "");
    if (!float_et(in(0).et)) d = emit("cast", {d}, {{"dtype", std::string(dtype_name(to_dtype(in(0).et, where())))}}, out_name());
    return set_node(0, d);
  }
  // Pow's result has the base's element type: an integer base gives the float power cast back
  // (truncated toward zero, as the ONNX reference's astype), like Div of integers.
  void map_Pow() {
    if (float_et(in(0).et)) return binary("pow");
    int d = emit("pow", {node(0), node(1)});
    return set_node(0, emit("cast", {d}, {{"dtype", std::string(dtype_name(to_dtype(in(0).et, where())))}}, out_name()));
  }
  void map_Mod() {
    return set_node(0, emit("mod", {node(0), node(1)}, {{"fmod", (bool)ai("fmod", 0)}}, out_name()));
  }
  void map_BitShift() {
    const std::string d = as("direction", "");
    if (d != "LEFT" && d != "RIGHT") fail("attribute 'direction' is \"" + d + "\"; expected \"LEFT\" or \"RIGHT\"");
    return set_node(0, emit("bit_shift", {node(0), node(1)}, {{"direction", std::string(d == "LEFT" ? "left" : "right")}},
                            out_name()));
  }
  void map_Reciprocal() {
    int x = node(0); return set_node(0, emit("div", {scalar_like(1, x), x}, {}, out_name()));
  }
  void map_Softplus() {
    if (ir::op_from_name("softplus")) return unary("softplus");
    int x = node(0);  // max(x,0) + log(1 + exp(-|x|)), stable
    int t = emit("log", {emit("add", {scalar_like(1, x), emit("exp", {emit("neg", {emit("abs", {x})})})})});
    return set_node(0, emit("add", {emit("relu", {x}), t}, {}, out_name()));
  }
  void map_LeakyRelu() {
    int x = node(0);
    return set_node(0, leaky_relu(x, af("alpha", 0.01), out_name()));
  }
  void map_Elu() {
    int x = node(0);
    double a = af("alpha", 1.0);
    int neg = emit("mul", {scalar_like(a, x), emit("sub", {emit("exp", {emit("minimum", {x, scalar_like(0, x)})}), scalar_like(1, x)})});
    return set_node(0, emit("add", {emit("relu", {x}), neg}, {}, out_name()));
  }
  void map_HardSigmoid_HardSwish() {
    const std::string& op = cur_->op_type;
    int x = node(0);
    double a = op == "HardSwish" ? 1.0 / 6 : af("alpha", 0.2), b = op == "HardSwish" ? 0.5 : af("beta", 0.5);
    int y = hard_sigmoid(x, a, b, op == "HardSigmoid" ? out_name() : "");
    if (op == "HardSwish") y = emit("mul", {x, y}, {}, out_name());
    return set_node(0, y);
  }
  void map_IsNaN() {  // NaN is the one value not equal to itself
    int x = node(0);
    if (!float_et(in(0).et)) fail("the input must be floating point");
    return set_node(0, emit("logical_not", {emit("equal", {x, x})}, {}, out_name()));
  }
  void map_IsInf() {  // |x| above the type's largest finite value (no infinite constant needed); NaN is not
    int x = node(0);
    if (!float_et(in(0).et)) fail("the input must be floating point");
    const DType dt = ts_.dtypes[x];
    const double big = dt == DType::f16 ? 65504.0 : dt == DType::bf16 ? 3.3895313892515355e38 : 3.4028234663852886e38;
    const bool pos = ai("detect_positive", 1) != 0, neg = ai("detect_negative", 1) != 0;
    int inf = emit("greater", {emit("abs", {x}), scalar_like(big, x)}, {}, pos && neg ? out_name() : "");
    if (pos && neg) return set_node(0, inf);
    if (!pos && !neg) return set_node(0, emit("logical_and", {inf, emit("logical_not", {inf})}, {}, out_name()));
    int side = emit(pos ? "greater" : "less", {x, scalar_like(0, x)});
    return set_node(0, emit("logical_and", {inf, side}, {}, out_name()));
  }
  // x where x >= 0, else slope * x (slope broadcasts to x), as max(x, 0) + slope * min(x, 0):
  // elementwise ops only, so that it fuses with its neighbours and into a convolution's epilogue
  // (as where(less(x, 0), ...) it ran as two unfused passes, 60% of conv_tasnet's time). NaN
  // propagates through maximum and minimum as through where.
  void map_PRelu() {
    int x = node(0);
    int pos = emit("maximum", {x, scalar_like(0, x)}), neg = emit("minimum", {x, scalar_like(0, x)});
    return set_node(0, emit("add", {pos, emit("mul", {neg, node(1)})}, {}, out_name()));
  }
  void map_Selu_Celu() {
    const std::string& op = cur_->op_type;
    // Selu: gamma * (max(x, 0) + alpha * (exp(min(x, 0)) - 1)); Celu: max(x, 0) + alpha * (exp(min(x, 0) / alpha) - 1)
    int x = node(0);
    const bool selu = op == "Selu";
    double a = af("alpha", selu ? 1.67326319217681884765625 : 1.0);
    if (!selu && a == 0) fail("alpha must not be 0");
    int neg = emit("minimum", {x, scalar_like(0, x)});
    if (!selu) neg = emit("div", {neg, scalar_like(a, x)});
    int e = emit("mul", {scalar_like(a, x), emit("sub", {emit("exp", {neg}), scalar_like(1, x)})});
    int y = emit("add", {emit("relu", {x}), e}, {}, selu ? "" : out_name());
    if (selu) y = emit("mul", {y, scalar_like(af("gamma", 1.05070102214813232421875), x)}, {}, out_name());
    return set_node(0, y);
  }
  void map_ThresholdedRelu() {
    int x = node(0);
    return set_node(0, emit("where", {emit("greater", {x, scalar_like(af("alpha", 1.0), x)}), x, scalar_like(0, x)}, {}, out_name()));
  }
  void map_Shrink() {  // x - bias where x > lambd, x + bias where x < -lambd, else 0
    int x = node(0);
    double b = af("bias", 0.0), l = af("lambd", 0.5);
    int lo = emit("where", {emit("less", {x, scalar_like(-l, x)}), emit("add", {x, scalar_like(b, x)}), scalar_like(0, x)});
    return set_node(0, emit("where", {emit("greater", {x, scalar_like(l, x)}), emit("sub", {x, scalar_like(b, x)}), lo}, {}, out_name()));
  }
  void map_Softsign() {
    return set_node(0, softsign(node(0), out_name()));
  }
  void map_Tan() {
    int x = node(0);
    return set_node(0, emit("div", {emit("sin", {x}), emit("cos", {x})}, {}, out_name()));
  }
  void map_Sinh_Cosh() {  // (exp(x) -/+ exp(-x)) / 2
    const std::string& op = cur_->op_type;
    int x = node(0);
    int ep = emit("exp", {x}), en = emit("exp", {emit("neg", {x})});
    return set_node(0, emit("mul", {emit(op == "Sinh" ? "sub" : "add", {ep, en}), scalar_like(0.5, x)}, {}, out_name()));
  }
  void map_Asinh() {  // sign(x) * log(|x| + sqrt(x^2 + 1)): no cancellation for negative x
    int x = node(0), ax = emit("abs", {x});
    int l = emit("log", {emit("add", {ax, emit("sqrt", {emit("add", {emit("square", {x}), scalar_like(1, x)})})})});
    return set_node(0, emit("mul", {emit("sign", {x}), l}, {}, out_name()));
  }
  void map_Acosh() {  // log(x + sqrt(x^2 - 1))
    int x = node(0);
    return set_node(0, emit("log", {emit("add", {x, emit("sqrt", {emit("sub", {emit("square", {x}), scalar_like(1, x)})})})}, {}, out_name()));
  }
  void map_Atanh() {  // log((1 + x) / (1 - x)) / 2
    int x = node(0), one = scalar_like(1, x);
    int r = emit("div", {emit("add", {one, x}), emit("sub", {one, x})});
    return set_node(0, emit("mul", {emit("log", {r}), scalar_like(0.5, x)}, {}, out_name()));
  }
  void map_Clip() {
    const int64_t opset = m_.opset();
    int x = node(0);
    int lo = -1, hi = -1;
    if (opset < 11) {
      if (attr("min", kAttrFloat)) lo = scalar_like(af("min", 0), x);
      if (attr("max", kAttrFloat)) hi = scalar_like(af("max", 0), x);
    } else {
      if (has_in(1)) lo = reshape(node(1), {});
      if (has_in(2)) hi = reshape(node(2), {});
    }
    int y = x;
    if (lo >= 0) y = emit("maximum", {y, lo}, {}, hi < 0 ? out_name() : "");
    if (hi >= 0) y = emit("minimum", {y, hi}, {}, out_name());
    return set_node(0, y);
  }
  void map_Where() {
    return set_node(0, emit("where", {node(0), node(1), node(2)}, {}, out_name()));
  }
  void map_Cast() {
    const std::string& op = cur_->op_type;
    int to = op == "Cast" ? (int)ai("to", 0) : in(1).et;
    DType dt = to_dtype(to, where() + ": attribute 'to'");
    int x = node(0);
    if (ts_.dtypes[x] == dt) return set_node(0, x);
    return set_node(0, emit("cast", {x}, {{"dtype", std::string(dtype_name(dt))}}, out_name()));
  }
  void map_variadic() {
    const NodeDef& n = *cur_;
    const std::string& op = n.op_type;
    const char* b = op == "Max" ? "maximum" : op == "Min" ? "minimum" : "add";
    int y = node(0);
    size_t cnt = 0;
    for (size_t k = 0; k < n.inputs.size(); ++k) if (has_in(k)) cnt++;
    for (size_t k = 1; k < n.inputs.size(); ++k)
      if (has_in(k)) y = emit(b, {y, node(k)}, {}, (k + 1 == n.inputs.size() && op != "Mean") ? out_name() : "");
    if (op == "Mean") y = emit("mul", {y, scalar_like(1.0 / (double)cnt, y)}, {}, out_name());
    return set_node(0, y);
  }
  bool fold_Cast() {
    if (!inputs_known()) return false;
    Val& x = in(0);
    auto hx = host(0);
    const std::string& op = cur_->op_type;
    int to = op == "Cast" ? (int)ai("to", kFloat) : in(1).et;
    Host h = *hx;
    if (!float_et(to) && h.is_float) {
      h.i.clear();
      for (double v : h.f) h.i.push_back(sat_i64(v));
      h.f.clear();
      h.is_float = false;
    } else if (float_et(to)) {  // the values the cast gives: rounded once to the target float type
      const DType dt = to_dtype(to, where() + ": attribute 'to'");
      if (!h.is_float) {
        h.f.assign(h.i.begin(), h.i.end());
        h.i.clear();
        h.is_float = true;
      }
      std::vector<uint8_t> tmp(dtype_size(dt));
      for (double& v : h.f) {
        convert_elements(&v, DType::f64, tmp.data(), dt, 1);
        convert_elements(tmp.data(), dt, &v, DType::f64, 1);
      }
    }
    set_host(0, x.shape, to, h);
    return true;
  }
  bool fold_And_Or() {
    if (!inputs_known()) return false;
    const std::string& op = cur_->op_type;
    bool isand = op == "And";
    fold_elementwise(kBool, 2, [&](const std::vector<const Host*>& hs, const std::vector<int64_t>& ix, Host& out) {
      bool a = hs[0]->n(ix[0]) != 0, b = hs[1]->n(ix[1]) != 0;
      out.i.push_back(isand ? (a && b) : (a || b));
    });
    return true;
  }
  bool fold_Where() {
    if (!inputs_known()) return false;
    int et = in(1).et;
    fold_elementwise(et, 3, [&](const std::vector<const Host*>& hs, const std::vector<int64_t>& ix, Host& out) {
      const Host* pick = hs[0]->n(ix[0]) ? hs[1] : hs[2];
      int64_t k = hs[0]->n(ix[0]) ? ix[1] : ix[2];
      if (float_et(et)) out.f.push_back(pick->d(k)); else out.i.push_back(pick->n(k));
    });
    return true;
  }
  bool fold_Min_Max() {
    if (!inputs_known()) return false;
    Val& x = in(0);
    const bool fl = float_et(x.et);
    const std::string& op = cur_->op_type;
    bool mx = op == "Max";
    fold_elementwise(x.et, 1, [&](const std::vector<const Host*>& hs, const std::vector<int64_t>& ix, Host& out) {
      if (fl) {
        double r = hs[0]->d(ix[0]);
        for (size_t k = 1; k < hs.size(); ++k) r = mx ? std::max(r, hs[k]->d(ix[k])) : std::min(r, hs[k]->d(ix[k]));
        out.f.push_back(r);
      } else {
        int64_t r = hs[0]->n(ix[0]);
        for (size_t k = 1; k < hs.size(); ++k) r = mx ? std::max(r, hs[k]->n(ix[k])) : std::min(r, hs[k]->n(ix[k]));
        out.i.push_back(r);
      }
    });
    return true;
  }

  // ---- folds: exact values on the host when every input is known ----
  // One formula over broadcast host inputs: unary (ff on floats, fi on integers), binary, comparison.
  bool fold_unary(std::function<double(double)> ff, std::function<int64_t(int64_t)> fi, bool float_only = false) {
    if (!inputs_known()) return false;
    Val& x = in(0);
    const bool fl = float_et(x.et);
    if (float_only && !fl) return false;
    // No host function for this type (Not of a float, found by fuzz_onnx_struct: it called an
    // empty std::function): left to the mapping, whose registry op refuses the dtype.
    if (fl ? !ff : !fi) return false;
    fold_elementwise(x.et, 1, [&](const std::vector<const Host*>& hs, const std::vector<int64_t>& ix, Host& out) {
      if (fl) out.f.push_back(ff(hs[0]->d(ix[0])));
      else out.i.push_back(fi(hs[0]->n(ix[0])));
    });
    return true;
  }
  bool fold_binary(std::function<double(double, double)> ff, std::function<int64_t(int64_t, int64_t)> fi) {
    if (!inputs_known()) return false;
    Val& x = in(0);
    const bool fl = float_et(x.et);
    const int out_et = x.et;
    fold_elementwise(out_et, 2, [&](const std::vector<const Host*>& hs, const std::vector<int64_t>& ix, Host& out) {
      if (fl) {
        double r = ff(hs[0]->d(ix[0]), hs[1]->d(ix[1]));
        if (float_et(out_et)) out.f.push_back(r); else out.i.push_back(sat_i64(r));
      } else {
        out.i.push_back(fi(hs[0]->n(ix[0]), hs[1]->n(ix[1])));
      }
    });
    return true;
  }
  bool fold_compare(std::function<bool(double, double)> f) {
    if (!inputs_known()) return false;
    fold_elementwise(kBool, 2, [&](const std::vector<const Host*>& hs, const std::vector<int64_t>& ix, Host& out) {
      bool r = (hs[0]->is_float || hs[1]->is_float) ? f(hs[0]->d(ix[0]), hs[1]->d(ix[1]))
                                                   : f((double)hs[0]->n(ix[0]), (double)hs[1]->n(ix[1]));
      if (!hs[0]->is_float && !hs[1]->is_float) {
        int64_t a = hs[0]->n(ix[0]), b = hs[1]->n(ix[1]);  // exact for large int64
        r = f(a < b ? -1.0 : a > b ? 1.0 : 0.0, 0.0);
      }
      out.i.push_back(r);
    });
    return true;
  }
  // Folded integer arithmetic that leaves int64 is refused, not wrapped (found by
  // fuzz_onnx_struct: Abs of -2^63 was signed-overflow UB); such values only come from hostile
  // or broken shape arithmetic, and a wrapped shape would be a silent misreading.
  [[noreturn]] void int_overflow(const std::string& expr) const { fail("integer overflow: " + expr + " does not fit int64"); }
  int64_t checked_neg(int64_t a) const {
    if (a == std::numeric_limits<int64_t>::min()) int_overflow("-(" + std::to_string(a) + ")");
    return -a;
  }
  std::function<int64_t(int64_t, int64_t)> checked(char op) const {
    return [this, op](int64_t a, int64_t b) {
      int64_t r = 0;
      bool over = op == '+' ? __builtin_add_overflow(a, b, &r) : op == '-' ? __builtin_sub_overflow(a, b, &r)
                                                                        : __builtin_mul_overflow(a, b, &r);
      if (over) int_overflow(std::to_string(a) + " " + op + " " + std::to_string(b));
      return r;
    };
  }
  bool fold_Neg() { return fold_unary([](double a) { return -a; }, [this](int64_t a) { return checked_neg(a); }); }
  bool fold_Abs() { return fold_unary([](double a) { return std::fabs(a); }, [this](int64_t a) { return a < 0 ? checked_neg(a) : a; }); }
  bool fold_Sign() { return fold_unary([](double a) { return (double)((a > 0) - (a < 0)); }, [](int64_t a) { return (int64_t)((a > 0) - (a < 0)); }); }
  bool fold_Sqrt() { return fold_unary([](double a) { return std::sqrt(a); }, nullptr, true); }
  bool fold_Reciprocal() { return fold_unary([](double a) { return 1.0 / a; }, nullptr, true); }
  bool fold_Floor() { return fold_unary([](double a) { return std::floor(a); }, [](int64_t a) { return a; }); }
  bool fold_Ceil() { return fold_unary([](double a) { return std::ceil(a); }, [](int64_t a) { return a; }); }
  bool fold_Relu() { return fold_unary([](double a) { return a < 0 ? 0.0 : a; }, [](int64_t a) { return a > 0 ? a : (int64_t)0; }); }  // NaN stays NaN
  bool fold_Not() {
    // ONNX's Not takes bool only: a float or integer input is refused, not read as "nonzero"
    // (this runs before the mapping, for known and unknown inputs alike).
    if (in(0).et != kBool) fail("input must be bool, got " + std::string(elem_type_name(in(0).et)));
    return fold_unary(nullptr, [](int64_t a) { return (int64_t)!a; });
  }
  bool fold_Add() { return fold_binary(std::plus<double>(), checked('+')); }
  bool fold_Sub() { return fold_binary(std::minus<double>(), checked('-')); }
  bool fold_Mul() { return fold_binary(std::multiplies<double>(), checked('*')); }
  bool fold_Div() {
    if (!inputs_known()) return false;
    if (!float_et(in(0).et)) {
      auto hb = need_host(1, "B");
      for (size_t k = 0; k < hb->size(); ++k) if (hb->n(k) == 0) fail("integer division by zero");
    }
    return fold_binary([](double a, double b) { return a / b; }, [this](int64_t a, int64_t b) {
      if (a == std::numeric_limits<int64_t>::min() && b == -1) int_overflow(std::to_string(a) + " / -1");
      return a / b;  // C++ truncates like ONNX
    });
  }
  bool fold_Mod() {
    if (!inputs_known()) return false;
    bool fm = ai("fmod", 0);
    if (!float_et(in(0).et)) {
      auto hb = need_host(1, "B");
      for (size_t k = 0; k < hb->size(); ++k) if (hb->n(k) == 0) fail("integer modulo by zero");
    }
    return fold_binary([fm](double a, double b) { double r = std::fmod(a, b); if (!fm && r != 0 && ((r < 0) != (b < 0))) r += b; return r; },
                       [fm](int64_t a, int64_t b) { int64_t r = b == -1 ? 0 : a % b; if (!fm && r != 0 && ((r < 0) != (b < 0))) r += b; return r; });
  }
  bool fold_Equal() { return fold_compare([](double a, double b) { return a == b; }); }
  bool fold_Less() { return fold_compare([](double a, double b) { return a < b; }); }
  bool fold_Greater() { return fold_compare([](double a, double b) { return a > b; }); }
  bool fold_LessOrEqual() { return fold_compare([](double a, double b) { return a <= b; }); }
  bool fold_GreaterOrEqual() { return fold_compare([](double a, double b) { return a >= b; }); }
};

}  // namespace

void elementwise_ops(std::vector<OpDef>& t) {
  using F = Elementwise;
  t.insert(t.end(), {
      {"Add", "", 1, map<&F::map_binary>, fold<&F::fold_Add>, "add", "add", "folded on the host when both inputs are known"},
      {"Sub", "", 1, map<&F::map_binary>, fold<&F::fold_Sub>, "sub", "sub", "folded on the host when both inputs are known"},
      {"Mul", "", 1, map<&F::map_binary>, fold<&F::fold_Mul>, "mul", "mul", "folded on the host when both inputs are known"},
      {"Div", "", 1, map<&F::map_Div>, fold<&F::fold_Div>, "div (+ cast for integers: truncation)", "div", "folded on the host when both inputs are known"},
      {"Pow", "", 1, map<&F::map_Pow>, nullptr, "pow", "pow", "an integer base: the float power cast to its type"},
      {"Neg", "", 1, map<&F::map_unary>, fold<&F::fold_Neg>, "neg", "neg", ""},
      {"Exp", "", 1, map<&F::map_unary>, nullptr, "exp", "exp", ""},
      {"Log", "", 1, map<&F::map_unary>, nullptr, "log", "log", ""},
      {"Sqrt", "", 1, map<&F::map_unary>, fold<&F::fold_Sqrt>, "sqrt", "sqrt", ""},
      {"Reciprocal", "", 1, map<&F::map_Reciprocal>, fold<&F::fold_Reciprocal>, "div", "div", ""},
      {"Tanh", "", 1, map<&F::map_unary>, nullptr, "tanh", "tanh", ""},
      {"Erf", "", 1, map<&F::map_unary>, nullptr, "erf", "erf", ""},
      {"Sigmoid", "", 1, map<&F::map_unary>, nullptr, "sigmoid", "sigmoid", ""},
      {"Relu", "", 1, map<&F::map_unary>, fold<&F::fold_Relu>, "relu", "relu", ""},
      {"LeakyRelu", "", 1, map<&F::map_LeakyRelu>, nullptr, "mul, maximum", "mul maximum", ""},
      {"Elu", "", 1, map<&F::map_Elu>, nullptr, "relu, minimum, exp, sub, mul, add", "relu minimum exp", ""},
      {"Softplus", "", 1, map<&F::map_Softplus>, nullptr, "softplus (or relu/abs/exp/log decomposition)", "relu abs exp log", "stable form max(x,0)+log1p(exp(-|x|))"},
      {"HardSigmoid", "", 1, map<&F::map_HardSigmoid_HardSwish>, nullptr, "mul, add, maximum, minimum", "maximum minimum", ""},
      {"HardSwish", "", 1, map<&F::map_HardSigmoid_HardSwish>, nullptr, "mul, add, maximum, minimum", "maximum minimum", ""},
      {"PRelu", "", 1, map<&F::map_PRelu>, nullptr, "maximum, minimum, mul, add", "maximum minimum mul add", "slope broadcasts to the input"},
      {"Selu", "", 1, map<&F::map_Selu_Celu>, nullptr, "minimum, exp, relu, mul, add", "minimum exp relu", ""},
      {"Celu", "", 1, map<&F::map_Selu_Celu>, nullptr, "minimum, div, exp, relu, mul, add", "minimum exp relu", ""},
      {"ThresholdedRelu", "", 1, map<&F::map_ThresholdedRelu>, nullptr, "greater, where", "greater where", ""},
      {"Shrink", "", 1, map<&F::map_Shrink>, nullptr, "less, greater, add, sub, where", "less greater where", ""},
      {"Softsign", "", 1, map<&F::map_Softsign>, nullptr, "abs, add, div", "abs div", ""},
      {"Abs", "", 1, map<&F::map_unary>, fold<&F::fold_Abs>, "abs", "abs", ""},
      {"Floor", "", 1, map<&F::map_unary>, fold<&F::fold_Floor>, "floor", "floor", ""},
      {"Ceil", "", 1, map<&F::map_unary>, fold<&F::fold_Ceil>, "ceil", "ceil", ""},
      {"Round", "", 1, map<&F::map_unary>, nullptr, "round", "round", "half to even"},
      {"Sign", "", 1, map<&F::map_unary>, fold<&F::fold_Sign>, "sign", "sign", ""},
      {"Sin", "", 1, map<&F::map_unary>, nullptr, "sin", "sin", ""},
      {"Cos", "", 1, map<&F::map_unary>, nullptr, "cos", "cos", ""},
      {"Tan", "", 1, map<&F::map_Tan>, nullptr, "sin, cos, div", "sin cos div", ""},
      {"Asin", "", 7, map<&F::map_unary>, nullptr, "asin", "asin", ""},
      {"Acos", "", 7, map<&F::map_unary>, nullptr, "acos", "acos", ""},
      {"Atan", "", 7, map<&F::map_unary>, nullptr, "atan", "atan", ""},
      {"Sinh", "", 1, map<&F::map_Sinh_Cosh>, nullptr, "exp, neg, sub, mul", "exp", ""},
      {"Cosh", "", 1, map<&F::map_Sinh_Cosh>, nullptr, "exp, neg, add, mul", "exp", ""},
      {"Asinh", "", 1, map<&F::map_Asinh>, nullptr, "sign(x) log(|x| + sqrt(x^2 + 1))", "sign log sqrt", ""},
      {"Acosh", "", 1, map<&F::map_Acosh>, nullptr, "log(x + sqrt(x^2 - 1))", "log sqrt", ""},
      {"Atanh", "", 1, map<&F::map_Atanh>, nullptr, "log((1 + x) / (1 - x)) / 2", "log div", ""},
      {"Max", "", 1, map<&F::map_variadic>, fold<&F::fold_Min_Max>, "maximum (variadic: a chain)", "maximum", ""},
      {"Min", "", 1, map<&F::map_variadic>, fold<&F::fold_Min_Max>, "minimum (variadic: a chain)", "minimum", ""},
      {"Sum", "", 1, map<&F::map_variadic>, nullptr, "add (chain)", "add", ""},
      {"Mean", "", 1, map<&F::map_variadic>, nullptr, "add (chain), mul", "add mul", ""},
      {"Clip", "", 1, map<&F::map_Clip>, nullptr, "maximum, minimum", "maximum minimum", "min/max from attributes (opset < 11) or inputs"},
      {"Where", "", 1, map<&F::map_Where>, fold<&F::fold_Where>, "where", "where", "folded when all inputs are known"},
      {"Equal", "", 1, map<&F::map_binary>, fold<&F::fold_Equal>, "equal", "equal", "folded when both inputs are known"},
      {"Less", "", 1, map<&F::map_binary>, fold<&F::fold_Less>, "less", "less", ""},
      {"Greater", "", 1, map<&F::map_binary>, fold<&F::fold_Greater>, "greater", "greater", ""},
      {"LessOrEqual", "", 1, map<&F::map_binary>, fold<&F::fold_LessOrEqual>, "less_equal", "less_equal", ""},
      {"GreaterOrEqual", "", 1, map<&F::map_binary>, fold<&F::fold_GreaterOrEqual>, "greater_equal", "greater_equal", ""},
      {"Not", "", 1, map<&F::map_unary>, fold<&F::fold_Not>, "logical_not", "logical_not", ""},
      {"IsNaN", "", 1, map<&F::map_IsNaN>, nullptr, "equal, logical_not", "equal logical_not", "x != x"},
      {"IsInf", "", 1, map<&F::map_IsInf>, nullptr, "abs, greater, less, logical_and", "abs greater logical_and", "|x| above the largest finite value; detect_positive/negative"},
      {"And", "", 1, map<&F::map_binary>, fold<&F::fold_And_Or>, "logical_and", "logical_and", ""},
      {"Or", "", 1, map<&F::map_binary>, fold<&F::fold_And_Or>, "logical_or", "logical_or", ""},
      {"Xor", "", 1, map<&F::map_binary>, nullptr, "logical_xor", "logical_xor", ""},
      {"Mod", "", 1, map<&F::map_Mod>, fold<&F::fold_Mod>, "mod", "mod", ""},
      {"BitShift", "", 11, map<&F::map_BitShift>, nullptr, "bit_shift", "bit_shift", "unsigned integers (uint8 to uint64)"},
      {"Cast", "", 1, map<&F::map_Cast>, fold<&F::fold_Cast>, "cast", "cast", "to float, double, float16, bfloat16, int8..int64, uint8..uint64 or bool"},
      {"CastLike", "", 1, map<&F::map_Cast>, fold<&F::fold_Cast>, "cast", "cast", ""},
  });
}

}  // namespace rlx::onnx
