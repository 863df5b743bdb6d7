#pragma once
// ONNX models: parsed once (Model::load), then specialised for concrete input shapes
// (Model::specialize) into an rlx IR graph plus its parameters. Specialisation folds the
// shape arithmetic exporters write (Shape, Gather, Concat, ConstantOfShape, Range, ...) on
// the host with exact int64/double values, maps every remaining ONNX node onto registry ops
// by name (ir::op_from_name), and is cached by the input-shape signature: a later call with
// other shapes specialises again instead of failing.
//
// Hostile files are refused with InputError (exit 2) naming the file: truncated or malformed
// protobuf, absurd dims, tensor data whose size disagrees with its shape, cycles, external
// data paths that leave the model's folder. This library depends on ir (and io) only; the
// protobuf types never appear in its headers.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace rlx::onnx {

struct Limits {
  size_t max_file_bytes = (size_t)2047 << 20;  // protobuf's own ceiling is 2 GiB
  size_t max_nodes = 1'000'000;
  size_t max_rank = 16;
  int64_t max_tensor_elements = int64_t(1) << 36;
  int64_t max_folded_elements = int64_t(1) << 22;  // host-side constant folding
  int max_graph_depth = 16;  // nesting of subgraphs (If/Loop/Scan bodies) below the main graph
};

// ONNX TensorProto.DataType values this importer knows by name.
enum ElemType : int {
  kFloat = 1, kUint8 = 2, kInt8 = 3, kUint16 = 4, kInt16 = 5, kInt32 = 6, kInt64 = 7, kString = 8,
  kBool = 9, kFloat16 = 10, kDouble = 11, kUint32 = 12, kUint64 = 13, kBfloat16 = 16,
};
const char* elem_type_name(int t);
// rlx dtype for an ONNX element type; throws InputError (unsupported) for the others.
DType to_dtype(int elem_type, const std::string& where);

// A tensor value stored in the model (initializer or attribute): shape, element type and
// either little-endian bytes (raw_data or an external file, kept alive by `keep`) or the
// typed repeated fields decoded to int64/double.
struct TensorData {
  std::string name;
  int elem_type = 0;
  Shape shape;
  int64_t numel = 0;
  const uint8_t* raw = nullptr;  // numel * element size bytes, little-endian
  std::shared_ptr<const void> keep;
  std::vector<int64_t> ints;   // typed int fields (int32_data/int64_data/uint64_data)
  std::vector<double> floats;  // typed float fields (float_data/double_data)
  bool external = false;
};

// What a graph value is: a tensor, a sequence of tensors, or an optional (of a tensor or of a
// sequence). Maps are refused when the file is parsed.
enum class ValueKind : uint8_t { Tensor, Sequence, Optional };
struct ValueType {
  ValueKind kind = ValueKind::Tensor;
  ValueKind inner = ValueKind::Tensor;  // an optional's content: Tensor or Sequence
  int elem_type = 0;                    // of the tensor(s) at the bottom; 0: unknown
  bool is_sequence() const { return kind == ValueKind::Sequence || (kind == ValueKind::Optional && inner == ValueKind::Sequence); }
};

struct GraphDef;

struct Attribute {
  std::string name;
  int type = 0;  // AttributeProto.AttributeType
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::shared_ptr<TensorData> t;
  std::shared_ptr<const GraphDef> g;  // a GRAPH attribute (If's branches, Loop's and Scan's body)
  ValueType tp;                        // a TYPE_PROTO attribute (Optional's `type`)
};

struct NodeDef {
  std::string op_type, name, domain;
  std::vector<std::string> inputs, outputs;  // "" = an omitted optional input/output
  std::vector<Attribute> attrs;
  int index = 0;  // position in the file's node list
  const Attribute* attr(const std::string& n) const {
    for (const auto& a : attrs)
      if (a.name == n) return &a;
    return nullptr;
  }
};

struct ValueInfo {
  std::string name;
  int elem_type = 0;
  bool has_shape = false;
  std::vector<ir::Dim> dims;  // symbol set for dim_param (or unknown dims: "?N"); of the elements of a sequence
  ValueType type;             // type.elem_type == elem_type
};

// A subgraph (a GRAPH attribute), checked like the main graph when the file is parsed. Its
// nodes may read values of the enclosing graphs that are defined before the node holding it
// (ONNX's lexical scoping); those names are its `captures`, in order of first use, including
// those its own nested subgraphs read from further out.
struct GraphDef {
  std::string name;
  std::vector<ValueInfo> inputs, outputs;
  std::vector<NodeDef> nodes;
  std::map<std::string, std::shared_ptr<TensorData>> inits;
  std::vector<std::string> captures;
  int depth = 1;  // 1: a subgraph of the main graph
};

// The result of one specialisation: an rlx graph with concrete shapes, and the values of
// its param nodes by node id (initializers, borrowed from the model where possible).
struct Specialized {
  std::shared_ptr<ir::Graph> graph;
  std::map<std::string, Tensor> params;
  std::map<std::string, int64_t> dims;  // the symbolic dims as bound
  // Inputs whose VALUES the specialisation used (a shape, axes, k or pads argument given as a
  // graph input), with those values: the graph is valid only for the same values.
  std::map<std::string, std::vector<double>> value_deps;
};

class Model : public std::enable_shared_from_this<Model> {
 public:
  // Reads and validates a model file. External data is resolved inside the file's folder.
  static std::shared_ptr<Model> load(const std::string& path, const Limits& limits = {});
  // Parses bytes in memory (`file_name` names it in messages; `dir` resolves external data,
  // empty: external data is refused).
  static std::shared_ptr<Model> parse(const uint8_t* data, size_t size, const std::string& file_name,
                                      const std::string& dir, const Limits& limits = {});

  const std::string& file() const { return file_; }
  int64_t opset() const { return opset_; }  // of the default domain (ai.onnx)
  // The version the model imports of an operator domain ("" or "ai.onnx": the default
  // domain, as opset()); 0 where it imports none.
  int64_t opset(const std::string& domain) const {
    if (domain.empty() || domain == "ai.onnx") return opset_;
    auto it = domain_opsets_.find(domain);
    return it == domain_opsets_.end() ? 0 : it->second;
  }
  int64_t ir_version() const { return ir_version_; }
  const std::string& producer() const { return producer_; }
  // Graph inputs that have no initializer (they must be given), then those that do
  // (defaults an input may override), in file order.
  const std::vector<ValueInfo>& inputs() const { return inputs_; }
  const std::vector<ValueInfo>& outputs() const { return outputs_; }
  const std::vector<NodeDef>& nodes() const { return nodes_; }
  const std::map<std::string, std::shared_ptr<TensorData>>& initializers() const { return inits_; }
  bool is_default_input(const std::string& name) const { return inits_.count(name) > 0; }

  // Specialises the graph for the given input shapes (by ONNX input name; a name that is an
  // initializer overrides that default; a sequence input `x` of k tensors is given as
  // shapes["x"] = {k} and its elements as "x.0" ... "x.<k-1>"; an optional input without a value
  // is not given) and symbolic dims (--dim NAME=SIZE, used for inputs
  // not given). Cached by the shape signature. Throws InputError naming the ONNX node.
  // `values`: the given inputs' values; an input of at most kMaxValueBoundElements elements
  // that a node needs as a constant (Reshape's shape, Slice's starts, TopK's k, ...) is
  // bound by value, and the cache entry is then keyed by that value too.
  std::shared_ptr<const Specialized> specialize(const std::map<std::string, Shape>& input_shapes,
                                                const std::map<std::string, int64_t>& dims = {},
                                                const std::map<std::string, Tensor>& values = {});
  static constexpr int64_t kMaxValueBoundElements = 64;
  int specializations() const { return specializations_; }
  // Drops `sp` from the specialisation cache (its memory goes with the caller's last reference):
  // rlx generate's plan for a KV cache capacity it has outgrown.
  void forget(const std::shared_ptr<const Specialized>& sp);

  const Limits& limits() const { return limits_; }

 private:
  Model() = default;
  std::string file_, dir_, producer_;
  int64_t opset_ = 0, ir_version_ = 0;
  std::map<std::string, int64_t> domain_opsets_;  // the other domains' imported versions
  Limits limits_;
  std::vector<ValueInfo> inputs_, outputs_;
  std::vector<NodeDef> nodes_;
  std::map<std::string, std::shared_ptr<TensorData>> inits_;
  std::vector<std::string> init_order_;
  std::map<std::string, std::vector<std::shared_ptr<const Specialized>>> cache_;
  // Shape keys in the order they were first specialised: the cache keeps the most recent
  // kMaxCachedShapes (a decode loop's cache grows by one position per step, and each length's
  // specialisation holds folded constants such as its causal mask).
  std::deque<std::string> cache_order_;
  static constexpr size_t kMaxCachedShapes = 16;
  std::mutex mu_;
  int specializations_ = 0;
  friend class Importer;
  friend struct ModelParser;
};

// True when the bytes look like an ONNX ModelProto (and not like JSON): used to route a
// file to the ONNX importer by content, whatever its extension.
bool looks_like_onnx(const uint8_t* data, size_t size);
bool file_looks_like_onnx(const std::string& path);

// Decodes a TensorData to an rlx host tensor of its dtype (f32 data is borrowed without a
// copy when aligned). Throws InputError for element types rlx has no dtype for.
Tensor to_tensor(const TensorData& t, const std::string& where);

// One row of the importer's operator table (docs/onnx.md is generated from it).
struct OpSupport {
  std::string op_type;
  std::string maps_to;                 // registry ops used, or "folded"
  std::vector<std::string> needs;      // registry ops the mapping needs that this build lacks
  std::string notes;
};
std::vector<OpSupport> supported_ops();

}  // namespace rlx::onnx
