// Tests for lib/io. Expected values come from tests/data/io/expected.json, written
// by NumPy alongside the fixtures (scripts/make_io_fixtures.py).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/file.h"
#include "io/json.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io/spec.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using rlx::DType;
using rlx::InputError;
using rlx::Shape;
using rlx::Tensor;
using Bytes = std::vector<uint8_t>;
using namespace rlx::io;

const std::string kData = std::string(RLX_SOURCE_DIR) + "/tests/data/io/";

// ---- helpers ----

Bytes slurp(const std::string& path) {  // independent of read_file
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

void spit(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string text_of(const std::string& path) {
  Bytes b = slurp(path);
  return std::string(b.begin(), b.end());
}

const json& expected() {
  static const json j = [] {
    Bytes b = slurp(kData + "expected.json");
    return json::parse(b.begin(), b.end());
  }();
  return j;
}

float json_float(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "nan") return NAN;
    return s == "inf" ? INFINITY : -INFINITY;
  }
  return (float)v.get<double>();
}

// Compares a tensor with an expected.json entry {dtype, shape, values}, exactly (sign of zero and NaN included).
void expect_matches(const Tensor& t, const json& e, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(rlx::dtype_name(t.dtype()), e["dtype"].get<std::string>());
  EXPECT_EQ(t.shape(), e["shape"].get<Shape>());
  ASSERT_EQ((size_t)t.numel(), e["values"].size());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (is_integer(t.dtype()) && e["values"][i].is_number_integer()) {  // exact over the whole range
      EXPECT_EQ(t.int_at(i), e["values"][i].get<int64_t>()) << "element " << i;
      continue;
    }
    const float want = json_float(e["values"][i]), got = (float)t.at(i);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "element " << i;
    } else {
      EXPECT_EQ(got, want) << "element " << i;
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << "element " << i;
    }
  }
}

void expect_same(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  EXPECT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.numel(), b.numel());
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (is_integer(a.dtype())) {
      EXPECT_EQ(a.int_at(i), b.int_at(i)) << i;  // exact over the whole range
    } else {
      const double x = a.at(i), y = b.at(i);
      EXPECT_TRUE(x == y || (std::isnan(x) && std::isnan(y))) << i;
    }
  }
}

// Runs `f`, which must throw InputError; returns its message.
std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError, got: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected InputError, nothing was thrown";
  return {};
}

::testing::AssertionResult Contains(const std::string& msg, const std::string& part) {
  if (msg.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << msg << "' does not contain '" << part << "'";
}

// A fresh directory under the gtest temp dir, removed with its contents.
class TmpDir {
 public:
  TmpDir() {
    std::string tmpl = ::testing::TempDir() + "rlx_io_XXXXXX";
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : "";
    EXPECT_FALSE(path_.empty());
  }
  ~TmpDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }
  std::vector<std::string> entries() const {
    std::vector<std::string> r;
    for (const auto& e : fs::directory_iterator(path_)) r.push_back(e.path().filename().string());
    std::sort(r.begin(), r.end());
    return r;
  }

 private:
  std::string path_;
};

// A tensor of each dtype with values that dtype holds exactly.
std::vector<std::pair<std::string, Tensor>> one_of_each_dtype() {
  return {
      {"f32", Tensor::from_vector({2, 2}, {1.5f, -0.f, NAN, -INFINITY}, DType::f32)},
      {"f16", Tensor::from_vector({3}, {0.5f, -65504.f, 0x1p-24f}, DType::f16)},
      {"bf16", Tensor::from_vector({2}, {0x1.fep100f, -3.f}, DType::bf16)},
      {"i32", Tensor::from_vector({3}, {-2147483648.f, 0.f, 16777216.f}, DType::i32)},
      {"i64", Tensor::from_vector({1, 2}, {0x1p62f, -5.f}, DType::i64)},
      {"bool", Tensor::from_vector({2}, {1.f, 0.f}, DType::boolean)},
      {"i8", Tensor::from_ints({3}, {-128, 127, -1}, DType::i8)},
      {"u8", Tensor::from_ints({2, 2}, {0, 255, 128, 7}, DType::u8)},
      {"scalar", Tensor::from_vector({}, {7.f}, DType::f32)},
      {"empty", Tensor({0, 4}, DType::i32)},
  };
}

Bytes prefix(const Bytes& b, size_t n) { return Bytes(b.begin(), b.begin() + n); }

// ---- .npy ----

// Builds a version-`major` .npy file around a hand-written header dict.
Bytes npy_bytes(const std::string& dict, const Bytes& data, int major = 1) {
  Bytes out = {0x93, 'N', 'U', 'M', 'P', 'Y', (uint8_t)major, 0};
  std::string header = dict + "\n";
  append_le(out, header.size(), major == 1 ? 2 : 4);
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Tensor parse_npy_bytes(const Bytes& b) { return parse_npy(b.data(), b.size(), "test.npy"); }

std::string npy_error(const std::string& dict, const Bytes& data = {}) {
  return input_error([&] { parse_npy_bytes(npy_bytes(dict, data)); });
}

TEST(Npy, ReadsEveryFixtureAsNumPyWroteIt) {
  const json& npy = expected()["npy"];
  EXPECT_EQ(npy.size(), 9u);  // f32 f16 i32 i64 bool scalar empty v2 v3
  for (const auto& [name, e] : npy.items()) expect_matches(read_npy(kData + name), e, name);
}

TEST(Npy, FixturesCoverFormatVersions1To3) {
  EXPECT_EQ(slurp(kData + "f32.npy")[6], 1);
  EXPECT_EQ(slurp(kData + "v2.npy")[6], 2);
  EXPECT_EQ(slurp(kData + "v3.npy")[6], 3);
}

TEST(Npy, EncodingReproducesNumPyBytes) {
  for (const char* name : {"f32.npy", "f16.npy", "i32.npy", "i64.npy", "bool.npy", "scalar.npy", "empty.npy"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(encode_npy(read_npy(kData + name)), slurp(kData + name));
  }
}

TEST(Npy, RoundTripsEveryDtype) {
  TmpDir dir;
  for (const auto& [name, t] : one_of_each_dtype()) {
    SCOPED_TRACE(name);
    Bytes b = encode_npy(t);
    const size_t header_len = b[8] | (b[9] << 8), data_start = 10 + header_len;
    EXPECT_EQ(data_start % 64, 0u);
    EXPECT_EQ(b[data_start - 1], '\n');
    const Tensor want = t.dtype() == DType::bf16 ? t.astype(DType::f32) : t;  // NumPy has no bf16
    expect_same(parse_npy_bytes(b), want);
    write_npy(dir / (name + ".npy"), t);
    expect_same(read_npy(dir / (name + ".npy")), want);
  }
}

// The exact bytes NumPy 1.24 writes for np.save(np.array([0, 255, 7, 128], np.uint8)) and
// np.array([[-128, 127], [0, -1]], np.int8): rlx reads them and writes the same bytes.
TEST(Npy, I8AndU8MatchNumPy) {
  auto numpy_file = [](const std::string& dict, const Bytes& data) {
    Bytes b = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 118, 0};
    std::string h = dict;
    h.resize(117, ' ');
    h += '\n';
    b.insert(b.end(), h.begin(), h.end());
    b.insert(b.end(), data.begin(), data.end());
    return b;
  };
  const Bytes u = numpy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }", {0x00, 0xff, 0x07, 0x80});
  const Bytes i = numpy_file("{'descr': '|i1', 'fortran_order': False, 'shape': (2, 2), }", {0x80, 0x7f, 0x00, 0xff});
  ASSERT_EQ(u.size(), 132u);
  Tensor tu = parse_npy_bytes(u), ti = parse_npy_bytes(i);
  ASSERT_EQ(tu.dtype(), DType::u8);
  ASSERT_EQ(ti.dtype(), DType::i8);
  EXPECT_EQ(ti.shape(), (Shape{2, 2}));
  const std::vector<int64_t> wu = {0, 255, 7, 128}, wi = {-128, 127, 0, -1};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(tu.int_at(k), wu[k]) << k;
    EXPECT_EQ(ti.int_at(k), wi[k]) << k;
  }
  EXPECT_EQ(encode_npy(Tensor::from_ints({4}, wu, DType::u8)), u);
  EXPECT_EQ(encode_npy(Tensor::from_ints({2, 2}, wi, DType::i8)), i);
}

TEST(Tensor, FromIntsRefusesValuesOutsideTheDtype) {
  EXPECT_THROW(Tensor::from_ints({1}, {256}, DType::u8), InputError);
  EXPECT_THROW(Tensor::from_ints({1}, {-1}, DType::u8), InputError);
  EXPECT_THROW(Tensor::from_ints({1}, {-129}, DType::i8), InputError);
  EXPECT_THROW(Tensor::from_ints({1}, {INT64_C(1) << 31}, DType::i32), InputError);
  EXPECT_EQ(Tensor::from_ints({1}, {-128}, DType::i8).int_at(0), -128);
}

TEST(Npy, Bf16IsWrittenAsF32) {
  Tensor t = Tensor::from_vector({2}, {1.5f, -0x1.fep100f}, DType::bf16);
  Tensor back = parse_npy_bytes(encode_npy(t));
  EXPECT_EQ(back.dtype(), DType::f32);
  EXPECT_EQ(back.to_vector(), t.to_vector());
}

TEST(Npy, IntegersAreStoredExactlyFloatsConvertLikeCast) {
  // f32 values converted to i32 follow cast's rules: truncation toward zero, saturation, NaN -> 0.
  Tensor t = Tensor::from_vector({5}, {2.6f, -2.4f, -2.5f, 1e10f, NAN}, DType::i32);
  Tensor back = parse_npy_bytes(encode_npy(t));
  ASSERT_EQ(back.dtype(), DType::i32);
  const std::vector<int64_t> want = {2, -2, -2, INT32_MAX, 0};
  for (int k = 0; k < 5; ++k) EXPECT_EQ(back.int_at(k), want[k]) << k;
  // i64 values beyond 2^53 (not representable in f32 or double) survive a write and a read exactly.
  const std::vector<int64_t> big = {INT64_MAX, INT64_MIN, (INT64_C(1) << 53) + 1, -((INT64_C(1) << 60) + 7)};
  Tensor b = parse_npy_bytes(encode_npy(Tensor::from_ints({4}, big, DType::i64)));
  ASSERT_EQ(b.dtype(), DType::i64);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(b.data<int64_t>()[k], big[k]) << k;
}

// np.save writes a transposed (column-major) array with fortran_order True; it is read into
// row-major order. The files hold np.arange(n).reshape(shape) in column-major layout, so the
// row-major element i must be i.
TEST(Npy, ReadsFortranOrderIntoRowMajor) {
  Tensor a = read_npy(kData + "fortran.npy");
  ASSERT_EQ(a.shape(), (Shape{2, 3}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(a.at(i), (float)i) << i;
  Tensor b = read_npy(kData + "fortran_3d_i64.npy");
  ASSERT_EQ(b.shape(), (Shape{2, 3, 4}));
  ASSERT_EQ(b.dtype(), DType::i64);
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(b.data<int64_t>()[i], i) << i;
  // A column-major header with too little data is still a truncated file.
  EXPECT_TRUE(Contains(npy_error("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", Bytes(12)), "truncated"));
}

TEST(Npy, RefusesObjectArrays) {
  std::string msg = input_error([] { read_npy(kData + "object.npy"); });
  EXPECT_TRUE(Contains(msg, "object.npy"));
  EXPECT_TRUE(Contains(msg, "object arrays (dtype '|O')"));
}

TEST(Npy, RefusesBigEndian) {
  std::string msg = input_error([] { read_npy(kData + "bigendian.npy"); });
  EXPECT_TRUE(Contains(msg, "bigendian.npy"));
  EXPECT_TRUE(Contains(msg, "big-endian data (dtype '>f4')"));
}

// float64 is a dtype of its own (ONNX models' f64): read as f64, every bit kept, never narrowed.
TEST(Npy, ReadsFloat64AsF64) {
  Tensor t = read_npy(kData + "f64.npy");  // np.save(np.array([1.0, 2.0]))
  ASSERT_EQ(t.dtype(), DType::f64);
  ASSERT_EQ(t.shape(), Shape{2});
  EXPECT_EQ(t.data<double>()[0], 1.0);
  EXPECT_EQ(t.data<double>()[1], 2.0);
}

TEST(Npy, RefusesUnknownDtypesListingTheSupportedOnes) {
  std::string msg = npy_error("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", Bytes(16));
  EXPECT_TRUE(Contains(msg, "unsupported dtype '<c8'"));
  EXPECT_TRUE(Contains(msg, "'<f4' f32, '<f2' f16, '<i4' i32, '<i8' i64, '|b1' bool"));
  EXPECT_TRUE(Contains(msg, "'<f8' f64, '<i2' i16, '<u2' u16, '<u4' u32, '<u8' u64"));
  for (const char* d : {"<c8", "<c16", "<f16", "S3", ""})
    EXPECT_TRUE(Contains(npy_error(std::string("{'descr': '") + d + "', 'fortran_order': False, 'shape': (1,), }",
                                   Bytes(16)),
                         "unsupported dtype")) << d;
  EXPECT_TRUE(Contains(npy_error("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", Bytes(4)),
                       "structured dtypes"));
}

TEST(Npy, HeaderIsParsedAsADictLiteral) {
  const Bytes data = {1, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff};
  for (const char* dict : {"{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
                           "{ 'shape' : ( 2 , ) , \"fortran_order\":False,'descr':'<i4' }",
                           "{'fortran_order': False, 'descr': \"<i4\", 'shape': (2L,)}     "}) {
    SCOPED_TRACE(dict);
    Tensor t = parse_npy_bytes(npy_bytes(dict, data));
    EXPECT_EQ(t.shape(), Shape{2});
    EXPECT_EQ(t.to_vector(), (std::vector<float>{1, -2}));
  }
  Tensor m = parse_npy_bytes(npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (1, 1)}", Bytes(8), 2));
  EXPECT_EQ(m.shape(), (Shape{1, 1}));
}

TEST(Npy, RefusesMalformedHeaders) {
  const std::string f = "'fortran_order': False";
  EXPECT_TRUE(Contains(npy_error("{'descr': '<f4', " + f + "}"), "missing key 'shape'"));
  EXPECT_TRUE(Contains(npy_error("{'descr': '<f4', 'descr': '<f4', " + f + ", 'shape': ()}", Bytes(4)),
                       "a second 'descr'"));
  EXPECT_TRUE(Contains(npy_error("{'descr': '<f4', " + f + ", 'shape': (), 'x': 1}", Bytes(4)), "key 'x'"));
  EXPECT_TRUE(Contains(npy_error("{'descr': '<f4', " + f + ", 'shape': ()} junk", Bytes(4)), "padding"));
  EXPECT_TRUE(Contains(npy_error("{'descr': '<f4, " + f + ", 'shape': ()}"), "expected"));
  EXPECT_TRUE(Contains(npy_error("{'descr': '<f4', 'fortran_order': 0, 'shape': ()}"), "True or False"));
  EXPECT_TRUE(Contains(npy_error("{'descr': '<f4', " + f + ", 'shape': [1]}"), "expected '('"));
  EXPECT_TRUE(Contains(npy_error("{'descr': '<f4', " + f + ", 'shape': (-1,)}"), "negative dimension"));
  EXPECT_TRUE(Contains(npy_error("{'descr': '<f4', " + f + ", 'shape': (99999999999999999999,)}"), "overflows"));
  EXPECT_TRUE(Contains(npy_error("{'descr': '<f4', " + f + ", 'shape': (4294967296, 4294967296, 4)}"),
                       "element count of shape [4294967296, 4294967296, 4] overflows"));
  EXPECT_TRUE(Contains(npy_error("{'descr': '<f4', " + f + ", 'shape': (2,)}", Bytes(12)), "4 unexpected bytes"));
  EXPECT_TRUE(Contains(npy_error(""), "expected '{'"));
}

TEST(Npy, HugeShapesAreCheckedAgainstTheFileBeforeAllocating) {
  // 2^40 x 2^20 f32 elements claim 2^62 bytes; the file holds 4.
  std::string msg = npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1048576)}", Bytes(4));
  EXPECT_TRUE(Contains(msg, "test.npy: truncated data: expected 4611686018427387904 bytes"));
  EXPECT_TRUE(Contains(msg, "found 4"));
}

TEST(Npy, RefusesBadMagicAndVersions) {
  Bytes b = slurp(kData + "f32.npy");
  Bytes bad = b;
  bad[1] = 'X';
  EXPECT_TRUE(Contains(input_error([&] { parse_npy_bytes(bad); }), "not a .npy file"));
  bad = b;
  bad[6] = 4;
  EXPECT_TRUE(Contains(input_error([&] { parse_npy_bytes(bad); }), "version 4.0 (supported: 1.0, 2.0, 3.0)"));
}

TEST(Npy, EveryTruncationIsAnInputError) {
  const Bytes b = slurp(kData + "f32.npy");
  for (size_t n = 0; n < b.size(); ++n) {
    Bytes p = prefix(b, n);  // exactly n bytes, so a sanitizer sees any over-read
    EXPECT_THROW(parse_npy(p.data(), p.size(), "prefix"), InputError) << n;
  }
  EXPECT_TRUE(Contains(input_error([&] { parse_npy(b.data(), 9, "f.npy"); }),
                       "f.npy: truncated header length: expected 2 bytes at offset 8, found 1"));
}

TEST(Npy, MissingFileNamesThePath) {
  EXPECT_TRUE(Contains(input_error([] { read_npy(kData + "nope.npy"); }), "nope.npy: file does not exist"));
}

// ---- safetensors ----

// A safetensors file around a hand-written header and `data_size` data bytes.
Bytes st_bytes(const std::string& header, size_t data_size = 0) {
  Bytes out;
  append_le(out, header.size(), 8);
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_size);
  return out;
}

SafetensorsFile st_from(const Bytes& b) {
  return SafetensorsFile::from_memory(std::make_shared<const Bytes>(b), "test.safetensors");
}

std::string st_error(const std::string& header, size_t data_size = 0) {
  return input_error([&] { st_from(st_bytes(header, data_size)); });
}

TEST(Safetensors, ReadsEveryDtypeAsTheReferenceWroteIt) {
  const json& e = expected()["safetensors"]["all.safetensors"];
  SafetensorsFile f = SafetensorsFile::open(kData + "all.safetensors");
  std::vector<std::string> names;
  for (const auto& [name, _] : e["tensors"].items()) names.push_back(name);  // json objects iterate sorted
  EXPECT_EQ(f.names(), names);
  EXPECT_EQ(f.metadata(), (e["metadata"].get<std::map<std::string, std::string>>()));
  for (const auto& [name, t] : e["tensors"].items()) {
    expect_matches(f.get(name), t, name);
    EXPECT_EQ(f.info(name).dtype, f.get(name).dtype());
  }
}

TEST(Safetensors, AlignedF32IsBorrowedOthersAreConverted) {
  auto bytes = std::make_shared<const Bytes>(slurp(kData + "all.safetensors"));
  const uint8_t *lo = bytes->data(), *hi = lo + bytes->size();
  SafetensorsFile f = SafetensorsFile::from_memory(bytes, "all");
  auto inside = [&](const Tensor& t) {
    auto p = reinterpret_cast<const uint8_t*>(t.data());
    return p >= lo && p < hi;
  };
  EXPECT_TRUE(inside(f.get("f32")));
  EXPECT_EQ(f.info("f32_unaligned").begin % 4, 3u);
  EXPECT_FALSE(inside(f.get("f32_unaligned")));
  EXPECT_EQ(f.get("f32_unaligned").to_vector(), (std::vector<float>{6.5f, -7.75f}));
}

TEST(Safetensors, BorrowedTensorOutlivesTheFileObject) {
  Tensor t;
  {
    SafetensorsFile f = SafetensorsFile::open(kData + "all.safetensors");
    t = f.get("f32");
  }
  expect_matches(t, expected()["safetensors"]["all.safetensors"]["tensors"]["f32"], "f32");
}

// A file written by hand as the safetensors format describes I8 and U8 (one byte each).
TEST(Safetensors, ReadsI8AndU8) {
  const std::string header = R"({"q":{"dtype":"I8","shape":[3],"data_offsets":[0,3]},"u":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})";
  std::string h = header;
  h.resize((h.size() + 7) / 8 * 8, ' ');
  Bytes b(8, 0);
  b[0] = (uint8_t)h.size();
  b.insert(b.end(), h.begin(), h.end());
  for (uint8_t v : {0x80, 0x05, 0xff, 0xfe, 0x01}) b.push_back(v);
  SafetensorsFile f = st_from(b);
  Tensor q = f.get("q"), u = f.get("u");
  ASSERT_EQ(q.dtype(), DType::i8);
  ASSERT_EQ(u.dtype(), DType::u8);
  EXPECT_EQ(q.int_at(0), -128);
  EXPECT_EQ(q.int_at(1), 5);
  EXPECT_EQ(q.int_at(2), -1);
  EXPECT_EQ(u.int_at(0), 254);
  EXPECT_EQ(u.int_at(1), 1);
}

TEST(Safetensors, RoundTripsEveryDtype) {
  const auto tensors = one_of_each_dtype();
  Bytes b = encode_safetensors(tensors);
  uint64_t header_len = 0;
  std::memcpy(&header_len, b.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  // Names sorted, data laid out in the same order.
  json header = json::parse(b.begin() + 8, b.begin() + 8 + header_len);
  uint64_t offset = 0;
  for (const auto& [name, info] : header.items()) {
    EXPECT_EQ(info["data_offsets"][0].get<uint64_t>(), offset) << name;
    offset = info["data_offsets"][1].get<uint64_t>();
  }
  SafetensorsFile f = st_from(b);
  TmpDir dir;
  write_safetensors(dir / "t.safetensors", tensors);
  SafetensorsFile g = SafetensorsFile::open(dir / "t.safetensors");
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    expect_same(f.get(name), t);
    expect_same(g.get(name), t);
  }
  EXPECT_EQ(slurp(dir / "t.safetensors"), b);
}

TEST(Safetensors, WriterRefusesDuplicateAndReservedNames) {
  Tensor t({1});
  EXPECT_TRUE(Contains(input_error([&] { encode_safetensors({{"a", t}, {"a", t}}); }), "duplicate tensor name 'a'"));
  EXPECT_TRUE(Contains(input_error([&] { encode_safetensors({{"__metadata__", t}}); }), "__metadata__"));
}

TEST(Safetensors, EveryTruncationIsAnInputError) {
  const Bytes b = slurp(kData + "all.safetensors");
  for (size_t n = 0; n < b.size(); ++n) EXPECT_THROW(st_from(prefix(b, n)), InputError) << n;
}

TEST(Safetensors, HeaderLengthIsCheckedAgainstTheFile) {
  Bytes b;
  append_le(b, 1ull << 60, 8);
  b.push_back('{');
  b.push_back('}');
  EXPECT_TRUE(Contains(input_error([&] { st_from(b); }), "header length 1152921504606846976 exceeds the limit"));
  Bytes c = st_bytes("{}      ");
  c[0] = 40;  // 40 bytes claimed, 8 present
  EXPECT_TRUE(Contains(input_error([&] { st_from(c); }),
                       "test.safetensors: truncated header: expected 40 bytes at offset 8, found 8"));
}

TEST(Safetensors, RefusesBadJson) {
  EXPECT_TRUE(Contains(st_error("{\"a\": "), "not valid JSON"));
  EXPECT_TRUE(Contains(st_error("[1, 2]"), "expected a JSON object, found array"));
  EXPECT_TRUE(Contains(st_error("{\"a\": 3}"), "tensor 'a': expected an object"));
  EXPECT_TRUE(Contains(st_error("{\"__metadata__\": {\"k\": 1}}"), "__metadata__ 'k': expected a string"));
  EXPECT_TRUE(Contains(st_error("{\"__metadata__\": [1]}"), "__metadata__: expected an object of strings"));
}

std::string entry(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return "{\"dtype\": \"" + dtype + "\", \"shape\": " + shape + ", \"data_offsets\": " + offsets + "}";
}

TEST(Safetensors, RefusesBadEntries) {
  EXPECT_TRUE(Contains(st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4), "field 'data_offsets'"));
  EXPECT_TRUE(Contains(st_error("{\"a\": " + entry("F32", "[1]", "[0, 4]").replace(1, 0, "\"x\": 1, ") + "}", 4),
                       "field 'x'"));
  for (const char* dt : {"C64", "F8_E5M2", "F8_E4M3", "f32"}) {
    std::string msg = st_error("{\"a\": " + entry(dt, "[1]", "[0, 1]") + "}", 1);
    EXPECT_TRUE(Contains(msg, std::string("dtype \"") + dt + "\""));
    EXPECT_TRUE(Contains(msg, "supported: F32, F16, BF16, I32, I64, BOOL, I8, U8, F64, I16, U16, U32, U64"));
  }
  EXPECT_TRUE(Contains(st_error("{\"a\": " + entry("F32", "[-1]", "[0, 4]") + "}", 4), "non-negative integer"));
  EXPECT_TRUE(Contains(st_error("{\"a\": " + entry("F32", "[1.5]", "[0, 4]") + "}", 4), "non-negative integer"));
  EXPECT_TRUE(Contains(st_error("{\"a\": " + entry("F32", "[1]", "[0, 4, 8]") + "}", 8), "[begin, end]"));
  EXPECT_TRUE(Contains(st_error("{\"a\": " + entry("F32", "[1]", "[0, 8]") + "}", 8),
                       "expected shape [1] of F32 to fill data_offsets [0, 8], found 1 elements for 8 bytes"));
}

TEST(Safetensors, RefusesOffsetsOutsideOrOutOfOrder) {
  EXPECT_TRUE(Contains(st_error("{\"a\": " + entry("F32", "[100]", "[0, 400]") + "}", 8),
                       "expected offsets within the data section (8 bytes), found data_offsets [0, 400]"));
  EXPECT_TRUE(Contains(st_error("{\"a\": " + entry("F32", "[1]", "[8, 4]") + "}", 8), "begin <= end"));
  EXPECT_TRUE(Contains(st_error("{\"a\": " + entry("F32", "[2]", "[0, 8]") + ", \"b\": " +
                                    entry("F32", "[2]", "[4, 12]") + "}",
                                12),
                       "overlapping tensor 'a'"));
  EXPECT_TRUE(Contains(st_error("{\"a\": " + entry("F32", "[1]", "[0, 4]") + ", \"b\": " +
                                    entry("F32", "[1]", "[8, 12]") + "}",
                                12),
                       "bytes [4, 8] used by no tensor"));
  EXPECT_TRUE(Contains(st_error("{\"a\": " + entry("F32", "[1]", "[0, 4]") + "}", 12), "found 12 bytes"));
  // Zero-size tensors may share an offset; JSON order does not matter.
  SafetensorsFile f = st_from(st_bytes("{\"b\": " + entry("F32", "[1]", "[0, 4]") + ", \"a\": " +
                                           entry("I32", "[0, 3]", "[0, 0]") + ", \"c\": " +
                                           entry("BOOL", "[0]", "[4, 4]") + "}",
                                       4));
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(f.get("a").shape(), (Shape{0, 3}));
}

TEST(Safetensors, RefusesShapesWhoseElementCountOverflows) {
  std::string msg = st_error("{\"a\": " + entry("F32", "[4294967296, 4294967296, 4294967296]", "[0, 4]") + "}", 4);
  EXPECT_TRUE(Contains(msg, "element count fits int64"));
  msg = st_error("{\"a\": " + entry("I64", "[4611686018427387904]", "[0, 8]") + "}", 8);
  EXPECT_TRUE(Contains(msg, "4611686018427387904 elements for 8 bytes"));
}

TEST(Safetensors, MissingTensorListsTheNames) {
  SafetensorsFile f = SafetensorsFile::open(kData + "all.safetensors");
  std::string msg = input_error([&] { f.get("weight"); });
  EXPECT_TRUE(Contains(msg, "all.safetensors: no tensor named 'weight'"));
  EXPECT_TRUE(Contains(msg, "'bf16', 'bool', 'f16'"));
}

// ---- files ----

TEST(File, AtomicWriteReplacesTheTargetAndLeavesNoTemporary) {
  TmpDir dir;
  write_file_atomic(dir / "out.bin", "one", 3);
  write_file_atomic(dir / "out.bin", "second", 6);
  EXPECT_EQ(text_of(dir / "out.bin"), "second");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.bin"});
}

TEST(File, AtomicWriteKeepsTheExistingMode) {
  TmpDir dir;
  spit(dir / "out.bin", "old");
  ::chmod((dir / "out.bin").c_str(), 0640);
  write_file_atomic(dir / "out.bin", "new", 3);
  struct stat st;
  ASSERT_EQ(::stat((dir / "out.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
}

TEST(File, AtomicWriteIntoAMissingDirectory) {
  TmpDir dir;
  std::string msg = input_error([&] { write_file_atomic(dir / "missing/out.npy", "x", 1); });
  EXPECT_EQ(msg, "cannot write " + (dir / "missing/out.npy") + ": directory " + (dir / "missing") +
                     " does not exist");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(File, AtomicWriteUnderARegularFileLeavesItUntouched) {
  TmpDir dir;
  spit(dir / "f", "keep");
  std::string msg = input_error([&] { write_file_atomic(dir / "f/out.npy", "x", 1); });
  EXPECT_TRUE(Contains(msg, "cannot write " + (dir / "f/out.npy") + ": "));
  EXPECT_TRUE(Contains(msg, "is not a directory"));
  EXPECT_EQ(text_of(dir / "f"), "keep");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"f"});
}

TEST(File, AtomicWriteIntoAReadOnlyDirectoryLeavesTheTargetUntouched) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions (covered by the regular-file parent test)";
  TmpDir dir;
  const std::string ro = dir / "ro";
  fs::create_directory(ro);
  spit(ro + "/out.npy", "keep");
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  std::string msg = input_error([&] { write_file_atomic(ro + "/out.npy", "new", 3); });
  fs::permissions(ro, fs::perms::owner_all);
  EXPECT_EQ(msg, "cannot write " + ro + "/out.npy: permission denied");
  EXPECT_EQ(text_of(ro + "/out.npy"), "keep");
}

TEST(File, AtomicWriteOverADirectoryFails) {
  TmpDir dir;
  fs::create_directory(dir / "d");
  EXPECT_TRUE(Contains(input_error([&] { write_file_atomic(dir / "d", "x", 1); }), "it is a directory"));
  EXPECT_TRUE(fs::is_directory(dir / "d"));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"d"});
}

TEST(File, ReadFileErrorsNameThePath) {
  TmpDir dir;
  EXPECT_EQ(input_error([&] { read_file(dir / "none"); }), "cannot read " + (dir / "none") + ": file does not exist");
  EXPECT_TRUE(Contains(input_error([&] { read_file(dir.path()); }), "it is a directory, expected a file"));
  spit(dir / "f", "abc");
  EXPECT_EQ(read_file(dir / "f"), (Bytes{'a', 'b', 'c'}));
  spit(dir / "empty", "");
  EXPECT_TRUE(read_file(dir / "empty").empty());
  EXPECT_EQ(map_file(dir / "empty").size, 0u);
}

// Issue 24: a FIFO, a device or a socket is refused before it is opened in a way that could
// block (a FIFO without a writer blocks open(2) forever) or read (/dev/zero never ends); a
// symlink is followed only to a regular file.
TEST(File, SpecialFilesAreRefusedBeforeReading) {
  TmpDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  fs::create_symlink("/dev/zero", dir / "zero.npy");
  // A listening unix socket.
  const std::string sock_path = dir / "sock";
  int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock_path.size(), sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock_path.c_str());
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dir / "fifo", "it is a FIFO (named pipe), expected a regular file"},
      {dir / "zero.npy", "it is a character device, expected a regular file"},
      {"/dev/null", "it is a character device, expected a regular file"},
      {sock_path, "it is a socket, expected a regular file"},
  };
  for (const auto& [path, phrase] : cases) {
    SCOPED_TRACE(path);
    EXPECT_EQ(input_error([&] { read_file(path); }).rfind("cannot read " + path + ": " + phrase, 0), 0u);
    EXPECT_TRUE(Contains(input_error([&] { map_file(path); }), phrase));
    EXPECT_TRUE(Contains(input_error([&] { read_file_prefix(path, 16); }), phrase));
  }
  // A symlink to a regular file is read through.
  spit(dir / "real", "abcdef");
  fs::create_symlink(dir / "real", dir / "link");
  EXPECT_EQ(read_file(dir / "link"), (Bytes{'a', 'b', 'c', 'd', 'e', 'f'}));
  EXPECT_EQ(map_file(dir / "link").size, 6u);
  EXPECT_EQ(read_file_prefix(dir / "link", 2), (Bytes{'a', 'b'}));
  EXPECT_EQ(read_file_prefix(dir / "link", 100).size(), 6u);
  ::close(sock);
}

// ---- untrusted JSON (issue 24) ----

std::string nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(Json, NestingIsLimitedWhileParsing) {
  EXPECT_EQ(parse_untrusted_json(nested(kMaxJsonDepth), "t.json").size(), 1u);
  EXPECT_EQ(input_error([&] { parse_untrusted_json(nested(kMaxJsonDepth + 1), "t.json"); }),
            "t.json: JSON nested deeper than 128 levels (objects and lists); refused");
  // 100,000 levels (200 KB, valid JSON): refused at level 129, nothing deep is ever built.
  EXPECT_TRUE(Contains(input_error([&] { parse_untrusted_json("{\"a\": " + nested(100000) + "}", "t.json"); }),
                       "nested deeper than 128 levels"));
  EXPECT_TRUE(Contains(input_error([&] { parse_untrusted_json(std::string(100000, '['), "t.json"); }), "nested deeper"));
}

TEST(Json, DuplicateKeysAreRefusedNamingTheKey) {
  EXPECT_EQ(input_error([&] { parse_untrusted_json(R"({"a": 1, "b": 2, "a": 3})", "t.json"); }),
            "t.json: duplicate key \"a\" (in the top-level object); each key may appear once");
  EXPECT_EQ(input_error([&] { parse_untrusted_json(R"({"nodes": [{"id": "y", "op": "neg", "op": "exp"}]})", "t.json"); }),
            "t.json: duplicate key \"op\" (in an object under \"nodes\"); each key may appear once");
  // The same key in different objects, or in an object and its parent, is fine.
  EXPECT_NO_THROW(parse_untrusted_json(R"({"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]})", "t.json"));
  // Syntax errors still come from nlohmann, with their position.
  EXPECT_THROW(parse_untrusted_json(R"({"a": })", "t.json"), nlohmann::json::parse_error);
}

TEST(Json, ExcerptsAreBounded) {
  json big = json::array();
  for (int i = 0; i < 100000; ++i) big.push_back(i);
  std::string e = json_excerpt(big);
  EXPECT_LE(e.size(), kMaxJsonExcerpt + 3);
  EXPECT_EQ(e.rfind("[0,1,2,3,", 0), 0u);
  EXPECT_EQ(e.substr(e.size() - 3), "...");
  EXPECT_LE(json_excerpt(json(std::string(100000, 'a'))).size(), kMaxJsonExcerpt + 3);
  EXPECT_EQ(json_excerpt(json::parse(R"({"k": [1, "x"]})")), R"({"k":[1,"x"]})");
  EXPECT_EQ(json_excerpt(json("short")), "\"short\"");
}

TEST(Safetensors, HeaderNestingAndDuplicateKeysAreRefused) {
  auto header = [](const std::string& h) {
    auto b = std::make_shared<std::vector<uint8_t>>();
    for (int i = 0; i < 8; ++i) b->push_back((uint8_t)(h.size() >> (8 * i)));
    b->insert(b->end(), h.begin(), h.end());
    return b;
  };
  EXPECT_TRUE(Contains(input_error([&] { SafetensorsFile::from_memory(header("{\"__metadata__\": " + nested(100000) + "}"), "s.safetensors"); }),
                       "s.safetensors: header: JSON nested deeper than 128 levels"));
  const std::string t = R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})";
  EXPECT_TRUE(Contains(input_error([&] { SafetensorsFile::from_memory(header("{\"t\": " + t + ", \"t\": " + t + "}"), "s.safetensors"); }),
                       "s.safetensors: header: duplicate key \"t\""));
}

// ---- SPECs ----

TEST(Spec, ParsesEveryForm) {
  TensorSpec s = parse_tensor_spec("2x3xf32=1,2,3,4,5,6");
  EXPECT_EQ(s.kind, TensorSpec::Inline);
  EXPECT_EQ(s.shape, (Shape{2, 3}));
  EXPECT_EQ(s.dtype, DType::f32);
  EXPECT_EQ(s.values, (std::vector<double>{1, 2, 3, 4, 5, 6}));

  s = parse_tensor_spec("f32=3.5");
  EXPECT_EQ(s.kind, TensorSpec::Inline);
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.values, std::vector<double>{3.5});

  s = parse_tensor_spec("4xi32=1, 2 ,3,-4");
  EXPECT_EQ(s.dtype, DType::i32);
  EXPECT_EQ(s.values, (std::vector<double>{1, 2, 3, -4}));

  s = parse_tensor_spec("3xf16=nan,inf,-inf");
  ASSERT_EQ(s.values.size(), 3u);
  EXPECT_TRUE(std::isnan(s.values[0]));
  EXPECT_EQ(s.values[1], INFINITY);
  EXPECT_EQ(s.values[2], -INFINITY);

  EXPECT_EQ(parse_tensor_spec("2xbool=true,false").values, (std::vector<double>{1, 0}));
  EXPECT_EQ(parse_tensor_spec("0x2xi64=").shape, (Shape{0, 2}));

  s = parse_tensor_spec("@weights/x.bin");
  EXPECT_EQ(s.kind, TensorSpec::File);
  EXPECT_EQ(s.path, "weights/x.bin");
  s = parse_tensor_spec("dir/a=b.npy");
  EXPECT_EQ(s.kind, TensorSpec::File);
  EXPECT_EQ(s.path, "dir/a=b.npy");

  s = parse_tensor_spec("m.safetensors:layer.0:weight");
  EXPECT_EQ(s.kind, TensorSpec::SafetensorsTensor);
  EXPECT_EQ(s.path, "m.safetensors");
  EXPECT_EQ(s.tensor, "layer.0:weight");
  EXPECT_EQ(parse_tensor_spec("@m.safetensors:w").tensor, "w");

  s = parse_tensor_spec("random");
  EXPECT_EQ(s.kind, TensorSpec::Random);
  EXPECT_EQ(s.seed, 0u);
  EXPECT_EQ(parse_tensor_spec("random:18446744073709551615").seed, UINT64_MAX);
  EXPECT_EQ(parse_tensor_spec("2x2xf32=1,2,3,4").text, "2x2xf32=1,2,3,4");
}

TEST(Spec, I8AndU8Values) {
  Tensor u = load_tensor_spec(parse_tensor_spec("4xu8=0,1,254,255"));
  ASSERT_EQ(u.dtype(), DType::u8);
  EXPECT_EQ(u.int_at(2), 254);
  EXPECT_EQ(u.int_at(3), 255);
  Tensor i = load_tensor_spec(parse_tensor_spec("2xi8=-128,127"));
  ASSERT_EQ(i.dtype(), DType::i8);
  EXPECT_EQ(i.int_at(0), -128);
  EXPECT_EQ(i.int_at(1), 127);
  // random u8 values stay in range whatever the integer bound asks
  Tensor r = random_tensor({64}, DType::u8, 3, -1.f, 1.f, 1000);
  for (int64_t k = 0; k < 64; ++k) EXPECT_TRUE(r.int_at(k) >= 0 && r.int_at(k) <= 255) << k;
}

TEST(Spec, MalformedFormsAreInputErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "empty spec"},
      {"@", "empty file name"},
      {"2x3xf32=1,2,3", "shape [2, 3] has 6 elements but 3 values were given"},
      {"f32=", "shape [] has 1 elements but 0 values"},
      {"2xf65=1,2", "unknown dtype 'f65'"},
      {"2xu16=1,65536", "u16 value '65536' is not an integer in range [0, 65535]"},
      {"=1", "unknown dtype ''"},
      {"axf32=1", "dimension 'a'"},
      {"-1xf32=1", "dimension '-1'"},
      {"2x3=1", "unknown dtype '3'"},
      {"f32=abc", "value 'abc' is not a number"},
      {"2xf32=1,,2", "value '' is not a number"},
      {"f32=0x10", "not a number"},
      {"f32=1e39", "out of range for f32"},
      {"i32=1.5", "i32 value '1.5' is not an integer"},
      {"i32=2147483648", "not an integer in range"},
      {"2xu8=1,256", "u8 value '256' is not an integer in range [0, 255]"},
      {"2xu8=-1,0", "u8 value '-1' is not an integer in range [0, 255]"},
      {"i8=-129", "i8 value '-129' is not an integer in range [-128, 127]"},
      {"u8=1.5", "u8 value '1.5' is not an integer"},
      {"i64=nan", "not an integer"},
      {"bool=2", "must be true, false, 1 or 0"},
      {"4294967296x4294967296x4294967296xf32=1", "overflows"},
      {"random:", "seed"},
      {"random:abc", "seed"},
      {"random:-1", "seed"},
      {"random:18446744073709551616", "seed"},
      {"m.safetensors", "file.safetensors:NAME"},
      {"m.safetensors:", "missing tensor name"},
      {"nonsense", "not a file, inline values or random"},
  };
  for (const auto& [spec, why] : cases) {
    std::string msg = input_error([&] { parse_tensor_spec(spec); });
    EXPECT_TRUE(Contains(msg, std::string("bad tensor spec '") + spec + "': " )) << spec;
    EXPECT_TRUE(Contains(msg, why)) << spec;
    EXPECT_TRUE(Contains(msg, "2x3xf32=1,2,3,4,5,6")) << spec;  // shows the accepted forms
  }
}

TEST(Spec, LoadsEveryForm) {
  const json& npy = expected()["npy"];
  // Inline values are rounded to the dtype the way NumPy rounds them.
  Tensor h = load_tensor_spec(parse_tensor_spec("f16=0.1"));
  EXPECT_EQ(h.dtype(), DType::f16);
  EXPECT_EQ((float)h.at(0), json_float(npy["f16.npy"]["values"][0]));
  Tensor b = load_tensor_spec(parse_tensor_spec("5xbool=true,false,1,1,0"));
  expect_matches(b, npy["bool.npy"], "inline bool");
  expect_matches(load_tensor_spec(parse_tensor_spec("2x3xf32=1.5,-2,0.1,inf,-inf,nan")), npy["f32.npy"], "inline");

  expect_matches(load_tensor_spec(parse_tensor_spec("@" + kData + "i32.npy")), npy["i32.npy"], "@file");
  expect_matches(load_tensor_spec(parse_tensor_spec(kData + "i64.npy")), npy["i64.npy"], "file");
  expect_matches(load_tensor_spec(parse_tensor_spec(kData + "all.safetensors:bf16")),
                 expected()["safetensors"]["all.safetensors"]["tensors"]["bf16"], "safetensors");

  Tensor r = load_tensor_spec(parse_tensor_spec("random:3"), {2, 5}, DType::i64, 4);
  EXPECT_EQ(r.shape(), (Shape{2, 5}));
  EXPECT_EQ(r.dtype(), DType::i64);
  expect_same(r, random_tensor({2, 5}, DType::i64, 3, -1.f, 1.f, 4));
}

// ---- random tensors ----

// Reference SplitMix64 (Steele, Lea, Flood 2014), written independently of lib/io.
struct RefSplitMix64 {
  uint64_t s;
  uint64_t operator()() {
    s += 0x9E3779B97F4A7C15ull;
    uint64_t z = s;
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z;
  }
};

TEST(Random, ReferenceGeneratorMatchesThePublishedSequence) {
  RefSplitMix64 g{0};
  EXPECT_EQ(g(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(g(), 0x6E789E6AA1B965F4ull);
}

TEST(Random, FirstValuesFollowSplitMix64) {
  constexpr uint64_t seed = 12345;
  Tensor f = random_tensor({8}, DType::f32, seed);
  Tensor i = random_tensor({8}, DType::i32, seed, -1.f, 1.f, 10);
  Tensor b = random_tensor({8}, DType::boolean, seed);
  RefSplitMix64 g{seed};
  for (int k = 0; k < 8; ++k) {
    const uint64_t x = g();
    EXPECT_EQ(f.data()[k], (float)(-1.0 + 2.0 * (double)(x >> 40) / 16777216.0)) << k;
    EXPECT_EQ(i.data<int32_t>()[k], (int32_t)(x % 10)) << k;
    EXPECT_EQ(b.data<uint8_t>()[k], (uint8_t)(x >> 63)) << k;
  }
}

TEST(Random, SameSeedSameValuesAndRangesHold) {
  expect_same(random_tensor({3, 7}, DType::f16, 9), random_tensor({3, 7}, DType::f16, 9));
  EXPECT_NE(random_tensor({16}, DType::f32, 1).to_vector(), random_tensor({16}, DType::f32, 2).to_vector());
  Tensor f = random_tensor({4096}, DType::f32, 5, 2.f, 3.f);
  for (float v : f.to_vector()) ASSERT_TRUE(v >= 2.f && v < 3.f) << v;
  Tensor h = random_tensor({256}, DType::bf16, 5);
  for (float v : h.to_vector()) ASSERT_EQ(v, rlx::bf16_to_f32(rlx::f32_to_bf16(v)));
  Tensor n = random_tensor({4096}, DType::i64, 5, -1.f, 1.f, 3);
  for (float v : n.to_vector()) ASSERT_TRUE(v == 0 || v == 1 || v == 2) << v;
  EXPECT_THROW(random_tensor({1}, DType::i32, 0, -1.f, 1.f, 0), InputError);
  EXPECT_THROW(random_tensor({1}, DType::f32, 0, 1.f, 1.f), InputError);
}

}  // namespace
