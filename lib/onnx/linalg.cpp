// Linear algebra: MatMul, Gemm and Einsum.
#include <set>
#include "onnx/importer.h"

#include <functional>

namespace rlx::onnx {

namespace {

struct Linalg : Importer {
  using Importer::Importer;

  // Det of [..., n, n] for n <= 4 by cofactor expansion along the first row (at most 24
  // products of n entries): exact formulas from narrow, mul, sub and add. Larger matrices are
  // refused (they need a factorisation kernel).
  static constexpr int64_t kMaxDetN = 4;
  void map_Det() {
    const int x = node(0);
    const Shape s = shp(x);
    if (s.size() < 2 || s[s.size() - 1] != s[s.size() - 2]) fail("X must be [..., n, n], got " + shape_str(s));
    if (!is_float(ts_.dtypes[x])) fail("X must hold floating-point values");
    const int64_t n = s.back();
    if (n > kMaxDetN) unsupported("Det of " + std::to_string(n) + "x" + std::to_string(n) + " matrices (rlx computes up to 4x4, by cofactors)");
    Shape batch(s.begin(), s.end() - 2);
    const int r = (int)s.size();
    std::map<std::pair<int64_t, int64_t>, int> entry;
    auto at = [&](int64_t i, int64_t j) {
      auto it = entry.find({i, j});
      if (it != entry.end()) return it->second;
      return entry[{i, j}] = reshape(narrow(narrow(x, r - 2, i, 1), r - 1, j, 1), batch);
    };
    std::map<std::vector<int64_t>, int> memo;  // det of rows k.. over the columns listed
    std::function<int(int64_t, const std::vector<int64_t>&)> det = [&](int64_t row, const std::vector<int64_t>& cols) -> int {
      if (cols.size() == 1) return at(row, cols[0]);
      std::vector<int64_t> key = cols;
      key.push_back(row);
      if (auto it = memo.find(key); it != memo.end()) return it->second;
      int acc = -1;
      for (size_t k = 0; k < cols.size(); ++k) {
        std::vector<int64_t> rest = cols;
        rest.erase(rest.begin() + (long)k);
        int term = emit("mul", {at(row, cols[k]), det(row + 1, rest)});
        acc = acc < 0 ? term : emit(k % 2 ? "sub" : "add", {acc, term});
      }
      return memo[key] = acc;
    };
    if (n == 0) return set_node(0, reshape_out(constant(batch, std::vector<double>((size_t)shape_numel(batch), 1.0), ts_.dtypes[x]), batch));
    std::vector<int64_t> cols;
    for (int64_t j = 0; j < n; ++j) cols.push_back(j);
    set_node(0, reshape_out(det(0, cols), batch));
  }

  void einsum();

  void map_MatMul() {
    int a = node(0), b = node(1);
    Shape sa = shp(a), sb = shp(b);
    if (sa.empty() || sb.empty()) fail("MatMul operands must have rank >= 1");
    bool a1 = sa.size() == 1, b1 = sb.size() == 1;
    if (a1) a = reshape(a, {1, sa[0]});
    if (b1) b = reshape(b, {sb[0], 1});
    int y = emit("matmul", {a, b}, {}, (a1 || b1) ? "" : out_name());
    if (a1 || b1) {
      Shape o = shp(y);
      if (b1) o.pop_back();
      if (a1) o.erase(o.end() - (b1 ? 1 : 2));
      y = emit("reshape", {y}, {{"shape", std::vector<int64_t>(o.begin(), o.end())}}, out_name());
    }
    return set_node(0, y);
  }
  void map_Gemm() {
    int a = node(0), b = node(1);
    bool ta = ai("transA", 0), tb = ai("transB", 0);
    double alpha = af("alpha", 1.0), beta = af("beta", 1.0);
    if (shp(a).size() != 2 || shp(b).size() != 2) fail("Gemm needs 2-D A and B");
    bool has_c = has_in(2) && beta != 0;
    int64_t N = tb ? shp(b)[0] : shp(b)[1];
    if (!ta && tb && alpha == 1 && has_c && beta == 1 && (shp(node(2)) == Shape{N})) {
      return set_node(0, emit("linear", {a, b, node(2)}, {}, out_name()));
    }
    int y = emit("matmul", {a, b}, {{"transpose_a", ta}, {"transpose_b", tb}}, !has_c && alpha == 1 ? out_name() : "");
    if (alpha != 1) y = emit("mul", {y, scalar(alpha)}, {}, !has_c ? out_name() : "");
    if (has_c) {
      int c = node(2);
      if (beta != 1) c = emit("mul", {c, scalar(beta)});
      y = emit("add", {y, c}, {}, out_name());
    }
    return set_node(0, y);
  }
};

// ----------------------------------------------------------------------------------------
// Einsum as sums, transposes, reshapes and batched products: operands are contracted pairwise,
// left to right; each pair becomes one matmul over [batch..., left, contracted] x
// [batch..., contracted, right].
void Linalg::einsum() {
  std::string eq;
  for (char ch : as("equation", "")) if (ch != ' ') eq += ch;
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  {
    std::string lhs = eq.substr(0, arrow), t;
    for (char ch : lhs) {
      if (ch == ',') { terms.push_back(t); t.clear(); } else t += ch;
    }
    terms.push_back(t);
  }
  const size_t n = cur_->inputs.size();
  if (terms.size() != n) fail("the equation has " + std::to_string(terms.size()) + " operand(s), the node " + std::to_string(n));
  // Labels: letters; the ellipsis's dims become the characters '0'..'9', right-aligned.
  std::vector<std::string> labels(n), written(n);  // written: before a diagonal is taken
  std::vector<int> xs(n);
  size_t ell = 0;
  for (size_t k = 0; k < n; ++k) {
    xs[k] = node(k);
    const std::string& t = terms[k];
    const size_t dots = t.find("...");
    const size_t explicit_n = t.size() - (dots == std::string::npos ? 0 : 3);
    const size_t r = shp(xs[k]).size();
    if (r < explicit_n || (dots == std::string::npos && r != explicit_n))
      fail("operand " + std::to_string(k) + " has rank " + std::to_string(r) + ", the term '" + t + "' does not fit it");
    if (dots != std::string::npos) ell = std::max(ell, r - explicit_n);
  }
  if (ell > 10) unsupported("Einsum with more than 10 dimensions under the ellipsis");
  auto ell_labels = [&](size_t cnt) { std::string e; for (size_t j = ell - cnt; j < ell; ++j) e += (char)('0' + j); return e; };
  for (size_t k = 0; k < n; ++k) {
    const std::string& t = terms[k];
    const size_t dots = t.find("...");
    const std::string given = dots == std::string::npos ? t : t.substr(0, dots) + t.substr(dots + 3);
    for (char ch : given)
      if (!std::isalpha((unsigned char)ch)) fail(std::string("the equation has an invalid index '") + ch + "' (indices are letters)");
    std::string l = dots == std::string::npos ? t : t.substr(0, dots) + ell_labels(shp(xs[k]).size() - (t.size() - 3)) + t.substr(dots + 3);
    written[k] = l;
    // A repeated index within one operand is its diagonal: the two axes moved last, flattened
    // to d * d and sliced with step d + 1, leaving the index once (last).
    for (size_t a = 0; a < l.size(); ++a) {
      const size_t b = l.find(l[a], a + 1);
      if (b == std::string::npos) continue;
      const Shape s = shp(xs[k]);
      const int64_t d = s[a];
      if (s[b] != d) fail(std::string("index '") + l[a] + "' has sizes " + std::to_string(d) + " and " + std::to_string(s[b]) + " within operand " + std::to_string(k));
      std::vector<int64_t> perm;
      Shape flat;
      std::string rest;
      for (size_t q = 0; q < l.size(); ++q)
        if (q != a && q != b) perm.push_back((int64_t)q), flat.push_back(s[q]), rest += l[q];
      perm.push_back((int64_t)a);
      perm.push_back((int64_t)b);
      flat.push_back(d * d);
      const int64_t ax = (int64_t)flat.size() - 1;
      int v = reshape(emit("transpose", {xs[k]}, {{"perm", perm}}), flat);
      xs[k] = emit("slice", {v}, {{"starts", std::vector<int64_t>{0}}, {"ends", std::vector<int64_t>{d * d}}, {"axes", std::vector<int64_t>{ax}},
                                  {"steps", std::vector<int64_t>{d + 1}}});
      l = rest + l[a];
      a = (size_t)-1;  // again from the start: the labels moved
    }
    labels[k] = l;
  }
  std::string out;
  if (arrow != std::string::npos) {
    std::string o = eq.substr(arrow + 2);
    const size_t dots = o.find("...");
    for (char ch : dots == std::string::npos ? o : o.substr(0, dots) + o.substr(dots + 3))
      if (!std::isalpha((unsigned char)ch)) fail(std::string("the equation has an invalid output index '") + ch + "' (indices are letters)");
    out = dots == std::string::npos ? o : o.substr(0, dots) + ell_labels(ell) + o.substr(dots + 3);
  } else {  // implicit: the ellipsis, then the indices that appear once, in alphabetical order
    std::map<char, int> count;
    for (const auto& l : written) for (char ch : l) count[ch]++;
    out = ell_labels(ell);
    for (auto [ch, c] : count) if (c == 1 && !std::isdigit((unsigned char)ch)) out += ch;
  }
  std::map<char, int64_t> size;
  for (size_t k = 0; k < n; ++k)
    for (size_t a = 0; a < labels[k].size(); ++a) {
      const int64_t d = shp(xs[k])[a];
      auto [it, fresh] = size.emplace(labels[k][a], d);
      if (!fresh && it->second != d) {
        if (it->second == 1) it->second = d;
        else if (d != 1) fail(std::string("index '") + labels[k][a] + "' has sizes " + std::to_string(it->second) + " and " + std::to_string(d));
      }
    }
  for (char ch : out) if (!size.count(ch)) fail(std::string("the output index '") + ch + "' appears in no operand");
  auto has = [](const std::string& l, char ch) { return l.find(ch) != std::string::npos; };
  // Sums out the labels of x that `keep` does not list; returns x and its labels.
  auto sum_out = [&](int x, std::string l, const std::string& keep) {
    std::vector<int64_t> axes;
    std::string kept;
    for (size_t a = 0; a < l.size(); ++a) {
      if (has(keep, l[a])) kept += l[a];
      else axes.push_back((int64_t)a);
    }
    if (!axes.empty()) x = emit("sum", {x}, {{"axes", axes}, {"keepdims", false}});
    return std::make_pair(x, kept);
  };
  auto sizes = [&](const std::string& l) {
    Shape s;
    for (char ch : l) s.push_back(size[ch]);
    return s;
  };
  auto permute = [&](int x, const std::string& from, const std::string& to) {
    if (from == to) return x;
    std::vector<int64_t> perm;
    for (char ch : to) perm.push_back((int64_t)from.find(ch));
    return emit("transpose", {x}, {{"perm", perm}});
  };
  int x = xs[0];
  std::string lx = labels[0];
  for (size_t k = 1; k <= n; ++k) {
    // Labels still needed after this step: the output's and the remaining operands'.
    std::string later = out;
    for (size_t j = k + 1; j < n; ++j) later += labels[j];
    if (k == n) {  // one operand left: sum and order
      auto [y, ly] = sum_out(x, lx, out);
      return set_node(0, reshape_out(permute(y, ly, out), sizes(out)));
    }
    auto [a, la] = sum_out(x, lx, later + labels[k]);
    auto [b, lb] = sum_out(xs[k], labels[k], later + la);
    std::string batch, left, right, con;
    for (char ch : la) (has(lb, ch) ? (has(later, ch) ? batch : con) : left) += ch;
    for (char ch : lb) if (!has(la, ch)) right += ch;
    auto prod = [&](const std::string& l) { int64_t p = 1; for (char ch : l) p *= size[ch]; return p; };
    auto dims = [&](int v, const std::string& lv, const std::string& ls) {  // v's own sizes of labels ls
      std::vector<int64_t> r;
      for (char ch : ls) r.push_back(shp(v)[lv.find(ch)]);
      return r;
    };
    for (char ch : con)
      if (shp(a)[la.find(ch)] != shp(b)[lb.find(ch)]) unsupported(std::string("Einsum broadcasting the summed index '") + ch + "'");
    std::vector<int64_t> sa = dims(a, la, batch), sb = dims(b, lb, batch);
    sa.push_back(prod(left));
    sa.push_back(prod(con));
    sb.push_back(prod(con));
    sb.push_back(prod(right));
    int am = emit("reshape", {permute(a, la, batch + left + con)}, {{"shape", sa}});
    int bm = emit("reshape", {permute(b, lb, batch + con + right)}, {{"shape", sb}});
    int y = emit("matmul", {am, bm});
    lx = batch + left + right;
    x = reshape(y, sizes(lx));
  }
}

}  // namespace

void linalg_ops(std::vector<OpDef>& t) {
  using F = Linalg;
  t.insert(t.end(), {
      {"MatMul", "", 1, map<&F::map_MatMul>, nullptr, "matmul (1-D operands reshaped)", "matmul", ""},
      {"Einsum", "", 1, map<&F::einsum>, nullptr, "sum, transpose, reshape, matmul; slice for a diagonal", "sum transpose matmul", "operands contracted pairwise; ellipsis and implicit output; a repeated index within one operand as its diagonal (transpose, reshape, strided slice)"},
      {"Gemm", "", 1, map<&F::map_Gemm>, nullptr, "linear, or matmul + mul + add", "matmul", ""},
      {"Det", "", 11, map<&F::map_Det>, nullptr, "narrow, mul, sub, add (cofactor expansion)", "mul", "matrices up to 4x4"},
  });
}

}  // namespace rlx::onnx
