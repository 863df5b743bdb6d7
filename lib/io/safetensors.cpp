#include "io/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "core/error.h"
#include "io/file.h"
#include "io/json.h"

namespace rlx::io {

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeader = 100u << 20;  // 100 MB, as the reference implementation
// "supported: F32, F16, ..." from core/dtype.h's table.
std::string supported_codes() {
  std::string r;
  for (const auto& d : kDTypeTable) r += (r.empty() ? "supported: " : ", ") + std::string(d.safetensors);
  return r;
}

// The codes come from core/dtype.h's table.
std::optional<DType> st_dtype(const std::string& s) { return dtype_from_safetensors(s); }
const char* st_name(DType t) { return dtype_traits(t).safetensors; }

std::string range_str(uint64_t b, uint64_t e) { return "[" + std::to_string(b) + ", " + std::to_string(e) + "]"; }

// Parses the JSON header and checks each entry against the data section size.
class HeaderChecker {
 public:
  HeaderChecker(const std::string& what, uint64_t data_size) : what_(what), data_size_(data_size) {}

  void parse(const json& header, std::map<std::string, TensorInfo>& tensors,
             std::map<std::string, std::string>& metadata) const {
    if (!header.is_object()) fail("the header", "a JSON object", header.type_name());
    for (const auto& [key, value] : header.items()) {
      if (key == "__metadata__")
        metadata = parse_metadata(value);
      else
        tensors[key] = parse_info(key, value);
    }
    check_layout(tensors);
  }

 private:
  [[noreturn]] void fail(const std::string& where, const std::string& expected, const std::string& found) const {
    throw InputError(what_ + ": " + where + ": expected " + expected + ", found " + found);
  }

  std::map<std::string, std::string> parse_metadata(const json& v) const {
    if (!v.is_object()) fail("__metadata__", "an object of strings", v.type_name());
    std::map<std::string, std::string> m;
    for (const auto& [k, s] : v.items()) {
      if (!s.is_string()) fail("__metadata__ '" + k + "'", "a string", s.type_name());
      m[k] = s.get<std::string>();
    }
    return m;
  }

  uint64_t non_negative(const json& v, const std::string& where) const {
    if (!v.is_number_unsigned()) fail(where, "a non-negative integer", json_excerpt(v));
    return v.get<uint64_t>();
  }

  TensorInfo parse_info(const std::string& name, const json& v) const {
    const std::string where = "tensor '" + name + "'";
    if (!v.is_object()) fail(where, "an object with dtype, shape and data_offsets", v.type_name());
    for (const auto& [k, _] : v.items())
      if (k != "dtype" && k != "shape" && k != "data_offsets")
        fail(where, "only the fields dtype, shape and data_offsets", "field '" + k + "'");
    for (const char* k : {"dtype", "shape", "data_offsets"})
      if (!v.contains(k)) fail(where, std::string("a field '") + k + "'", "none");

    TensorInfo info;
    const json& dt = v["dtype"];
    if (!dt.is_string()) fail(where + " dtype", "a string", json_excerpt(dt));
    std::optional<DType> dtype = st_dtype(dt.get<std::string>());
    if (!dtype) fail(where, std::string("a known dtype (") + supported_codes() + ")", "dtype " + json_excerpt(dt));
    info.dtype = *dtype;

    const json& shape = v["shape"];
    if (!shape.is_array()) fail(where + " shape", "an array", json_excerpt(shape));
    for (const json& d : shape) {
      uint64_t dim = non_negative(d, where + " shape");
      if (dim > (uint64_t)INT64_MAX) fail(where + " shape", "dimensions below 2^63", json_excerpt(d));
      info.shape.push_back((int64_t)dim);
    }

    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2) fail(where + " data_offsets", "[begin, end]", json_excerpt(off));
    info.begin = non_negative(off[0], where + " data_offsets");
    info.end = non_negative(off[1], where + " data_offsets");
    const std::string offsets = "data_offsets " + range_str(info.begin, info.end);
    if (info.begin > info.end) fail(where, "begin <= end", offsets);
    if (info.end > data_size_)
      fail(where, "offsets within the data section (" + std::to_string(data_size_) + " bytes)", offsets);

    const int64_t numel = shape_numel(info.shape);
    if (numel < 0) fail(where, "a shape whose element count fits int64", "shape " + shape_str(info.shape));
    const uint64_t bytes = info.end - info.begin, es = dtype_size(info.dtype);
    if ((uint64_t)numel > bytes / es || (uint64_t)numel * es != bytes)
      fail(where, "shape " + shape_str(info.shape) + " of " + st_name(info.dtype) + " to fill " + offsets,
           std::to_string(numel) + " elements for " + std::to_string(bytes) + " bytes");
    return info;
  }

  // Tensors must tile the data section exactly: no overlap, no hole, nothing after.
  void check_layout(const std::map<std::string, TensorInfo>& tensors) const {
    std::vector<std::tuple<uint64_t, uint64_t, const std::string*>> spans;
    for (const auto& [name, info] : tensors) spans.emplace_back(info.begin, info.end, &name);
    std::sort(spans.begin(), spans.end());
    uint64_t covered = 0;
    const std::string* prev = nullptr;
    for (const auto& [begin, end, name] : spans) {
      if (begin < covered)
        fail("tensor '" + *name + "'", "data not overlapping tensor '" + *prev + "' (which ends at " +
                                           std::to_string(covered) + ")",
             "data_offsets " + range_str(begin, end));
      if (begin > covered)
        fail("data section", "tensor data to follow without gaps",
             "bytes " + range_str(covered, begin) + " used by no tensor");
      covered = end;
      prev = name;
    }
    if (covered != data_size_)
      fail("data section", std::to_string(covered) + " bytes (the end of the last tensor)",
           std::to_string(data_size_) + " bytes");
  }

  const std::string& what_;
  uint64_t data_size_;
};

}  // namespace

SafetensorsFile SafetensorsFile::from_bytes(std::shared_ptr<const void> keep, const uint8_t* data, size_t size,
                                            const std::string& what) {
  ByteReader r(data, size, what);
  const uint64_t header_len = r.u64le("header length");
  if (header_len > kMaxHeader)
    throw InputError(what + ": header length " + std::to_string(header_len) + " exceeds the limit of " +
                     std::to_string(kMaxHeader) + " bytes (file has " + std::to_string(size) + " bytes)");
  const uint8_t* text = r.take(header_len, "header");
  json header;
  try {
    header = parse_untrusted_json(std::string_view(reinterpret_cast<const char*>(text), header_len), what + ": header");
  } catch (const json::exception&) {
    throw InputError(what + ": header is not valid JSON");
  }

  SafetensorsFile f;
  f.path_ = what;
  f.data_size_ = r.remaining();
  f.data_ = r.take(f.data_size_, "data");
  try {
    HeaderChecker(what, f.data_size_).parse(header, f.tensors_, f.metadata_);
  } catch (const json::exception& e) {  // not expected after the checks; never let one escape
    throw InputError(what + ": bad header: " + e.what());
  }
  f.keep_ = std::move(keep);
  return f;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  MappedFile m = map_file(path);
  return from_bytes(m.keep, m.data, m.size, path);
}

SafetensorsFile SafetensorsFile::from_memory(std::shared_ptr<const std::vector<uint8_t>> bytes,
                                             const std::string& what) {
  const uint8_t* data = bytes ? bytes->data() : nullptr;
  const size_t size = bytes ? bytes->size() : 0;
  return from_bytes(std::move(bytes), data, size, what);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> r;
  for (const auto& [name, _] : tensors_) r.push_back(name);
  return r;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it != tensors_.end()) return it->second;
  std::string have;
  size_t shown = 0;
  for (const auto& [n, _] : tensors_) {
    if (shown++ == 10) {
      have += ", ...";
      break;
    }
    have += (have.empty() ? "'" : ", '") + n + "'";
  }
  throw InputError(path_ + ": no tensor named '" + name + "' (it has " +
                   (have.empty() ? std::string("no tensors") : have) + ")");
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const TensorInfo& ti = info(name);
  const uint8_t* p = data_ + ti.begin;
  return tensor_from_bytes(p, ti.shape, ti.dtype, keep_);
}

std::vector<uint8_t> encode_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<const std::pair<std::string, Tensor>*> sorted;
  for (const auto& entry : tensors) sorted.push_back(&entry);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });

  json header = json::object();
  uint64_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const auto& [name, t] = *sorted[i];
    if (name == "__metadata__") throw InputError("cannot write a tensor named __metadata__ to safetensors");
    if (i > 0 && sorted[i - 1]->first == name) throw InputError("duplicate tensor name '" + name + "'");
    const uint64_t bytes = (uint64_t)t.numel() * dtype_size(t.dtype());
    header[name] = {{"dtype", st_name(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception&) {
    throw InputError("tensor names must be valid UTF-8 to be written to safetensors");
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  std::vector<uint8_t> out;
  append_le(out, text.size(), 8);
  out.insert(out.end(), text.begin(), text.end());
  const size_t data_start = out.size();
  out.resize(data_start + offset);
  uint8_t* data = out.data() + data_start;
  for (const auto* entry : sorted) {
    const Tensor& t = entry->second;
    if (t.nbytes()) std::memcpy(data, t.raw(), t.nbytes());
    data += t.nbytes();
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<uint8_t> bytes = encode_safetensors(tensors);
  write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace rlx::io
