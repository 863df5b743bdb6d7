// Golden tests: every case under tests/golden (expected values computed by the
// independent NumPy reference, scripts/graphlib.py) through the library API in
// every mode on every available backend, and through `rlx run --expect`.
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/npy.h"
#include "runtime/runner.h"
#include "runtime/session.h"
#include "test_util.h"

using namespace rlx;

namespace {

struct Param {
  test::GoldenCase c;
  std::string backend;
};
void PrintTo(const Param& p, std::ostream* os) { *os << p.backend << " " << p.c.name; }

std::vector<Param> all_params() {
  std::vector<Param> r;
  for (const auto& b : backend_names())
    for (const auto& c : test::golden_cases()) r.push_back({c, b});
  return r;
}

class Golden : public ::testing::TestWithParam<Param> {};

TEST_P(Golden, AllModesMatchReference) {
  const auto& [c, backend] = GetParam();
  std::unique_ptr<Executor> ex;
  try {
    ex = make_executor(backend, 0);
  } catch (const RuntimeError& e) {
    GTEST_SKIP() << backend << " unavailable: " << e.what();
  }
  Binding b;
  b.graph = c.graph;
  b.params = c.params;
  for (const auto& [id, f] : c.inputs) b.inputs.push_back(id + "=@" + f);
  Loaded L = load_binding(b);
  for (Mode m : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {
    Session s(L.graph, *ex, L.params);
    for (const auto& [id, t] : L.inputs) s.set_input(id, t);
    // Twice: the second compiled run replays the cached plan.
    for (int rep = 0; rep < 2; ++rep) {
      auto outs = s.run(m);
      for (const auto& [id, f] : c.expected) {
        Tensor e = io::read_npy(f);
        int k = output_index(*L.graph, id);
        ASSERT_GE(k, 0) << id;
        Diff d = compare_tensors(outs[k], e, c.atol, c.rtol);
        EXPECT_TRUE(d.ok()) << c.name << " " << mode_name(m) << ":" << backend << " run " << rep << ": "
                            << describe_diff(id, d, outs[k], e);
        // Integer and bool references are stored in their dtype: the output must carry it too.
        if (!is_float(e.dtype())) {
          EXPECT_EQ(outs[k].dtype(), e.dtype()) << c.name << " " << id;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Golden, ::testing::ValuesIn(all_params()), [](const auto& info) {
  std::string n = info.param.backend + "_" + info.param.c.name;
  for (auto& ch : n)
    if (!isalnum((unsigned char)ch)) ch = '_';
  return n;
});

// The command line: `rlx run --expect` over every case (default mode, and compiled via the env var).
class GoldenCli : public ::testing::TestWithParam<test::GoldenCase> {};

TEST_P(GoldenCli, RunExpect) {
  const auto& c = GetParam();
  std::string args = "run '" + c.graph + "'";
  for (const auto& p : c.params) args += " --params '" + p + "'";
  for (const auto& [id, f] : c.inputs) args += " --input '" + id + "=@" + f + "'";
  for (const auto& [id, f] : c.expected) args += " --expect '" + id + "=@" + f + "'";
  char tol[128];
  snprintf(tol, sizeof tol, " --atol %.17g --rtol %.17g", c.atol, c.rtol);
  args += tol;
  auto r = test::run_rlx(args);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("match"), std::string::npos) << r.out;
  auto rc = test::run_rlx(args, "RLX_MLX_MODE=compiled");
  EXPECT_EQ(rc.code, 0) << rc.out;
  EXPECT_NE(rc.out.find("compiled mode"), std::string::npos) << rc.out;
}

// Under the sanitizers (scripts/sanitize.sh) a process starts slowly: the command line runs
// every 4th case there (the in-process suite above still runs every case under them).
std::vector<test::GoldenCase> cli_cases() {
  std::vector<test::GoldenCase> all = test::golden_cases();
#ifdef RLX_SANITIZE_BUILD
  std::vector<test::GoldenCase> some;
  for (size_t i = 0; i < all.size(); i += 4) some.push_back(all[i]);
  return some;
#else
  return all;
#endif
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenCli, ::testing::ValuesIn(cli_cases()), [](const auto& info) {
  std::string n = info.param.name;
  for (auto& ch : n)
    if (!isalnum((unsigned char)ch)) ch = '_';
  return n;
});

// A wrong expectation must fail with exit 1 and report the worst element.
TEST(GoldenCli, MismatchExitsOneWithWorstElement) {
  auto cases = test::golden_cases();
  auto it = std::find_if(cases.begin(), cases.end(), [](const auto& c) { return c.name == "example_mlp"; });
  ASSERT_NE(it, cases.end());
  std::string args = "run '" + it->graph + "'";
  for (const auto& p : it->params) args += " --params '" + p + "'";
  for (const auto& [id, f] : it->inputs) args += " --input '" + id + "=@" + f + "'";
  // Expect zeros of the right shape: every element differs.
  Tensor e = io::read_npy(it->expected.begin()->second);
  std::string spec;
  for (size_t k = 0; k < e.shape().size(); ++k) spec += (k ? "x" : "") + std::to_string(e.shape()[k]);
  spec += "xf32=";
  for (int64_t k = 0; k < e.numel(); ++k) spec += (k ? ",0" : "0");
  args += " --expect '" + it->expected.begin()->first + "=" + spec + "'";
  auto r = test::run_rlx(args);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("worst at"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("max abs err"), std::string::npos) << r.out;
}

}  // namespace
