#pragma once
// Shared helpers for tests: paths, running the rlx binary, reading golden cases.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rlx::test {

inline std::string src(const std::string& rel) { return std::string(RLX_SOURCE_DIR) + "/" + rel; }

struct ProcResult {
  int code = -1;
  std::string out;  // stdout and stderr together
};

// Runs the rlx binary with `args` (a shell-quoted string), optional env prefix.
inline ProcResult run_rlx(const std::string& args, const std::string& env = "") {
  std::string cmd = env + (env.empty() ? "" : " ") + std::string("'") + RLX_BINARY + "' " + args + " 2>&1";
  ProcResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// The CPU, and Vulkan where this rlx has a device (the sanitizer build has none).
inline std::vector<std::string> built_backends() {
  std::vector<std::string> backends{"cpu"};
  if (run_rlx("devices").out.find("vulkan device 0") != std::string::npos) backends.push_back("vulkan");
  return backends;
}

struct GoldenCase {
  std::string name, dir, graph;
  std::vector<std::string> params;
  std::map<std::string, std::string> inputs, expected;
  double atol = 0, rtol = 0;
};
// What GoogleTest prints for a case (its bytes otherwise).
inline void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.name; }

inline std::vector<GoldenCase> golden_cases() {
  std::vector<GoldenCase> r;
  namespace fs = std::filesystem;
  for (const auto& e : fs::directory_iterator(src("tests/golden"))) {
    fs::path cj = e.path() / "case.json";
    if (!fs::exists(cj)) continue;
    std::ifstream f(cj);
    auto j = nlohmann::json::parse(f);
    GoldenCase c;
    c.name = e.path().filename().string();
    c.dir = e.path().string();
    auto rel = [&](const std::string& p) { return (e.path() / p).lexically_normal().string(); };
    c.graph = rel(j["graph"]);
    for (const auto& p : j["params"]) c.params.push_back(rel(p));
    for (auto& [k, v] : j["inputs"].items()) c.inputs[k] = rel(v);
    for (auto& [k, v] : j["expected"].items()) c.expected[k] = rel(v);
    c.atol = j["atol"];
    c.rtol = j["rtol"];
    r.push_back(c);
  }
  std::sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return r;
}

}  // namespace rlx::test
