#include "passes/passes.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "backends/cpu/cpu_executor.h"
#include "core/error.h"
#include "ir/op_registry.h"
#include "passes/work.h"

namespace rlx::passes {

using ir::Category;
using ir::Node;
using ir::Op;
using detail::Work;

bool is_alias_node(const Node& n, const ir::TypedShapes&, int) { return n.op == Op::Reshape; }

int64_t contiguous_narrow_offset(const Node& n, const ir::TypedShapes& ts) {
  if (n.op != Op::Narrow || n.inputs.size() != 1) return -1;
  const Shape& x = ts.shapes[n.inputs[0]];
  int64_t a = n.attrs.i("axis");
  if (a < 0) a += (int64_t)x.size();
  if (a < 0 || a >= (int64_t)x.size()) return -1;
  for (int64_t d = 0; d < a; ++d)
    if (x[d] != 1) return -1;
  int64_t inner = 1;
  for (size_t d = (size_t)a + 1; d < x.size(); ++d) inner *= x[d];
  return n.attrs.i("start") * inner;
}

namespace {

// The value in double: exact for every dtype but i64 beyond 2^53 (an f64 constant 1 + 2^-40 is
// not the unit 1, as it would be read as f32).
bool is_scalar_const(const Work& w, int i, double* value = nullptr) {
  const Node& n = w.nodes[i];
  if (n.op != Op::Constant || n.constant.numel() != 1) return false;
  if (value) *value = n.constant.at(0);
  return true;
}

std::string attrs_key(const ir::Attrs& a) {
  std::ostringstream s;
  s.precision(17);
  for (const auto& [k, v] : a.values) {
    s << k << '=';
    std::visit([&](const auto& x) {
      using T = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>>) {
        for (auto e : x) s << e << ',';
      } else {
        s << x;
      }
    }, v);
    s << ';';
  }
  return s.str();
}

}  // namespace

// Runs one node on the CPU over constant inputs; returns its value.
Tensor detail::fold_node(const Work& w, int i) {
  static auto cpu = make_cpu_executor();
  const Node& n = w.nodes[i];
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  Kernel k;
  k.node = &n;
  k.label = n.id;
  for (int in : n.inputs) {
    const Tensor& t = w.nodes[in].constant;
    bufs.push_back(cpu->allocate(std::max<size_t>(t.nbytes(), 1)));
    cpu->upload(*bufs.back(), 0, t.raw(), t.nbytes(), t.dtype());
    k.inputs.push_back({bufs.back().get(), 0, t.shape(), t.dtype()});
  }
  Tensor out(w.shapes[i], w.dtypes[i]);
  bufs.push_back(cpu->allocate(std::max<size_t>(out.nbytes(), 1)));
  k.output = {bufs.back().get(), 0, out.shape(), out.dtype()};
  cpu->launch(k);
  cpu->flush();
  cpu->download(*bufs.back(), 0, out.mutable_raw(), out.nbytes(), out.dtype());
  return out;
}

namespace {

bool same_value_shape(const Shape& a, const Shape& b) {
  // Equal after dropping leading 1s.
  size_t i = 0, j = 0;
  while (i < a.size() && a[i] == 1 && a.size() - i > b.size() - j) i++;
  while (j < b.size() && b[j] == 1 && b.size() - j > a.size() - i) j++;
  return std::equal(a.begin() + i, a.end(), b.begin() + j, b.end());
}

// Simplifications of node i; returns the node it is equivalent to, or -1.
int simplify(Work& w, int i, OptStats& st) {
  Node& n = w.nodes[i];
  const Shape& out = w.shapes[i];
  auto in = [&](int k) { return n.inputs[k]; };
  auto same = [&](int k) { return w.shapes[in(k)] == out && w.dtypes[in(k)] == w.dtypes[i]; };
  switch (n.op) {
    case Op::Reshape: case Op::BroadcastTo:
      if (same(0)) return in(0);
      break;
    case Op::Transpose: {
      const Shape& xs = w.shapes[in(0)];
      int r = (int)xs.size();
      bool ident = true;
      if (n.attrs.has("perm")) {
        const auto& p = n.attrs.ints("perm");
        for (int k = 0; k < r; ++k) ident = ident && (p[k] < 0 ? p[k] + r : p[k]) == k;
      } else {
        ident = r <= 1;
      }
      if (ident) return in(0);
      break;
    }
    case Op::Cast:
      if (same(0)) return in(0);
      break;
    case Op::Mul: case Op::Add: case Op::Sub: case Op::Div: {
      double c;
      const double unit = (n.op == Op::Mul || n.op == Op::Div) ? 1.0 : 0.0;
      bool commutes = n.op == Op::Mul || n.op == Op::Add;
      if (is_scalar_const(w, in(1), &c) && c == unit && same(0)) return in(0);
      if (commutes && is_scalar_const(w, in(0), &c) && c == unit && same(1)) return in(1);
      // Scalar merging: (x op c1) op c2 -> x op (c1 op' c2) for mul/add chains.
      // f32 only: in f16/bf16 the merged constant would round differently, in integers it is inexact.
      if ((n.op == Op::Mul || n.op == Op::Add) && w.dtypes[i] == DType::f32 && w.dtypes[in(1)] == DType::f32 &&
          is_scalar_const(w, in(1), &c)) {
        Node& inner = w.nodes[in(0)];
        double c1;
        if (inner.op == n.op && is_scalar_const(w, inner.inputs[1], &c1) && w.shapes[inner.inputs[0]] == out) {
          const float merged = n.op == Op::Mul ? (float)c1 * (float)c : (float)c1 + (float)c;  // f32 constants: exact
          int x = inner.inputs[0];
          int k = w.add_constant(Tensor::from_vector({}, {merged}));
          Node& me = w.nodes[i];  // add_constant may have reallocated
          me.inputs = {x, k};
          st.scalars_merged++;
        }
      }
      break;
    }
    default: break;
  }
  return -1;
}

}  // namespace

// Keeps the nodes reachable from the outputs, in topological order.
std::vector<int> detail::live_order(const Work& w) {
  std::vector<int> state(w.nodes.size(), 0), order;
  auto visit = [&](int i) {
    std::vector<std::pair<int, size_t>> stack{{i, 0}};
    while (!stack.empty()) {
      auto& [v, k] = stack.back();
      if (state[v] == 2) { stack.pop_back(); continue; }
      state[v] = 1;
      if (k < w.nodes[v].inputs.size()) {
        int u = w.nodes[v].inputs[k++];
        if (state[u] == 0) stack.push_back({u, 0});
      } else {
        state[v] = 2;
        order.push_back(v);
        stack.pop_back();
      }
    }
  };
  for (int o : w.outputs) visit(o);
  return order;
}

OptimizedGraph optimize(const ir::Graph& g, const ir::TypedShapes& ts, const OptOptions& o) {
  Work w{g.nodes, ts.shapes, ts.dtypes, g.outputs};
  OptStats st;
  st.nodes_before = (int)g.nodes.size();
  const size_t n0 = w.nodes.size();
  std::vector<int> repl(n0, -1);
  auto resolve = [&](int i) {
    while (i < (int)repl.size() && repl[i] >= 0) i = repl[i];
    return i;
  };
  std::map<std::string, int> seen;
  for (size_t i = 0; i < n0; ++i) {
    for (auto& in : w.nodes[i].inputs) in = resolve(in);
    Node& n = w.nodes[i];
    if (ir::op_info(n.op).category == Category::Leaf) continue;
    if (o.simplify) {
      int r = simplify(w, (int)i, st);
      if (r >= 0) { repl[i] = r; st.simplified++; continue; }
    }
    if (o.cse) {
      std::ostringstream key;
      key << (int)w.nodes[i].op << '|';
      for (int in : w.nodes[i].inputs) key << in << ',';
      key << '|' << attrs_key(w.nodes[i].attrs);
      auto [it, fresh] = seen.emplace(key.str(), (int)i);
      if (!fresh) { repl[i] = it->second; st.cse_merged++; continue; }
    }
    // A dequantize of constant weights is never folded: the weights stay i8/u8 (a quarter of
    // the f32 bytes) until the fused integer kernels read them (docs/ir-design.md section 2).
    if (o.fold && w.nodes[i].op != Op::Dequantize) {
      bool all_const = !w.nodes[i].inputs.empty();
      for (int in : w.nodes[i].inputs) all_const = all_const && w.nodes[in].op == Op::Constant;
      if (all_const && shape_numel(w.shapes[i]) <= o.max_fold_elements) {
        Tensor v = detail::fold_node(w, (int)i);
        Node& me = w.nodes[i];
        me.op = Op::Constant;
        me.inputs.clear();
        me.attrs = {};
        me.constant = std::move(v);
        me.decl_shape.clear();
        for (auto d : w.shapes[i]) me.decl_shape.push_back({d, ""});
        st.folded++;
      }
    }
  }
  // Outputs keep their positions; a replaced output reads its replacement.
  for (auto& out : w.outputs) out = resolve(out);
  if (o.patterns) detail::rewrite_patterns(w, o, st);
  if (o.patterns && (o.attention_views_f16 || o.attention_views_all)) detail::fold_attention_views(w, o, st);

  // ---- fusion of elementwise chains ----
  std::vector<int> order = detail::live_order(w);
  std::vector<int> pos(w.nodes.size(), -1);  // position in `order`
  for (size_t k = 0; k < order.size(); ++k) pos[order[k]] = (int)k;
  std::vector<std::vector<int>> users(w.nodes.size());
  for (int v : order)
    for (int u : w.nodes[v].inputs) users[u].push_back(v);
  std::set<int> outputs(w.outputs.begin(), w.outputs.end());
  auto fusable = [&](int v) {
    const Node& n = w.nodes[v];
    auto cat = ir::op_info(n.op).category;
    // Fused programs compute in f32: integer values (exact in their own arithmetic) and f64
    // values (computed in double) stay unfused.
    auto unfused = [](DType t) { return is_integer(t) || t == DType::f64; };
    if (unfused(w.dtypes[v])) return false;
    for (int u : n.inputs)
      if (unfused(w.dtypes[u])) return false;
    return (cat == Category::Unary && n.op != Op::Cast) || cat == Category::Binary || n.op == Op::BroadcastTo;
  };
  std::vector<int> group(w.nodes.size(), -1);
  std::map<int, std::shared_ptr<FusedProgram>> programs;
  std::map<int, std::string> members_of;
  if (o.fuse) {
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      int root = *it;
      if (!fusable(root) || group[root] >= 0 || w.nodes[root].op == Op::BroadcastTo) continue;
      std::vector<int> members{root};
      group[root] = root;
      // Grow the group through producers whose every user is in it. Each member's inputs are
      // looked at once; a producer with a user not (yet) in the group waits and is looked at
      // again only after the group has grown (linear for chains, not quadratic).
      std::vector<int> waiting;
      for (size_t next = 0;;) {
        for (; next < members.size(); ++next)
          for (int u : w.nodes[members[next]].inputs) {
            if (group[u] >= 0 || !fusable(u) || outputs.count(u)) continue;
            if (!same_value_shape(w.shapes[u], w.shapes[root])) continue;
            bool all_in = std::all_of(users[u].begin(), users[u].end(), [&](int c) { return group[c] == root; });
            if (!all_in) { waiting.push_back(u); continue; }
            group[u] = root;
            members.push_back(u);
          }
        bool added = false;
        std::vector<int> still;
        for (int u : waiting) {
          if (group[u] >= 0) continue;
          bool all_in = std::all_of(users[u].begin(), users[u].end(), [&](int c) { return group[c] == root; });
          if (all_in) { group[u] = root; members.push_back(u); added = true; }
          else still.push_back(u);
        }
        waiting.swap(still);
        if (!added) break;
      }
      // Too many distinct tensor inputs for one kernel: leave the group unfused.
      std::set<int> ext_inputs;
      for (int m : members)
        for (int u : w.nodes[m].inputs)
          if (group[u] != root && !is_scalar_const(w, u)) ext_inputs.insert(u);
      if (members.size() == 1 || ext_inputs.size() > o.max_fused_inputs) {
        for (int m : members) group[m] = -2;  // a lone node runs as itself
        continue;
      }
      std::sort(members.begin(), members.end(), [&](int a, int b) { return pos[a] < pos[b]; });
      auto p = std::make_shared<FusedProgram>();
      p->out_shape = w.shapes[root];
      std::map<int, int> reg;
      std::vector<int> ext;
      auto operand = [&](int u) -> int {
        if (group[u] == root) return reg.at(u);
        auto r = reg.find(u);
        if (r != reg.end()) return r->second;
        double c;
        if (is_scalar_const(w, u, &c)) p->code.push_back({FusedInstr::Const, EwOp::Add, 0, 0, (float)c});
        else {
          p->code.push_back({FusedInstr::Load, EwOp::Add, (int32_t)ext.size()});
          ext.push_back(u);
          p->input_shapes.push_back(w.shapes[u]);
        }
        return reg[u] = (int)p->code.size() - 1;
      };
      std::string names;
      for (int m : members) {
        const Node& n = w.nodes[m];
        names += (names.empty() ? "" : ",") + n.id;
        if (n.op == Op::BroadcastTo) { reg[m] = operand(n.inputs[0]); continue; }
        EwOp op = ir::node_ew_op(n);
        if (ew_is_unary(op)) {
          int a = operand(n.inputs[0]);
          p->code.push_back({FusedInstr::Unary, op, a});
        } else {
          int a = operand(n.inputs[0]), b = operand(n.inputs[1]);
          p->code.push_back({FusedInstr::Binary, op, a, b});
        }
        reg[m] = (int)p->code.size() - 1;
      }
      p->result = reg.at(root);
      w.nodes[root].inputs = ext;
      programs[root] = p;
      members_of[root] = names;
      st.fused_groups++;
      st.fused_nodes += (int)members.size();
    }
  }

  // ---- rebuild: live nodes in topological order ----
  order = detail::live_order(w);
  OptimizedGraph og;
  og.graph.file = g.file;
  og.graph.name = g.name;
  std::vector<int> idx(w.nodes.size(), -1);
  for (int v : order) {
    idx[v] = (int)og.graph.nodes.size();
    Node n = w.nodes[v];
    for (auto& in : n.inputs) in = idx[in];
    og.graph.index[n.id] = idx[v];
    og.graph.nodes.push_back(std::move(n));
    og.ts.shapes.push_back(w.shapes[v]);
    og.ts.dtypes.push_back(w.dtypes[v]);
    auto p = programs.find(v);
    og.fused.push_back(p == programs.end() ? nullptr : p->second);
    og.fused_members.push_back(p == programs.end() ? "" : members_of[v]);
  }
  for (int out : w.outputs) og.graph.outputs.push_back(idx[out]);
  og.ts.symbols = ts.symbols;
  st.nodes_after = (int)og.graph.nodes.size();
  og.stats = st;
  return og;
}

}  // namespace rlx::passes
