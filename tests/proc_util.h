#pragma once
// Running the real rlx binary (RLX_BINARY) as a subprocess: exit code, stdout and stderr
// apart, a chosen environment; several at once (start() + wait()). The rlx environment
// variables of the caller are cleared so they cannot change a result (XDG_CACHE_HOME, where
// the compile cache goes by default, and XDG_CONFIG_HOME, where its key is, are kept: ctest
// points them into the build tree).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace rlx::test {

struct Proc {
  int code = -1;  // exit status; 128+signal when killed by a signal
  std::string out, err;
};

struct ProcOptions {
  std::map<std::string, std::string> env;  // set in the child
  std::string cwd = {};                    // chdir in the child
  long fsize_limit = -1;                   // RLIMIT_FSIZE in bytes (SIGXFSZ ignored: writes fail with EFBIG)
};

class Child {
 public:
  Child(const std::vector<std::string>& args, const ProcOptions& o = {}) {
    static int counter = 0;
    base_ = ::testing::TempDir() + "rlx_proc_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
    std::vector<std::string> argv_s = {RLX_BINARY};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string out = base_ + ".out", err = base_ + ".err";
    pid_ = ::fork();
    if (pid_ == 0) {
      int fo = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int fe = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fo < 0 || fe < 0) ::_exit(125);
      ::dup2(fo, 1);
      ::dup2(fe, 2);
      ::close(fo);
      ::close(fe);
      for (const char* v : {"RLX_MLX_MODE", "RLX_BACKEND", "RLX_DEVICE", "RLX_DISABLE_COMPILE", "RLX_NUM_THREADS",
                            "RLX_CACHE", "RLX_CACHE_DIR", "RLX_CACHE_MAX_MB", "RLX_CACHE_SECRET"})
        ::unsetenv(v);
      for (const auto& [k, v] : o.env) ::setenv(k.c_str(), v.c_str(), 1);
      if (!o.cwd.empty() && ::chdir(o.cwd.c_str()) != 0) ::_exit(126);
      if (o.fsize_limit >= 0) {
        ::signal(SIGXFSZ, SIG_IGN);  // kept across exec: write(2) then fails with EFBIG
        struct rlimit rl = {(rlim_t)o.fsize_limit, (rlim_t)o.fsize_limit};
        if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) ::_exit(126);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  Proc wait() {
    Proc p;
    int st = 0;
    if (pid_ < 0 || ::waitpid(pid_, &st, 0) != pid_) return p;
    p.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    p.out = slurp(base_ + ".out");
    p.err = slurp(base_ + ".err");
    ::unlink((base_ + ".out").c_str());
    ::unlink((base_ + ".err").c_str());
    return p;
  }

 private:
  static std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  std::string base_;
  pid_t pid_ = -1;
};

inline Proc run_rlx(const std::vector<std::string>& args, const ProcOptions& o = {}) { return Child(args, o).wait(); }

inline std::string show(const Proc& p) {
  return "exit " + std::to_string(p.code) + "\n--- stderr:\n" + p.err + "--- stdout:\n" + p.out;
}

inline bool has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace rlx::test
