#include "passes/merge_products.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>

#include "ir/op_registry.h"

namespace rlx::passes {

using ir::Node;
using ir::Op;

bool merge_products_enabled() {
  const char* e = std::getenv("RLX_MERGE_PRODUCTS");
  return !(e && std::string(e) == "0");
}

namespace {

// A leaf's value: a constant's tensor or a bound param's; null for anything else.
const Tensor* leaf_value(const ir::Graph& g, int i, const std::map<std::string, Tensor>& params) {
  const Node& n = g.nodes[i];
  if (n.op == Op::Constant) return n.constant.defined() ? &n.constant : nullptr;
  if (n.op == Op::Param) {
    auto it = params.find(n.id);
    return it == params.end() ? nullptr : &it->second;
  }
  return nullptr;
}

// One product of a group, its weights' values as the session would upload them.
struct Part {
  int node;
  int64_t n;
  Tensor b, scales, zero_points;  // zero_points: when has_z (else the default 2^(bits-1))
  bool has_z = false;
};

// The group: same activation node, k, bits, block size, accuracy level and scale dtype.
using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int>;

// The part of node i, or nullopt where its weights are not params/constants of the op's layout
// (shape inference reports a wrong layout; such a node simply stays as it is).
std::optional<Part> part_of(const ir::Graph& g, int i, const std::map<std::string, Tensor>& params, Key* key) {
  const Node& nd = g.nodes[i];
  if (nd.op != Op::MatmulNbits || nd.inputs.size() < 3 || nd.inputs.size() > 4) return std::nullopt;
  if (!nd.attrs.has("k") || !nd.attrs.has("n") || !nd.attrs.has("block_size")) return std::nullopt;
  const int64_t K = nd.attrs.i("k"), N = nd.attrs.i("n");
  const int64_t bits = nd.attrs.has("bits") ? nd.attrs.i("bits") : 4, bs = nd.attrs.i("block_size");
  const int64_t acc = nd.attrs.has("accuracy_level") ? nd.attrs.i("accuracy_level") : 0;
  if (K <= 0 || N <= 0 || (bits != 4 && bits != 8) || bs < 16 || (bs & (bs - 1))) return std::nullopt;
  const int64_t kb = (K + bs - 1) / bs, blob = bs * bits / 8, zcols = (kb * bits + 7) / 8;
  const Tensor* b = leaf_value(g, nd.inputs[1], params);
  const Tensor* s = leaf_value(g, nd.inputs[2], params);
  const Tensor* z = nd.inputs.size() == 4 ? leaf_value(g, nd.inputs[3], params) : nullptr;
  if (!b || !s || (nd.inputs.size() == 4 && !z)) return std::nullopt;
  const DType sdt = g.nodes[nd.inputs[2]].dtype;  // the session uploads the scales in the node's dtype
  if (b->dtype() != DType::u8 || g.nodes[nd.inputs[1]].dtype != DType::u8 || b->shape() != Shape{N, kb, blob}) return std::nullopt;
  if (!is_float(sdt) || !is_float(s->dtype()) || s->numel() != N * kb) return std::nullopt;
  if (z && (z->dtype() != DType::u8 || g.nodes[nd.inputs[3]].dtype != DType::u8 || z->numel() != N * zcols)) return std::nullopt;
  *key = {nd.inputs[0], K, bits, bs, acc, (int)sdt};
  Part p{i, N, *b, s->dtype() == sdt ? *s : s->astype(sdt), z ? *z : Tensor(), z != nullptr};
  return p;
}

// The merged weights of a group, remembered while the parts' storage lives (below).
struct MergedWeights {
  std::vector<std::weak_ptr<const void>> sources;
  Tensor b, scales, zero_points;
  bool has_z = false;
};

std::mutex memo_mu;
std::map<std::string, MergedWeights> memo;

// Concatenates the parts' bytes along n. Parts without zero points get the default one (2^(bits-1)
// in every nibble or byte) where another part has them.
MergedWeights concat_weights(const std::vector<Part>& parts, int64_t kb, int64_t blob, int64_t zcols, int64_t bits, DType sdt) {
  int64_t total = 0;
  bool any_z = false;
  for (const auto& p : parts) total += p.n, any_z = any_z || p.has_z;
  MergedWeights m;
  m.b = Tensor({total, kb, blob}, DType::u8);
  m.scales = Tensor({total, kb}, sdt);
  m.has_z = any_z;
  if (any_z) m.zero_points = Tensor({total, zcols}, DType::u8);
  auto* b = static_cast<uint8_t*>(m.b.mutable_raw());
  auto* s = static_cast<uint8_t*>(m.scales.mutable_raw());
  auto* z = any_z ? static_cast<uint8_t*>(m.zero_points.mutable_raw()) : nullptr;
  const uint8_t dflt = bits == 4 ? 0x88 : 0x80;
  for (const auto& p : parts) {
    std::memcpy(b, p.b.raw(), p.b.nbytes()), b += p.b.nbytes();
    std::memcpy(s, p.scales.raw(), p.scales.nbytes()), s += p.scales.nbytes();
    if (z) {
      const size_t zb = (size_t)(p.n * zcols);
      if (p.has_z) std::memcpy(z, p.zero_points.raw(), zb);
      else std::memset(z, dflt, zb);
      z += zb;
    }
  }
  return m;
}

MergedWeights merged_weights(const std::vector<Part>& parts, int64_t kb, int64_t blob, int64_t zcols, int64_t bits, DType sdt) {
  std::string key = std::to_string((int)sdt) + "|" + std::to_string(bits) + "|";
  for (const auto& p : parts)
    for (const Tensor* t : {&p.b, &p.scales, &p.zero_points})
      key += std::to_string((uintptr_t)t->raw()) + ":" + std::to_string(t->nbytes()) + ",";
  std::lock_guard<std::mutex> lock(memo_mu);
  for (auto it = memo.begin(); it != memo.end();) {  // forget the merges whose sources are gone
    bool gone = false;
    for (const auto& w : it->second.sources) gone = gone || w.expired();
    it = gone ? memo.erase(it) : std::next(it);
  }
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  MergedWeights m = concat_weights(parts, kb, blob, zcols, bits, sdt);
  for (const auto& p : parts)
    for (const Tensor* t : {&p.b, &p.scales, &p.zero_points})
      if (t->numel() > 0) {
        if (!t->keepalive()) return m;  // storage of unknown life: not remembered
        m.sources.push_back(t->keepalive());
      }
  memo.emplace(key, m);
  return m;
}

}  // namespace

std::shared_ptr<const ir::Graph> merge_sibling_products(const ir::Graph& g, std::map<std::string, Tensor>& params,
                                                        MergeStats* stats) {
  if (g.resize || g.respecialize) return nullptr;
  for (const auto& n : g.nodes)
    if (ir::op_info(n.op).category == ir::Category::Control) return nullptr;
  std::map<Key, std::vector<Part>> groups;
  std::vector<Key> order;  // groups by their first product's position
  for (int i = 0; i < (int)g.nodes.size(); ++i) {
    Key key;
    auto p = part_of(g, i, params, &key);
    if (!p) continue;
    auto [it, fresh] = groups.emplace(key, std::vector<Part>{});
    if (fresh) order.push_back(key);
    it->second.push_back(std::move(*p));
  }
  std::vector<int> group_of(g.nodes.size(), -1);  // index into `merged` for every member
  std::vector<const std::vector<Part>*> merged;
  std::vector<Key> merged_keys;
  for (const Key& key : order) {
    const auto& parts = groups[key];
    if (parts.size() < 2) continue;
    for (const auto& p : parts) group_of[p.node] = (int)merged.size();
    merged.push_back(&parts);
    merged_keys.push_back(key);
  }
  if (merged.empty()) return nullptr;

  // The weight leaves that only merged products read go (nodes and params).
  std::vector<int> readers(g.nodes.size(), 0);
  for (int i = 0; i < (int)g.nodes.size(); ++i)
    if (group_of[i] < 0)
      for (int u : g.nodes[i].inputs) readers[u]++;
    else
      readers[g.nodes[i].inputs[0]]++;
  for (int o : g.outputs) readers[o]++;
  std::set<int> dropped;
  for (int i = 0; i < (int)g.nodes.size(); ++i)
    if (group_of[i] >= 0)
      for (size_t k = 1; k < g.nodes[i].inputs.size(); ++k)
        if (readers[g.nodes[i].inputs[k]] == 0) dropped.insert(g.nodes[i].inputs[k]);

  auto out = std::make_shared<ir::Graph>();
  out->file = g.file;
  out->name = g.name;
  out->sizes = g.sizes;
  auto fresh_id = [&](const std::string& want) {
    std::string id = want;
    for (int k = 2; g.index.count(id) || out->index.count(id); ++k) id = want + "#" + std::to_string(k);
    return id;
  };
  auto push = [&](Node n) {
    out->index[n.id] = (int)out->nodes.size();
    out->nodes.push_back(std::move(n));
    return (int)out->nodes.size() - 1;
  };
  std::vector<int> idx(g.nodes.size(), -1), merged_at(merged.size(), -1);
  std::vector<int64_t> start(g.nodes.size(), 0);
  MergeStats st;
  for (int i = 0; i < (int)g.nodes.size(); ++i) {
    if (dropped.count(i)) continue;
    const Node& n = g.nodes[i];
    const int grp = group_of[i];
    if (grp >= 0 && merged_at[grp] < 0) {  // the group's first product: the merged one goes here
      const auto& parts = *merged[grp];
      const auto& [a, K, bits, bs, acc, sdt_int] = merged_keys[grp];
      const int64_t kb = (K + bs - 1) / bs, blob = bs * bits / 8, zcols = (kb * bits + 7) / 8;
      MergedWeights w = merged_weights(parts, kb, blob, zcols, bits, (DType)sdt_int);
      std::string id = "merged:", ns;
      int64_t total = 0;
      for (const auto& p : parts) {
        id += (total ? "," : "") + g.nodes[p.node].id;
        ns += (total ? "+" : "") + std::to_string(p.n);
        start[p.node] = total;
        total += p.n;
      }
      id = fresh_id(id);
      std::vector<int> ins{idx[a]};
      const char* names[] = {".b", ".scales", ".zero_points"};
      const Tensor* vals[] = {&w.b, &w.scales, &w.zero_points};
      for (int k = 0; k < 3; ++k) {
        if (k == 2 && !w.has_z) continue;
        Node leaf;
        leaf.id = fresh_id(id + names[k]);
        leaf.op = Op::Param;
        leaf.param_name = leaf.id;
        leaf.dtype = vals[k]->dtype();
        for (auto d : vals[k]->shape()) leaf.decl_shape.push_back({d, ""});
        leaf.has_decl_shape = true;
        params[leaf.id] = *vals[k];
        ins.push_back(push(std::move(leaf)));
      }
      Node m;
      m.id = id;
      m.op = Op::MatmulNbits;
      m.inputs = ins;
      m.attrs = n.attrs;
      m.attrs.values["n"] = total;
      m.dtype = n.dtype;
      m.json_index = n.json_index;
      merged_at[grp] = push(std::move(m));
      st.groups++;
      st.products += (int)parts.size();
      st.text += id + ": " + std::to_string(parts.size()) + " products, n " + ns + " -> " + std::to_string(total) + "\n";
    }
    Node c = n;
    if (grp >= 0) {  // the product becomes its columns of the merged one, under its own id
      c.op = Op::Narrow;
      c.inputs = {merged_at[grp]};
      c.attrs = {};
      c.attrs.values["axis"] = int64_t(-1);
      c.attrs.values["start"] = start[i];
      c.attrs.values["length"] = n.attrs.i("n");
    } else {
      for (auto& u : c.inputs) u = idx[u];
    }
    idx[i] = push(std::move(c));
  }
  for (int o : g.outputs) out->outputs.push_back(idx[o]);
  for (int d : dropped) {
    const Node& n = g.nodes[d];
    if (n.op == Op::Param) params.erase(n.id);
  }
  if (stats) *stats = st;
  return out;
}

}  // namespace rlx::passes
