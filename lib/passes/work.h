#pragma once
// Internal to lib/passes: the mutable graph the optimiser works on (passes.cpp) and the
// pattern rewrites (patterns.cpp) share. Not part of the passes interface.
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "passes/passes.h"

namespace rlx::passes::detail {

struct Work {
  std::vector<ir::Node> nodes;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  std::vector<int> outputs;
  int fresh = 0;

  int add_constant(Tensor t) {
    ir::Node c;
    c.op = ir::Op::Constant;
    c.id = "__const" + std::to_string(fresh++);
    c.dtype = t.dtype();
    for (auto d : t.shape()) c.decl_shape.push_back({d, ""});
    c.has_decl_shape = true;
    c.param_name = c.id;
    shapes.push_back(t.shape());
    dtypes.push_back(t.dtype());
    c.constant = std::move(t);
    nodes.push_back(std::move(c));
    return (int)nodes.size() - 1;
  }
};

// Runs node i on the CPU over its constant inputs; returns its value.
Tensor fold_node(const Work& w, int i);

// Keeps the nodes reachable from the outputs, in topological order.
std::vector<int> live_order(const Work& w);

// Compiled mode's pattern rewrites (patterns.cpp): the decomposed forms exporters write
// (LayerNorm, RMSNorm, GELU, MatMul + bias, attention, Conv + per-channel affine) become the
// registry's fused ops. Runs on the live graph after CSE/folding/simplification.
void rewrite_patterns(Work& w, const OptOptions& o, OptStats& st);

// Attention nodes read q, k, v through the transposes, reshapes and narrows that feed them, and
// write the layout of a transpose that reads them (attention_views.cpp; OptOptions::attention_views_*).
void fold_attention_views(Work& w, const OptOptions& o, OptStats& st);

}  // namespace rlx::passes::detail
