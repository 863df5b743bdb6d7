// Parsing an ONNX ModelProto (protobuf-lite, schema from Debian's libonnx-dev) into the
// importer's own structures, with every hostile-file check in one place.
#include "onnx/model.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "io/file.h"
#include "onnx.pb.h"

namespace fs = std::filesystem;

namespace rlx::onnx {

const char* elem_type_name(int t) {
  switch (t) {
    case kFloat: return "float";
    case kUint8: return "uint8";
    case kInt8: return "int8";
    case kUint16: return "uint16";
    case kInt16: return "int16";
    case kInt32: return "int32";
    case kInt64: return "int64";
    case kString: return "string";
    case kBool: return "bool";
    case kFloat16: return "float16";
    case kDouble: return "double";
    case kUint32: return "uint32";
    case kUint64: return "uint64";
    case 14: return "complex64";
    case 15: return "complex128";
    case kBfloat16: return "bfloat16";
    default: return "undefined";
  }
}

DType to_dtype(int t, const std::string& where) {
  if (auto d = dtype_from_onnx(t)) return *d;  // the dtype table's ONNX column (core/dtype.h)
  std::string names;
  for (const auto& r : kDTypeTable) names += (names.empty() ? "" : ", ") + std::string(elem_type_name(r.onnx));
  throw InputError(where + ": unsupported element type " + elem_type_name(t) + " (rlx tensors are " + names + ")");
}

namespace {

size_t elem_size(int t) {
  switch (t) {
    case kFloat: case kInt32: case kUint32: return 4;
    case kUint8: case kInt8: case kBool: return 1;
    case kUint16: case kInt16: case kFloat16: case kBfloat16: return 2;
    case kInt64: case kDouble: case kUint64: return 8;
    default: return 0;
  }
}

}  // namespace

struct ModelParser {
  // The values one graph defines so far, and the graph it is nested in.
  struct Scope {
    std::set<std::string> defined;
    const Scope* outer = nullptr;
    bool visible(const std::string& n) const {
      for (const Scope* s = this; s; s = s->outer)
        if (s->defined.count(n)) return true;
      return false;
    }
  };

  Model& m;
  std::shared_ptr<const ::onnx::ModelProto> proto;
  std::map<std::string, io::MappedFile> mapped;  // external files, by canonical path

  [[noreturn]] void fail(const std::string& what) const { throw InputError(m.file_ + ": " + what); }

  Shape dims_of(const ::onnx::TensorProto& t, const std::string& where) {
    if ((size_t)t.dims_size() > m.limits_.max_rank) fail(where + ": rank " + std::to_string(t.dims_size()) + " exceeds the limit of " + std::to_string(m.limits_.max_rank));
    Shape s;
    for (int64_t d : t.dims()) {
      if (d < 0) fail(where + ": negative dimension " + std::to_string(d));
      s.push_back(d);
    }
    int64_t n = shape_numel(s);
    if (n < 0 || n > m.limits_.max_tensor_elements) fail(where + ": shape " + shape_str(s) + " has too many elements");
    return s;
  }

  const io::MappedFile& external_file(const std::string& location, const std::string& where) {
    if (m.dir_.empty()) fail(where + ": external data \"" + location + "\" cannot be resolved for a model read from memory");
    fs::path rel(location);
    if (location.empty() || rel.is_absolute() || location.find('\0') != std::string::npos)
      fail(where + ": external data location \"" + location + "\" must be a relative path inside the model's folder");
    for (const auto& part : rel)
      if (part == "..") fail(where + ": external data location \"" + location + "\" leaves the model's folder ('..' is refused)");
    std::error_code ec;
    fs::path base = fs::canonical(m.dir_, ec);
    if (ec) fail(where + ": cannot resolve the model's folder " + m.dir_);
    fs::path full = fs::canonical(base / rel, ec);
    if (ec) fail(where + ": external data file \"" + location + "\" not found next to the model");
    auto b = base.string(), f = full.string();
    if (f.size() <= b.size() || f.compare(0, b.size(), b) != 0 || (b.back() != '/' && f[b.size()] != '/'))
      fail(where + ": external data location \"" + location + "\" resolves outside the model's folder (a symlink?); refused");
    if (!fs::is_regular_file(full, ec)) fail(where + ": external data \"" + location + "\" is not a regular file");
    auto it = mapped.find(f);
    if (it == mapped.end()) it = mapped.emplace(f, io::map_file(f)).first;
    return it->second;
  }

  std::shared_ptr<TensorData> tensor(const ::onnx::TensorProto& t, const std::string& where_in) {
    auto td = std::make_shared<TensorData>();
    td->name = t.name();
    std::string where = where_in + (t.name().empty() ? "" : " '" + t.name() + "'");
    td->elem_type = t.data_type();
    td->shape = dims_of(t, where);
    td->numel = shape_numel(td->shape);
    size_t es = elem_size(td->elem_type);
    if (td->elem_type == kString) fail(where + ": string tensors are not supported");
    if (es == 0) fail(where + ": unsupported element type " + elem_type_name(td->elem_type) + " (" + std::to_string(td->elem_type) + ")");
    auto count_mismatch = [&](size_t got, const char* field) {
      fail(where + ": " + field + " holds " + std::to_string(got) + " values but shape " + shape_str(td->shape) + " needs " + std::to_string(td->numel));
    };
    if (t.data_location() == ::onnx::TensorProto::EXTERNAL) {
      std::string location;
      int64_t offset = 0, length = -1;
      for (const auto& kv : t.external_data()) {
        auto num = [&](const std::string& v) -> int64_t {
          try {
            size_t used = 0;
            long long x = std::stoll(v, &used);
            if (used != v.size() || x < 0) throw std::invalid_argument(v);
            return x;
          } catch (const std::exception&) {
            fail(where + ": external data " + kv.key() + " \"" + v + "\" is not a non-negative integer");
          }
        };
        if (kv.key() == "location") location = kv.value();
        else if (kv.key() == "offset") offset = num(kv.value());
        else if (kv.key() == "length") length = num(kv.value());
      }
      const io::MappedFile& f = external_file(location, where);
      int64_t need = td->numel * (int64_t)es;
      if (length >= 0 && length != need)
        fail(where + ": external data length " + std::to_string(length) + " differs from the " + std::to_string(need) + " bytes shape " + shape_str(td->shape) + " needs");
      if ((uint64_t)offset > f.size || (uint64_t)need > f.size - (uint64_t)offset)
        fail(where + ": external data \"" + location + "\" has " + std::to_string(f.size) + " bytes; offset " + std::to_string(offset) +
             " + " + std::to_string(need) + " bytes runs past its end");
      td->raw = f.data ? f.data + offset : nullptr;
      td->keep = f.keep;
      td->external = true;
      return td;
    }
    if (t.has_raw_data()) {
      if (t.raw_data().size() != (size_t)td->numel * es)
        fail(where + ": raw_data has " + std::to_string(t.raw_data().size()) + " bytes but shape " + shape_str(td->shape) + " of " +
             elem_type_name(td->elem_type) + " needs " + std::to_string((size_t)td->numel * es));
      td->raw = reinterpret_cast<const uint8_t*>(t.raw_data().data());
      td->keep = proto;  // the bytes live in the parsed message: no copy
      return td;
    }
    switch (td->elem_type) {
      case kFloat:
        if (t.float_data_size() != td->numel) count_mismatch(t.float_data_size(), "float_data");
        td->floats.assign(t.float_data().begin(), t.float_data().end());
        break;
      case kDouble:
        if (t.double_data_size() != td->numel) count_mismatch(t.double_data_size(), "double_data");
        td->floats.assign(t.double_data().begin(), t.double_data().end());
        break;
      case kInt64:
        if (t.int64_data_size() != td->numel) count_mismatch(t.int64_data_size(), "int64_data");
        td->ints.assign(t.int64_data().begin(), t.int64_data().end());
        break;
      case kUint32: case kUint64:  // u64 values above 2^63 keep their bits (to_tensor stores them so)
        if (t.uint64_data_size() != td->numel) count_mismatch(t.uint64_data_size(), "uint64_data");
        for (uint64_t v : t.uint64_data()) td->ints.push_back((int64_t)v);
        break;
      case kFloat16: case kBfloat16:
        if (t.int32_data_size() != td->numel) count_mismatch(t.int32_data_size(), "int32_data");
        for (int32_t v : t.int32_data())
          td->floats.push_back(td->elem_type == kFloat16 ? f16_to_f32((uint16_t)v) : bf16_to_f32((uint16_t)v));
        break;
      default:  // int32, int16, int8, uint16, uint8, bool
        if (t.int32_data_size() != td->numel) count_mismatch(t.int32_data_size(), "int32_data");
        td->ints.assign(t.int32_data().begin(), t.int32_data().end());
        break;
    }
    return td;
  }

  // A TypeProto as rlx reads it: a tensor, a sequence of tensors, or an optional of either.
  ValueType value_type(const ::onnx::TypeProto& t, const std::string& what) {
    ValueType r;
    auto tensor_or_sequence = [&](const ::onnx::TypeProto& x, ValueKind& kind) {
      if (x.has_tensor_type()) {
        kind = ValueKind::Tensor;
        return;
      }
      if (x.has_sequence_type() && x.sequence_type().has_elem_type() && x.sequence_type().elem_type().has_tensor_type()) {
        kind = ValueKind::Sequence;
        return;
      }
      fail(what + " is a " + (x.has_map_type() ? "map" : x.has_sparse_tensor_type() ? "sparse tensor" : "nested sequence or optional") +
           " (rlx reads tensors, sequences of tensors, and optionals of either)");
    };
    if (t.has_optional_type()) {
      if (!t.optional_type().has_elem_type()) fail(what + " is an optional without an element type");
      r.kind = ValueKind::Optional;
      tensor_or_sequence(t.optional_type().elem_type(), r.inner);
    } else {
      tensor_or_sequence(t, r.kind);
    }
    r.elem_type = bottom_tensor(t).elem_type();
    return r;
  }
  static const ::onnx::TypeProto_Tensor& bottom_tensor(const ::onnx::TypeProto& t) {
    if (t.has_optional_type()) return bottom_tensor(t.optional_type().elem_type());
    if (t.has_sequence_type()) return bottom_tensor(t.sequence_type().elem_type());
    return t.tensor_type();
  }

  ValueInfo value_info(const ::onnx::ValueInfoProto& v, const char* what) {
    ValueInfo vi;
    vi.name = v.name();
    if (vi.name.empty()) fail(std::string("a graph ") + what + " has no name");
    if (!v.has_type() || v.type().value_case() == ::onnx::TypeProto::VALUE_NOT_SET) return vi;  // type unknown (exporters leave subgraph outputs so)
    vi.type = value_type(v.type(), std::string("graph ") + what + " '" + vi.name + "'");
    const auto& tt = bottom_tensor(v.type());
    vi.elem_type = tt.elem_type();
    if (tt.has_shape()) {
      vi.has_shape = true;
      if ((size_t)tt.shape().dim_size() > m.limits_.max_rank)
        fail(std::string("graph ") + what + " '" + vi.name + "' has rank " + std::to_string(tt.shape().dim_size()) + ", above the limit " + std::to_string(m.limits_.max_rank));
      int k = 0;
      for (const auto& d : tt.shape().dim()) {
        ir::Dim dim;
        if (d.has_dim_value()) {
          if (d.dim_value() < 0 || d.dim_value() > m.limits_.max_tensor_elements)
            fail(std::string("graph ") + what + " '" + vi.name + "' has an absurd dimension " + std::to_string(d.dim_value()));
          dim.value = d.dim_value();
        } else if (d.has_dim_param() && !d.dim_param().empty()) {
          dim.symbol = d.dim_param();
        } else {
          dim.symbol = vi.name + "." + std::to_string(k);  // unknown: bound from the given input
        }
        vi.dims.push_back(dim);
        k++;
      }
    }
    return vi;
  }

  Attribute attribute(const ::onnx::AttributeProto& a, const std::string& where) {
    Attribute r;
    r.name = a.name();
    r.type = a.type();
    if (!a.ref_attr_name().empty()) fail(where + ": attribute '" + r.name + "' refers to a function attribute; functions are not supported");
    r.i = a.i();
    r.f = a.f();
    r.s = a.s();
    r.ints.assign(a.ints().begin(), a.ints().end());
    r.floats.assign(a.floats().begin(), a.floats().end());
    r.strings.assign(a.strings().begin(), a.strings().end());
    if (a.has_t()) r.t = tensor(a.t(), where + ": attribute '" + r.name + "'");
    if (a.has_tp()) r.tp = value_type(a.tp(), where + ": attribute '" + r.name + "'");
    if (r.type == 0) {  // very old writers leave type unset: infer it
      if (a.has_t()) r.type = 4;
      else if (a.has_g()) r.type = 5;
      else if (!a.ints().empty()) r.type = 7;
      else if (!a.floats().empty()) r.type = 6;
      else if (!a.strings().empty()) r.type = 8;
      else if (a.has_s()) r.type = 3;
      else if (a.has_i()) r.type = 2;
      else if (a.has_f()) r.type = 1;
    }
    return r;
  }

  void run(const uint8_t* data, size_t size) {
    if (size > m.limits_.max_file_bytes)
      fail("the file has " + std::to_string(size) + " bytes; ONNX files above 2 GiB must keep their weights as external data");
    auto p = std::make_shared<::onnx::ModelProto>();
    {
      google::protobuf::io::ArrayInputStream ais(data, (int)size);
      google::protobuf::io::CodedInputStream cis(&ais);
      cis.SetTotalBytesLimit((int)std::min<size_t>(m.limits_.max_file_bytes, INT32_MAX));
      cis.SetRecursionLimit(64);
      if (!p->ParseFromCodedStream(&cis) || !cis.ConsumedEntireMessage())
        fail("not a valid ONNX model: the protobuf is malformed or truncated");
    }
    proto = p;
    const auto& mp = *p;
    if (!mp.has_graph()) fail("not a valid ONNX model: it has no graph (is this really an .onnx file?)");
    m.ir_version_ = mp.ir_version();
    m.producer_ = mp.producer_name();
    m.opset_ = -1;
    for (const auto& o : mp.opset_import()) {
      if (o.domain().empty() || o.domain() == "ai.onnx") m.opset_ = o.version();
      else m.domain_opsets_[o.domain()] = o.version();
    }
    if (m.opset_ < 0) m.opset_ = mp.opset_import().empty() ? 1 : -1;
    // A model of other domains only (ai.onnx.preview.training's node tests) may import none: 0,
    // and a default-domain node is then refused when imported.
    if (m.opset_ < 0 && m.domain_opsets_.empty()) fail("the model imports no default-domain (ai.onnx) opset");
    if (m.opset_ < 0) m.opset_ = 0;
    if (m.opset_ != 0 && (m.opset_ < 1 || m.opset_ > 21))
      fail("opset " + std::to_string(m.opset_) + " is not supported (rlx reads opsets 1 to 21; below 7, the operators unchanged up to 7)");
    if (mp.functions_size() > 0) fail("model-local functions are not supported");
    const auto& g = mp.graph();
    if ((size_t)g.node_size() > m.limits_.max_nodes) fail("the graph has " + std::to_string(g.node_size()) + " nodes, above the limit");
    if (g.sparse_initializer_size() > 0) fail("sparse initializers are not supported");
    for (const auto& t : g.initializer()) {
      if (t.name().empty()) fail("an initializer has no name");
      auto td = tensor(t, "initializer");
      if (!m.inits_.emplace(t.name(), td).second) fail("initializer '" + t.name() + "' is defined twice");
      m.init_order_.push_back(t.name());
    }
    std::set<std::string> seen_inputs;
    std::vector<ValueInfo> defaults;
    for (const auto& v : g.input()) {
      ValueInfo vi = value_info(v, "input");
      if (!seen_inputs.insert(vi.name).second) fail("graph input '" + vi.name + "' is listed twice");
      if (m.inits_.count(vi.name)) defaults.push_back(vi);
      else {
        if (!v.has_type() || (!vi.has_shape && vi.type.kind == ValueKind::Tensor))
          fail("graph input '" + vi.name + "' has no tensor type or shape");
        if (!vi.has_shape) vi.dims.clear();  // a sequence's tensors without a declared shape: any
        m.inputs_.push_back(vi);
      }
    }
    for (auto& d : defaults) m.inputs_.push_back(d);
    for (const auto& v : g.output()) m.outputs_.push_back(value_info(v, "output"));
    if (m.outputs_.empty()) fail("the graph has no outputs");
    // Names visible to subgraphs: the main graph's inputs and initializers, then each node's
    // outputs as it is read.
    Scope top;
    for (const auto& v : g.input()) top.defined.insert(v.name());
    for (const auto& [name, td] : m.inits_) top.defined.insert(name);
    size_t total = 0;
    nodes_of(g, m.nodes_, top, 0, "", total);
  }

  // One node of a graph (the main graph: depth 0, `gw` empty; a subgraph: `gw` names it for
  // messages). Every value is defined once in a graph: by a node (one node), an input or an
  // initializer. A second definition would otherwise be resolved silently (the later one
  // wins); a node output may not reuse a name of an enclosing graph either (ONNX's SSA rule).
  NodeDef node_of(const ::onnx::NodeProto& n, int index, Scope& scope, int depth, const std::string& gw,
                  std::map<std::string, std::string>& producer, size_t& total) {
    NodeDef d;
    d.op_type = n.op_type();
    d.name = n.name();
    d.domain = n.domain();
    d.index = index;
    std::string where = gw + "node " + (d.name.empty() ? "#" + std::to_string(d.index) : "'" + d.name + "'") + " (" + d.op_type + ")";
    d.inputs.assign(n.input().begin(), n.input().end());
    d.outputs.assign(n.output().begin(), n.output().end());
    std::set<std::string> attr_names;
    for (const auto& a : n.attribute()) {
      if (!attr_names.insert(a.name()).second) fail(where + ": attribute '" + a.name() + "' is given twice");
      if (a.graphs_size() > 0) fail(where + ": attribute '" + a.name() + "' holds a list of graphs, which no supported operator takes");
      Attribute at = attribute(a, where);
      if (a.has_g()) {
        if (at.type != 5) fail(where + ": attribute '" + a.name() + "' holds a graph but is declared of type " + std::to_string(at.type));
        at.g = subgraph(a.g(), scope, depth + 1, where + ": attribute '" + a.name() + "'", total);
      } else if (at.type == 5) {
        fail(where + ": attribute '" + a.name() + "' is declared a graph but holds none");
      }
      d.attrs.push_back(std::move(at));
    }
    for (const auto& o : d.outputs) {
      if (o.empty()) continue;
      if (depth == 0 && m.inits_.count(o)) fail(where + ": output '" + o + "' has the name of an initializer (a value is defined once)");
      auto [p, fresh] = producer.emplace(o, where);
      if (!fresh) fail(where + ": output '" + o + "' is also produced by " + p->second + " (a value is defined once)");
      if (depth > 0 && scope.visible(o)) fail(where + ": output '" + o + "' is already defined in this graph or an enclosing one (a value is defined once)");
      scope.defined.insert(o);
    }
    return d;
  }

  void nodes_of(const ::onnx::GraphProto& g, std::vector<NodeDef>& out, Scope& scope, int depth, const std::string& gw, size_t& total) {
    count_nodes(g, total);
    std::map<std::string, std::string> producer;
    int idx = 0;
    for (const auto& n : g.node()) out.push_back(node_of(n, idx++, scope, depth, gw, producer, total));
  }

  void count_nodes(const ::onnx::GraphProto& g, size_t& total) {
    total += (size_t)g.node_size();
    if (total > m.limits_.max_nodes) fail("the model has more than " + std::to_string(m.limits_.max_nodes) + " nodes (subgraphs included), above the limit");
  }

  // A GRAPH attribute: inputs, outputs, initializers and nodes under the same checks as the
  // main graph, and the outer names it reads (its captures).
  std::shared_ptr<const GraphDef> subgraph(const ::onnx::GraphProto& g, const Scope& outer, int depth, const std::string& where,
                                           size_t& total) {
    if (depth > m.limits_.max_graph_depth)
      fail(where + ": subgraphs are nested " + std::to_string(depth) + " deep, above the limit of " + std::to_string(m.limits_.max_graph_depth));
    auto gd = std::make_shared<GraphDef>();
    gd->name = g.name();
    gd->depth = depth;
    const std::string gw = where + " (graph '" + g.name() + "'): ";
    if (g.sparse_initializer_size() > 0) fail(gw + "sparse initializers are not supported");
    Scope scope;
    scope.outer = &outer;
    for (const auto& t : g.initializer()) {
      if (t.name().empty()) fail(gw + "an initializer has no name");
      auto td = tensor(t, gw + "initializer");
      if (!gd->inits.emplace(t.name(), td).second) fail(gw + "initializer '" + t.name() + "' is defined twice");
      scope.defined.insert(t.name());
    }
    for (const auto& v : g.input()) {
      ValueInfo vi = value_info(v, "input");
      if (!scope.defined.insert(vi.name).second && !gd->inits.count(vi.name)) fail(gw + "input '" + vi.name + "' is listed twice");
      gd->inputs.push_back(vi);
    }
    for (const auto& v : g.output()) gd->outputs.push_back(value_info(v, "output"));
    if (gd->outputs.empty()) fail(gw + "the graph has no outputs");
    // Captures: every name a node (or a nested graph) reads that this graph does not define
    // before it must be visible in an enclosing graph.
    std::set<std::string> seen;
    auto capture = [&](const std::string& n, const std::string& who) {
      if (n.empty() || scope.defined.count(n)) return;
      if (!outer.visible(n))
        fail(gw + who + " reads '" + n + "', which is not defined before it in this graph or an enclosing one");
      if (seen.insert(n).second) gd->captures.push_back(n);
    };
    count_nodes(g, total);
    std::map<std::string, std::string> producer;
    for (int k = 0; k < g.node_size(); ++k) {
      const auto& n = g.node(k);
      std::string who = "node " + (n.name().empty() ? "#" + std::to_string(k) : "'" + n.name() + "'") + " (" + n.op_type() + ")";
      for (const auto& i : n.input()) capture(i, who);
      NodeDef d = node_of(n, k, scope, depth, gw, producer, total);
      for (const auto& a : d.attrs)
        if (a.g)
          for (const auto& c : a.g->captures) capture(c, who);
      gd->nodes.push_back(std::move(d));
    }
    for (const auto& o : gd->outputs) capture(o.name, "output '" + o.name + "'");
    return gd;
  }
};

std::shared_ptr<Model> Model::parse(const uint8_t* data, size_t size, const std::string& file_name, const std::string& dir,
                                    const Limits& limits) {
  std::shared_ptr<Model> m(new Model());
  m->file_ = file_name;
  m->dir_ = dir;
  m->limits_ = limits;
  ModelParser p{*m, nullptr, {}};
  p.run(data, size);
  return m;
}

std::shared_ptr<Model> Model::load(const std::string& path, const Limits& limits) {
  io::MappedFile f = io::map_file(path);
  std::string dir = fs::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  return parse(f.data, f.size, path, dir, limits);
}

bool looks_like_onnx(const uint8_t* d, size_t n) {
  if (n < 2) return false;
  // A ModelProto starts with one of its fields' tags: ir_version (0x08), producer_name (0x12),
  // producer_version (0x1a), domain (0x22), model_version (0x28), doc_string (0x32), graph (0x3a),
  // opset_import (0x42), metadata_props (0x72). JSON starts with '{' or whitespace.
  switch (d[0]) {
    case 0x08: case 0x12: case 0x1a: case 0x22: case 0x28: case 0x32: case 0x3a: case 0x42: case 0x72: return true;
    default: return false;
  }
}

bool file_looks_like_onnx(const std::string& path) {
  // Through io's checked reader (a FIFO or device is never opened); the loader that runs
  // next reports why a file that could not be read is refused.
  try {
    const auto b = io::read_file_prefix(path, 16);
    return looks_like_onnx(b.data(), b.size());
  } catch (const Error&) {
    return false;
  }
}

Tensor to_tensor(const TensorData& t, const std::string& where) {
  DType dt = to_dtype(t.elem_type, where);
  if (t.raw) {  // ONNX raw_data is little-endian in the same layout as rlx's storage of dt
    if (reinterpret_cast<uintptr_t>(t.raw) % dtype_size(dt) == 0) return Tensor::borrow(t.shape, dt, t.raw, t.keep);
    Tensor r(t.shape, dt);
    std::memcpy(r.mutable_raw(), t.raw, r.nbytes());
    return r;
  }
  if (!t.floats.empty()) {  // double values (float_data's are exact in double): f64 keeps every bit
    if ((int64_t)t.floats.size() != t.numel) throw InputError(where + ": value count does not match shape");
    Tensor r(t.shape, dt);
    convert_elements(t.floats.data(), DType::f64, r.mutable_raw(), dt, t.numel);
    return r;
  }
  std::vector<int64_t> v(t.ints.begin(), t.ints.end());
  v.resize((size_t)t.numel, 0);
  if (dt == DType::u64) {  // the bits of uint64_data (from_ints would refuse values above 2^63)
    Tensor r(t.shape, dt);
    if (!v.empty()) std::memcpy(r.mutable_raw(), v.data(), v.size() * 8);  // (an empty tensor has no data pointer)
    return r;
  }
  return Tensor::from_ints(t.shape, v, dt);
}

}  // namespace rlx::onnx
