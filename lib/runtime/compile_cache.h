#pragma once
// Compiled plans on disk (docs/cache.md): compiled mode's optimised graph (CSE, folding,
// simplification, fusion) stored in the persistent cache (io/blob_cache.h), so a second
// process with the same graph, inputs and device skips the optimiser. The key holds every
// thing the plan depends on: rlx's version and build, the graph's content (nodes, attrs,
// constants; not its path), the input shapes and dtypes, the optimiser's options and the
// backend and device. A cached plan is validated as it is read (indices, ops, registers)
// and rejected (rebuilt) when anything is off.
#include <optional>
#include <string>

#include "ir/graph.h"
#include "passes/passes.h"

namespace rlx {

// Hash of a graph's content: ops, ids, attrs, dtypes, declared shapes, constants, outputs.
uint64_t graph_content_hash(const ir::Graph& g);

// The full cache key of a compiled plan.
std::string plan_cache_key(const ir::Graph& g, const std::string& input_signature, const std::string& backend,
                           const std::string& device, const passes::OptOptions& options = {});

std::string serialize_plan(const passes::OptimizedGraph& og);
// Null (and *why) when the bytes are not a valid plan.
std::optional<passes::OptimizedGraph> deserialize_plan(const std::string& bytes, std::string* why);

}  // namespace rlx
