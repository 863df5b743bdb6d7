// The persistent compile cache (issue 11, docs/cache.md): the on-disk store (round trip,
// every kind of corrupt entry rejected, LRU eviction), compiled plans (serialized and read
// back identically; truncated or flipped bytes never crash and are never trusted), and the
// real binary across processes: miss then hit, --no-cache / RLX_CACHE=0, a corrupt entry
// ignored with a warning and rebuilt, several processes sharing one cache at once, `rlx
// cache info|clear`, and on Vulkan the SPIR-V and pipeline cache entries. Expected outputs
// are computed by the test's own loops, never taken from rlx.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "io/blob_cache.h"
#include "io/npy.h"
#include "ir/loader.h"
#include "ir/op_registry.h"
#include "passes/passes.h"
#include "proc_util.h"
#include "runtime/compile_cache.h"
#include "runtime/session.h"

namespace {

namespace fs = std::filesystem;
using namespace rlx;
using rlx::test::Child;
using rlx::test::has;
using rlx::test::Proc;
using rlx::test::run_rlx;
using rlx::test::show;

#define EXPECT_HAS(text, phrase) EXPECT_TRUE(has(text, phrase)) << "expected \"" << (phrase) << "\" in:\n" << (text)

// y = softmax((3x + 1) * x) over rows of a [2, 3] input: an elementwise chain the compiler
// fuses into one kernel, then a row op.
const char* kGraph = R"({"format": "rlx.graph", "version": 1, "name": "fused_softmax",
  "nodes": [{"id": "x", "op": "input", "shape": ["n", 3]},
            {"id": "three", "op": "constant", "shape": [], "value": 3.0},
            {"id": "one", "op": "constant", "shape": [], "value": 1.0},
            {"id": "t", "op": "mul", "inputs": ["x", "three"]},
            {"id": "u", "op": "add", "inputs": ["t", "one"]},
            {"id": "v", "op": "mul", "inputs": ["u", "x"]},
            {"id": "y", "op": "softmax", "inputs": ["v"]}],
  "outputs": ["y"]})";
const std::vector<float> kX = {0.5f, -1.f, 0.25f, 1.f, 2.f, -0.5f};
const std::string kInput = "x=2x3xf32=0.5,-1,0.25,1,2,-0.5";

std::vector<double> expected_y() {
  std::vector<double> y(6);
  for (int r = 0; r < 2; ++r) {
    double v[3], m = -1e300, s = 0;
    for (int c = 0; c < 3; ++c) {
      double x = kX[r * 3 + c];
      v[c] = (3 * x + 1) * x;
      m = std::max(m, v[c]);
    }
    for (int c = 0; c < 3; ++c) s += std::exp(v[c] - m);
    for (int c = 0; c < 3; ++c) y[r * 3 + c] = std::exp(v[c] - m) / s;
  }
  return y;
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "rlx_cache_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    io::set_active_cache(nullptr);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& n) const { return dir_ + "/" + n; }
  // Entry files of one kind in a cache directory.
  std::vector<std::string> entries(const std::string& cache, const std::string& kind) const {
    std::vector<std::string> r;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(cache + "/v1/" + kind, ec)) r.push_back(e.path().string());
    std::sort(r.begin(), r.end());
    return r;
  }
  std::string dir_;
};

// ---------------- the store ----------------
using BlobStore = TempDir;

TEST_F(BlobStore, RoundTripAndMiss) {
  io::BlobCache c(path("c"), 0);
  EXPECT_FALSE(c.get("plan", "k1").data);
  EXPECT_TRUE(c.get("plan", "k1").problem.empty()) << "a missing entry is a plain miss";
  std::string payload("\0binary\xff payload", 16);
  ASSERT_TRUE(c.put("plan", "k1", payload));
  auto hit = c.get("plan", "k1");
  ASSERT_TRUE(hit.data);
  EXPECT_EQ(*hit.data, payload);
  EXPECT_FALSE(c.get("plan", "k2").data);
  EXPECT_FALSE(c.get("spirv", "k1").data) << "kinds are separate";
  ASSERT_TRUE(c.put("plan", "k1", "v2"));  // overwritten
  EXPECT_EQ(*c.get("plan", "k1").data, "v2");
  io::BlobCache::Info i = c.info();
  EXPECT_EQ(i.entries, 1u);
  EXPECT_EQ(i.kinds.at("plan").first, 1u);
}

// Every way an entry can be damaged is detected, reported, removed, and is a miss.
TEST_F(BlobStore, DamagedEntriesAreRejectedAndRemoved) {
  io::BlobCache c(path("c"), 0);
  const std::string payload(1000, 'p');
  ASSERT_TRUE(c.put("plan", "key", payload));
  const std::string file = c.entry_path("plan", "key");
  const std::string good = slurp(file);
  struct Case {
    std::string name, bytes, phrase;
  };
  std::string flipped = good;
  flipped[good.size() - 10] ^= 0x40;
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  std::string bad_format = good;
  bad_format[8] = 7;
  for (const Case& k : std::vector<Case>{
           {"empty", "", "truncated"},
           {"header only", good.substr(0, 10), "truncated"},
           {"half", good.substr(0, good.size() / 2), "truncated"},
           {"one byte short", good.substr(0, good.size() - 1), "truncated"},
           {"padded", good + "x", "padded"},
           {"flipped payload bit", flipped, "checksum mismatch"},
           {"bad magic", bad_magic, "bad magic"},
           {"another format", bad_format, "entry format 7"},
       }) {
    SCOPED_TRACE(k.name);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << k.bytes;
    auto r = c.get("plan", "key");
    EXPECT_FALSE(r.data);
    EXPECT_HAS(r.problem, k.phrase);
    EXPECT_FALSE(fs::exists(file)) << "a bad entry is removed";
  }
  std::ofstream(file, std::ios::binary | std::ios::trunc) << good;
  ASSERT_TRUE(c.get("plan", "key").data) << "the intact bytes still read back";
}

// Over the size limit, the least recently used entries go (a read counts as a use).
TEST_F(BlobStore, EvictsLeastRecentlyUsed) {
  const std::string blob(10000, 'b');
  io::BlobCache c(path("c"), 35000);  // room for 3 entries of ~10 KB
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE(c.put("plan", "k" + std::to_string(k), blob));
    // Distinct ages, oldest first: k0 (3 h ago), k1 (2 h), k2 (1 h).
    fs::last_write_time(c.entry_path("plan", "k" + std::to_string(k)),
                        fs::file_time_type::clock::now() - std::chrono::hours(3 - k));
  }
  ASSERT_TRUE(c.get("plan", "k0").data);  // k0 is now the most recent
  ASSERT_TRUE(c.put("plan", "k3", blob));  // over the limit: k1 (least recent) goes
  EXPECT_TRUE(c.get("plan", "k0").data);
  EXPECT_FALSE(c.get("plan", "k1").data);
  EXPECT_TRUE(c.get("plan", "k2").data);
  EXPECT_TRUE(c.get("plan", "k3").data);
  EXPECT_LE(c.info().bytes, 35000u);
  io::BlobCache::Info gone = c.clear();
  EXPECT_EQ(gone.entries, 3u);
  EXPECT_EQ(c.info().entries, 0u);
}

TEST_F(BlobStore, SettingsFromTheEnvironment) {
  auto with = [](std::map<std::string, const char*> env) {
    std::map<std::string, std::string> saved;
    for (const char* v : {"RLX_CACHE", "RLX_CACHE_DIR", "XDG_CACHE_HOME", "HOME", "RLX_CACHE_MAX_MB"}) {
      if (const char* e = std::getenv(v)) saved[v] = e;
      ::unsetenv(v);
    }
    for (auto& [k, v] : env) ::setenv(k.c_str(), v, 1);
    io::CacheSettings s;
    std::string err;
    try {
      s = io::cache_settings_from_env();
    } catch (const std::exception& e) {
      err = e.what();
    }
    for (const char* v : {"RLX_CACHE", "RLX_CACHE_DIR", "XDG_CACHE_HOME", "HOME", "RLX_CACHE_MAX_MB"}) ::unsetenv(v);
    for (auto& [k, v] : saved) ::setenv(k.c_str(), v.c_str(), 1);
    return std::make_pair(s, err);
  };
  EXPECT_EQ(with({{"HOME", "/h"}}).first.dir, "/h/.cache/rlx");
  EXPECT_EQ(with({{"HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}}).first.dir, "/x/rlx");
  EXPECT_EQ(with({{"HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}, {"RLX_CACHE_DIR", "/r"}}).first.dir, "/r");
  EXPECT_TRUE(with({{"HOME", "/h"}}).first.enabled);
  EXPECT_FALSE(with({{"HOME", "/h"}, {"RLX_CACHE", "0"}}).first.enabled);
  EXPECT_FALSE(with({}).first.enabled) << "nowhere to put it";
  EXPECT_EQ(with({{"HOME", "/h"}, {"RLX_CACHE_MAX_MB", "3"}}).first.max_bytes, 3u << 20);
  EXPECT_HAS(with({{"HOME", "/h"}, {"RLX_CACHE_MAX_MB", "-1"}}).second, "RLX_CACHE_MAX_MB=-1");
}

// ---------------- compiled plans ----------------
using Plans = TempDir;

passes::OptimizedGraph optimized_fixture(std::shared_ptr<ir::Graph>* keep = nullptr) {
  auto g = std::make_shared<ir::Graph>(ir::load_graph_text(kGraph, "g.json"));
  ir::TypedShapes ts = ir::infer_shapes(*g, {{"x", Shape{2, 3}}});
  if (keep) *keep = g;
  return passes::optimize(*g, ts);
}

TEST_F(Plans, SerializeRoundTripIsExact) {
  passes::OptimizedGraph og = optimized_fixture();
  ASSERT_EQ(og.stats.fused_groups, 1) << "the fixture must exercise a fused program";
  std::string bytes = serialize_plan(og);
  std::string why;
  auto back = deserialize_plan(bytes, &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(serialize_plan(*back), bytes);
  EXPECT_EQ(back->graph.nodes.size(), og.graph.nodes.size());
  for (size_t i = 0; i < og.graph.nodes.size(); ++i) {
    EXPECT_EQ(back->graph.nodes[i].id, og.graph.nodes[i].id);
    EXPECT_EQ(back->graph.find(og.graph.nodes[i].id), (int)i);
    EXPECT_EQ(back->ts.shapes[i], og.ts.shapes[i]);
    EXPECT_EQ(back->fused[i] != nullptr, og.fused[i] != nullptr);
    if (og.fused[i]) {
      EXPECT_EQ(back->fused[i]->key(), og.fused[i]->key());
    }
  }
}

// Any prefix is refused; flipped bytes are refused or decode to something the validator
// accepted (indices in range), never a crash (this runs under ASan in CI).
TEST_F(Plans, TruncatedOrFlippedBytesNeverCrash) {
  std::string bytes = serialize_plan(optimized_fixture());
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::string why;
    EXPECT_FALSE(deserialize_plan(bytes.substr(0, n), &why)) << n;
    EXPECT_FALSE(why.empty());
  }
  std::mt19937 rng(7);
  for (int k = 0; k < 3000; ++k) {
    std::string b = bytes;
    for (int f = 0; f < 1 + k % 3; ++f) b[rng() % b.size()] ^= (char)(1u << (rng() % 8));
    auto p = deserialize_plan(b, nullptr);
    if (!p) continue;
    for (size_t i = 0; i < p->graph.nodes.size(); ++i)
      for (int in : p->graph.nodes[i].inputs) ASSERT_LT(in, (int)i);
  }
}

TEST_F(Plans, KeyCoversGraphContentInputsAndDevice) {
  auto g = std::make_shared<ir::Graph>(ir::load_graph_text(kGraph, "a.json"));
  auto moved = std::make_shared<ir::Graph>(ir::load_graph_text(kGraph, "elsewhere/b.json"));
  std::string other = kGraph;
  other.replace(other.find("\"value\": 3.0"), 12, "\"value\": 4.0");
  auto changed = std::make_shared<ir::Graph>(ir::load_graph_text(other, "a.json"));
  const std::string k = plan_cache_key(*g, "x:[2, 3]:f32;", "cpu", "cpu");
  EXPECT_EQ(k, plan_cache_key(*moved, "x:[2, 3]:f32;", "cpu", "cpu")) << "the path is not content";
  EXPECT_NE(k, plan_cache_key(*changed, "x:[2, 3]:f32;", "cpu", "cpu")) << "a constant changed";
  EXPECT_NE(k, plan_cache_key(*g, "x:[4, 3]:f32;", "cpu", "cpu"));
  EXPECT_NE(k, plan_cache_key(*g, "x:[2, 3]:f16;", "cpu", "cpu"));
  EXPECT_NE(k, plan_cache_key(*g, "x:[2, 3]:f32;", "vulkan", "llvmpipe"));
  EXPECT_HAS(k, io::build_id());
}

// In process: a second Session finds the first one's plan on disk and computes the same
// (independently computed) values from it.
TEST_F(Plans, SecondSessionReadsThePlanFromDisk) {
  io::set_active_cache(std::make_unique<io::BlobCache>(path("c"), 0));
  auto g = std::make_shared<ir::Graph>(ir::load_graph_text(kGraph, "g.json"));
  const std::vector<double> want = expected_y();
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    int hits = io::cache_log().hits, misses = io::cache_log().misses;
    auto ex = make_executor("cpu");
    Session s(g, *ex, {});
    s.set_input("x", Tensor::from_vector({2, 3}, kX));
    auto out = s.run(Mode::Compiled);
    ASSERT_EQ(out.size(), 1u);
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(out[0].data()[i], want[i], 1e-6) << i;
    EXPECT_EQ(io::cache_log().hits - hits, round == 0 ? 0 : 1);
    EXPECT_EQ(io::cache_log().misses - misses, round == 0 ? 1 : 0);
  }
  EXPECT_EQ(entries(path("c"), "plan").size(), 1u);
}

// ---------------- through the binary, across processes ----------------
class CacheCli : public TempDir {
 protected:
  void SetUp() override {
    TempDir::SetUp();
    std::ofstream(path("g.json")) << kGraph;
    cache_ = path("cache");
  }
  rlx::test::ProcOptions env(std::map<std::string, std::string> extra = {}) const {
    rlx::test::ProcOptions o;
    o.env = {{"RLX_CACHE_DIR", cache_}};
    for (auto& [k, v] : extra) o.env[k] = v;
    return o;
  }
  std::vector<std::string> run_args(const std::string& out, const std::string& backend = "cpu") const {
    return {"run", path("g.json"), "--input", kInput, "--mode", "compiled", "-v", "-b", backend, "--output", "y=" + out};
  }
  void expect_y(const std::string& npy) {
    ASSERT_TRUE(fs::exists(npy)) << npy;
    Tensor t = io::read_npy(npy);
    ASSERT_EQ(t.shape(), (Shape{2, 3}));
    std::vector<double> want = expected_y();
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(t.data()[i], want[i], 1e-5) << i;
  }
  bool vulkan_available() const {  // built with Vulkan and a device present (an rlx without it lists none)
    Proc p = run_rlx({"devices", "--backend", "vulkan"});
    return p.code == 0 && p.out.find("no devices") == std::string::npos;
  }
  std::string cache_;
};

TEST_F(CacheCli, MissThenHitAcrossProcesses) {
  Proc p = run_rlx(run_args(path("y1.npy")), env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "compile cache: miss: no entry");
  EXPECT_HAS(p.err, "compile cache: 0 hit(s), 1 miss(es), 1 stored");
  expect_y(path("y1.npy"));
  ASSERT_EQ(entries(cache_, "plan").size(), 1u);
  p = run_rlx(run_args(path("y2.npy")), env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "compile cache: hit: plan for x:[2, 3]:f32;");
  EXPECT_HAS(p.err, "compile cache: 1 hit(s), 0 miss(es), 0 stored");
  expect_y(path("y2.npy"));
  // Other input shapes: another entry.
  p = run_rlx({"run", path("g.json"), "--input", "x=1x3xf32=1,2,3", "--mode", "compiled", "-v"}, env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "compile cache: miss");
  EXPECT_EQ(entries(cache_, "plan").size(), 2u);
  // Lazy and eager modes compile nothing and store nothing.
  p = run_rlx({"run", path("g.json"), "--input", kInput, "--mode", "lazy", "-v"}, env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_FALSE(has(p.err, "compile cache: hit") || has(p.err, "compile cache: miss")) << p.err;
  EXPECT_EQ(entries(cache_, "plan").size(), 2u);
}

TEST_F(CacheCli, NoCacheAndRlxCache0WriteNothing) {
  Proc p = run_rlx({"run", path("g.json"), "--input", kInput, "--mode", "compiled", "-v", "--no-cache", "--output",
                    "y=" + path("y.npy")},
                   env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "compile cache: off (--no-cache)");
  expect_y(path("y.npy"));
  p = run_rlx(run_args(path("y.npy")), env({{"RLX_CACHE", "0"}}));
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "compile cache: off (RLX_CACHE=0)");
  EXPECT_FALSE(fs::exists(cache_)) << "nothing written";
  // XDG_CACHE_HOME is used when RLX_CACHE_DIR is not set.
  rlx::test::ProcOptions xdg;
  xdg.env = {{"XDG_CACHE_HOME", path("xdg")}};
  p = run_rlx(run_args(path("y.npy")), xdg);
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_EQ(entries(path("xdg/rlx"), "plan").size(), 1u);
}

// A cache that cannot be written (its directory would be under a regular file): a warning,
// and the run goes on with the right answer.
TEST_F(CacheCli, UnwritableCacheWarnsAndRuns) {
  std::ofstream(path("file")) << "x";
  rlx::test::ProcOptions o;
  o.env = {{"RLX_CACHE_DIR", path("file/cache")}};
  Proc p = run_rlx(run_args(path("y.npy")), o);
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "warning: compile cache: could not store the plan");
  expect_y(path("y.npy"));
}

// A damaged entry: a warning naming it, the right answer, and the entry rewritten.
TEST_F(CacheCli, CorruptEntryIsIgnoredWithAWarningAndRebuilt) {
  ASSERT_EQ(run_rlx(run_args(path("y.npy")), env()).code, 0);
  auto files = entries(cache_, "plan");
  ASSERT_EQ(files.size(), 1u);
  const std::string good = slurp(files[0]);
  for (const std::string& bad : {good.substr(0, good.size() / 2), std::string("garbage"), std::string()}) {
    std::ofstream(files[0], std::ios::binary | std::ios::trunc) << bad;
    Proc p = run_rlx(run_args(path("y.npy")), env());
    ASSERT_EQ(p.code, 0) << show(p);
    EXPECT_HAS(p.err, "warning: compile cache: ignored a bad entry (" + files[0]);
    EXPECT_HAS(p.err, "compile cache: miss: bad entry");
    expect_y(path("y.npy"));
    EXPECT_EQ(slurp(files[0]), good) << "rewritten as it was";
  }
  // Without --verbose the warning still shows.
  std::ofstream(files[0], std::ios::binary | std::ios::trunc) << "x";
  Proc p = run_rlx({"run", path("g.json"), "--input", kInput, "--mode", "compiled"}, env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "warning: compile cache: ignored a bad entry");
}

// Several processes at once on an empty cache: every one succeeds with the right values,
// and what they leave is one valid entry (a later process hits it) and no temporaries.
TEST_F(CacheCli, ConcurrentProcessesShareOneCache) {
  const int n = 6;
  std::vector<std::unique_ptr<Child>> kids;
  for (int k = 0; k < n; ++k) kids.push_back(std::make_unique<Child>(run_args(path("y" + std::to_string(k) + ".npy")), env()));
  for (int k = 0; k < n; ++k) {
    Proc p = kids[k]->wait();
    ASSERT_EQ(p.code, 0) << show(p);
    EXPECT_FALSE(has(p.err, "warning")) << p.err;
    expect_y(path("y" + std::to_string(k) + ".npy"));
  }
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(cache_))
    if (e.is_regular_file()) {
      ++files;
      EXPECT_EQ(e.path().extension(), ".bin") << "no temporary left: " << e.path();
    }
  EXPECT_EQ(files, 1);
  Proc p = run_rlx(run_args(path("y.npy")), env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "compile cache: hit");
  EXPECT_FALSE(has(p.err, "warning")) << p.err;
}

TEST_F(CacheCli, InfoAndClear) {
  Proc p = run_rlx({"cache", "info"}, env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.out, "compile cache: " + cache_);
  EXPECT_HAS(p.out, "0 entries");
  ASSERT_EQ(run_rlx(run_args(path("y.npy")), env()).code, 0);
  ASSERT_EQ(run_rlx({"run", path("g.json"), "--input", "x=1x3xf32=1,2,3", "--mode", "compiled"}, env()).code, 0);
  p = run_rlx({"cache"}, env());  // info is the default
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.out, "2 entries");
  EXPECT_HAS(p.out, "compiled plans");
  p = run_rlx({"cache", "info"}, env({{"RLX_CACHE", "0"}}));
  EXPECT_HAS(p.out, "(off: RLX_CACHE=0)");
  p = run_rlx({"cache", "clear"}, env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.out, "removed 2 entries");
  EXPECT_TRUE(entries(cache_, "plan").empty());
  p = run_rlx({"cache", "info"}, env());
  EXPECT_HAS(p.out, "0 entries");
  // Mistyped: a suggestion; a bad size limit: exit 2.
  p = run_rlx({"cache", "claer"}, env());
  EXPECT_EQ(p.code, 2) << show(p);
  EXPECT_HAS(p.err, "did you mean 'clear'?");
  p = run_rlx(run_args(path("y.npy")), env({{"RLX_CACHE_MAX_MB", "lots"}}));
  EXPECT_EQ(p.code, 2) << show(p);
  EXPECT_HAS(p.err, "RLX_CACHE_MAX_MB=lots");
}

// Vulkan: the fused kernel's SPIR-V comes from the cache on the second start (glslang not
// called), the pipeline cache is saved and loaded, and a damaged entry of either kind is
// refused with a warning (a pipeline cache of another device by its header).
TEST_F(CacheCli, VulkanSpirvAndPipelineCache) {
  if (!vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  Proc p = run_rlx(run_args(path("y.npy"), "vulkan"), env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "0 SPIR-V from the cache, 1 compiled with glslang");
  expect_y(path("y.npy"));
  ASSERT_EQ(entries(cache_, "spirv").size(), 1u);
  ASSERT_EQ(entries(cache_, "vkpipeline").size(), 1u);
  p = run_rlx(run_args(path("y2.npy"), "vulkan"), env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "1 SPIR-V from the cache, 0 compiled with glslang");
  EXPECT_FALSE(has(p.err, "pipeline cache: 0 bytes loaded")) << p.err;
  EXPECT_FALSE(has(p.err, "warning")) << p.err;
  expect_y(path("y2.npy"));

  // Damaged SPIR-V: refused, compiled again, right answer.
  const std::string spv = entries(cache_, "spirv")[0];
  std::ofstream(spv, std::ios::binary | std::ios::trunc) << "not spirv";
  p = run_rlx(run_args(path("y3.npy"), "vulkan"), env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "warning: compile cache: ignored a bad entry (" + spv);
  EXPECT_HAS(p.err, "1 compiled with glslang");
  expect_y(path("y3.npy"));

  // A pipeline cache whose header names another vendor, in an entry whose own checksum is
  // right: the header check refuses it before the driver sees it.
  const std::string vkp = entries(cache_, "vkpipeline")[0];
  std::string e = slurp(vkp);
  uint64_t klen = 0;
  std::memcpy(&klen, e.data() + 12, 8);
  const size_t payload = 20 + klen + 16;
  ASSERT_GE(e.size(), payload + 32);
  e[payload + 8] ^= 0x5a;  // vendorID
  uint64_t sum = io::hash64(e.data() + payload, e.size() - payload);
  std::memcpy(e.data() + 20 + klen + 8, &sum, 8);
  std::ofstream(vkp, std::ios::binary | std::ios::trunc) << e;
  p = run_rlx(run_args(path("y4.npy"), "vulkan"), env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "warning: compile cache: ignored a bad Vulkan pipeline cache");
  EXPECT_HAS(p.err, "another vendor or device");
  EXPECT_HAS(p.err, "pipeline cache: 0 bytes loaded");
  expect_y(path("y4.npy"));
}

}  // namespace
