#include "runtime/session.h"
#include "runtime/control.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <new>
#include <sstream>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "io/blob_cache.h"
#include "ir/op_registry.h"
#include "passes/merge_products.h"
#include "runtime/compile_cache.h"

namespace rlx {

using ir::Op;

// ---------------- modes ----------------
const char* mode_name(Mode m) {
  switch (m) {
    case Mode::Eager: return "eager";
    case Mode::Lazy: return "lazy";
    case Mode::Compiled: return "compiled";
  }
  return "?";
}

Mode parse_mode(const std::string& s, const std::string& where) {
  std::string l = s;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  if (l == "eager") return Mode::Eager;
  if (l == "lazy") return Mode::Lazy;
  if (l == "compiled") return Mode::Compiled;
  throw InputError(where + ": unknown mode \"" + s + "\"; valid modes are eager, lazy, compiled");
}

Mode mode_from_env() {
  const char* e = std::getenv("RLX_MLX_MODE");
  if (!e || !*e) return Mode::Lazy;
  return parse_mode(e, "RLX_MLX_MODE");
}

std::vector<Mode> parse_modes(const std::string& csv) {
  std::vector<Mode> r;
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) r.push_back(parse_mode(item, "--modes"));
  if (r.empty()) throw InputError("--modes: give at least one of eager, lazy, compiled");
  return r;
}

// ---------------- internals ----------------
struct Session::PendingInput {
  Tensor host;
  bool on_device = false;
  TensorRef dev;
  Shape shape() const { return on_device ? dev.shape : host.shape(); }
  DType dtype = DType::f32;
  uint64_t uploaded_to = 0;  // id of the Exec whose input buffer already holds `host`
};

struct Session::Exec {
  Exec() {
    static std::atomic<uint64_t> next{1};
    id = next++;
  }
  uint64_t id = 0;  // unique per Exec, never reused
  Mode mode = Mode::Lazy;
  std::unique_ptr<passes::OptimizedGraph> opt;
  const ir::Graph* g = nullptr;
  ir::TypedShapes ts;
  std::vector<std::shared_ptr<FusedProgram>> fused;
  std::vector<TensorRef> where;
  std::vector<Kernel> kernels;
  std::unique_ptr<DeviceBuffer> arena;
  std::vector<std::unique_ptr<DeviceBuffer>> owned;
  std::vector<std::shared_ptr<DeviceBuffer>> shared;  // the callers' append storage (set_append_storage)
  std::map<std::string, TensorRef> input_refs;
  std::map<std::string, const void*> in_place;  // inputs read from the host tensor at this address
  int appends = 0;                 // concats written into a caller's storage (set_append_storage)
  int64_t concat_input_bytes = 0;  // what the other concats copy of graph inputs per run
  std::unique_ptr<Recording> rec;
  passes::MemoryPlan mp;
  int64_t leaf_bytes = 0;
  std::string text;
};

namespace {

std::string node_label(const ir::Graph& g, const ir::Node& n) { return ir::node_ref(g, n); }

// Host copy of a device tensor, in its logical dtype.
Tensor download_tensor(Executor& ex, const TensorRef& t) {
  Tensor h(t.shape, t.dtype);
  ex.download(*t.buf, t.offset, h.mutable_raw(), h.nbytes(), t.dtype);
  return h;
}

// Uploads a host tensor (already in the node's dtype); errors name the tensor.
void upload_tensor(Executor& ex, DeviceBuffer& buf, size_t offset, const Tensor& t, const std::string& what) {
  try {
    ex.upload(buf, offset, t.raw(), t.nbytes(), t.dtype());
  } catch (const RuntimeError& e) {
    throw RuntimeError(what + ": " + e.what());
  }
}

void check_finite(Executor& ex, const TensorRef& t, const ir::Graph& g, const ir::Node& n, const ir::TypedShapes& ts) {
  if (!is_float(t.dtype)) return;  // integers and bool are always finite
  const Tensor h = download_tensor(ex, t);
  for (int64_t i = 0; i < h.numel(); ++i) {
    const double x = h.at(i);  // in double: an f64 value beyond f32's range is finite
    if (std::isfinite(x)) continue;
    std::string shapes;
    for (int in : n.inputs) shapes += (shapes.empty() ? "" : ", ") + shape_str(ts.shapes[in]);
    throw RuntimeError(ir::node_ref(g, n) + ": --check-numerics: produced " + (std::isnan(x) ? "NaN" : "Inf") +
                       " at element " + std::to_string(i) + " of its output " + shape_str(t.shape) +
                       " (input shapes: " + (shapes.empty() ? "none" : shapes) + ")");
  }
}

}  // namespace

Session::Session(std::shared_ptr<const ir::Graph> graph, Executor& ex, std::map<std::string, Tensor> params,
                 SessionOptions opts)
    : graph_(std::move(graph)), ex_(ex), opts_(opts), params_(std::move(params)) {
  // Sibling products over one activation become one (passes/merge_products.h): on the graph
  // every mode runs, once per session (a graph with control nodes: in its segments' sessions).
  if (!ControlRunner::has_control(*graph_) && passes::merge_products_enabled()) {
    passes::MergeStats ms;
    if (auto merged = passes::merge_sibling_products(*graph_, params_, &ms)) {
      graph_ = std::move(merged);
      merge_text_ = fmt::format("merged products: {} into {} (RLX_MERGE_PRODUCTS=0: off)\n", ms.products, ms.groups);
      std::istringstream lines(ms.text);
      for (std::string l; std::getline(lines, l);) merge_text_ += "  " + l + "\n";
      if (opts_.verbose) log() << merge_text_;
    }
  }
  if (ControlRunner::has_control(*graph_)) control_ = std::make_unique<ControlRunner>(graph_, ex_, params_, opts_);
}

Session::~Session() = default;

std::ostream& Session::log() const { return opts_.log ? *opts_.log : std::cerr; }

void Session::set_input(const std::string& id, const Tensor& value) {
  int i = graph_->find(id);
  if (i < 0 || graph_->nodes[i].op != Op::Input)
    throw InputError("--input " + id + ": the graph has no input node '" + id + "'");
  if (append_storage_.count(id)) throw RuntimeError("internal: input '" + id + "' is appended in place: it takes no other value");
  const ir::Node& n = graph_->nodes[i];
  DType have = value.dtype(), want = n.dtype;
  bool ok = have == want || (is_float(have) && is_float(want)) || (is_integer(have) && is_integer(want));
  if (!ok)
    throw InputError("--input " + id + ": got a " + dtype_name(have) + " tensor, the graph declares " + dtype_name(want));
  // float64 is not narrowed: rlx would round every value (and turn those beyond f32's range
  // into inf) behind the user's back. The message says how to convert.
  if (have == DType::f64 && want != DType::f64)
    throw InputError("--input " + id + ": got float64 data (f64; .npy dtype '<f8'), the graph declares " + dtype_name(want) +
                     "; float64 is not narrowed silently: convert it, e.g. np.save(PATH, np.load(PATH).astype(np.float32)) "
                     "(values beyond f32's range, |x| > 3.4e38, become inf: check them first)");
  if (have != want && is_integer(want))  // another integer dtype: every value must fit, never wrapped
    for (int64_t k = 0; k < value.numel(); ++k)
      if (!fits_dtype(value.int_at(k), want))
        throw InputError("--input " + id + ": value " + std::to_string(value.int_at(k)) + " at element " + std::to_string(k) +
                         " of the " + dtype_name(have) + " tensor does not fit the declared " + dtype_name(want) + " [" +
                         std::to_string(dtype_traits(want).min) + ", " + std::to_string(dtype_traits(want).max) + "]");
  auto p = std::make_unique<PendingInput>();
  p->dtype = want;
  p->host = value.astype(want);  // the declared dtype (integers exact, floats rounded to nearest even)
  inputs_[id] = std::move(p);
}

void Session::feed(const std::string& out_id, const std::string& in_id) {
  const auto& outs = graph_->outputs;
  int k = -1;
  for (size_t j = 0; j < outs.size(); ++j)
    if (graph_->nodes[outs[j]].id == out_id) k = (int)j;
  if (k < 0) throw InputError("--feed " + out_id + "=" + in_id + ": '" + out_id + "' is not an output of the graph");
  int i = graph_->find(in_id);
  if (i < 0 || graph_->nodes[i].op != Op::Input)
    throw InputError("--feed " + out_id + "=" + in_id + ": '" + in_id + "' is not an input of the graph");
  if (control_) {  // the outputs of a graph with host steps are on the host
    if (k >= (int)control_outputs_.size()) throw InputError("--feed: no run has produced '" + out_id + "' yet");
    set_input(in_id, control_outputs_[k]);
    return;
  }
  if (k >= (int)last_outputs_.size()) throw InputError("--feed: no run has produced '" + out_id + "' yet");
  if (last_outputs_[k].dtype != graph_->nodes[i].dtype)
    throw InputError("--feed " + out_id + "=" + in_id + ": '" + out_id + "' is " + dtype_name(last_outputs_[k].dtype) +
                     ", input '" + in_id + "' is declared " + dtype_name(graph_->nodes[i].dtype));
  if (append_storage_.count(in_id)) throw RuntimeError("internal: input '" + in_id + "' is appended in place: it takes no other value");
  auto p = std::make_unique<PendingInput>();
  p->on_device = true;
  p->dev = last_outputs_[k];
  p->dtype = graph_->nodes[i].dtype;
  inputs_[in_id] = std::move(p);
}

void Session::input_bytes_changed(const std::string& id, const Tensor& value, size_t offset, size_t bytes) {
  auto it = inputs_.find(id);
  if (it == inputs_.end() || it->second->on_device || it->second->host.raw() != value.raw() ||
      it->second->host.shape() != value.shape()) {
    set_input(id, value);
    return;
  }
  PendingInput& p = *it->second;
  if (offset + bytes > p.host.nbytes() || offset % dtype_size(p.dtype) || bytes % dtype_size(p.dtype))
    throw RuntimeError("internal: input '" + id + "': changed bytes [" + std::to_string(offset) + ", " +
                       std::to_string(offset + bytes) + ") are not whole elements of its " + std::to_string(p.host.nbytes()) + " bytes");
  if (!opts_.inputs_constant || !p.uploaded_to || !last_exec_ || last_exec_->id != p.uploaded_to) {
    p.uploaded_to = 0;  // the next run uploads the whole value
    return;
  }
  if (last_exec_->in_place.count(id)) return;  // the plan reads the host tensor itself
  auto ref = last_exec_->input_refs.find(id);
  if (ref == last_exec_->input_refs.end()) return;  // the plan does not read it
  const size_t dev_offset = ref->second.offset + ex_.storage_bytes((int64_t)(offset / dtype_size(p.dtype)), p.dtype);
  upload_tensor(ex_, *ref->second.buf, dev_offset,
                Tensor::borrow({(int64_t)(bytes / dtype_size(p.dtype))}, p.dtype, static_cast<const uint8_t*>(p.host.raw()) + offset,
                               p.host.keepalive()),
                "input '" + id + "'");
  pending_copy_bytes_ += (int64_t)bytes;  // counted by the next run
}

void Session::set_append_storage(const std::string& id, AppendStorage st) {
  int i = graph_->find(id);
  if (i < 0 || graph_->nodes[i].op != Op::Input) throw RuntimeError("internal: append storage for '" + id + "', not an input");
  if (control_) throw RuntimeError("internal: append storage for '" + id + "' in a graph with control nodes");
  if (!ex_.appends_in_place()) throw RuntimeError("internal: input '" + id + "': the " + ex_.name() + " backend cannot append in place");
  if (!st.buf || st.dtype != graph_->nodes[i].dtype || st.buf->capacity < ex_.storage_bytes(shape_numel(st.shape), st.dtype) ||
      st.input_shape.size() != st.shape.size())
    throw RuntimeError("internal: input '" + id + "' is appended in place: its storage must be a " + dtype_name(graph_->nodes[i].dtype) +
                       " buffer of " + shape_str(st.shape) + " for an input of the same rank");
  auto p = std::make_unique<PendingInput>();  // the input's value is the storage, on the device
  p->on_device = true;
  p->dev = {st.buf.get(), 0, st.input_shape, st.dtype};
  p->dtype = st.dtype;
  inputs_[id] = std::move(p);
  append_storage_[id] = std::move(st);
}

namespace {

using AppendMap = std::map<std::string, Session::AppendStorage>;

// Is node i concat(appended input, ...) whose output has the storage's shape?
const Session::AppendStorage* append_target(const ir::Graph& g, size_t i, const Shape& out, const AppendMap& storage) {
  const ir::Node& n = g.nodes[i];
  if (n.op != Op::Concat || n.inputs.empty() || g.nodes[n.inputs[0]].op != Op::Input) return nullptr;
  auto it = storage.find(g.nodes[n.inputs[0]].id);
  return it != storage.end() && it->second.shape == out ? &it->second : nullptr;
}

// Each appended input is read by one node, concat(input, ...) of the storage's shape and dtype
// (checked before a plan or an eager run uses the storage: anything else would read the
// storage's layout as the input's).
void check_appends(const ir::Graph& g, const ir::TypedShapes& ts, const AppendMap& storage) {
  for (const auto& [id, st] : storage) {
    const int p = g.find(id);
    int readers = 0, concats = 0;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (int u : g.nodes[i].inputs)
        if (u == p) {
          readers++;
          concats += append_target(g, i, ts.shapes[i], storage) == &st && ts.dtypes[i] == st.dtype;
        }
    for (int o : g.outputs) readers += o == p;
    if (p >= 0 && (readers != 1 || concats != 1))
      throw RuntimeError("internal: input '" + id + "' is appended in place, but the plan reads it other than as the first input of "
                         "one concat of the storage's shape and dtype");
  }
}

// The bytes into its first input's storage at which node i's output is a view of it, or -1
// where a kernel computes it: a reshape (0), and a narrow that is one contiguous block of its
// input (q, k and v taken from a [3, ...] tensor) where its offset in the backend's storage
// keeps the memory plan's alignment, so that kernels see it as they see any planned tensor.
int64_t view_offset(const Executor& ex, const ir::Node& n, const ir::TypedShapes& ts, int i) {
  if (passes::is_alias_node(n, ts, i)) return 0;
  const int64_t e = passes::contiguous_narrow_offset(n, ts);
  if (e < 0) return -1;
  const size_t b = ex.storage_bytes(e, ts.dtypes[i]);
  return b % passes::kPlanAlign == 0 ? (int64_t)b : -1;
}

}  // namespace

ir::TypedShapes Session::bind_shapes() const {
  std::map<std::string, Shape> shapes;
  for (const auto& [id, p] : inputs_) shapes[id] = p->shape();
  return ir::infer_shapes(*graph_, shapes);
}

std::string Session::signature() const {
  std::string s;
  for (const auto& [id, p] : inputs_) s += id + ":" + shape_str(p->shape()) + ":" + dtype_name(p->dtype) + ";";
  return s;
}

TensorRef Session::leaf_ref(int i) {
  const ir::Node& n = graph_->nodes[i];
  const Tensor& t = n.op == Op::Param ? params_.at(n.id) : n.constant;
  auto it = leaf_bufs_.find(i);
  if (it == leaf_bufs_.end()) {
    std::unique_ptr<DeviceBuffer> buf;
    // Zero copy where the backend can use host memory in place (the CPU): a memory-mapped
    // f16/bf16 parameter stays 2 bytes per element in the file's pages, never copied or widened.
    if (t.dtype() == n.dtype && t.numel() > 0 && ex_.storage_dtype(n.dtype) == n.dtype)
      buf = ex_.wrap_host(t.raw(), t.nbytes(), n.dtype, t.keepalive());
    if (!buf) {
      buf = ex_.allocate(ex_.storage_bytes(std::max<int64_t>(t.numel(), 1), n.dtype));
      upload_tensor(ex_, *buf, 0, t.dtype() == n.dtype ? t : t.astype(n.dtype),
                    (n.op == Op::Param ? "param '" : "constant '") + n.id + "'");
    }
    it = leaf_bufs_.emplace(i, std::move(buf)).first;
  }
  return {it->second.get(), 0, t.shape(), n.dtype};
}

// Compiled mode's optimised graph: from the persistent cache when it holds this graph's plan
// for these inputs and this device, else optimised now (and stored for the next process).
std::unique_ptr<passes::OptimizedGraph> Session::optimized(const ir::TypedShapes& ts) {
  passes::OptOptions oo;
  oo.transposed_linear = ex_.transposed_linear_weights();
  oo.integer_gemm = ex_.integer_gemm();
  oo.half_attention_f16 = ex_.half_attention(DType::f16);
  oo.half_attention_bf16 = ex_.half_attention(DType::bf16);
  oo.attention_view_align =
      ex_.attention_views(&oo.attention_views_f16, &oo.attention_views_all, &oo.attention_views_linear);
  io::BlobCache* cache = opts_.disk_cache ? io::active_cache() : nullptr;
  if (!cache) return std::make_unique<passes::OptimizedGraph>(passes::optimize(*graph_, ts, oo));
  auto& clog = io::cache_log();
  auto t0 = std::chrono::steady_clock::now();
  const std::string device = ex_.name() == "cpu" ? "cpu" : ex_.description();  // plans do not depend on CPU threads
  const std::string key = plan_cache_key(*graph_, signature(), ex_.name(), device, oo);
  io::BlobCache::Lookup hit = cache->get("plan", key);
  auto ms = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
  std::string problem = hit.problem;
  if (hit.data) {
    std::string why;
    if (auto og = deserialize_plan(*hit.data, &why)) {
      og->graph.file = graph_->file;  // messages name this run's file
      clog.hits++;
      if (opts_.verbose)
        log() << fmt::format("compile cache: hit: plan for {} read in {:.2f} ms ({})\n", signature(), ms(),
                             cache->entry_path("plan", key));
      return std::make_unique<passes::OptimizedGraph>(std::move(*og));
    }
    problem = cache->entry_path("plan", key) + ": " + why;
  }
  if (!problem.empty()) log() << "warning: compile cache: ignored a bad entry (" << problem << "); rebuilding it\n";
  auto og = std::make_unique<passes::OptimizedGraph>(passes::optimize(*graph_, ts, oo));
  double opt_ms = ms();
  std::string err;
  bool stored = cache->put("plan", key, serialize_plan(*og), &err);
  clog.misses++;
  clog.stores += stored;
  if (!stored) log() << "warning: compile cache: could not store the plan: " << err << "\n";
  if (opts_.verbose)
    log() << fmt::format("compile cache: miss: {}; optimised in {:.2f} ms{}\n",
                         problem.empty() ? "no entry for this graph, inputs and device" : "bad entry", opt_ms,
                         stored ? ", stored in " + cache->entry_path("plan", key) : "");
  return og;
}

// Every node that becomes a kernel, with its dtypes, past the backend's check (Executor::check_dtypes).
void Session::check_backend_dtypes(const ir::Graph& g, const ir::TypedShapes& ts) const {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (ir::op_info(n.op).category == ir::Category::Control && n.op != Op::Result) continue;  // a tuple
    std::vector<DType> in;
    for (int u : n.inputs) in.push_back(ts.dtypes[u]);
    ex_.check_dtypes(ir::node_ref(g, n), n, in, ts.dtypes[i]);
  }
}

std::unique_ptr<Session::Exec> Session::build_exec(Mode mode, const ir::TypedShapes& ts0) {
  auto e = std::make_unique<Exec>();
  e->mode = mode;
  if (mode == Mode::Compiled) {
    e->opt = optimized(ts0);
    e->g = &e->opt->graph;
    e->ts = e->opt->ts;
    e->fused = e->opt->fused;
  } else {
    e->g = graph_.get();
    e->ts = ts0;
    e->fused.assign(graph_->nodes.size(), nullptr);
  }
  const ir::Graph& g = *e->g;
  check_backend_dtypes(g, e->ts);
  check_appends(g, e->ts, append_storage_);
  const size_t n = g.nodes.size();
  e->where.resize(n);
  std::vector<int> root(n), step(n, -1);
  std::vector<passes::Lifetime> life(n);
  std::vector<int> kernel_nodes, precomputed;
  std::vector<char> fixed(n, 0);  // compiled mode: a param, a constant, or computed from them only
  std::map<std::string, DeviceBuffer*> append_buf;  // appended inputs' storage (set_append_storage)
  std::map<int, DeviceBuffer*> append_at;           // their concats, written into that storage
  // A view (view_offset: a reshape, a contiguous narrow) lies in its first input's storage.
  std::vector<int64_t> view_at(n);
  for (size_t i = 0; i < n; ++i) view_at[i] = e->fused[i] ? -1 : view_offset(ex_, g.nodes[i], e->ts, (int)i);
  auto view_input = [&](size_t i) {
    e->where[i] = e->where[g.nodes[i].inputs[0]];
    e->where[i].offset += (size_t)view_at[i];
    e->where[i].shape = e->ts.shapes[i];
    e->where[i].dtype = e->ts.dtypes[i];
  };
  for (size_t i = 0; i < n; ++i) {
    const ir::Node& node = g.nodes[i];
    const Shape& s = e->ts.shapes[i];
    root[i] = (int)i;
    if (node.op == Op::Input) {
      std::unique_ptr<DeviceBuffer> wrapped;
      auto in = inputs_.find(node.id);
      if (auto a = append_storage_.find(node.id); a != append_storage_.end()) {  // the caller's storage itself
        e->shared.push_back(a->second.buf);
        append_buf[node.id] = a->second.buf.get();
        e->where[i] = {a->second.buf.get(), 0, s, e->ts.dtypes[i]};
        e->input_refs[node.id] = e->where[i];  // bound as it is: bind_inputs copies nothing
        e->leaf_bytes += ex_.storage_bytes(shape_numel(a->second.shape), e->ts.dtypes[i]);
        continue;
      }
      if (opts_.in_place_inputs.count(node.id) && in != inputs_.end() && !in->second->on_device &&
          in->second->host.shape() == s && in->second->host.dtype() == e->ts.dtypes[i] && in->second->host.numel() > 0)
        wrapped = ex_.wrap_host(in->second->host.raw(), in->second->host.nbytes(), e->ts.dtypes[i], in->second->host.keepalive());
      if (wrapped) {
        e->in_place[node.id] = in->second->host.raw();
        e->owned.push_back(std::move(wrapped));
      } else {
        e->owned.push_back(ex_.allocate(ex_.storage_bytes(std::max<int64_t>(shape_numel(s), 1), e->ts.dtypes[i])));
      }
      e->where[i] = {e->owned.back().get(), 0, s, e->ts.dtypes[i]};
      e->input_refs[node.id] = e->where[i];
      e->leaf_bytes += ex_.storage_bytes(shape_numel(s), e->ts.dtypes[i]);
    } else if (node.op == Op::Param || node.op == Op::Constant) {
      fixed[i] = 1;
      int orig = graph_->find(node.id);
      if (orig >= 0 && graph_->nodes[orig].op == node.op) {
        e->where[i] = leaf_ref(orig);
      } else {  // a constant made by the optimiser
        const DType dt = e->ts.dtypes[i];
        e->owned.push_back(ex_.allocate(ex_.storage_bytes(std::max<int64_t>(node.constant.numel(), 1), dt)));
        upload_tensor(ex_, *e->owned.back(), 0, node.constant.dtype() == dt ? node.constant : node.constant.astype(dt),
                      "constant '" + node.id + "'");
        e->where[i] = {e->owned.back().get(), 0, s, dt};
      }
      e->leaf_bytes += ex_.storage_bytes(shape_numel(s), e->ts.dtypes[i]);
    } else if (mode == Mode::Compiled && !node.inputs.empty() &&
               std::all_of(node.inputs.begin(), node.inputs.end(), [&](int u) { return fixed[u]; })) {
      // Over params and constants only (a weight the optimiser transposed or scaled): params
      // are fixed for a compiled plan, so it is computed once here, never per run.
      fixed[i] = 1;
      if (view_at[i] >= 0) {
        view_input(i);
        continue;
      }
      const size_t bytes = ex_.storage_bytes(std::max<int64_t>(shape_numel(s), 1), e->ts.dtypes[i]);
      e->owned.push_back(ex_.allocate(bytes));
      e->where[i] = {e->owned.back().get(), 0, s, e->ts.dtypes[i]};
      Kernel k;
      k.node = &node;
      k.graph = &g;
      k.fused = e->fused[i].get();
      for (int u : node.inputs) k.inputs.push_back(e->where[u]);
      k.output = e->where[i];
      k.label = "precompute " + node.id;
      ex_.launch(k);
      precomputed.push_back((int)i);
      e->leaf_bytes += bytes;
    } else if (view_at[i] >= 0) {
      root[i] = root[node.inputs[0]];
    } else {
      step[i] = (int)kernel_nodes.size();
      kernel_nodes.push_back((int)i);
      const AppendStorage* a = append_target(g, i, s, append_storage_);
      if (a && a->dtype == e->ts.dtypes[i]) {
        append_at[(int)i] = append_buf.at(g.nodes[node.inputs[0]].id);  // not in the arena
      } else {
        life[i].size = ex_.storage_bytes(std::max<int64_t>(shape_numel(s), 1), e->ts.dtypes[i]);
        if (node.op == Op::Concat)
          for (int u : node.inputs)
            if (g.nodes[u].op == Op::Input) e->concat_input_bytes += (int64_t)ex_.storage_bytes(shape_numel(e->ts.shapes[u]), e->ts.dtypes[u]);
      }
      life[i].first = life[i].last = step[i];
    }
  }
  e->appends = (int)append_at.size();
  if (!precomputed.empty()) ex_.flush();
  for (int i : kernel_nodes) {
    // A matrix product's (and a convolution's) inputs stay live through the next kernel too,
    // so that a backend may run that kernel in its epilogue (its output then never shares their memory).
    const bool product = !e->fused[i] && (g.nodes[i].op == Op::Linear || g.nodes[i].op == Op::Matmul ||
                                          g.nodes[i].op == Op::Conv2d || g.nodes[i].op == Op::Conv3d);
    const int until = product && step[i] + 1 < (int)kernel_nodes.size() ? step[i] + 1 : step[i];
    for (int u : g.nodes[i].inputs) life[root[u]].last = std::max(life[root[u]].last, until);
  }
  for (int o : g.outputs) life[root[o]].last = INT_MAX;
  e->mp = passes::plan_memory(life, passes::kPlanAlign);
  if (e->mp.arena_bytes > 0) e->arena = ex_.allocate(e->mp.arena_bytes);
  for (size_t i = 0; i < n; ++i) {
    if (auto a = append_at.find((int)i); a != append_at.end()) e->where[i] = {a->second, 0, e->ts.shapes[i], e->ts.dtypes[i]};
    else if (step[i] >= 0) e->where[i] = {e->arena.get(), (size_t)e->mp.offsets[i], e->ts.shapes[i], e->ts.dtypes[i]};
    else if (root[i] != (int)i) view_input(i);
  }
  std::ostringstream text;
  text << fmt::format("plan ({} mode): {} nodes, {} kernels, arena {:.3f} MiB (without reuse {:.3f} MiB)\n",
                      mode_name(mode), n, kernel_nodes.size(), e->mp.arena_bytes / 1048576.0,
                      e->mp.sum_bytes / 1048576.0);
  text << merge_text_;
  if (e->opt) {
    const auto& st = e->opt->stats;
    text << fmt::format("optimised: {} -> {} nodes; CSE merged {}, folded {}, simplified {}, scalars merged {}, "
                        "{} fused groups covering {} nodes\n",
                        st.nodes_before, st.nodes_after, st.cse_merged, st.folded, st.simplified, st.scalars_merged,
                        st.fused_groups, st.fused_nodes);
    if (st.patterns) text << fmt::format("patterns: {} rewritten ({})\n", st.patterns, st.pattern_kinds);
  }
  for (int i : precomputed) {
    const ir::Node& node = g.nodes[i];
    text << fmt::format("  once  {:<28} {:<40} out {:<20} ({} bytes, computed when the plan is built)\n",
                        e->fused[i] ? "fused" : ir::op_name(node.op), node.id, shape_str(e->ts.shapes[i]),
                        ex_.storage_bytes(shape_numel(e->ts.shapes[i]), e->ts.dtypes[i]));
  }
  std::vector<char> is_output_root(n, 0), is_precomputed(n, 0);
  for (int o : g.outputs) is_output_root[root[o]] = 1;
  for (int i : precomputed) is_precomputed[i] = 1;
  for (int i : kernel_nodes) {
    const ir::Node& node = g.nodes[i];
    Kernel k;
    k.node = &node;
    k.graph = &g;
    k.fused = e->fused[i].get();
    for (int u : node.inputs) {
      const Op leaf = g.nodes[root[u]].op;
      // Constant for the plan's life: params, constants, what was computed from them once
      // when the plan was built (e.g. a weight the MatMul + bias rewrite transposed), and views
      // of those (fixed: e.g. a 1-D convolution's weight reshaped to 2-D, which is its own root).
      const bool constant = leaf == Op::Param || leaf == Op::Constant || is_precomputed[root[u]] || fixed[u];
      if (constant && k.inputs.size() < 32) k.const_inputs |= 1u << k.inputs.size();
      k.inputs.push_back(e->where[u]);
    }
    k.graph_output = is_output_root[i] != 0;
    k.output = e->where[i];
    if (append_at.count(i)) k.inputs_in_output = 1;
    k.label = k.fused ? "fused[" + e->opt->fused_members[i] + "]" : node_label(g, node);
    k.flops = k.fused ? (double)k.fused->code.size() * shape_numel(e->ts.shapes[i]) : ir::node_flops(g, i, e->ts);
    k.bytes = (double)ex_.storage_bytes(shape_numel(e->ts.shapes[i]), e->ts.dtypes[i]);
    for (const auto& t : k.inputs) k.bytes += (double)ex_.storage_bytes(t.numel(), t.dtype);
    text << fmt::format("  k{:<4} {:<28} {:<40} out {:<20} @{} ({} bytes)\n", step[i],
                        k.fused ? "fused" : ir::op_name(node.op),
                        k.fused ? k.fused->describe().substr(0, 40) : node.id,
                        shape_str(k.output.shape) + (k.output.dtype == DType::f32 ? "" : std::string(" ") + dtype_name(k.output.dtype)),
                        k.output.offset, ex_.storage_bytes(shape_numel(k.output.shape), k.output.dtype));
    if (k.fused) text << "        members: " << e->opt->fused_members[i] << "\n";
    e->kernels.push_back(std::move(k));
  }
  e->text = text.str();
  return e;
}

void Session::bind_inputs(Exec& e) {
  bool copies = false;
  for (auto& [id, ref] : e.input_refs) {
    auto it = inputs_.find(id);
    if (it == inputs_.end()) throw InputError("no value given for input '" + id + "'");
    PendingInput& p = *it->second;
    if (auto w = e.in_place.find(id); w != e.in_place.end()) {
      if (p.on_device || p.host.raw() != w->second)
        throw RuntimeError("internal: input '" + id + "' is read in place from the tensor first given; another value was set");
      continue;
    }
    if (p.on_device) {
      if (p.dev.buf == ref.buf && p.dev.offset == ref.offset) continue;
      ex_.launch(copy_kernel(p.dev, ref, "feed " + id));
      copies = true;
      stats_.input_copy_bytes += (int64_t)ex_.storage_bytes(ref.numel(), ref.dtype);
    } else if (!opts_.inputs_constant || p.uploaded_to != e.id) {
      // With inputs_constant, a host value is uploaded once per exec (its input buffer
      // is written by nothing else).
      upload_tensor(ex_, *ref.buf, ref.offset, p.host, "input '" + id + "'");
      stats_.input_copy_bytes += (int64_t)p.host.nbytes();
      p.uploaded_to = e.id;
    }
  }
  if (copies) ex_.flush();
  // Fed values now live in this exec's input buffers.
  for (auto& [id, ref] : e.input_refs) {
    auto& p = *inputs_.at(id);
    if (p.on_device) p.dev = ref;
  }
}

std::vector<Tensor> Session::download_outputs(const std::vector<TensorRef>& refs) {
  std::vector<Tensor> outs;
  for (size_t j = 0; j < refs.size(); ++j) {
    const auto& r = refs[j];
    // Host storage is recycled once every tensor returned in it is gone (use_count 1:
    // only the pool holds it), which saves allocating and page-faulting it per run.
    const size_t bytes = (size_t)std::max<int64_t>(r.numel(), 0) * dtype_size(r.dtype);
    const int64_t n = (int64_t)std::max<size_t>(bytes, 1);
    std::shared_ptr<uint8_t> host;
    for (auto& [cap, buf] : host_pool_)
      if (cap == n && buf.use_count() == 1) {
        host = buf;
        break;
      }
    if (!host) {
      host = std::shared_ptr<uint8_t>(new (std::align_val_t(64)) uint8_t[(n + 7) / 8 * 8],
                                      [](uint8_t* q) { operator delete[](q, std::align_val_t(64)); });
      host_pool_.emplace_back(n, host);
      if (host_pool_.size() > 2 * refs.size() + 2) {  // bounded: forget a free buffer, else the oldest
        auto it = std::find_if(host_pool_.begin(), host_pool_.end() - 1, [](const auto& e) { return e.second.use_count() == 1; });
        host_pool_.erase(it == host_pool_.end() - 1 ? host_pool_.begin() : it);
      }
    }
    ex_.download(*r.buf, r.offset, host.get(), bytes, r.dtype);
    outs.push_back(Tensor::borrow(r.shape, r.dtype, host.get(), host));
  }
  last_outputs_ = refs;
  return outs;
}

std::vector<Tensor> Session::run_planned(Exec& e, bool replay) {
  bind_inputs(e);
  // A compiled replay may hand out its outputs inside the arena (below): when the caller
  // still holds them, the arena gets fresh memory and theirs stays as it was. Fed inputs
  // were copied out of the arena above, before this.
  if (replay && e.arena) ex_.renew_if_shared(*e.arena);
  ex_.set_profiling(opts_.profile);
  if (replay) {
    if (!e.rec) {
      e.rec = ex_.record(e.kernels);
      e.text += e.rec->describe();
    }
    ex_.replay(*e.rec);
  } else {
    for (const auto& k : e.kernels) ex_.launch(k);
  }
  ex_.flush();
  stats_.profile = ex_.take_profile();
  std::vector<TensorRef> refs;
  for (int o : e.g->outputs) refs.push_back(e.where[o]);
  if (opts_.check_numerics)
    for (int o : e.g->outputs) check_finite(ex_, e.where[o], *e.g, e.g->nodes[o], e.ts);
  stats_.kernels = (int)e.kernels.size();
  stats_.input_copy_bytes += e.concat_input_bytes;
  stats_.appends_in_place = e.appends;
  stats_.arena_bytes = e.mp.arena_bytes;
  stats_.unplanned_bytes = e.mp.sum_bytes;
  stats_.peak_bytes = stats_.arena_bytes + e.leaf_bytes;
  plan_text_ = e.text;
  last_exec_ = &e;
  // Zero-copy outputs: when a compiled replay's outputs fill at least half of an arena the
  // executor can share (the CPU's), a copy would cost about as much as the kernels, so the
  // tensors returned share the arena's memory (read-only, as downloaded outputs are).
  int64_t out_bytes = 0;
  bool in_arena = replay && e.arena;
  for (const auto& r : refs) {
    in_arena = in_arena && r.buf == e.arena.get();
    out_bytes += (int64_t)ex_.storage_bytes(r.numel(), r.dtype);
  }
  if (in_arena && 2 * out_bytes >= e.mp.arena_bytes) {
    if (auto mem = ex_.share_memory(*e.arena)) {
      std::vector<Tensor> outs;
      for (const auto& r : refs)
        outs.push_back(Tensor::borrow(r.shape, r.dtype, static_cast<const uint8_t*>(mem.get()) + r.offset, mem));
      last_outputs_ = refs;
      return outs;
    }
  }
  return download_outputs(refs);
}

std::vector<Tensor> Session::run_eager(const ir::TypedShapes& ts) {
  const ir::Graph& g = *graph_;
  check_backend_dtypes(g, ts);
  check_appends(g, ts, append_storage_);
  const size_t n = g.nodes.size();
  std::vector<TensorRef> where(n);
  std::vector<std::unique_ptr<DeviceBuffer>> bufs(n);
  // Views (view_offset: reshapes, contiguous narrows) lie in their input's buffer: uses are
  // counted on the buffer's owner (root).
  std::vector<int> root(n), uses(n, 0);
  std::vector<int64_t> view_at(n);
  for (size_t i = 0; i < n; ++i) {
    view_at[i] = view_offset(ex_, g.nodes[i], ts, (int)i);
    bool alias = view_at[i] >= 0;
    root[i] = alias ? root[g.nodes[i].inputs[0]] : (int)i;
    if (!alias)
      for (int u : g.nodes[i].inputs) uses[root[u]]++;
  }
  for (int o : g.outputs) uses[root[o]] += 1 << 20;  // outputs stay
  int64_t live = 0, peak = 0;
  int kernels = 0;
  ex_.set_profiling(opts_.profile);
  std::vector<ProfileEntry> profile;
  auto release = [&](int u) {
    int r = root[u];
    if (--uses[r] == 0 && bufs[r]) {
      live -= (int64_t)bufs[r]->capacity;
      bufs[r].reset();
    }
  };
  std::map<std::string, DeviceBuffer*> append_buf;  // set_append_storage's inputs
  for (size_t i = 0; i < n; ++i) {
    const ir::Node& node = g.nodes[i];
    const Shape& s = ts.shapes[i];
    if (node.op == Op::Input && append_storage_.count(node.id)) {  // read through its concat, in place
      append_buf[node.id] = append_storage_.at(node.id).buf.get();
      where[i] = {append_buf[node.id], 0, s, ts.dtypes[i]};
      continue;
    }
    if (node.op == Op::Input) {
      bufs[i] = ex_.allocate(ex_.storage_bytes(std::max<int64_t>(shape_numel(s), 1), ts.dtypes[i]));
      where[i] = {bufs[i].get(), 0, s, ts.dtypes[i]};
      auto& p = *inputs_.at(node.id);
      if (p.on_device) {
        ex_.launch(copy_kernel(p.dev, where[i], "feed " + node.id));
        ex_.flush();
      } else {
        upload_tensor(ex_, *bufs[i], 0, p.host, "input '" + node.id + "'");
      }
      stats_.input_copy_bytes += (int64_t)ex_.storage_bytes(shape_numel(s), ts.dtypes[i]);
      live += (int64_t)ex_.storage_bytes(shape_numel(s), ts.dtypes[i]);
      continue;
    }
    if (node.op == Op::Param || node.op == Op::Constant) {
      where[i] = leaf_ref((int)i);
      uses[i] += 1 << 20;
      continue;
    }
    if (root[i] != (int)i) {
      where[i] = where[node.inputs[0]];
      where[i].offset += (size_t)view_at[i];
      where[i].shape = s;
      where[i].dtype = ts.dtypes[i];
      continue;
    }
    Kernel k;
    const AppendStorage* a = append_target(g, i, s, append_storage_);
    if (a && a->dtype == ts.dtypes[i]) {  // written into the caller's storage
      where[i] = {append_buf.at(g.nodes[node.inputs[0]].id), 0, s, ts.dtypes[i]};
      k.inputs_in_output = 1;
      stats_.appends_in_place++;
    } else {
      bufs[i] = ex_.allocate(ex_.storage_bytes(std::max<int64_t>(shape_numel(s), 1), ts.dtypes[i]));
      live += (int64_t)bufs[i]->capacity;
      peak = std::max(peak, live);
      where[i] = {bufs[i].get(), 0, s, ts.dtypes[i]};
      if (node.op == Op::Concat)
        for (int u : node.inputs)
          if (g.nodes[u].op == Op::Input) stats_.input_copy_bytes += (int64_t)ex_.storage_bytes(shape_numel(ts.shapes[u]), ts.dtypes[u]);
    }
    k.node = &node;
    k.graph = &g;
    for (int u : node.inputs) k.inputs.push_back(where[u]);
    k.output = where[i];
    k.label = node_label(g, node);
    k.flops = ir::node_flops(g, (int)i, ts);
    ex_.launch(k);
    ex_.flush();  // the node finishes before the next starts
    kernels++;
    for (auto& p : ex_.take_profile()) profile.push_back(p);
    if (opts_.check_numerics) check_finite(ex_, where[i], g, node, ts);
    for (int u : node.inputs) release(u);
  }
  int64_t leaf = 0;
  for (const auto& [i, b] : leaf_bufs_) leaf += (int64_t)b->capacity;
  stats_.kernels = kernels;
  stats_.arena_bytes = 0;
  stats_.peak_bytes = peak + leaf;
  stats_.profile = std::move(profile);
  plan_text_ = "plan (eager mode): nodes run one at a time in file order, each allocated and synchronised\n";
  std::vector<TensorRef> refs;
  for (int o : g.outputs) refs.push_back(where[o]);
  auto outs = download_outputs(refs);
  // Keep output buffers alive so that --feed can read them on the device.
  eager_keep_.clear();
  for (auto& b : bufs)
    if (b) eager_keep_.push_back(std::move(b));
  return outs;
}

std::vector<Tensor> Session::run(Mode mode) {
  auto t0 = std::chrono::steady_clock::now();
  stats_ = RunStats{};
  stats_.input_copy_bytes = std::exchange(pending_copy_bytes_, 0);  // input_bytes_changed's uploads
  for (const auto& n : graph_->nodes) stats_.nodes += ir::op_info(n.op).category != ir::Category::Leaf;
  if (mode == Mode::Compiled && opts_.disable_compile) {
    static bool noted = false;
    if (!noted) log() << "note: RLX_DISABLE_COMPILE=1: running compiled requests in lazy mode\n";
    noted = true;
    mode = Mode::Lazy;
  }
  stats_.mode = mode;
  if (control_) {
    std::map<std::string, Tensor> ins;
    for (const auto& [id, p] : inputs_) ins[id] = p->host;
    control_outputs_ = control_->run(mode, ins);
    stats_.kernels = control_->kernels();
    stats_.profile = control_->profile();
    stats_.peak_bytes = control_->peak_bytes();
    stats_.sizes_planned = control_->sizes_planned();
    stats_.sizes_reused = control_->sizes_reused();
    stats_.sizes_planned_total = control_->sizes_planned_total();
    if (opts_.verbose && stats_.sizes_planned + stats_.sizes_reused)
      log() << "data-dependent sizes: " << stats_.sizes_planned << " planned, " << stats_.sizes_reused << " reused\n";
    plan_text_ = control_->plan_text();
    stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return control_outputs_;
  }
  std::vector<Tensor> outs;
  if (mode == Mode::Eager) {
    outs = run_eager(bind_shapes());
  } else if (mode == Mode::Lazy) {
    // Keep the previous plan alive until the inputs have been copied out of it.
    auto e = build_exec(mode, bind_shapes());
    outs = run_planned(*e, false);
    lazy_exec_ = std::move(e);
  } else {
    std::string sig = signature();
    auto it = cache_.find(sig);
    if (it == cache_.end()) {
      std::string why = "first run";
      if (!cache_.empty()) {
        why = "new input signature";
        std::map<std::string, std::string> prev;
        std::stringstream ss(last_signature_);
        std::string item;
        while (std::getline(ss, item, ';')) {
          auto c = item.find(':');
          if (c != std::string::npos) prev[item.substr(0, c)] = item.substr(c + 1);
        }
        for (const auto& [id, p] : inputs_) {
          std::string now = shape_str(p->shape()) + ":" + dtype_name(p->dtype);
          if (prev.count(id) && prev[id] != now) {
            why = "input '" + id + "' changed from " + prev[id] + " to " + now;
            break;
          }
        }
      }
      // Shapes are inferred (and the inputs checked against the graph) only for a new signature:
      // a replay's inputs have the shapes and dtypes its plan was made for (a decode step's
      // shape inference cost ~7% of a small decoder's token).
      it = cache_.emplace(sig, build_exec(mode, bind_shapes())).first;
      compiles_++;
      stats_.compiled = true;
      stats_.compile_reason = why;
      if (opts_.verbose) {
        const auto& st = it->second->opt->stats;
        log() << "compile #" << compiles_ << " (" << why << "): " << st.nodes_before << " nodes -> "
              << it->second->kernels.size() << " kernels, " << st.fused_groups << " fused groups\n";
      }
    } else if (opts_.verbose) {
      log() << "in-memory plan reused: replaying the compiled plan for " << sig << "\n";
    }
    last_signature_ = sig;
    outs = run_planned(*it->second, true);
  }
  stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return outs;
}

std::string Session::plan_text() const { return plan_text_; }

}  // namespace rlx
