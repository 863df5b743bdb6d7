// rlx quantize's graph rewrite and quantization rules (quantize_weights.h, docs/quantize.md).
#include "passes/quantize_weights.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "ir/op_registry.h"
#include "ir/writer.h"

namespace rlx::passes {

using ir::Op;
using json = nlohmann::json;

namespace {

float rne(float v) { return std::nearbyint(v); }  // the default rounding mode: half to even

}  // namespace

Int8Weight quantize_int8_per_channel(const float* w, int64_t N, int64_t K) {
  Int8Weight r{Tensor({K, N}, DType::i8), Tensor({N}, DType::f32)};
  int8_t* q = r.q.mutable_data<int8_t>();
  float* s = r.scale.mutable_data();
  for (int64_t n = 0; n < N; ++n) {
    const float* row = w + n * K;
    float amax = 0;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::abs(row[k]));
    const float sc = amax / 127.0f;
    s[n] = sc;
    for (int64_t k = 0; k < K; ++k) {
      const float v = sc == 0 ? 0.0f : std::clamp(rne(row[k] / sc), -127.0f, 127.0f);
      q[k * N + n] = (int8_t)v;
    }
  }
  return r;
}

Q4Weight quantize_q4_blocks(const float* w, int64_t N, int64_t K, int64_t bs, bool symmetric) {
  const int64_t kb = K / bs, blob = bs / 2, zcols = (kb + 1) / 2;
  Q4Weight r{Tensor({N, kb, blob}, DType::u8), Tensor({N, kb}, DType::f32), Tensor()};
  if (!symmetric) r.zero_points = Tensor({N, zcols}, DType::u8);
  uint8_t* b = r.blob.mutable_data<uint8_t>();
  float* s = r.scales.mutable_data();
  uint8_t* zp = symmetric ? nullptr : r.zero_points.mutable_data<uint8_t>();
  if (zp) std::fill(zp, zp + N * zcols, 0);
  std::vector<uint8_t> q(bs);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < kb; ++j) {
      const float* v = w + n * K + j * bs;
      float sc = 0, z = 8;
      if (symmetric) {
        float amax = 0;
        for (int64_t k = 0; k < bs; ++k) amax = std::max(amax, std::abs(v[k]));
        sc = amax / 7.0f;
        for (int64_t k = 0; k < bs; ++k) q[k] = (uint8_t)(sc == 0 ? 8.0f : std::clamp(rne(v[k] / sc), -8.0f, 7.0f) + 8.0f);
      } else {
        float lo = 0, hi = 0;
        for (int64_t k = 0; k < bs; ++k) lo = std::min(lo, v[k]), hi = std::max(hi, v[k]);
        sc = (hi - lo) / 15.0f;
        z = sc == 0 ? 0.0f : std::clamp(rne(-lo / sc), 0.0f, 15.0f);
        for (int64_t k = 0; k < bs; ++k) q[k] = (uint8_t)(sc == 0 ? 0.0f : std::clamp(rne(v[k] / sc) + z, 0.0f, 15.0f));
        zp[n * zcols + j / 2] |= (uint8_t)((uint8_t)z << (4 * (j % 2)));
      }
      s[n * kb + j] = sc;
      uint8_t* dst = b + (n * kb + j) * blob;
      for (int64_t k = 0; k < blob; ++k) dst[k] = (uint8_t)(q[2 * k] | (q[2 * k + 1] << 4));
    }
  return r;
}

QuantizedGraph quantize_weights(const ir::Graph& g, const ir::TypedShapes& ts, const std::map<std::string, Tensor>& params,
                                const QuantizeOptions& o) {
  const bool q4 = o.format == QuantFormat::Q4;
  if (q4 && (o.block_size < 16 || (o.block_size & (o.block_size - 1))))
    throw InputError(fmt::format("--block-size {}: must be a power of 2, at least 16 (16, 32, 64, 128, ...)", o.block_size));
  if (o.min_size < 0) throw InputError("--min-size must be >= 0");
  std::set<std::string> names;
  for (const auto& n : g.nodes) {
    names.insert(n.id);
    if (n.op == Op::Param) names.insert(n.param_name);
  }
  for (const auto& e : o.exclude)
    if (!names.count(e)) throw InputError("--exclude " + e + ": the graph has no node or parameter named '" + e + "'");
  auto excluded = [&](const ir::Node& n) {
    return std::find(o.exclude.begin(), o.exclude.end(), n.id) != o.exclude.end() ||
           (n.op == Op::Param && std::find(o.exclude.begin(), o.exclude.end(), n.param_name) != o.exclude.end());
  };

  const int nn = (int)g.nodes.size();
  std::vector<std::vector<int>> users(nn);
  std::vector<char> is_out(nn, 0);
  for (int i = 0; i < nn; ++i)
    for (int k : g.nodes[i].inputs) users[k].push_back(i);
  for (int o2 : g.outputs) is_out[o2] = 1;

  // A consumer the rewrite handles: matmul (not transposing a) or linear, reading the weight as
  // its second operand only, on an f32 activation of a rank the form needs.
  auto consumer_ok = [&](int c, int w, std::string* why) {
    const ir::Node& n = g.nodes[c];
    if (n.op != Op::Matmul && n.op != Op::Linear) return *why = std::string("also read by '") + n.id + "' (" + ir::op_name(n.op) + ")", false;
    if (n.inputs[1] != w || n.inputs[0] == w) return *why = "'" + n.id + "' reads it as its activation", false;
    if (n.op == Op::Matmul && n.attrs.b("transpose_a")) return *why = "'" + n.id + "' transposes its activation", false;
    const int x = n.inputs[0];
    if (ts.dtypes[x] != DType::f32 || ts.dtypes[c] != DType::f32) return *why = "'" + n.id + "' does not compute in f32", false;
    if ((int)ts.shapes[x].size() < (q4 ? 1 : 2)) return *why = "'" + n.id + "' has an activation of rank < 2", false;
    return true;
  };

  QuantizedGraph R;
  json root = json::parse(ir::graph_to_json(g, -1));
  json& jnodes = root["nodes"];
  std::set<std::string> ids(names.begin(), names.end());
  auto uniq = [&](const std::string& base) {
    std::string id = base;
    for (int k = 2; ids.count(id); ++k) id = base + "_" + std::to_string(k);
    ids.insert(id);
    return id;
  };

  std::map<int, json> before;       // node index -> nodes to insert before it
  std::map<int, json> replace;      // node index -> the nodes that take its place (the last keeps its id)
  std::set<int> drop;               // weight nodes no longer read
  json front = json::array();       // shared constants
  std::string c_zero, c_255, c_wz;  // their ids (int8)
  auto param_node = [&](const std::string& id, const std::string& name, const Tensor& t) {
    json p{{"id", id}, {"op", "param"}, {"shape", t.shape()}, {"dtype", dtype_name(t.dtype())}, {"name", name}};
    if (R.params.count(name)) throw InputError("rlx quantize: the parameter name '" + name + "' is already taken in " + g.file);
    R.params[name] = t;
    return p;
  };

  for (int w = 0; w < nn; ++w) {
    const ir::Node& wn = g.nodes[w];
    if (wn.op != Op::Param && wn.op != Op::Constant) continue;
    // Weights: leaves of rank 2 read as the second operand of a matmul or linear.
    bool any = false;
    for (int u : users[w]) {
      const ir::Node& un = g.nodes[u];
      any = any || ((un.op == Op::Matmul || un.op == Op::Linear) && un.inputs.size() > 1 && un.inputs[1] == w);
    }
    if (!any) continue;
    WeightReport rep;
    rep.node = wn.id;
    rep.param = wn.op == Op::Param ? wn.param_name : "";
    rep.shape = ts.shapes[w];
    rep.bytes_before = (int64_t)(shape_numel(rep.shape) * dtype_size(wn.dtype));
    rep.bytes_after = rep.bytes_before;
    std::vector<std::string> cons;
    for (int u : users[w]) cons.push_back(g.nodes[u].id);
    for (size_t k = 0; k < cons.size(); ++k) rep.consumer += (k ? ", " : "") + cons[k];
    rep.consumer_op = ir::op_name(g.nodes[users[w][0]].op);
    std::string why;
    if (wn.dtype != DType::f32) why = std::string("not f32 (") + dtype_name(wn.dtype) + ")";
    else if (rep.shape.size() != 2) why = "not a matrix";
    else if (excluded(wn)) why = "--exclude";
    else if (shape_numel(rep.shape) < o.min_size) why = fmt::format("below --min-size {} elements", o.min_size);
    else if (is_out[w]) why = "an output of the graph";
    else
      for (int u : users[w])
        if (!consumer_ok(u, w, &why)) break;
    // [N, K] (linear, matmul with transpose_b) or [K, N] (matmul)
    auto nk_layout = [&](int u) {
      const ir::Node& un = g.nodes[u];
      return un.op == Op::Linear || (un.op == Op::Matmul && un.attrs.b("transpose_b"));
    };
    const bool nk = nk_layout(users[w][0]);
    if (why.empty())
      for (int u : users[w])
        if (nk_layout(u) != nk) why = "read both transposed and not";
    const int64_t N = nk ? rep.shape[0] : (rep.shape.size() == 2 ? rep.shape[1] : 0);
    const int64_t K = nk ? rep.shape[1] : (rep.shape.size() == 2 ? rep.shape[0] : 0);
    if (why.empty() && q4 && K % o.block_size != 0)
      throw InputError(fmt::format("weight '{}'{} {}: K = {} is not a multiple of --block-size {}; give a block size that divides it, "
                                   "or --exclude {}",
                                   wn.id, rep.param.empty() || rep.param == wn.id ? "" : " (" + rep.param + ")", shape_str(rep.shape), K,
                                   o.block_size, rep.param.empty() ? wn.id : rep.param));
    Tensor tf;
    if (why.empty()) {
      tf = (wn.op == Op::Param ? params.at(wn.id) : wn.constant).to_f32();
      const float* v = tf.data();
      for (int64_t i = 0; i < tf.numel() && why.empty(); ++i)
        if (!std::isfinite(v[i])) why = "holds NaN or infinite values (no scale represents them)";
    }
    if (!why.empty()) {
      rep.kept_why = why;
      R.weights.push_back(rep);
      continue;
    }
    // The f32 values as [N, K].
    std::vector<float> wnk((size_t)(N * K));
    const float* src = tf.data();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) wnk[n * K + k] = nk ? src[n * K + k] : src[k * N + n];
    const std::string base = rep.param.empty() ? wn.id : rep.param;
    json pre = json::array();
    std::string qid, sid, zid;
    if (!q4) {
      Int8Weight q = quantize_int8_per_channel(wnk.data(), N, K);
      qid = uniq(wn.id + "/int8"), sid = uniq(wn.id + "/scale");
      pre.push_back(param_node(qid, base + ".int8", q.q));
      pre.push_back(param_node(sid, base + ".scale", q.scale));
      rep.bytes_after = (int64_t)(q.q.nbytes() + q.scale.nbytes());
      rep.layout = fmt::format("i8 [{}, {}] (K, N) + f32 scales [{}], per output channel, symmetric", K, N, N);
      if (c_zero.empty()) {
        c_zero = uniq("quantize/zero"), c_255 = uniq("quantize/255"), c_wz = uniq("quantize/w_zero_point");
        front.push_back({{"id", c_zero}, {"op", "constant"}, {"shape", json::array()}, {"value", 0.0}});
        front.push_back({{"id", c_255}, {"op", "constant"}, {"shape", json::array()}, {"value", 255.0}});
        front.push_back({{"id", c_wz}, {"op", "constant"}, {"shape", json::array()}, {"dtype", "i8"}, {"value", 0}});
      }
    } else {
      Q4Weight q = quantize_q4_blocks(wnk.data(), N, K, o.block_size, o.symmetric);
      qid = uniq(wn.id + "/q4"), sid = uniq(wn.id + "/q4_scales");
      pre.push_back(param_node(qid, base + ".q4", q.blob));
      pre.push_back(param_node(sid, base + ".q4_scales", q.scales));
      rep.bytes_after = (int64_t)(q.blob.nbytes() + q.scales.nbytes());
      if (!o.symmetric) {
        zid = uniq(wn.id + "/q4_zero_points");
        pre.push_back(param_node(zid, base + ".q4_zero_points", q.zero_points));
        rep.bytes_after += (int64_t)q.zero_points.nbytes();
      }
      rep.layout = fmt::format("u8 [{}, {}, {}] (4-bit blocks of {}) + f32 scales [{}, {}]{}", N, K / o.block_size, o.block_size / 2,
                               o.block_size, N, K / o.block_size,
                               o.symmetric ? ", symmetric" : fmt::format(" + u8 zero points [{}, {}]", N, (K / o.block_size + 1) / 2));
    }
    drop.insert(w);
    bool params_placed = false;
    for (int u : users[w]) {
      const ir::Node& un = g.nodes[u];
      const std::string C = un.id, X = g.nodes[un.inputs[0]].id;
      const bool bias = un.op == Op::Linear && un.inputs.size() > 2;
      json chain = json::array();
      if (!params_placed) chain = pre, params_placed = true;
      const std::string y = bias ? uniq(C + "/product") : C;
      if (!q4) {
        auto id = [&](const char* s) { return uniq(C + "/" + s); };
        const std::string mx = id("x_max"), mn = id("x_min"), hi = id("x_hi"), lo = id("x_lo"), rg = id("x_range"), xs = id("x_scale"),
                          zf = id("x_zp_f"), zn = id("x_zp_neg"), zc = id("x_zp_clamped"), zr = id("x_zp_rounded"),
                          xz = id("x_zero_point"), xq = id("x_q"), mm = id("int_product"), cf = id("int_product_f32"),
                          sc = id("scale");
        // DynamicQuantizeLinear: scale = (max(0, max x) - min(0, min x)) / 255,
        // zero point = saturate(round(0 - min / scale)), x_q = quantize(x, scale, zero point)
        chain.push_back({{"id", mx}, {"op", "max"}, {"inputs", {X}}});
        chain.push_back({{"id", mn}, {"op", "min"}, {"inputs", {X}}});
        chain.push_back({{"id", hi}, {"op", "maximum"}, {"inputs", {mx, c_zero}}});
        chain.push_back({{"id", lo}, {"op", "minimum"}, {"inputs", {mn, c_zero}}});
        chain.push_back({{"id", rg}, {"op", "sub"}, {"inputs", {hi, lo}}});
        chain.push_back({{"id", xs}, {"op", "div"}, {"inputs", {rg, c_255}}});
        chain.push_back({{"id", zf}, {"op", "div"}, {"inputs", {lo, xs}}});
        chain.push_back({{"id", zn}, {"op", "sub"}, {"inputs", {c_zero, zf}}});
        chain.push_back({{"id", zc}, {"op", "minimum"}, {"inputs", {zn, c_255}}});
        chain.push_back({{"id", zr}, {"op", "round"}, {"inputs", {zc}}});
        chain.push_back({{"id", xz}, {"op", "cast"}, {"inputs", {zr}}, {"attrs", {{"dtype", "u8"}}}});
        chain.push_back({{"id", xq}, {"op", "quantize"}, {"inputs", {X, xs, xz}}});
        chain.push_back({{"id", mm}, {"op", "matmul_integer"}, {"inputs", {xq, qid, xz, c_wz}}});
        chain.push_back({{"id", cf}, {"op", "cast"}, {"inputs", {mm}}, {"attrs", {{"dtype", "f32"}}}});
        chain.push_back({{"id", sc}, {"op", "mul"}, {"inputs", {xs, sid}}});
        chain.push_back({{"id", y}, {"op", "mul"}, {"inputs", {cf, sc}}});
      } else {
        json ins = {X, qid, sid};
        if (!zid.empty()) ins.push_back(zid);
        chain.push_back({{"id", y},
                         {"op", "matmul_nbits"},
                         {"inputs", ins},
                         {"attrs", {{"k", K}, {"n", N}, {"bits", 4}, {"block_size", o.block_size}}}});
      }
      if (bias) chain.push_back({{"id", C}, {"op", "add"}, {"inputs", {y, g.nodes[un.inputs[2]].id}}});
      replace[u] = chain;
    }
    R.weights.push_back(rep);
  }
  if (drop.empty()) {
    std::string kept;
    int n = 0;
    for (const auto& r : R.weights)
      if (n++ < 8) kept += fmt::format("\n  {} {}: {}", r.param.empty() ? r.node : r.param, shape_str(r.shape), r.kept_why);
    throw InputError(g.file + ": no weight to quantize" +
                     (R.weights.empty() ? std::string(" (no f32 param or constant matrix feeds a matmul or linear)")
                                        : ": every matrix feeding a matmul or linear stays f32:" + kept +
                                              (o.min_size > 0 ? "\n(--min-size 0 quantizes small weights too)" : "")));
  }

  json out = json::array();
  for (auto& f : front) out.push_back(f);
  for (int i = 0; i < nn; ++i) {
    if (drop.count(i)) continue;
    auto it = replace.find(i);
    if (it == replace.end()) {
      out.push_back(jnodes[i]);
      continue;
    }
    for (auto& n : it->second) out.push_back(n);
  }
  root["nodes"] = out;
  if (root.contains("name")) root["name"] = root["name"].get<std::string>() + (q4 ? "_q4" : "_int8");
  // Every param the new graph reads, by name: the kept ones as they are.
  for (int i = 0; i < nn; ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.op != Op::Param || drop.count(i)) continue;
    if (R.params.count(n.param_name)) throw InputError("rlx quantize: the parameter name '" + n.param_name + "' is already taken in " + g.file);
    R.params[n.param_name] = params.at(n.id);
  }
  R.json = root.dump(1);
  return R;
}

}  // namespace rlx::passes
