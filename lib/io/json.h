#pragma once
// JSON from untrusted files (graph files, safetensors headers): parsed with limits, and
// quoted in messages as bounded excerpts.
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace rlx::io {

// Far above any real graph: a rank-16 constant inside a node inside "nodes" is 19 levels, and
// each of the 16 levels of control-flow bodies a graph may nest (loader Limits) adds 4.
inline constexpr size_t kMaxJsonDepth = 128;
// The longest excerpt of a value a message quotes.
inline constexpr size_t kMaxJsonExcerpt = 200;

// Parses `text`, refusing while parsing (InputError "WHAT: ...", exit 2):
//  - nesting (objects and lists) deeper than `max_depth`, before anything deeper is built (the
//    parser is iterative, but dumping or walking a deep value would recurse), and
//  - a key given twice in one object (JSON leaves its meaning open; nlohmann keeps the last),
//    naming the key.
// Syntax errors propagate as nlohmann::json::parse_error (with its byte position), other
// nlohmann errors (a number overflowing a double) as nlohmann::json::exception.
nlohmann::json parse_untrusted_json(std::string_view text, const std::string& what, size_t max_depth = kMaxJsonDepth);

// `v` as JSON text, cut to at most `max` characters (then ending in "..."). Never recursive
// beyond the depth parse_untrusted_json allows.
std::string json_excerpt(const nlohmann::json& v, size_t max = kMaxJsonExcerpt);
// A string quoted as JSON and cut the same way (for keys and ids from a file).
std::string quoted_excerpt(const std::string& s, size_t max = kMaxJsonExcerpt);

}  // namespace rlx::io
