// libFuzzer harness: the ONNX importer under structure-aware mutations. The input is a
// serialized ModelProto; LLVMFuzzerCustomMutator parses it with the generated onnx.pb.h
// (protobuf-lite: no reflection, so each mutation is written against the message fields)
// and changes what byte-level mutations rarely reach intact: node op types, attributes
// (names, types, values, subgraph attributes), value shapes and dtypes, initializer sizes
// and data, node wiring, opsets. The model is then run through the same body as fuzz_onnx
// (parse, decode every initializer, specialise). Inputs that do not parse are mutated as
// bytes (LLVMFuzzerMutate), so the byte-level harness's corpus is a valid start too.
#include <onnx.pb.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fuzz_onnx_body.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

using Rng = std::mt19937_64;

// Operators the importer maps (and a few it refuses), so a changed op_type usually lands
// on a mapping rather than on "unsupported operator".
const char* const kOps[] = {
    "Add", "Sub", "Mul", "Div", "Pow", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Erf", "Cast",
    "MatMul", "Gemm", "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization",
    "LayerNormalization", "Softmax", "LogSoftmax", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat",
    "Split", "Slice", "Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements", "Expand", "Tile", "Pad",
    "Range", "Shape", "Size", "ConstantOfShape", "Constant", "Identity", "Where", "Equal", "Less", "Greater", "Not",
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ArgMax", "ArgMin", "TopK", "CumSum", "Einsum",
    "Resize", "DepthToSpace", "SpaceToDepth", "EyeLike", "Trilu", "OneHot", "NonZero", "If", "Loop", "LSTM", "GRU", "RNN",
    "InstanceNormalization", "Clip", "Min", "Max", "Mean", "Sum", "HardSigmoid", "LeakyRelu", "Elu", "Selu", "Gelu",
    "DequantizeLinear", "QuantizeLinear", "MatMulInteger", "ReverseSequence", "GridSample", "Mod", "BitShift", "Dropout"};
const char* const kAttrs[] = {"axis", "axes", "perm", "keepdims", "split", "num_outputs", "pads", "strides", "kernel_shape",
                              "group", "dilations", "mode", "to", "alpha", "beta", "transA", "transB", "value", "epsilon",
                              "blocksize", "k", "largest", "sorted", "exclusive", "reverse", "hidden_size", "direction",
                              "then_branch", "else_branch", "body", "ceil_mode", "auto_pad", "output_padding", "batch_dims",
                              "reduction", "equation", "upper", "start", "end", "noop_with_empty_axes", "count_include_pad"};
const int64_t kInts[] = {0, 1, 2, 3, -1, -2, 16, 17, 255, 256, 65536, int64_t(1) << 24, int64_t(1) << 31, int64_t(1) << 32,
                         int64_t(1) << 40, int64_t(1) << 62, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
const float kFloats[] = {0.f, 1.f, -1.f, 0.5f, 1e-12f, 1e38f, -1e38f, std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
const int kTypes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 16, 0, 99};

template <class T, size_t N>
const T& pick(Rng& r, const T (&a)[N]) { return a[r() % N]; }
int64_t an_int(Rng& r) { return r() % 4 ? pick(r, kInts) : (int64_t)(r() % 9) - 4; }

// Every value name of the graph, to rewire a node onto.
std::vector<std::string> names(const onnx::GraphProto& g) {
  std::vector<std::string> v;
  for (const auto& i : g.input()) v.push_back(i.name());
  for (const auto& i : g.initializer()) v.push_back(i.name());
  for (const auto& n : g.node())
    for (const auto& o : n.output()) v.push_back(o);
  v.push_back("");
  return v;
}

void mutate_shape(Rng& r, onnx::TensorShapeProto* s) {
  switch (r() % 4) {
    case 0: if (s->dim_size()) s->mutable_dim((int)(r() % s->dim_size()))->set_dim_value(an_int(r)); break;
    case 1: if (s->dim_size()) s->mutable_dim((int)(r() % s->dim_size()))->set_dim_param(r() % 2 ? "n" : "batch"); break;
    case 2: s->add_dim()->set_dim_value(r() % 2 ? 1 : an_int(r)); break;
    default: if (s->dim_size()) s->mutable_dim()->RemoveLast(); break;
  }
}

void mutate_value_info(Rng& r, onnx::ValueInfoProto* v) {
  auto* t = v->mutable_type()->mutable_tensor_type();
  if (r() % 3 == 0) t->set_elem_type(pick(r, kTypes));
  else mutate_shape(r, t->mutable_shape());
}

void mutate_tensor(Rng& r, onnx::TensorProto* t) {
  switch (r() % 6) {
    case 0: t->set_data_type(pick(r, kTypes)); break;
    case 1: if (t->dims_size()) t->set_dims((int)(r() % t->dims_size()), an_int(r)); else t->add_dims(an_int(r)); break;
    case 2: t->add_dims(r() % 2 ? 1 : an_int(r)); break;
    case 3: {  // raw data: truncate, extend, or replace with typed fields
      std::string raw = t->raw_data();
      if (r() % 2 && !raw.empty()) raw.resize(r() % raw.size());
      else raw.append(size_t(1) << (r() % 5), (char)(r() & 0xff));
      t->set_raw_data(raw);
      break;
    }
    case 4: t->clear_raw_data(); for (int k = 0, n = (int)(r() % 5); k < n; ++k) t->add_int64_data(an_int(r)); break;
    default: t->clear_raw_data(); for (int k = 0, n = (int)(r() % 5); k < n; ++k) t->add_float_data(pick(r, kFloats)); break;
  }
}

void mutate_graph(Rng& r, onnx::GraphProto* g, int depth);

void mutate_attribute(Rng& r, onnx::AttributeProto* a, const onnx::GraphProto& g, int depth) {
  switch (r() % 9) {
    case 0: a->set_type(onnx::AttributeProto_AttributeType_INT); a->set_i(an_int(r)); break;
    case 1: a->set_type(onnx::AttributeProto_AttributeType_INTS); a->clear_ints();
            for (int k = 0, n = (int)(r() % 20); k < n; ++k) a->add_ints(an_int(r)); break;
    case 2: a->set_type(onnx::AttributeProto_AttributeType_FLOAT); a->set_f(pick(r, kFloats)); break;
    case 3: a->set_type(onnx::AttributeProto_AttributeType_FLOATS); a->clear_floats();
            for (int k = 0, n = (int)(r() % 6); k < n; ++k) a->add_floats(pick(r, kFloats)); break;
    case 4: a->set_type(onnx::AttributeProto_AttributeType_STRING); a->set_s(r() % 2 ? "" : "constant"); break;
    case 5: a->set_type(onnx::AttributeProto_AttributeType_TENSOR); mutate_tensor(r, a->mutable_t()); break;
    case 6:  // a subgraph attribute: a copy of the enclosing graph, mutated (If/Loop/Scan bodies)
      if (depth < 2) {
        a->set_type(onnx::AttributeProto_AttributeType_GRAPH);
        *a->mutable_g() = g;
        a->mutable_g()->clear_initializer();
        mutate_graph(r, a->mutable_g(), depth + 1);
      }
      break;
    case 7: a->set_name(pick(r, kAttrs)); break;
    default: {  // type and payload disagree (a valid enum value: the generated setter asserts that)
      const int t = (int)(r() % 16);
      if (onnx::AttributeProto_AttributeType_IsValid(t)) a->set_type((onnx::AttributeProto_AttributeType)t);
      break;
    }
  }
}

void mutate_graph(Rng& r, onnx::GraphProto* g, int depth) {
  const int what = (int)(r() % 12);
  if (g->node_size() == 0 && what < 8) {
    auto* n = g->add_node();
    n->set_op_type(pick(r, kOps));
    n->add_input(g->input_size() ? g->input(0).name() : "x");
    n->add_output(g->output_size() ? g->output(0).name() : "y");
    return;
  }
  onnx::NodeProto* n = g->node_size() ? g->mutable_node((int)(r() % g->node_size())) : nullptr;
  switch (what) {
    case 0: n->set_op_type(pick(r, kOps)); break;
    case 1: case 2: {
      onnx::AttributeProto* a = n->attribute_size() && r() % 2 ? n->mutable_attribute((int)(r() % n->attribute_size())) : n->add_attribute();
      if (a->name().empty()) a->set_name(pick(r, kAttrs));
      mutate_attribute(r, a, *g, depth);
      break;
    }
    case 3: if (n->attribute_size()) n->mutable_attribute()->RemoveLast(); break;
    case 4: {  // rewire: an input onto another value, or add / drop one
      auto v = names(*g);
      if (n->input_size() && r() % 3) n->set_input((int)(r() % n->input_size()), v[r() % v.size()]);
      else if (r() % 2) n->add_input(v[r() % v.size()]);
      else if (n->input_size()) n->mutable_input()->RemoveLast();
      break;
    }
    case 5:  // outputs: drop all, drop one, add one
      if (r() % 3 == 0) n->clear_output();
      else if (r() % 2 && n->output_size()) n->mutable_output()->RemoveLast();
      else n->add_output("o" + std::to_string(r() % 8));
      break;
    case 6: *g->add_node() = *n; break;  // duplicate (names collide)
    case 7:
      if (g->node_size() > 1) {
        int a = (int)(r() % g->node_size()), b = (int)(r() % g->node_size());
        g->mutable_node()->SwapElements(a, b);
      }
      break;
    case 8: if (g->input_size()) mutate_value_info(r, g->mutable_input((int)(r() % g->input_size()))); break;
    case 9: if (g->output_size()) mutate_value_info(r, g->mutable_output((int)(r() % g->output_size()))); break;
    default:
      if (g->initializer_size()) mutate_tensor(r, g->mutable_initializer((int)(r() % g->initializer_size())));
      else if (n) n->set_op_type(pick(r, kOps));
      break;
  }
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  Rng r(seed);
  onnx::ModelProto m;
  if (!m.ParseFromArray(data, (int)size) || r() % 16 == 0) return LLVMFuzzerMutate(data, size, max_size);
  for (int k = 0, n = 1 + (int)(r() % 3); k < n; ++k) {
    if (r() % 10 == 0 && m.opset_import_size()) m.mutable_opset_import(0)->set_version((int64_t)(6 + r() % 14));
    else mutate_graph(r, m.mutable_graph(), 0);
  }
  std::string out;
  if (!m.SerializeToString(&out) || out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return rlx::fuzz::onnx_one_input(data, size); }
