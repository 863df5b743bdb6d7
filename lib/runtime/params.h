#pragma once
// Parameter binding: files (.safetensors, a directory of NAME.npy, or one
// NAME.npy) are searched by each param node's name.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace rlx {

class ParamStore {
 public:
  // Adds a file or directory; throws InputError if unreadable or of unknown kind.
  void add(const std::string& path);
  std::optional<Tensor> find(const std::string& name) const;
  std::vector<std::string> names() const;
  bool empty() const { return sources_.empty(); }

 private:
  struct Source;
  std::vector<std::shared_ptr<Source>> sources_;
};

struct BindOptions {
  bool random = false;  // fill unbound params with seeded values
  uint64_t seed = 0;
};

// Binds every param node. Missing params are listed all at once with the closest
// names found; a shape or dtype mismatch names both. Returns values by node id.
// `notes` receives what --random-params filled.
std::map<std::string, Tensor> bind_params(const ir::Graph& g, const ParamStore& store, const BindOptions& o,
                                          std::vector<std::string>* notes = nullptr);

// Edit distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace rlx
