// Recurrent layers: RNN, GRU and LSTM.
#include "onnx/importer.h"

namespace rlx::onnx {

namespace {

struct Rnn : Importer {
  using Importer::Importer;

  void recurrent();
};

// ----------------------------------------------------------------------------------------
// RNN, GRU and LSTM, unrolled over the sequence (its length is known once the model is
// specialised to the input shapes): the input projection of every step is one product, then
// each step is a product with the recurrence weights and the gate arithmetic.
void Rnn::recurrent() {
  const std::string& op = cur_->op_type;
  const int G = op == "RNN" ? 1 : op == "GRU" ? 3 : 4;  // gates
  const std::string dir = as("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
    fail("direction must be forward, reverse or bidirectional, got \"" + dir + "\"");
  const int D = dir == "bidirectional" ? 2 : 1;
  const bool layout1 = ai("layout", 0) != 0;
  int X = node(0), W = node(1), R = node(2);
  if (!float_et(in(0).et)) fail("X must be a floating-point tensor");
  if (shp(X).size() != 3) fail("X must be 3-D, got " + shape_str(shp(X)));
  if (layout1) X = emit("transpose", {X}, {{"perm", std::vector<int64_t>{1, 0, 2}}});
  const int64_t S = shp(X)[0], B = shp(X)[1], I = shp(X)[2];
  const int64_t Hn = shp(R).size() == 3 ? shp(R)[2] : -1;
  const int64_t H = ai("hidden_size", Hn);
  if (H <= 0) fail("hidden_size must be positive");
  if (shp(W) != Shape{D, G * H, I}) fail("W has shape " + shape_str(shp(W)) + ", expected " + shape_str(Shape{D, G * H, I}));
  if (shp(R) != Shape{D, G * H, H}) fail("R has shape " + shape_str(shp(R)) + ", expected " + shape_str(Shape{D, G * H, H}));
  if (S == 0) fail("the sequence is empty");
  if (has_in(4)) {  // sequence_lens: only the full length is supported
    auto lens = value_of(4);
    if (!lens) unsupported("sequence_lens (input 4) must be known when the model is loaded");
    for (size_t k = 0; k < lens->size(); ++k)
      if (lens->n(k) != S) unsupported("sequence_lens other than the full sequence length " + std::to_string(S) + " (got " + std::to_string(lens->n(k)) + ")");
  }
  const bool lbr = op == "GRU" && ai("linear_before_reset", 0) != 0;
  const bool input_forget = op == "LSTM" && ai("input_forget", 0) != 0;
  const std::vector<std::string> defaults = op == "RNN" ? std::vector<std::string>{"Tanh"}
                                            : op == "GRU" ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                          : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  const size_t per = defaults.size();
  std::vector<std::string> acts;
  std::vector<double> alphas, betas;
  if (auto a = attr("activations", kAttrStrings)) acts = a->strings;
  if (auto a = attr("activation_alpha", kAttrFloats)) alphas = a->floats;
  if (auto a = attr("activation_beta", kAttrFloats)) betas = a->floats;
  if (acts.empty()) for (int d = 0; d < D; ++d) acts.insert(acts.end(), defaults.begin(), defaults.end());
  if (acts.size() != per * D)
    fail("activations lists " + std::to_string(acts.size()) + " functions, expected " + std::to_string(per * D));
  auto clip = attr("clip", kAttrFloat);
  const DType dt = ts_.dtypes[X];
  auto act = [&](size_t k, int x) {
    if (clip) x = clamp(x, -clip->f, clip->f);
    const std::string& f = acts[k];
    auto alpha = [&](double def) { return k < alphas.size() ? alphas[k] : def; };
    auto beta = [&](double def) { return k < betas.size() ? betas[k] : def; };
    if (f == "Sigmoid") return emit("sigmoid", {x});
    if (f == "Tanh") return emit("tanh", {x});
    if (f == "Relu") return emit("relu", {x});
    if (f == "Softplus") return emit("softplus", {x});
    if (f == "Softsign") return softsign(x);
    if (f == "Affine") return emit("add", {emit("mul", {x, scalar_like(alpha(1.0), x)}), scalar_like(beta(0.0), x)});
    if (f == "LeakyRelu") return leaky_relu(x, alpha(0.01));
    if (f == "ScaledTanh") return emit("mul", {emit("tanh", {emit("mul", {x, scalar_like(beta(1.0), x)})}), scalar_like(alpha(1.0), x)});
    if (f == "HardSigmoid") return hard_sigmoid(x, alpha(0.2), beta(0.5));
    unsupported("activation function \"" + f + "\"");
  };
  auto state = [&](size_t k, int d) {  // initial_h / initial_c of direction d, or zeros
    if (has_in(k)) {
      int v = node(k);
      if (shp(v) != Shape{D, B, H}) fail("input " + std::to_string(k) + " has shape " + shape_str(shp(v)) + ", expected " + shape_str(Shape{D, B, H}));
      return reshape(narrow(v, 0, d, 1), {B, H});
    }
    return constant({B, H}, std::vector<double>(B * H, 0.0), dt);
  };
  const int xs = reshape(X, {S * B, I});
  std::vector<int> Ys, Hs, Cs;
  for (int d = 0; d < D; ++d) {
    const bool rev = dir == "reverse" || d == 1;
    const size_t a0 = per * d;
    int Wd = reshape(narrow(W, 0, d, 1), {G * H, I}), Rd = reshape(narrow(R, 0, d, 1), {G * H, H});
    int Wb = -1, Rb = -1;
    if (has_in(3)) {
      int Bv = node(3);
      if (shp(Bv) != Shape{D, 2 * G * H}) fail("B has shape " + shape_str(shp(Bv)) + ", expected " + shape_str(Shape{D, 2 * G * H}));
      int Bd = reshape(narrow(Bv, 0, d, 1), {2 * G * H});
      Wb = narrow(Bd, 0, 0, G * H);
      Rb = narrow(Bd, 0, G * H, G * H);
    }
    // Every step's input projection (and, but for GRU's candidate gate, the recurrence bias) at once.
    int xb = Wb;
    if (Rb >= 0 && op != "GRU") xb = emit("add", {Wb, Rb});
    int XW = reshape(xb >= 0 ? emit("linear", {xs, Wd, xb}) : emit("linear", {xs, Wd}), {S, B, G * H});
    int P = -1;
    if (op == "LSTM" && has_in(7)) {
      P = node(7);
      if (shp(P) != Shape{D, 3 * H}) fail("P has shape " + shape_str(shp(P)) + ", expected " + shape_str(Shape{D, 3 * H}));
      P = reshape(narrow(P, 0, d, 1), {3 * H});
    }
    int h = state(5, d), c = op == "LSTM" ? state(6, d) : -1;
    std::vector<int> ys(S);
    for (int64_t step = 0; step < S; ++step) {
      const int64_t t = rev ? S - 1 - step : step;
      int xw = reshape(narrow(XW, 0, t, 1), {B, G * H});
      if (op == "RNN") {
        h = act(a0, emit("add", {xw, emit("linear", {h, Rd})}));  // both biases are in xw
      } else if (op == "GRU") {
        // gates z, r, h; the recurrence product with its bias
        int hr = Rb >= 0 ? emit("linear", {h, Rd, Rb}) : emit("linear", {h, Rd});
        int z = act(a0, emit("add", {narrow(xw, 1, 0, H), narrow(hr, 1, 0, H)}));
        int r = act(a0, emit("add", {narrow(xw, 1, H, H), narrow(hr, 1, H, H)}));
        int cand;
        if (lbr) {
          cand = emit("add", {narrow(xw, 1, 2 * H, H), emit("mul", {r, narrow(hr, 1, 2 * H, H)})});
        } else {
          int Rh = narrow(Rd, 0, 2 * H, H);
          int rh = emit("mul", {r, h});
          cand = emit("add", {narrow(xw, 1, 2 * H, H), Rb >= 0 ? emit("linear", {rh, Rh, narrow(Rb, 0, 2 * H, H)}) : emit("linear", {rh, Rh})});
        }
        int hh = act(a0 + 1, cand);
        // (1 - z) * hh + z * h  =  hh + z * (h - hh)
        h = emit("add", {hh, emit("mul", {z, emit("sub", {h, hh})})});
      } else {
        // gates i, o, f, c
        int gates = emit("add", {xw, emit("linear", {h, Rd})});
        auto gate = [&](int k) { return narrow(gates, 1, k * H, H); };
        auto peep = [&](int g, int k, int cell) { return P >= 0 ? emit("add", {g, emit("mul", {narrow(P, 0, k * H, H), cell})}) : g; };
        int i = act(a0, peep(gate(0), 0, c));
        int f = input_forget ? emit("sub", {scalar_like(1, i), i}) : act(a0, peep(gate(2), 2, c));
        int cc = act(a0 + 1, gate(3));
        c = emit("add", {emit("mul", {f, c}), emit("mul", {i, cc})});
        int o = act(a0, peep(gate(1), 1, c));
        h = emit("mul", {o, act(a0 + 2, c)});
      }
      ys[t] = reshape(h, {1, 1, B, H});
    }
    Ys.push_back(concat_many(ys, 0));
    Hs.push_back(reshape(h, {1, B, H}));
    if (c >= 0) Cs.push_back(reshape(c, {1, B, H}));
  }
  int Y = D == 1 ? Ys[0] : emit("concat", {Ys[0], Ys[1]}, {{"axis", (int64_t)1}});
  int Yh = D == 1 ? Hs[0] : emit("concat", {Hs[0], Hs[1]}, {{"axis", (int64_t)0}});
  int Yc = Cs.empty() ? -1 : D == 1 ? Cs[0] : emit("concat", {Cs[0], Cs[1]}, {{"axis", (int64_t)0}});
  if (layout1) {
    Y = emit("transpose", {Y}, {{"perm", std::vector<int64_t>{2, 0, 1, 3}}});
    Yh = emit("transpose", {Yh}, {{"perm", std::vector<int64_t>{1, 0, 2}}});
    if (Yc >= 0) Yc = emit("transpose", {Yc}, {{"perm", std::vector<int64_t>{1, 0, 2}}});
  }
  set_node(0, Y);
  set_node(1, Yh);
  if (Yc >= 0) set_node(2, Yc);
}

}  // namespace

void rnn_ops(std::vector<OpDef>& t) {
  using F = Rnn;
  t.insert(t.end(), {
      {"RNN", "", 1, map<&F::recurrent>, nullptr, "unrolled: linear, add, activations, concat", "linear concat", "sequence_lens must be the full length; activations Sigmoid, Tanh, Relu, HardSigmoid, LeakyRelu, Affine, ScaledTanh, Softsign, Softplus"},
      {"GRU", "", 1, map<&F::recurrent>, nullptr, "unrolled: linear, narrow, add, mul, sub, activations, concat", "linear narrow concat", "linear_before_reset 0 or 1; as RNN"},
      {"LSTM", "", 1, map<&F::recurrent>, nullptr, "unrolled: linear, narrow, add, mul, activations, concat", "linear narrow concat", "peepholes, input_forget, clip; as RNN"},
  });
}

}  // namespace rlx::onnx
