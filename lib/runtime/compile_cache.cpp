#include "runtime/compile_cache.h"

#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <variant>

#include "io/blob_cache.h"

namespace rlx {

namespace {

constexpr uint32_t kPlanFormat = 2;  // bump when the serialized layout changes
constexpr int kNumEwOps = 0
#define UNARY(E, C, G) +1
#define BINARY(E, C, G) +1
#include "ir/elementwise.def"
#undef UNARY
#undef BINARY
    ;

// ---- writing ----
struct Writer {
  std::string out;
  void raw(const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
  void u64(uint64_t v) { raw(&v, 8); }
  void i64(int64_t v) { raw(&v, 8); }
  void u8(uint8_t v) { out.push_back((char)v); }
  void f64(double v) { raw(&v, 8); }
  void f32(float v) { raw(&v, 4); }
  void str(const std::string& s) {
    u64(s.size());
    out += s;
  }
  void shape(const Shape& s) {
    u64(s.size());
    for (int64_t d : s) i64(d);
  }
  // Attribute values, whatever alternatives AttrValue has (scalars, strings, lists of them).
  void value(int64_t v) { i64(v); }
  void value(double v) { f64(v); }
  void value(bool v) { u8(v); }
  void value(const std::string& v) { str(v); }
  template <class T>
  void value(const std::vector<T>& v) {
    u64(v.size());
    for (const auto& x : v) value(x);
  }
  void tensor(const Tensor& t) {
    u8((uint8_t)t.dtype());
    shape(t.shape());
    u64(t.nbytes());
    if (t.nbytes()) raw(t.raw(), t.nbytes());
  }
  void node(const ir::Node& n) {
    str(n.id);
    u8((uint8_t)n.op);
    u64(n.inputs.size());
    for (int i : n.inputs) i64(i);
    u64(n.attrs.values.size());
    for (const auto& [k, v] : n.attrs.values) {
      str(k);
      u8((uint8_t)v.index());
      std::visit([&](const auto& x) { value(x); }, v);
    }
    u8((uint8_t)n.dtype);
    u64(n.decl_shape.size());
    for (const auto& d : n.decl_shape) {
      i64(d.value);
      str(d.symbol);
    }
    u8(n.has_decl_shape);
    str(n.param_name);
    u8(n.constant.defined() && n.op == ir::Op::Constant);
    if (n.constant.defined() && n.op == ir::Op::Constant) tensor(n.constant);
    i64(n.json_index);
  }
  void graph(const ir::Graph& g) {  // not g.file: the same graph elsewhere is the same graph
    str(g.name);
    u64(g.nodes.size());
    for (const auto& n : g.nodes) node(n);
    u64(g.outputs.size());
    for (int o : g.outputs) i64(o);
  }
};

// ---- reading (bounds-checked; every failure throws std::runtime_error with the reason) ----
struct Reader {
  const std::string& in;
  size_t pos = 0;
  const char* take(size_t n) {
    if (n > in.size() - pos) throw std::runtime_error("truncated plan");
    const char* p = in.data() + pos;
    pos += n;
    return p;
  }
  template <class T>
  T pod() {
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  uint64_t u64() { return pod<uint64_t>(); }
  int64_t i64() { return pod<int64_t>(); }
  uint8_t u8() { return pod<uint8_t>(); }
  size_t count(size_t max_each = 1) {  // a length, checked against what is left
    uint64_t n = u64();
    if (n > (in.size() - pos) / max_each + 1) throw std::runtime_error("bad length");
    return (size_t)n;
  }
  std::string str() {
    size_t n = count();
    return std::string(take(n), n);
  }
  Shape shape() {
    size_t n = count(8);
    if (n > 64) throw std::runtime_error("bad rank");
    Shape s(n);
    for (auto& d : s)
      if ((d = i64()) < 0) throw std::runtime_error("negative dimension");
    return s;
  }
  DType dtype() {
    uint8_t d = u8();
    if (d >= (uint8_t)kNumDTypes) throw std::runtime_error("bad dtype");  // a row of core/dtype.h's table
    return (DType)d;
  }
  void value(int64_t& v) { v = i64(); }
  void value(double& v) { v = pod<double>(); }
  void value(bool& v) { v = u8() != 0; }
  void value(std::string& v) { v = str(); }
  template <class T>
  void value(std::vector<T>& v) {
    v.resize(count());
    for (auto& x : v) value(x);
  }
  template <size_t I = 0>
  ir::AttrValue attr(size_t tag) {
    if constexpr (I < std::variant_size_v<ir::AttrValue>) {
      if (tag == I) {
        std::variant_alternative_t<I, ir::AttrValue> x{};
        value(x);
        return ir::AttrValue(std::in_place_index<I>, std::move(x));
      }
      return attr<I + 1>(tag);
    } else {
      throw std::runtime_error("bad attribute type");
    }
  }
  Tensor tensor() {
    DType dt = dtype();
    Shape s = shape();
    size_t nb = count();
    if (nb != (size_t)shape_numel(s) * dtype_size(dt)) throw std::runtime_error("constant size mismatch");
    Tensor t(s, dt);
    if (nb) std::memcpy(t.mutable_raw(), take(nb), nb);
    return t;
  }
  ir::Node node(size_t index) {
    ir::Node n;
    n.id = str();
    uint8_t op = u8();
    if (op >= ir::kNumOps) throw std::runtime_error("bad op");
    n.op = (ir::Op)op;
    n.inputs.resize(count(8));
    for (int& i : n.inputs) {
      int64_t v = i64();
      if (v < 0 || (size_t)v >= index) throw std::runtime_error("input index out of order");
      i = (int)v;
    }
    size_t na = count();
    for (size_t k = 0; k < na; ++k) {
      std::string key = str();
      size_t tag = u8();
      n.attrs.values[key] = attr(tag);
    }
    n.dtype = dtype();
    n.decl_shape.resize(count(9));
    for (auto& d : n.decl_shape) {
      d.value = i64();
      d.symbol = str();
    }
    n.has_decl_shape = u8() != 0;
    n.param_name = str();
    if (u8()) n.constant = tensor();
    n.json_index = (int)i64();
    return n;
  }
  ir::Graph graph() {
    ir::Graph g;
    g.name = str();
    g.nodes.resize(count());
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      g.nodes[i] = node(i);
      g.index[g.nodes[i].id] = (int)i;
    }
    g.outputs.resize(count(8));
    for (int& o : g.outputs) {
      int64_t v = i64();
      if (v < 0 || (size_t)v >= g.nodes.size()) throw std::runtime_error("bad output index");
      o = (int)v;
    }
    return g;
  }
};

}  // namespace

uint64_t graph_content_hash(const ir::Graph& g) {
  Writer w;
  w.graph(g);
  return io::hash64(w.out);
}

std::string plan_cache_key(const ir::Graph& g, const std::string& input_signature, const std::string& backend,
                           const std::string& device, const passes::OptOptions& o) {
  return "plan v" + std::to_string(kPlanFormat) + "\n" + io::build_id() + "\ngraph " + io::hex64(graph_content_hash(g)) +
         "\ninputs " + input_signature + "\nbackend " + backend + "\ndevice " + device + "\noptions cse" +
         std::to_string(o.cse) + " fold" + std::to_string(o.fold) + " simplify" + std::to_string(o.simplify) + " patterns" + std::to_string(o.patterns) + " fuse" +
         std::to_string(o.fuse) + " max_fold " + std::to_string(o.max_fold_elements) + " max_fused_inputs " +
         std::to_string(o.max_fused_inputs) + " transposed_linear " + std::to_string(o.transposed_linear) +
         " integer_gemm " + std::to_string(o.integer_gemm) + " half_attention " + std::to_string(o.half_attention_f16) + std::to_string(o.half_attention_bf16) +
         " attention_views " + std::to_string(o.attention_views_f16) + std::to_string(o.attention_views_all) +
         std::to_string(o.attention_views_linear) + ":" +
         std::to_string(o.attention_view_align);
}

std::string serialize_plan(const passes::OptimizedGraph& og) {
  Writer w;
  w.u64(kPlanFormat);
  w.graph(og.graph);
  w.u64(og.ts.shapes.size());
  for (const auto& s : og.ts.shapes) w.shape(s);
  w.u64(og.ts.dtypes.size());
  for (DType d : og.ts.dtypes) w.u8((uint8_t)d);
  w.u64(og.ts.symbols.size());
  for (const auto& [k, v] : og.ts.symbols) {
    w.str(k);
    w.i64(v);
  }
  w.u64(og.fused.size());
  for (const auto& p : og.fused) {
    w.u8(p != nullptr);
    if (!p) continue;
    w.u64(p->code.size());
    for (const auto& in : p->code) {
      w.u8(in.kind);
      w.u8((uint8_t)in.op);
      w.i64(in.a);
      w.i64(in.b);
      w.f32(in.imm);
    }
    w.u64(p->input_shapes.size());
    for (const auto& s : p->input_shapes) w.shape(s);
    w.shape(p->out_shape);
    w.i64(p->result);
  }
  w.u64(og.fused_members.size());
  for (const auto& m : og.fused_members) w.str(m);
  const auto& st = og.stats;
  for (int v : {st.nodes_before, st.nodes_after, st.cse_merged, st.folded, st.simplified, st.scalars_merged,
                st.fused_groups, st.fused_nodes, st.patterns})
    w.i64(v);
  w.str(st.pattern_kinds);
  return w.out;
}

std::optional<passes::OptimizedGraph> deserialize_plan(const std::string& bytes, std::string* why) {
  try {
    Reader r{bytes};
    if (r.u64() != kPlanFormat) throw std::runtime_error("another plan format");
    passes::OptimizedGraph og;
    og.graph = r.graph();
    const size_t n = og.graph.nodes.size();
    if (r.count(8) != n) throw std::runtime_error("shape count mismatch");
    og.ts.shapes.resize(n);
    for (auto& s : og.ts.shapes) s = r.shape();
    if (r.count() != n) throw std::runtime_error("dtype count mismatch");
    og.ts.dtypes.resize(n);
    for (auto& d : og.ts.dtypes) d = r.dtype();
    size_t ns = r.count();
    for (size_t k = 0; k < ns; ++k) {
      std::string key = r.str();
      og.ts.symbols[key] = r.i64();
    }
    if (r.count() != n) throw std::runtime_error("fused count mismatch");
    og.fused.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (!r.u8()) continue;
      auto p = std::make_shared<FusedProgram>();
      p->code.resize(r.count(22));
      for (size_t k = 0; k < p->code.size(); ++k) {
        FusedInstr& in = p->code[k];
        uint8_t kind = r.u8(), op = r.u8();
        if (kind > FusedInstr::Binary || op >= kNumEwOps) throw std::runtime_error("bad fused instruction");
        in.kind = (FusedInstr::Kind)kind;
        in.op = (EwOp)op;
        in.a = (int32_t)r.i64();
        in.b = (int32_t)r.i64();
        in.imm = r.pod<float>();
      }
      p->input_shapes.resize(r.count(8));
      for (auto& s : p->input_shapes) s = r.shape();
      p->out_shape = r.shape();
      p->result = (int)r.i64();
      // Registers are SSA: an instruction reads only earlier registers; loads name real inputs.
      for (size_t k = 0; k < p->code.size(); ++k) {
        const FusedInstr& in = p->code[k];
        bool ok = in.kind == FusedInstr::Load    ? in.a >= 0 && (size_t)in.a < p->input_shapes.size()
                  : in.kind == FusedInstr::Const ? true
                  : in.kind == FusedInstr::Unary ? in.a >= 0 && (size_t)in.a < k
                                                 : in.a >= 0 && (size_t)in.a < k && in.b >= 0 && (size_t)in.b < k;
        if (!ok) throw std::runtime_error("bad fused register");
      }
      if (p->result < 0 || (size_t)p->result >= p->code.size()) throw std::runtime_error("bad fused result");
      if (p->input_shapes.size() != og.graph.nodes[i].inputs.size()) throw std::runtime_error("fused inputs mismatch");
      og.fused[i] = p;
    }
    if (r.count() != n) throw std::runtime_error("fused member count mismatch");
    og.fused_members.resize(n);
    for (auto& m : og.fused_members) m = r.str();
    auto& st = og.stats;
    for (int* v : {&st.nodes_before, &st.nodes_after, &st.cse_merged, &st.folded, &st.simplified, &st.scalars_merged,
                   &st.fused_groups, &st.fused_nodes, &st.patterns})
      *v = (int)r.i64();
    st.pattern_kinds = r.str();
    if (r.pos != bytes.size()) throw std::runtime_error("trailing bytes");
    return og;
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return std::nullopt;
  }
}

}  // namespace rlx
