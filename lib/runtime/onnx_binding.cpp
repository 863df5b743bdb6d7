#include "runtime/onnx_binding.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <iostream>

#include "core/error.h"
#include "io/file.h"
#include "io/safetensors.h"
#include "io/spec.h"
#include "ir/loader.h"
#include "ir/op_registry.h"
#include "ir/writer.h"

namespace fs = std::filesystem;

namespace rlx {

bool is_onnx_file(const std::string& path) { return onnx::file_looks_like_onnx(path); }

std::pair<std::string, std::string> split_named_assignment(const std::string& s, const std::string& flag,
                                                           const std::vector<std::string>& names) {
  size_t best = 0;
  for (const auto& n : names)
    if (n.size() > best && s.size() > n.size() + 1 && s.compare(0, n.size(), n) == 0 && s[n.size()] == '=') best = n.size();
  if (best) return {s.substr(0, best), s.substr(best + 1)};
  return split_assignment(s, flag);
}

namespace {

struct Prepared {
  std::shared_ptr<onnx::Model> model;
  std::map<std::string, Tensor> inputs;
  std::map<std::string, Shape> shapes;
  std::map<std::string, int64_t> dims;
};

Prepared prepare(const Binding& b, bool need_all_inputs) {
  Prepared P;
  P.model = onnx::Model::load(b.graph);
  auto& m = *P.model;
  if (!b.params.empty())
    throw InputError(b.graph + ": --params is not used with ONNX models: the weights are the model's initializers");
  P.dims = parse_dims(b.dims);
  {
    std::set<std::string> known;
    for (const auto& vi : m.inputs())
      for (const auto& d : vi.dims)
        if (!d.symbol.empty()) known.insert(d.symbol);
    check_dim_names(P.dims, known, b.graph);
  }
  std::vector<std::string> names;
  std::map<std::string, const onnx::ValueInfo*> by_name;
  for (const auto& vi : m.inputs()) {
    names.push_back(vi.name);
    by_name[vi.name] = &vi;
  }
  auto list = [&](bool with_defaults) {
    std::string r;
    for (const auto& vi : m.inputs())
      if (with_defaults || !m.is_default_input(vi.name)) r += (r.empty() ? "" : ", ") + vi.name;
    return r;
  };
  std::map<std::string, io::TensorSpec> specs;
  // A sequence input's tensors: --input NAME.0=SPEC --input NAME.1=SPEC ... (NAME=[]: empty).
  std::map<std::string, std::map<int64_t, std::string>> elements;  // sequence input -> index -> spec key
  std::set<std::string> empty_sequences;
  auto sequence_of = [&](const std::string& id, int64_t& index) -> const onnx::ValueInfo* {
    const size_t dot = id.rfind('.');
    if (dot == std::string::npos || dot + 1 >= id.size() || id.find_first_not_of("0123456789", dot + 1) != std::string::npos ||
        id.size() - dot > 10)
      return nullptr;
    auto it = by_name.find(id.substr(0, dot));
    if (it == by_name.end() || !it->second->type.is_sequence()) return nullptr;
    index = std::stoll(id.substr(dot + 1));
    return it->second;
  };
  for (const auto& s : b.inputs) {
    auto [id, spec] = split_named_assignment(s, "--input", names);
    int64_t index = 0;
    if (const onnx::ValueInfo* seq = by_name.count(id) ? nullptr : sequence_of(id, index)) {
      if (!elements[seq->name].emplace(index, id).second) throw InputError("--input " + id + " is given twice");
    } else if (!by_name.count(id)) {
      throw InputError("--input " + id + ": the model has no input '" + id + "' (its inputs: " + list(false) + ")");
    } else if (by_name[id]->type.is_sequence()) {
      if (spec != "[]")
        throw InputError("--input " + id + ": '" + id + "' is a sequence: give its tensors as --input " + id + ".0=SPEC --input " + id +
                         ".1=SPEC ..., or " + id + "=[] for an empty sequence");
      if (!empty_sequences.insert(id).second) throw InputError("--input " + id + " is given twice");
      continue;
    }
    if (specs.count(id)) throw InputError("--input " + id + " is given twice");
    specs[id] = io::parse_tensor_spec(spec);
  }
  std::vector<std::string> missing;
  std::vector<InputDecl> given;
  for (const auto& vi : m.inputs()) {
    const DType dt = onnx::to_dtype(vi.elem_type, b.graph + ": input '" + vi.name + "'");
    if (vi.type.is_sequence()) {
      const auto& el = elements[vi.name];
      if (!el.empty() && empty_sequences.count(vi.name))
        throw InputError("--input " + vi.name + "=[] and --input " + vi.name + ".N are both given");
      int64_t k = 0;
      for (const auto& [index, key] : el)
        if (index != k++)
          throw InputError("--input " + vi.name + "." + std::to_string(k - 1) + " is missing (the tensors of sequence '" + vi.name +
                           "' are numbered from 0 without gaps)");
      if (el.empty() && !empty_sequences.count(vi.name)) {
        if (vi.type.kind != onnx::ValueKind::Optional) missing.push_back(vi.name + ".0 ...");
        continue;
      }
      P.shapes[vi.name] = Shape{(int64_t)el.size()};
      for (const auto& [index, key] : el) given.push_back({key, &vi.dims, dt, 16, &specs.at(key)});
      continue;
    }
    auto it = specs.find(vi.name);
    if (it == specs.end()) {
      if (!m.is_default_input(vi.name) && vi.type.kind != onnx::ValueKind::Optional) missing.push_back(vi.name);
      continue;
    }
    given.push_back({vi.name, &vi.dims, dt, 16, &it->second});
  }
  load_input_values(given, P.dims, P.inputs);
  for (const auto& [name, t] : P.inputs) P.shapes[name] = t.shape();
  if (need_all_inputs && !missing.empty()) {
    std::string ms;
    for (auto& x : missing) ms += (ms.empty() ? "" : ", ") + x;
    throw InputError(b.graph + ": no value given for input" + (missing.size() > 1 ? "s " : " ") + ms +
                     " (use --input NAME=SPEC; SPEC is @file.npy, file.safetensors:NAME, 2x3xf32=1,2,..., or random[:SEED])");
  }
  return P;
}

// A graph with data-dependent host steps (NonZero, Unique, ...) can be made again for the sizes
// they produced at run time: the same specialisation with those sizes bound (cached by the
// model), its `resize` attached in turn (lib/runtime/control.cpp continues in it).
void attach_resize(const std::shared_ptr<onnx::Model>& model, const onnx::Specialized& sp, const std::map<std::string, Shape>& shapes,
                   const std::map<std::string, int64_t>& dims, const std::map<std::string, Tensor>& values) {
  bool dynamic = false;
  for (const auto& n : sp.graph->nodes) dynamic = dynamic || ir::data_dependent_results(n.op) || (!n.bodies.empty() && n.attrs.has("size_key"));
  if (!dynamic || sp.graph->resize) return;
  std::map<std::string, Tensor> used;  // only the inputs the specialisation read by value
  for (const auto& [name, v] : sp.value_deps)
    if (auto it = values.find(name); it != values.end()) used.emplace(name, it->second);
  // (a weak reference: the model's cache holds this graph)
  sp.graph->resize = [wm = std::weak_ptr<onnx::Model>(model), shapes, dims, used](const std::map<std::string, int64_t>& sizes) {
    auto model = wm.lock();
    if (!model) return std::make_pair(std::shared_ptr<const ir::Graph>(), std::map<std::string, Tensor>());
    std::map<std::string, int64_t> d = dims;
    for (const auto& [k, v] : sizes) d[k] = v;
    auto sp2 = model->specialize(shapes, d, used);
    attach_resize(model, *sp2, shapes, dims, used);
    return std::make_pair(std::shared_ptr<const ir::Graph>(sp2->graph), sp2->params);
  };
}

}  // namespace

Loaded load_onnx_binding(const Binding& b) {
  Prepared P = prepare(b, true);
  auto sp = P.model->specialize(P.shapes, P.dims, P.inputs);
  attach_resize(P.model, *sp, P.shapes, P.dims, P.inputs);
  Loaded L;
  L.graph = sp->graph;
  L.params = sp->params;
  L.inputs = std::move(P.inputs);
  L.value_deps = sp->value_deps;
  // Specialising again (another value, or another shape: a KV cache grown by a step) binds the
  // symbolic dims from the new inputs: only the --dim flags are kept, not the dims the first
  // inputs bound.
  L.respecialize = [model = P.model, dims = parse_dims(b.dims)](const std::map<std::string, Tensor>& inputs) {
    std::map<std::string, Shape> shapes;
    for (const auto& [name, t] : inputs) shapes[name] = t.shape();
    auto sp = model->specialize(shapes, dims, inputs);
    attach_resize(model, *sp, shapes, dims, inputs);
    Loaded L;
    L.graph = sp->graph;
    L.params = sp->params;
    L.inputs = inputs;
    L.value_deps = sp->value_deps;
    return L;
  };
  return L;
}

void convert_onnx(const Binding& b, const std::string& graph_out, const std::string& params_out) {
  if (!is_onnx_file(b.graph)) throw InputError(b.graph + ": not an ONNX model (rlx convert reads .onnx files)");
  auto ends_with = [](const std::string& s, const std::string& e) { return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0; };
  if (!params_out.empty() && !ends_with(params_out, ".safetensors"))
    throw InputError("--params-out " + params_out + ": rlx convert writes the weights as safetensors; give a file name ending in .safetensors");
  Prepared P = prepare(b, false);
  auto sp = P.model->specialize(P.shapes, P.dims, P.inputs);
  for (const auto& n : sp->graph->nodes)
    if (ir::data_dependent_results(n.op))
      throw InputError(b.graph + ": node '" + n.id + "' (" + ir::op_name(n.op) + ") has a data-dependent output size, known only "
                       "when it runs; rlx convert cannot write it (a graph file's results have fixed sizes): run the ONNX model itself");
  // a body made for its inputs' values (a Slice start from the iteration number): one file holds one body
  std::function<void(const ir::Graph&)> check_bodies = [&](const ir::Graph& g) {
    for (const auto& n : g.nodes)
      for (const auto& b : n.bodies) {
        if (b->respecialize)
          throw InputError(b->file + ": node '" + n.id + "' (" + ir::op_name(n.op) + ") has a body whose shapes follow from values it "
                           "computes at run time (it is made again for each); rlx convert cannot write it (a graph file's body is one "
                           "graph): run the ONNX model itself");
        check_bodies(*b);
      }
  };
  check_bodies(*sp->graph);
  if (sp->params.size() && params_out.empty())
    throw InputError("the model has " + std::to_string(sp->params.size()) + " weight tensor(s): give --params-out FILE.safetensors");
  for (const auto& [name, v] : sp->value_deps)
    std::cerr << "note: input '" << name << "' is used as a constant (a shape or index argument); the written graph is valid "
              << "only for the value given with --input\n";
  // Both files are checked before either is written: the graph, and each file's directory.
  for (const std::string& f : {graph_out, params_out}) {
    if (f.empty()) continue;
    const std::filesystem::path dir = std::filesystem::path(f).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec))
      throw InputError("cannot write " + f + ": " +
                       (std::filesystem::exists(dir, ec) ? dir.string() + " is not a directory" : "directory " + dir.string() + " does not exist"));
  }
  std::string text = ir::graph_to_json(*sp->graph);
  if (!params_out.empty()) {
    std::vector<std::pair<std::string, Tensor>> ts(sp->params.begin(), sp->params.end());
    io::write_safetensors(params_out, ts);
  }
  try {
    io::write_file_atomic(graph_out, text.data(), text.size());
  } catch (...) {
    // Both files or neither: a weights file without its graph is a half-written convert.
    if (!params_out.empty()) std::filesystem::remove(params_out);
    throw;
  }
}

std::shared_ptr<ir::Graph> onnx_graph_for(const std::string& path, const std::vector<std::string>& dims) {
  Binding b;
  b.graph = path;
  b.dims = dims;
  Prepared P = prepare(b, false);
  return P.model->specialize(P.shapes, P.dims)->graph;
}

std::string onnx_ops_text(bool as_json) {
  auto rows = onnx::supported_ops();
  if (as_json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& r : rows)
      j.push_back({{"op_type", r.op_type}, {"maps_to", r.maps_to}, {"needs", r.needs}, {"supported", r.needs.empty()}, {"notes", r.notes}});
    return j.dump(1) + "\n";
  }
  // The table docs/onnx.md carries (tests/onnx/cli_tests.py checks they agree), then what
  // this build lacks, if anything.
  std::string s = "| ONNX operator | rlx registry ops | notes |\n| --- | --- | --- |\n";
  std::string lacking;
  for (const auto& r : rows) {
    s += "| " + r.op_type + " | " + r.maps_to + " | " + r.notes + " |\n";
    if (!r.needs.empty()) {
      lacking += (lacking.empty() ? "" : "; ") + r.op_type + " (needs";
      for (size_t k = 0; k < r.needs.size(); ++k) lacking += (k ? ", " : " ") + r.needs[k];
      lacking += ")";
    }
  }
  if (!lacking.empty()) s += "\nRefused by this build (registry ops it lacks): " + lacking + "\n";
  return s;
}

}  // namespace rlx
