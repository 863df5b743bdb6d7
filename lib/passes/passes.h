#pragma once
// Graph optimisation for compiled mode, on a graph with concrete shapes:
//   CSE (params and constants never merged), constant folding, removal of
//   no-ops (identity reshape/transpose/cast, x*1, x+0, ...), scalar merging,
//   pattern rewrites of the decomposed forms exporters write (LayerNorm, RMSNorm, GELU,
//   MatMul + bias, attention, Conv + BatchNorm: patterns.cpp) into the registry's fused ops,
//   and fusion of elementwise chains into FusedPrograms.
#include <memory>
#include <string>
#include <vector>

#include "ir/elementwise.h"
#include "ir/graph.h"

namespace rlx::passes {

struct OptStats {
  int nodes_before = 0, nodes_after = 0;
  int cse_merged = 0, folded = 0, simplified = 0, scalars_merged = 0;
  int fused_groups = 0, fused_nodes = 0;
  int patterns = 0;           // pattern rewrites (patterns.cpp)
  std::string pattern_kinds;  // e.g. "attention 1, gelu 1, layer_norm 3, linear 6"
};

struct OptimizedGraph {
  ir::Graph graph;      // live nodes only; outputs in the original order
  ir::TypedShapes ts;
  // For a fused group's root node: its program; the node's `inputs` are the group's external inputs.
  std::vector<std::shared_ptr<FusedProgram>> fused;
  std::vector<std::string> fused_members;  // per root: ids of the nodes it replaces
  OptStats stats;
};

struct OptOptions {
  bool cse = true, fold = true, simplify = true, patterns = true, fuse = true;
  int64_t max_fold_elements = 1 << 20;
  // Distinct tensor inputs of one fused kernel (bindings/push constants on GPUs).
  size_t max_fused_inputs = 16;
  // matmul(x, B) + b with a constant B [K, N] becomes linear(x, B^T, b), B^T a copy made once
  // (a GPU's tiles read a transposed weight faster). Off where the backend packs either layout
  // itself (the CPU): the product stays on B as given, its bias added in the product's
  // epilogue, and the weight is not held twice.
  bool transposed_linear = true;
  // Integer products with a float epilogue (matmul_integer_scaled, patterns.cpp): on where the
  // backend runs that op (the CPU).
  bool integer_gemm = false;
  // f16/bf16 graphs get the attention rewrite too (patterns.cpp): on where the backend's attention
  // kernel reads 2-byte q/k/v itself and beats the unfused 16-bit products (Vulkan with 16-bit
  // storage and no tensor cores: attention*.comp ".h16"). Off elsewhere: the CPU would widen a
  // 16-bit attention into f32 scratch, and tensor-core products beat the scalar flash kernel.
  // Per dtype: Vulkan fuses f16 attention on tensor-core devices too, onto attention_coop.comp.
  bool half_attention_f16 = false, half_attention_bf16 = false;
  // Attention reads q, k and v in place through the transposes, reshapes and narrows that make
  // them, and writes the layout of the transpose after it (attention_views.cpp: the node's
  // `views` attribute): on where the backend's attention kernel follows strides (Vulkan's
  // tensor-core flash attention, f16); _all for every dtype (RLX_VK_ATTENTION_VIEWS=1: the
  // other Vulkan kernels copy through scratch; tests). The CPU reads contiguous operands only.
  // Offsets and strides of q, k, v must be multiples of attention_view_align elements.
  bool attention_views_f16 = false, attention_views_all = false;
  // With it, the row-wise linear products on either side (ViT's qkv product reading
  // x.transpose(1, 0), and the out projection whose result is transposed back) run on rows in
  // the order that makes those two transposes go too.
  bool attention_views_linear = true;
  int64_t attention_view_align = 1;
};

OptimizedGraph optimize(const ir::Graph& g, const ir::TypedShapes& ts, const OptOptions& o = {});

// Nodes whose output is an alias of their first input's storage (no kernel needed):
// reshape, and casts that do not change values.
bool is_alias_node(const ir::Node& n, const ir::TypedShapes& ts, int index);
// A narrow whose result is one contiguous block of its input (every axis before the narrowed
// one of extent 1: e.g. q, k and v taken from a [3, ...] tensor): that block's offset in
// elements, else -1. The session views such a narrow in its input's storage where the byte
// offset keeps the memory plan's alignment (no kernel runs), and runs the narrow otherwise.
int64_t contiguous_narrow_offset(const ir::Node& n, const ir::TypedShapes& ts);

}  // namespace rlx::passes
