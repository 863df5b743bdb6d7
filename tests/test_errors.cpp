// Robustness: hostile and broken inputs never crash rlx, and nothing half-written is left.
//
// Two layers:
//  - library level: every prefix of a .npy / safetensors file, sizes from files checked before
//    anything is allocated, graph limits and integer attribute ranges, fuzz regressions;
//  - command level: the real `rlx` binary (RLX_BINARY) is run as a subprocess with stdout and
//    stderr captured separately; each case asserts the exit code AND a key phrase of the message.
// docs/errors.md lists every class of bad input with the message a user sees and the test here
// that backs it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <atomic>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io/spec.h"
#include "ir/loader.h"
#include "ir/op_registry.h"
#include "passes/memory_plan.h"
#include "proc_util.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using rlx::DType;
using rlx::Error;
using rlx::InputError;
using rlx::RuntimeError;
using rlx::Shape;
using rlx::Tensor;
using Bytes = std::vector<uint8_t>;

// ---------------------------------------------------------------- helpers

std::string src(const std::string& rel) { return std::string(RLX_SOURCE_DIR) + "/" + rel; }

#define EXPECT_HAS(text, phrase) EXPECT_TRUE(has(text, phrase)) << "expected \"" << (phrase) << "\" in:\n" << (text)

Bytes slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

void spit(const std::string& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), (std::streamsize)n);
}
void spit(const std::string& path, const std::string& s) { spit(path, s.data(), s.size()); }
void spit(const std::string& path, const Bytes& b) { spit(path, b.data(), b.size()); }

void append_u64(Bytes& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back((uint8_t)(v >> (8 * i)));
}

// A safetensors file from a raw header text and data bytes (no validation: for hostile files).
Bytes raw_safetensors(const std::string& header, const Bytes& data = {}, std::optional<uint64_t> claimed_len = {}) {
  Bytes b;
  append_u64(b, claimed_len.value_or(header.size()));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// A .npy file from a raw header dict (padded like NumPy) and data bytes.
Bytes raw_npy(const std::string& dict, const Bytes& data = {}) {
  std::string h = dict;
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  Bytes b = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(h.size() & 0xff), (uint8_t)(h.size() >> 8)};
  b.insert(b.end(), h.begin(), h.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// Runs `f`, expecting an rlx::Error of exit code `code`; returns its message.
std::string error_of(const std::function<void()>& f, int code = rlx::kExitBadInput) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), code) << e.what();
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "escaped a non-rlx exception " << typeid(e).name() << ": " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error was raised";
  return "";
}

std::string graph_with(const std::string& nodes, const std::string& outputs = "[\"y\"]") {
  return R"({"format": "rlx.graph", "version": 1, "nodes": [)" + nodes + R"(], "outputs": )" + outputs + "}";
}

// Loads, then (for symbolic graphs) binds every symbol to 2 and infers shapes, as a run would.
void load_and_infer(const std::string& text, const rlx::ir::LoadLimits& limits = {}) {
  rlx::ir::Graph g = rlx::ir::load_graph_text(text, "t.json", limits);
  std::map<std::string, Shape> in;
  for (const auto& n : g.nodes)
    if (n.op == rlx::ir::Op::Input) {
      Shape s;
      for (const auto& d : n.decl_shape) s.push_back(d.symbol.empty() ? d.value : 2);
      in[n.id] = s;
    }
  rlx::ir::infer_shapes(g, in);
}

// ---------------------------------------------------------------- running the binary

using rlx::test::has;
using rlx::test::Proc;
using rlx::test::ProcOptions;
using rlx::test::run_rlx;
using rlx::test::show;

// A fresh directory per test, removed afterwards.
class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "rlx_errors_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string write(const std::string& name, const std::string& text) {
    spit(path(name), text);
    return path(name);
  }
  std::string write(const std::string& name, const Bytes& b) {
    spit(path(name), b);
    return path(name);
  }
  // Expects exit `code` and every phrase in stderr; an rlx crash or sanitizer report fails here.
  Proc expect_fail(const std::vector<std::string>& args, int code, const std::vector<std::string>& phrases,
                   const ProcOptions& o = {}) {
    Proc p = run_rlx(args, o);
    EXPECT_EQ(p.code, code) << show(p);
    for (const auto& ph : phrases) EXPECT_HAS(p.err, ph);
    EXPECT_TRUE(has(p.err, "error: ")) << show(p);
    EXPECT_FALSE(has(p.err, "AddressSanitizer") || has(p.err, "runtime error:") || has(p.err, "LeakSanitizer"))
        << show(p);
    return p;
  }
  // Temporary files left by atomic writes (.NAME.tmp.XXXXXX) in `d`.
  std::vector<std::string> temporaries(const std::string& d) const {
    std::vector<std::string> r;
    for (const auto& e : fs::directory_iterator(d)) {
      std::string n = e.path().filename().string();
      if (n.size() > 1 && n[0] == '.' && has(n, ".tmp.")) r.push_back(n);
    }
    return r;
  }
  std::string dir_;
};

// Graphs used by the command-level tests.
const char* kEmbGraph = R"({"format": "rlx.graph", "version": 1, "nodes": [
  {"id": "tab", "op": "param", "shape": [4, 2]},
  {"id": "idx", "op": "input", "shape": [3], "dtype": "i32"},
  {"id": "emb", "op": "embedding", "inputs": ["tab", "idx"]}], "outputs": ["emb"]})";

const char* kSymGraph = R"({"format": "rlx.graph", "version": 1, "nodes": [
  {"id": "x", "op": "input", "shape": ["batch", 3]},
  {"id": "z", "op": "input", "shape": ["batch", 3]},
  {"id": "w", "op": "param", "shape": [4, 3]},
  {"id": "s", "op": "add", "inputs": ["x", "z"]},
  {"id": "y", "op": "linear", "inputs": ["s", "w"]}], "outputs": ["y", "s"]})";

const char* kThreeParams = R"({"format": "rlx.graph", "version": 1, "nodes": [
  {"id": "x", "op": "input", "shape": [2, 3]},
  {"id": "w1", "op": "param", "shape": [3, 3]},
  {"id": "w2", "op": "param", "shape": [3, 3], "name": "layer.w2"},
  {"id": "b", "op": "param", "shape": [3]},
  {"id": "h", "op": "linear", "inputs": ["x", "w1", "b"]},
  {"id": "y", "op": "linear", "inputs": ["h", "w2"]}], "outputs": ["y"]})";

Tensor idx_tensor() { return Tensor::from_vector({3}, {0, 1, 2}, DType::i32); }
Tensor table_tensor() { return Tensor::from_vector({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}); }

// ================================================================ library level

// ---- truncation at every byte ----

TEST(Truncation, EveryPrefixOfANpyFileIsRefused) {
  for (const Tensor& t : {idx_tensor(), table_tensor(), Tensor::from_vector({}, {2.5f}, DType::f16)}) {
    const Bytes full = rlx::io::encode_npy(t);
    ASSERT_NO_THROW(rlx::io::parse_npy(full.data(), full.size(), "x.npy"));
    for (size_t n = 0; n < full.size(); ++n) {
      Bytes cut(full.begin(), full.begin() + (long)n);  // exact-size copy: ASan sees any over-read
      std::string msg = error_of([&] { rlx::io::parse_npy(cut.data(), cut.size(), "x.npy"); });
      EXPECT_HAS(msg, "x.npy");
    }
  }
}

TEST(Truncation, EveryPrefixOfAVersion2NpyHeaderIsRefused) {
  Bytes v1 = raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", Bytes(8, 0));
  // Same file as format 2.0: a 4-byte header length.
  Bytes v2 = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, v1[8], v1[9], 0, 0};
  v2.insert(v2.end(), v1.begin() + 10, v1.end());
  ASSERT_NO_THROW(rlx::io::parse_npy(v2.data(), v2.size(), "v2.npy"));
  for (size_t n = 0; n < v2.size(); ++n) {
    Bytes cut(v2.begin(), v2.begin() + (long)n);
    EXPECT_HAS(error_of([&] { rlx::io::parse_npy(cut.data(), cut.size(), "v2.npy"); }), "v2.npy");
  }
}

TEST(Truncation, EveryPrefixOfASafetensorsFileIsRefused) {
  const Bytes full = rlx::io::encode_safetensors(
      {{"tab", table_tensor()}, {"idx", idx_tensor()}, {"h", Tensor::from_vector({2}, {1, 2}, DType::bf16)}});
  ASSERT_NO_THROW(rlx::io::SafetensorsFile::from_memory(std::make_shared<Bytes>(full), "p.safetensors"));
  for (size_t n = 0; n < full.size(); ++n) {
    auto cut = std::make_shared<const Bytes>(full.begin(), full.begin() + (long)n);
    std::string msg = error_of([&] { rlx::io::SafetensorsFile::from_memory(cut, "p.safetensors"); });
    EXPECT_HAS(msg, "p.safetensors");
  }
}

// ---- sizes from files are checked before anything is allocated ----

TEST(FileLimits, SafetensorsHeaderClaiming2To60BytesIsRefusedBeforeReading) {
  auto b = std::make_shared<const Bytes>(raw_safetensors("{}", {}, uint64_t(1) << 60));
  std::string msg = error_of([&] { rlx::io::SafetensorsFile::from_memory(b, "big.safetensors"); });
  EXPECT_HAS(msg, "header length 1152921504606846976 exceeds the limit");
}

TEST(FileLimits, SafetensorsHeaderLargerThanTheFile) {
  auto b = std::make_shared<const Bytes>(raw_safetensors("{}", {}, 1000));
  EXPECT_HAS(error_of([&] { rlx::io::SafetensorsFile::from_memory(b, "h.safetensors"); }),
             "truncated header: expected 1000 bytes at offset 8, found 2");
}

TEST(FileLimits, SafetensorsShapeWhoseElementCountOverflows) {
  auto b = std::make_shared<const Bytes>(raw_safetensors(
      R"({"t": {"dtype": "F32", "shape": [1099511627776, 1073741824, 1024], "data_offsets": [0, 8]}})", Bytes(8, 0)));
  EXPECT_HAS(error_of([&] { rlx::io::SafetensorsFile::from_memory(b, "o.safetensors"); }),
             "expected a shape whose element count fits int64");
}

TEST(FileLimits, SafetensorsShapeLargerThanItsBytes) {
  // 2^40 elements that do not overflow, but 8 bytes of data: refused, never allocated.
  auto b = std::make_shared<const Bytes>(
      raw_safetensors(R"({"t": {"dtype": "F32", "shape": [1099511627776], "data_offsets": [0, 8]}})", Bytes(8, 0)));
  EXPECT_HAS(error_of([&] { rlx::io::SafetensorsFile::from_memory(b, "s.safetensors"); }),
             "1099511627776 elements for 8 bytes");
}

TEST(FileLimits, SafetensorsOffsetsPastTheEnd) {
  auto b = std::make_shared<const Bytes>(raw_safetensors(
      R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 1152921504606846976]}})", Bytes(8, 0)));
  EXPECT_HAS(error_of([&] { rlx::io::SafetensorsFile::from_memory(b, "e.safetensors"); }),
             "expected offsets within the data section (8 bytes), found data_offsets [0, 1152921504606846976]");
  auto c = std::make_shared<const Bytes>(raw_safetensors(
      R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [18446744073709551615, 8]}})", Bytes(8, 0)));
  EXPECT_HAS(error_of([&] { rlx::io::SafetensorsFile::from_memory(c, "e.safetensors"); }), "begin <= end");
}

TEST(FileLimits, SafetensorsOverlapGapAndNegativeValues) {
  auto overlap = std::make_shared<const Bytes>(raw_safetensors(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
      Bytes(8, 0)));
  EXPECT_HAS(error_of([&] { rlx::io::SafetensorsFile::from_memory(overlap, "x.safetensors"); }), "overlapping");
  auto negative = std::make_shared<const Bytes>(
      raw_safetensors(R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", Bytes(8, 0)));
  EXPECT_HAS(error_of([&] { rlx::io::SafetensorsFile::from_memory(negative, "x.safetensors"); }),
             "expected a non-negative integer, found -2");
}

TEST(FileLimits, NpyShapeOverflowAndHugeShapeAreRefusedBeforeAllocating) {
  Bytes o = raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }");
  EXPECT_HAS(error_of([&] { rlx::io::parse_npy(o.data(), o.size(), "o.npy"); }), "overflows");
  Bytes d = raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999, ), }");
  EXPECT_HAS(error_of([&] { rlx::io::parse_npy(d.data(), d.size(), "d.npy"); }), "dimension overflows int64");
  Bytes h = raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }", Bytes(8, 0));
  EXPECT_HAS(error_of([&] { rlx::io::parse_npy(h.data(), h.size(), "h.npy"); }),
             "truncated data: expected 4398046511104 bytes");
  Bytes n = raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }");
  EXPECT_HAS(error_of([&] { rlx::io::parse_npy(n.data(), n.size(), "n.npy"); }), "negative dimension");
}

TEST(FileLimits, WrongDtypeStrings) {
  // (float64 is a dtype now, f64: complex is not)
  Bytes c8 = raw_npy("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", Bytes(8, 0));
  EXPECT_HAS(error_of([&] { rlx::io::parse_npy(c8.data(), c8.size(), "c8.npy"); }), "unsupported dtype '<c8'");
  auto st = std::make_shared<const Bytes>(
      raw_safetensors(R"({"t": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}})", Bytes(8, 0)));
  EXPECT_HAS(error_of([&] { rlx::io::SafetensorsFile::from_memory(st, "f.safetensors"); }), "found dtype \"C64\"");
  EXPECT_HAS(error_of([] { rlx::io::parse_tensor_spec("2xc64=1,2"); }), "unknown dtype 'c64'");
  EXPECT_HAS(error_of([] { load_and_infer(graph_with(R"({"id": "y", "op": "input", "shape": [1], "dtype": "float"})")); }),
             "dtype must be one of f32, f16, bf16, i32, i64, bool, i8, u8; got \"float\"");
}

TEST(FileLimits, InlineSpecShapes) {
  EXPECT_HAS(error_of([] { rlx::io::parse_tensor_spec("-2xf32=1,2"); }), "dimension '-2' is not a non-negative integer");
  EXPECT_HAS(error_of([] { rlx::io::parse_tensor_spec("4294967296x4294967296xf32=1"); }), "overflows");
  EXPECT_HAS(error_of([] { rlx::io::parse_tensor_spec("99999999999999999999xf32=1"); }), "is not a non-negative integer");
  EXPECT_HAS(error_of([] { rlx::io::parse_tensor_spec("2xi32=1,3000000000"); }), "not an integer in range");
}

// ---- graph limits ----

TEST(GraphLimits, NodeCountIsBoundedWithAClearMessage) {
  std::string nodes = R"({"id": "y", "op": "input", "shape": [1]})";
  for (int i = 0; i < 10; ++i) nodes += R"(, {"id": "n)" + std::to_string(i) + R"(", "op": "neg", "inputs": ["y"]})";
  rlx::ir::LoadLimits lim;
  lim.max_nodes = 10;
  EXPECT_HAS(error_of([&] { load_and_infer(graph_with(nodes), lim); }), "the graph has 11 nodes (bodies included); the limit is 10");
  lim.max_nodes = 11;
  EXPECT_NO_THROW(load_and_infer(graph_with(nodes), lim));
  EXPECT_EQ(rlx::ir::LoadLimits{}.max_nodes, 1'000'000u);
}

TEST(GraphLimits, RankAndElementCountAndConstantSize) {
  std::string r17 = "[1";
  for (int i = 0; i < 16; ++i) r17 += ", 1";
  r17 += "]";
  EXPECT_HAS(error_of([&] { load_and_infer(graph_with(R"({"id": "y", "op": "input", "shape": )" + r17 + "}")); }),
             "shape has rank 17; at most 16 is supported");
  EXPECT_HAS(error_of([] {
               load_and_infer(graph_with(R"({"id": "y", "op": "input", "shape": [4294967296, 4294967296]})"));
             }),
             "shape element count overflows");
  EXPECT_HAS(error_of([] { load_and_infer(graph_with(R"({"id": "y", "op": "param", "shape": [-1, 2]})")); }),
             "shape has a negative dimension -1");
  EXPECT_HAS(error_of([] {
               load_and_infer(graph_with(R"({"id": "y", "op": "constant", "shape": [4096, 4097], "value": 0})"));
             }),
             "constant has 16781312 elements; at most 16777216 are supported inline");
  EXPECT_HAS(error_of([] {
               load_and_infer(graph_with(R"({"id": "y", "op": "input", "shape": [18446744073709551615]})"));
             }),
             "shape entries must be non-negative integers or symbol names");
}

// ---- integer attributes are range-checked ----

struct AttrCase {
  const char* name;
  std::string node;   // the op node "y", reading "x"
  Shape x;            // shape of input x
  const char* phrase; // expected in the message (always with "node 'y'")
};

std::string shape_json(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

void PrintTo(const AttrCase& c, std::ostream* os) { *os << c.name; }

class AttrRange : public ::testing::TestWithParam<AttrCase> {};

TEST_P(AttrRange, RefusedNamingTheNode) {
  const AttrCase& c = GetParam();
  std::string g = graph_with(R"({"id": "x", "op": "input", "shape": )" + shape_json(c.x) + "}, " + c.node);
  std::string msg = error_of([&] { load_and_infer(g); });
  EXPECT_HAS(msg, "node 'y'");
  EXPECT_HAS(msg, c.phrase);
}

constexpr const char* kMax = "9223372036854775807";
constexpr const char* kMin = "-9223372036854775808";

std::string op(const std::string& name, const std::string& attrs) {
  return R"({"id": "y", "op": ")" + name + R"(", "inputs": ["x"], "attrs": )" + attrs + "}";
}

INSTANTIATE_TEST_SUITE_P(
    Attrs, AttrRange,
    ::testing::Values(
        AttrCase{"narrow_start_huge", op("narrow", std::string(R"({"axis": 0, "start": )") + kMax + R"(, "length": 1})"), {4}, "do not fit axis 0 of size 4"},
        AttrCase{"narrow_length_huge", op("narrow", std::string(R"({"axis": 0, "start": 1, "length": )") + kMax + "}"), {4}, "do not fit"},
        AttrCase{"narrow_start_negative", op("narrow", R"({"axis": 0, "start": -1, "length": 1})"), {4}, "start -1 and length 1 do not fit"},
        AttrCase{"narrow_axis_min", op("narrow", std::string(R"({"axis": )") + kMin + R"(, "start": 0, "length": 1})"), {4}, "is out of range for a rank-1 input"},
        AttrCase{"reshape_dims_huge", op("reshape", R"({"shape": [4611686018427387904, 4611686018427387904]})"), {4}, "shape element count overflows"},
        AttrCase{"reshape_dims_huge_times_zero", op("reshape", R"({"shape": [0, 4611686018427387904, 4611686018427387904]})"), {0}, "overflows"},
        AttrCase{"reshape_negative", op("reshape", R"({"shape": [-2, 2]})"), {4}, "negative dimension -2"},
        AttrCase{"reshape_two_minus_one", op("reshape", R"({"shape": [-1, -1]})"), {4}, "more than one -1"},
        AttrCase{"reshape_wrong_count", op("reshape", R"({"shape": [3]})"), {4}, "cannot reshape [4] (4 elements) to [3]"},
        AttrCase{"transpose_perm_out_of_range", op("transpose", R"({"perm": [0, 7]})"), {2, 3}, "axis 7 is out of range for a rank-2 input"},
        AttrCase{"transpose_perm_int64_max", op("transpose", std::string(R"({"perm": [0, )") + kMax + "]}"), {2, 3}, "is out of range"},
        AttrCase{"transpose_perm_repeated", op("transpose", R"({"perm": [1, 1]})"), {2, 3}, "perm is not a permutation"},
        AttrCase{"transpose_perm_length", op("transpose", R"({"perm": [1, 0, 2]})"), {2, 3}, "perm has 3 entries for a rank-2 input"},
        AttrCase{"rope_dims_odd", op("rope", R"({"dims": 3})"), {2, 8}, "dims 3 must be even and in (0, 8]"},
        AttrCase{"rope_dims_huge", op("rope", std::string(R"({"dims": )") + kMax + "}"), {2, 8}, "must be even and in (0, 8]"},
        AttrCase{"rope_dims_negative", op("rope", R"({"dims": -2})"), {2, 8}, "dims -2 must be even"},
        AttrCase{"softmax_axis_huge", op("softmax", std::string(R"({"axis": )") + kMax + "}"), {2, 3}, "is out of range for a rank-2 input"},
        AttrCase{"sum_axes_repeated", op("sum", R"({"axes": [1, -1]})"), {2, 3}, "listed twice"},
        AttrCase{"concat_axis", op("concat", R"({"axis": 2})"), {2, 3}, "axis 2 is out of range"},
        AttrCase{"broadcast_to_overflow", op("broadcast_to", R"({"shape": [4294967296, 4294967296, 3]})"), {1, 3}, "overflows"},
        AttrCase{"broadcast_to_negative", op("broadcast_to", R"({"shape": [-1, 3]})"), {1, 3}, "negative dimension"},
        AttrCase{"int_attr_as_float_too_large", op("softmax", R"({"axis": 1e300})"), {2, 3}, "attribute 'axis' must be an integer, got a number"},
        AttrCase{"int_attr_above_int64", op("softmax", R"({"axis": 18446744073709551615})"), {2, 3}, "attribute 'axis' must be an integer"},
        AttrCase{"ints_attr_with_string", op("transpose", R"({"perm": [0, "1"]})"), {2, 3}, "attribute 'perm' must be a list of integers"},
        AttrCase{"ints_attr_too_long", op("sum", R"({"axes": [0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]})"), {2, 3}, "has more than 16 entries"},
        AttrCase{"float_attr_as_string", op("rms_norm", R"({"eps": "1e-6"})"), {2, 3}, "attribute 'eps' must be a number"},
        AttrCase{"bool_attr_as_int", op("sum", R"({"keepdims": 1})"), {2, 3}, "attribute 'keepdims' must be true or false, got an integer 1"},
        AttrCase{"string_attr_choice", op("gelu", R"({"approximate": "fast"})"), {2, 3}, "expected one of \"none\", \"tanh\""},
        AttrCase{"cast_dtype", op("cast", R"({"dtype": "f64"})"), {2}, "attribute 'dtype' must be a dtype"}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- regressions: bugs found by this work (fuzzing, sanitizers, hostile CLI runs; docs/errors.md) ----

TEST(Regression, JsonNumberOverflowIsAnInputError) {
  // nlohmann::json throws out_of_range (not parse_error) for 1e999; it escaped as exit 3.
  std::string msg = error_of([] { load_and_infer(R"({"format": "rlx.graph", "version": 1e999, "nodes": [], "outputs": ["y"]})"); });
  EXPECT_HAS(msg, "t.json: not valid JSON");
  EXPECT_HAS(msg, "number overflow");
  msg = error_of([] { load_and_infer(graph_with(R"({"id": "y", "op": "constant", "shape": [], "value": -1e400})")); });
  EXPECT_HAS(msg, "not valid JSON");
}

TEST(Regression, UnsignedJsonIntegersAboveInt64AreNotReadAsNegative) {
  // nlohmann's is_number_integer() is true for unsigned values too: 18446744073709551615
  // was read as -1, a valid axis / a "negative dimension".
  EXPECT_HAS(error_of([] {
               load_and_infer(graph_with(R"({"id": "x", "op": "input", "shape": [2, 3]},
                   {"id": "y", "op": "softmax", "inputs": ["x"], "attrs": {"axis": 18446744073709551615}})"));
             }),
             "attribute 'axis' must be an integer below 2^63, got an integer 18446744073709551615");
  EXPECT_HAS(error_of([] { load_and_infer(graph_with(R"({"id": "y", "op": "input", "shape": [18446744073709551615]})")); }),
             "shape entries must be non-negative integers or symbol names, got 18446744073709551615");
}

TEST(Regression, EmptyTensorWithHugeDimsIsRefused) {
  // [0, 2^62, 2^62] has 0 elements but its strides overflow int64 (signed overflow in
  // contiguous_strides, found under UBSan); [2^62, 2^62, 0] was already refused.
  EXPECT_EQ(rlx::shape_numel({0, int64_t(1) << 62, int64_t(1) << 62}), -1);
  EXPECT_EQ(rlx::shape_numel({int64_t(1) << 62, int64_t(1) << 62, 0}), -1);
  EXPECT_EQ(rlx::shape_numel({0, int64_t(1) << 62}), 0);
  EXPECT_EQ(rlx::shape_numel({3, 0, 5}), 0);
  EXPECT_HAS(error_of([] {
               load_and_infer(graph_with(R"({"id": "y", "op": "input", "shape": [0, 4611686018427387904, 4611686018427387904]})"));
             }),
             "shape element count overflows");
  EXPECT_HAS(error_of([] { rlx::io::parse_tensor_spec("0x4611686018427387904x4611686018427387904xf32="); }), "overflows");
  Bytes n = raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4611686018427387904, 4611686018427387904), }");
  EXPECT_HAS(error_of([&] { rlx::io::parse_npy(n.data(), n.size(), "n.npy"); }), "overflows");
  auto st = std::make_shared<const Bytes>(raw_safetensors(
      R"({"t": {"dtype": "F32", "shape": [0, 4611686018427387904, 4611686018427387904], "data_offsets": [0, 0]}})"));
  EXPECT_HAS(error_of([&] { rlx::io::SafetensorsFile::from_memory(st, "e.safetensors"); }),
             "element count fits int64");
}

TEST(Regression, IntegerRoundingOfHugeFloatsIsDefined) {
  // Found by fuzz_spec (UBSan float-cast-overflow): "3xi64=+9223372036851325808,1,2" passes the
  // range check as a double, becomes 2^63 as f32, and round_to_dtype did (int64_t)2^63.
  EXPECT_EQ(rlx::round_to_dtype(0x1p63f, DType::i64), 0x1p63f);
  EXPECT_EQ(rlx::round_to_dtype(-0x1p64f, DType::i64), -0x1p64f);
  EXPECT_EQ(rlx::round_to_dtype(INFINITY, DType::i32), INFINITY);
  EXPECT_EQ(rlx::round_to_dtype(1e30f, DType::i32), 1e30f);
  EXPECT_EQ(rlx::round_to_dtype(2.7f, DType::i64), 2.f);
  EXPECT_EQ(rlx::round_to_dtype(-2.7f, DType::i32), -2.f);
  EXPECT_EQ(rlx::round_to_dtype(8388607.5f, DType::i32), 8388607.f);
  EXPECT_EQ(rlx::round_to_dtype(NAN, DType::i64), 0.f);
  Tensor t = rlx::io::load_tensor_spec(rlx::io::parse_tensor_spec("3xi64=+9223372036851325808,1,2"));
  // Integers are stored exactly: the decimal text, not its nearest double or float.
  EXPECT_EQ(t.int_at(0), INT64_C(9223372036851325808));
  // A graph constant beyond the dtype's range is refused (issue 24), no longer saturated.
  EXPECT_HAS(error_of([] { load_and_infer(graph_with(R"({"id": "y", "op": "constant", "shape": [2], "dtype": "i64", "value": [1e19, -1e30]})")); }),
             "i64 value 1e+19 is not an integer in range");
}

// ================================================================ command level

// ---- truncated files at every header boundary, as --input and as --params ----

struct Cut {
  size_t at;
  const char* phrase;
};

TEST_F(Cli, TruncatedNpyAtEveryHeaderBoundaryAsInput) {
  write("g.json", kEmbGraph);
  const Bytes full = rlx::io::encode_npy(idx_tensor());  // 10-byte prefix, header, 12 bytes of data
  const size_t hl = full[8] | (full[9] << 8), data = 10 + hl;
  ASSERT_EQ(full.size(), data + 12);
  const std::string hdr = "truncated header: expected " + std::to_string(hl) + " bytes at offset 10, found ";
  const std::string dat = "truncated data: expected 12 bytes at offset " + std::to_string(data) + ", found ";
  const std::vector<std::pair<size_t, std::string>> cuts = {
      {0, "truncated magic: expected 6 bytes at offset 0, found 0"},
      {3, "truncated magic: expected 6 bytes at offset 0, found 3"},
      {6, "truncated version: expected 1 bytes at offset 6, found 0"},
      {7, "truncated version: expected 1 bytes at offset 7, found 0"},
      {8, "truncated header length: expected 2 bytes at offset 8, found 0"},
      {9, "truncated header length: expected 2 bytes at offset 8, found 1"},
      {10, hdr + "0"},
      {10 + hl / 2, hdr + std::to_string(hl / 2)},
      {data - 1, hdr + std::to_string(hl - 1)},
      {data, dat + "0"},
      {data + 4, dat + "4"},
      {full.size() - 1, dat + "11"}};
  for (const auto& [at, phrase] : cuts) {
    SCOPED_TRACE("cut at " + std::to_string(at));
    std::string f = write("idx_" + std::to_string(at) + ".npy", Bytes(full.begin(), full.begin() + (long)at));
    expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=@" + f}, 2, {f + ": " + phrase});
  }
}

TEST_F(Cli, TruncatedNpyAsParams) {
  write("g.json", kEmbGraph);
  const Bytes full = rlx::io::encode_npy(table_tensor());
  for (size_t at : {size_t(0), size_t(8), size_t(10), size_t(64), full.size() - 1}) {
    SCOPED_TRACE("cut at " + std::to_string(at));
    fs::create_directories(path("p" + std::to_string(at)));
    std::string f = write("p" + std::to_string(at) + "/tab.npy", Bytes(full.begin(), full.begin() + (long)at));
    expect_fail({"run", path("g.json"), "--params", path("p" + std::to_string(at)), "--input", "idx=3xi32=0,1,2"}, 2,
                {f + ": ", "truncated"});
  }
}

TEST_F(Cli, TruncatedSafetensorsAtEveryHeaderBoundaryAsParams) {
  write("g.json", kEmbGraph);
  const Bytes full = rlx::io::encode_safetensors({{"tab", table_tensor()}});
  const size_t hl = full[0] | (full[1] << 8);  // header length (small)
  const size_t data = 8 + hl;
  ASSERT_EQ(full.size(), data + 32);
  const std::vector<Cut> cuts = {{0, "truncated header length: expected 8 bytes at offset 0, found 0"},
                                 {4, "truncated header length: expected 8 bytes at offset 0, found 4"},
                                 {7, "truncated header length"},
                                 {8, "truncated header: expected"},
                                 {8 + hl / 2, "truncated header"},
                                 {data - 1, "truncated header"},
                                 {data, "expected offsets within the data section (0 bytes)"},
                                 {data + 16, "expected offsets within the data section (16 bytes)"},
                                 {full.size() - 1, "(31 bytes)"}};
  for (const Cut& c : cuts) {
    SCOPED_TRACE("cut at " + std::to_string(c.at));
    std::string f = write("p_" + std::to_string(c.at) + ".safetensors", Bytes(full.begin(), full.begin() + (long)c.at));
    expect_fail({"run", path("g.json"), "--params", f, "--input", "idx=3xi32=0,1,2"}, 2, {f + ": ", c.phrase});
  }
}

TEST_F(Cli, TruncatedSafetensorsAsInput) {
  write("g.json", kEmbGraph);
  const Bytes full = rlx::io::encode_safetensors({{"idx", idx_tensor()}});
  const size_t hl = full[0] | (full[1] << 8);
  for (size_t at : {size_t(0), size_t(5), size_t(8), 8 + hl - 1, 8 + hl, full.size() - 1}) {
    SCOPED_TRACE("cut at " + std::to_string(at));
    std::string f = write("i_" + std::to_string(at) + ".safetensors", Bytes(full.begin(), full.begin() + (long)at));
    expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=" + f + ":idx"}, 2, {f + ": "});
  }
  write("ok.safetensors", full);
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=" + path("ok.safetensors") + ":nope"}, 2,
              {"no tensor named 'nope' (it has 'idx')"});
}

TEST_F(Cli, HostileSafetensorsParams) {
  write("g.json", kEmbGraph);
  struct H {
    const char* file;
    Bytes bytes;
    const char* phrase;
  };
  const std::vector<H> files = {
      {"huge_header.safetensors", raw_safetensors("{}", {}, uint64_t(1) << 60),
       "header length 1152921504606846976 exceeds the limit of 104857600 bytes (file has 10 bytes)"},
      {"overflow.safetensors",
       raw_safetensors(R"({"tab": {"dtype": "F32", "shape": [1099511627776, 1073741824], "data_offsets": [0, 32]}})", Bytes(32, 0)),
       "expected a shape whose element count fits int64, found shape [1099511627776, 1073741824]"},
      {"past_end.safetensors",
       raw_safetensors(R"({"tab": {"dtype": "F32", "shape": [4, 2], "data_offsets": [0, 1152921504606846976]}})", Bytes(32, 0)),
       "expected offsets within the data section (32 bytes)"},
      {"bad_json.safetensors", raw_safetensors("{\"tab\": [", {}), "header is not valid JSON"},
      {"c64.safetensors", raw_safetensors(R"({"tab": {"dtype": "C64", "shape": [4, 2], "data_offsets": [0, 64]}})", Bytes(64, 0)),
       "found dtype \"C64\""}};
  for (const H& h : files) {
    SCOPED_TRACE(h.file);
    std::string f = write(h.file, h.bytes);
    expect_fail({"run", path("g.json"), "--params", f, "--input", "idx=3xi32=0,1,2"}, 2, {f + ": ", h.phrase});
  }
  // F64 is read (ONNX models' f64), but never narrowed into the graph's f32 table
  std::string f64 = write("f64.safetensors", raw_safetensors(R"({"tab": {"dtype": "F64", "shape": [4, 2], "data_offsets": [0, 64]}})", Bytes(64, 0)));
  expect_fail({"run", path("g.json"), "--params", f64, "--input", "idx=3xi32=0,1,2"}, 2,
              {"tab: the graph declares f32, the file has f64 (float64), which is not narrowed silently"});
}

// ---- inputs ----

TEST_F(Cli, WrongDtypeStrings) {
  write("g.json", kEmbGraph);
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=3xc64=0,1,2"}, 2,
              {"bad tensor spec '3xc64=0,1,2': unknown dtype 'c64' (supported: f32, f16, bf16, i32, i64, bool, i8, u8, f64, "
               "i16, u16, u32, u64)"});
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=3xf64=0,1,2"}, 2,
              {"--input idx: got a f64 tensor, the graph declares i32"});
  Bytes f8 = raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", Bytes(24, 0));
  std::string f = write("f8.npy", f8);
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=@" + f}, 2,
              {"--input idx: got a f64 tensor, the graph declares i32"});
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=3xf32=0,1,2"}, 2,
              {"--input idx: got a f32 tensor, the graph declares i32"});
  write("bad_dtype.json", graph_with(R"({"id": "y", "op": "input", "shape": [1], "dtype": "float32"})"));
  expect_fail({"run", path("bad_dtype.json")}, 2, {"node 'y' (input)", "dtype must be one of"});
}

TEST_F(Cli, NegativeAndOverflowingShapes) {
  write("g.json", kEmbGraph);
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=-3xi32=0,1,2"}, 2,
              {"dimension '-3' is not a non-negative integer"});
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=99999999999x99999999999x99999999999xi32=0"}, 2,
              {"element count of shape [99999999999, 99999999999, 99999999999] overflows"});
  std::string f = write("o.npy", raw_npy("{'descr': '<i4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"));
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=@" + f}, 2, {f + ": element count of shape", "overflows"});
  write("neg.json", graph_with(R"({"id": "y", "op": "input", "shape": [2, -3]})"));
  expect_fail({"run", path("neg.json")}, 2, {"node 'y' (input)", "negative dimension -3"});
  // An empty tensor whose other dims overflow (a reshape result): refused before running
  // (it used to reach a signed overflow in the CPU executor's strides).
  write("empty.json", graph_with(R"({"id": "x", "op": "input", "shape": [0]},
      {"id": "r", "op": "reshape", "inputs": ["x"], "attrs": {"shape": [0, 4611686018427387904, 4611686018427387904]}},
      {"id": "y", "op": "sum", "inputs": ["r"], "attrs": {"axes": [1]}})"));
  expect_fail({"run", path("empty.json"), "--input", "x=0xf32="}, 2,
              {"node 'r' (reshape)", "result shape [0, 4611686018427387904, 4611686018427387904] overflows"});
  write("ovf.json", graph_with(R"({"id": "y", "op": "input", "shape": [4294967296, 4294967296]})"));
  expect_fail({"run", path("ovf.json")}, 2, {"node 'y' (input)", "element count overflows"});
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=4xi32=0,1,2,3"}, 2,
              {"node 'idx' (input)", "expects shape [3], got [4]"});
}

// ---- graph structure (explicit cases; every file of tests/golden/bad is also run below) ----

TEST_F(Cli, GraphStructureErrorsNameTheNode) {
  struct G {
    const char* name;
    std::string text;
    std::vector<std::string> phrases;
  };
  const std::vector<G> graphs = {
      {"dup", graph_with(R"({"id": "y", "op": "input", "shape": [1]}, {"id": "y", "op": "neg", "inputs": ["y"]})"),
       {"node 'y' at nodes[1]: duplicate id (first defined at nodes[0])"}},
      {"cycle", graph_with(R"({"id": "a", "op": "neg", "inputs": ["y"]}, {"id": "y", "op": "exp", "inputs": ["a"]})"),
       {"the graph has a cycle through this node"}},
      {"dangling", graph_with(R"({"id": "y", "op": "neg", "inputs": ["ghost"]})"),
       {"node 'y' (neg) at nodes[0]: input \"ghost\" is not a node of this graph"}},
      {"arity", graph_with(R"({"id": "x", "op": "input", "shape": [1]}, {"id": "y", "op": "matmul", "inputs": ["x"]})"),
       {"node 'y' (matmul) at nodes[1]: takes 2 inputs, got 1"}},
      {"attr_type",
       graph_with(R"({"id": "x", "op": "input", "shape": [2, 2]}, {"id": "y", "op": "softmax", "inputs": ["x"], "attrs": {"axis": "last"}})"),
       {"node 'y' (softmax) at nodes[1]: attribute 'axis' must be an integer, got a string \"last\""}},
      {"unknown_op", graph_with(R"({"id": "y", "op": "conv4d", "inputs": []})"),
       {"node 'y' at nodes[0]: unknown op \"conv4d\""}},
      {"unknown_attr",
       graph_with(R"({"id": "x", "op": "input", "shape": [2]}, {"id": "y", "op": "exp", "inputs": ["x"], "attrs": {"base": 2}})"),
       {"node 'y' (exp) at nodes[1]: unknown attribute \"base\" (this op takes none)"}},
      {"unknown_field", graph_with(R"({"id": "y", "op": "input", "shape": [1], "shap": [2]})"),
       {"node 'y' (input) at nodes[0]: unknown field \"shap\""}},
      {"no_outputs", R"({"format": "rlx.graph", "version": 1, "nodes": [], "outputs": []})",
       {"outputs: \"outputs\" must be a non-empty list of node ids"}},
      {"not_object", "[1, 2, 3]", {"the top level must be an object"}},
      {"empty", "", {"not valid JSON at line 1, column 1"}},
      {"number_overflow", R"({"format": "rlx.graph", "version": 1, "nodes": [{"id": "y", "op": "input", "shape": [1e999]}], "outputs": ["y"]})",
       {"not valid JSON: ", "number overflow parsing '1e999'"}},
  };
  for (const G& g : graphs) {
    SCOPED_TRACE(g.name);
    std::string f = write(std::string(g.name) + ".json", g.text);
    Proc p = expect_fail({"run", f}, 2, g.phrases);
    EXPECT_HAS(p.err, f + ": ");
    EXPECT_EQ(p.out, "") << "refused before anything runs";
  }
}

TEST_F(Cli, MalformedJsonReportsLineAndColumn) {
  std::string f = write("m.json", "{\n  \"format\": \"rlx.graph\",\n  \"version\": 1,\n  \"nodes\": [,]\n}\n");
  expect_fail({"run", f}, 2, {f + ": not valid JSON at line 4, column 13"});
  std::string g = write("m2.json", "{\"format\": \"rlx.graph\", \"version\": 1, \"nodes\": [\"\xff\"]}");
  expect_fail({"run", g}, 2, {g + ": not valid JSON at line 1"});
}

TEST_F(Cli, SymbolicDimensionConflictNamesTheDimension) {
  write("g.json", kSymGraph);
  Proc p = expect_fail({"run", path("g.json"), "--random-params", "--input", "x=2x3xf32=1,2,3,4,5,6", "--input",
                        "z=1x3xf32=1,2,3"},
                       2, {"node 'z' (input)", "dimension 'batch' is 1 here but was bound to 2 by an earlier input"});
  // A random input takes its size from --dim: a conflicting --dim is the same error.
  expect_fail({"run", path("g.json"), "--random-params", "--input", "x=2x3xf32=1,2,3,4,5,6", "--input", "z=random:1",
               "--dim", "batch=5"},
              2, {"dimension 'batch' is 5 here but was bound to 2"});
  expect_fail({"run", path("g.json"), "--random-params", "--input", "x=random", "--input", "z=random"}, 2,
              {"dimension 'batch' is symbolic; give its size with --dim batch=N"});
  expect_fail({"run", path("g.json"), "--random-params", "--input", "x=random", "--input", "z=random", "--dim", "batch=-1"},
              2, {"--dim batch=-1: the size must be a non-negative integer"});
}

TEST_F(Cli, EveryUnboundDimensionOfARandomInputIsNamedAtOnce) {
  write("g.json", R"({"format": "rlx.graph", "version": 1, "nodes": [
    {"id": "x", "op": "input", "shape": ["batch", "seq", 4, "batch"]},
    {"id": "y", "op": "relu", "inputs": ["x"]}], "outputs": ["y"]})");
  expect_fail({"run", path("g.json"), "--input", "x=random"}, 2,
              {"--input x=random: dimensions 'batch', 'seq' are symbolic; give their sizes with --dim batch=N --dim seq=N"});
  expect_fail({"run", path("g.json"), "--input", "x=random", "--dim", "seq=3"}, 2,
              {"--input x=random: dimension 'batch' is symbolic; give its size with --dim batch=N"});
  Proc p = run_rlx({"run", path("g.json"), "--input", "x=random", "--dim", "seq=3", "--dim", "batch=2"});
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_HAS(p.out, "[2, 3, 4, 2]");
}

TEST_F(Cli, EmbeddingIndexOutOfRangeIsARuntimeErrorNamingTheNode) {
  write("g.json", kEmbGraph);
  for (const char* mode : {"eager", "lazy", "compiled"}) {
    SCOPED_TRACE(mode);
    expect_fail({"run", path("g.json"), "--random-params", "--mode", mode, "--input", "idx=3xi32=0,1,7"}, 3,
                {"node 'emb' (embedding)", "index 7 at position 2 is outside [0, 4)"});
    expect_fail({"run", path("g.json"), "--random-params", "--mode", mode, "--input", "idx=3xi32=0,-1,2"}, 3,
                {"node 'emb' (embedding)", "index -1 at position 1 is outside [0, 4)"});
  }
  // An i64 index of INT64_MAX is held exactly (i64 storage): the message names it exactly, never wrapped.
  write("g64.json", R"({"format": "rlx.graph", "version": 1, "nodes": [
    {"id": "tab", "op": "param", "shape": [4, 2]},
    {"id": "idx", "op": "input", "shape": [2], "dtype": "i64"},
    {"id": "emb", "op": "embedding", "inputs": ["tab", "idx"]}], "outputs": ["emb"]})");
  Bytes data(16, 0);
  for (int i = 0; i < 8; ++i) data[8 + i] = i == 7 ? 0x7f : 0xff;
  std::string f = write("big.npy", raw_npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", data));
  expect_fail({"run", path("g64.json"), "--random-params", "--input", "idx=@" + f}, 3,
              {"node 'emb' (embedding)", "index 9223372036854775807 at position 1 is outside [0, 4)"});
}

// ---- parameters ----

TEST_F(Cli, CastOfHugeAndNonFiniteValuesToIntegers) {
  // round_to_dtype on values outside int64 (regression, see Regression.IntegerRoundingOfHugeFloatsIsDefined).
  write("g.json", graph_with(R"({"id": "x", "op": "input", "shape": [4]},
      {"id": "y", "op": "cast", "inputs": ["x"], "attrs": {"dtype": "i64"}})"));
  for (const char* mode : {"eager", "lazy", "compiled"}) {
    SCOPED_TRACE(mode);
    Proc p = run_rlx({"run", path("g.json"), "--mode", mode, "--input", "x=4xf32=1e30,-1e30,inf,-2.5", "--json"});
    ASSERT_EQ(p.code, 0) << show(p);
    json j = json::parse(p.out);
    // cast to i64 truncates toward zero and saturates (docs/graph-format.md); values are exact in the JSON.
    EXPECT_EQ(j["outputs"][0]["values"][0].get<int64_t>(), INT64_MAX);
    EXPECT_EQ(j["outputs"][0]["values"][1].get<int64_t>(), INT64_MIN);
    EXPECT_EQ(j["outputs"][0]["values"][2].get<int64_t>(), INT64_MAX);
    EXPECT_EQ(j["outputs"][0]["values"][3].get<int64_t>(), -2);
  }
}

TEST_F(Cli, MissingParametersAreListedAllAtOnce) {
  write("g.json", kThreeParams);
  std::string p = write("p.safetensors", rlx::io::encode_safetensors({{"layer.w1", Tensor({3, 3})}}));
  Proc r = expect_fail({"run", path("g.json"), "--params", p, "--input", "x=random"}, 2,
                       {"3 parameters not found in the --params files:", "  w1 [3, 3]", "  layer.w2 [3, 3]", "  b [3]",
                        "(closest: layer.w1)"});
  expect_fail({"run", path("g.json"), "--input", "x=random"}, 2,
              {"3 parameters not found in the --params files (none given; use --params FILE or --random-params)"});
}

TEST_F(Cli, ParamWithTheWrongShapeNamesBothShapes) {
  write("g.json", kThreeParams);
  std::string p = write("p.safetensors", rlx::io::encode_safetensors({{"w1", Tensor({3, 3})},
                                                                      {"layer.w2", Tensor({3, 4})},
                                                                      {"b", Tensor({3}, DType::i32)}}));
  expect_fail({"run", path("g.json"), "--params", p, "--input", "x=random"}, 2,
              {"parameter mismatch:", "layer.w2: the graph declares [3, 3], the file has [3, 4]",
               "b: the graph declares f32, the file has i32"});
}

TEST_F(Cli, ParamsFilesThatAreNotThere) {
  write("g.json", kEmbGraph);
  expect_fail({"run", path("g.json"), "--params", path("nope.safetensors"), "--input", "idx=3xi32=0,1,2"}, 2,
              {"--params " + path("nope.safetensors") + ": no such file or directory"});
  std::string t = write("w.txt", "hello");
  expect_fail({"run", path("g.json"), "--params", t, "--input", "idx=3xi32=0,1,2"}, 2,
              {"expected a .safetensors file, a .npy file or a directory of .npy files"});
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=@" + path("missing.npy")}, 2,
              {"cannot read " + path("missing.npy") + ": file does not exist"});
}

// ---- names that are not in the graph ----

TEST_F(Cli, InputOutputOrExpectNamingNoNode) {
  write("g.json", kEmbGraph);
  const std::vector<std::string> base = {"run", path("g.json"), "--random-params"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  expect_fail(with({"--input", "nope=3xi32=0,1,2"}), 2, {"--input nope: the graph has no input 'nope' (its inputs: idx)"});
  expect_fail(with({"--input", "tab=3xi32=0,1,2"}), 2, {"--input tab: the graph has no input 'tab'"});
  expect_fail(with({"--input", "idx=3xi32=0,1,2", "--output", "nope=" + path("a.npy")}), 2,
              {"--output nope: 'nope' is not an output of the graph"});
  expect_fail(with({"--input", "idx=3xi32=0,1,2", "--expect", "nope=f32=1"}), 2,
              {"--expect nope: 'nope' is not an output of the graph (outputs: emb)"});
  expect_fail(with({"--input", "idx=3xi32=0,1,2", "--input", "idx=3xi32=0,1,2"}), 2, {"--input idx is given twice"});
  expect_fail(with({}), 2, {"no value given for input idx"});
  expect_fail(with({"--input", "idx"}), 2, {"--input idx: expected ID=SPEC"});
  expect_fail(with({"--input", "idx=3xi32=0,1,2", "--output", "emb=" + path("a.txt")}), 2,
              {"the file must end in .npy or .safetensors"});
  EXPECT_FALSE(fs::exists(path("a.npy")));
}

// ---- output locations ----

TEST_F(Cli, OutputInADirectoryThatDoesNotExist) {
  write("g.json", kEmbGraph);
  // --output DIR/y.npy creates DIR with its parents, as --out-dir does (issue 21).
  std::string out = path("missing/dir/emb.npy");
  Proc ok = run_rlx({"run", path("g.json"), "--random-params", "--input", "idx=3xi32=0,1,2", "--output", "emb=" + out});
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(fs::is_regular_file(out)) << "the directory is created and the output written";
  // A directory that cannot be made (a regular file on the way) is refused before running.
  write("afile", "x");
  std::string bad = path("afile/sub/emb.npy");
  Proc p = expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=3xi32=0,1,2", "--output", "emb=" + bad},
                       2, {"cannot write " + bad + ": cannot create directory " + path("afile/sub")});
  EXPECT_EQ(p.out, "") << "refused before running";
  // --out-dir creates a missing directory (tests/test_cli.cpp); a file in its place is refused.
  write("plain", "x");
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=3xi32=0,1,2", "--out-dir", path("plain")}, 2,
              {"--out-dir " + path("plain") + ": exists and is not a directory"});
}

// As root, chmod does not stop writes, so "read-only" locations are ones the kernel refuses to
// anyone: a path under a regular file (ENOTDIR, refused while planning), a directory of /proc
// (creating a file there fails with ENOENT although the directory exists), and, when not root,
// a chmod 0555 directory (EACCES).
TEST_F(Cli, ReadOnlyOutputLocations) {
  write("g.json", kEmbGraph);
  const std::vector<std::string> run = {"run", path("g.json"), "--random-params", "--input", "idx=3xi32=0,1,2", "--output"};
  auto with = [&](const std::string& o) {
    std::vector<std::string> a = run;
    a.push_back("emb=" + o);
    return a;
  };
  std::string file = write("plain.txt", "x");
  expect_fail(with(file + "/emb.npy"), 2, {"cannot write " + file + "/emb.npy: " + file + " is not a directory"});
  expect_fail(with("/proc/rlx_test_errors.npy"), 2,
              {"cannot write /proc/rlx_test_errors.npy: directory /proc does not accept new files"});
  EXPECT_FALSE(fs::exists("/proc/rlx_test_errors.npy"));
  fs::create_directories(path("d.npy"));
  expect_fail(with(path("d.npy")), 2, {"cannot write " + path("d.npy") + ": it is a directory, expected a file name"});
  if (::geteuid() != 0) {
    fs::create_directories(path("ro"));
    ::chmod(path("ro").c_str(), 0555);
    expect_fail(with(path("ro/emb.npy")), 2, {"cannot write " + path("ro/emb.npy") + ": permission denied"});
    ::chmod(path("ro").c_str(), 0755);
  }
}

// ---- atomic outputs: a failure after planning leaves earlier files byte-identical, no temporaries ----

TEST_F(Cli, AtomicOutputsSurviveARunTimeFailure) {
  write("g.json", kEmbGraph);
  fs::create_directories(path("out"));
  const std::string out = path("out/emb.npy"), st = path("out/emb.safetensors");
  Proc ok = run_rlx({"run", path("g.json"), "--random-params", "--input", "idx=3xi32=0,1,2", "--output", "emb=" + out,
                     "--output", "emb=" + st});
  ASSERT_EQ(ok.code, 0) << show(ok);
  const Bytes before = slurp(out), before_st = slurp(st);
  ASSERT_GT(before.size(), 64u);
  // Planned outputs, then the run fails (index out of range) before anything is written.
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=3xi32=0,1,9", "--output", "emb=" + out,
               "--output", "emb=" + st},
              3, {"node 'emb'"});
  EXPECT_EQ(slurp(out), before);
  EXPECT_EQ(slurp(st), before_st);
  EXPECT_TRUE(temporaries(path("out")).empty());
}

TEST_F(Cli, AtomicOutputsSurviveAFailedWrite) {
  // x [64, 64] -> exp: a 16 KiB output. The second run may only write 4 KiB per file
  // (RLIMIT_FSIZE, SIGXFSZ ignored): the write itself fails with EFBIG, mid-file.
  write("g.json", graph_with(R"({"id": "x", "op": "input", "shape": [64, 64]}, {"id": "y", "op": "exp", "inputs": ["x"]})"));
  fs::create_directories(path("out"));
  const std::string out = path("out/y.npy");
  Proc ok = run_rlx({"run", path("g.json"), "--input", "x=random:1", "--output", "y=" + out});
  ASSERT_EQ(ok.code, 0) << show(ok);
  const Bytes before = slurp(out);
  ASSERT_EQ(before.size(), 128u + 64 * 64 * 4);
  ProcOptions limited;
  limited.fsize_limit = 4096;
  expect_fail({"run", path("g.json"), "--input", "x=random:2", "--output", "y=" + out}, 3,
              {"cannot write " + out + ": File too large"}, limited);
  EXPECT_EQ(slurp(out), before) << "the earlier file must be untouched";
  EXPECT_TRUE(temporaries(path("out")).empty());
  // Same with a file that did not exist: nothing is left behind at all.
  expect_fail({"run", path("g.json"), "--input", "x=random:2", "--output", "y=" + path("out/new.npy")}, 3,
              {"File too large"}, limited);
  EXPECT_FALSE(fs::exists(path("out/new.npy")));
  EXPECT_TRUE(temporaries(path("out")).empty());
}

TEST_F(Cli, AtomicOutputsWhenASecondOutputCannotBeWritten) {
  write("g.json", kSymGraph);
  fs::create_directories(path("out"));
  const std::string y = path("out/y.npy");
  const std::vector<std::string> run = {"run", path("g.json"), "--random-params", "--input", "z=random:2", "--dim", "batch=2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = run;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  Proc ok = run_rlx(with({"--input", "x=random:1", "--output", "y=" + y}));
  ASSERT_EQ(ok.code, 0) << show(ok);
  const Bytes before = slurp(y);
  // Another seed for x changes y; the second output goes into a directory that cannot be
  // created (a missing one is created, as --out-dir does) / onto a directory / under a file:
  // all refused while planning, before the first output is touched.
  fs::create_directories(path("out/s.npy"));
  std::string file = write("out/f", "x");
  for (const std::string& bad : {file + "/missing/s.npy", path("out/s.npy"), file + "/s.npy"}) {
    SCOPED_TRACE(bad);
    Proc p = run_rlx(with({"--input", "x=random:3", "--output", "y=" + y, "--output", "s=" + bad}));
    EXPECT_EQ(p.code, 2) << show(p);
    EXPECT_HAS(p.err, "cannot write " + bad);
    EXPECT_EQ(slurp(y), before);
    EXPECT_TRUE(temporaries(path("out")).empty());
  }
  // A second output refused by the kernel only at write time (/proc): the first output is
  // written completely (each file is replaced atomically), the second is not created, and
  // no temporary is left. rlx exits 2 naming the file.
  Proc p = run_rlx(with({"--input", "x=random:3", "--output", "y=" + y, "--output", "s=/proc/rlx_test_errors_s.npy"}));
  EXPECT_EQ(p.code, 2) << show(p);
  EXPECT_HAS(p.err, "cannot write /proc/rlx_test_errors_s.npy: directory /proc does not accept new files");
  EXPECT_NO_THROW(rlx::io::read_npy(y));
  EXPECT_TRUE(temporaries(path("out")).empty());
}

TEST_F(Cli, ExpectMismatchStillWritesCompleteOutputs) {
  // An --expect mismatch is exit 1, and the outputs are written (whole, atomically) so the
  // mismatch can be inspected.
  write("g.json", kEmbGraph);
  fs::create_directories(path("out"));
  const std::string out = path("out/emb.npy");
  spit(out, std::string("old contents"));
  Proc p = run_rlx({"run", path("g.json"), "--params", write("p.safetensors", rlx::io::encode_safetensors({{"tab", table_tensor()}})),
                    "--input", "idx=3xi32=0,1,2", "--output", "emb=" + out, "--expect",
                    "emb=3x2xf32=1,2,3,4,5,7"});
  EXPECT_EQ(p.code, 1) << show(p);
  EXPECT_HAS(p.err, "expect failed: emb: 1 of 6 elements differ; worst at [2, 1]: got 6, expected 7");
  Tensor t = rlx::io::read_npy(out);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(temporaries(path("out")).empty());
}

// ---- modes and backends ----

TEST_F(Cli, UnknownModeListsTheValidModes) {
  write("g.json", kEmbGraph);
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=3xi32=0,1,2", "--mode", "turbo"}, 2,
              {"--mode: unknown mode \"turbo\"; valid modes are eager, lazy, compiled"});
  ProcOptions env;
  env.env["RLX_MLX_MODE"] = "fast";
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=3xi32=0,1,2"}, 2,
              {"RLX_MLX_MODE: unknown mode \"fast\"; valid modes are eager, lazy, compiled"}, env);
  // --mode wins over the environment.
  Proc ok = run_rlx({"run", path("g.json"), "--random-params", "--input", "idx=3xi32=0,1,2", "--mode", "eager"}, env);
  EXPECT_EQ(ok.code, 0) << show(ok);
  expect_fail({"compare", path("g.json"), "--random-params", "--input", "idx=3xi32=0,1,2", "--modes", "eager,warp"}, 2,
              {"--modes: unknown mode \"warp\""});
}

TEST_F(Cli, UnknownBackendAndVulkanWithoutVulkan) {
  write("g.json", kEmbGraph);
  const std::vector<std::string> run = {"run", path("g.json"), "--random-params", "--input", "idx=3xi32=0,1,2", "--backend"};
  auto with = [&](const std::string& b) {
    std::vector<std::string> a = run;
    a.push_back(b);
    return a;
  };
  expect_fail(with("metal"), 2, {"unknown backend \"metal\"; valid backends are cpu, vulkan"});
  Proc p = run_rlx(with("vulkan"));
  if (p.code == 0) GTEST_SKIP() << "Vulkan is available here: " << p.err;
  EXPECT_EQ(p.code, 3) << show(p);
  EXPECT_TRUE(has(p.err, "Vulkan") || has(p.err, "vulkan")) << show(p);
  EXPECT_TRUE(has(p.err, "built without the Vulkan executor") || has(p.err, "device")) << show(p);
}

TEST_F(Cli, BadUsage) {
  write("g.json", kEmbGraph);
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=3xi32=0,1,2", "--repeat", "0"}, 2,
              {"--repeat and --steps must be at least 1"});
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=3xi32=0,1,2", "--expect", "emb=random"}, 2,
              {"--expect emb: random values cannot be an expectation"});
  expect_fail({"run", path("g.json"), "--random-params=abc", "--input", "idx=3xi32=0,1,2"}, 2,
              {"--random-params=abc: the seed must be a non-negative integer"});
  ProcOptions env;
  env.env["RLX_DEVICE"] = "first";
  expect_fail({"run", path("g.json"), "--random-params", "--input", "idx=3xi32=0,1,2"}, 2,
              {"RLX_DEVICE=first: expected an integer"}, env);
  expect_fail({"bench", path("g.json"), "--random-params", "--input", "idx=3xi32=0,1,2", "--format", "xml"}, 2,
              {"--format: expected md, json or csv"});
  expect_fail({"run", path("nope.json")}, 2, {"cannot read " + path("nope.json") + ": file does not exist"});
  expect_fail({"run", dir_}, 2, {"cannot read " + dir_ + ": it is a directory, expected a file"});
  expect_fail({"inspect", write("bad.json", "{")}, 2, {"not valid JSON"});
  Proc p = run_rlx({"run", path("g.json"), "--frobnicate"});
  EXPECT_EQ(p.code, 2) << show(p);
  Proc q = run_rlx({});
  EXPECT_EQ(q.code, 2) << show(q);
}

// ---- every malformed graph of tests/golden/bad, through `rlx run` ----

struct BadGraph {
  std::string file;
  std::vector<std::string> ids;
};

std::vector<BadGraph> bad_graphs() {
  std::ifstream f(src("tests/golden/bad/expected_errors.json"));
  json j = json::parse(f);
  std::vector<BadGraph> r;
  for (auto& [file, ids] : j.items()) r.push_back({file, ids.get<std::vector<std::string>>()});
  return r;
}

void PrintTo(const BadGraph& c, std::ostream* os) { *os << c.file; }

class BadGolden : public ::testing::TestWithParam<BadGraph> {};

TEST_P(BadGolden, RlxRunRefusesItNamingFileAndNode) {
  const BadGraph& c = GetParam();
  const std::string file = src("tests/golden/bad/" + c.file);
  Proc p = run_rlx({"run", file, "--random-params"});
  EXPECT_EQ(p.code, 2) << show(p);
  EXPECT_HAS(p.err, "error: " + file + ": ");
  EXPECT_EQ(p.out, "") << "refused before anything runs";
  EXPECT_FALSE(has(p.err, "mode on cpu")) << "refused before anything runs";
  if (!c.ids.empty()) {
    bool named = false;
    for (const auto& id : c.ids) named = named || has(p.err, "node '" + id + "'") || has(p.err, "\"" + id + "\"");
    EXPECT_TRUE(named) << "names none of the expected nodes:\n" << p.err;
  }
  const std::map<std::string, std::string> extra = {{"malformed_json.json", "not valid JSON at line 7, column 3"},
                                                    {"dangling_input.json", "\"nowhere\""},
                                                    {"dangling_output.json", "\"z\" is not a node"},
                                                    {"bad_version.json", "unsupported version 2"}};
  if (auto it = extra.find(c.file); it != extra.end()) {
    EXPECT_HAS(p.err, it->second);
  }
}

INSTANTIATE_TEST_SUITE_P(Files, BadGolden, ::testing::ValuesIn(bad_graphs()), [](const auto& info) {
  std::string n = info.param.file.substr(0, info.param.file.rfind('.'));
  for (auto& ch : n)
    if (!isalnum((unsigned char)ch)) ch = '_';
  return n;
});

TEST(BadGoldenList, CoversEveryFileInTheDirectory) {
  auto listed = bad_graphs();
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(src("tests/golden/bad")))
    if (e.path().extension() == ".json" && e.path().filename() != "expected_errors.json") {
      ++files;
      bool found = false;
      for (const auto& b : listed) found = found || b.file == e.path().filename().string();
      EXPECT_TRUE(found) << e.path() << " is not in expected_errors.json";
    }
  EXPECT_EQ(files, listed.size());
}

// ================================================================ untrusted files (issue 24)
// A model names its outputs; a file names its sizes. Neither may write outside --out-dir,
// crash the parser, or make rlx block or read without end.

// neg of x: y = -x, so the values are known without running rlx.
std::string neg_graph(const std::string& out_id) {
  const std::string id = json(out_id).dump();
  return graph_with(R"({"id": "x", "op": "input", "shape": [2]}, {"id": )" + id + R"(, "op": "neg", "inputs": ["x"]})",
                    "[" + id + "]");
}

TEST_F(Cli, OutDirRefusesOutputIdsThatAreNotPlainFileNames) {
  fs::create_directories(path("work/out"));
  const std::string out = path("work/out");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"../escaped", "it contains a path separator"},
      {path("abs"), "it contains a path separator"},  // an absolute path (into this test's directory)
      {"a\\b", "it contains a path separator"},
      {"..", "it starts with '.'"},
      {".hidden", "it starts with '.'"},
      {"tab\there", "it contains a control character"},
  };
  for (const auto& [id, why] : cases) {
    SCOPED_TRACE(id);
    write("work/g.json", neg_graph(id));
    Proc p = expect_fail({"run", path("work/g.json"), "--input", "x=2xf32=1,2", "--out-dir", out}, 2,
                         {"--out-dir " + out + ": output '", "' cannot be a file name (" + why + ")",
                          "name its file with --output '"});
    EXPECT_EQ(p.out, "") << "refused before running";
  }
  EXPECT_TRUE(fs::is_empty(out));
  EXPECT_FALSE(fs::exists(path("work/escaped.npy")));
  EXPECT_FALSE(fs::exists(path("abs.npy")));
  EXPECT_TRUE(temporaries(path("work")).empty());
  // The way out the message names: --output gives that output its file; --out-dir skips it.
  write("work/g.json", neg_graph("../escaped"));
  Proc p = run_rlx({"run", path("work/g.json"), "--input", "x=2xf32=1,2", "--out-dir", out, "--output",
                    "../escaped=" + path("work/out/e.npy")});
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_EQ(rlx::io::read_npy(path("work/out/e.npy")).to_vector(), (std::vector<float>{-1, -2}));
  EXPECT_EQ(std::distance(fs::directory_iterator(out), {}), 1) << "only the file --output named";
}

TEST_F(Cli, TwoOutputsOntoOneFileAreRefused) {
  // --output a=out/b.npy with --out-dir out: b's file under --out-dir is out/b.npy too.
  write("g.json", graph_with(R"({"id": "x", "op": "input", "shape": [2]}, {"id": "a", "op": "neg", "inputs": ["x"]},
    {"id": "b", "op": "exp", "inputs": ["x"]})", R"(["a", "b"])"));
  fs::create_directories(path("out"));
  Proc p = expect_fail({"run", path("g.json"), "--input", "x=2xf32=1,2", "--out-dir", path("out"), "--output", "a=" + path("out/b.npy")},
                       2, {"outputs 'a' and 'b' would both be written there"});
  EXPECT_EQ(p.out, "");
  expect_fail({"run", path("g.json"), "--input", "x=2xf32=1,2", "--output", "a=" + path("o.npy"), "--output", "b=" + path("out/../o.npy")},
              2, {"outputs 'a' and 'b' would both be written there"});
  EXPECT_TRUE(fs::is_empty(path("out")));
}

TEST_F(Cli, OutDirReplacesAPlantedSymlinkInsteadOfFollowingIt) {
  // out/y.npy is a symlink to a file outside out/: the output replaces the link (a temporary in
  // out/, then a rename), and the file it pointed to is untouched.
  fs::create_directories(path("out"));
  write("g.json", neg_graph("y"));
  write("victim.npy", "do not overwrite");
  fs::create_symlink(path("victim.npy"), path("out/y.npy"));
  Proc p = run_rlx({"run", path("g.json"), "--input", "x=2xf32=1,2", "--out-dir", path("out")});
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_EQ(slurp(path("victim.npy")), Bytes({'d', 'o', ' ', 'n', 'o', 't', ' ', 'o', 'v', 'e', 'r', 'w', 'r', 'i', 't', 'e'}));
  EXPECT_FALSE(fs::is_symlink(path("out/y.npy")));
  EXPECT_EQ(rlx::io::read_npy(path("out/y.npy")).to_vector(), (std::vector<float>{-1, -2}));
  EXPECT_TRUE(temporaries(path("out")).empty());
}

// Unblocks a reader stuck in open(2) on a FIFO (the behaviour before issue 24) after a few
// seconds, so a regression fails on its message instead of hanging the test.
class FifoWatchdog {
 public:
  explicit FifoWatchdog(std::string fifo) : fifo_(std::move(fifo)), t_([this] {
    for (int i = 0; i < 50 && !done_; ++i) ::usleep(100000);
    int fd = ::open(fifo_.c_str(), O_WRONLY | O_NONBLOCK);  // ENXIO unless someone is blocked reading
    if (fd >= 0) ::close(fd);
  }) {}
  ~FifoWatchdog() {
    done_ = true;
    t_.join();
  }

 private:
  std::string fifo_;
  std::atomic<bool> done_{false};
  std::thread t_;
};

TEST_F(Cli, SpecialFilesAreRefusedAsGraphInputParamsAndExpectations) {
  write("g.json", neg_graph("y"));
  ASSERT_EQ(::mkfifo(path("fifo.npy").c_str(), 0600), 0);
  fs::create_symlink("/dev/zero", path("zero.npy"));
  fs::create_symlink("/dev/zero", path("zero.json"));
  fs::create_symlink("/dev/zero", path("zero.safetensors"));
  FifoWatchdog watchdog(path("fifo.npy"));
  const std::string fifo = "it is a FIFO (named pipe), expected a regular file";
  const std::string chr = "it is a character device, expected a regular file";
  const std::string g = path("g.json"), x = "x=2xf32=1,2";
  expect_fail({"run", g, "--input", "x=@" + path("fifo.npy")}, 2, {"cannot read " + path("fifo.npy") + ": " + fifo});
  expect_fail({"run", g, "--input", "x=@" + path("zero.npy")}, 2, {"cannot read " + path("zero.npy") + ": " + chr});
  expect_fail({"run", g, "--input", "x=" + path("zero.safetensors") + ":x"}, 2, {chr});
  expect_fail({"run", g, "--input", x, "--expect", "y=@" + path("fifo.npy")}, 2, {fifo});
  expect_fail({"run", g, "--input", x, "--expect", "y=@" + path("zero.npy")}, 2, {chr});
  expect_fail({"run", path("fifo.npy")}, 2, {fifo});
  expect_fail({"inspect", path("zero.json")}, 2, {chr});
  const std::string pg = write("p.json", graph_with(R"({"id": "zero", "op": "param", "shape": [2]}, {"id": "y", "op": "neg", "inputs": ["zero"]})"));
  expect_fail({"run", pg, "--params", path("zero.safetensors")}, 2, {chr});
  expect_fail({"run", pg, "--params", path("zero.npy")}, 2, {chr});
  // A symlink to a regular file is fine: -(1, 2) = (-1, -2).
  write("x.npy", raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", Bytes{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40}));
  fs::create_symlink(path("x.npy"), path("link.npy"));
  Proc p = run_rlx({"run", g, "--input", "x=@" + path("link.npy"), "--output", "y=" + path("y.npy")});
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_EQ(rlx::io::read_npy(path("y.npy")).to_vector(), (std::vector<float>{-1, -2}));
}

TEST_F(Cli, DeeplyNestedJsonIsRefusedWithABoundedMessage) {
  // "format" holding a list nested 100,000 deep (200 KB, valid JSON) crashed the error path
  // that printed it; now the nesting is refused while parsing (limit 128 levels).
  const std::string deep = R"({"format": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  write("deep.json", deep);
  for (const char* cmd : {"inspect", "run"}) {
    Proc p = expect_fail({cmd, path("deep.json")}, 2, {path("deep.json") + ": JSON nested deeper than 128 levels"});
    EXPECT_LT(p.err.size(), 400u) << "one short message";
  }
  // Deep nesting anywhere else (an attribute, a constant's value) is refused the same way.
  write("deep_attr.json", graph_with(R"({"id": "x", "op": "input", "shape": [2]},
    {"id": "y", "op": "transpose", "inputs": ["x"], "attrs": {"perm": )" + std::string(140, '[') + std::string(140, ']') + "}}"));
  expect_fail({"run", path("deep_attr.json"), "--input", "x=2xf32=1,2"}, 2, {"nested deeper than 128 levels"});
  // A long but shallow value is quoted in at most 200 characters.
  std::string list = "[0";
  for (int i = 1; i < 100000; ++i) list += "," + std::to_string(i);
  write("long.json", R"({"format": )" + list + "]}");
  Proc p = expect_fail({"inspect", path("long.json")}, 2, {"format: expected \"format\": \"rlx.graph\", got [0,1,2,3,"});
  EXPECT_LT(p.err.size(), 400u) << p.err.substr(0, 400);
}

TEST(MessageExcerpts, ModelGivenIdsAndKeysAreQuotedBoundedAndWithoutControlCharacters) {
  // A 1000-byte id holding a terminal escape, with a 1000-byte unknown field.
  const std::string id = "x\x1b[31m" + std::string(1000, 'a'), key = "shap" + std::string(1000, 'k');
  std::string msg = error_of([&] {
    load_and_infer(graph_with(R"({"id": )" + json(id).dump() + R"(, "op": "input", "shape": [1], )" + json(key).dump() + ": 1}",
                              "[" + json(id).dump() + "]"));
  });
  EXPECT_HAS(msg, "t.json: node 'x\\x1b[31maaa");
  EXPECT_HAS(msg, "...' (input) at nodes[0]: unknown field \"shapkkk");
  EXPECT_EQ(msg.find('\x1b'), std::string::npos) << "no raw escape reaches the terminal";
  EXPECT_LT(msg.size(), 500u);
}

TEST_F(Cli, DuplicateJsonKeysAreRefusedNamingTheKey) {
  // {"op": "neg", "op": "exp"} ran exp: JSON leaves the meaning of a repeated key open.
  write("dup_op.json", graph_with(R"({"id": "x", "op": "input", "shape": [1]}, {"id": "y", "op": "neg", "op": "exp", "inputs": ["x"]})"));
  Proc p = expect_fail({"run", path("dup_op.json"), "--input", "x=1xf32=1"}, 2,
                       {path("dup_op.json") + ": duplicate key \"op\" (in an object under \"nodes\")"});
  EXPECT_EQ(p.out, "");
  write("dup_attr.json", graph_with(R"({"id": "x", "op": "input", "shape": [2, 3]},
    {"id": "y", "op": "softmax", "inputs": ["x"], "attrs": {"axis": 0, "axis": 1}})"));
  expect_fail({"run", path("dup_attr.json"), "--input", "x=random"}, 2, {"duplicate key \"axis\" (in an object under \"attrs\")"});
  write("dup_top.json", R"({"format": "rlx.graph", "version": 1, "version": 2, "nodes": [], "outputs": []})");
  expect_fail({"inspect", path("dup_top.json")}, 2, {"duplicate key \"version\" (in the top-level object)"});
  // A safetensors header is JSON from a file too.
  const std::string t = R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  write("dup.safetensors", raw_safetensors(R"({"w": )" + t + R"(, "w": )" + t + "}", Bytes(8, 0)));
  write("pg.json", graph_with(R"({"id": "w", "op": "param", "shape": [2]}, {"id": "y", "op": "neg", "inputs": ["w"]})"));
  expect_fail({"run", path("pg.json"), "--params", path("dup.safetensors")}, 2, {"dup.safetensors: header: duplicate key \"w\""});
}

// A constant's value must fit its dtype, by the inline --input rule: 3e9 as i32 was saturated
// to 2147483647 while `--input x=i32=3000000000` is refused.
TEST(ConstantRange, ValuesThatDoNotFitTheDtypeAreRefusedNamingTheNode) {
  auto constant = [](const std::string& dtype, const std::string& shape, const std::string& value) {
    return graph_with(R"({"id": "y", "op": "constant", "dtype": ")" + dtype + R"(", "shape": )" + shape +
                      R"(, "value": )" + value + "}");
  };
  const std::vector<std::tuple<std::string, std::string, std::string, std::string>> refused = {
      {"i32", "[1]", "3e9", "i32 value 3000000000.0 is not an integer in range"},
      {"i32", "[2]", "[1, 2147483648]", "i32 value 2147483648 is not an integer in range"},
      {"i32", "[1]", "[-2147483649]", "i32 value -2147483649 is not an integer in range"},
      {"i32", "[1]", "2.5", "i32 value 2.5 is not an integer in range"},
      {"i64", "[1]", "[9223372036854775808]", "i64 value 9223372036854775808 is not an integer in range"},
      {"i64", "[1]", "[1e19]", "i64 value 1e+19 is not an integer in range"},
      {"f32", "[1]", "[1e39]", "value 1e+39 is out of range for f32"},
      {"f16", "[1]", "-1e39", "value -1e+39 is out of range for f32"},
      {"bool", "[1]", "[2]", "value 2 is not 0, 1, true or false"},
  };
  for (const auto& [dtype, shape, value, phrase] : refused) {
    SCOPED_TRACE(dtype + " " + value);
    std::string msg = error_of([&] { load_and_infer(constant(dtype, shape, value)); });
    EXPECT_HAS(msg, "t.json: node 'y' (constant) at nodes[0]: " + phrase);
  }
  // The ends of each range are accepted, and integers are kept exactly (not rounded through f32).
  auto values = [&](const std::string& dtype, const std::string& shape, const std::string& value) {
    return rlx::ir::load_graph_text(constant(dtype, shape, value), "t.json").nodes.at(0).constant;
  };
  Tensor i32 = values("i32", "[3]", "[-2147483648, 2147483647, 2e9]");
  EXPECT_EQ(i32.int_at(0), INT32_MIN);
  EXPECT_EQ(i32.int_at(1), INT32_MAX);
  EXPECT_EQ(i32.int_at(2), 2000000000);
  Tensor i64 = values("i64", "[3]", "[9007199254740993, -9223372036854775808, 9223372036854775807]");
  EXPECT_EQ(i64.int_at(0), 9007199254740993LL);
  EXPECT_EQ(i64.int_at(1), INT64_MIN);
  EXPECT_EQ(i64.int_at(2), INT64_MAX);
  EXPECT_EQ(values("i32", "[2, 2]", "7").int_at(3), 7);
  EXPECT_EQ(values("i32", "[0]", "7").numel(), 0);
  EXPECT_EQ(values("bool", "[2]", "[true, 0]").int_at(0), 1);
  // pad's `value` attribute becomes an element of x's dtype: the same rule.
  auto pad = [](const std::string& value) {
    return graph_with(R"({"id": "x", "op": "input", "shape": [2], "dtype": "i32"},
      {"id": "y", "op": "pad", "inputs": ["x"], "attrs": {"pads": [1, 1], "value": )" + value + "}}");
  };
  EXPECT_HAS(error_of([&] { load_and_infer(pad("3e9")); }),
             "node 'y' (pad) at nodes[1]: attribute 'value' 3000000000 is not an integer in range [-2147483648, 2147483647] (x is i32)");
  EXPECT_HAS(error_of([&] { load_and_infer(pad("2.5")); }), "attribute 'value' 2.5 is not an integer in range");
  EXPECT_NO_THROW(load_and_infer(pad("-2147483648")));
}

TEST_F(Cli, ConstantOutOfItsDtypeRangeIsRefusedAsTheInlineSpecIs) {
  write("c.json", graph_with(R"({"id": "y", "op": "constant", "dtype": "i32", "shape": [1], "value": 3e9})"));
  Proc p = expect_fail({"run", path("c.json")}, 2, {"node 'y' (constant) at nodes[0]: i32 value 3000000000.0 is not an integer in range"});
  EXPECT_EQ(p.out, "");
  write("x.json", graph_with(R"({"id": "y", "op": "input", "dtype": "i32", "shape": [1]})"));
  expect_fail({"run", path("x.json"), "--input", "y=1xi32=3e9"}, 2, {"i32 value '3e9' is not an integer in range"});
}

// Sizes: element count x element size must fit int64, or the byte size wraps (broadcast_to
// [2^62] of f32 is 2^64 bytes, which became a 0-byte buffer and crashed the kernel writing it).
TEST(SizeOverflow, ByteSizesThatOverflowInt64AreRefusedNamingTheNode) {
  const std::string two62 = "4611686018427387904", two61 = "2305843009213693952";
  auto bcast = [&](const std::string& dtype, const std::string& to) {
    return graph_with(R"({"id": "x", "op": "input", "shape": [1], "dtype": ")" + dtype + R"("},
      {"id": "b", "op": "broadcast_to", "inputs": ["x"], "attrs": {"shape": [)" + to + R"(]}},
      {"id": "y", "op": "sum", "inputs": ["b"]})");
  };
  // 2^62 f32 = 2^64 bytes; 2^61 i64 = 2^64 bytes; 2^62 bool = 2^62 bytes fits.
  EXPECT_HAS(error_of([&] { load_and_infer(bcast("f32", two62)); }),
             "t.json: node 'b' (broadcast_to) at nodes[1]: result shape [" + two62 + "] of f32 is more bytes than fit int64");
  EXPECT_HAS(error_of([&] { load_and_infer(bcast("i64", two61)); }),
             "node 'b' (broadcast_to) at nodes[1]: result shape [" + two61 + "] of i64 is more bytes than fit int64");
  EXPECT_NO_THROW(load_and_infer(bcast("bool", two62)));
  // An input, a param: the declared shape itself.
  EXPECT_HAS(error_of([&] { load_and_infer(graph_with(R"({"id": "y", "op": "input", "shape": [)" + two62 + "]}")); }),
             "node 'y' (input) at nodes[0]: result shape [" + two62 + "] of f32 is more bytes than fit int64");
  EXPECT_HAS(error_of([&] { load_and_infer(graph_with(R"({"id": "y", "op": "param", "shape": [2, )" + two61 + "]}")); }),
             "node 'y' (param) at nodes[0]: result shape [2, " + two61 + "] of f32 is more bytes than fit int64");
  // A symbolic dimension bound at run time: the same check when shapes are inferred.
  rlx::ir::Graph g = rlx::ir::load_graph_text(graph_with(R"({"id": "x", "op": "input", "shape": ["n"]}, {"id": "y", "op": "neg", "inputs": ["x"]})"), "t.json");
  EXPECT_HAS(error_of([&] { rlx::ir::infer_shapes(g, {{"x", Shape{INT64_C(1) << 62}}}); }), "node 'x' (input) at nodes[0]: result shape");
  // concat of three bool [2^62]: each fits, the sum of the axis does not (it wrapped before).
  EXPECT_HAS(error_of([&] { load_and_infer(graph_with(R"({"id": "x", "op": "input", "shape": [1], "dtype": "bool"},
      {"id": "b", "op": "broadcast_to", "inputs": ["x"], "attrs": {"shape": [)" + two62 + R"(]}},
      {"id": "y", "op": "concat", "inputs": ["b", "b", "b"], "attrs": {"axis": 0}})")); }),
             "node 'y' (concat) at nodes[2]: the concatenated axis 0 overflows");
}

TEST(SizeOverflow, AnArenaLargerThanInt64IsAMemoryError) {
  // Two values of 2^62 + 2^61 bytes live at once: each fits int64, both together do not.
  const int64_t big = (INT64_C(1) << 62) + (INT64_C(1) << 61);
  std::vector<rlx::passes::Lifetime> life = {{big, 0, 1}, {big, 1, 2}};
  EXPECT_HAS(error_of([&] { rlx::passes::plan_memory(life); }, rlx::kExitRuntime), "out of memory");
  // Not at once: they share the memory, and the arena is one value (rounded to 64 bytes).
  life[1].first = 2;
  EXPECT_EQ(rlx::passes::plan_memory(life).arena_bytes, big);
  EXPECT_HAS(error_of([&] { rlx::passes::plan_memory({{INT64_MAX - 1, 0, 0}}); }, rlx::kExitRuntime), "out of memory");
}

TEST_F(Cli, HugeShapesAreExit2AndUnallocatableOnesExit3InEveryMode) {
  auto bcast = [&](const std::string& to) {
    return graph_with(R"({"id": "x", "op": "input", "shape": [1]},
      {"id": "b", "op": "broadcast_to", "inputs": ["x"], "attrs": {"shape": [)" + to + R"(]}},
      {"id": "y", "op": "sum", "inputs": ["b"]})");
  };
  write("wrap.json", bcast("4611686018427387904"));  // 2^64 bytes: crashed with SIGSEGV in lazy mode
  write("big.json", bcast("1099511627776"));         // 2^42 bytes (4 TiB): fits int64, no host has it
  for (const char* mode : {"eager", "lazy", "compiled"}) {
    SCOPED_TRACE(mode);
    expect_fail({"run", path("wrap.json"), "--input", "x=1xf32=1", "--mode", mode}, 2,
                {"node 'b' (broadcast_to) at nodes[1]: result shape [4611686018427387904] of f32 is more bytes than fit int64"});
    expect_fail({"run", path("big.json"), "--input", "x=1xf32=1", "--mode", mode}, 3, {"out of host memory allocating"});
  }
  expect_fail({"inspect", path("wrap.json")}, 2, {"more bytes than fit int64"});
}

}  // namespace

// ================================================================ i8/u8 and the quantization ops
// i8/u8 are storage types (docs/graph-format.md): arithmetic refuses them naming the node (but
// for the integer elementwise ops on integers alone, which wrap in 8 bits);
// integers that do not fit are refused where they enter; quantization attributes are checked.
TEST(Quant, InferenceRefusesWhatItCannotCompute) {
  auto in = [](const char* id, const char* shape, const char* dt) {
    return std::string(R"({"id": ")") + id + R"(", "op": "input", "shape": )" + shape + R"(, "dtype": ")" + dt + "\"}";
  };
  const std::string u = in("u", "[2, 4]", "u8"), x = in("x", "[2, 4]", "f32");
  const std::pair<std::string, const char*> cases[] = {
      {u + "," + x + R"(, {"id": "y", "op": "add", "inputs": ["u", "x"]})", "input 0 is u8, a storage type that add does not compute on; cast first"},
      {u + R"(, {"id": "y", "op": "exp", "inputs": ["u"]})", "input 0 is u8, a storage type that exp does not compute on; cast first"},
      {u + R"(, {"id": "y", "op": "sum", "inputs": ["u"]})", "cast first"},
      {u + R"(, {"id": "y", "op": "matmul", "inputs": ["u", "u"], "attrs": {"transpose_b": true}})", "cast first"},
      {x + R"(, {"id": "s", "op": "constant", "shape": [3], "value": 1}, {"id": "y", "op": "quantize", "inputs": ["x", "s"]})",
       "scale [3] must be a scalar (per tensor) or [4] (per axis 1 of [2, 4])"},
      {x + R"(, {"id": "s", "op": "constant", "shape": [2, 3], "value": 1}, {"id": "y", "op": "quantize", "inputs": ["x", "s"], "attrs": {"block_size": 3}})",
       "blocked scale must be [2, 2]"},
      {x + R"(, {"id": "s", "op": "constant", "shape": [], "value": 1}, {"id": "y", "op": "quantize", "inputs": ["x", "s"], "attrs": {"block_size": -1}})",
       "block_size must be >= 0"},
      {x + R"(, {"id": "s", "op": "constant", "shape": [], "value": 1}, {"id": "z", "op": "constant", "shape": [], "dtype": "i8", "value": 0},
          {"id": "y", "op": "quantize", "inputs": ["x", "s", "z"], "attrs": {"dtype": "u8"}})",
       "dtype u8 differs from zero_point's i8"},
      {x + R"(, {"id": "s", "op": "constant", "shape": [], "value": 1}, {"id": "z", "op": "constant", "shape": [], "dtype": "i32", "value": 0},
          {"id": "y", "op": "quantize", "inputs": ["x", "s", "z"]})",
       "zero_point must be i8 or u8, got i32"},
      {x + R"(, {"id": "s", "op": "constant", "shape": [], "value": 1}, {"id": "y", "op": "dequantize", "inputs": ["x", "s"]})",
       "q must be i8, u8 or i32, got f32"},
      {u + R"(, {"id": "s", "op": "constant", "shape": [4], "value": 1}, {"id": "z", "op": "constant", "shape": [], "dtype": "u8", "value": 0},
          {"id": "y", "op": "dequantize", "inputs": ["u", "s", "z"]})",
       "zero_point has shape []; it must have the scale's shape [4]"},
      {u + "," + in("v", "[4, 3]", "i8") + R"(, {"id": "z", "op": "constant", "shape": [], "dtype": "u8", "value": 0},
          {"id": "y", "op": "matmul_integer", "inputs": ["u", "v", "z", "z"]})",
       "b_zero_point is u8; it must be i8 like b"},
      {u + "," + in("v", "[4, 3]", "u8") + R"(, {"id": "z", "op": "constant", "shape": [3], "dtype": "u8", "value": 0},
          {"id": "y", "op": "matmul_integer", "inputs": ["u", "v", "z"]})",
       "a_zero_point has shape [3]; it must be a scalar, [2] or [2, 1] (per row of a)"},
      {x + "," + in("v", "[4, 3]", "u8") + R"(, {"id": "y", "op": "matmul_integer", "inputs": ["x", "v"]})", "a must be i8 or u8, got f32"},
      {x + R"(, {"id": "b", "op": "constant", "shape": [3, 2, 8], "dtype": "u8", "value": 0}, {"id": "s", "op": "constant", "shape": [3, 1], "value": 1},
          {"id": "y", "op": "matmul_nbits", "inputs": ["x", "b", "s"], "attrs": {"k": 4, "n": 3, "block_size": 16}})",
       "b must be [3, 1, 8] ([n, k_blocks, block_size * bits / 8]), got [3, 2, 8]"},
      {x + R"(, {"id": "b", "op": "constant", "shape": [3, 1, 8], "dtype": "u8", "value": 0}, {"id": "s", "op": "constant", "shape": [3, 2], "value": 1},
          {"id": "y", "op": "matmul_nbits", "inputs": ["x", "b", "s"], "attrs": {"k": 4, "n": 3, "block_size": 16}})",
       "scales must be [3, 1] (or [3]), got [3, 2]"},
      {x + R"(, {"id": "b", "op": "constant", "shape": [3, 1, 8], "dtype": "u8", "value": 0}, {"id": "s", "op": "constant", "shape": [3, 1], "value": 1},
          {"id": "y", "op": "matmul_nbits", "inputs": ["x", "b", "s"], "attrs": {"k": 4, "n": 3, "block_size": 12}})",
       "block_size must be a power of 2 >= 16, got 12"},
      {x + R"(, {"id": "b", "op": "constant", "shape": [3, 1, 8], "dtype": "u8", "value": 0}, {"id": "s", "op": "constant", "shape": [3, 1], "value": 1},
          {"id": "y", "op": "matmul_nbits", "inputs": ["x", "b", "s"], "attrs": {"k": 4, "n": 3, "bits": 3, "block_size": 16}})",
       "bits must be 4 or 8, got 3"},
      {u + R"(, {"id": "y", "op": "pad", "inputs": ["u"], "attrs": {"pads": [0, 1, 0, 0], "value": 256}})",
       "attribute 'value' 256 is not an integer in range [0, 255] (x is u8)"},
      {R"({"id": "y", "op": "constant", "shape": [2], "dtype": "u8", "value": [1, 256]})", "u8 value 256 is not an integer in range [0, 255]"},
      {R"({"id": "y", "op": "constant", "shape": [1], "dtype": "i8", "value": [1.5]})", "i8 value 1.5 is not an integer in range [-128, 127]"},
  };
  for (const auto& [nodes, phrase] : cases) {
    SCOPED_TRACE(nodes);
    EXPECT_HAS(error_of([&] { load_and_infer(graph_with(nodes)); }), phrase);
  }
}

// The CPU, and Vulkan where this rlx has it (the sanitizer build has none; the Release
// build's run of the same tests covers it).
std::vector<std::string> built_backends() {
  std::vector<std::string> backends{"cpu"};
  Proc probe = run_rlx({"devices"});
  if (has(probe.out, "vulkan device 0")) backends.push_back("vulkan");
  return backends;
}

TEST_F(Cli, QuantizedValuesRunExactlyAndBadOnesExit2) {
  write("q.json", graph_with(R"({"id": "x", "op": "input", "shape": [4], "dtype": "u8"},
      {"id": "s", "op": "constant", "shape": [], "value": 0.5},
      {"id": "z", "op": "constant", "shape": [], "dtype": "u8", "value": 128},
      {"id": "d", "op": "dequantize", "inputs": ["x", "s", "z"]},
      {"id": "y", "op": "quantize", "inputs": ["d", "s", "z"], "attrs": {"dtype": "u8"}})", R"(["y", "d"])"));
  for (const std::string& backend : built_backends())
    for (const char* mode : {"eager", "lazy", "compiled"}) {
      SCOPED_TRACE(backend + " " + mode);
      Proc p = run_rlx({"run", path("q.json"), "--backend", backend, "--mode", mode, "--input", "x=4xu8=0,255,128,3", "--json"});
      ASSERT_EQ(p.code, 0) << show(p);
      json j = json::parse(p.out);
      EXPECT_EQ(j["outputs"][0]["dtype"], "u8");
      EXPECT_EQ(j["outputs"][0]["values"], json::parse("[0, 255, 128, 3]"));  // a round trip is exact
      EXPECT_EQ(j["outputs"][1]["values"], json::parse("[-64.0, 63.5, 0.0, -62.5]"));  // (q - 128) * 0.5
    }
  expect_fail({"run", path("q.json"), "--input", "x=4xu8=0,256,1,2"}, 2, {"u8 value '256' is not an integer in range [0, 255]"});
  // an i32 tensor for a u8 input is taken when its values fit, refused when one does not
  EXPECT_EQ(run_rlx({"run", path("q.json"), "--input", "x=4xi32=0,1,1,2"}).code, 0);
  expect_fail({"run", path("q.json"), "--input", "x=4xi32=0,1,300,2"}, 2, {"value 300 at element 2 of the i32 tensor does not fit the declared u8 [0, 255]"});
  // integer arithmetic on i8 alone wraps in 8 bits, as NumPy (np.int8(12) * np.int8(12) == -112)
  write("add.json", graph_with(R"({"id": "x", "op": "input", "shape": [4], "dtype": "i8"},
      {"id": "y", "op": "mul", "inputs": ["x", "x"]})"));
  for (const std::string& backend : built_backends()) {
    SCOPED_TRACE(backend);
    Proc p = run_rlx({"run", path("add.json"), "--backend", backend, "--input", "x=4xi8=1,2,12,-12", "--json"});
    ASSERT_EQ(p.code, 0) << show(p);
    json j = json::parse(p.out);
    EXPECT_EQ(j["outputs"][0]["dtype"], "i8");
    EXPECT_EQ(j["outputs"][0]["values"], json::parse("[1, 4, -112, -112]"));
  }
  // ... and with a float operand it is refused (it would compute in a dtype nobody asked for)
  write("mixed.json", graph_with(R"({"id": "x", "op": "input", "shape": [4], "dtype": "i8"},
      {"id": "f", "op": "input", "shape": [4]}, {"id": "y", "op": "mul", "inputs": ["x", "f"]})"));
  expect_fail({"run", path("mixed.json"), "--input", "x=4xi8=1,2,3,4", "--input", "f=4xf32=1,2,3,4"}, 2,
              {"node 'y' (mul)", "cast first"});
}

// Integers travel as f32 on the Vulkan device (exact to 2^24): a matmul_integer result beyond
// that is a run-time error naming the node, never a rounded value; the CPU gives it exactly.
TEST_F(Cli, VulkanIntegerProductBeyond2To24IsAnError) {
  write("big.json", graph_with(R"({"id": "a", "op": "input", "shape": [1, 300], "dtype": "u8"},
      {"id": "b", "op": "input", "shape": [300, 1], "dtype": "u8"},
      {"id": "y", "op": "matmul_integer", "inputs": ["a", "b"]})"));
  std::string a = "1x300xu8=", b = "300x1xu8=";
  for (int k = 0; k < 300; ++k) a += k ? ",255" : "255", b += k ? ",255" : "255";
  Proc cpu = run_rlx({"run", path("big.json"), "--backend", "cpu", "--input", "a=" + a, "--input", "b=" + b, "--json"});
  ASSERT_EQ(cpu.code, 0) << show(cpu);
  EXPECT_EQ(json::parse(cpu.out)["outputs"][0]["values"][0].get<int64_t>(), 255 * 255 * 300);
  Proc probe = run_rlx({"devices"});
  if (!has(probe.out + probe.err, "vulkan")) GTEST_SKIP() << "no Vulkan";
  Proc p = run_rlx({"run", path("big.json"), "--backend", "vulkan", "--input", "a=" + a, "--input", "b=" + b});
  if (has(p.err, "no Vulkan") || has(p.err, "Vulkan is not available")) GTEST_SKIP() << p.err;
  EXPECT_EQ(p.code, 3) << show(p);
  EXPECT_HAS(p.err, "node 'y' (matmul_integer)");
  EXPECT_HAS(p.err, "integer result 19507500 does not fit exactly in the Vulkan backend's f32 storage");
}

// matmul_nbits reads ONNX Runtime's layout: consecutive K values in a byte, low nibble first;
// zero points packed the same way, default 8. One byte 0x21 holds k = 0 -> 1 and k = 1 -> 2.
TEST_F(Cli, MatmulNbitsNibbleOrder) {
  write("nb.json", graph_with(R"({"id": "a", "op": "input", "shape": [2, 16]},
      {"id": "b", "op": "constant", "shape": [2, 1, 8], "dtype": "u8", "value": [33, 0, 0, 0, 0, 0, 0, 240, 18, 0, 0, 0, 0, 0, 0, 0]},
      {"id": "s", "op": "constant", "shape": [2, 1], "value": [1.0, 0.5]},
      {"id": "z", "op": "constant", "shape": [2, 1], "dtype": "u8", "value": [8, 3]},
      {"id": "y", "op": "matmul_nbits", "inputs": ["a", "b", "s", "z"], "attrs": {"k": 16, "n": 2, "block_size": 16}},
      {"id": "y8", "op": "matmul_nbits", "inputs": ["a", "b", "s"], "attrs": {"k": 16, "n": 2, "block_size": 16}})",
                              R"(["y", "y8"])"));
  // a row 0 picks k = 0, row 1 picks k = 1 and k = 15.
  std::string a = "2x16xf32=1";
  for (int k = 1; k < 16; ++k) a += ",0";
  a += ",0,1";
  for (int k = 2; k < 15; ++k) a += ",0";
  a += ",1";
  // w[n=0]: q = [1, 2, 0 ... 0, 15] (0x21, ..., 0xf0), zp 8, scale 1 -> [-7, -6, -8 ..., 7]
  // w[n=1]: q = [2, 1, 0 ...] (0x12), zp 3 (low nibble of 3), scale 0.5 -> [-0.5, -1, -1.5 ...]
  // y[0] = [w0[0], w1[0]] = [-7, -0.5]; y[1] = [w0[1] + w0[15], w1[1] + w1[15]] = [-6 + 7, -1 - 1.5]
  // with the default zero point 8: w1 = ([2, 1, 0 ..., 0] - 8) * 0.5 -> y8 = [[-7, -3], [1, -3.5 - 4]]
  for (const std::string& backend : built_backends())
    for (const char* mode : {"eager", "compiled"}) {
      SCOPED_TRACE(backend + " " + mode);
      Proc p = run_rlx({"run", path("nb.json"), "--backend", backend, "--mode", mode, "--input", "a=" + a, "--json"});
      ASSERT_EQ(p.code, 0) << show(p);
      json j = json::parse(p.out);
      EXPECT_EQ(j["outputs"][0]["values"], json::parse("[-7.0, -0.5, 1.0, -2.5]"));
      EXPECT_EQ(j["outputs"][1]["values"], json::parse("[-7.0, -3.0, 1.0, -7.5]"));
    }
}
