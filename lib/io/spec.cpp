#include "io/spec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>

#include "core/error.h"
#include "io/npy.h"
#include "io/safetensors.h"

namespace rlx::io {

namespace {

constexpr char kForms[] =
    "expected @file.npy, file.npy, file.safetensors:NAME, 2x3xf32=1,2,3,4,5,6, f32=3.5, random or random:SEED";
constexpr std::string_view kSafetensors = ".safetensors";

[[noreturn]] void bad_spec(const std::string& text, const std::string& why) {
  throw InputError("bad tensor spec '" + text + "': " + why + " (" + kForms + ")");
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (size_t pos = 0;;) {
    size_t next = s.find(sep, pos);
    parts.push_back(s.substr(pos, next - pos));
    if (next == std::string_view::npos) return parts;
    pos = next + 1;
  }
}

// Digits only (no sign, no spaces) that fit in uint64.
std::optional<uint64_t> parse_u64(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || s[0] == '-' || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// A path, with ".safetensors:NAME" selecting one tensor of a safetensors file.
void set_path(TensorSpec& spec, std::string_view path) {
  if (path.empty()) bad_spec(spec.text, "empty file name");
  const size_t at = path.find(std::string(kSafetensors) + ":");
  if (at == std::string_view::npos) {
    if (path.ends_with(kSafetensors)) bad_spec(spec.text, "name the tensor to read: file.safetensors:NAME");
    spec.kind = TensorSpec::File;
    spec.path = path;
    return;
  }
  spec.kind = TensorSpec::SafetensorsTensor;
  spec.path = path.substr(0, at + kSafetensors.size());
  spec.tensor = path.substr(at + kSafetensors.size() + 1);
  if (spec.tensor.empty()) bad_spec(spec.text, "missing tensor name after ':'");
}

double parse_value(const std::string& text, std::string_view tok, DType dtype) {
  const std::string shown = "'" + std::string(tok) + "'";
  if (dtype == DType::boolean) {
    if (tok == "true" || tok == "1") return 1;
    if (tok == "false" || tok == "0") return 0;
    bad_spec(text, "bool value " + shown + " must be true, false, 1 or 0");
  }
  if (tok.starts_with('+')) tok.remove_prefix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
  if (tok.empty() || ec != std::errc() || end != tok.data() + tok.size())
    bad_spec(text, "value " + shown + " is not a number");
  if (std::string why = literal_value_problem(v, dtype); !why.empty())
    bad_spec(text, (is_integer(dtype) ? std::string(dtype_name(dtype)) + " value " : std::string("value ")) + shown + " " + why);
  return v;
}

void parse_inline(TensorSpec& spec, std::string_view lhs, std::string_view rhs) {
  const std::string& text = spec.text;
  std::vector<std::string_view> parts = split(lhs, 'x');
  const std::string_view dtype_text = parts.back();
  parts.pop_back();
  std::optional<DType> dtype = parse_dtype(dtype_text);
  if (!dtype)
    bad_spec(text, "unknown dtype '" + std::string(dtype_text) + "' (supported: " + dtype_names() + ")");
  spec.kind = TensorSpec::Inline;
  spec.dtype = *dtype;
  for (std::string_view d : parts) {
    std::optional<uint64_t> dim = parse_u64(d);
    if (!dim || *dim > (uint64_t)INT64_MAX)
      bad_spec(text, "dimension '" + std::string(d) + "' is not a non-negative integer");
    spec.shape.push_back((int64_t)*dim);
  }
  const int64_t numel = shape_numel(spec.shape);
  if (numel < 0) bad_spec(text, "element count of shape " + shape_str(spec.shape) + " overflows");
  if (!trim(rhs).empty())
    for (std::string_view tok : split(rhs, ',')) {
      spec.values.push_back(parse_value(text, trim(tok), *dtype));
      if (is_integer(*dtype)) {  // exact beyond 2^53, where the double above rounds
        std::string_view t = trim(tok);
        if (t.starts_with('+')) t.remove_prefix(1);
        int64_t v = 0;
        auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        spec.ints.push_back(ec == std::errc() && end == t.data() + t.size() ? v : (int64_t)spec.values.back());
      } else if (*dtype == DType::boolean) {
        spec.ints.push_back(spec.values.back() != 0);
      }
    }
  if ((int64_t)spec.values.size() != numel)
    bad_spec(text, "shape " + shape_str(spec.shape) + " has " + std::to_string(numel) + " elements but " +
                       std::to_string(spec.values.size()) + " values were given");
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

TensorSpec parse_tensor_spec(const std::string& text) {
  TensorSpec spec;
  spec.text = text;
  const std::string_view s = text;
  if (s.empty()) bad_spec(text, "empty spec");
  if (s == "random" || s.starts_with("random:")) {
    spec.kind = TensorSpec::Random;
    if (s.size() > 6) {
      std::optional<uint64_t> seed = parse_u64(s.substr(7));
      if (!seed) bad_spec(text, "the seed must be a non-negative integer below 2^64");
      spec.seed = *seed;
    }
  } else if (s.front() == '@') {
    set_path(spec, s.substr(1));
  } else if (s.find(std::string(kSafetensors) + ":") != std::string_view::npos || s.ends_with(".npy") ||
             s.ends_with(kSafetensors)) {
    set_path(spec, s);
  } else if (size_t eq = s.find('='); eq != std::string_view::npos) {
    parse_inline(spec, s.substr(0, eq), s.substr(eq + 1));
  } else {
    bad_spec(text, "not a file, inline values or random");
  }
  return spec;
}

Tensor load_tensor_spec(const TensorSpec& spec, const Shape& shape, DType dtype, int64_t int_high) {
  switch (spec.kind) {
    case TensorSpec::File: return read_npy(spec.path);
    case TensorSpec::SafetensorsTensor: return SafetensorsFile::open(spec.path).get(spec.tensor);
    case TensorSpec::Random: return random_tensor(shape, dtype, spec.seed, -1.f, 1.f, int_high);
    case TensorSpec::Inline: {
      if (is_integer(spec.dtype) || spec.dtype == DType::boolean) {  // exact over the whole range
        return Tensor::from_ints(spec.shape, spec.ints, spec.dtype);
      }
      // from the parsed doubles: f64 keeps them, the other floats round once
      Tensor t(spec.shape, spec.dtype);
      convert_elements(spec.values.data(), DType::f64, t.mutable_raw(), spec.dtype, (int64_t)spec.values.size());
      return t;
    }
  }
  throw InputError("bad tensor spec '" + spec.text + "'");
}

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, float lo, float hi, int64_t int_high) {
  if (!(lo < hi)) throw InputError("random range [" + std::to_string(lo) + ", " + std::to_string(hi) + ") is empty");
  if (is_integer(dtype) && int_high <= 0)
    throw InputError("random integer bound must be positive, found " + std::to_string(int_high));
  const int64_t n = shape_numel(shape);
  if (n < 0) throw InputError("tensor shape " + shape_str(shape) + " has an invalid element count");
  uint64_t state = seed;
  if (is_integer(dtype) || dtype == DType::boolean) {
    std::vector<int64_t> v((size_t)n);
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t x = splitmix64(state);
      if (dtype == DType::boolean) {
        v[i] = (int64_t)(x >> 63);
      } else {  // [0, int_high), clipped to the dtype's range (u8: at most 255)
        const uint64_t span = (uint64_t)std::min<int64_t>(int_high - 1, dtype_traits(dtype).max) + 1;
        v[i] = (int64_t)(x % span);
      }
    }
    return Tensor::from_ints(shape, v, dtype);
  }
  // Generated in chunks straight into the tensor's dtype: no f32 copy of the whole tensor
  // (a bf16 parameter never exists in f32, so peak memory stays at its 2 bytes per value).
  Tensor t(shape, dtype);
  uint8_t* out = static_cast<uint8_t*>(t.mutable_raw());
  constexpr int64_t kChunk = 4096;
  float d[kChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t len = std::min(kChunk, n - i0);
    for (int64_t i = 0; i < len; ++i) {
      const uint64_t x = splitmix64(state);
      // 24 random bits give an exact float in [0, 1); the affine map in double
      // (exact product, one rounding) is the same on every IEEE platform.
      const double u = (double)(x >> 40) * 0x1p-24;
      float v = (float)((double)lo + ((double)hi - (double)lo) * u);
      if (v >= hi) v = std::nextafter(hi, lo);
      d[i] = v;
    }
    convert_elements(d, DType::f32, out + (size_t)i0 * dtype_size(dtype), dtype, len);
  }
  return t;
}

}  // namespace rlx::io
