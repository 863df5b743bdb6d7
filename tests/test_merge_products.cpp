// Sibling 4-bit products as one (lib/passes/merge_products.h): matmul_nbits nodes reading the same
// activation with the same k, bits and block size become one product over their concatenated
// weights, each part a narrow of it; others stay. Every mode on the CPU, and on Vulkan where the
// build and the machine have it, against a plain double loop over the dequantized weights
// written here (never rlx's own output), with RLX_MERGE_PRODUCTS=0 giving the unmerged plan.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <sstream>

#include "ir/loader.h"
#include "ir/op_registry.h"
#include "passes/merge_products.h"
#include "runtime/session.h"
#include "scoped_env.h"

using namespace rlx;

namespace {

// One product's weights in ONNX Runtime's MatMulNBits layout (4 bits), and their values.
struct Q4 {
  int64_t K, N, bs, kb, zcols;
  bool zp;
  Tensor b, scales, zero_points;
  // w[n][k] = (q - zp) * scale, the dequantized weight (double)
  std::vector<double> w;
};

Q4 make_q4(int64_t K, int64_t N, int64_t bs, bool zp, uint32_t seed) {
  Q4 q{K, N, bs, (K + bs - 1) / bs, 0, zp, {}, {}, {}, {}};
  q.zcols = (q.kb * 4 + 7) / 8;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> sc(0.01f, 0.2f);
  q.b = Tensor({N, q.kb, bs / 2}, DType::u8);
  q.scales = Tensor({N, q.kb});
  auto* b = static_cast<uint8_t*>(q.b.mutable_raw());
  for (int64_t i = 0; i < q.b.numel(); ++i) b[i] = (uint8_t)byte(rng);
  float* s = q.scales.mutable_data();
  for (int64_t i = 0; i < q.scales.numel(); ++i) s[i] = sc(rng);
  uint8_t* z = nullptr;
  if (zp) {
    q.zero_points = Tensor({N, q.zcols}, DType::u8);
    z = static_cast<uint8_t*>(q.zero_points.mutable_raw());
    for (int64_t i = 0; i < q.zero_points.numel(); ++i) z[i] = (uint8_t)byte(rng);
  }
  q.w.assign(N * K, 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t j = k / bs, t = k % bs;
      const uint8_t byte_v = b[(n * q.kb + j) * (bs / 2) + t / 2];
      const int qv = t % 2 ? byte_v >> 4 : byte_v & 15;
      int zv = 8;
      if (z) {
        const uint8_t zb = z[n * q.zcols + j / 2];
        zv = j % 2 ? zb >> 4 : zb & 15;
      }
      q.w[n * K + k] = (qv - zv) * (double)s[n * q.kb + j];
    }
  return q;
}

// y[m][n] = sum_k a[m][k] w[n][k] in double, and the sum of |terms| for the tolerance.
void reference(const std::vector<float>& a, int64_t M, const Q4& q, std::vector<double>& y, std::vector<double>& mag) {
  y.assign(M * q.N, 0), mag.assign(M * q.N, 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < q.N; ++n)
      for (int64_t k = 0; k < q.K; ++k) {
        const double t = (double)a[m * q.K + k] * q.w[n * q.K + k];
        y[m * q.N + n] += t, mag[m * q.N + n] += std::abs(t);
      }
}

std::vector<std::string> backends() {
  std::vector<std::string> r{"cpu"};
  for (const auto& b : backend_names())
    if (b == "vulkan") {
      try {
        if (!list_devices("vulkan").empty()) r.push_back("vulkan");  // as `rlx devices` probes it
      } catch (const std::exception&) {
      }
    }
  static bool said = false;
  if (!said) std::cout << "backends: " << (r.size() > 1 ? "cpu, vulkan" : "cpu (no Vulkan device)") << "\n";
  said = true;
  return r;
}

struct Product {
  std::string id, input;  // the activation it reads: "x" or "x2" (x * 2, another node)
  int64_t N, bs;
  bool zp;
};

std::string nbits_json(const Product& p, int64_t K) {
  std::ostringstream s;
  const int64_t kb = (K + p.bs - 1) / p.bs, zcols = (kb * 4 + 7) / 8;
  s << R"({"id": ")" << p.id << R"(.b", "op": "param", "shape": [)" << p.N << ", " << kb << ", " << p.bs / 2 << R"(], "dtype": "u8"},)"
    << R"({"id": ")" << p.id << R"(.s", "op": "param", "shape": [)" << p.N << ", " << kb << "]},";
  if (p.zp) s << R"({"id": ")" << p.id << R"(.z", "op": "param", "shape": [)" << p.N << ", " << zcols << R"(], "dtype": "u8"},)";
  s << R"({"id": ")" << p.id << R"(", "op": "matmul_nbits", "inputs": [")" << p.input << R"(", ")" << p.id << R"(.b", ")" << p.id
    << R"(.s")" << (p.zp ? ", \"" + p.id + ".z\"" : "") << R"(], "attrs": {"k": )" << K << R"(, "n": )" << p.N
    << R"(, "bits": 4, "block_size": )" << p.bs << "}}";
  return s.str();
}

int count(const ir::Graph& g, ir::Op op) {
  int n = 0;
  for (const auto& node : g.nodes) n += node.op == op;
  return n;
}

// Kernel lines of a plan's text naming the op ("  k12   matmul_nbits ...").
int plan_kernels(const std::string& text, const std::string& op) {
  std::istringstream in(text);
  int n = 0;
  for (std::string l; std::getline(in, l);)
    if (l.rfind("  k", 0) == 0 && l.find(" " + op + " ") != std::string::npos) n++;
  return n;
}

// The graph: `products` over x [rows..., K] or over x2 = x * 2, each an output, and one sum of
// the first two products (a reader of the narrows that is not an output).
struct Case {
  int64_t K;
  std::vector<Product> products;
  int merged_products;  // matmul_nbits nodes left after the merge
  int narrows;          // products that became parts of a merged one
};

void run_case(const Case& c, const Shape& xshape) {
  const int64_t K = c.K, M = shape_numel(xshape) / K;
  std::string nodes = R"({"id": "x", "op": "input", "shape": )";
  nodes += "[";
  for (size_t d = 0; d < xshape.size(); ++d) nodes += (d ? ", " : "") + std::to_string(xshape[d]);
  nodes += R"(]}, {"id": "two", "op": "constant", "shape": [], "value": 2.0}, {"id": "x2", "op": "mul", "inputs": ["x", "two"]})";
  std::string outs = "[";
  std::map<std::string, Tensor> params;
  std::vector<Q4> qs;
  for (size_t i = 0; i < c.products.size(); ++i) {
    const Product& p = c.products[i];
    nodes += "," + nbits_json(p, K);
    outs += (i ? ", \"" : "\"") + p.id + "\"";
    qs.push_back(make_q4(K, p.N, p.bs, p.zp, 100 + (uint32_t)i));
    params[p.id + ".b"] = qs.back().b, params[p.id + ".s"] = qs.back().scales;
    if (p.zp) params[p.id + ".z"] = qs.back().zero_points;
  }
  ASSERT_EQ(c.products[0].N, c.products[1].N);  // the sum reads two parts of one width
  nodes += R"(, {"id": "sum01", "op": "add", "inputs": [")" + c.products[0].id + R"(", ")" + c.products[1].id + R"("]})";
  outs += R"(, "sum01"])";
  auto g = std::make_shared<ir::Graph>(ir::load_graph_text(
      R"({"format": "rlx.graph", "version": 1, "nodes": [)" + nodes + R"(], "outputs": )" + outs + "}", "merge.json"));

  Tensor x(xshape);
  std::vector<float> a(M * K);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& v : a) v = u(rng);
  std::copy(a.begin(), a.end(), x.mutable_data());
  std::vector<float> a2(a);
  for (auto& v : a2) v *= 2;  // exact in f32
  std::vector<std::vector<double>> want(qs.size()), mag(qs.size());
  for (size_t i = 0; i < qs.size(); ++i) reference(c.products[i].input == "x" ? a : a2, M, qs[i], want[i], mag[i]);

  const int total = (int)c.products.size();
  for (const std::string& backend : backends()) {
    auto ex = make_executor(backend);
    for (const char* merge : {"1", "0"}) {
      test::ScopedEnv env;
      env.set("RLX_MERGE_PRODUCTS", merge);
      const bool on = merge[0] == '1';
      SessionOptions so;
      so.disk_cache = false;
      Session s(g, *ex, params, so);
      // the plan: one product per group (all of them with RLX_MERGE_PRODUCTS=0)
      EXPECT_EQ(count(s.graph(), ir::Op::MatmulNbits), on ? c.merged_products : total);
      EXPECT_EQ(count(s.graph(), ir::Op::Narrow), on ? c.narrows : 0)
          << "every part of a merged product is a narrow of it";
      for (Mode mode : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {
        SCOPED_TRACE(backend + " " + mode_name(mode) + " merge " + merge + " x " + shape_str(xshape));
        s.set_input("x", x);
        std::vector<Tensor> out = s.run(mode);
        ASSERT_EQ(out.size(), qs.size() + 1);
        if (mode != Mode::Eager) EXPECT_EQ(plan_kernels(s.plan_text(), "matmul_nbits"), on ? c.merged_products : total) << s.plan_text();
        for (size_t i = 0; i <= qs.size(); ++i) {
          const size_t q = i < qs.size() ? i : 0;
          Shape ws = xshape;
          ws.back() = qs[q].N;
          ASSERT_EQ(out[i].shape(), ws) << i;
          const Tensor y = out[i].to_f32();
          for (int64_t e = 0; e < y.numel(); ++e) {
            double w = want[q][e], m = mag[q][e];
            if (i == qs.size()) w += want[1][e], m += mag[1][e];  // sum01
            ASSERT_NEAR(y.data()[e], w, 2e-5 * m + 1e-6) << "output " << i << " element " << e;
          }
        }
      }
    }
  }
}

// q, k, v (odd widths, k without zero points), gate and up with blocks of 16 (a group of their
// own: they must not join the blocks of 32), and a product over x * 2 (another activation: it
// must not join either).
Case odd_case() {
  return {96,
          {{"q", "x", 13, 32, true}, {"k", "x", 13, 32, false}, {"v", "x", 37, 32, true},
           {"gate", "x", 29, 16, true}, {"up", "x", 11, 16, true}, {"other", "x2", 21, 32, true}},
          3, 5};
}

// Widths of 16 floats (64 bytes, the plan's alignment): with one row every narrow is a view of
// the merged product; K not a multiple of the block (80 = 2.5 blocks of 32).
Case aligned_case() {
  return {80, {{"q", "x", 48, 32, true}, {"k", "x", 48, 32, true}, {"v", "x", 16, 32, false}}, 1, 3};
}

}  // namespace

TEST(MergeProducts, OddWidthsOneRow) { run_case(odd_case(), {1, 96}); }
TEST(MergeProducts, OddWidthsFiveRows) { run_case(odd_case(), {5, 96}); }
TEST(MergeProducts, OddWidthsFiveRowsOfABatch) { run_case(odd_case(), {1, 5, 96}); }
TEST(MergeProducts, AlignedOneRow) { run_case(aligned_case(), {1, 1, 80}); }
TEST(MergeProducts, AlignedFiveRows) { run_case(aligned_case(), {5, 80}); }

// With one row the aligned parts are views (no narrow kernel runs); with five rows each part is
// copied out by a narrow kernel.
TEST(MergeProducts, OneRowPartsAreViews) {
  const Case c = aligned_case();
  for (const Shape& xs : {Shape{1, 80}, Shape{5, 80}}) {
    std::string nodes = R"({"id": "x", "op": "input", "shape": [)" + std::to_string(xs[0]) + R"(, 80]})";
    std::map<std::string, Tensor> params;
    for (const auto& p : c.products) {
      nodes += "," + nbits_json(p, c.K);
      Q4 q = make_q4(c.K, p.N, p.bs, p.zp, 1);
      params[p.id + ".b"] = q.b, params[p.id + ".s"] = q.scales;
      if (p.zp) params[p.id + ".z"] = q.zero_points;
    }
    auto g = std::make_shared<ir::Graph>(ir::load_graph_text(
        R"({"format": "rlx.graph", "version": 1, "nodes": [)" + nodes + R"(], "outputs": ["q", "k", "v"]})", "views.json"));
    auto ex = make_executor("cpu");
    SessionOptions so;
    so.disk_cache = false;
    Session s(g, *ex, params, so);
    Tensor x(xs);
    s.set_input("x", x);
    for (Mode mode : {Mode::Lazy, Mode::Compiled}) {
      s.run(mode);
      EXPECT_EQ(plan_kernels(s.plan_text(), "matmul_nbits"), 1) << s.plan_text();
      EXPECT_EQ(plan_kernels(s.plan_text(), "narrow"), xs[0] == 1 ? 0 : 3) << s.plan_text();
    }
  }
}

// The pass itself: the merged weights are the parts' bytes one after the other (a part without
// zero points gets the default 8 in each nibble), the parts' params leave the map, and a second
// merge over the same tensors reuses the first one's weights.
TEST(MergeProducts, WeightsConcatenatedOnceAndPartsDropped) {
  const Case c = aligned_case();
  std::string nodes = R"({"id": "x", "op": "input", "shape": [1, 80]})";
  std::map<std::string, Tensor> params;
  std::vector<Q4> qs;
  for (const auto& p : c.products) {
    nodes += "," + nbits_json(p, c.K);
    qs.push_back(make_q4(c.K, p.N, p.bs, p.zp, 3));
    params[p.id + ".b"] = qs.back().b, params[p.id + ".s"] = qs.back().scales;
    if (p.zp) params[p.id + ".z"] = qs.back().zero_points;
  }
  auto g = ir::load_graph_text(R"({"format": "rlx.graph", "version": 1, "nodes": [)" + nodes + R"(], "outputs": ["q", "k", "v"]})",
                               "w.json");
  std::map<std::string, Tensor> p1 = params, p2 = params;
  passes::MergeStats st;
  auto g1 = passes::merge_sibling_products(g, p1, &st);
  ASSERT_TRUE(g1);
  EXPECT_EQ(st.groups, 1);
  EXPECT_EQ(st.products, 3);
  ASSERT_EQ(p1.size(), 3u) << "the parts' 8 params give way to the merged 3";
  const ir::Node& m = g1->nodes[g1->nodes[g1->find("q")].inputs[0]];
  ASSERT_EQ(m.op, ir::Op::MatmulNbits);
  EXPECT_EQ(m.attrs.i("n"), 48 + 48 + 16);
  const Tensor& b = p1.at(g1->nodes[m.inputs[1]].id);
  const Tensor& z = p1.at(g1->nodes[m.inputs[3]].id);
  size_t at = 0;
  for (const auto& q : qs) {
    EXPECT_EQ(std::memcmp(static_cast<const uint8_t*>(b.raw()) + at, q.b.raw(), q.b.nbytes()), 0);
    at += q.b.nbytes();
  }
  const auto* zb = static_cast<const uint8_t*>(z.raw());
  EXPECT_EQ(std::memcmp(zb, qs[0].zero_points.raw(), qs[0].zero_points.nbytes()), 0);
  for (int64_t i = 96 * qs[0].zcols; i < z.numel(); ++i) ASSERT_EQ(zb[i], 0x88) << i;  // v: the default zero point
  auto g2 = passes::merge_sibling_products(g, p2, nullptr);
  ASSERT_TRUE(g2);
  const ir::Node& m2 = g2->nodes[g2->nodes[g2->find("q")].inputs[0]];
  EXPECT_EQ(p2.at(g2->nodes[m2.inputs[1]].id).raw(), b.raw()) << "the second merge over the same tensors reuses the first one's weights";
  // nothing to merge (one product over x, one over another activation): no graph, params as they were
  std::map<std::string, Tensor> p3;
  std::string lone = R"({"id": "x", "op": "input", "shape": [1, 80]}, {"id": "two", "op": "constant", "shape": [], "value": 2.0},
      {"id": "x2", "op": "mul", "inputs": ["x", "two"]})";
  for (const Product& p : {Product{"q", "x", 48, 32, true}, Product{"o", "x2", 48, 32, true}}) {
    lone += "," + nbits_json(p, c.K);
    Q4 q = make_q4(c.K, p.N, p.bs, p.zp, 5);
    p3[p.id + ".b"] = q.b, p3[p.id + ".s"] = q.scales, p3[p.id + ".z"] = q.zero_points;
  }
  auto gl = ir::load_graph_text(R"({"format": "rlx.graph", "version": 1, "nodes": [)" + lone + R"(], "outputs": ["q", "o"]})", "l.json");
  EXPECT_EQ(passes::merge_sibling_products(gl, p3, nullptr), nullptr);
  EXPECT_EQ(p3.size(), 6u);
}
