// Control flow: If, Loop and Scan. An If whose condition is known when the model is
// specialised (a constant, shape arithmetic, or a small input bound by value) is folded: the
// chosen branch is imported inline, its outputs become the If's outputs, and the node
// disappears (docs/ir-design.md section 3, "Folding").
#include "onnx/importer.h"

namespace rlx::onnx {

namespace {

struct Control : Importer {
  using Importer::Importer;

  const GraphDef& body(const char* name) {
    auto a = attr(name, kAttrGraph);
    if (!a || !a->g) fail(std::string("attribute '") + name + "' (a graph) is required");
    return *a->g;
  }

  bool fold_If() {
    auto c = value_of(0);
    if (!c) return false;
    if (c->size() != 1) fail("the condition must have one element, it has " + std::to_string(c->size()));
    const bool then = c->d(0) != 0;
    const GraphDef& g = body(then ? "then_branch" : "else_branch");
    body(then ? "else_branch" : "then_branch");  // both branches are required
    if (g.outputs.size() < cur_->outputs.size())
      fail(std::string(then ? "then_branch" : "else_branch") + " has " + std::to_string(g.outputs.size()) + " outputs, the node " +
           std::to_string(cur_->outputs.size()));
    if (!g.inputs.empty()) fail("a branch takes no inputs, '" + g.name + "' has " + std::to_string(g.inputs.size()));
    std::vector<Val> outs = inline_graph(g, {});
    for (size_t k = 0; k < cur_->outputs.size(); ++k) set_out(k, outs[k]);
    return true;
  }

  void map_If() {
    unsupported("the condition '" + cur_->inputs[0] +
                "' is known only at run time (it is neither constant, computed from shapes, nor computed from a small input given by value)");
  }
};

}  // namespace

void control_ops(std::vector<OpDef>& t) {
  using F = Control;
  t.insert(t.end(), {
      {"If", "", 1, map<&F::map_If>, fold<&F::fold_If>, "folded", "",
       "folded when the condition is known at specialisation (a constant, shape arithmetic, or a small input given by value: "
       "the plan is then specialised for that value); the chosen branch is imported inline"},
  });
}

}  // namespace rlx::onnx
