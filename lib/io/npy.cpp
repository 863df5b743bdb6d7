#include "io/npy.h"

#include <cstring>
#include <set>
#include <string_view>

#include "core/error.h"
#include "io/file.h"

namespace rlx::io {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kAlign = 64;             // NumPy's ARRAY_ALIGN
constexpr size_t kGrowthAxisDigits = 21;  // NumPy's GROWTH_AXIS_MAX_DIGITS
// "supported: '<f4' f32, '<f2' f16, ..." from core/dtype.h's table.
std::string supported_descrs() {
  std::string r;
  for (const auto& d : kDTypeTable)
    if (*d.npy) r += (r.empty() ? "supported: '" : ", '") + std::string(d.npy) + "' " + d.name;
  return r;
}


struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

// Parses the header: a Python dict literal with the keys 'descr', 'fortran_order'
// and 'shape' in any order, optional trailing comma, then space padding.
class HeaderParser {
 public:
  HeaderParser(std::string_view s, const std::string& what) : s_(s), what_(what) {}

  NpyHeader parse() {
    NpyHeader h;
    std::set<std::string> seen;
    expect('{');
    for (;;) {
      skip_ws();
      if (eat('}')) break;
      std::string key = string_literal();
      if (!seen.insert(key).second) fail("each key once", "a second '" + key + "'");
      expect(':');
      if (key == "descr") {
        skip_ws();
        if (peek() == '[') throw InputError(what_ + ": structured dtypes are not supported; " + supported_descrs());
        h.descr = string_literal();
      } else if (key == "fortran_order") {
        h.fortran_order = boolean();
      } else if (key == "shape") {
        h.shape = tuple();
      } else {
        fail("'descr', 'fortran_order' or 'shape'", "key '" + key + "'");
      }
      skip_ws();
      if (eat(',')) continue;
      expect('}');
      break;
    }
    skip_ws();
    if (pos_ != s_.size()) fail("only padding after the closing '}'", found());
    for (const char* k : {"descr", "fortran_order", "shape"})
      if (!seen.count(k)) throw InputError(what_ + ": malformed .npy header: missing key '" + k + "'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& expected, const std::string& found) const {
    throw InputError(what_ + ": malformed .npy header: expected " + expected + ", found " + found +
                     " at header offset " + std::to_string(pos_));
  }
  std::string found() const {
    if (pos_ >= s_.size()) return "end of header";
    return "'" + std::string(s_.substr(pos_, 16)) + "'";
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() && std::strchr(" \t\r\n", s_[pos_])) ++pos_;
  }
  bool eat(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    skip_ws();
    if (!eat(c)) fail(std::string("'") + c + "'", found());
  }
  std::string string_literal() {
    skip_ws();
    char q = peek();
    if (q != '\'' && q != '"') fail("a quoted string", found());
    size_t end = s_.find(q, pos_ + 1);
    if (end == std::string_view::npos) fail("a closing quote", "end of header");
    std::string r(s_.substr(pos_ + 1, end - pos_ - 1));
    if (r.find('\\') != std::string::npos) fail("a string without escapes", found());
    pos_ = end + 1;
    return r;
  }
  bool boolean() {
    skip_ws();
    for (bool v : {true, false}) {
      std::string_view word = v ? "True" : "False";
      if (s_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return v;
      }
    }
    fail("True or False", found());
  }
  Shape tuple() {
    expect('(');
    Shape shape;
    for (;;) {
      skip_ws();
      if (eat(')')) break;
      shape.push_back(dim());
      skip_ws();
      if (eat(',')) continue;
      expect(')');
      break;
    }
    return shape;
  }
  int64_t dim() {
    if (peek() == '-') throw InputError(what_ + ": negative dimension in .npy shape");
    if (peek() < '0' || peek() > '9') fail("a dimension", found());
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      int d = peek() - '0';
      if (v > (INT64_MAX - d) / 10) throw InputError(what_ + ": .npy shape dimension overflows int64");
      v = v * 10 + d;
      ++pos_;
    }
    eat('L');  // Python 2 long literal
    return v;
  }

  std::string_view s_;
  const std::string& what_;
  size_t pos_ = 0;
};

DType npy_dtype(const std::string& descr, const std::string& what) {
  for (const auto& d : kDTypeTable)  // core/dtype.h's table
    if (*d.npy && descr == d.npy) return d.dtype;
  const std::string found = " (dtype '" + descr + "')";
  if (descr.find('O') != std::string::npos)
    throw InputError(what + ": object arrays" + found + " are not supported: they hold pickled Python objects; " +
                     supported_descrs());
  if (!descr.empty() && descr[0] == '>')
    throw InputError(what + ": big-endian data" + found +
                     " is not supported, expected little-endian; convert with arr.astype(arr.dtype.newbyteorder('<'))");
  throw InputError(what + ": unsupported dtype '" + descr + "'; " + supported_descrs());
}

const char* npy_descr(DType t) {
  if (t == DType::bf16) return "<f4";  // NumPy has no bfloat16
  return *dtype_traits(t).npy ? dtype_traits(t).npy : "<f4";
}

std::string python_tuple(const Shape& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

}  // namespace

Tensor parse_npy(const uint8_t* data, size_t size, const std::string& what, std::shared_ptr<const void> keep) {
  ByteReader r(data, size, what);
  if (std::memcmp(r.take(kMagicLen, "magic"), kMagic, kMagicLen) != 0)
    throw InputError(what + ": not a .npy file: expected the magic string \\x93NUMPY at offset 0");
  const uint8_t major = r.u8("version"), minor = r.u8("version");
  if (major < 1 || major > 3 || minor != 0)
    throw InputError(what + ": unsupported .npy format version " + std::to_string(major) + "." +
                     std::to_string(minor) + " (supported: 1.0, 2.0, 3.0)");
  const size_t header_len = major == 1 ? r.u16le("header length") : r.u32le("header length");
  const auto* header = reinterpret_cast<const char*>(r.take(header_len, "header"));
  NpyHeader h = HeaderParser(std::string_view(header, header_len), what).parse();

  const DType dtype = npy_dtype(h.descr, what);
  const int64_t numel = shape_numel(h.shape);
  if (numel < 0) throw InputError(what + ": element count of shape " + shape_str(h.shape) + " overflows");
  const size_t es = dtype_size(dtype);
  if ((uint64_t)numel > SIZE_MAX / es)
    throw InputError(what + ": data size of shape " + shape_str(h.shape) + " overflows");
  const uint8_t* values = r.take((size_t)numel * es, "data");
  if (r.remaining() != 0)
    throw InputError(what + ": " + std::to_string(r.remaining()) + " unexpected bytes after the data (shape " +
                     shape_str(h.shape) + " of " + h.descr + " needs " + std::to_string(numel * es) + " bytes)");

  if (!h.fortran_order || h.shape.size() < 2) return tensor_from_bytes(values, h.shape, dtype, std::move(keep));
  // Column-major data (NumPy writes a transposed or Fortran-ordered array so): it is the C-order
  // array of the reversed shape; reversing its axes gives the row-major copy.
  Shape rev(h.shape.rbegin(), h.shape.rend());
  Tensor col = tensor_from_bytes(values, rev, dtype, nullptr);
  Tensor t(h.shape, dtype);
  const auto* src = static_cast<const uint8_t*>(col.raw());
  auto* dst = static_cast<uint8_t*>(t.mutable_raw());
  const size_t rank = h.shape.size();
  std::vector<int64_t> idx(rank, 0), fst(rank, 1);  // fst: the column-major stride of each axis
  for (size_t k = 1; k < rank; ++k) fst[k] = fst[k - 1] * h.shape[k - 1];
  for (int64_t i = 0; i < numel; ++i) {
    int64_t off = 0;
    for (size_t k = 0; k < rank; ++k) off += idx[k] * fst[k];
    std::memcpy(dst + (size_t)i * es, src + (size_t)off * es, es);
    for (size_t k = rank; k-- > 0;) {  // next row-major index
      if (++idx[k] < h.shape[k]) break;
      idx[k] = 0;
    }
  }
  return t;
}

Tensor read_npy(const std::string& path) {
  MappedFile m = map_file(path);
  return parse_npy(m.data, m.size, path, m.keep);
}

std::vector<uint8_t> encode_npy(const Tensor& t) {
  const DType file_dtype = t.dtype() == DType::bf16 ? DType::f32 : t.dtype();
  const Shape& shape = t.shape();
  // Same layout as NumPy's np.save: spare spaces for growing the first axis, then
  // padding so the data starts at a multiple of 64, the header ending in '\n'.
  std::string dict = std::string("{'descr': '") + npy_descr(file_dtype) +
                     "', 'fortran_order': False, 'shape': " + python_tuple(shape) + ", }";
  if (!shape.empty()) dict.append(kGrowthAxisDigits - std::to_string(shape[0]).size(), ' ');
  const int major = dict.size() + 1 + kAlign > 65535 ? 2 : 1;
  const size_t prefix = kMagicLen + 2 + (major == 1 ? 2 : 4);
  const size_t pad = kAlign - (prefix + dict.size() + 1) % kAlign;
  dict.append(pad, ' ');
  dict += '\n';

  std::vector<uint8_t> out(kMagic, kMagic + kMagicLen);
  out.push_back((uint8_t)major);
  out.push_back(0);
  append_le(out, dict.size(), major == 1 ? 2 : 4);
  out.insert(out.end(), dict.begin(), dict.end());
  const size_t header_end = out.size();
  out.resize(header_end + (size_t)t.numel() * dtype_size(file_dtype));
  // bf16 widens to f32 exactly (every bf16 value is an f32 value).
  convert_elements(t.raw(), t.dtype(), out.data() + header_end, file_dtype, t.numel());
  return out;
}

void write_npy(const std::string& path, const Tensor& t) {
  std::vector<uint8_t> bytes = encode_npy(t);
  write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace rlx::io
