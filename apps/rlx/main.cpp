// rlx: the command line. Parses flags and calls the library; no logic of its own.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backends/cpu/thread_pool.h"
#include "core/error.h"
#include "io/blob_cache.h"
#include "ir/loader.h"
#include "runtime/compare.h"
#include "runtime/convert.h"
#include "runtime/inspect.h"
#include "runtime/bench.h"
#include "runtime/onnx_binding.h"
#include "runtime/runner.h"
#include "runtime/session.h"
#include "batch.h"
#include "generate.h"
#include "quantize.h"
#include "shell.h"
#include "suggest.h"

using namespace rlx;

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  try {
    return std::stoi(v);
  } catch (...) {
    throw InputError(std::string(name) + "=" + v + ": expected an integer");
  }
}

// A numeric flag that must not be negative (tolerances, counts, device indices).
CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        try {
          size_t used = 0;
          double d = std::stod(v, &used);
          if (used == v.size() && d >= 0) return "";
        } catch (...) {
        }
        return "expected a number >= 0, got '" + v + "'";
      },
      "NUMBER>=0");
}

// RLX_NUM_THREADS is checked before any work: not a positive integer is refused (exit 2),
// a value above a few threads per core is capped with a note.
void check_num_threads() {
  std::string note;
  cpu::parse_num_threads(std::getenv("RLX_NUM_THREADS"), &note);
  if (!note.empty()) std::cerr << note << "\n";
}

// ---------------- the persistent compile cache (docs/cache.md) ----------------
bool g_cache_verbose = false;

// Installs the process's compile cache from the environment, unless --no-cache.
void install_cache(bool no_cache, bool verbose, const std::string& off_why) {
  g_cache_verbose = verbose;
  io::CacheSettings cs = io::cache_settings_from_env();
  if (no_cache) cs.enabled = false, cs.disabled_why = "--no-cache";
  if (!off_why.empty()) cs.enabled = false, cs.disabled_why = off_why;
  if (!cs.enabled) {
    if (verbose) std::cerr << "compile cache: off (" << cs.disabled_why << ")\n";
    return;
  }
  // An unsafe directory or no usable key: one line, and the run goes on without the cache.
  std::string warning;
  io::set_active_cache(io::open_cache(cs, &warning));
  if (!warning.empty()) std::cerr << "warning: " << warning << "\n";
}

// After a command: warnings about the cache always, notes and a summary with --verbose.
void report_cache() {
  io::CacheLog& l = io::cache_log();
  for (const auto& w : l.warnings) std::cerr << "warning: " << w << "\n";
  io::BlobCache* c = io::active_cache();
  if (!g_cache_verbose || !c) return;
  for (const auto& n : l.notes) std::cerr << n << "\n";
  std::cerr << fmt::format("compile cache: {} hit(s), {} miss(es), {} stored ({})\n", l.hits, l.misses, l.stores, c->dir());
}

std::string cache_info_text(const io::CacheSettings& cs) {
  io::BlobCache c(cs.dir, cs.max_bytes, "");
  std::string source, why;
  bool not_made_yet = false;  // the key file is made by the first run that uses the cache
  const bool keyed = !io::cache_mac_key(false, &source, &why, &not_made_yet).empty();
  const std::string off = !cs.enabled                  ? cs.disabled_why
                          : !cs.unsafe_dir_why.empty() ? "not used: " + cs.unsafe_dir_why
                          : !keyed && !not_made_yet    ? why
                                                       : "";
  std::string s = "compile cache: " + (cs.dir.empty() ? std::string("(no location)") : cs.dir) +
                  (off.empty() ? "" : "  (off: " + off + ")") + "\n";
  io::BlobCache::Info i = c.info();
  s += fmt::format("  {} entries, {:.2f} MiB of {:.0f} MiB (RLX_CACHE_MAX_MB)\n", i.entries, i.bytes / 1048576.0,
                   cs.max_bytes / 1048576.0);
  const std::map<std::string, std::string> what = {{"plan", "compiled plans"},
                                                   {"spirv", "SPIR-V of fused Vulkan kernels"},
                                                   {"vkpipeline", "Vulkan pipeline caches"}};
  for (const auto& [k, nb] : i.kinds)
    s += fmt::format("  {:<11} {:>5} entries {:>10.2f} MiB  {}\n", k, nb.first, nb.second / 1048576.0,
                     what.count(k) ? what.at(k) : "");
  s += "  entries authenticated with: " +
       (source == "RLX_CACHE_SECRET" ? std::string("RLX_CACHE_SECRET")
        : source.empty()             ? std::string("(no key)")
                                     : "the key file " + source + (keyed ? "" : not_made_yet ? " (made on first use)" : " (not usable)")) +
       "\n";
  s += "  build: " + io::build_id() + "\n";
  return s;
}

// Flags shared by run, compare and bench.
struct CommonFlags {
  Binding binding;
  std::string random_params;  // "" when absent
  bool random_params_given = false;
  std::string backend, mode;
  int device = -1;
  bool verbose = false;
  bool no_cache = false;
  std::string cache_off_why;  // set by commands that must not use the cache

  void add(CLI::App* app) {
    app->add_option("graph", binding.graph, "Graph file: rlx.graph version 1 JSON, or an ONNX model (recognised by content)")->required();
    app->add_option("--params,-p", binding.params,
                    "Parameter file: .safetensors, NAME.npy or a directory of NAME.npy (repeatable)\n"
                    "  e.g. --params graphs/mlp.safetensors")->allow_extra_args(false);
    app->add_option("--input,-i", binding.inputs,
                    "Input ID=SPEC (repeatable). SPEC: @x.npy | file.safetensors:NAME | 2x3xf32=1,2,3,4,5,6 | random[:SEED]\n"
                    "  e.g. --input tokens=@graphs/tiny_llama.inputs/tokens.npy --input x=random:7")->allow_extra_args(false);
    app->add_option("--dim", binding.dims, "Size of a symbolic dimension for random inputs, NAME=SIZE (e.g. --dim batch=4)")->allow_extra_args(false);
    app->add_option("--random-params", random_params,
                    "Fill parameters missing from --params with seeded random values (optionally =SEED)")
        ->expected(0, 1)
        ->default_str("0")
        ->each([this](const std::string&) { random_params_given = true; })
        ->trigger_on_parse();
    app->add_option("--backend,-b", backend, "Executor: cpu or vulkan (default: $RLX_BACKEND or cpu)");
    app->add_option("--device", device, "Device index for the backend (default: $RLX_DEVICE or 0)")
        ->check(non_negative());
    app->add_flag("--verbose,-v", verbose, "Explain planning and compile-cache decisions on stderr");
    app->add_option("--dtype", binding.dtype,
                    "Run in half precision: bf16 or f16 (every f32 param, input and constant converted, ONNX\n"
                    "  initializers included; ops on half operands compute in f32 and round to it).\n"
                    "  Default: the graph's dtypes");
    app->add_flag("--no-cache", no_cache, "Do not read or write the persistent compile cache (as RLX_CACHE=0)");
  }
  void finish() {
    if (random_params_given || !random_params.empty()) {
      try {
        binding.random_params = random_params.empty() ? 0 : std::stoull(random_params);
      } catch (...) {
        throw InputError("--random-params=" + random_params + ": the seed must be a non-negative integer");
      }
    }
    check_num_threads();
    install_cache(no_cache, verbose, cache_off_why);
    if (backend.empty()) backend = env_or("RLX_BACKEND", "cpu");
    if (device < 0) device = env_int("RLX_DEVICE", 0);
  }
  Loaded load() {
    Loaded L = load_binding(binding);
    if (!L.random_params_filled.empty())
      std::cerr << "note: --random-params filled " << L.random_params_filled.size() << " parameter(s) with seeded values (seed "
                << *binding.random_params << ")\n";
    return L;
  }
};

SessionOptions session_options(bool verbose) {
  SessionOptions so;
  so.verbose = verbose;
  so.disable_compile = env_or("RLX_DISABLE_COMPILE", "0") == "1";
  return so;
}

Mode pick_mode(const std::string& flag) { return flag.empty() ? mode_from_env() : parse_mode(flag, "--mode"); }

// ---------------- run: per-step outputs (--collect, --stop-when) ----------------
// --collect OUT gathers output OUT over the steps; at the end its values, stacked into one
// tensor [steps, ...], take the place of the last step's value (printed, written, compared).
struct Collector {
  int index = -1;
  std::string id;
  std::vector<Tensor> steps;
};

std::vector<Collector> plan_collect(const ir::Graph& g, const std::vector<std::string>& ids) {
  std::vector<Collector> r;
  for (const auto& id : ids) {
    int k = output_index(g, id);
    if (k < 0) throw InputError("--collect " + id + ": '" + id + "' is not an output of the graph");
    for (const auto& c : r)
      if (c.id == id) throw InputError("--collect " + id + " is given twice");
    r.push_back({k, id, {}});
  }
  return r;
}

// The steps' values stacked along a new first axis; every step must give the same shape.
Tensor stack_steps(const Collector& c) {
  const Tensor& t0 = c.steps.front();
  Shape s = t0.shape();
  s.insert(s.begin(), (int64_t)c.steps.size());
  Tensor r(s, t0.dtype());
  auto* dst = static_cast<uint8_t*>(r.mutable_raw());
  for (size_t i = 0; i < c.steps.size(); ++i) {
    if (c.steps[i].shape() != t0.shape())
      throw InputError("--collect " + c.id + ": the output's shape changes over the steps (" + shape_str(t0.shape()) + " at step 1, " +
                       shape_str(c.steps[i].shape()) + " at step " + std::to_string(i + 1) + "); only outputs of one shape can be stacked");
    if (t0.nbytes()) std::memcpy(dst + i * t0.nbytes(), c.steps[i].raw(), t0.nbytes());
  }
  return r;
}

// --stop-when OUT=VALUE: output index and value.
struct StopWhen {
  int index = -1;
  std::string id;
  double value = 0;
};

std::optional<StopWhen> parse_stop_when(const ir::Graph& g, const std::string& spec) {
  if (spec.empty()) return std::nullopt;
  auto [id, v] = split_assignment(spec, "--stop-when");
  StopWhen w{output_index(g, id), id, 0};
  if (w.index < 0) throw InputError("--stop-when " + spec + ": '" + id + "' is not an output of the graph");
  try {
    size_t used = 0;
    w.value = std::stod(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
  } catch (const std::exception&) {
    throw InputError("--stop-when " + spec + ": VALUE must be a number (e.g. an end-of-sequence id)");
  }
  return w;
}

// True when every element of the output equals the value (an empty output never stops).
bool stop_reached(const StopWhen& w, const Tensor& t) {
  if (t.numel() == 0) return false;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (t.at(i) != w.value) return false;
  return true;
}

// True when a fed output's shape differs from the input's current value (a KV cache grown by
// a step): an ONNX model, specialised per input shapes, must then be specialised again.
bool fed_shapes_changed(const ir::Graph& g, const std::vector<std::pair<std::string, std::string>>& feeds,
                        const std::vector<Tensor>& outs, const std::map<std::string, Tensor>& cur_inputs) {
  for (const auto& [out, in] : feeds) {
    auto it = cur_inputs.find(in);
    if (it == cur_inputs.end() || it->second.shape() != outs.at(output_index(g, out)).shape()) return true;
  }
  return false;
}

// ---------------- run ----------------
struct RunFlags {
  CommonFlags common;
  std::vector<std::string> outputs, expects, feeds, collect;
  std::string out_dir, stop_when;
  double atol = 1e-5, rtol = 1e-5;
  int repeat = 1, steps = 1, top = 0;
  bool json = false, dump_plan = false, check_numerics = false, profile = false;
  BatchFlags batch;  // --batch LIST: a batch job (apps/rlx/batch.h)
};

int cmd_run(RunFlags& f) {
  {
    std::vector<std::string> conflicting;
    const std::vector<std::pair<bool, const char*>> single = {
        {!f.common.binding.inputs.empty(), "--input"}, {!f.outputs.empty(), "--output"}, {!f.expects.empty(), "--expect"},
        {f.repeat != 1, "--repeat"}, {f.steps != 1, "--steps"}, {!f.feeds.empty(), "--feed"}, {!f.collect.empty(), "--collect"},
        {!f.stop_when.empty(), "--stop-when"}, {f.top != 0, "--top"}, {f.json, "--json"}, {f.dump_plan, "--dump-plan"},
        {f.profile, "--profile"}};
    for (const auto& [given, name] : single)
      if (given) conflicting.push_back(name);
    check_batch_flags(f.batch, conflicting);
  }
  if (!f.batch.list.empty()) {  // a batch job: one model load, many items (docs/batch.md)
    f.common.finish();
    BatchOptions o;
    o.model = f.common.binding;
    o.out_dir = f.out_dir;
    const char* env_mode = std::getenv("RLX_MLX_MODE");
    o.mode = f.common.mode.empty() && !(env_mode && *env_mode) ? Mode::Compiled : pick_mode(f.common.mode);
    o.backend = f.common.backend;
    o.device = f.common.device;
    o.session = session_options(f.common.verbose);
    o.session.check_numerics = f.check_numerics;
    return cmd_batch(f.batch, o);
  }
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();  // time to the first step counts loading and specialising
  f.common.finish();
  Mode mode = pick_mode(f.common.mode);
  if (f.repeat < 1 || f.steps < 1) throw InputError("--repeat and --steps must be at least 1");
  Loaded L = f.common.load();
  const std::shared_ptr<ir::Graph> first_graph = L.graph;  // outputs are looked up in it (a re-specialisation keeps them)
  const ir::Graph& g = *first_graph;
  auto expected = load_expectations(g, f.expects);
  auto out_plan = plan_outputs(g, f.outputs, f.out_dir);
  std::vector<std::pair<std::string, std::string>> feeds;
  for (const auto& s : f.feeds) feeds.push_back(split_assignment(s, "--feed"));
  if (!feeds.empty() && f.steps == 1) std::cerr << "note: --feed has no effect without --steps N > 1\n";
  auto collectors = plan_collect(g, f.collect);
  const auto stop_when = parse_stop_when(g, f.stop_when);

  auto ex = make_executor(f.common.backend, f.common.device);
  SessionOptions so = session_options(f.common.verbose);
  so.check_numerics = f.check_numerics;
  so.profile = f.profile;
  auto session = std::make_unique<Session>(L.graph, *ex, L.params, so);
  for (const auto& [id, t] : L.inputs) session->set_input(id, t);
  std::map<std::string, Tensor> cur_inputs = L.inputs;  // for a re-specialisation (below)

  std::vector<Tensor> outs;
  std::vector<double> times;
  const bool progress = isatty(2) && f.steps * f.repeat > 1;
  int steps_run = 0, respecialized = 0;
  auto t_first = t_start;
  for (int step = 0; step < f.steps; ++step) {
    if (step > 0) {
      bool by_value = false;
      const bool reshaped = fed_shapes_changed(g, feeds, outs, cur_inputs);
      for (const auto& [out, in] : feeds) {
        cur_inputs[in] = outs.at(output_index(g, out));
        by_value = by_value || L.value_deps.count(in);
      }
      if (L.respecialize && (reshaped || (by_value && L.values_changed(cur_inputs)))) {
        // An input the ONNX specialisation used by value changed, or a fed output has another
        // shape than the input had (a grown KV cache): specialise again (cached by shapes and
        // values in the model) rather than reuse a graph built for the old ones. A new Session
        // then plans (and in compiled mode compiles) for the new shapes: one per step while a
        // cache grows (docs/modes.md).
        Loaded L2 = L.respecialize(cur_inputs);
        ++respecialized;
        if (f.common.verbose)
          std::cerr << "step " << step + 1 << ": " << (reshaped ? "a fed input's shape" : "an input used by value")
                    << " changed; specialised again\n";
        session = std::make_unique<Session>(L2.graph, *ex, L2.params, so);
        for (const auto& [id, t] : cur_inputs) session->set_input(id, t);
        L.graph = L2.graph;
        L.params = L2.params;
        L.value_deps = L2.value_deps;
      } else {
        for (const auto& [out, in] : feeds) session->feed(out, in);
      }
    }
    Session& s = *session;
    for (int r = 0; r < f.repeat; ++r) {
      outs = s.run(mode);
      times.push_back(s.last_stats().seconds);
    }
    ++steps_run;
    if (step == 0) t_first = clock::now();
    for (auto& c : collectors) c.steps.push_back(outs.at(c.index));
    if (stop_when && stop_reached(*stop_when, outs.at(stop_when->index))) {
      if (f.common.verbose) std::cerr << "step " << step + 1 << ": " << stop_when->id << " = " << stop_when->value << "; stopping\n";
      break;
    }
    if (f.steps > 1 && (f.common.verbose || progress)) std::cerr << "\rstep " << step + 1 << "/" << f.steps << std::flush;
  }
  if (f.steps > 1 && (f.common.verbose || progress)) std::cerr << "\n";
  Session& s = *session;
  const RunStats& st = s.last_stats();
  double first = times.front(), steady = times.size() > 1 ? times.back() : times.front();
  const double first_step_s = std::chrono::duration<double>(t_first - t_start).count();
  const double rest_s = std::chrono::duration<double>(clock::now() - t_first).count();
  const double steps_per_s = steps_run > 1 && rest_s > 0 ? (steps_run - 1) / rest_s : 0;
  for (const auto& c : collectors) outs[c.index] = stack_steps(c);
  std::vector<std::string> failures;
  std::vector<nlohmann::json> expect_json;
  for (const auto& [id, e] : expected) {
    int k = output_index(g, id);
    Diff d = compare_tensors(outs[k], e, f.atol, f.rtol);
    nlohmann::json ej{{"output", id}, {"ok", d.ok()}, {"max_abs", d.max_abs}, {"max_rel", d.max_rel}, {"mismatched", d.bad}};
    if (!d.ok()) {
      // why, in the same words as on stderr: a shape mismatch, or the worst element
      failures.push_back(describe_diff(id, d, outs[k], e));
      ej["message"] = failures.back();
      ej["shape_ok"] = d.shape_ok;
      if (!d.shape_ok) ej["shape"] = outs[k].shape(), ej["expected_shape"] = e.shape();
    }
    expect_json.push_back(ej);
  }
  write_outputs(g, outs, out_plan);

  // Under --json, stdout holds the one JSON document: the plan goes to stderr.
  if (f.dump_plan) (f.json ? std::cerr : std::cout) << s.plan_text();
  if (f.json) {
    nlohmann::json j;
    j["graph"] = f.common.binding.graph;
    j["mode"] = mode_name(st.mode);
    j["backend"] = ex->name();
    j["device"] = ex->description();
    j["timings_ms"] = {{"first", first * 1e3}, {"last", steady * 1e3}, {"runs", times.size()}};
    j["kernels"] = st.kernels;
    j["peak_bytes"] = st.peak_bytes;
    j["compiles"] = s.compile_count();
    if (st.sizes_planned_total + st.sizes_reused)
      j["data_dependent_sizes"] = {{"planned", st.sizes_planned}, {"reused", st.sizes_reused}, {"planned_total", st.sizes_planned_total}};
    if (f.steps > 1) {
      j["steps"] = {{"run", steps_run}, {"requested", f.steps}, {"first_step_ms", first_step_s * 1e3},
                    {"steps_per_s", steps_per_s}, {"respecialized", respecialized},
                    {"stopped", stop_when.has_value() && steps_run < f.steps}};
      j["collected"] = f.collect;
    }
    j["outputs"] = nlohmann::json::array();
    for (size_t k = 0; k < outs.size(); ++k) {
      const Tensor& t = outs[k];
      nlohmann::json o{{"name", g.nodes[g.outputs[k]].id}, {"shape", t.shape()}, {"dtype", dtype_name(t.dtype())}};
      // Up to 4,096 elements: "values" holds them all. Above: "first_values" holds the first
      // 4,096 (row-major) and "numel" says how many there are; write the output with
      // --output/--out-dir for every value.
      const int64_t shown = std::min<int64_t>(t.numel(), 4096);
      const char* key = t.numel() <= 4096 ? "values" : "first_values";
      o["numel"] = t.numel();
      if (t.dtype() == DType::u64) {  // exact over the whole u64 range
        std::vector<uint64_t> v(shown);
        std::memcpy(v.data(), t.raw(), (size_t)shown * 8);
        o[key] = v;
      } else if (is_integer(t.dtype())) {  // exact over the whole i64 range
        std::vector<int64_t> v(shown);
        for (int64_t i = 0; i < shown; ++i) v[i] = t.int_at(i);
        o[key] = v;
      } else if (t.dtype() == DType::f64) {  // every bit (nlohmann writes the shortest exact form)
        std::vector<double> v(shown);
        for (int64_t i = 0; i < shown; ++i) v[i] = t.at(i);
        o[key] = v;
      } else {
        std::vector<float> v(shown);
        for (int64_t i = 0; i < shown; ++i) v[i] = (float)t.at(i);
        o[key] = v;
      }
      j["outputs"].push_back(o);
    }
    if (!expect_json.empty()) j["expect"] = expect_json;
    j["ok"] = failures.empty();
    j["exit_code"] = failures.empty() ? kExitOk : kExitExpectFailed;
    std::cout << j.dump(2) << "\n";
  } else {
    for (size_t k = 0; k < outs.size(); ++k) {
      std::cout << summarize(g.nodes[g.outputs[k]].id, outs[k]) << "\n";
      if (f.top > 0 && outs[k].numel() > 0) {
        const Tensor& t = outs[k];
        int64_t V = t.shape().empty() ? 1 : t.shape().back();
        const Tensor t32 = t.to_f32();
        const float* row = t32.data() + t.numel() - V;  // last position
        std::vector<int64_t> idx(V);
        for (int64_t i = 0; i < V; ++i) idx[i] = i;
        int64_t K = std::min<int64_t>(f.top, V);
        std::partial_sort(idx.begin(), idx.begin() + K, idx.end(), [&](int64_t a, int64_t b) { return row[a] > row[b]; });
        std::cout << "  top " << K << " at the last position:";
        for (int64_t i = 0; i < K; ++i) std::cout << fmt::format("  #{} {:.4f}", idx[i], row[idx[i]]);
        std::cout << "\n";
      }
    }
    std::cout.flush();
    std::cerr << fmt::format("{} mode on {} ({}): {} kernel(s), first run {:.3f} ms", mode_name(st.mode), ex->name(),
                             ex->description(), st.kernels, first * 1e3);
    if (times.size() > 1) std::cerr << fmt::format(", last run {:.3f} ms over {} runs", steady * 1e3, times.size());
    std::cerr << fmt::format(", peak device memory {:.2f} MiB\n", st.peak_bytes / 1048576.0);
    if (f.steps > 1) {
      std::cerr << fmt::format("steps: {} of {}{}, first step {:.3f} ms, then {:.1f} steps/s", steps_run, f.steps,
                               stop_when && steps_run < f.steps ? " (stopped by --stop-when)" : "", first_step_s * 1e3, steps_per_s);
      if (respecialized) std::cerr << fmt::format(" ({} step(s) specialised the model again for new input shapes)", respecialized);
      std::cerr << "\n";
    }
  }
  if (f.profile) {
    if (times.size() == 1)
      std::cerr << "note: --profile timed the only run, a cold one (compiling, first allocations and page faults "
                   "included); add --repeat N to profile the last of N runs\n";
    std::cerr << format_profile(st.profile);
  }
  for (const auto& m : failures) std::cerr << "expect failed: " << m << "\n";
  if (!failures.empty()) return kExitExpectFailed;
  if (!expected.empty() && !f.json) std::cerr << "expect: " << expected.size() << " output(s) match\n";
  return kExitOk;
}

// ---------------- compare ----------------
struct CompareFlags {
  CommonFlags common;
  std::string modes = "eager,lazy,compiled", backends, reference = "eager:cpu";  // backends: see pick_backends
  double atol = 1e-4, rtol = 1e-4;
  bool json = false, csv = false;
};

std::vector<std::string> split_csv(const std::string& s) {
  std::vector<std::string> r;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) r.push_back(item);
  return r;
}

// compare's and bench's backends: the --backends list, else the one -b names, else `fallback`.
// Called before CommonFlags::finish(), while `backend` is still empty unless -b was given.
std::vector<std::string> pick_backends(const std::string& list, const std::string& backend_flag, const std::string& fallback) {
  if (!list.empty() && !backend_flag.empty())
    throw InputError("--backend " + backend_flag + " and --backends " + list +
                     ": give one of them (--backends takes a comma-separated list, e.g. --backends cpu,vulkan)");
  std::vector<std::string> r = split_csv(!list.empty() ? list : !backend_flag.empty() ? backend_flag : fallback);
  if (r.empty()) throw InputError("--backends: no backend given; valid: cpu, vulkan");
  for (const auto& b : r)
    if (b != "cpu" && b != "vulkan") throw InputError("--backends: unknown backend \"" + b + "\"; valid: cpu, vulkan");
  return r;
}

int cmd_compare(CompareFlags& f) {
  CompareOptions o;
  o.backends = pick_backends(f.backends, f.common.backend, "cpu,vulkan");
  f.common.finish();
  o.modes = parse_modes(f.modes);
  o.reference = parse_combo(f.reference);
  o.atol = f.atol;
  o.rtol = f.rtol;
  o.device = f.common.device;
  o.session = session_options(f.common.verbose);
  Loaded L = f.common.load();
  // With --dtype, the reference runs the graph as declared (f32): the report shows the
  // largest difference the half precision run makes.
  std::optional<Loaded> as_declared;
  if (!f.common.binding.dtype.empty() && f.common.binding.dtype != "f32") {
    Binding b = f.common.binding;
    b.dtype.clear();
    as_declared = load_binding(b);
    o.reference_binding = &*as_declared;
    std::cerr << "note: the reference runs the graph as declared; the others with --dtype " << f.common.binding.dtype << "\n";
  }
  CompareReport rep = compare_combinations(L, o);
  std::cout << (f.json ? rep.json() : f.csv ? rep.csv() : rep.text());
  return rep.ok() ? kExitOk : kExitExpectFailed;
}

// ---------------- bench ----------------
struct BenchFlags {
  CommonFlags common;
  std::string modes = "eager,lazy,compiled", backends, format = "md";  // backends: see pick_backends
  int warmup = 2, reps = 10;
};

int cmd_bench(BenchFlags& f) {
  // The first-run column measures a cold compile; warm starts: bench/cache_start.sh.
  f.common.cache_off_why = "rlx bench measures cold compiles";
  BenchOptions o;
  o.backends = pick_backends(f.backends, f.common.backend, "cpu");
  f.common.finish();
  o.modes = parse_modes(f.modes);
  o.warmup = f.warmup;
  o.reps = f.reps;
  o.device = f.common.device;
  o.session = session_options(f.common.verbose);
  if (f.format != "md" && f.format != "json" && f.format != "csv") throw InputError("--format: expected md, json or csv");
  if (o.reps < 1 || o.warmup < 0) throw InputError("--reps must be >= 1 and --warmup >= 0");
  Loaded L = f.common.load();
  BenchReport rep = run_bench(L, o);
  std::cout << (f.format == "json" ? rep.json() : f.format == "csv" ? rep.csv() : rep.markdown());
  return rep.ok() ? kExitOk : kExitRuntime;
}

// Under --json a script reads stdout as one JSON document, failures included: an error is
// printed on stderr as always and, as {"ok": false, "error": ..., "exit_code": N}, on stdout.
bool g_json_errors = false;
int report_error(const std::string& message, int code) {
  std::cerr << "error: " << message << "\n";
  if (g_json_errors) {
    std::cout.flush();
    std::cout << nlohmann::json{{"ok", false}, {"error", message}, {"exit_code", code}}.dump(2) << "\n";
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rlx: run serialized ML graphs (rlx.graph v1 JSON, or ONNX models) on the CPU or through Vulkan.\n"
               "Modes: eager | lazy (default) | compiled, from --mode or $RLX_MLX_MODE."};
  app.name("rlx");  // the usage lines read "Usage: rlx run ...", whatever the path it was started by
  app.set_version_flag("--version", [] { return cli::version_text(false); },
                       "Print the version, commit and build type; with --verbose also the CPU kernels and devices");
  app.require_subcommand(1);

  RunFlags rf;
  auto* run = app.add_subcommand("run", "Run a graph and print or write its outputs");
  rf.common.add(run);
  run->add_option("--mode,-m", rf.common.mode, "eager | lazy | compiled (overrides $RLX_MLX_MODE; default lazy)");
  run->add_option("--output,-o", rf.outputs, "Write output ID to FILE (.npy or .safetensors), ID=FILE (repeatable); a bare FILE names a graph's only output\n  e.g. --output logits=out/logits.npy, -o y.npy")->allow_extra_args(false);
  run->add_option("--out-dir", rf.out_dir, "Write every output that --output does not name to DIR/ID.npy (ID must be a plain file name)");
  run->add_option("--expect", rf.expects, "Check output ID against SPEC (same forms as --input); exit 1 on mismatch\n  e.g. --expect y=@golden/y.npy")->allow_extra_args(false);
  run->add_option("--atol", rf.atol, "Absolute tolerance for --expect (|got-exp| <= atol + rtol*|exp|)")
      ->check(non_negative())
      ->capture_default_str();
  run->add_option("--rtol", rf.rtol, "Relative tolerance for --expect")->check(non_negative())->capture_default_str();
  run->add_option("--repeat", rf.repeat, "Run N times with the same inputs (compiled mode replays)")->capture_default_str();
  run->add_option("--steps", rf.steps, "Run N steps, feeding outputs back as inputs (see --feed)")->capture_default_str();
  run->add_option("--feed", rf.feeds, "Between steps, output OUT becomes input IN, on the device: OUT=IN (repeatable)\n  e.g. --steps 8 --feed next_offset=offset")->allow_extra_args(false);
  run->add_option("--collect", rf.collect, "Gather output OUT over the steps into one tensor [steps, ...]: printed, written and\n"
                  "  compared (--expect) in place of the last step's value (repeatable)\n  e.g. --steps 64 --feed next_ids=input_ids --collect next_ids")
      ->allow_extra_args(false);
  run->add_option("--stop-when", rf.stop_when, "Stop the steps early once every element of output OUT equals VALUE: OUT=VALUE\n"
                  "  e.g. --stop-when next_ids=2 (an end-of-sequence id)");
  run->add_option("--top", rf.top, "Also print the K largest entries of each output's last row (e.g. next-token logits)")
      ->check(non_negative());
  run->add_flag("--json", rf.json,
                "Print one JSON document on stdout: outputs (\"values\": all elements up to 4,096; above,\n"
                "  \"first_values\": the first 4,096 and \"numel\"), timings, --expect results (\"message\" says why\n"
                "  one failed). An error is a JSON object too: {\"ok\": false, \"error\": ..., \"exit_code\": N}");
  run->add_flag("--dump-plan", rf.dump_plan, "Print the execution plan (kernels, fused groups, buffers); on stderr with --json");
  run->add_flag("--check-numerics", rf.check_numerics, "Stop at the first node that produces NaN or Inf (eager: per node)");
  add_batch_options(run, rf.batch);
  run->add_flag("--profile", rf.profile, "Print per-kernel times, bytes and FLOPs of the last run, sorted by time (one run: the cold one)");
  run->footer("Examples:\n"
              "  rlx run graphs/tiny_llama.json --params graphs/tiny_llama.safetensors \\\n"
              "      --input tokens=@graphs/tiny_llama.inputs/tokens.npy --top 5\n"
              "  RLX_MLX_MODE=compiled rlx run graphs/mlp.json -p graphs/mlp.safetensors --input x=random:1 --dim batch=4 --repeat 10\n"
              "  rlx run graphs/small_cnn.onnx -i image=@graphs/small_cnn.inputs/image.npy \\\n"
              "      --expect probs=@graphs/small_cnn.inputs/probs.torch.npy --atol 1e-5 --rtol 1e-4\n"
              "  rlx run graphs/mlp.json -p graphs/mlp.safetensors --batch tests/data/batch/pages.jsonl --out-dir out/batch\n"
              "Exit codes: 0 ok, 1 expectation failed, 2 bad usage or input, 3 failure while running\n"
              "(--batch: 0 every item ok, 1 some failed; docs/batch.md).");

  CompareFlags cf;
  auto* compare = app.add_subcommand("compare", "Run every mode x backend on the same inputs and compare the outputs");
  cf.common.add(compare);
  compare->add_option("--modes", cf.modes, "Modes to run, comma-separated")->capture_default_str();
  compare->add_option("--backends", cf.backends,
                      "Backends to run, comma-separated (default: cpu,vulkan; -b X runs X alone); an unavailable one is reported as skipped");
  compare->add_option("--reference", cf.reference, "MODE:BACKEND every combination is measured against")->capture_default_str();
  compare->add_option("--atol", cf.atol, "Absolute tolerance")->check(non_negative())->capture_default_str();
  compare->add_option("--rtol", cf.rtol, "Relative tolerance")->check(non_negative())->capture_default_str();
  compare->add_flag("--json", cf.json, "JSON report");
  compare->add_flag("--csv", cf.csv, "CSV report");
  compare->footer("Example:\n  rlx compare graphs/llama_block.json -p graphs/llama_block.safetensors \\\n"
                  "      --input x=@graphs/llama_block.inputs/x.npy --backends cpu,vulkan --json\n"
                  "Exit 1 if any combination is outside tolerance; unavailable backends are reported as skipped.");

  BenchFlags bf;
  auto* bench = app.add_subcommand("bench", "Benchmark a graph in every mode x backend");
  bf.common.add(bench);
  bench->add_option("--modes", bf.modes, "Modes, comma-separated")->capture_default_str();
  bench->add_option("--backends", bf.backends, "Backends, comma-separated (default: cpu; -b X runs X alone)");
  bench->add_option("--warmup", bf.warmup, "Untimed runs after the first")->capture_default_str();
  bench->add_option("--reps", bf.reps, "Timed repetitions")->capture_default_str();
  bench->add_option("--format", bf.format, "md | json | csv")->capture_default_str();
  bench->footer("Example:\n  rlx bench bench/graphs/gelu_chain.json --random-params --input x=random:1 --reps 20");

  std::string inspect_graph;
  bool inspect_dot = false, inspect_json = false;
  std::vector<std::string> inspect_dims;
  auto* inspect = app.add_subcommand("inspect", "Summarise a graph: ops, parameters, FLOPs, output shapes");
  inspect->add_option("graph", inspect_graph, "Graph file")->required();
  inspect->add_option("--dim", inspect_dims, "Bind a symbolic dimension, NAME=SIZE, for shapes and FLOPs")->allow_extra_args(false);
  inspect->add_flag("--dot", inspect_dot, "Print Graphviz DOT instead");
  inspect->add_flag("--json", inspect_json, "Print one JSON object instead (inputs and outputs with their shapes, ops, FLOPs)");
  inspect->footer("Examples:\n  rlx inspect graphs/tiny_llama.json --dim seq=8\n  rlx inspect graphs/small_cnn.onnx --json\n"
                  "Without --dim, an ONNX model's symbolic input and declared output shapes are shown.");

  Binding convert_binding;
  std::string convert_out, convert_params_out;
  auto* convert = app.add_subcommand("convert", "Convert an ONNX model (or rewrite an rlx graph) to an rlx graph (JSON) and its weights (safetensors)");
  convert->add_option("model", convert_binding.graph, "ONNX model file, or an rlx JSON graph (with --params)")->required();
  convert->add_option("--params,-p", convert_binding.params, "Parameter file of a JSON graph (repeatable)")->allow_extra_args(false);
  convert->add_option("-o,--output", convert_out, "Graph JSON to write")->required();
  convert->add_option("--params-out", convert_params_out, "Weights to write (.safetensors)");
  convert->add_option("--dim", convert_binding.dims, "Size of a symbolic dimension, NAME=SIZE (the graph is written for these sizes)");
  convert->add_option("--input,-i", convert_binding.inputs, "Input NAME=SPEC whose shape the graph is written for (instead of --dim)");
  convert->footer("Examples:\n  rlx convert graphs/small_cnn.onnx -o small_cnn.json --params-out small_cnn.safetensors --dim batch=1\n"
                  "  rlx quantize graphs/mlp.json -p graphs/mlp.safetensors -f int8 --min-size 0 --dim batch=2 -o m8.json && \\\n"
                  "      rlx convert m8.json -p m8.safetensors -o copy.json --params-out copy.safetensors\n"
                  "An ONNX model's shape arithmetic is folded for the given sizes, so the written graph has concrete shapes.\n"
                  "An rlx graph is checked and written again as it is (quantized weights stay quantized), its\n"
                  "parameters gathered by name into one safetensors file.");

  bool onnx_ops_json = false;
  auto* onnx_ops = app.add_subcommand("onnx-ops", "List the ONNX operators the importer maps, and onto which registry ops");
  onnx_ops->add_flag("--json", onnx_ops_json, "JSON instead of a Markdown table");

  std::string devices_backend = "all";
  auto* devices = app.add_subcommand("devices", "List the devices each backend can use");
  devices->add_option("--backend", devices_backend, "cpu, vulkan or all")->capture_default_str();

  auto* cache = app.add_subcommand("cache", "Show (info, the default) or empty (clear) the persistent compile cache");
  auto* cache_info = cache->add_subcommand("info", "Where the cache is, its entries and size");
  auto* cache_clear = cache->add_subcommand("clear", "Remove every entry");

  GenerateFlags gf;
  auto* generate = app.add_subcommand("generate", "Generate token ids with an ONNX decoder export (KV cache fed back; ids in, ids out)");
  add_generate_options(generate, gf);
  QuantizeFlags qf;
  auto* quantize = app.add_subcommand("quantize", "Quantize a model's f32 weight matrices to int8 or 4-bit blocks and report the error");
  add_quantize_options(quantize, qf);
  std::string completion_shell;
  auto* completion = app.add_subcommand("completion", "Print a shell completion script for bash or zsh");
  completion->add_option("shell", completion_shell, "bash | zsh (or commands: the subcommand list the man pages are made from)")
      ->required();
  completion->footer("Examples:\n  source <(rlx completion bash)            # this shell only\n"
                     "  rlx completion zsh > _rlx                # then move _rlx to a directory on $fpath\n"
                     "The Debian package and `cmake --install` install both.");
  cache->require_subcommand(0, 1);
  cache->footer("Location: $RLX_CACHE_DIR, else $XDG_CACHE_HOME/rlx, else ~/.cache/rlx. RLX_CACHE=0 or --no-cache\n"
                "turns it off; RLX_CACHE_MAX_MB caps its size (least recently used entries go first). Entries are\n"
                "authenticated under ~/.config/rlx/cache.key, or RLX_CACHE_SECRET to share a cache. See docs/cache.md.");

  const std::vector<std::string> args(argv + 1, argv + argc);
  // `rlx` alone prints the help (as git and cargo do); `rlx help [COMMAND]` too.
  if (args.empty()) {
    std::cerr << app.help() << "error: give a command, e.g. rlx run GRAPH.json (rlx COMMAND --help for its options)\n";
    return kExitBadInput;
  }
  // `rlx --version --verbose`: CLI11's version flag ends parsing before --verbose is seen.
  if (args[0] == "--version") {
    const bool verbose = std::find(args.begin(), args.end(), "--verbose") != args.end() ||
                         std::find(args.begin(), args.end(), "-v") != args.end();
    try {
      std::cout << cli::version_text(verbose);
    } catch (const std::exception& e) {
      return report_error(e.what(), kExitRuntime);
    }
    return kExitOk;
  }
  if (args[0] == "help") {
    if (args.size() == 1) {
      std::cout << app.help();
      return kExitOk;
    }
    for (const CLI::App* s : app.get_subcommands({}))
      if (s->get_name() == args[1]) {
        std::cout << s->help("rlx");
        return kExitOk;
      }
    std::cerr << "error: " << cli::explain_unknown(app, {args[1]}) << "\n";
    return kExitBadInput;
  }

  for (const auto& a : args) g_json_errors = g_json_errors || a == "--json";
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
      std::string hint = cli::explain_unknown(app, args);
      if (!hint.empty()) return report_error(hint, kExitBadInput);
      // The parser's own message, in rlx's error form, with where to look.
      std::string where = "rlx";
      for (const auto& a : args)
        for (const CLI::App* s : app.get_subcommands({}))
          if (where == "rlx" && s->get_name() == a) where += " " + a;
      std::string what = e.what();
      if (e.get_name() == "RequiredError" && what == "graph is required")
        what = "the graph file is required: " + where + " GRAPH.json [options]";
      return report_error(what + "\n" + where + " --help shows the usage", kExitBadInput);
    }
    struct ReportCache {
      ~ReportCache() { report_cache(); }
    } report_at_exit;  // after the command's executor is gone (it saves the Vulkan pipeline cache)
    if (run->parsed()) return cmd_run(rf);
    if (generate->parsed()) {
      check_num_threads();
      install_cache(gf.no_cache, gf.verbose, "");
      return cmd_generate(gf);
    }
    if (quantize->parsed()) {
      check_num_threads();
      install_cache(false, false, "");
      return cmd_quantize(qf);
    }
    if (compare->parsed()) return cmd_compare(cf);
    if (bench->parsed()) return cmd_bench(bf);
    if (cache->parsed()) {
      check_num_threads();
      io::CacheSettings cs = io::cache_settings_from_env();
      if (cache_clear->parsed()) {
        if (cs.dir.empty()) throw InputError("rlx cache clear: no cache location (set RLX_CACHE_DIR, XDG_CACHE_HOME or HOME)");
        if (!cs.unsafe_dir_why.empty())
          throw InputError("rlx cache clear: not touching " + cs.dir + ": " + cs.unsafe_dir_why);
        io::BlobCache::Info i = io::BlobCache(cs.dir, cs.max_bytes, "").clear();
        std::cout << fmt::format("removed {} entries ({:.2f} MiB) from {}\n", i.entries, i.bytes / 1048576.0, cs.dir);
      } else {
        (void)cache_info;
        std::cout << cache_info_text(cs);
      }
      return 0;
    }
    if (inspect->parsed()) {
      std::cout << inspect_text(inspect_graph, inspect_dims, inspect_dot, inspect_json);
      return 0;
    }
    if (convert->parsed()) {
      const std::string& m = convert_binding.graph;
      const bool onnx_named = m.size() >= 5 && m.compare(m.size() - 5, 5, ".onnx") == 0;  // a .onnx that is not one: refused there
      if (is_onnx_file(m) || onnx_named) {
        if (!convert_binding.params.empty()) throw InputError("--params: an ONNX model holds its own weights; --params is for rlx JSON graphs");
        convert_onnx(convert_binding, convert_out, convert_params_out);
      } else {
        if (!convert_binding.dims.empty() || !convert_binding.inputs.empty())
          throw InputError("--dim/--input: an rlx JSON graph is written as it is, symbolic dimensions included; they apply to ONNX models");
        convert_graph(convert_binding.graph, convert_binding.params, convert_out, convert_params_out);
      }
      std::cerr << "wrote " << convert_out << (convert_params_out.empty() ? "" : " and " + convert_params_out) << "\n";
      return 0;
    }
    if (onnx_ops->parsed()) {
      std::cout << onnx_ops_text(onnx_ops_json);
      return 0;
    }
    if (completion->parsed()) {
      std::cout << cli::completion_script(app, completion_shell);
      return 0;
    }
    if (devices->parsed()) {
      std::cout << devices_text(devices_backend);
      return 0;
    }
  } catch (const Error& e) {
    return report_error(e.what(), e.exit_code());
  } catch (const std::bad_alloc&) {
    return report_error("out of memory", kExitRuntime);
  } catch (const std::exception& e) {
    return report_error(e.what(), kExitRuntime);
  }
  return 0;
}
