#pragma once
// Sets environment variables for a scope, restoring them after (tests that switch a kernel
// choice or a path by its environment variable).
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

namespace rlx::test {

struct ScopedEnv {
  std::map<std::string, std::optional<std::string>> saved;
  void set(const std::string& k, const char* v) {
    if (!saved.count(k)) {
      const char* old = std::getenv(k.c_str());
      saved[k] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (v) ::setenv(k.c_str(), v, 1);
    else ::unsetenv(k.c_str());
  }
  ~ScopedEnv() {
    for (auto& [k, v] : saved)
      if (v) ::setenv(k.c_str(), v->c_str(), 1);
      else ::unsetenv(k.c_str());
  }
};

}  // namespace rlx::test
