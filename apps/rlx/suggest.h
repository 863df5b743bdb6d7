#pragma once
// "Did you mean ...?" for mistyped subcommands and flags, as git and cargo do: the
// closest valid name by edit distance (Damerau-Levenshtein, adjacent swaps count one).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace rlx::cli {

inline size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      size_t sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, sub});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

// The candidate closest to `word`, or "" when none is close enough to be a likely typo:
// within a third of the word's length (at least 1, at most 3 edits), or a unique prefix.
inline std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  auto core = [](const std::string& s) { return s.substr(s.find_first_not_of('-') == std::string::npos ? 0 : s.find_first_not_of('-')); };
  const std::string w = core(word);
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    size_t d = edit_distance(w, core(c));
    if (d < best_d) best_d = d, best = c;
  }
  size_t limit = std::clamp<size_t>(w.size() / 3, 1, 3);
  if (!best.empty() && best_d <= limit) return best;
  std::string prefix_hit;
  int hits = 0;
  for (const auto& c : candidates)
    if (w.size() >= 2 && core(c).rfind(w, 0) == 0) prefix_hit = c, ++hits;
  return hits == 1 ? prefix_hit : "";
}

// Every flag spelling an (sub)command accepts: --long and -s names, plus --help.
inline std::vector<std::string> flag_names(const CLI::App* app) {
  std::vector<std::string> r;
  for (const CLI::Option* o : app->get_options()) {
    for (const auto& l : o->get_lnames()) r.push_back("--" + l);
    for (const auto& s : o->get_snames()) r.push_back("-" + s);
  }
  return r;
}

// After a parse error: a message naming the first mistyped subcommand or flag in `args`
// (argv without the program name) with the closest valid one, or "" when none is found
// (the parser's own message then stands).
inline std::string explain_unknown(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> subs;
  for (const CLI::App* s : app.get_subcommands({})) subs.push_back(s->get_name());
  size_t k = 0;
  for (; k < args.size() && !args[k].empty() && args[k][0] == '-'; ++k) {  // rlx's own flags (--help, --version)
    const std::vector<std::string> names = flag_names(&app);
    std::string name = args[k].substr(0, args[k].find('='));
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    std::string hint = closest(name, names);
    return "unknown option '" + name + "' for 'rlx'" + (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
           "\nrlx --help lists the commands and options";
  }
  if (k == args.size()) return "";
  CLI::App* sub = nullptr;
  for (CLI::App* s : app.get_subcommands({}))
    if (s->get_name() == args[k]) sub = s;
  if (!sub) {
    std::string hint = closest(args[k], subs);
    std::string msg = "unknown command '" + args[k] + "'";
    if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
    std::string list;
    for (const auto& s : subs) list += (list.empty() ? "" : ", ") + s;
    return msg + "\nCommands: " + list + " (rlx --help shows what each does)";
  }
  const std::vector<std::string> names = flag_names(sub);
  std::vector<std::string> subsubs;  // e.g. rlx cache info|clear
  for (const CLI::App* s : sub->get_subcommands({})) subsubs.push_back(s->get_name());
  for (size_t i = k + 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    if (!subsubs.empty() && !a.empty() && a[0] != '-') {
      if (std::find(subsubs.begin(), subsubs.end(), a) != subsubs.end()) continue;
      std::string hint = closest(a, subsubs);
      std::string list;
      for (const auto& s : subsubs) list += (list.empty() ? "" : ", ") + s;
      return "unknown command '" + a + "' for 'rlx " + sub->get_name() + "'" +
             (hint.empty() ? "" : "; did you mean '" + hint + "'?") + "\nCommands: " + list;
    }
    if (a.size() < 2 || a[0] != '-') continue;
    if (std::isdigit((unsigned char)a[1]) || a[1] == '.') continue;  // a negative number, e.g. --atol -1
    std::string name = a.substr(0, a.find('='));
    if (name.size() > 2 && name[1] != '-') name = name.substr(0, 2);  // -ifoo: short flag with its value
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    std::string hint = closest(a.substr(0, a.find('=')), names);
    std::string msg = "unknown option '" + a.substr(0, a.find('=')) + "' for 'rlx " + sub->get_name() + "'";
    if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
    return msg + "\nrlx " + sub->get_name() + " --help lists its options";
  }
  return "";
}

}  // namespace rlx::cli
