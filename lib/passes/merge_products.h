#pragma once
// Sibling products as one (issue 31): matmul_nbits nodes that read the same activation with the
// same k, bits, block_size, accuracy_level and scale dtype, their weights params or constants
// (q, k and v of a layer; gate and up of an MLP), become one matmul_nbits over their weights
// concatenated along n (the packed layout is [n, ...] row-major, so the concatenation is the
// parts' bytes one after the other), and each former product a narrow of its columns, keeping
// its id. Where the rows are one (a decode step: [1, ..., 1, n]) every narrow is one contiguous
// block of the product and the session views it in place (passes::contiguous_narrow_offset),
// so no kernel runs for it; with more rows (a prompt step) each narrow copies its columns,
// M x n values against the product's M x n x k. The rewrite is on the graph the session runs,
// so eager, lazy and compiled mode and every backend see the same nodes.
//
// The session applies it once when it is made (Session's constructor), for graphs without
// control nodes (their segments are sessions of their own and get it there). The concatenated
// weights are made once per set of source tensors and remembered while those tensors' storage
// lives, so that a model specialised again (another cache length) or a second session over the
// same params reuses them; an entry whose sources are gone is dropped at the next merge. The
// storage is a valid key because params are never written in place (the CPU reads them in place
// too). RLX_MERGE_PRODUCTS=0 turns the rewrite off (for A/B measurements).
#include <map>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "ir/graph.h"

namespace rlx::passes {

struct MergeStats {
  int groups = 0;    // merged products made
  int products = 0;  // products they replace
  std::string text;  // one line per group: "q+k+v: 3 products, n 2048+256+256 -> 2560"
};

// False when RLX_MERGE_PRODUCTS is 0 (read once per call).
bool merge_products_enabled();

// The rewritten graph, with the merged weights added to `params` under the merged node's
// param ids (the parts' weights stay in `params` where other nodes still read them, and are
// removed otherwise); nullptr where nothing merges (the graph and params are left as they are).
std::shared_ptr<const ir::Graph> merge_sibling_products(const ir::Graph& g, std::map<std::string, Tensor>& params,
                                                        MergeStats* stats = nullptr);

}  // namespace rlx::passes
