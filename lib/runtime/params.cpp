#include "runtime/params.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io/spec.h"

namespace fs = std::filesystem;

namespace rlx {

struct ParamStore::Source {
  std::string path;
  std::optional<io::SafetensorsFile> st;
  std::map<std::string, std::string> npy;  // name -> file
};

void ParamStore::add(const std::string& path) {
  auto s = std::make_shared<Source>();
  s->path = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.path().extension() == ".npy") s->npy[e.path().stem().string()] = e.path().string();
    if (s->npy.empty()) throw InputError("--params " + path + ": the directory holds no .npy files");
  } else if (!fs::exists(path, ec)) {
    throw InputError("--params " + path + ": no such file or directory");
  } else if (fs::path(path).extension() == ".npy") {
    s->npy[fs::path(path).stem().string()] = path;
  } else if (fs::path(path).extension() == ".safetensors") {
    s->st = io::SafetensorsFile::open(path);
  } else {
    throw InputError("--params " + path + ": expected a .safetensors file, a .npy file or a directory of .npy files");
  }
  sources_.push_back(std::move(s));
}

std::optional<Tensor> ParamStore::find(const std::string& name) const {
  for (const auto& s : sources_) {
    if (s->st && s->st->has(name)) return s->st->get(name);
    auto it = s->npy.find(name);
    if (it != s->npy.end()) return io::read_npy(it->second);
  }
  return std::nullopt;
}

std::vector<std::string> ParamStore::names() const {
  std::vector<std::string> r;
  for (const auto& s : sources_) {
    if (s->st)
      for (auto& n : s->st->names()) r.push_back(n);
    for (auto& [n, f] : s->npy) r.push_back(n);
  }
  return r;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::map<std::string, Tensor> bind_params(const ir::Graph& g, const ParamStore& store, const BindOptions& o,
                                          std::vector<std::string>* notes) {
  std::map<std::string, Tensor> out;
  std::vector<std::string> missing, problems;
  const auto available = store.names();
  uint64_t k = 0;
  for (const auto& n : g.nodes) {
    if (n.op != ir::Op::Param) continue;
    Shape want;
    for (const auto& d : n.decl_shape) want.push_back(d.value);
    auto t = store.find(n.param_name);
    k++;
    if (!t) {
      if (o.random) {
        // Scaled so activations stay O(1): 1/sqrt(fan_in) for matrices, around 1 for vectors.
        float a = want.size() >= 2 ? 1.0f / std::sqrt((float)std::max<int64_t>(want.back(), 1)) : 0.5f;
        float lo = want.size() >= 2 ? -a : 1.0f - a, hi = want.size() >= 2 ? a : 1.0f + a;
        out[n.id] = io::random_tensor(want, n.dtype, o.seed * 1000003 + k, lo, hi);
        if (notes) notes->push_back(n.param_name);
        continue;
      }
      std::vector<std::pair<size_t, std::string>> near;
      for (const auto& a : available) near.push_back({edit_distance(n.param_name, a), a});
      std::sort(near.begin(), near.end());
      std::string hint;
      for (size_t j = 0; j < near.size() && j < 3; ++j) hint += (j ? ", " : "") + near[j].second;
      missing.push_back("  " + n.param_name + " " + shape_str(want) + (hint.empty() ? "" : "  (closest: " + hint + ")"));
      continue;
    }
    if (t->shape() != want) {
      problems.push_back("  " + n.param_name + ": the graph declares " + shape_str(want) + ", the file has " +
                         shape_str(t->shape()));
      continue;
    }
    DType have = t->dtype();
    bool ok = have == n.dtype || (is_float(have) && is_float(n.dtype)) || (is_integer(have) && is_integer(n.dtype));
    if (have == DType::f64 && n.dtype != DType::f64) {  // never narrowed silently (docs/graph-format.md, Files)
      problems.push_back("  " + n.param_name + ": the graph declares " + dtype_name(n.dtype) + ", the file has f64 (float64), "
                         "which is not narrowed silently; convert the file to " + dtype_name(n.dtype) + " first");
      continue;
    }
    if (!ok) {
      problems.push_back("  " + n.param_name + ": the graph declares " + dtype_name(n.dtype) + ", the file has " + dtype_name(have));
      continue;
    }
    // In the node's dtype already: used as is (a memory-mapped file stays zero-copy, never
    // widened). Otherwise converted on the host (floats round to nearest even, ints exact).
    out[n.id] = have == n.dtype ? *t : t->astype(n.dtype);
  }
  std::string msg;
  if (!missing.empty()) {
    msg += g.file + ": " + std::to_string(missing.size()) + " parameter" + (missing.size() > 1 ? "s" : "") +
           " not found in the --params files" + (store.empty() ? " (none given; use --params FILE or --random-params)" : "") + ":\n";
    for (auto& m : missing) msg += m + "\n";
  }
  if (!problems.empty()) {
    msg += g.file + ": parameter mismatch:\n";
    for (auto& m : problems) msg += m + "\n";
  }
  if (!msg.empty()) {
    msg.pop_back();
    throw InputError(msg);
  }
  return out;
}

}  // namespace rlx
