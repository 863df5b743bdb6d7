#pragma once
// The IR: a graph of nodes in topological order. Loaded from the JSON format
// (loader.h), typed by the op registry (op_registry.h).
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace rlx::ir {

enum class Op : uint8_t {
#define OP(E, N, MIN, MAX, CAT) E,
#include "ir/ops.def"
#undef OP
};
constexpr int kNumOps = 0
#define OP(E, N, MIN, MAX, CAT) +1
#include "ir/ops.def"
#undef OP
    ;

// An attribute value, after defaults are filled in.
using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>>;

struct Attrs {
  std::map<std::string, AttrValue> values;
  bool has(const std::string& k) const { return values.count(k) > 0; }
  int64_t i(const std::string& k) const;
  double f(const std::string& k) const;  // accepts int too
  bool b(const std::string& k) const;
  const std::string& s(const std::string& k) const;
  const std::vector<int64_t>& ints(const std::string& k) const;
  std::vector<double> floats(const std::string& k) const;  // a `floats` attribute (also accepts ints)
  bool is_none(const std::string& k) const { return !has(k); }  // optional attrs without default
};

// A declared dimension: concrete, or a symbol (input nodes only).
struct Dim {
  int64_t value = -1;
  std::string symbol;  // non-empty when symbolic
};

struct Graph;

struct Node {
  std::string id;
  Op op = Op::Input;
  std::vector<int> inputs;  // indices into Graph::nodes (always earlier)
  Attrs attrs;
  DType dtype = DType::f32;     // declared (leaves) or inferred
  std::vector<Dim> decl_shape;  // as written in the file (may be empty if absent)
  bool has_decl_shape = false;
  std::string param_name;     // param: name to bind (defaults to id)
  Tensor constant;            // constant: its value
  int json_index = -1;        // position in the file's "nodes" array
  // Control nodes (if: then, else; loop and scan: body). A body reads only its own input
  // nodes: the op's body inputs, then the captured values (the node's last
  // attrs "num_captures" inputs), in that order.
  std::vector<std::shared_ptr<const Graph>> bodies;
};

struct Graph {
  std::string file;  // where it was loaded from (for messages)
  std::string name;
  std::vector<Node> nodes;  // topological order
  std::vector<int> outputs;
  std::map<std::string, int> index;  // id -> node index
  // Data-dependent sizes (docs/ir-design.md section 3): the sizes this graph was made for, by
  // their nodes' `size_key` (a node whose key is absent was given a provisional size), and, for
  // an ONNX import, how to make the graph again (with its params) for other observed sizes.
  // A graph without `resize` (a JSON file) runs only with the sizes its results declare.
  std::map<std::string, int64_t> sizes;
  std::function<std::pair<std::shared_ptr<const Graph>, std::map<std::string, Tensor>>(const std::map<std::string, int64_t>&)> resize;
  // A body of a run-time If/Loop/Scan whose import needed the values of some of its inputs (a
  // Slice start or a Resize size computed from the iteration number, a carried value or a
  // captured one): `value_deps` holds those inputs' values (by input id) this graph was made
  // for, and `respecialize` imports the body again for other input values (and shapes). The
  // runtime (lib/runtime/control.cpp) picks, per call, the body made for the inputs given.
  std::map<std::string, std::vector<double>> value_deps;
  std::function<std::shared_ptr<const Graph>(const std::map<std::string, Tensor>&)> respecialize;

  int find(const std::string& id) const {
    auto it = index.find(id);
    return it == index.end() ? -1 : it->second;
  }
  std::vector<int> inputs_of_kind(Op op) const {
    std::vector<int> r;
    for (int i = 0; i < (int)nodes.size(); ++i)
      if (nodes[i].op == op) r.push_back(i);
    return r;
  }
};

// Concrete shapes and dtypes of every node for one binding of the inputs.
struct TypedShapes {
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  std::map<std::string, int64_t> symbols;
};

}  // namespace rlx::ir
