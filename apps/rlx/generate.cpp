// rlx generate: a decoder exported in the standard layout, one prompt step then one token per
// step over a capacity-planned KV cache (lib/runtime/kv_cache.h), or, where the model cannot run
// that way, the cache fed back grown by one position and the model specialised again for each
// new cache length (docs/modes.md, "Growing shapes").
#include "generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/npy.h"
#include "onnx/model.h"
#include "runtime/executor.h"
#include "runtime/kv_cache.h"
#include "runtime/runner.h"
#include "runtime/session.h"

namespace rlx {

namespace {

const char* kConvention =
    "inputs input_ids [batch, seq], optionally attention_mask [batch, past + seq] and position_ids [batch, seq], and "
    "past_key_values.N.key / .value [batch, kv_heads, past, head_dim]; outputs logits [batch, seq, vocab] and "
    "present.N.key / .value; a merged decoder (Optimum's decoder_model_merged.onnx) also takes use_cache_branch [1] bool";

std::vector<int64_t> parse_prompt(const std::string& s) {
  std::vector<int64_t> ids;
  if (!s.empty() && s[0] == '@') {
    Tensor t = io::read_npy(s.substr(1));
    if (!is_integer(t.dtype())) throw InputError("--prompt " + s + ": the ids must be integers (i32 or i64)");
    if (t.rank() > 2 || (t.rank() == 2 && t.shape()[0] != 1))
      throw InputError("--prompt " + s + ": expected ids of shape [n] or [1, n], got " + shape_str(t.shape()));
    for (int64_t i = 0; i < t.numel(); ++i) ids.push_back(t.int_at(i));
  } else {
    std::string item;
    std::string norm = s;
    std::replace(norm.begin(), norm.end(), ',', ' ');
    std::istringstream in(norm);
    while (in >> item) {
      size_t used = 0;
      int64_t v = 0;
      try {
        v = std::stoll(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != item.size()) throw InputError("--prompt: '" + item + "' is not an integer id (give ids like 5,17,42 or @ids.npy)");
      ids.push_back(v);
    }
  }
  if (ids.empty()) throw InputError("--prompt: no ids given (give ids like 5,17,42 or @ids.npy)");
  return ids;
}

struct Layout {
  std::string ids = "input_ids", mask, pos;
  bool use_cache_branch = false;  // a merged decoder: false on the prompt step (no past), true after
  Shape use_cache_shape;
  int ids_et = 0, mask_et = 0, pos_et = 0;
  std::vector<std::string> past, present;  // past_key_values.N.key/value, present.N.key/value
  std::vector<int64_t> kv_heads, head_dim;
  std::vector<DType> past_dtype;
  int64_t vocab = -1;  // logits' last dimension where the model fixes it
};

Layout read_layout(const onnx::Model& m, const std::string& file) {
  Layout L;
  std::map<int, std::map<std::string, const onnx::ValueInfo*>> past;
  bool has_ids = false;
  static const std::regex kPast(R"(past_key_values\.(\d+)\.(key|value))");
  for (const auto& vi : m.inputs()) {
    if (m.is_default_input(vi.name)) continue;
    std::smatch mt;
    if (vi.name == "input_ids") has_ids = true, L.ids_et = vi.elem_type;
    else if (vi.name == "attention_mask") L.mask = vi.name, L.mask_et = vi.elem_type;
    else if (vi.name == "position_ids") L.pos = vi.name, L.pos_et = vi.elem_type;
    else if (vi.name == "use_cache_branch") {
      if (vi.elem_type != onnx::kBool || !vi.has_shape || vi.dims.size() > 1 || (vi.dims.size() == 1 && vi.dims[0].value != 1))
        throw InputError(file + ": input 'use_cache_branch' must be a bool of one element ([] or [1]), as in a merged decoder");
      L.use_cache_branch = true;
      L.use_cache_shape = vi.dims.empty() ? Shape{} : Shape{1};
    }
    else if (std::regex_match(vi.name, mt, kPast)) past[std::stoi(mt[1])][mt[2]] = &vi;
    else throw InputError(file + ": input '" + vi.name + "' is not one rlx generate knows (it expects " + kConvention + ")");
  }
  if (!has_ids) throw InputError(file + ": no input 'input_ids' (rlx generate expects " + kConvention + ")");
  if (past.empty()) throw InputError(file + ": no past_key_values.N.key/value inputs (rlx generate expects " + kConvention + ")");
  std::set<std::string> outs;
  for (const auto& vo : m.outputs()) {
    outs.insert(vo.name);
    if (vo.name == "logits" && vo.has_shape && !vo.dims.empty() && vo.dims.back().symbol.empty()) L.vocab = vo.dims.back().value;
  }
  if (!outs.count("logits")) throw InputError(file + ": no output 'logits' (rlx generate expects " + kConvention + ")");
  int n = 0;
  for (const auto& [layer, kv] : past) {
    if (layer != n++) throw InputError(file + ": past_key_values." + std::to_string(n - 1) + " is missing");
    for (const char* which : {"key", "value"}) {
      auto it = kv.find(which);
      const std::string name = "past_key_values." + std::to_string(layer) + "." + which;
      if (it == kv.end()) throw InputError(file + ": input '" + name + "' is missing");
      const auto& vi = *it->second;
      if (!vi.has_shape || vi.dims.size() != 4 || !vi.dims[1].symbol.empty() || !vi.dims[3].symbol.empty())
        throw InputError(file + ": input '" + name + "' must be declared [batch, kv_heads, past, head_dim] with fixed kv_heads and head_dim");
      const std::string present = "present." + std::to_string(layer) + "." + which;
      if (!outs.count(present)) throw InputError(file + ": no output '" + present + "' for input '" + name + "'");
      L.past.push_back(name);
      L.present.push_back(present);
      L.kv_heads.push_back(vi.dims[1].value);
      L.head_dim.push_back(vi.dims[3].value);
      L.past_dtype.push_back(onnx::to_dtype(vi.elem_type, file + ": input '" + name + "'"));
    }
  }
  return L;
}

// The process's peak resident set so far in KiB (VmHWM of /proc/self/status: this program's
// memory only; getrusage's ru_maxrss also keeps the peak of the process it was forked from),
// -1 where the system does not say.
int64_t peak_rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6);
  return -1;
}

Tensor ints(Shape s, const std::vector<int64_t>& v, int et, const std::string& where) {
  return Tensor::from_ints(std::move(s), v, onnx::to_dtype(et, where));
}

// Greedy: the first largest logit. Sampling: softmax(logits / temperature), the top_k most likely
// (0: all), then the smallest prefix holding top_p of the mass, renormalised, one seeded draw.
int64_t choose(const float* row, int64_t V, const GenerateFlags& f, std::mt19937_64& rng) {
  if (f.sampling == "greedy") return std::max_element(row, row + V) - row;
  std::vector<int64_t> idx(V);
  for (int64_t i = 0; i < V; ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return row[a] > row[b]; });
  const int64_t k = f.top_k > 0 ? std::min<int64_t>(f.top_k, V) : V;
  std::vector<double> p(k);
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += p[i] = std::exp(((double)row[idx[i]] - row[idx[0]]) / f.temperature);
  int64_t keep = 0;
  double cum = 0;
  while (keep < k) {
    cum += p[keep++] / sum;
    if (cum >= f.top_p) break;
  }
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) total += p[i];
  const double u = (double)(rng() >> 11) * 0x1.0p-53 * total;
  double acc = 0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return idx[i];
  }
  return idx[keep - 1];
}

}  // namespace

void add_generate_options(CLI::App* app, GenerateFlags& f) {
  app->add_option("model", f.model, "ONNX decoder export: " + std::string(kConvention))->required();
  app->add_option("--prompt", f.prompt, "Prompt token ids: 5,17,42 or @ids.npy ([n] or [1, n] integers)")->required();
  app->add_option("--max-new-tokens,-n", f.max_new_tokens, "Tokens to generate")->capture_default_str();
  app->add_option("--eos", f.eos, "Stop after generating this id (end of sequence)");
  app->add_flag("--sample", f.sample,
                "Draw each id from the (seeded) distribution shaped by --temperature, --top-k and --top-p\n"
                "  (default: greedy, the most likely id)");
  app->add_option("--temperature", f.temperature, "Sampling temperature (> 0)")->capture_default_str();
  app->add_option("--top-k", f.top_k, "Sample among the K most likely ids (0: all)")->capture_default_str();
  app->add_option("--top-p", f.top_p, "Sample among the most likely ids holding this much probability (0 < P <= 1)")
      ->capture_default_str();
  app->add_option("--seed", f.seed, "Seed of the sampling draws")->capture_default_str();
  app->add_option("--output,-o", f.output, "Write the generated ids to FILE.npy ([1, n] int64)");
  app->add_option("--cache-out", f.cache_out,
                  "Write the final KV cache (the positions held: the prompt and every generated id but the last) to\n"
                  "  DIR/present.N.key.npy and .value.npy ([1, kv_heads, length, head_dim]; DIR is created)");
  app->add_option("--mode,-m", f.mode, "eager | lazy | compiled (overrides $RLX_MLX_MODE; default lazy)");
  app->add_option("--backend,-b", f.backend, "Executor: cpu or vulkan (default: $RLX_BACKEND or cpu)");
  app->add_option("--device", f.device, "Device index for the backend (default: $RLX_DEVICE or 0)");
  app->add_flag("--json", f.json,
                "One JSON line per generated token on stdout (step, id, ms, tokens_in, past, capacity, specialise_ms,\n"
                "  run_ms, specialised_anew, input_copy_bytes, appends_in_place, cache_row_bytes; on a step that made a plan, peak_rss_kib:\n"
                "  the peak resident set so far), then a summary line (with the final peak_rss_kib)");
  app->add_option("--kv-cache", f.kv_cache,
                  "auto | capacity | grow. capacity: one plan per cache capacity (64, 128, 256, ... slots; the unused ones masked\n"
                  "  through attention_mask), the cache kept as the plan's input and written in place; grow: the model specialised\n"
                  "  again for each cache length; auto: capacity where the model takes attention_mask and position_ids and its\n"
                  "  first capacity step's logits equal the exact past's, else grow")
      ->capture_default_str();
  app->add_flag("--verbose,-v", f.verbose, "Explain each step on stderr");
  app->add_flag("--no-cache", f.no_cache, "Do not read or write the persistent compile cache (as RLX_CACHE=0)");
  app->footer(
      "No tokenizer: ids in, ids out. The prompt runs as one step, then each step feeds the chosen id; the new\n"
      "present.N.* rows go into a KV cache planned for a capacity (one plan per capacity; --kv-cache).\n"
      "A merged decoder (Optimum's decoder_model_merged.onnx) gets use_cache_branch false on the prompt step, true after.\n"
      "Examples:\n"
      "  rlx generate graphs/tiny_decoder.onnx --prompt 5,17,42,7 -n 64 -o ids.npy\n"
      "  rlx generate graphs/tiny_decoder.onnx --prompt @graphs/tiny_decoder.inputs/prompt.npy --sample --temperature 0.8 --top-p 0.9 --seed 1 --json\n"
      "  rlx generate graphs/tiny_decoder_merged.onnx --prompt 5,17,42,7 -n 64 --verbose\n"
      "Exit codes: 0 ok, 2 bad usage, model or input, 3 failure while running.");
}

int cmd_generate(GenerateFlags& f) {
  f.sampling = f.sample ? "sample" : "greedy";
  if (f.max_new_tokens < 1) throw InputError("--max-new-tokens must be at least 1");
  if (!(f.temperature > 0) || !std::isfinite(f.temperature)) throw InputError("--temperature must be a positive number");
  if (!(f.top_p > 0 && f.top_p <= 1)) throw InputError("--top-p must be in (0, 1]");
  if (f.top_k < 0) throw InputError("--top-k must be 0 (all) or positive");
  if (f.sampling == "greedy" && (f.top_k || f.top_p != 1 || f.temperature != 1))
    std::cerr << "note: --temperature, --top-k and --top-p shape sampling only (add --sample)\n";
  if (!f.output.empty() && std::filesystem::path(f.output).extension() != ".npy")
    throw InputError("--output " + f.output + ": the file must end in .npy");
  if (!f.output.empty()) prepare_output_file(f.output);
  if (!onnx::file_looks_like_onnx(f.model))
    throw InputError(f.model + ": not an ONNX model (rlx generate runs ONNX decoder exports)");
  const std::vector<int64_t> prompt = parse_prompt(f.prompt);
  Mode mode = f.mode.empty() ? mode_from_env() : parse_mode(f.mode, "--mode");
  std::string backend = f.backend;
  if (backend.empty()) backend = std::getenv("RLX_BACKEND") ? std::getenv("RLX_BACKEND") : "cpu";
  int device = f.device >= 0 ? f.device : (std::getenv("RLX_DEVICE") ? std::atoi(std::getenv("RLX_DEVICE")) : 0);

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();  // the first token's time counts loading the model
  auto model = onnx::Model::load(f.model);
  const Layout L = read_layout(*model, f.model);
  for (int64_t id : prompt)
    if (id < 0 || (L.vocab > 0 && id >= L.vocab))
      throw InputError("--prompt: id " + std::to_string(id) + " is outside the vocabulary [0, " +
                       (L.vocab > 0 ? std::to_string(L.vocab) : std::string("vocab")) + ")" +
                       (L.vocab > 0 ? " (the last dimension of the model's logits)" : ""));
  if (!f.cache_out.empty())
    for (const auto& name : L.present) prepare_output_file((std::filesystem::path(f.cache_out) / (name + ".npy")).string());
  auto ex = make_executor(backend, device);
  SessionOptions so;
  so.verbose = f.verbose;

  // The KV cache: capacity-planned (one plan per capacity, the cache a persistent input written
  // in place; lib/runtime/kv_cache.h) where the model takes attention_mask and position_ids,
  // else grown (the model specialised again for each cache length).
  if (f.kv_cache != "auto" && f.kv_cache != "capacity" && f.kv_cache != "grow")
    throw InputError("--kv-cache " + f.kv_cache + ": expected auto, capacity or grow");
  std::string no_capacity;  // why the capacity cache is not used
  if (f.kv_cache == "grow") no_capacity = "--kv-cache grow";
  else if (L.mask.empty() || L.pos.empty())
    no_capacity = "the model takes no " + std::string(L.mask.empty() ? "attention_mask" : "position_ids") +
                  " input (a capacity cache masks its unused slots and gives each token its position)";
  if (f.kv_cache == "capacity" && !no_capacity.empty()) throw InputError(f.model + ": --kv-cache capacity: " + no_capacity);
  SessionOptions so_cap = so;
  so_cap.inputs_constant = true;  // the cache inputs are uploaded once per plan, then row by row
  so_cap.in_place_inputs = {L.past.begin(), L.past.end()};  // on the CPU, read from the cache itself
  if (!L.mask.empty() && !L.pos.empty()) so_cap.in_place_inputs.insert({L.ids, L.mask, L.pos});  // changed in place per step
  if (L.use_cache_branch) so_cap.in_place_inputs.insert("use_cache_branch");
  // The export's concat(past, new) is written into the cache itself (a spare slot per head takes
  // the new rows): no copy of the cache and no buffer of its size per step. On the CPU the cache
  // is host pages read in place; on Vulkan it is device buffers and stays on the device.
  const bool append = ex->appends_in_place();
  std::unique_ptr<KvCache> kv;
  struct CapacityStep {
    std::shared_ptr<const onnx::Specialized> sp;
    CapacityGraph cg;
    std::unique_ptr<Session> s;
    Tensor ids, mask, pos;  // the step's inputs, set once per plan, then changed in place
    int64_t seen = 0;       // the mask's slots [0, seen) are 1
    int nodes = 0, control = 0, logits = -1;
    // Writes integer v at element i of `t` (input `id`'s tensor) and tells the session.
    void put(Session& s, const std::string& id, Tensor& t, int64_t i, int64_t v) {
      const Tensor one = Tensor::from_ints({1}, {v}, t.dtype());
      const size_t es = dtype_size(t.dtype());
      std::memcpy(static_cast<uint8_t*>(t.mutable_raw()) + i * es, one.raw(), es);
      s.input_bytes_changed(id, t, i * es, es);
    }
  };
  std::unique_ptr<CapacityStep> cap;
  bool probed = false;
  int capacity_plans = 0;

  std::map<std::string, Tensor> past;
  for (size_t k = 0; k < L.past.size(); ++k) past[L.past[k]] = Tensor({1, L.kv_heads[k], 0, L.head_dim[k]}, L.past_dtype[k]);
  std::vector<int64_t> cur = prompt, generated;
  int64_t past_len = 0;
  std::mt19937_64 rng(f.seed);
  auto t_first = t0, t_prev = t0;
  bool eos = false;
  auto msd = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  struct StepInfo {
    double spec_ms = 0, session_ms = 0, run_ms = 0;
    bool fresh = false;
    int64_t copy_bytes = 0;  // the session's input_copy_bytes (inputs uploaded or copied)
    int64_t cache_row_bytes = 0;  // the step's new rows written into the cache after its plan ran
    int appends = 0;         // concats appended into the cache in place
    int nodes = 0, control = 0;
    int64_t capacity = 0;  // 0: a grown step
  };
  auto check_logits = [&](const Tensor& logits, int64_t t) {
    if (logits.rank() != 3 || logits.shape()[0] != 1 || logits.shape()[1] != t)
      throw InputError(f.model + ": logits has shape " + shape_str(logits.shape()) + ", expected [1, " + std::to_string(t) + ", vocab]");
  };
  // A step over the past as it is (its exact length): the model specialised for these shapes.
  // Updates `past` with the step's presents; returns the logits (f32).
  auto grown_step = [&](int64_t t, StepInfo& info) -> Tensor {
    std::map<std::string, Tensor> in = past;
    in[L.ids] = ints({1, t}, cur, L.ids_et, "input_ids");
    if (!L.mask.empty()) in[L.mask] = ints({1, past_len + t}, std::vector<int64_t>(past_len + t, 1), L.mask_et, "attention_mask");
    // A merged decoder's If folds on this value when the model is specialised (a one-element
    // input bound by value): the prompt step imports only the no-past branch, the others only the
    // with-past one (the past inputs are then empty on the prompt step, and unread).
    if (L.use_cache_branch) in["use_cache_branch"] = Tensor::from_ints(L.use_cache_shape, {past_len > 0 ? 1 : 0}, DType::boolean);
    if (!L.pos.empty()) {
      std::vector<int64_t> p(t);
      for (int64_t i = 0; i < t; ++i) p[i] = past_len + i;
      in[L.pos] = ints({1, t}, p, L.pos_et, "position_ids");
    }
    std::map<std::string, Shape> shapes;
    for (const auto& [name, v] : in) shapes[name] = v.shape();
    const int specs_before = model->specializations();
    const auto t_spec = clock::now();
    auto sp = model->specialize(shapes, {}, in);
    info.fresh = model->specializations() != specs_before;
    const auto t_session = clock::now();
    Session s(sp->graph, *ex, sp->params, so);
    for (const auto& [name, v] : in) s.set_input(name, v);
    const auto t_run = clock::now();
    std::vector<Tensor> outs = s.run(mode);
    const auto t_ran = clock::now();
    info.spec_ms += msd(t_spec, t_session), info.session_ms += msd(t_session, t_run), info.run_ms += msd(t_run, t_ran);
    const ir::Graph& g = *sp->graph;
    info.nodes = (int)g.nodes.size();
    for (const auto& nd : g.nodes) info.control += nd.op == ir::Op::If || nd.op == ir::Op::Loop || nd.op == ir::Op::Scan;
    auto out = [&](const std::string& id) -> const Tensor& {
      int k = output_index(g, id);
      if (k < 0) throw RuntimeError("internal: output '" + id + "' missing from the specialised graph");
      return outs[k];
    };
    const Tensor& logits = out("logits");
    check_logits(logits, t);
    for (size_t k = 0; k < L.past.size(); ++k) {
      const Tensor& p = out(L.present[k]);
      const Shape want{1, L.kv_heads[k], past_len + t, L.head_dim[k]};
      if (p.shape() != want)
        throw InputError(f.model + ": output '" + L.present[k] + "' has shape " + shape_str(p.shape()) + ", expected " + shape_str(want) +
                         " (the past grown by the step's tokens)");
      past[L.past[k]] = p;
    }
    return logits.to_f32();
  };
  // A step of one token over the capacity cache: the plan for its capacity (made once), the
  // unused slots masked out, the new rows written into the cache in place. Returns the logits
  // (f32), or an undefined tensor with `why` set where the model cannot run this way.
  auto capacity_step = [&](StepInfo& info, std::string& why) -> Tensor {
    const int64_t n = kv->length(), C_before = kv->capacity();
    if (n + 1 > C_before) {
      if (cap) model->forget(cap->sp);  // the outgrown capacity's specialisation and plan go first: a lower peak
      cap.reset();
      kv->grow(2 * C_before);
    }
    const int64_t C = kv->capacity();
    info.capacity = C;
    const auto t_spec = clock::now();
    auto t_session = t_spec;
    if (!cap) {
      std::map<std::string, Tensor> in;
      in[L.ids] = ints({1, 1}, cur, L.ids_et, "input_ids");
      std::vector<int64_t> mask(C + 1, 0);  // the past's n slots and the new token's (last) are seen
      std::fill(mask.begin(), mask.begin() + n, 1);
      mask[C] = 1;
      in[L.mask] = ints({1, C + 1}, mask, L.mask_et, "attention_mask");
      in[L.pos] = ints({1, 1}, {n}, L.pos_et, "position_ids");
      if (L.use_cache_branch) in["use_cache_branch"] = Tensor::from_ints(L.use_cache_shape, {1}, DType::boolean);
      std::map<std::string, Shape> shapes;
      for (const auto& [name, v] : in) shapes[name] = v.shape();
      for (size_t k = 0; k < L.past.size(); ++k) shapes[L.past[k]] = Shape{1, L.kv_heads[k], C, L.head_dim[k]};
      auto c = std::make_unique<CapacityStep>();
      c->sp = model->specialize(shapes, {}, in);
      for (const auto& [name, v] : c->sp->value_deps)
        if (name != "use_cache_branch") {
          why = "the model's graph depends on the value of input '" + name + "' (it is not the same graph for every step)";
          return {};
        }
      c->cg = capacity_step_graph(*c->sp->graph, L.past, L.present);
      if (!c->cg.graph) {
        why = c->cg.why_not;
        return {};
      }
      t_session = clock::now();
      c->s = std::make_unique<Session>(c->cg.graph, *ex, c->sp->params, so_cap);
      // the past read as it is (from host tensors; on Vulkan uploaded once per plan, then row by row)
      if (kv->spare_slot() && !(append && c->cg.appendable)) kv->relayout(C, false);
      for (size_t k = 0; k < L.past.size(); ++k) {
        if (kv->spare_slot()) c->s->set_append_storage(L.past[k], kv->append_storage(k));
        else c->s->set_input(L.past[k], kv->tensor(k));
      }
      for (const auto& [name, v] : in) c->s->set_input(name, v);
      c->ids = in[L.ids], c->mask = in[L.mask], c->pos = in[L.pos];
      c->seen = n;
      const ir::Graph& g = *c->cg.graph;
      c->nodes = (int)g.nodes.size();
      for (const auto& nd : g.nodes) c->control += nd.op == ir::Op::If || nd.op == ir::Op::Loop || nd.op == ir::Op::Scan;
      c->logits = output_index(g, "logits");
      if (c->logits < 0) throw RuntimeError("internal: output 'logits' missing from the specialised graph");
      cap = std::move(c);
      info.fresh = true;
      ++capacity_plans;
    }
    const auto t_run = clock::now();
    if (!info.fresh) {
      // The plan's inputs are changed where they are (no new tensors, no mask rebuilt): the id,
      // the position and the mask's newly held slots; on the CPU the plan reads them in place.
      cap->put(*cap->s, L.ids, cap->ids, 0, cur[0]);
      cap->put(*cap->s, L.pos, cap->pos, 0, n);
      for (; cap->seen < n; ++cap->seen) cap->put(*cap->s, L.mask, cap->mask, cap->seen, 1);
    }
    std::vector<Tensor> outs = cap->s->run(mode);
    const auto t_ran = clock::now();
    info.spec_ms += msd(t_spec, t_session), info.session_ms += msd(t_session, t_run), info.run_ms += msd(t_run, t_ran);
    info.copy_bytes = cap->s->last_stats().input_copy_bytes;
    info.appends = cap->s->last_stats().appends_in_place;
    info.nodes = cap->nodes, info.control = cap->control;
    check_logits(outs[cap->logits], 1);
    Tensor logits = outs[cap->logits].to_f32();
    if (kv->spare_slot()) {  // the plan appended into the cache's spare slots: the rows move to slot n
      info.cache_row_bytes = kv->commit_appended();
      return logits;
    }
    for (size_t k = 0; k < L.past.size(); ++k) {
      const auto written = kv->write(k, outs[cap->cg.new_rows[k]]);
      for (const auto& [at, bytes] : written) {
        cap->s->input_bytes_changed(L.past[k], kv->tensor(k), at, bytes);
        info.cache_row_bytes += (int64_t)bytes;
      }
    }
    kv->advance(1);
    return logits;
  };
  // Back to the grown cache (the capacity cache cannot serve this model): the past as it is.
  auto leave_capacity = [&](const std::string& why) {
    if (f.kv_cache == "capacity") throw InputError(f.model + ": --kv-cache capacity: " + why);
    if (f.verbose) std::cerr << "note: the KV cache grows (the model is specialised for each cache length): " << why << "\n";
    if (kv && past.empty())
      for (size_t k = 0; k < L.past.size(); ++k) past[L.past[k]] = kv->valid(k);
    kv.reset();
    cap.reset();
    no_capacity = why;
  };
  for (int step = 0; step < f.max_new_tokens; ++step) {
    const int64_t t = (int64_t)cur.size();
    StepInfo info;
    Tensor l32;
    if (kv) {
      std::string why;
      const bool probe = !probed;
      if (probe) {  // the first capacity step also runs as a grown one, and the logits must agree
        probed = true;
        StepInfo ginfo;
        const Tensor want = grown_step(t, ginfo);
        l32 = capacity_step(info, why);
        if (why.empty()) {
          double diff = 0, scale = 1;
          for (int64_t i = 0; i < want.numel(); ++i) {
            diff = std::max(diff, (double)std::fabs(want.data()[i] - l32.data()[i]));
            scale = std::max(scale, (double)std::fabs(want.data()[i]));
          }
          if (!(diff <= 1e-3 * scale))
            why = fmt::format("its logits over the masked capacity cache differ from those over the exact past by {:.3g} (the model does "
                              "not honour attention_mask's zeros)", diff);
        }
        info.spec_ms += ginfo.spec_ms, info.session_ms += ginfo.session_ms, info.run_ms += ginfo.run_ms;
        if (!why.empty()) {
          kv.reset();  // `past` holds the grown step's presents
          leave_capacity(why);
          l32 = want;
          info.capacity = 0;
        } else {
          past.clear();  // the capacity cache holds the past from now on
        }
      } else {
        l32 = capacity_step(info, why);
        if (!why.empty()) {
          leave_capacity(why);
          l32 = grown_step(t, info);
        }
      }
    } else {
      l32 = grown_step(t, info);
    }
    const int64_t V = l32.shape()[2];
    const int64_t id = choose(l32.data() + (t - 1) * V, V, f, rng);
    past_len += t;
    if (step == 0 && no_capacity.empty()) {  // the prompt ran over no past: the cache starts here
      kv = std::make_unique<KvCache>(L.kv_heads, L.head_dim, L.past_dtype, KvCache::capacity_for(past_len + 1), append,
                                     append ? ex.get() : nullptr);
      for (size_t k = 0; k < L.past.size(); ++k) kv->write(k, past[L.past[k]]);
      kv->advance(past_len);
    }
    generated.push_back(id);
    cur = {id};
    const auto now = clock::now();
    if (step == 0) t_first = now;
    const double ms = std::chrono::duration<double, std::milli>(now - t_prev).count();
    t_prev = now;
    // per token: its wall time, and the split --verbose prints (specialise: the ONNX model for
    // this step's shapes; run: planning, in compiled mode compiling, and the kernels)
    if (f.json) {
      nlohmann::json line{{"step", step + 1}, {"id", id}, {"ms", ms}, {"tokens_in", t}, {"past", past_len - t},
                          {"capacity", info.capacity}, {"specialise_ms", info.spec_ms}, {"run_ms", info.run_ms},
                          {"specialised_anew", info.fresh}, {"input_copy_bytes", info.copy_bytes}, {"appends_in_place", info.appends},
                          {"cache_row_bytes", info.cache_row_bytes}};
      if (info.fresh) line["peak_rss_kib"] = peak_rss_kib();  // where a plan was made (reading it costs ~10 us)
      std::cout << line.dump() << "\n" << std::flush;
    }
    if (f.verbose)
      std::cerr << fmt::format("step {}: {} token(s) in, past {}, id {} ({:.3f} ms: specialise {:.3f}, session {:.3f}, run {:.3f} "
                               "(planning{} included); {}, {} nodes{}{})\n",
                               step + 1, t, past_len - t, id, ms, info.spec_ms, info.session_ms, info.run_ms,
                               mode == Mode::Compiled ? " and compiling" : "",
                               info.capacity ? fmt::format("capacity {} ({}; inputs copied {} bytes, {} concat(s) appended in place, "
                                                           "{} bytes of new rows written into the cache{})",
                                                           info.capacity, info.fresh ? "planned anew" : "plan reused", info.copy_bytes,
                                                           info.appends, info.cache_row_bytes,
                                                           kv && kv->on_device() ? " on the device" : "")
                                             : (info.fresh ? "specialised anew" : "specialisation reused"),
                               info.nodes, info.control ? fmt::format(", {} run-time control node(s)", info.control) : "",
                               L.use_cache_branch ? fmt::format(", use_cache_branch {}", past_len > t) : "");
    if (f.eos && id == *f.eos) {
      eos = true;
      break;
    }
  }
  const double first_ms = std::chrono::duration<double, std::milli>(t_first - t0).count();
  const double rest_s = std::chrono::duration<double>(t_prev - t_first).count();
  const double tps = generated.size() > 1 && rest_s > 0 ? (generated.size() - 1) / rest_s : 0;
  if (!f.output.empty()) io::write_npy(f.output, Tensor::from_ints({1, (int64_t)generated.size()}, generated, DType::i64));
  if (!f.cache_out.empty())  // from the device where the cache lives there
    for (size_t k = 0; k < L.past.size(); ++k)
      io::write_npy((std::filesystem::path(f.cache_out) / (L.present[k] + ".npy")).string(), kv ? kv->valid(k) : past.at(L.past[k]));
  if (f.json) {
    std::cout << nlohmann::json{{"ids", generated},
                                {"prompt_tokens", prompt.size()},
                                {"generated", generated.size()},
                                {"stopped_at_eos", eos},
                                {"first_token_ms", first_ms},
                                {"tokens_per_s", tps},
                                {"mode", mode_name(mode)},
                                {"backend", ex->name()},
                                {"sampling", f.sampling},
                                {"kv_cache", no_capacity.empty() ? "capacity" : "grow"},
                                {"capacity", kv ? kv->capacity() : 0},
                                {"capacity_plans", capacity_plans},
                                {"peak_rss_kib", peak_rss_kib()}}
                     .dump()
              << "\n";
  } else {
    for (size_t i = 0; i < generated.size(); ++i) std::cout << (i ? " " : "") << generated[i];
    std::cout << "\n";
  }
  std::cerr << fmt::format("generated {} token(s){} after a prompt of {}: first token {:.3f} ms, then {:.1f} tokens/s ({} mode on {}; {})\n",
                           generated.size(), eos ? " (stopped at --eos)" : "", prompt.size(), first_ms, tps, mode_name(mode), ex->name(),
                           no_capacity.empty() ? fmt::format("KV cache of capacity {}, {} plan(s) for the steps after the prompt",
                                                             kv ? kv->capacity() : 0, capacity_plans)
                                               : "the model specialised again for each cache length: " + no_capacity);
  return kExitOk;
}

}  // namespace rlx
