// rlx quantize (quantize.h, docs/quantize.md).
#include "runtime/quantize.h"

#include <cmath>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "core/error.h"
#include "io/file.h"
#include "io/safetensors.h"
#include "ir/loader.h"
#include "ir/op_registry.h"
#include "onnx/model.h"
#include "runtime/executor.h"
#include "runtime/onnx_binding.h"
#include "runtime/session.h"

namespace rlx {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& e) { return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0; }

// The same file, whether or not either exists yet (a path written two ways is caught too).
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

// The declared inputs of the model (ONNX: those without an initializer).
std::vector<std::string> input_names(const std::string& path) {
  std::vector<std::string> r;
  if (is_onnx_file(path)) {
    auto m = onnx::Model::load(path);
    for (const auto& vi : m->inputs())
      if (!m->is_default_input(vi.name)) r.push_back(vi.name);
  } else {
    ir::Graph g = ir::load_graph_file(path);
    for (int i : g.inputs_of_kind(ir::Op::Input)) r.push_back(g.nodes[i].id);
  }
  return r;
}

int64_t leaf_bytes(const ir::Graph& g, const std::map<std::string, Tensor>& params_by_id) {
  int64_t b = 0;
  for (const auto& n : g.nodes)
    if (n.op == ir::Op::Param) b += (int64_t)params_by_id.at(n.id).nbytes();
    else if (n.op == ir::Op::Constant) b += (int64_t)n.constant.nbytes();
  return b;
}

OutputError output_error(const std::string& name, const Tensor& f, const Tensor& q) {
  OutputError e;
  e.name = name;
  e.shape = f.shape();
  if (f.shape() != q.shape())
    throw RuntimeError("output '" + name + "': the quantized graph gives shape " + shape_str(q.shape()) + ", the f32 graph " +
                       shape_str(f.shape()));
  const Tensor a = f.to_f32(), b = q.to_f32();
  const float *pa = a.data(), *pb = b.data();
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = (double)pb[i] - (double)pa[i];
    e.max_abs = std::max(e.max_abs, std::abs(d));
    if (std::isnan(d)) e.max_abs = NAN;
    num += d * d, den += (double)pa[i] * pa[i];
  }
  e.rel_rms = den > 0 ? std::sqrt(num / den) : -1;
  const int64_t V = f.rank() ? f.shape().back() : 0;
  if (V >= 2 && is_float(f.dtype())) {
    e.rows = a.numel() / V;
    for (int64_t r = 0; r < e.rows; ++r) {
      const float *ra = pa + r * V, *rb = pb + r * V;
      e.argmax_agree += std::max_element(ra, ra + V) - ra == std::max_element(rb, rb + V) - rb;
    }
  }
  return e;
}

std::vector<Tensor> run_graph(std::shared_ptr<const ir::Graph> g, const std::map<std::string, Tensor>& params,
                              const std::map<std::string, Tensor>& inputs, Executor& ex, Mode mode) {
  Session s(g, ex, params, SessionOptions{});
  for (const auto& [id, t] : inputs) s.set_input(id, t);
  return s.run(mode);
}

}  // namespace

QuantizeReport run_quantize(const QuantizeRequest& r) {
  QuantizeReport rep;
  rep.graph = r.binding.graph;
  rep.out = r.out;
  rep.format = r.options.format == passes::QuantFormat::Int8 ? "int8" : "q4";
  const Mode mode = parse_mode(r.mode, "--mode");
  rep.mode = mode_name(mode);
  rep.backend = r.backend;
  // The files: checked before anything is loaded or written.
  if (r.out.empty()) throw InputError("--out OUT.json is required");
  if (!ends_with(r.out, ".json")) throw InputError("--out " + r.out + ": rlx quantize writes an rlx JSON graph; give a file name ending in .json");
  rep.params_out = !r.params_out.empty() ? r.params_out : r.out.substr(0, r.out.size() - 5) + ".safetensors";
  if (!ends_with(rep.params_out, ".safetensors"))
    throw InputError("--params-out " + rep.params_out + ": the weights are written as safetensors; give a file name ending in .safetensors");
  if (same_file(r.out, rep.params_out)) throw InputError("--out and --params-out name the same file (" + r.out + ")");
  for (const std::string& o : {r.out, rep.params_out}) {
    if (same_file(o, r.binding.graph)) throw InputError(o + " is the model being quantized; write the quantized graph to another file");
    for (const auto& p : r.binding.params)
      if (same_file(o, p)) throw InputError(o + " is a --params file being read; write the quantized weights to another file");
    prepare_output_file(o);
  }

  // The model, with random values for the inputs not given.
  Binding b = r.binding;
  {
    std::set<std::string> given;
    for (const auto& s : b.inputs) given.insert(split_assignment(s, "--input").first);
    for (const auto& name : input_names(b.graph))
      if (!given.count(name)) {
        b.inputs.push_back(name + "=random:" + std::to_string(r.seed));
        rep.random_inputs.push_back(name);
      }
  }
  Loaded L = load_binding(b);
  const ir::Graph& g = *L.graph;
  std::map<std::string, Shape> in_shapes;
  for (const auto& [id, t] : L.inputs) in_shapes[id] = t.shape();
  const ir::TypedShapes ts = ir::infer_shapes(g, in_shapes);
  passes::QuantizedGraph Q = passes::quantize_weights(g, ts, L.params, r.options);
  rep.weights = Q.weights;

  auto qg = std::make_shared<ir::Graph>(ir::load_graph_text(Q.json, r.out));
  std::map<std::string, Tensor> qparams;
  for (const auto& n : qg->nodes)
    if (n.op == ir::Op::Param) qparams[n.id] = Q.params.at(n.param_name);
  rep.bytes_before = leaf_bytes(g, L.params);
  rep.bytes_after = leaf_bytes(*qg, qparams);

  // The error against f32 on the same inputs.
  auto ex = make_executor(r.backend, 0);
  const auto fo = run_graph(L.graph, L.params, L.inputs, *ex, mode);
  const auto qo = run_graph(qg, qparams, L.inputs, *ex, mode);
  for (size_t k = 0; k < fo.size(); ++k) rep.outputs.push_back(output_error(g.nodes[g.outputs[k]].id, fo[k], qo[k]));

  // Both files or neither.
  std::vector<std::pair<std::string, Tensor>> ts_out(Q.params.begin(), Q.params.end());
  io::write_safetensors(rep.params_out, ts_out);
  try {
    io::write_file_atomic(r.out, Q.json.data(), Q.json.size());
  } catch (...) {
    fs::remove(rep.params_out);
    throw;
  }
  return rep;
}

std::string QuantizeReport::text() const {
  std::string s = fmt::format("quantized {} to {}: wrote {} and {}\n", graph, format, out, params_out);
  int nq = 0;
  for (const auto& w : weights) {
    const std::string name = w.param.empty() ? w.node : w.param;
    if (w.kept_why.empty()) {
      ++nq;
      s += fmt::format("  {:<28} {:<12} -> {}  ({:.1f} KiB -> {:.1f} KiB)\n", name, shape_str(w.shape), w.layout, w.bytes_before / 1024.0,
                       w.bytes_after / 1024.0);
    } else {
      s += fmt::format("  {:<28} {:<12} kept f32: {}\n", name, shape_str(w.shape), w.kept_why);
    }
  }
  s += fmt::format("{} weight matrix(es) quantized; weights {:.1f} KiB -> {:.1f} KiB ({:.2f}x smaller)\n", nq, bytes_before / 1024.0,
                   bytes_after / 1024.0, bytes_after ? (double)bytes_before / bytes_after : 0.0);
  s += fmt::format("error against f32 ({} mode on {}{}):\n", mode, backend,
                   random_inputs.empty() ? std::string(", the given inputs") : ", random values for " + [&] {
                     std::string t;
                     for (const auto& n : random_inputs) t += (t.empty() ? "" : ", ") + n;
                     return t;
                   }());
  for (const auto& o : outputs) {
    s += fmt::format("  {:<16} {:<14} max abs {:.4g}, relative RMS {}", o.name, shape_str(o.shape), o.max_abs,
                     o.rel_rms < 0 ? std::string("- (the f32 output is all zero)") : fmt::format("{:.4g}", o.rel_rms));
    if (o.rows) s += fmt::format(", argmax agrees in {}/{} rows ({:.1f}%)", o.argmax_agree, o.rows, 100.0 * o.argmax_agree / o.rows);
    s += "\n";
  }
  return s;
}

nlohmann::json QuantizeReport::json() const {
  nlohmann::json j;
  j["ok"] = true;
  j["graph"] = graph;
  j["out"] = out;
  j["params_out"] = params_out;
  j["format"] = format;
  j["mode"] = mode;
  j["backend"] = backend;
  j["random_inputs"] = random_inputs;
  j["weights"] = nlohmann::json::array();
  for (const auto& w : weights) {
    nlohmann::json o{{"node", w.node},          {"param", w.param},  {"shape", w.shape}, {"consumers", w.consumer},
                     {"quantized", w.kept_why.empty()}, {"bytes_before", w.bytes_before}, {"bytes_after", w.bytes_after}};
    if (w.kept_why.empty()) o["layout"] = w.layout;
    else o["kept_why"] = w.kept_why;
    j["weights"].push_back(o);
  }
  j["bytes"] = {{"before", bytes_before}, {"after", bytes_after}};
  j["outputs"] = nlohmann::json::array();
  for (const auto& o : outputs) {
    nlohmann::json e{{"name", o.name}, {"shape", o.shape}, {"max_abs", o.max_abs}};
    e["rel_rms"] = o.rel_rms < 0 ? nlohmann::json(nullptr) : nlohmann::json(o.rel_rms);
    if (o.rows) e["argmax_rows"] = o.rows, e["argmax_agree"] = o.argmax_agree, e["argmax_agreement"] = (double)o.argmax_agree / o.rows;
    j["outputs"].push_back(e);
  }
  j["exit_code"] = 0;
  return j;
}

}  // namespace rlx
