// Host steps for control flow; see control.h.
#include "runtime/control.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "ir/op_registry.h"
#include "runtime/host_ops.h"
#include "runtime/session.h"

namespace rlx {

using ir::Op;

namespace {

bool is_control(Op op) { return ir::op_info(op).category == ir::Category::Control; }
bool is_leaf(Op op) { return ir::op_info(op).category == ir::Category::Leaf; }
// A loop whose carried values' shapes are observed at run time (its body imported when it runs):
// the graph after it is made for those shapes, as after a data-dependent node.
bool observed_shapes(const ir::Node& n) { return !n.bodies.empty() && n.attrs.has("size_key"); }

std::string node_name(const ir::Graph& g, const ir::Node& n) { return ir::node_ref(g, n); }

// A slice of `t` at position `i` along `axis` (the axis removed).
Tensor take(const Tensor& t, int axis, int64_t i) {
  const Shape& s = t.shape();
  Shape o;
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < (int)s.size(); ++k) {
    if (k < axis) outer *= s[k];
    if (k > axis) inner *= s[k];
    if (k != axis) o.push_back(s[k]);
  }
  Tensor r(o, t.dtype());
  const size_t es = dtype_size(t.dtype());
  const auto* src = static_cast<const uint8_t*>(t.raw());
  auto* dst = static_cast<uint8_t*>(r.mutable_raw());
  for (int64_t a = 0; a < outer; ++a)
    std::memcpy(dst + (size_t)(a * inner) * es, src + (size_t)((a * s[axis] + i) * inner) * es, (size_t)inner * es);
  return r;
}

// The parts (all of one shape) stacked along a new `axis`.
Tensor stack(const std::vector<Tensor>& parts, int axis, const Shape& part_shape, DType dt) {
  Shape o = part_shape;
  o.insert(o.begin() + axis, (int64_t)parts.size());
  Tensor r(o, dt);
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < (int)part_shape.size(); ++k) (k < axis ? outer : inner) *= part_shape[k];
  const size_t es = dtype_size(dt);
  auto* dst = static_cast<uint8_t*>(r.mutable_raw());
  const int64_t n = (int64_t)parts.size();
  for (int64_t p = 0; p < n; ++p) {
    const auto* src = static_cast<const uint8_t*>(parts[p].raw());
    for (int64_t a = 0; a < outer; ++a)
      std::memcpy(dst + (size_t)((a * n + p) * inner) * es, src + (size_t)(a * inner) * es, (size_t)inner * es);
  }
  return r;
}

bool truth(const Tensor& t, const std::string& who) {
  if (t.numel() != 1) throw InputError(who + ": the condition must have one element, it has " + std::to_string(t.numel()));
  return is_float(t.dtype()) ? t.at(0) != 0 : t.int_at(0) != 0;
}

}  // namespace

// A maximal run of ordinary nodes between control nodes, as its own graph and Session.
struct ControlRunner::Segment {
  std::shared_ptr<ir::Graph> g;
  std::unique_ptr<Session> s;
  std::vector<int> in_src;   // outer node of each segment input (in input order)
  std::vector<int> out_src;  // outer node of each segment output
};

struct ControlRunner::Plan {
  // steps: >= 0 a segment index, < 0 the control node -(step + 1)
  std::vector<int> steps;
  std::vector<Segment> segs;
  std::map<int, std::vector<int>> results;  // control node -> its result nodes
};

bool ControlRunner::has_control(const ir::Graph& g) {
  return std::any_of(g.nodes.begin(), g.nodes.end(), [](const ir::Node& n) { return is_control(n.op); });
}

ControlRunner::ControlRunner(std::shared_ptr<const ir::Graph> g, Executor& ex, std::map<std::string, Tensor> params,
                             const SessionOptions& opts)
    : g_(std::move(g)), ex_(ex), params_(std::move(params)), opts_(std::make_unique<SessionOptions>(opts)) {}

void ControlRunner::absorb(const ControlRunner& o) {
  kernels_ += o.kernels();
  profile_.insert(profile_.end(), o.profile().begin(), o.profile().end());
  peak_bytes_ = std::max(peak_bytes_, o.peak_bytes());
  sizes_planned_ += o.sizes_planned();
  sizes_reused_ += o.sizes_reused();
  sizes_planned_total_ += o.sizes_planned();
}

ControlRunner::~ControlRunner() = default;

void ControlRunner::build(const std::map<std::string, Tensor>& inputs) {
  const ir::Graph& g = *g_;
  std::map<std::string, Shape> shapes;
  for (const auto& [id, t] : inputs) shapes[id] = t.shape();
  ir::TypedShapes ts = ir::infer_shapes(g, shapes);
  const int n = (int)g.nodes.size();
  auto plan = std::make_unique<Plan>();
  // stage of a value: 0 for leaves; k for results of the k-th control node (1-based) and for
  // ordinary nodes that depend on them (their segment runs after that control node).
  // Nodes after a data-dependent node (by position) run after it too (`floor`), so that the
  // segments before it hold only nodes that a continuation (made for another size) shares.
  std::vector<int> stage(n, 0), ctl_index(n, -1);
  int nctl = 0, floor = 0;
  for (int i = 0; i < n; ++i) {
    const ir::Node& nd = g.nodes[i];
    if (nd.op == Op::Result) {
      stage[i] = ctl_index[nd.inputs[0]];
      plan->results[nd.inputs[0]].push_back(i);
    } else if (is_control(nd.op)) {
      ctl_index[i] = ++nctl;
      if (ir::data_dependent_results(nd.op) || observed_shapes(nd)) floor = nctl;
    } else if (!is_leaf(nd.op)) {
      stage[i] = floor;
      for (int u : nd.inputs) stage[i] = std::max(stage[i], stage[u]);
    }
  }
  // uses outside a node's own segment
  std::vector<std::vector<int>> members(nctl + 1);
  for (int i = 0; i < n; ++i)
    if (!is_leaf(g.nodes[i].op) && !is_control(g.nodes[i].op)) members[stage[i]].push_back(i);
  std::vector<bool> used_outside(n, false);
  for (int o : g.outputs) used_outside[o] = true;
  for (int i = 0; i < n; ++i) {
    const ir::Node& nd = g.nodes[i];
    if (is_control(nd.op)) {
      for (int u : nd.inputs) used_outside[u] = true;
    } else if (!is_leaf(nd.op)) {
      for (int u : nd.inputs)
        if (!is_leaf(g.nodes[u].op) && !is_control(g.nodes[u].op) && stage[u] != stage[i]) used_outside[u] = true;
    }
  }
  for (int st = 0; st <= nctl; ++st) {
    if (st > 0) {
      int c = -1;
      for (int i = 0; i < n; ++i)
        if (ctl_index[i] == st) c = i;
      plan->steps.push_back(-(c + 1));
    }
    if (members[st].empty()) continue;
    Segment seg;
    seg.g = std::make_shared<ir::Graph>();
    seg.g->file = g.file;
    seg.g->name = g.name + "/segment" + std::to_string(plan->segs.size());
    std::map<int, int> local;
    std::map<std::string, Tensor> seg_params;
    auto add = [&](ir::Node nd, int outer) {
      int k = (int)seg.g->nodes.size();
      seg.g->index[nd.id] = k;
      seg.g->nodes.push_back(std::move(nd));
      local[outer] = k;
      return k;
    };
    auto import_value = [&](int u) -> int {
      if (auto it = local.find(u); it != local.end()) return it->second;
      const ir::Node& src = g.nodes[u];
      ir::Node leaf;
      leaf.id = src.id;
      leaf.dtype = ts.dtypes[u];
      leaf.has_decl_shape = true;
      for (auto d : ts.shapes[u]) leaf.decl_shape.push_back(ir::Dim{d, ""});
      if (src.op == Op::Param) {
        leaf.op = Op::Param;
        leaf.param_name = src.param_name;
        auto p = params_.find(src.id);  // parameters are bound by node id
        if (p == params_.end()) throw InputError(node_name(g, src) + ": no value bound for this parameter");
        seg_params[src.id] = p->second;
      } else if (src.op == Op::Constant) {
        leaf.op = Op::Constant;
        leaf.constant = src.constant;
      } else {
        leaf.op = Op::Input;
        seg.in_src.push_back(u);
      }
      return add(std::move(leaf), u);
    };
    for (int i : members[st]) {
      ir::Node nd = g.nodes[i];
      for (int& u : nd.inputs) u = import_value(u);
      add(std::move(nd), i);
    }
    for (int i : members[st])
      if (used_outside[i]) {
        seg.g->outputs.push_back(local[i]);
        seg.out_src.push_back(i);
      }
    if (seg.g->outputs.empty()) continue;  // nothing it computes is used
    seg.s = std::make_unique<Session>(seg.g, ex_, std::move(seg_params), *opts_);
    plan->steps.push_back((int)plan->segs.size());
    plan->segs.push_back(std::move(seg));
  }
  plan_ = std::move(plan);
}

std::vector<Tensor> ControlRunner::run(Mode mode, const std::map<std::string, Tensor>& inputs,
                                       const std::map<std::string, Tensor>* known) {
  const ir::Graph& g = *g_;
  std::string sig;
  for (const auto& [id, t] : inputs) sig += id + ":" + shape_str(t.shape()) + ";";
  if (!plan_ || sig != plan_sig_) {
    build(inputs);
    plan_sig_ = sig;
  }
  kernels_ = 0;
  segments_run_ = 0;
  peak_bytes_ = 0;
  profile_.clear();
  sizes_planned_ = sizes_reused_ = 0;
  std::vector<Tensor> val(g.nodes.size());
  std::vector<bool> have(g.nodes.size(), false);
  auto value = [&](int u) -> const Tensor& {
    if (have[u]) return val[u];
    const ir::Node& nd = g.nodes[u];
    if (nd.op == Op::Input) {
      auto it = inputs.find(nd.id);
      if (it == inputs.end()) throw InputError(node_name(g, nd) + ": no value given for this input");
      val[u] = it->second.dtype() == nd.dtype ? it->second : it->second.astype(nd.dtype);
    } else if (nd.op == Op::Param) {
      auto p = params_.find(nd.id);
      if (p == params_.end()) throw InputError(node_name(g, nd) + ": no value bound for this parameter");
      val[u] = p->second;
    } else if (nd.op == Op::Constant) {
      val[u] = nd.constant;
    } else {
      throw RuntimeError(node_name(g, nd) + ": internal: value used before its segment ran");
    }
    have[u] = true;
    return val[u];
  };
  // Values the runner this one continues already computed (the same nodes: they precede the step
  // where the graphs diverge).
  auto take_known = [&](const std::vector<int>& nodes) {
    if (!known || nodes.empty()) return false;
    for (int u : nodes)
      if (!known->count(g.nodes[u].id)) return false;
    for (int u : nodes) {
      const Tensor& t = known->at(g.nodes[u].id);
      val[u] = t.dtype() == g.nodes[u].dtype || g.nodes[u].op != Op::Result ? t : t.astype(g.nodes[u].dtype);
      have[u] = true;
    }
    return true;
  };
  for (int step : plan_->steps) {
    if (step >= 0 && take_known(plan_->segs[step].out_src)) continue;
    if (step < 0 && take_known(plan_->results[-(step + 1)])) continue;
    if (step >= 0) {
      Segment& seg = plan_->segs[step];
      for (size_t k = 0; k < seg.in_src.size(); ++k) seg.s->set_input(g.nodes[seg.in_src[k]].id, value(seg.in_src[k]));
      std::vector<Tensor> outs = seg.s->run(mode);
      kernels_ += seg.s->last_stats().kernels;
      peak_bytes_ = std::max(peak_bytes_, seg.s->last_stats().peak_bytes);
      const auto& sp = seg.s->last_stats().profile;
      profile_.insert(profile_.end(), sp.begin(), sp.end());
      segments_run_++;
      for (size_t k = 0; k < seg.out_src.size(); ++k) {
        val[seg.out_src[k]] = std::move(outs[k]);
        have[seg.out_src[k]] = true;
      }
    } else {
      const int c = -(step + 1);
      const ir::Node& nd = g.nodes[c];
      std::vector<Tensor> ins;
      for (int u : nd.inputs) ins.push_back(value(u));
      if (ir::data_dependent_results(nd.op)) {
        HostStepResult hr = run_data_dependent(nd, ins, node_name(g, nd));
        bool fits = true;
        for (int r : plan_->results[c]) {
          const ir::Node& rn = g.nodes[r];
          const int64_t k = rn.attrs.i("index");
          Shape want;
          for (const auto& d : rn.decl_shape) want.push_back(d.value);
          if (k < 0 || k >= (int64_t)hr.outs.size()) throw InputError(node_name(g, rn) + ": no result " + std::to_string(k));
          fits = fits && hr.outs[k].shape() == want;
        }
        if (!fits) return continue_with(mode, inputs, c, {{nd.attrs.s("size_key"), hr.size}}, hr.outs, val, have);
        for (int r : plan_->results[c]) {
          const ir::Node& rn = g.nodes[r];
          const Tensor& t = hr.outs[rn.attrs.i("index")];
          val[r] = t.dtype() == rn.dtype ? t : t.astype(rn.dtype);
          have[r] = true;
        }
        continue;
      }
      std::vector<Tensor> outs = run_control(mode, c, ins);
      if (observed_shapes(nd)) {  // each dimension of each result under its own key
        bool fits = true;
        std::map<std::string, int64_t> observed;
        for (int r : plan_->results[c]) {
          const ir::Node& rn = g.nodes[r];
          const int64_t k = rn.attrs.i("index");
          if (k < 0 || k >= (int64_t)outs.size()) continue;
          const Shape& got = outs[k].shape();
          if (got.size() != rn.decl_shape.size())
            throw InputError(node_name(g, nd) + ": result " + std::to_string(k) + " has rank " + std::to_string(got.size()) + " at run time, " +
                             std::to_string(rn.decl_shape.size()) + " declared");
          for (size_t d = 0; d < got.size(); ++d) {
            observed[nd.attrs.s("size_key") + ":" + std::to_string(k) + ":" + std::to_string(d)] = got[d];
            fits = fits && got[d] == rn.decl_shape[d].value;
          }
        }
        if (!fits) return continue_with(mode, inputs, c, observed, outs, val, have);
      }
      for (int r : plan_->results[c]) {
        const ir::Node& rn = g.nodes[r];
        const int64_t k = rn.attrs.i("index");
        if (k < 0 || k >= (int64_t)outs.size())
          throw InputError(node_name(g, rn) + ": result " + std::to_string(k) + " of a node with " + std::to_string(outs.size()) + " results");
        Shape want;
        for (const auto& d : rn.decl_shape) want.push_back(d.value);
        if (outs[k].shape() != want)
          throw InputError(node_name(g, nd) + ": result " + std::to_string(k) + " has shape " + shape_str(outs[k].shape()) +
                           " at run time, but the graph was specialised for " + shape_str(want) +
                           " (a data-dependent shape, e.g. a loop that stopped early while it has scan outputs, is not supported yet)");
        val[r] = outs[k].dtype() == rn.dtype ? outs[k] : outs[k].astype(rn.dtype);
        have[r] = true;
      }
    }
  }
  std::vector<Tensor> result;
  for (int o : g.outputs) result.push_back(value(o));
  return result;
}

std::vector<Tensor> ControlRunner::continue_with(Mode mode, const std::map<std::string, Tensor>& inputs, int c,
                                                const std::map<std::string, int64_t>& observed, const std::vector<Tensor>& outs,
                                                const std::vector<Tensor>& val, const std::vector<bool>& have) {
  const ir::Graph& g = *g_;
  const ir::Node& nd = g.nodes[c];
  std::string got;
  for (const auto& t : outs) got += (got.empty() ? "" : ", ") + shape_str(t.shape());
  if (!g.resize || observed.empty() || observed.begin()->first.empty())
    throw InputError(node_name(g, nd) + ": its results have shapes " + got + " at run time" +
                     (observed.size() == 1 ? " (size " + std::to_string(observed.begin()->second) + ")" : std::string()) +
                     ", but the graph declares other sizes for them (a graph file's data-dependent results have the sizes written in "
                     "it; an ONNX model is planned for each observed size)");
  bool same = true;  // never loop on one size
  for (const auto& [k, v] : observed) {
    auto made = g.sizes.find(k);
    same = same && made != g.sizes.end() && made->second == v;
  }
  if (same)
    throw RuntimeError(node_name(g, nd) + ": internal: the graph made for the observed sizes declares other result shapes than the node "
                       "produced (" + got + ")");
  std::map<std::string, int64_t> sizes = g.sizes;
  for (const auto& [k, v] : observed) sizes[k] = v;
  std::string sig;
  for (const auto& [k, v] : sizes) sig += k + "=" + std::to_string(v) + ";";
  auto it = continuations_.find(sig);
  if (it == continuations_.end()) {
    auto [g2, params2] = g.resize(sizes);
    if (!g2) throw InputError(node_name(g, nd) + ": internal: no graph for the observed sizes (" + got + ")");
    it = continuations_.emplace(sig, std::make_unique<ControlRunner>(g2, ex_, std::move(params2), *opts_)).first;
    continuation_order_.push_back(sig);
    if (continuation_order_.size() > kMaxContinuations) {
      continuations_.erase(continuation_order_.front());
      continuation_order_.erase(continuation_order_.begin());
    }
    sizes_planned_++;
    sizes_planned_total_++;
  } else {
    sizes_reused_++;
    continuation_order_.erase(std::find(continuation_order_.begin(), continuation_order_.end(), sig));
    continuation_order_.push_back(sig);
  }
  ControlRunner& next = *it->second;  // (the erase above never removes the one just made)
  // What this run computed up to and including this step (node ids are the same there).
  std::map<std::string, Tensor> known;
  int last = c;
  for (int r : plan_->results[c]) last = std::max(last, r);
  for (int i = 0; i <= last; ++i)
    if (have[i] && !is_leaf(g.nodes[i].op)) known[g.nodes[i].id] = val[i];
  for (int r : plan_->results[c]) known[g.nodes[r].id] = outs.at(g.nodes[r].attrs.i("index"));
  auto result = next.run(mode, inputs, &known);
  absorb(next);
  segments_run_ += next.segments_run();
  return result;
}

struct ControlRunner::BodySpec {
  std::shared_ptr<const ir::Graph> g;
  std::unique_ptr<ControlRunner> r;
};

namespace {

// Whether body `g` was made for these input shapes and the values it read.
bool made_for(const ir::Graph& g, const std::map<std::string, Tensor>& inputs) {
  for (int i : g.inputs_of_kind(Op::Input)) {
    const ir::Node& nd = g.nodes[i];
    auto it = inputs.find(nd.id);
    if (it == inputs.end() || it->second.dtype() != nd.dtype || (int)it->second.shape().size() != (int)nd.decl_shape.size()) return false;
    for (size_t k = 0; k < nd.decl_shape.size(); ++k)
      if (it->second.shape()[k] != nd.decl_shape[k].value) return false;
  }
  for (const auto& [name, want] : g.value_deps) {
    auto it = inputs.find(name);
    if (it == inputs.end() || it->second.numel() != (int64_t)want.size()) return false;
    const Tensor& t = it->second;
    for (size_t k = 0; k < want.size(); ++k)
      if ((is_float(t.dtype()) ? t.at((int64_t)k) : (double)t.int_at((int64_t)k)) != want[k]) return false;
  }
  return true;
}

}  // namespace

ControlRunner& ControlRunner::body_runner(const ir::Node& ctl, int body, const std::map<std::string, Tensor>& inputs) {
  const ir::Graph& b = *ctl.bodies.at(body);
  if (!b.respecialize || (!b.outputs.empty() && made_for(b, inputs))) {  // (no outputs: a placeholder, imported when it runs)
    auto it = bodies_.find(&b);
    if (it == bodies_.end())
      it = bodies_.emplace(&b, std::make_unique<ControlRunner>(ctl.bodies[body], ex_, std::map<std::string, Tensor>{}, *opts_)).first;
    return *it->second;
  }
  // made again for the values (or shapes) given: a repeated one plans nothing
  auto& specs = body_specs_[&b];
  for (size_t k = 0; k < specs.size(); ++k)
    if (made_for(*specs[k]->g, inputs)) {
      auto spec = std::move(specs[k]);
      specs.erase(specs.begin() + (ptrdiff_t)k);
      specs.push_back(std::move(spec));
      sizes_reused_++;
      return *specs.back()->r;
    }
  std::shared_ptr<const ir::Graph> g2 = b.respecialize(inputs);
  if (!g2 || !made_for(*g2, inputs))
    throw RuntimeError(node_name(*g_, ctl) + ": internal: body '" + b.name + "' made again does not take the values given");
  auto spec = std::make_unique<BodySpec>();
  spec->g = g2;
  spec->r = std::make_unique<ControlRunner>(g2, ex_, std::map<std::string, Tensor>{}, *opts_);
  specs.push_back(std::move(spec));
  if (specs.size() > kMaxContinuations) specs.erase(specs.begin());
  sizes_planned_++;
  sizes_planned_total_++;
  return *specs.back()->r;
}

std::vector<Tensor> ControlRunner::run_body(Mode mode, const ir::Node& ctl, int body, const std::vector<Tensor>& ins) {
  const ir::Graph& b = *ctl.bodies.at(body);
  std::vector<int> in_nodes = b.inputs_of_kind(Op::Input);
  if (in_nodes.size() != ins.size())
    throw InputError(node_name(*g_, ctl) + ": its body '" + b.name + "' takes " + std::to_string(in_nodes.size()) + " inputs, " +
                     std::to_string(ins.size()) + " given");
  std::map<std::string, Tensor> m;
  for (size_t k = 0; k < ins.size(); ++k) m[b.nodes[in_nodes[k]].id] = ins[k];
  ControlRunner& r = body_runner(ctl, body, m);
  auto outs = r.run(mode, m);
  absorb(r);
  return outs;
}

std::vector<Tensor> ControlRunner::run_control(Mode mode, int c, const std::vector<Tensor>& ins) {
  const ir::Graph& g = *g_;
  const ir::Node& nd = g.nodes[c];
  const std::string who = node_name(g, nd);
  const int64_t ncap = nd.attrs.i("num_captures");
  const int64_t nown = (int64_t)ins.size() - ncap;
  std::vector<Tensor> caps(ins.begin() + nown, ins.end());
  auto with_caps = [&](std::vector<Tensor> v) {
    v.insert(v.end(), caps.begin(), caps.end());
    return v;
  };
  if (nd.op == Op::If) {
    if (nd.bodies.size() != 2) throw InputError(who + ": needs two bodies (then, else)");
    return run_body(mode, nd, truth(ins[0], who) ? 0 : 1, with_caps({}));
  }
  if (nd.op == Op::Loop) {
    if (nd.bodies.size() != 1) throw InputError(who + ": needs one body");
    if (ins[0].numel() != 1) throw InputError(who + ": the trip count M must have one element, it has " + std::to_string(ins[0].numel()));
    const int64_t M = ins[0].int_at(0);
    bool cond = truth(ins[1], who);
    const int64_t nc = nd.attrs.i("num_carried");
    std::vector<Tensor> carried(ins.begin() + 2, ins.begin() + 2 + nc);
    std::vector<std::vector<Tensor>> scans;
    int64_t i = 0;
    for (; i < M && cond; ++i) {
      std::vector<Tensor> bin{Tensor::from_ints({}, {i}, DType::i64), Tensor::from_ints({}, {1}, DType::boolean)};
      bin.insert(bin.end(), carried.begin(), carried.end());
      auto outs = run_body(mode, nd, 0, with_caps(std::move(bin)));
      if ((int64_t)outs.size() < 1 + nc) throw InputError(who + ": the body has too few outputs");
      cond = truth(outs[0], who + " (the body's condition)");
      for (int64_t k = 0; k < nc; ++k) {
        if (outs[1 + k].shape() != carried[k].shape() && !observed_shapes(nd))  // (else the graph after it follows)
          throw InputError(who + ": loop-carried value " + std::to_string(k) + " changes shape from " + shape_str(carried[k].shape()) +
                           " to " + shape_str(outs[1 + k].shape()) + " (not supported)");
        carried[k] = outs[1 + k];
      }
      scans.resize(outs.size() - 1 - nc);
      for (size_t k = 0; k < scans.size(); ++k) scans[k].push_back(outs[1 + nc + k]);
    }
    std::vector<Tensor> res = carried;
    // A loop that ran no iteration has empty scan outputs: their shapes come from the result nodes.
    const ir::Graph& body = *nd.bodies[0];
    const size_t nscan = body.outputs.empty() ? 0 : body.outputs.size() - 1 - nc;  // (a placeholder body: none)
    for (size_t k = 0; k < nscan; ++k) {
      if (i == 0 || k >= scans.size()) {
        res.push_back(Tensor());  // filled below from the declared result type
        continue;
      }
      const Shape part = scans[k][0].shape();
      for (const auto& t : scans[k])
        if (t.shape() != part) throw InputError(who + ": scan output " + std::to_string(k) + " changes shape between iterations");
      res.push_back(stack(scans[k], 0, part, scans[k][0].dtype()));
    }
    for (size_t k = 0; k < res.size(); ++k)
      if (!res[k].defined() || (res[k].numel() == 0 && res[k].shape().empty())) {
        for (int r : plan_->results[c])
          if (g.nodes[r].attrs.i("index") == (int64_t)k) {
            Shape s;
            for (const auto& d : g.nodes[r].decl_shape) s.push_back(d.value);
            if (!s.empty()) s[0] = 0;
            res[k] = Tensor(s, g.nodes[r].dtype);
          }
      }
    return res;
  }
  if (nd.op == Op::Scan) {
    if (nd.bodies.size() != 1) throw InputError(who + ": needs one body");
    const int64_t nscan_in = nd.attrs.i("num_scan_inputs");
    const int64_t nstate = nown - nscan_in;
    if (nstate < 0) throw InputError(who + ": num_scan_inputs exceeds the inputs");
    auto axes_in = nd.attrs.ints("scan_input_axes"), dirs_in = nd.attrs.ints("scan_input_directions");
    auto axes_out = nd.attrs.ints("scan_output_axes"), dirs_out = nd.attrs.ints("scan_output_directions");
    auto at = [](const std::vector<int64_t>& v, size_t k) { return k < v.size() ? v[k] : 0; };
    std::vector<Tensor> state(ins.begin(), ins.begin() + nstate);
    int64_t L = -1;
    for (int64_t j = 0; j < nscan_in; ++j) {
      const Tensor& x = ins[nstate + j];
      int64_t len = x.shape().at(at(axes_in, j));
      if (L >= 0 && len != L) throw InputError(who + ": the scan inputs have different lengths along their axes");
      L = len;
    }
    std::vector<std::vector<Tensor>> scans;
    for (int64_t t = 0; t < L; ++t) {
      std::vector<Tensor> bin = state;
      for (int64_t j = 0; j < nscan_in; ++j) {
        const int64_t pos = at(dirs_in, j) ? L - 1 - t : t;
        bin.push_back(take(ins[nstate + j], (int)at(axes_in, j), pos));
      }
      auto outs = run_body(mode, nd, 0, with_caps(std::move(bin)));
      for (int64_t k = 0; k < nstate; ++k) state[k] = outs[k];
      scans.resize(outs.size() - nstate);
      for (size_t k = 0; k < scans.size(); ++k) scans[k].push_back(outs[nstate + k]);
    }
    std::vector<Tensor> res = state;
    const size_t nout = nd.bodies[0]->outputs.size() - (size_t)nstate;
    for (size_t k = 0; k < nout; ++k) {
      if (k >= scans.size() || scans[k].empty()) {  // no slice (a scan axis of length 0): empty, of the declared type
        Tensor e;
        for (int r : plan_->results[c])
          if (g.nodes[r].attrs.i("index") == (int64_t)(nstate + k)) {
            Shape sh;
            for (const auto& d : g.nodes[r].decl_shape) sh.push_back(d.value);
            e = Tensor(sh, g.nodes[r].dtype);
          }
        res.push_back(e);
        continue;
      }
      auto parts = scans[k];
      if (at(dirs_out, k)) std::reverse(parts.begin(), parts.end());
      res.push_back(stack(parts, (int)at(axes_out, k), parts[0].shape(), parts[0].dtype()));
    }
    return res;
  }
  throw InputError(who + ": not a control node");
}

std::string ControlRunner::plan_text() const {
  std::string s;
  if (!plan_) return s;
  const ir::Graph& g = *g_;
  for (int step : plan_->steps) {
    if (step >= 0) {
      s += "segment " + std::to_string(step) + " (" + std::to_string(plan_->segs[step].g->nodes.size()) + " nodes):\n";
      s += plan_->segs[step].s->plan_text();
    } else {
      const ir::Node& nd = g.nodes[-(step + 1)];
      if (ir::data_dependent_results(nd.op)) {
        const std::string& key = nd.attrs.s("size_key");
        auto sz = g.sizes.find(key);
        s += "host step: " + std::string(ir::op_name(nd.op)) + " '" + nd.id + "' (" +
             (key.empty() ? std::string("on the host") : sz == g.sizes.end() ? "data-dependent size, provisional"
                                                                              : "data-dependent size " + std::to_string(sz->second)) + ")\n";
      } else {
        s += "host step: " + std::string(ir::op_name(nd.op)) + " '" + nd.id + "' (" + std::to_string(nd.bodies.size()) + " bodies)\n";
      }
    }
  }
  for (const auto& [b, r] : bodies_) s += "body '" + b->name + "':\n" + r->plan_text();
  for (const auto& [sig, r] : continuations_) s += "continuation for sizes " + sig + ":\n" + r->plan_text();
  for (const auto& [b, specs] : body_specs_)
    for (const auto& sp : specs) {
      std::string vals;
      for (const auto& [name, v] : sp->g->value_deps) {
        vals += (vals.empty() ? "" : "; ") + name + "=";
        for (size_t k = 0; k < v.size() && k < 8; ++k) {
          const double x = v[k];
          vals += (k ? "," : "") + (x == (double)(int64_t)x ? std::to_string((int64_t)x) : std::to_string(x));
        }
        if (v.size() > 8) vals += ",...";
      }
      s += "body '" + b->name + "' made for " + (vals.empty() ? std::string("other input shapes") : vals) + ":\n" + sp->r->plan_text();
    }
  return s;
}

}  // namespace rlx
