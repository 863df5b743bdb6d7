#pragma once
// Error classes and the exit codes they map to. Every failure that reaches the
// command line is one of these; anything else is a bug.
#include <stdexcept>
#include <string>

namespace rlx {

enum ExitCode : int {
  kExitOk = 0,
  kExitExpectFailed = 1,  // --expect mismatch, compare outside tolerance
  kExitBadInput = 2,      // bad usage, graph, params or inputs
  kExitRuntime = 3,       // failure while running: device, memory
};

class Error : public std::runtime_error {
 public:
  Error(int exit_code, const std::string& msg) : std::runtime_error(msg), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Bad usage, a malformed graph, missing/mismatched params, bad inputs, unreadable files.
class InputError : public Error {
 public:
  explicit InputError(const std::string& msg) : Error(kExitBadInput, msg) {}
};

// A failure while executing: device loss, out of memory, out-of-range index at run time.
class RuntimeError : public Error {
 public:
  explicit RuntimeError(const std::string& msg) : Error(kExitRuntime, msg) {}
};

// Model-given text (a node id, an output name) as a message quotes it: control characters as
// \xNN (no terminal escapes from a file), cut to `max` bytes with "..." after.
inline std::string printable(const std::string& s, size_t max = 200) {
  static const char hex[] = "0123456789abcdef";
  std::string r;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const unsigned char ch = (unsigned char)s[i];
    if (ch < 0x20 || ch == 0x7f) r += std::string("\\x") + hex[ch >> 4] + hex[ch & 15];
    else r += (char)ch;
  }
  return s.size() > max ? r + "..." : r;
}

}  // namespace rlx
