#include "io/json.h"

#include <set>
#include <vector>

#include "core/error.h"

namespace rlx::io {

using json = nlohmann::json;

namespace {

std::string cut(std::string s, size_t max) {
  if (s.size() <= max) return s;
  s.resize(max);
  // Do not end inside a UTF-8 sequence.
  while (!s.empty() && ((unsigned char)s.back() & 0xC0) == 0x80) s.pop_back();
  if (!s.empty() && ((unsigned char)s.back() & 0x80)) s.pop_back();
  return s + "...";
}

}  // namespace

json parse_untrusted_json(std::string_view text, const std::string& what, size_t max_depth) {
  size_t depth = 0;
  std::vector<std::set<std::string>> keys;   // per open object: its keys so far
  std::vector<std::string> last_key;         // per open object: its latest key (for messages)
  auto under = [&]() -> std::string {  // the key of the nearest enclosing object
    for (size_t k = last_key.size() - 1; k-- > 0;)
      if (!last_key[k].empty()) return " (in an object under " + quoted_excerpt(last_key[k], 60) + ")";
    return " (in the top-level object)";
  };
  auto cb = [&](int, json::parse_event_t ev, json& parsed) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (++depth > max_depth)
          throw InputError(what + ": JSON nested deeper than " + std::to_string(max_depth) +
                           " levels (objects and lists); refused");
        if (ev == json::parse_event_t::object_start) {
          keys.emplace_back();
          last_key.emplace_back();
        }
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        last_key.pop_back();
        [[fallthrough]];
      case json::parse_event_t::array_end:
        --depth;
        break;
      case json::parse_event_t::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        // `under` names the enclosing object's key, so look it up before recording this one.
        if (!keys.back().insert(k).second)
          throw InputError(what + ": duplicate key " + quoted_excerpt(k) + under() + "; each key may appear once");
        last_key.back() = k;
        break;
      }
      case json::parse_event_t::value: break;
    }
    return true;
  };
  return json::parse(text.begin(), text.end(), cb);
}

namespace {
// Appends `v` as compact JSON to `out`, stopping once `out` is longer than `max` (so a huge
// list costs no more than its first entries).
void dump_bounded(const json& v, std::string& out, size_t max) {
  if (out.size() > max) return;
  if (v.is_array()) {
    out += '[';
    bool first = true;
    for (const auto& e : v) {
      if (out.size() > max) return;
      if (!first) out += ',';
      first = false;
      dump_bounded(e, out, max);
    }
    out += ']';
  } else if (v.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (out.size() > max) return;
      if (!first) out += ',';
      first = false;
      out += quoted_excerpt(it.key(), max) + ':';
      dump_bounded(it.value(), out, max);
    }
    out += '}';
  } else if (v.is_string()) {
    out += quoted_excerpt(v.get_ref<const std::string&>(), max);
  } else {
    out += v.dump();
  }
}
}  // namespace

std::string json_excerpt(const json& v, size_t max) {
  std::string out;
  dump_bounded(v, out, max);
  return cut(std::move(out), max);
}

std::string quoted_excerpt(const std::string& s, size_t max) {
  return cut(json(s.size() > max ? s.substr(0, max + 4) : s).dump(-1, ' ', false, json::error_handler_t::replace), max);
}

}  // namespace rlx::io
