#include "runtime/runner.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io/spec.h"
#include "ir/loader.h"
#include "runtime/onnx_binding.h"
#include "runtime/params.h"

namespace fs = std::filesystem;

namespace rlx {

std::pair<std::string, std::string> split_assignment(const std::string& s, const std::string& flag) {
  auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size()) {
    // The example shows the form this flag takes.
    std::string form = flag == "--output"  ? "ID=FILE, e.g. --output y=out/y.npy"
                       : flag == "--dim"   ? "NAME=SIZE, e.g. --dim batch=4"
                       : flag == "--feed"  ? "OUT=IN, e.g. --feed next_offset=offset"
                                           : "ID=SPEC, e.g. " + flag + " x=@x.npy";
    throw InputError(flag + " " + s + ": expected " + form);
  }
  return {s.substr(0, eq), s.substr(eq + 1)};
}

std::map<std::string, int64_t> parse_dims(const std::vector<std::string>& dims) {
  std::map<std::string, int64_t> r;
  for (const auto& d : dims) {
    auto [k, v] = split_assignment(d, "--dim");
    try {
      size_t used = 0;
      long long x = std::stoll(v, &used);
      if (used != v.size() || x < 0) throw std::invalid_argument(v);
      r[k] = x;
    } catch (const std::exception&) {
      throw InputError("--dim " + d + ": the size must be a non-negative integer");
    }
  }
  return r;
}

void check_dim_names(const std::map<std::string, int64_t>& dims, const std::set<std::string>& known, const std::string& file) {
  for (const auto& [name, v] : dims) {
    if (known.count(name)) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    throw InputError("--dim " + name + "=" + std::to_string(v) + ": " + file + " has no symbolic dimension '" + name + "' (" +
                     (known.empty() ? std::string("it has none") : "its dimensions: " + list) + ")");
  }
}

void load_input_values(const std::vector<InputDecl>& decls, std::map<std::string, int64_t>& dims,
                       std::map<std::string, Tensor>& out) {
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& d : decls) {
      const bool random = d.spec->kind == io::TensorSpec::Random;
      if (random != (pass == 1)) continue;
      Shape shape;
      if (random) {
        shape = ir::bind_dims(*d.dims, dims, "--input " + d.name + "=" + d.spec->text);
        // The size limit of docs/onnx.md (onnx::Limits::max_tensor_elements), before the values
        // are made: `--dim n=1048576` for an [n, n] input is refused (exit 2), not allocated (exit 3).
        constexpr int64_t kMaxElements = int64_t(1) << 36;
        int64_t n = 1;
        bool over = false;
        for (int64_t x : shape) over = over || __builtin_mul_overflow(n, x, &n);
        if (over || n > kMaxElements)
          throw InputError("--input " + d.name + "=" + d.spec->text + ": input '" + d.name + "' of shape " + shape_str(shape) + " has " +
                           (over ? std::string("more elements than int64 can count") : std::to_string(n) + " elements") +
                           ", above the limit of " + std::to_string(kMaxElements) + " (2^36) elements per tensor");
      }
      Tensor t = io::load_tensor_spec(*d.spec, shape, d.dtype, d.index_bound);
      if (!random)
        for (size_t k = 0; k < d.dims->size() && k < t.shape().size(); ++k)
          if (!(*d.dims)[k].symbol.empty()) dims.emplace((*d.dims)[k].symbol, t.shape()[k]);
      out[d.name] = t;
    }
}

int output_index(const ir::Graph& g, const std::string& id) {
  for (size_t j = 0; j < g.outputs.size(); ++j)
    if (g.nodes[g.outputs[j]].id == id) return (int)j;
  return -1;
}

namespace {

// Exclusive upper bound for random integer inputs: the smallest table an input indexes.
int64_t index_bound(const ir::Graph& g, int input) {
  int64_t high = 16;
  bool found = false;
  for (const auto& n : g.nodes)
    if (n.op == ir::Op::Embedding && n.inputs[1] == input) {
      const auto& t = g.nodes[n.inputs[0]];
      if (!t.decl_shape.empty() && t.decl_shape[0].symbol.empty()) {
        high = found ? std::min(high, t.decl_shape[0].value) : t.decl_shape[0].value;
        found = true;
      }
    }
  return std::max<int64_t>(high, 1);
}

std::vector<std::string> output_ids(const ir::Graph& g) {
  std::vector<std::string> r;
  for (int o : g.outputs) r.push_back(g.nodes[o].id);
  return r;
}

std::string ids_list(const std::vector<std::string>& v) {
  std::string r;
  for (auto& s : v) r += (r.empty() ? "" : ", ") + s;
  return r;
}

}  // namespace

int convert_graph_dtype(ir::Graph& g, DType dt) {
  int changed = 0;
  for (auto& n : g.nodes) {
    if (n.dtype != DType::f32) continue;
    if (n.op != ir::Op::Input && n.op != ir::Op::Param && n.op != ir::Op::Constant) continue;
    n.dtype = dt;
    if (n.op == ir::Op::Constant) n.constant = n.constant.astype(dt);
    ++changed;
  }
  return changed;
}

bool Loaded::values_changed(const std::map<std::string, Tensor>& in) const {
  for (const auto& [name, want] : value_deps) {
    auto it = in.find(name);
    if (it == in.end() || it->second.numel() != (int64_t)want.size()) return true;
    for (size_t k = 0; k < want.size(); ++k)
      if (it->second.at((int64_t)k) != want[k]) return true;
  }
  return false;
}

Loaded load_binding(const Binding& b) {
  std::optional<DType> half;  // --dtype f16 / bf16
  if (!b.dtype.empty()) {
    const auto dt = parse_dtype(b.dtype);
    if (!dt || !(is_half(*dt) || *dt == DType::f32)) throw InputError("--dtype " + b.dtype + ": expected bf16, f16 or f32");
    if (*dt != DType::f32) half = *dt;
  }
  if (is_onnx_file(b.graph)) {
    Loaded L = load_onnx_binding(b);
    if (half) {
      // The model is specialised in its own types first; then, as for a graph file, every f32
      // input, weight and constant becomes the half type, and so do the values bound to them.
      convert_graph_dtype(*L.graph, *half);
      for (auto* m : {&L.params, &L.inputs})
        for (auto& [id, t] : *m) {
          int i = L.graph->find(id);
          if (i >= 0 && t.dtype() != L.graph->nodes[i].dtype) t = t.astype(L.graph->nodes[i].dtype);
        }
    }
    return L;
  }
  Loaded L;
  L.graph = std::make_shared<ir::Graph>(ir::load_graph_file(b.graph));
  if (half) convert_graph_dtype(*L.graph, *half);
  const ir::Graph& g = *L.graph;
  ParamStore store;
  for (const auto& p : b.params) store.add(p);
  BindOptions bo;
  bo.random = b.random_params.has_value();
  bo.seed = b.random_params.value_or(0);
  L.params = bind_params(g, store, bo, &L.random_params_filled);

  std::map<std::string, int64_t> dims = parse_dims(b.dims);
  {
    std::set<std::string> known;
    for (const auto& n : g.nodes)
      for (const auto& d : n.decl_shape)
        if (!d.symbol.empty()) known.insert(d.symbol);
    check_dim_names(dims, known, g.file);
  }
  std::map<std::string, io::TensorSpec> specs;
  for (const auto& s : b.inputs) {
    auto [id, spec] = split_assignment(s, "--input");
    int i = g.find(id);
    if (i < 0 || g.nodes[i].op != ir::Op::Input) {
      std::vector<std::string> names;
      for (int k : g.inputs_of_kind(ir::Op::Input)) names.push_back(g.nodes[k].id);
      throw InputError("--input " + id + ": the graph has no input '" + id + "' (its inputs: " + ids_list(names) + ")");
    }
    if (specs.count(id)) throw InputError("--input " + id + " is given twice");
    specs[id] = io::parse_tensor_spec(spec);
  }
  std::vector<std::string> missing;
  std::vector<InputDecl> given;
  for (int i : g.inputs_of_kind(ir::Op::Input)) {
    const auto& n = g.nodes[i];
    auto it = specs.find(n.id);
    if (it == specs.end()) missing.push_back(n.id);
    else given.push_back({n.id, &n.decl_shape, n.dtype, index_bound(g, i), &it->second});
  }
  load_input_values(given, dims, L.inputs);
  if (!missing.empty())
    throw InputError(g.file + ": no value given for input" + (missing.size() > 1 ? "s " : " ") + ids_list(missing) +
                     " (use --input ID=SPEC; SPEC is @file.npy, file.safetensors:NAME, 2x3xf32=1,2,..., or random[:SEED])");
  return L;
}

std::map<std::string, Tensor> load_expectations(const ir::Graph& g, const std::vector<std::string>& specs) {
  std::map<std::string, Tensor> r;
  for (const auto& s : specs) {
    auto [id, spec] = split_named_assignment(s, "--expect", output_ids(g));
    if (output_index(g, id) < 0) {
      std::vector<std::string> names;
      for (int o : g.outputs) names.push_back(g.nodes[o].id);
      throw InputError("--expect " + id + ": '" + id + "' is not an output of the graph (outputs: " + ids_list(names) + ")");
    }
    auto ts = io::parse_tensor_spec(spec);
    if (ts.kind == io::TensorSpec::Random) throw InputError("--expect " + id + ": random values cannot be an expectation");
    r[id] = io::load_tensor_spec(ts);
  }
  return r;
}

Diff compare_tensors(const Tensor& got, const Tensor& expected, double atol, double rtol) {
  Diff d;
  if (got.shape() != expected.shape()) {
    d.shape_ok = false;
    return d;
  }
  d.count = got.numel();
  double worst_excess = -1, se = 0, ss = 0, dot = 0, gg = 0;
  for (int64_t i = 0; i < d.count; ++i) {
    double a = got.at(i), e = expected.at(i);
    bool ok;
    double err;
    if (is_integer(got.dtype()) && is_integer(expected.dtype()) && got.int_at(i) != expected.int_at(i) && a == e) {
      ok = false;  // integers that differ beyond double precision (|v| > 2^53)
      err = 1;
    } else if (std::isnan(e) || std::isnan(a)) {
      ok = std::isnan(e) && std::isnan(a);
      err = ok ? 0 : INFINITY;
    } else if (std::isinf(e) || std::isinf(a)) {
      ok = a == e;
      err = ok ? 0 : INFINITY;
    } else {
      err = std::fabs(a - e);
      ok = err <= atol + rtol * std::fabs(e);
      se += err * err;
      ss += e * e;
      dot += a * e;
      gg += a * a;
      d.max_rel = std::max(d.max_rel, err / std::max(std::fabs(e), 1e-30));
    }
    d.max_abs = std::max(d.max_abs, err);
    double excess = err - (atol + rtol * (std::isfinite(e) ? std::fabs(e) : 0));
    if (!ok) d.bad++;
    if (d.worst < 0 || excess > worst_excess) {
      worst_excess = excess;
      d.worst = i;
      d.worst_got = (float)a;
      d.worst_expected = (float)e;
    }
  }
  d.nmse = ss > 0 ? se / ss : se;
  d.cosine = (gg > 0 && ss > 0) ? dot / std::sqrt(gg * ss) : (gg == ss ? 1.0 : 0.0);
  return d;
}

std::string index_str(int64_t flat, const Shape& s) {
  std::vector<int64_t> c(s.size());
  for (size_t k = s.size(); k-- > 0;) {
    c[k] = s[k] ? flat % s[k] : 0;
    flat = s[k] ? flat / s[k] : 0;
  }
  std::string r = "[";
  for (size_t k = 0; k < c.size(); ++k) r += (k ? ", " : "") + std::to_string(c[k]);
  return r + "]";
}

std::string describe_diff(const std::string& name, const Diff& d, const Tensor& got, const Tensor& expected) {
  if (!d.shape_ok)
    return fmt::format("{}: shape mismatch: got {}, expected {}", name, shape_str(got.shape()), shape_str(expected.shape()));
  return fmt::format("{}: {} of {} elements differ; worst at {}: got {:.9g}, expected {:.9g}; max abs err {:.3g}, max rel err {:.3g}",
                     name, d.bad, d.count, index_str(d.worst, got.shape()), d.worst_got, d.worst_expected, d.max_abs,
                     d.max_rel);
}

std::string summarize(const std::string& name, const Tensor& t, int first) {
  double mn = INFINITY, mx = -INFINITY, sum = 0;
  int64_t finite = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = t.at(i);
    if (!std::isfinite(v)) continue;
    mn = std::min(mn, (double)v);
    mx = std::max(mx, (double)v);
    sum += v;
    finite++;
  }
  std::string vals;
  for (int64_t i = 0; i < t.numel() && i < first; ++i) {
    if (is_integer(t.dtype())) vals += fmt::format("{}{}", i ? ", " : "", t.int_at(i));
    else vals += fmt::format("{}{:.6g}", i ? ", " : "", t.at(i));
  }
  if (t.numel() > first) vals += ", ...";
  std::string stats = finite ? fmt::format("min {:.6g}  max {:.6g}  mean {:.6g}", mn, mx, sum / finite) : "no finite values";
  if (finite < t.numel()) stats += fmt::format("  ({} non-finite)", t.numel() - finite);
  return fmt::format("{}: shape {} {}  {}\n  [{}]", name, shape_str(t.shape()), dtype_name(t.dtype()), stats, vals);
}

std::string plain_file_name_problem(const std::string& id) {
  if (id.empty()) return "it is empty";
  if (id.size() > 200) return "it is longer than 200 bytes";
  for (unsigned char ch : id) {
    if (ch == '/' || ch == '\\') return "it contains a path separator";
    if (ch < 0x20 || ch == 0x7f) return "it contains a control character";
  }
  if (id[0] == '.') return "it starts with '.'";
  return "";
}

void prepare_output_file(const std::string& file) {
  fs::path dir = fs::path(file).parent_path();
  std::error_code ec;
  if (!dir.empty() && !fs::is_directory(dir, ec)) {
    if (fs::exists(dir, ec)) throw InputError("cannot write " + file + ": " + dir.string() + " is not a directory");
    // A missing directory is created with its parents, as --out-dir does (before running).
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir))
      throw InputError("cannot write " + file + ": cannot create directory " + dir.string() + (ec ? ": " + ec.message() : ""));
  }
  if (fs::is_directory(file, ec)) throw InputError("cannot write " + file + ": it is a directory, expected a file name");
}

OutputPlan plan_outputs(const ir::Graph& g, const std::vector<std::string>& output_specs, const std::string& out_dir) {
  OutputPlan plan;
  for (const auto& s : output_specs) {
    // A bare FILE names the graph's only output; with several, the output must be named.
    if (s.find('=') == std::string::npos && !s.empty()) {
      if (g.outputs.size() != 1)
        throw InputError("--output " + s + ": the graph has " + std::to_string(g.outputs.size()) + " outputs (" +
                         ids_list(output_ids(g)) + "); name one, ID=FILE (e.g. --output " +
                         printable(g.nodes[g.outputs[0]].id) + "=" + s + "), or write them all with --out-dir DIR");
      const std::string ext = fs::path(s).extension().string();
      if (ext != ".npy" && ext != ".safetensors")
        throw InputError("--output " + s + ": the file must end in .npy or .safetensors");
      plan.push_back({0, s});
      continue;
    }
    auto [id, file] = split_named_assignment(s, "--output", output_ids(g));
    int k = output_index(g, id);
    if (k < 0) throw InputError("--output " + id + ": '" + id + "' is not an output of the graph");
    std::string ext = fs::path(file).extension().string();
    if (ext != ".npy" && ext != ".safetensors")
      throw InputError("--output " + s + ": the file must end in .npy or .safetensors");
    plan.push_back({k, file});
  }
  if (!out_dir.empty()) {
    std::error_code ec;
    // Created with its parents when missing (as `mkdir -p`); an existing non-directory is refused.
    if (fs::exists(out_dir, ec) && !fs::is_directory(out_dir, ec))
      throw InputError("--out-dir " + out_dir + ": exists and is not a directory");
    if (!fs::is_directory(out_dir, ec)) {
      fs::create_directories(out_dir, ec);
      if (ec || !fs::is_directory(out_dir))
        throw InputError("--out-dir " + out_dir + ": cannot create the directory" + (ec ? ": " + ec.message() : ""));
    }
    // Each output not named by --output goes to DIR/ID.npy. The id comes from the model, so it
    // becomes a file name only when it is a plain one (docs/errors.md, "Output file names"):
    // anything else is refused, never rewritten, so two outputs can never map to one file.
    std::set<int> named;
    for (const auto& [k, file] : plan) named.insert(k);
    const fs::path real_dir = fs::canonical(out_dir, ec);
    if (ec) throw InputError("--out-dir " + out_dir + ": cannot resolve the directory: " + ec.message());
    for (size_t k = 0; k < g.outputs.size(); ++k) {
      if (named.count((int)k)) continue;
      const std::string& id = g.nodes[g.outputs[k]].id;
      if (std::string why = plain_file_name_problem(id); !why.empty())
        throw InputError("--out-dir " + out_dir + ": output '" + printable(id) + "' cannot be a file name (" + why +
                         "); name its file with --output '" + printable(id) + "=PATH.npy'");
      const fs::path file = fs::path(out_dir) / (id + ".npy");
      // The name has no separator, so its parent is DIR itself; checked after resolving symlinks anyway.
      if (fs::canonical(file.parent_path(), ec) != real_dir)
        throw InputError("--out-dir " + out_dir + ": output '" + id + "' would be written outside the directory");
      plan.push_back({(int)k, file.string()});
    }
  }
  for (const auto& [k, file] : plan) prepare_output_file(file);
  // Two outputs onto one file would leave only the last: refused (the directory exists now,
  // so the parent resolves; the file name is compared as given).
  std::map<fs::path, int> by_file;
  for (const auto& [k, file] : plan) {
    std::error_code ec;
    fs::path p = fs::path(file);
    fs::path key = fs::weakly_canonical(p.has_parent_path() ? p.parent_path() : fs::path("."), ec) / p.filename();
    auto [it, fresh] = by_file.emplace(key, k);
    if (!fresh && it->second != k)
      throw InputError("cannot write " + file + ": outputs '" + printable(g.nodes[g.outputs[it->second]].id) + "' and '" +
                       printable(g.nodes[g.outputs[k]].id) + "' would both be written there");
  }
  return plan;
}

void write_outputs(const ir::Graph& g, const std::vector<Tensor>& outs, const OutputPlan& plan) {
  for (const auto& [k, file] : plan) {
    if (fs::path(file).extension() == ".safetensors") io::write_safetensors(file, {{g.nodes[g.outputs[k]].id, outs[k]}});
    else io::write_npy(file, outs[k]);
  }
}

}  // namespace rlx
