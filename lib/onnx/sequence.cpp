// Sequences and optionals (docs/onnx.md, "Sequences and optionals"). A sequence's length and
// its elements' shapes are part of the specialisation, as a tensor's shape is: a sequence is a
// list of tensor values held by the importer (Val::seq), and every sequence operator is resolved
// when the model is specialised. SequenceConstruct/Insert/Erase/At/Length, SplitToSequence and
// ConcatFromSequence become the tensor ops they select (or nothing); SequenceMap imports its body
// once per element; an optional is a value or none. Positions (SequenceAt's, SequenceInsert's)
// must be known then: constants, shape arithmetic, or small inputs given by value (the plan is
// then specialised for that value). A sequence graph input `x` is given as its elements x.0,
// x.1, ... (`--input x.0=SPEC`), a sequence output `y` is written as y.0, y.1, ...
#include "onnx/importer.h"

namespace rlx::onnx {

Val Importer::sequence_input(const ValueInfo& vi) {
  Val v;
  v.defined = true;
  v.et = vi.elem_type;
  if (vi.type.kind == ValueKind::Optional) {
    v.optional = true;
    v.inner = vi.type.inner;
  }
  auto it = in_shapes_.find(vi.name);
  if (!vi.type.is_sequence()) {  // an optional tensor
    if (it == in_shapes_.end()) {
      v.none = true;
      return v;
    }
    Val t = tensor_input(vi.name, it->second, vi.elem_type);
    t.optional = true;
    return t;
  }
  if (it == in_shapes_.end()) {
    if (v.optional) {
      v.none = true;
      return v;
    }
    throw InputError(m_.file() + ": no value given for the sequence input '" + vi.name + "' (give its tensors as --input " + vi.name +
                     ".0=SPEC --input " + vi.name + ".1=SPEC ..., or --input " + vi.name + "=[] for an empty sequence)");
  }
  if (it->second.size() != 1 || it->second[0] < 0) throw InputError(m_.file() + ": sequence input '" + vi.name + "': bad length");
  std::vector<Val> elems;
  for (int64_t j = 0; j < it->second[0]; ++j) {
    const std::string name = vi.name + "." + std::to_string(j);
    auto e = in_shapes_.find(name);
    if (e == in_shapes_.end()) throw InputError(m_.file() + ": sequence input '" + vi.name + "': element " + name + " is missing");
    elems.push_back(tensor_input(name, e->second, vi.elem_type));
  }
  v.seq = std::make_shared<const std::vector<Val>>(std::move(elems));
  return v;
}

namespace {

struct Sequences : Importer {
  using Importer::Importer;
  static constexpr int64_t kMaxPieces = 65536;  // tensors SplitToSequence may make

  const std::vector<Val>& elems(size_t k) {
    Val& v = in(k);
    if (!v.seq) fail("input " + std::to_string(k) + " '" + cur_->inputs[k] + "' must be a sequence, it is " + v.kind_name());
    return *v.seq;
  }
  Val& tensor_in(size_t k) {
    Val& v = in(k);
    if (!v.is_tensor()) fail("input " + std::to_string(k) + " '" + cur_->inputs[k] + "' must be a tensor, it is " + v.kind_name());
    return v;
  }
  void set_seq(size_t k, std::vector<Val> e, int et) {
    Val v;
    v.et = et;
    v.seq = std::make_shared<const std::vector<Val>>(std::move(e));
    set_out(k, v);
  }
  // A position in a sequence of n: [-n, n - 1], or [-n, n] where one is inserted.
  int64_t position(size_t k, int64_t n, bool insert) {
    const int64_t p = need_scalar(k, "position")->n(0), hi = insert ? n : n - 1;
    if (p < -n || p > hi)
      fail("position " + std::to_string(p) + " is out of range for a sequence of " + std::to_string(n) + " tensors ([" + std::to_string(-n) + ", " +
           std::to_string(hi) + "])");
    return p < 0 ? p + n : p;
  }
  void same_type(int et, const Val& t, const char* what) {
    if (et && t.et != et)
      fail(std::string(what) + " is " + elem_type_name(t.et) + ", the sequence holds " + elem_type_name(et));
  }

  bool fold_SequenceEmpty() {
    const int et = (int)ai("dtype", kFloat);
    to_dtype(et, where());  // an element type rlx has
    set_seq(0, {}, et);
    return true;
  }
  bool fold_SequenceConstruct() {
    if (cur_->inputs.empty()) fail("SequenceConstruct needs at least one tensor");
    std::vector<Val> e;
    for (size_t k = 0; k < cur_->inputs.size(); ++k) {
      e.push_back(tensor_in(k));
      same_type(e[0].et, e.back(), ("input " + std::to_string(k)).c_str());
    }
    const int et = e[0].et;
    set_seq(0, std::move(e), et);
    return true;
  }
  bool fold_SequenceInsert() {
    std::vector<Val> e = elems(0);
    const int et = in(0).et;
    Val t = tensor_in(1);
    same_type(et, t, "the tensor");
    const int64_t n = (int64_t)e.size();
    const int64_t p = has_in(2) ? position(2, n, true) : n;
    t.optional = false;
    e.insert(e.begin() + p, t);
    set_seq(0, std::move(e), et ? et : t.et);
    return true;
  }
  bool fold_SequenceErase() {
    std::vector<Val> e = elems(0);
    const int et = in(0).et;
    if (e.empty()) fail("SequenceErase of an empty sequence");
    const int64_t n = (int64_t)e.size();
    const int64_t p = has_in(1) ? position(1, n, false) : n - 1;
    e.erase(e.begin() + p);
    set_seq(0, std::move(e), et);
    return true;
  }
  bool fold_SequenceAt() {
    const auto& e = elems(0);
    set_out(0, e[(size_t)position(1, (int64_t)e.size(), false)]);
    return true;
  }
  bool fold_SequenceLength() {
    Host h;
    h.i = {(int64_t)elems(0).size()};
    set_host(0, {}, kInt64, h);
    return true;
  }

  // SplitToSequence cuts its input along `axis` into pieces of the lengths `split` gives (a
  // scalar: equal pieces, the last shorter; a 1-D tensor: those lengths), else into slices of
  // one (without the axis when keepdims is 0): the lengths for an axis of L.
  std::vector<int64_t> split_lengths(int64_t L, bool& squeeze) {
    std::vector<int64_t> lens;
    squeeze = false;
    if (has_in(1)) {
      auto h = need_host(1, "split");
      if (in(1).shape.empty()) {
        const int64_t c = h->n(0);
        if (c <= 0) fail("split must be positive, it is " + std::to_string(c));
        for (int64_t at = 0; at < L; at += c) lens.push_back(std::min(c, L - at));
      } else {
        int64_t sum = 0;
        for (size_t j = 0; j < h->size(); ++j) {
          if (h->n(j) < 0) fail("split holds a negative length");
          lens.push_back(h->n(j));
          sum += h->n(j);
        }
        if (sum != L) fail("split sums to " + std::to_string(sum) + ", the axis has " + std::to_string(L));
      }
    } else {
      if (L > kMaxPieces) fail("splits into " + std::to_string(L) + " tensors, above the limit of " + std::to_string(kMaxPieces));
      lens.assign((size_t)L, 1);
      squeeze = ai("keepdims", 1) == 0;
    }
    if (lens.size() > kMaxPieces)
      fail("splits into " + std::to_string(lens.size()) + " tensors, above the limit of " + std::to_string(kMaxPieces));
    return lens;
  }

  // The pieces as `narrow` nodes, or, of a value known on the host (repeat_interleave's export
  // splits its repeats into a sequence that a loop reads one by one as shape arithmetic), as
  // host values, so shapes computed from the pieces stay known.
  void split_to_sequence(bool known) {
    const Val& xv = tensor_in(0);
    const int et = xv.et;
    const Shape s = xv.shape;
    if (s.empty()) fail("the input must have rank >= 1");
    const int ax = axis_of(ai("axis", 0), s.size());
    bool squeeze = false;
    const std::vector<int64_t> lens = split_lengths(s[ax], squeeze);
    const int x = known ? -1 : node(0);
    std::vector<Val> e;
    int64_t at = 0;
    for (int64_t len : lens) {
      Shape ps = s;
      ps[ax] = len;
      if (squeeze) ps.erase(ps.begin() + ax);
      if (known) {
        e.push_back(host_val(ps, et, host_slice(*host(0), s, (size_t)ax, at, len)));
      } else {
        int piece = narrow(x, ax, at, len);
        if (squeeze) piece = reshape(piece, ps);
        Val v;
        v.defined = true;
        v.node = piece;
        v.shape = ps;
        v.et = et;
        e.push_back(v);
      }
      at += len;
    }
    set_seq(0, std::move(e), et);
  }
  bool fold_SplitToSequence() {
    if (!host(0) || (has_in(1) && !host(1))) return false;
    split_to_sequence(true);
    return true;
  }
  void map_SplitToSequence() { split_to_sequence(false); }

  void map_ConcatFromSequence() {
    std::vector<Val> e = elems(0);
    if (e.empty()) fail("ConcatFromSequence of an empty sequence (its result's shape is unknown)");
    const bool new_axis = ai("new_axis", 0) != 0;
    const size_t r = e[0].shape.size() + (new_axis ? 1 : 0);
    const int ax = axis_of(ai("axis", 0), r);
    std::vector<int> xs;
    for (size_t j = 0; j < e.size(); ++j) {
      int x = materialize(e[j], cur_->inputs[0] + "." + std::to_string(j));
      if (new_axis) {
        Shape s = shp(x);
        s.insert(s.begin() + ax, 1);
        x = reshape(x, s);
      }
      xs.push_back(x);
    }
    int y = concat_many(xs, ax);
    if (g_->nodes[y].id != out_name()) y = reshape_out(y, shp(y));
    set_node(0, y);
  }

  // The body once per position of the input sequences (all of one length); tensor inputs are
  // passed whole to every call. Each body output becomes a sequence.
  void map_SequenceMap() {
    auto a = attr("body", kAttrGraph);
    if (!a || !a->g) fail("attribute 'body' (a graph) is required");
    const GraphDef& body = *a->g;
    if (cur_->inputs.empty()) fail("SequenceMap needs an input sequence");
    const int64_t n = (int64_t)elems(0).size();
    std::vector<Val> ins;
    for (size_t k = 0; k < cur_->inputs.size(); ++k) {
      Val& v = in(k);
      if (v.seq && (int64_t)v.seq->size() != n)
        fail("input " + std::to_string(k) + " is a sequence of " + std::to_string(v.seq->size()) + " tensors, input 0 of " + std::to_string(n));
      ins.push_back(v);
    }
    std::vector<std::vector<Val>> outs(cur_->outputs.size());
    std::vector<int> ets(cur_->outputs.size(), 0);
    for (size_t k = 0; k < cur_->outputs.size() && k < body.outputs.size(); ++k) ets[k] = body.outputs[k].elem_type;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<Val> call;
      for (const Val& v : ins) call.push_back(v.seq ? (*v.seq)[(size_t)i] : v);
      std::vector<Val> got = inline_graph(body, call);
      if (g_->nodes.size() > L_.max_nodes) fail("the graph grows past " + std::to_string(L_.max_nodes) + " nodes");
      if (got.size() < cur_->outputs.size()) fail("the body has fewer outputs than the node");
      for (size_t k = 0; k < cur_->outputs.size(); ++k) {
        if (!got[k].is_tensor()) fail("body output " + std::to_string(k) + " is " + got[k].kind_name() + ", a tensor is needed");
        ets[k] = got[k].et;
        outs[k].push_back(got[k]);
      }
    }
    for (size_t k = 0; k < cur_->outputs.size(); ++k) set_seq(k, std::move(outs[k]), ets[k]);
  }

  bool fold_Optional() {
    Val v;
    if (has_in(0)) {
      v = in(0);
    } else {
      auto a = attr("type", kAttrTypeProto);
      if (!a) fail("an Optional without an input needs the attribute 'type'");
      if (a->tp.kind == ValueKind::Optional) fail("an optional of an optional");
      v.none = true;
      v.inner = a->tp.kind;
      v.et = a->tp.elem_type;
    }
    v.optional = true;
    set_out(0, v);
    return true;
  }
  bool fold_OptionalHasElement() {
    Host h;
    h.i = {has_in(0) && !in(0).none ? 1 : 0};
    set_host(0, {}, kBool, h);
    return true;
  }
  bool fold_OptionalGetElement() {
    Val v = in(0);
    if (v.none) fail("input '" + cur_->inputs[0] + "' is an optional without a value");
    v.optional = false;
    set_out(0, v);
    return true;
  }
};

}  // namespace

void sequence_ops(std::vector<OpDef>& t) {
  using F = Sequences;
  const char* kPos = "position known at specialisation (a constant, shape arithmetic or a small input given by value)";
  t.insert(t.end(), {
      {"SequenceEmpty", "", 11, nullptr, fold<&F::fold_SequenceEmpty>, "folded", "", "a sequence is resolved at specialisation"},
      {"SequenceConstruct", "", 11, nullptr, fold<&F::fold_SequenceConstruct>, "folded", "", ""},
      {"SequenceInsert", "", 11, nullptr, fold<&F::fold_SequenceInsert>, "folded", "", kPos},
      {"SequenceErase", "", 11, nullptr, fold<&F::fold_SequenceErase>, "folded", "", kPos},
      {"SequenceAt", "", 11, nullptr, fold<&F::fold_SequenceAt>, "folded", "", kPos},
      {"SequenceLength", "", 11, nullptr, fold<&F::fold_SequenceLength>, "folded", "", ""},
      {"SplitToSequence", "", 11, map<&F::map_SplitToSequence>, fold<&F::fold_SplitToSequence>, "narrow (reshape)", "narrow", "split known at specialisation"},
      {"ConcatFromSequence", "", 11, map<&F::map_ConcatFromSequence>, nullptr, "concat (reshape)", "concat", "a non-empty sequence"},
      {"SequenceMap", "", 17, map<&F::map_SequenceMap>, nullptr, "the body, imported once per element", "",
       "every sequence input of one length; tensor inputs passed to each call"},
      {"Optional", "", 15, nullptr, fold<&F::fold_Optional>, "folded", "", "an optional is resolved at specialisation"},
      {"OptionalHasElement", "", 15, nullptr, fold<&F::fold_OptionalHasElement>, "folded", "", ""},
      {"OptionalGetElement", "", 15, nullptr, fold<&F::fold_OptionalGetElement>, "folded", "", ""},
  });
}

}  // namespace rlx::onnx
