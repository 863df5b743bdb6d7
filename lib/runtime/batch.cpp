#include "runtime/batch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/file.h"
#include "io/npy.h"
#include "io/spec.h"
#include "ir/loader.h"
#include "ir/op_registry.h"
#include "onnx/model.h"
#include "runtime/executor.h"
#include "runtime/onnx_binding.h"
#include "runtime/params.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace rlx {

void parse_shard(const std::string& text, int& index, int& count) {
  auto slash = text.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument(text);
    size_t u1 = 0, u2 = 0;
    const std::string a = text.substr(0, slash), b = text.substr(slash + 1);
    long long i = std::stoll(a, &u1), n = std::stoll(b, &u2);
    if (u1 != a.size() || u2 != b.size() || n < 1 || i < 0 || i >= n || n > 1000000) throw std::invalid_argument(text);
    index = (int)i;
    count = (int)n;
  } catch (const std::exception&) {
    throw InputError("--shard " + text + ": expected I/N with 0 <= I < N, e.g. --shard 0/4 (Slurm: --shard "
                     "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT with --array=0-3)");
  }
}

std::string batch_results_file(const std::string& out_dir, int shard_index, int shard_count) {
  const std::string name = shard_count > 1 || shard_index > 0
                               ? "results." + std::to_string(shard_index) + "-of-" + std::to_string(shard_count) + ".jsonl"
                               : "results.jsonl";
  return (fs::path(out_dir) / name).string();
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

std::string join(const std::vector<std::string>& v) {
  std::string r;
  for (const auto& s : v) r += (r.empty() ? "" : ", ") + s;
  return r;
}

// ---------------- the model, loaded once ----------------
struct Model {
  std::string file;
  bool is_onnx = false;
  std::shared_ptr<ir::Graph> graph;  // graph files
  std::map<std::string, Tensor> params;
  std::shared_ptr<onnx::Model> onnx;  // ONNX models: specialised per input shapes
  std::map<std::string, int64_t> dims;  // --dim
  std::optional<DType> half;            // --dtype f16|bf16
  struct Decl {
    std::string name;
    std::vector<ir::Dim> dims;
    DType dtype;
    bool optional;  // an ONNX input with a default (an initializer)
  };
  std::vector<Decl> decls;
  std::vector<std::string> outputs;
};

std::shared_ptr<Model> load_model(const Binding& b) {
  auto m = std::make_shared<Model>();
  m->file = b.graph;
  if (!b.dtype.empty()) {
    const auto dt = parse_dtype(b.dtype);
    if (!dt || !(is_half(*dt) || *dt == DType::f32)) throw InputError("--dtype " + b.dtype + ": expected bf16, f16 or f32");
    if (*dt != DType::f32) m->half = *dt;
  }
  m->dims = parse_dims(b.dims);
  std::set<std::string> known;
  if (is_onnx_file(b.graph)) {
    m->is_onnx = true;
    if (!b.params.empty())
      throw InputError(b.graph + ": --params is not used with ONNX models: the weights are the model's initializers");
    m->onnx = onnx::Model::load(b.graph);
    for (const auto& vi : m->onnx->inputs()) {
      if (vi.type.kind != onnx::ValueKind::Tensor)
        throw InputError(b.graph + ": input '" + vi.name + "' is a sequence or an optional; batch jobs take tensor inputs (run such a model with rlx run)");
      m->decls.push_back({vi.name, vi.dims, onnx::to_dtype(vi.elem_type, b.graph + ": input '" + vi.name + "'"),
                          m->onnx->is_default_input(vi.name)});
      for (const auto& d : vi.dims)
        if (!d.symbol.empty()) known.insert(d.symbol);
    }
    for (const auto& vi : m->onnx->outputs()) m->outputs.push_back(vi.name);
  } else {
    m->graph = std::make_shared<ir::Graph>(ir::load_graph_file(b.graph));
    if (m->half) convert_graph_dtype(*m->graph, *m->half);
    const ir::Graph& g = *m->graph;
    ParamStore store;
    for (const auto& p : b.params) store.add(p);
    BindOptions bo;
    bo.random = b.random_params.has_value();
    bo.seed = b.random_params.value_or(0);
    std::vector<std::string> filled;
    m->params = bind_params(g, store, bo, &filled);
    if (!filled.empty())
      std::cerr << "note: --random-params filled " << filled.size() << " parameter(s) with seeded values (seed " << *b.random_params
                << ")\n";
    for (int i : g.inputs_of_kind(ir::Op::Input)) m->decls.push_back({g.nodes[i].id, g.nodes[i].decl_shape, g.nodes[i].dtype, false});
    for (const auto& n : g.nodes)
      for (const auto& d : n.decl_shape)
        if (!d.symbol.empty()) known.insert(d.symbol);
    for (int o : g.outputs) m->outputs.push_back(g.nodes[o].id);
  }
  check_dim_names(m->dims, known, b.graph);
  // Each output becomes DIR/<id>/<output>.npy: a name that is not a plain file name is refused
  // for the whole job, before any item runs (as --out-dir does).
  for (const auto& o : m->outputs)
    if (std::string why = plain_file_name_problem(o); !why.empty())
      throw InputError("--batch: output '" + printable(o) + "' of " + b.graph + " cannot be a file name (" + why + ")");
  return m;
}

// An item's inputs ({"NAME": "SPEC", ...}) read as --input reads them. Runs on the reader thread.
std::map<std::string, Tensor> load_item_inputs(const Model& m, const json& inputs) {
  if (!inputs.is_object()) throw InputError("\"inputs\" must be an object of NAME: SPEC, e.g. {\"x\": \"pages/0001.npy\"}");
  std::vector<std::string> names;
  for (const auto& d : m.decls)
    if (!d.optional) names.push_back(d.name);
  std::map<std::string, io::TensorSpec> specs;
  for (const auto& [name, v] : inputs.items()) {
    bool found = false;
    for (const auto& d : m.decls) found = found || d.name == name;
    if (!found) throw InputError("input '" + printable(name) + "': the model has no such input (its inputs: " + join(names) + ")");
    if (!v.is_string())
      throw InputError("input '" + printable(name) + "': the value must be a string SPEC (a .npy path, file.safetensors:NAME or 2x3xf32=1,2,...)");
    specs[name] = io::parse_tensor_spec(v.get<std::string>());
  }
  std::vector<std::string> missing;
  std::vector<InputDecl> given;
  for (const auto& d : m.decls) {
    auto it = specs.find(d.name);
    if (it == specs.end()) {
      if (!d.optional) missing.push_back(d.name);
      continue;
    }
    given.push_back({d.name, &d.dims, d.dtype, 16, &it->second});
  }
  if (!missing.empty()) throw InputError("no value given for input" + std::string(missing.size() > 1 ? "s " : " ") + join(missing));
  std::map<std::string, int64_t> dims = m.dims;
  std::map<std::string, Tensor> out;
  load_input_values(given, dims, out);
  if (m.half)
    for (auto& [name, t] : out)
      if (t.dtype() == DType::f32) t = t.astype(*m.half);
  return out;
}

// ---------------- output files ----------------
std::string item_dir(const std::string& out_dir, const std::string& id) { return (fs::path(out_dir) / id).string(); }

// Temporaries an atomic write killed midway left behind (io::write_file_atomic names them
// ".NAME.tmp.XXXXXX"): only this item's, so shards never touch each other's.
void remove_stale_temporaries(const std::string& dir, const std::vector<std::string>& outputs) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    for (const auto& o : outputs) {
      const std::string prefix = "." + o + ".npy.tmp.";
      if (name.size() == prefix.size() + 6 && name.compare(0, prefix.size(), prefix) == 0) {
        std::error_code rm;
        fs::remove(e.path(), rm);
      }
    }
  }
}

// True when every output of the item is a complete .npy (writes are atomic, so a file that is
// there was written whole; the header and size are checked anyway).
bool item_complete(const std::string& dir, const std::vector<std::string>& outputs) {
  for (const auto& o : outputs) {
    const std::string p = (fs::path(dir) / (o + ".npy")).string();
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
    try {
      io::read_npy(p);
    } catch (const std::exception&) {
      return false;
    }
  }
  return true;
}

// Why a list id cannot name the item's directory, or "".
std::string id_problem(const std::string& id) {
  if (std::string why = plain_file_name_problem(id); !why.empty()) return why;
  if (id.rfind("results", 0) == 0 && id.size() >= 6 && id.compare(id.size() - 6, 6, ".jsonl") == 0)
    return "it is the name of a results file";
  return "";
}

// ---------------- the reader thread: lines -> items ----------------
struct Item {
  enum Kind { Run, Skip, Fail } kind = Run;
  int64_t line = 0;  // 1-based
  std::optional<std::string> id;
  std::string error;
  std::map<std::string, Tensor> inputs;
  double read_ms = 0;
};

struct Queue {
  std::mutex mu;
  // Two sides, woken only when it matters: the runner when the queue was empty, the reader once
  // the queue is half empty (not on every item: on 2 cores each wake-up is a context switch
  // that the kernel threads wait for).
  std::condition_variable not_empty, not_full;
  std::deque<Item> items;
  size_t capacity = 4;
  bool done = false, stop = false;
  std::string fatal;  // the reader failed as a whole (the list could not be read)
};

struct Reader {
  std::shared_ptr<const Model> model;
  std::shared_ptr<Queue> q;
  std::shared_ptr<std::istream> in;  // a file, or std::cin (not owned)
  std::string out_dir;
  int shard_index = 0, shard_count = 1;
  bool force = false;

  // False when the job stops.
  bool push(Item it) {
    std::unique_lock<std::mutex> lk(q->mu);
    q->not_full.wait(lk, [&] { return q->stop || q->items.size() < q->capacity; });
    if (q->stop) return false;
    q->items.push_back(std::move(it));
    q->not_empty.notify_one();  // every item: a stacked run may wait for --batch-size of them
    return true;
  }

  Item make_item(const std::string& text, int64_t line, std::unordered_map<std::string, int64_t>& seen) {
    Item it;
    it.line = line;
    const auto t0 = Clock::now();
    json j;
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {
      it.kind = Item::Fail;
      it.error = "line " + std::to_string(line) + ": not valid JSON: " + e.what();
      return it;
    }
    try {
      if (!j.is_object()) throw InputError("expected an object {\"id\": ..., \"inputs\": {...}}");
      for (const auto& [k, v] : j.items())
        if (k != "id" && k != "inputs") throw InputError("unknown key '" + printable(k) + "' (an item has \"id\" and \"inputs\")");
      if (!j.contains("id") || !j["id"].is_string()) throw InputError("\"id\" must be a string");
      const std::string id = j["id"].get<std::string>();
      it.id = id;  // reported as given (JSON escapes it); it names a directory only once checked
      if (std::string why = id_problem(id); !why.empty())
        throw InputError("id '" + printable(id) + "' cannot name the item's directory (" + why + "); it is refused, not rewritten");
      auto [pos, fresh] = seen.emplace(id, line);
      if (!fresh) throw InputError("id '" + id + "' is also on line " + std::to_string(pos->second) + " (ids must be unique)");
      if (!j.contains("inputs")) throw InputError("no \"inputs\"");
      const std::string dir = item_dir(out_dir, id);
      remove_stale_temporaries(dir, model->outputs);
      if (!force && item_complete(dir, model->outputs)) {
        it.kind = Item::Skip;
        return it;
      }
      it.inputs = load_item_inputs(*model, j["inputs"]);
    } catch (const Error& e) {
      it.kind = Item::Fail;
      it.error = e.what();
    } catch (const std::bad_alloc&) {
      it.kind = Item::Fail;
      it.error = "out of memory reading the inputs";
    } catch (const std::exception& e) {
      it.kind = Item::Fail;
      it.error = e.what();
    }
    it.read_ms = ms_since(t0);
    return it;
  }

  void operator()() {
    std::unordered_map<std::string, int64_t> seen;  // id -> first line, over every shard's lines
    std::string text;
    int64_t index = 0;
    try {
      while (std::getline(*in, text)) {
        const int64_t line = ++index;
        if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines: no item
        if ((line - 1) % shard_count != shard_index) {
          // Another shard's line: only its id is noted, so that a duplicate is caught by whichever shard sees it second.
          try {
            json j = json::parse(text);
            if (j.is_object() && j.contains("id") && j["id"].is_string()) seen.emplace(j["id"].get<std::string>(), line);
          } catch (const std::exception&) {
          }
          continue;
        }
        if (!push(make_item(text, line, seen))) return;
      }
      if (in->bad()) throw InputError("--batch: reading the list failed");
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(q->mu);
      q->fatal = e.what();
    }
    std::lock_guard<std::mutex> lk(q->mu);
    q->done = true;
    q->not_empty.notify_one();
  }
};

// ---------------- running: one session per specialisation ----------------
std::string signature(const std::map<std::string, Tensor>& in) {
  std::string s;
  for (const auto& [name, t] : in) s += name + ":" + dtype_name(t.dtype()) + shape_str(t.shape()) + ";";
  return s;
}

class Runner {
 public:
  Runner(std::shared_ptr<const Model> m, Executor& ex, SessionOptions so, Mode mode) : m_(std::move(m)), ex_(ex), so_(so), mode_(mode) {
    if (!m_->is_onnx) graph_session_ = std::make_unique<Session>(m_->graph, ex_, m_->params, so_);
  }

  // Runs one input set; `graph` gets the graph whose outputs these are.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs, const ir::Graph** graph) {
    Session& s = session_for(inputs);
    for (const auto& [name, t] : inputs) s.set_input(name, t);
    *graph = &s.graph();
    return s.run(mode_);
  }

  // The output shapes one item of these inputs gives, from shape inference alone (no plan, no
  // run), so that a stacked run can be split without first running an item by itself; nullopt
  // where they depend on values (control flow, data-dependent ops) or inference fails.
  std::optional<std::vector<Shape>> output_shapes(const std::map<std::string, Tensor>& inputs) {
    try {
      const ir::Graph& g = session_for(inputs).graph();
      for (const auto& n : g.nodes)
        if (ir::op_info(n.op).category == ir::Category::Control) return std::nullopt;
      std::map<std::string, Shape> shapes;
      for (const auto& [name, t] : inputs) shapes[name] = t.shape();
      const ir::TypedShapes ts = ir::infer_shapes(g, shapes);
      std::vector<Shape> r;
      for (int k : g.outputs) r.push_back(ts.shapes.at((size_t)k));
      return r;
    } catch (const std::exception&) {
      return std::nullopt;  // the run reports the problem
    }
  }

 private:
  Session& session_for(const std::map<std::string, Tensor>& inputs) {
    if (graph_session_) return *graph_session_;  // a graph file: the Session plans per shape itself
    // An ONNX model is specialised per input shapes (and the values of inputs it uses as
    // constants); the last few specialisations keep their sessions, and so their plans.
    const std::string key = signature(inputs);
    for (auto& e : specs_)
      if (e.key == key && !e.loaded.values_changed(inputs)) return *e.session;
    std::map<std::string, Shape> shapes;
    for (const auto& [name, t] : inputs) shapes[name] = t.shape();
    auto sp = m_->onnx->specialize(shapes, m_->dims, inputs);
    Spec e;
    e.key = key;
    e.loaded.graph = sp->graph;
    e.loaded.params = sp->params;
    e.loaded.value_deps = sp->value_deps;
    if (m_->half) {  // as load_binding does for --dtype
      convert_graph_dtype(*e.loaded.graph, *m_->half);
      for (auto& [id, t] : e.loaded.params) {
        int i = e.loaded.graph->find(id);
        if (i >= 0 && t.dtype() != e.loaded.graph->nodes[i].dtype) t = t.astype(e.loaded.graph->nodes[i].dtype);
      }
    }
    e.session = std::make_unique<Session>(e.loaded.graph, ex_, e.loaded.params, so_);
    specs_.push_back(std::move(e));
    if (specs_.size() > kMaxSessions) specs_.pop_front();
    return *specs_.back().session;
  }

  struct Spec {
    std::string key;
    Loaded loaded;
    std::unique_ptr<Session> session;
  };
  static constexpr size_t kMaxSessions = 8;
  std::shared_ptr<const Model> m_;
  Executor& ex_;
  SessionOptions so_;
  Mode mode_;
  std::unique_ptr<Session> graph_session_;
  std::deque<Spec> specs_;
};

// The results file and stream: one line per item, written whole with one write(2) on a file
// opened O_APPEND, and flushed, as soon as the item is done.
class Results {
 public:
  Results(const std::string& path, std::ostream* out) : path_(path), out_(out) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (fd_ < 0) throw InputError("--out-dir: cannot open " + path + ": " + std::strerror(errno));
  }
  ~Results() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const json& j) {
    const std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    const char* p = s.data();
    size_t n = s.size();
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) throw RuntimeError("cannot write " + path_ + ": " + std::strerror(errno));
      p += w;
      n -= (size_t)w;
    }
    if (out_) *out_ << s << std::flush;
  }

 private:
  std::string path_;
  std::ostream* out_;
  int fd_ = -1;
};

// Writes an item's outputs: DIR/<id>/<output>.npy, atomically, through --out-dir's checks.
void write_item(const std::string& out_dir, const std::string& id, const ir::Graph& g, const std::vector<Tensor>& outs) {
  const std::string dir = item_dir(out_dir, id);
  struct stat st;
  if (::lstat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    throw InputError(dir + " exists and is not a directory (a symbolic link is not followed)");
  // Atomic (a temporary, then a rename) without fsyncs: a kill leaves every file whole or absent,
  // and after a power loss the resume check finds a short or missing file (item_complete). (A
  // syncfs at the end would flush every dirty page of the file system, other jobs' too.)
  for (const auto& [k, file] : plan_outputs(g, {}, dir)) {
    const std::vector<uint8_t> bytes = io::encode_npy(outs[k]);
    io::write_file_atomic(file, bytes.data(), bytes.size(), false);
  }
}

// Stacks the items' inputs along the leading dim (all have one signature, rank >= 1).
std::map<std::string, Tensor> stack_inputs(const std::vector<Item*>& group) {
  std::map<std::string, Tensor> r;
  for (const auto& [name, t0] : group[0]->inputs) {
    Shape s = t0.shape();
    s[0] *= (int64_t)group.size();
    Tensor t(s, t0.dtype());
    auto* dst = static_cast<uint8_t*>(t.mutable_raw());
    for (size_t i = 0; i < group.size(); ++i) {
      const Tensor& x = group[i]->inputs.at(name);
      if (x.nbytes()) std::memcpy(dst + i * x.nbytes(), x.raw(), x.nbytes());
    }
    r[name] = std::move(t);
  }
  return r;
}

}  // namespace

BatchSummary run_batch(const BatchOptions& o) {
  const auto t_start = Clock::now();
  if (o.batch_size < 1) throw InputError("--batch-size must be at least 1");
  if (o.max_errors < 0) throw InputError("--max-errors must be >= 0");
  if (o.out_dir.empty()) throw InputError("--batch needs --out-dir DIR (each item's outputs go to DIR/<id>/<output>.npy)");
  // The list: a file (or a named pipe), or standard input.
  std::shared_ptr<std::istream> in;
  if (o.list == "-") {
    in = std::shared_ptr<std::istream>(&std::cin, [](std::istream*) {});
  } else {
    std::error_code ec;
    if (fs::is_directory(o.list, ec)) throw InputError("--batch " + o.list + ": it is a directory, expected a JSON Lines file");
    auto f = std::make_shared<std::ifstream>(o.list);
    if (!*f) throw InputError("--batch " + o.list + ": cannot open the list (" + std::strerror(errno) + ")");
    in = f;
  }
  std::shared_ptr<const Model> model = load_model(o.model);
  auto ex = make_executor(o.backend, o.device);
  // The output directory, made with its parents when missing (once the model has loaded).
  {
    std::error_code ec;
    if (fs::exists(o.out_dir, ec) && !fs::is_directory(o.out_dir, ec))
      throw InputError("--out-dir " + o.out_dir + ": exists and is not a directory");
    fs::create_directories(o.out_dir, ec);
    if (!fs::is_directory(o.out_dir, ec)) throw InputError("--out-dir " + o.out_dir + ": cannot create the directory");
  }
  BatchSummary sum;
  sum.results_file = batch_results_file(o.out_dir, o.shard_index, o.shard_count);
  Results results(sum.results_file, o.results_out);

  // This shard's items, for the progress bar's ETA (a regular file only: a pipe is read once;
  // blank lines are no items).
  int64_t total = -1;
  std::error_code regular_ec;
  if (o.on_progress && o.list != "-" && fs::is_regular_file(o.list, regular_ec)) {
    std::ifstream f(o.list);
    std::string text;
    total = 0;
    for (int64_t line = 0; std::getline(f, text); ++line)
      if (line % o.shard_count == o.shard_index && text.find_first_not_of(" \t\r") != std::string::npos) ++total;
  }

  Runner runner(model, *ex, o.session, o.mode);
  auto q = std::make_shared<Queue>();
  q->capacity = (size_t)std::max(8, 2 * o.batch_size + 2);  // read ahead: the next items load while one runs
  Reader reader{model, q, in, o.out_dir, o.shard_index, o.shard_count, o.force};
  // The reader is stopped on every way out (an exception included). One still reading standard
  // input may wait for a line that never comes: it is left behind (it owns what it uses) rather
  // than waited for.
  struct ReaderThread {
    std::shared_ptr<Queue> q;
    bool from_stdin;
    std::thread t;
    void stop() {
      if (!t.joinable()) return;
      bool done;
      {
        std::lock_guard<std::mutex> lk(q->mu);
        q->stop = true;
        done = q->done;
        q->not_full.notify_one();
      }
      if (from_stdin && !done) t.detach();
      else t.join();
    }
    ~ReaderThread() { stop(); }
  } reader_thread{q, o.list == "-", std::thread(reader)};
  std::map<std::string, std::vector<Shape>> alone_shapes;  // by input signature: output shapes of one item
  std::set<std::string> no_stack;                          // signatures whose stacked run failed or did not split
  std::set<std::string> inferred;                          // signatures whose output shapes inference was asked for
  std::set<std::string> full_stack;  // signatures with a stacked run of --batch-size items that split: a plan exists

  auto report = [&](const Item& it, const char* status, double ms, const std::string& error) {
    json j{{"id", it.id ? json(*it.id) : json(nullptr)}, {"line", it.line}, {"status", status}, {"ms", std::round(ms * 1000) / 1000}};
    if (!error.empty()) j["error"] = error;
    results.write(j);
    if (std::strcmp(status, "ok") == 0) ++sum.ok;
    else if (std::strcmp(status, "skipped") == 0) ++sum.skipped;
    else ++sum.failed;
    if (o.on_progress) o.on_progress(sum.ok, sum.failed, sum.skipped, total);
  };
  // One item alone: run, write, report.
  auto run_alone = [&](Item& it) {
    const auto t0 = Clock::now();
    std::string error;
    try {
      const ir::Graph* g = nullptr;
      std::vector<Tensor> outs = runner.run(it.inputs, &g);
      std::vector<Shape> shapes;
      for (const auto& t : outs) shapes.push_back(t.shape());
      alone_shapes.emplace(signature(it.inputs), shapes);
      write_item(o.out_dir, *it.id, *g, outs);
    } catch (const std::bad_alloc&) {
      error = "out of memory";
    } catch (const std::exception& e) {
      error = e.what();
    }
    it.inputs.clear();
    report(it, error.empty() ? "ok" : "error", ms_since(t0), error);
  };
  // Items of one signature stacked along the leading dim, outputs split again. Any failure
  // (a model without a batch dim, an output that does not split, NaN in one item) runs the
  // items alone, so that a result always belongs to its own item.
  auto run_stacked = [&](std::vector<Item*>& group) {
    const auto t0 = Clock::now();
    const std::string sig = signature(group[0]->inputs);
    const std::vector<Shape>& alone = alone_shapes.at(sig);
    const int64_t n = (int64_t)group.size();
    // A short group (the list's tail, or the reader behind) is padded with copies of its last item
    // up to --batch-size once a full stack of this signature has run: its plan is then reused, where
    // a stack of n rows would be a new shape to plan or load from the cache (140-230 ms for the
    // PaddleOCR recogniser here, more than the padding rows cost); the padding's outputs are dropped.
    std::vector<Item*> stack = group;
    if (n < o.batch_size && full_stack.count(sig)) stack.resize((size_t)o.batch_size, group.back());
    const int64_t rows = (int64_t)stack.size();
    std::vector<std::vector<Tensor>> per_item(group.size());
    const ir::Graph* g = nullptr;
    bool split = false;
    try {
      std::vector<Tensor> outs = runner.run(stack_inputs(stack), &g);
      split = outs.size() == alone.size();
      for (size_t k = 0; split && k < outs.size(); ++k) {
        Shape want = alone[k];
        split = !want.empty() && outs[k].shape().size() == want.size();
        if (!split) break;
        want[0] *= rows;
        split = outs[k].shape() == want;
      }
      for (size_t k = 0; split && k < outs.size(); ++k) {
        const size_t bytes = outs[k].nbytes() / (size_t)rows;
        for (int64_t i = 0; i < n; ++i) {
          Tensor t(alone[k], outs[k].dtype());
          if (bytes) std::memcpy(t.mutable_raw(), static_cast<const uint8_t*>(outs[k].raw()) + i * bytes, bytes);
          per_item[i].push_back(std::move(t));
        }
      }
    } catch (const std::exception& e) {
      if (o.session.verbose) std::cerr << "note: a stacked run of " << n << " items failed (" << e.what() << "); running them one by one\n";
      split = false;
    }
    if (!split) {
      no_stack.insert(sig);
      for (Item* it : group) run_alone(*it);
      return;
    }
    if (rows == o.batch_size) full_stack.insert(sig);
    const double each = ms_since(t0) / (double)n;
    for (int64_t i = 0; i < n; ++i) {
      std::string error;
      const auto tw = Clock::now();
      try {
        write_item(o.out_dir, *group[i]->id, *g, per_item[i]);
      } catch (const std::exception& e) {
        error = e.what();
      }
      group[i]->inputs.clear();
      report(*group[i], error.empty() ? "ok" : "error", each + ms_since(tw), error);
    }
  };

  std::string fatal;
  while (true) {
    if (o.max_errors > 0 && sum.failed >= o.max_errors) {
      sum.stopped = true;
      break;
    }
    std::deque<Item> taken;
    {
      std::unique_lock<std::mutex> lk(q->mu);
      q->not_empty.wait(lk, [&] { return !q->items.empty() || q->done; });
      if (q->items.empty()) {
        fatal = q->fatal;
        break;
      }
      taken.push_back(std::move(q->items.front()));
      q->items.pop_front();
      if (q->items.size() <= q->capacity / 2) q->not_full.notify_one();
    }
    // More items of the same signature that are already read join a stacked run, once the
    // output shapes of one item are known: inferred from the shapes (the reader goes on
    // meanwhile), else learnt by running the first item of the signature alone.
    Item& first = taken.front();
    if (o.batch_size > 1 && first.kind == Item::Run) {
      const std::string sig = signature(first.inputs);
      bool rank_ok = true;
      for (const auto& [name, t] : first.inputs) rank_ok = rank_ok && !t.shape().empty();
      if (rank_ok && !alone_shapes.count(sig) && inferred.insert(sig).second)
        if (auto shapes = runner.output_shapes(first.inputs)) alone_shapes.emplace(sig, std::move(*shapes));
      if (rank_ok && alone_shapes.count(sig) && !no_stack.count(sig)) {
        std::unique_lock<std::mutex> lk(q->mu);
        // From a file, wait until the reader has the group's other items (or the list ends): a
        // short group would be a shape of its own to plan. Items from standard input are answered
        // as they come, with whatever has arrived.
        if (o.list != "-")
          q->not_empty.wait(lk, [&] { return q->done || (int)(taken.size() + q->items.size()) >= o.batch_size; });
        while ((int)taken.size() < o.batch_size && !q->items.empty() && q->items.front().kind == Item::Run &&
               signature(q->items.front().inputs) == sig) {
          taken.push_back(std::move(q->items.front()));
          q->items.pop_front();
        }
        if (q->items.size() <= q->capacity / 2) q->not_full.notify_one();
      }
    }
    if (first.kind == Item::Fail) report(first, "error", first.read_ms, first.error);
    else if (first.kind == Item::Skip) report(first, "skipped", first.read_ms, "");
    else if (taken.size() == 1) run_alone(first);
    else {
      std::vector<Item*> group;
      for (auto& it : taken) group.push_back(&it);
      run_stacked(group);
    }
  }
  reader_thread.stop();
  if (!fatal.empty()) throw InputError(fatal);
  sum.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  return sum;
}

}  // namespace rlx
