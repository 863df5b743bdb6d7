#pragma once
// The op registry: for every op, its name, arity, attributes with defaults, and
// shape/dtype rule. The loader, validation, shape inference, FLOP counting and
// the executors all read this one table.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/elementwise.h"
#include "ir/graph.h"

namespace rlx::ir {

// Index: the ONNX-style indexing and selection ops (where, argmax/argmin, cumsum, topk, gather,
// gather_elements, slice, pad, trilu); kernels in cpu_ops_index.cpp and vulkan/kernels_index.cpp.
enum class Category : uint8_t { Leaf, Binary, Unary, Reduce, Row, Matmul, Shape, Gather, Rope, Attention, Index, Spatial, Quant, Control };

enum class AttrType : uint8_t { Int, Float, Bool, String, Ints, Dtype, Floats };

struct AttrSpec {
  std::string name;
  AttrType type;
  std::optional<AttrValue> default_value;  // nullopt: required, or optional-without-default if !required
  bool required = false;
  std::vector<std::string> choices;  // for String
};

struct OpInfo {
  Op op;
  const char* name;
  int min_inputs, max_inputs;
  Category category;
  std::vector<AttrSpec> attrs;
};

// How an op is documented (docs/graph-format.md's op table and the JSON Schema are generated
// from the registry: lib/ir/op_docs.h). Every op has one.
struct OpDoc {
  std::string inputs;  // e.g. "a, b"; "?" marks an optional positional input
  std::string result;  // one line, Markdown
  // Phrases for attributes whose default is not a plain value ("all", "1/sqrt(D)") or that
  // need a word more; the others are shown as their default value or "required".
  std::map<std::string, std::string> attr_notes;
};

const OpInfo& op_info(Op op);
// The data-dependent ops (nonzero, compress, unique, topk_dynamic, non_max_suppression): how
// many results they have; 0 for every other op.
int data_dependent_results(Op op);
const OpDoc& op_doc(Op op);
const char* op_name(Op op);
std::optional<Op> op_from_name(const std::string& name);
const std::vector<std::string>& all_op_names();

// Output shape and dtype of node `n` given its inputs' shapes/dtypes. Throws
// InputError naming the node on any mismatch.
void infer_node(const Graph& g, int node_index, TypedShapes& ts);

// Whole-graph inference for concrete input shapes (symbols bound in ts.symbols).
// Fills ts.shapes/dtypes for every node.
TypedShapes infer_shapes(const Graph& g, const std::map<std::string, Shape>& input_shapes,
                         const std::map<std::string, Shape>& param_shapes = {});

// Floating-point operations of one node (2 per multiply-add), for throughput reports.
double node_flops(const Graph& g, int node_index, const TypedShapes& ts);

// Helpers shared by inference and executors.
int normalize_axis(int64_t axis, int rank, const Node& n, const Graph& g);
Shape broadcast_shapes(const Shape& a, const Shape& b, const Node& n, const Graph& g);
std::string node_ref(const Graph& g, const Node& n);  // "graph.json: node 'h' (linear)"

// `slice` resolved for an input shape: per input axis, the first element, the step and the
// number of elements taken (ONNX Slice clamping). Unsliced axes get {0, 1, dim}. Returns an
// empty vector and sets *error for bad attributes.
struct SliceAxis {
  int64_t start = 0, step = 1, len = 0;
};
std::vector<SliceAxis> slice_plan(const Attrs& a, const Shape& x, std::string* error);

// An attention node's `views` (written by compiled mode's attention_views pass,
// lib/passes/attention_views.cpp): heads not grouped (Hq = Hkv = H); q, k and v element
// (b, h, s, d) at off + b*sb + h*sh + s*ss + d in their input's storage; o element (b, h, i, d)
// at b*sb + h*sh + i*ss + d of the output, whose shape is `out_shape`. The attribute holds
// B, H, Sq, Sk, D, Dv, then q's off, sb, sh, ss, k's, v's, then o's sb, sh, ss (21 values).
struct AttentionViews {
  int64_t B = 0, H = 0, Sq = 0, Sk = 0, D = 0, Dv = 0;
  int64_t off[3] = {0, 0, 0};
  int64_t stride[4][3] = {};  // q, k, v, o: batch, head, position
  std::vector<int64_t> out_shape;
  // Elements of its storage operand k (0 q, 1 k, 2 v, 3 o) spans from 0: the last one read + 1.
  int64_t extent(int k) const;
};
AttentionViews attention_views(const Attrs& a, std::string* error);
void set_attention_views(Attrs& a, const AttentionViews& v);

// The quantization parameters of a quantize/dequantize node resolved against its input shape:
// element i of x uses scale (and zero point) element scale_index(i). Per tensor: one value;
// per axis: the coordinate along `axis`; blocked: x's coordinates with the `axis` one divided
// by block_size (the scale has x's rank).
struct QuantParams {
  enum Kind : uint8_t { PerTensor, PerAxis, Blocked } kind = PerTensor;
  int axis = 0;
  int64_t block_size = 0;
};
QuantParams quant_params(const Attrs& a, const Shape& x, const Shape& scale, std::string* error);

// Elementwise formula for a Unary/Binary-category node (gelu picks erf/tanh; vjps too).
EwOp node_ew_op(const Node& n);

}  // namespace rlx::ir
