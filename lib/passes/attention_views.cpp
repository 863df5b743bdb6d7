// Compiled mode's attention_views pass (OptOptions::attention_views_f16 / _all): an attention
// node whose q, k or v is a chain of transposes, reshapes, narrows and slices of some tensor
// reads that tensor in place, and an attention whose one reader is a transpose (after
// reshapes) writes the transpose's layout itself; the copies go. What the node then reads and
// writes is described by its `views` attribute (ir::AttentionViews: per operand an offset and
// batch, head and position strides, head-dim elements adjacent), which a backend's attention
// kernel follows (Vulkan: attention_coop.comp reads the rows at their strides; its other
// kernels copy through scratch, kernels.cpp).
//
// ViT (torch's packed multi-head attention): the [S, B, 3E] qkv product -> reshape, transpose
// [3, S, B, E] -> narrows -> reshape [S, B*H, D] -> transpose [B*H, S, D] -> attention ->
// transpose [S, B*H, D] -> reshape [S*B, E]: q (b, h, s, d) is read at s*3BE + b*3E + h*D + d
// of the product and o written at s*BE + b*E + h*D + d.
//
// A view is tracked as per-dimension lists of (size, stride) sub-axes over a contiguous base,
// as PyTorch's view rules would: a reshape that merges axes whose strides do not chain keeps
// them as separate sub-axes, so that [S, B*H, D] over [S, B, 3E] stays expressible. Attention
// needs each operand's position and head-dim axes to be one sub-axis each (head dim of stride
// 1) and its leading (batch and head) axes at most two sub-axes, split alike for q, k, v and o.
#include <algorithm>
#include <numeric>

#include "ir/op_registry.h"
#include "passes/work.h"

namespace rlx::passes::detail {

using ir::Node;
using ir::Op;

namespace {

struct Sub {
  int64_t n, s;
};
struct View {
  std::vector<std::vector<Sub>> dims;
  int64_t off = 0;
};

View contiguous(const Shape& s) {
  View v;
  v.dims.resize(s.size());
  int64_t st = 1;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != 1) v.dims[i].push_back({s[i], st});
    st *= s[i];
  }
  return v;
}

// Adjacent sub-axes that chain (outer stride = inner size * inner stride) become one.
std::vector<Sub> merged(const std::vector<Sub>& in) {
  std::vector<Sub> out;
  for (const Sub& a : in) {
    if (a.n == 1) continue;
    if (!out.empty() && out.back().s == a.n * a.s) {
      out.back().n *= a.n;
      out.back().s = a.s;
    } else {
      out.push_back(a);
    }
  }
  return out;
}

int64_t dim_size(const std::vector<Sub>& d) {
  int64_t n = 1;
  for (const Sub& a : d) n *= a.n;
  return n;
}

bool reshape(View& v, const Shape& to) {
  std::vector<Sub> flat;
  for (const auto& d : v.dims) flat.insert(flat.end(), d.begin(), d.end());
  flat = merged(flat);
  View r;
  r.off = v.off;
  r.dims.resize(to.size());
  size_t p = 0;
  for (size_t i = 0; i < to.size(); ++i) {
    int64_t m = to[i];
    if (m == 0) return false;
    while (m > 1) {
      if (p >= flat.size()) return false;
      Sub& a = flat[p];
      if (m % a.n == 0) {
        r.dims[i].push_back(a);
        m /= a.n;
        ++p;
      } else if (a.n % m == 0) {
        r.dims[i].push_back({m, a.s * (a.n / m)});
        a.n /= m;
        m = 1;
      } else {
        return false;
      }
    }
  }
  if (p != flat.size()) return false;
  v = std::move(r);
  return true;
}

// Elements [start, start + len * step) of dimension `ax` in steps of `step` (> 0).
bool narrow(View& v, size_t ax, int64_t start, int64_t len, int64_t step) {
  std::vector<Sub> d = merged(v.dims[ax]);
  if (len == 1) {  // one index: its offset only
    int64_t rest = start;
    for (size_t j = 0; j < d.size(); ++j) {
      int64_t inner = 1;
      for (size_t k = j + 1; k < d.size(); ++k) inner *= d[k].n;
      v.off += rest / inner * d[j].s;
      rest %= inner;
    }
    v.dims[ax].clear();
    return true;
  }
  if (d.empty()) return false;
  int64_t inner = 1;
  for (size_t k = 1; k < d.size(); ++k) inner *= d[k].n;
  if (d.size() > 1 && (step != 1 || start % inner || len % inner)) return false;
  if (d.size() == 1) {
    v.off += start * d[0].s;
    d[0] = {len, d[0].s * step};
  } else {
    v.off += start / inner * d[0].s;
    d[0].n = len / inner;
  }
  v.dims[ax] = d;
  return true;
}

}  // namespace

void fold_attention_views(Work& w, const OptOptions& o, OptStats& st) {
  const std::vector<int> order = live_order(w);
  std::vector<std::vector<int>> users;
  std::vector<char> is_out;
  auto index = [&] {  // live readers of each node (again after each rewrite: it moves readers)
    users.assign(w.nodes.size(), {});
    for (int v : live_order(w))
      for (int u : w.nodes[v].inputs) users[u].push_back(v);
    is_out.assign(w.nodes.size(), 0);
    for (int x : w.outputs) is_out[x] = 1;
  };
  index();
  const int64_t align = std::max<int64_t>(1, o.attention_view_align);
  int folded = 0;
  auto shape = [&](int i) -> const Shape& { return w.shapes[i]; };
  auto perm_of = [&](int i) {
    const int r = (int)shape(w.nodes[i].inputs[0]).size();
    std::vector<int64_t> p(r);
    if (w.nodes[i].attrs.has("perm")) p = w.nodes[i].attrs.ints("perm");
    else for (int k = 0; k < r; ++k) p[k] = r - 1 - k;
    for (auto& e : p) e = e < 0 ? e + r : e;
    return p;
  };
  // One view step applied to v (node i over its input's view); false where it is no view.
  auto apply = [&](View& v, int i) {
    const Node& n = w.nodes[i];
    if (n.inputs.size() != 1 && n.op != Op::Reshape) return false;
    switch (n.op) {
      case Op::Reshape: return reshape(v, shape(i));
      case Op::Transpose: {
        auto p = perm_of(i);
        View r = v;
        for (size_t k = 0; k < p.size(); ++k) r.dims[k] = v.dims[p[k]];
        v = std::move(r);
        return true;
      }
      case Op::Narrow: {
        int64_t ax = n.attrs.i("axis");
        if (ax < 0) ax += (int64_t)v.dims.size();
        return narrow(v, (size_t)ax, n.attrs.i("start"), n.attrs.i("length"), 1);
      }
      case Op::Slice: {
        std::string err;
        auto plan = ir::slice_plan(n.attrs, shape(n.inputs[0]), &err);
        if (!err.empty() || plan.size() != v.dims.size()) return false;
        for (size_t ax = 0; ax < plan.size(); ++ax) {
          if (plan[ax].start == 0 && plan[ax].step == 1 && plan[ax].len == shape(n.inputs[0])[ax]) continue;
          if (plan[ax].step <= 0 || !narrow(v, ax, plan[ax].start, plan[ax].len, plan[ax].step)) return false;
        }
        return true;
      }
      default: return false;
    }
  };
  auto is_view_op = [&](int i) {
    Op op = w.nodes[i].op;
    return op == Op::Reshape || op == Op::Transpose || op == Op::Narrow || op == Op::Slice;
  };
  // Operand x of attention as a view of the farthest tensor it can be traced back to; base -1
  // where it reads x itself (nothing gained).
  auto trace = [&](int x, int* base, View* out, std::vector<int>* fwd) {
    std::vector<int> chain;  // x, its input, ...
    for (int c = x; is_view_op(c) && chain.size() < 16; c = w.nodes[c].inputs[0]) chain.push_back(c);
    *base = -1;
    for (size_t len = chain.size(); len > 0; --len) {  // the longest chain that composes
      bool copies = false;  // a transpose or a strided narrow/slice among them: a kernel saved
      for (size_t k = 0; k < len; ++k) copies = copies || w.nodes[chain[k]].op != Op::Reshape;
      if (!copies) return;
      const int b = w.nodes[chain[len - 1]].inputs[0];
      View v = contiguous(shape(b));
      bool ok = true;
      for (size_t k = len; k-- > 0 && ok;) ok = apply(v, chain[k]);
      if (ok) {
        *base = b;
        *out = v;
        fwd->assign(chain.rbegin() + (std::ptrdiff_t)(chain.size() - len), chain.rend());
        return;
      }
    }
  };
  // [lead..., S, D] of an operand view: leading sub-axes (merged), position sub-axis, head-dim
  // stride; false where the kernel cannot follow it.
  struct Parts {
    std::vector<Sub> lead;
    int64_t ss = 0;
  };
  auto parts = [&](const View& v, Parts* p) {
    const size_t r = v.dims.size();
    std::vector<Sub> d = merged(v.dims[r - 1]), s = merged(v.dims[r - 2]), lead;
    if (d.size() != 1 || d[0].s != 1 || s.size() > 1) return false;
    for (size_t k = 0; k + 2 < r; ++k) lead.insert(lead.end(), v.dims[k].begin(), v.dims[k].end());
    p->lead = merged(lead);
    p->ss = s.empty() ? 0 : s[0].s;
    return p->lead.size() <= 2;
  };
  for (int a : order) {
    Node& n = w.nodes[a];
    if (n.op != Op::Attention || n.inputs.size() != 3 || n.attrs.has("views")) continue;
    const DType dt = w.dtypes[a];
    if (!(o.attention_views_all || (dt == DType::f16 && o.attention_views_f16))) continue;
    const Shape &qs = shape(n.inputs[0]), &ks = shape(n.inputs[1]), &vs = shape(n.inputs[2]);
    const size_t r = qs.size();
    if ((r != 3 && r != 4) || ks.size() != r || vs.size() != r) continue;
    bool same_lead = true;
    for (size_t k = 0; k + 2 < r; ++k) same_lead = same_lead && ks[k] == qs[k] && vs[k] == qs[k];
    if (!same_lead) continue;  // grouped heads: not here
    ir::AttentionViews av;
    av.B = r == 4 ? qs[0] : 1;
    av.H = qs[r - 3];
    av.Sq = qs[r - 2];
    av.Sk = ks[r - 2];
    av.D = qs[r - 1];
    av.Dv = vs[r - 1];
    const int64_t N = av.B * av.H;
    if (N == 0 || av.Sq == 0 || av.Sk == 0 || av.D == 0 || av.Dv == 0) continue;
    int bases[3];
    View views[4];
    std::vector<int> chains[3];  // the view nodes from base to operand
    bool any = false;
    for (int k = 0; k < 3; ++k) {
      trace(n.inputs[k], &bases[k], &views[k], &chains[k]);
      if (bases[k] >= 0) any = true;
      else {
        bases[k] = n.inputs[k];
        views[k] = contiguous(shape(n.inputs[k]));
      }
    }
    // q, k and v from one linear whose input is a transpose keeping the last axis (ViT's
    // x.transpose(1, 0) before the qkv product), read by nothing but their chains: the product
    // runs on the untransposed rows and the transpose becomes part of the views (`sink`).
    int sink = -1;
    if (o.attention_views_linear && bases[0] == bases[1] && bases[1] == bases[2] && w.nodes[bases[0]].op == Op::Linear) {
      const int L = bases[0], t0 = w.nodes[L].inputs[0];
      bool ok = w.nodes[t0].op == Op::Transpose && !is_out[L];
      if (ok) {
        auto p = perm_of(t0);
        ok = p.back() == (int64_t)p.size() - 1;
      }
      for (int u : users[L]) {
        bool mine = false;
        for (const auto& c : chains)
          mine = mine || (!c.empty() && c.front() == u);
        ok = ok && mine;
      }
      // and the chains' nodes read by nothing else (they die with the rewrite: none may go on
      // reading the product in its old shape)
      for (const auto& c : chains)
        for (int m : c) {
          ok = ok && !is_out[m];
          for (int u : users[m]) {
            bool inner = u == a;
            for (const auto& c2 : chains) inner = inner || std::find(c2.begin(), c2.end(), u) != c2.end();
            ok = ok && inner;
          }
        }
      if (ok) {
        Shape ls = shape(w.nodes[t0].inputs[0]);
        ls.back() = shape(L).back();
        View vs[3];
        for (int k = 0; k < 3 && ok; ++k) {
          View v = contiguous(ls), r = v;
          auto p = perm_of(t0);
          for (size_t d = 0; d < p.size(); ++d) r.dims[d] = v.dims[p[d]];
          for (int c : chains[k]) ok = ok && apply(r, c);
          vs[k] = r;
        }
        if (ok) {
          sink = L;
          for (int k = 0; k < 3; ++k) views[k] = vs[k];
        }
      }
    }
    // The output, as a view of the tensor the attention writes, built from that tensor's
    // contiguous layout by inverse steps (a reshape to a shape, or a transpose's inverse).
    // ochain: reshapes then a transpose X reading the attention, whose layout it writes; then
    // (ViT's out projection and x.transpose(1, 0) after it) reshapes, a linear L2 reading them,
    // reshapes Rq and a transpose T keeping the last axis: the attention writes its rows in
    // T's order, so that L2's rows come out as T's.
    Shape oshape = qs;
    oshape.back() = av.Dv;
    auto follow = [&](int from, std::vector<int>* chain) {  // reshapes, then the node after them
      int t = from;
      while (!is_out[t] && users[t].size() == 1 && chain->size() < 8) {
        const int u = users[t][0];
        chain->push_back(u);
        if (w.nodes[u].op != Op::Reshape) return u;
        t = u;
      }
      return -1;
    };
    std::vector<int> ochain, rp, rq;
    int X = follow(a, &ochain), L2 = -1, T = -1;
    if (X >= 0 && w.nodes[X].op != Op::Transpose) X = -1;
    if (X < 0) ochain.clear();
    else ochain.pop_back();
    const int P = X >= 0 ? X : a;
    if (o.attention_views_linear) {
      L2 = follow(P, &rp);
      if (L2 >= 0 && !rp.empty()) rp.pop_back();
      if (L2 >= 0 && (w.nodes[L2].op != Op::Linear || w.nodes[L2].inputs[0] != (rp.empty() ? P : rp.back()))) L2 = -1;
      if (L2 >= 0) T = follow(L2, &rq);
      if (T >= 0 && !rq.empty()) rq.pop_back();
      if (T >= 0 && (w.nodes[T].op != Op::Transpose || rq.empty() || perm_of(T).back() != (int64_t)shape(T).size() - 1))
        T = -1;
      if (T < 0) L2 = -1;
    }
    auto out_view = [&](bool with_linear, View* res) {
      View v;
      if (with_linear) {
        Shape z = shape(T);
        z.back() = shape(w.nodes[L2].inputs[0]).back();
        v = contiguous(z);
        auto p = perm_of(T);
        View inv = v;
        for (size_t k = 0; k < p.size(); ++k) inv.dims[p[k]] = v.dims[k];
        v = inv;
        if (!reshape(v, shape(w.nodes[L2].inputs[0]))) return false;
        for (size_t k = rp.size(); k-- > 0;)
          if (!reshape(v, shape(w.nodes[rp[k]].inputs[0]))) return false;
      } else if (X >= 0) {
        v = contiguous(shape(X));
      } else {
        return false;
      }
      if (X >= 0) {
        auto p = perm_of(X);
        View inv = v;
        for (size_t k = 0; k < p.size(); ++k) inv.dims[p[k]] = v.dims[k];
        v = inv;
        for (size_t k = ochain.size(); k-- > 0;)
          if (!reshape(v, shape(w.nodes[ochain[k]].inputs[0]))) return false;
      }
      if (!reshape(v, oshape)) return false;
      Parts pp;
      if (!parts(v, &pp)) return false;
      *res = v;
      return true;
    };
    bool with_linear = L2 >= 0 && out_view(true, &views[3]);
    if (!with_linear && !out_view(false, &views[3])) {
      X = -1;
      views[3] = contiguous(oshape);
    }
    if (with_linear || X >= 0) any = true;
    if (!any) continue;
    // One (B, H) split of the leading axes for all four.
    Parts ps[4];
    bool ok = true;
    for (int k = 0; k < 4 && ok; ++k) ok = parts(views[k], &ps[k]);
    if (!ok) continue;
    int64_t B = -1, H = -1;
    for (int k = 0; k < 4 && ok; ++k)
      if (ps[k].lead.size() == 2) {
        if (B < 0) B = ps[k].lead[0].n, H = ps[k].lead[1].n;
        else ok = B == ps[k].lead[0].n && H == ps[k].lead[1].n;
      }
    if (!ok) continue;
    if (B < 0) B = av.B, H = av.H;
    for (int k = 0; k < 4; ++k) {
      const auto& l = ps[k].lead;
      int64_t sb = 0, sh = 0;
      if (l.size() == 2) sb = l[0].s, sh = l[1].s;
      else if (l.size() == 1) sb = l[0].s * H, sh = l[0].s;
      av.stride[k][0] = B > 1 ? sb : 0;
      av.stride[k][1] = H > 1 ? sh : 0;
      av.stride[k][2] = ps[k].ss;
      if (k < 3) av.off[k] = views[k].off;
    }
    av.B = B;
    av.H = H;
    for (int k = 0; k < 3; ++k)
      for (int64_t x : {av.off[k], av.stride[k][0], av.stride[k][1], av.stride[k][2]}) ok = ok && x % align == 0;
    if (!ok) continue;
    const Shape out = with_linear ? shape(w.nodes[L2].inputs[0]) : X >= 0 ? shape(X) : oshape;
    av.out_shape.assign(out.begin(), out.end());
    ir::Attrs at = n.attrs;
    ir::set_attention_views(at, av);
    n.attrs = at;
    n.inputs = {bases[0], bases[1], bases[2]};
    auto replace = [&](int from, int to) {  // from's readers read `to`
      for (int v : order)
        for (auto& in : w.nodes[v].inputs)
          if (in == from) in = to;
      for (auto& x : w.outputs)
        if (x == from) x = to;
    };
    w.shapes[a] = out;
    if (X >= 0) replace(X, a);
    if (with_linear) {  // the last reshape before T gives T's shape: T's readers read it
      const int R = rq.back();
      const Shape ts = shape(T);
      w.nodes[R].attrs.values["shape"] = std::vector<int64_t>(ts.begin(), ts.end());
      w.shapes[R] = ts;
      replace(T, R);
    }
    if (sink >= 0) {  // the qkv product on the untransposed rows
      const int t0 = w.nodes[sink].inputs[0];
      w.nodes[sink].inputs[0] = w.nodes[t0].inputs[0];
      Shape ls = shape(w.nodes[t0].inputs[0]);
      ls.back() = shape(sink).back();
      w.shapes[sink] = ls;
    }
    st.patterns++;
    folded++;
    index();
  }
  if (folded) st.pattern_kinds += std::string(st.pattern_kinds.empty() ? "" : ", ") + "attention views " + std::to_string(folded);
}

}  // namespace rlx::passes::detail
