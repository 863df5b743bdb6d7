// Text features: TfIdfVectorizer over integer token ids (scikit-learn's and ONNX's n-gram
// counter), built from registry ops: for each n-gram length n and skip s, the n shifted views of
// the tokens are compared with the pool's n-grams, and the matches summed over positions; a
// constant one-hot matrix then places each pool entry's count at its output index. (String
// tokens are refused: rlx tensors hold numbers.)
#include "onnx/importer.h"

namespace rlx::onnx {

namespace {

struct Text : Importer {
  using Importer::Importer;

  void map_TfIdfVectorizer() {
    const int x = node(0);
    const Shape xs = shp(x);
    if (!is_integer(ts_.dtypes[x])) fail("the input must hold integer token ids (string tokens are not supported)");
    if (xs.size() != 1 && xs.size() != 2) fail("the input must be [C] or [N, C], got " + shape_str(xs));
    if (attr("pool_strings", kAttrStrings)) unsupported("pool_strings (string tokens): rlx tensors hold numbers");
    const int64_t min_n = ai("min_gram_length", 0), max_n = ai("max_gram_length", 0), max_skip = ai("max_skip_count", 0);
    const std::string mode = as("mode", "");
    if (mode != "TF" && mode != "IDF" && mode != "TFIDF") fail("mode must be TF, IDF or TFIDF, it is '" + mode + "'");
    const std::vector<int64_t> pool = aints("pool_int64s").value_or(std::vector<int64_t>{});
    const std::vector<int64_t> counts = aints("ngram_counts").value_or(std::vector<int64_t>{});
    const std::vector<int64_t> indexes = aints("ngram_indexes").value_or(std::vector<int64_t>{});
    std::vector<double> weights;
    if (auto a = attr("weights", kAttrFloats)) weights = a->floats;
    if (min_n < 1 || max_n < min_n) fail("min_gram_length and max_gram_length must satisfy 1 <= min <= max");
    if (max_skip < 0) fail("max_skip_count must not be negative");
    if ((int64_t)counts.size() < max_n) fail("ngram_counts needs an entry per n-gram length up to max_gram_length");
    // Pool entries per length n: [counts[n-1], counts[n] or the pool's end), n tokens each.
    std::vector<int64_t> start(max_n + 1);
    int64_t entries = 0;
    for (int64_t n = 1; n <= max_n; ++n) {
      const int64_t b = counts[n - 1], e = n < (int64_t)counts.size() ? counts[n] : (int64_t)pool.size();
      if (b < 0 || e < b || e > (int64_t)pool.size() || (e - b) % n != 0)
        fail("ngram_counts does not split pool_int64s into whole " + std::to_string(n) + "-grams");
      start[n - 1] = entries;
      entries += (e - b) / n;
    }
    start[max_n] = entries;
    if ((int64_t)indexes.size() != entries) fail("ngram_indexes has " + std::to_string(indexes.size()) + " entries, the pool " + std::to_string(entries));
    if (!weights.empty() && weights.size() != indexes.size()) fail("weights must have one entry per pool n-gram");
    int64_t width = 0;
    for (int64_t i : indexes) {
      if (i < 0 || i > (int64_t(1) << 24)) fail("ngram_indexes holds " + std::to_string(i));
      width = std::max(width, i + 1);
    }
    const bool batch = xs.size() == 2;
    const int64_t B = batch ? xs[0] : 1, C = xs.back();
    const DType dt = ts_.dtypes[x];
    const int x2 = reshape(x, {B, C});
    // counts[B, entries] (f32), per n-gram length, summed over the skips
    std::vector<int> per_len;
    for (int64_t n = min_n; n <= max_n; ++n) {
      const int64_t P = start[n] - start[n - 1];
      if (P == 0) continue;
      int total = -1;
      for (int64_t s = 0; s <= (n == 1 ? 0 : max_skip); ++s) {
        const int64_t span = (n - 1) * (s + 1), L = C - span;
        if (L <= 0) break;
        int match = -1;
        for (int64_t k = 0; k < n; ++k) {
          std::vector<double> tok(P);
          for (int64_t p = 0; p < P; ++p) tok[p] = (double)pool[counts[n - 1] + p * n + k];
          int view = reshape(narrow(x2, 1, k * (s + 1), L), {B, L, 1});
          int eq = emit("equal", {view, constant({1, 1, P}, tok, dt)});
          match = match < 0 ? eq : emit("logical_and", {match, eq});
        }
        int c = emit("sum", {cast(match, DType::f32)}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", false}});
        total = total < 0 ? c : emit("add", {total, c});
      }
      if (total < 0) total = constant({B, P}, std::vector<double>((size_t)(B * P), 0.0), DType::f32);
      per_len.push_back(total);
      // the entries of lengths below min_n are absent from per_len: their rows are skipped below
    }
    // One-hot placement [entries used, width], scaled by the weights (IDF, TFIDF).
    std::vector<double> place;
    int64_t rows = 0;
    for (int64_t n = min_n; n <= max_n; ++n)
      for (int64_t e = start[n - 1]; e < start[n]; ++e) {
        std::vector<double> row((size_t)width, 0.0);
        row[(size_t)indexes[e]] = mode == "TF" || weights.empty() ? 1.0 : weights[e];
        place.insert(place.end(), row.begin(), row.end());
        ++rows;
      }
    int y;
    if (rows == 0) {
      y = constant({B, width}, std::vector<double>((size_t)(B * width), 0.0), DType::f32);
    } else {
      int cnt = per_len.size() == 1 ? per_len[0] : concat_many(per_len, 1);
      if (mode == "IDF") cnt = cast(emit("greater", {cnt, scalar(0)}), DType::f32);
      y = emit("matmul", {cnt, constant({rows, width}, place, DType::f32)});
    }
    set_node(0, reshape_out(y, batch ? Shape{B, width} : Shape{width}));
  }
};

}  // namespace

void text_ops(std::vector<OpDef>& t) {
  using F = Text;
  t.insert(t.end(), {
      {"TfIdfVectorizer", "", 9, map<&F::map_TfIdfVectorizer>, nullptr, "narrow, equal, logical_and, sum, matmul",
       "equal logical_and sum matmul", "integer tokens (pool_int64s); modes TF, IDF, TFIDF; skips 0..max_skip_count"},
  });
}

}  // namespace rlx::onnx
