// The persistent compile cache (issue 11, docs/cache.md): the on-disk store (round trip,
// every kind of corrupt entry rejected, LRU eviction), compiled plans (serialized and read
// back identically; truncated or flipped bytes never crash and are never trusted), and the
// real binary across processes: miss then hit, --no-cache / RLX_CACHE=0, a corrupt entry
// ignored with a warning and rebuilt, several processes sharing one cache at once, `rlx
// cache info|clear`, and on Vulkan the SPIR-V and pipeline cache entries. Issue 28: entries
// are authenticated (a poisoned plan or SPIR-V entry, its checksum recomputed as an attacker
// would, or an entry written under another secret, never changes a result), an unsafe cache
// directory or key file is not used. Expected outputs are computed by the test's own loops
// (or by hand), never taken from rlx; MACs the test forges are computed here with libsodium.
#include <gtest/gtest.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <random>

#include "io/blob_cache.h"
#include "io/npy.h"
#include "ir/loader.h"
#include "ir/op_registry.h"
#include "passes/passes.h"
#include "proc_util.h"
#include "scoped_env.h"
#include "runtime/compile_cache.h"
#include "runtime/session.h"

namespace {

namespace fs = std::filesystem;
using namespace rlx;
using rlx::test::ScopedEnv;
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

void spit(const std::string& p, const std::string& bytes) { std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes; }

// A fixed MAC key for the in-process stores.
const std::string kKeyA(io::kCacheKeyBytes, 'A'), kKeyB(io::kCacheKeyBytes, 'B');
const std::string kSecret = "ci-secret-0123456789abcdef", kOtherSecret = "another-secret-0123456789";

// The entry format as docs/cache.md and lib/io/blob_cache.cpp define it (format 2):
//   "RLXCACHE" | u32 format | u64 key length | key | u64 payload length | u64 checksum | MAC[32] | payload
struct Entry {
  std::string key, mac, payload;
  uint32_t format = 0;
};
Entry parse_entry(const std::string& b) {
  Entry e;
  EXPECT_GE(b.size(), 20u);
  if (b.size() < 20) return e;
  uint64_t klen = 0;
  std::memcpy(&e.format, b.data() + 8, 4);
  std::memcpy(&klen, b.data() + 12, 8);
  e.key = b.substr(20, klen);
  e.mac = b.substr(20 + klen + 16, 32);
  e.payload = b.substr(20 + klen + 16 + 32);
  return e;
}
// The entry's bytes again: the header re-formed around `e.payload`, its length and unkeyed
// checksum recomputed (what an attacker who can write the directory does), the MAC as given.
std::string form_entry(const Entry& e) {
  std::string b = "RLXCACHE";
  b.append(reinterpret_cast<const char*>(&e.format), 4);
  uint64_t klen = e.key.size(), len = e.payload.size(), sum = io::hash64(e.payload);
  b.append(reinterpret_cast<const char*>(&klen), 8);
  b += e.key;
  b.append(reinterpret_cast<const char*>(&len), 8);
  b.append(reinterpret_cast<const char*>(&sum), 8);
  b += e.mac;
  return b + e.payload;
}
std::string blake2b(const std::string& msg, const std::string& key = "") {
  unsigned char out[32];
  crypto_generichash(out, 32, reinterpret_cast<const unsigned char*>(msg.data()), msg.size(),
                     key.empty() ? nullptr : reinterpret_cast<const unsigned char*>(key.data()), key.size());
  return std::string(reinterpret_cast<char*>(out), 32);
}
std::string u64le(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
// The key RLX_CACHE_SECRET gives, and an entry's MAC under a key, as docs/cache.md specifies
// them (computed here with libsodium directly, to forge entries the header check must catch).
std::string key_from_secret(const std::string& secret) {
  return blake2b(std::string("rlx compile cache secret v1", 28) + secret);
}
std::string entry_mac(const std::string& mac_key, const std::string& kind, const Entry& e) {
  uint32_t f = 2;
  std::string m("rlx cache entry", 16);
  m.append(reinterpret_cast<const char*>(&f), 4);
  m += u64le(kind.size()) + kind + u64le(e.key.size()) + e.key + u64le(e.payload.size()) + e.payload;
  return blake2b(m, mac_key);
}
// Replaces the one occurrence of the 4 bytes of `from` in `s` by those of `to`.
template <class T>
void replace_once(std::string& s, T from, T to) {
  std::string f(reinterpret_cast<const char*>(&from), sizeof from), t(reinterpret_cast<const char*>(&to), sizeof to);
  size_t at = s.find(f);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(s.find(f, at + 1), std::string::npos) << "expected one occurrence";
  s.replace(at, f.size(), t);
}

mode_t mode_of(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
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
  io::BlobCache c(path("c"), 0, kKeyA);
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
  io::BlobCache c(path("c"), 0, kKeyA);
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
  // What an attacker without the key does: the payload edited, length and checksum recomputed.
  Entry forged = parse_entry(good);
  forged.payload[0] = 'q';
  Entry longer = parse_entry(good);
  longer.payload += "more";
  Entry old_format = parse_entry(good);  // a format-1 entry had no MAC: the header says 1
  old_format.format = 1;
  std::string bad_mac = good;
  bad_mac[good.size() - payload.size() - 1] ^= 1;  // the MAC's last byte
  for (const Case& k : std::vector<Case>{
           {"empty", "", "truncated"},
           {"header only", good.substr(0, 10), "truncated"},
           {"half", good.substr(0, good.size() / 2), "truncated"},
           {"one byte short", good.substr(0, good.size() - 1), "truncated"},
           {"padded", good + "x", "padded"},
           {"flipped payload bit", flipped, "checksum mismatch"},
           {"bad magic", bad_magic, "bad magic"},
           {"another format", bad_format, "entry format 7"},
           {"payload edited, checksum recomputed", form_entry(forged), "entry not authenticated under this key"},
           {"payload extended, checksum recomputed", form_entry(longer), "entry not authenticated under this key"},
           {"MAC bit flipped", bad_mac, "entry not authenticated under this key"},
           {"format 1 (unauthenticated)", form_entry(old_format), "entry format 1, expected 2"},
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

// An entry is valid only under the key it was written with, and only for its kind: one
// written under another key, or moved to another kind's directory, is rejected and removed.
TEST_F(BlobStore, EntriesAuthenticateUnderTheirKeyAndKind) {
  io::BlobCache a(path("c"), 0, kKeyA), b(path("c"), 0, kKeyB);
  ASSERT_TRUE(a.put("plan", "key", "payload of A"));
  auto r = b.get("plan", "key");
  EXPECT_FALSE(r.data);
  EXPECT_HAS(r.problem, "entry not authenticated under this key");
  EXPECT_FALSE(fs::exists(a.entry_path("plan", "key"))) << "removed, to be replaced";
  ASSERT_TRUE(b.put("plan", "key", "payload of B"));
  ASSERT_TRUE(b.get("plan", "key").data);
  EXPECT_EQ(*b.get("plan", "key").data, "payload of B");
  EXPECT_FALSE(a.get("plan", "key").data);
  // The same key and payload under another kind: the MAC covers the kind.
  ASSERT_TRUE(a.put("plan", "k2", "bytes"));
  fs::create_directories(fs::path(a.entry_path("spirv", "k2")).parent_path());
  fs::copy_file(a.entry_path("plan", "k2"), a.entry_path("spirv", "k2"));
  r = a.get("spirv", "k2");
  EXPECT_FALSE(r.data);
  EXPECT_HAS(r.problem, "entry not authenticated under this key");
  // The MAC the test computes independently (libsodium's keyed BLAKE2b over the documented
  // message) is the one in the file.
  Entry e = parse_entry(slurp(a.entry_path("plan", "k2")));
  EXPECT_EQ(e.payload, "bytes");
  EXPECT_EQ(e.mac, entry_mac(kKeyA, "plan", e));
  EXPECT_NE(e.mac, entry_mac(kKeyB, "plan", e));
}

// Without a key (none could be had) nothing is read or written.
TEST_F(BlobStore, NoKeyNoCache) {
  io::BlobCache keyed(path("c"), 0, kKeyA), none(path("c"), 0, "");
  ASSERT_TRUE(keyed.put("plan", "k", "v"));
  EXPECT_FALSE(none.get("plan", "k").data);
  std::string err;
  EXPECT_FALSE(none.put("plan", "k2", "v", &err));
  EXPECT_HAS(err, "no key");
  EXPECT_TRUE(keyed.get("plan", "k").data) << "left alone";
}

// The key: RLX_CACHE_SECRET hashed (>= 16 bytes), else the per-user key file, made on first
// use (32 bytes, mode 0600, in a 0700 directory) and refused when others could read or swap it.
TEST_F(BlobStore, KeyFromSecretOrKeyFile) {
  ScopedEnv env;
  env.set("RLX_CACHE_SECRET", nullptr);
  env.set("XDG_CONFIG_HOME", path("config").c_str());
  env.set("HOME", path("home").c_str());
  const std::string file = path("config/rlx/cache.key");
  EXPECT_EQ(io::cache_key_path(), file);
  std::string source, why;
  bool not_made_yet = false;
  EXPECT_EQ(io::cache_mac_key(false, &source, &why, &not_made_yet), "") << "not created when asked not to";
  EXPECT_TRUE(not_made_yet);
  EXPECT_FALSE(fs::exists(file));
  const std::string k1 = io::cache_mac_key(true, &source, &why);
  ASSERT_EQ(k1.size(), 32u) << why;
  EXPECT_EQ(source, file);
  EXPECT_EQ(slurp(file), k1);
  EXPECT_EQ(mode_of(file), 0600u);
  EXPECT_EQ(mode_of(path("config/rlx")), 0700u);
  EXPECT_EQ(io::cache_mac_key(true, &source, &why), k1) << "the same key next time";
  EXPECT_NE(k1, std::string(32, '\0'));
  struct Bad {
    std::string name;
    std::function<void()> make;
    std::string phrase;
  };
  for (const Bad& b : std::vector<Bad>{
           {"mode 0644", [&] { fs::permissions(file, fs::perms(0644)); }, "mode 0644"},
           {"mode 0640", [&] { fs::permissions(file, fs::perms(0640)); }, "mode 0640"},
           {"short", [&] { spit(file, "0123456789"); }, "10 bytes, expected 32"},
           {"a symbolic link", [&] { fs::remove(file); spit(path("elsewhere"), k1); fs::create_symlink(path("elsewhere"), file); },
            "symbolic link"},
           {"a directory", [&] { fs::remove(file); fs::create_directory(file); }, "not a regular file"},
       }) {
    SCOPED_TRACE(b.name);
    fs::remove_all(file);
    spit(file, k1);
    fs::permissions(file, fs::perms(0600));
    b.make();
    why.clear();
    EXPECT_EQ(io::cache_mac_key(true, &source, &why), "");
    EXPECT_HAS(why, "not using the key file " + file);
    EXPECT_HAS(why, b.phrase);
  }
  fs::remove_all(file);
  spit(file, k1);
  fs::permissions(file, fs::perms(0600));
  if (::geteuid() == 0) {  // as root: a key file another user owns is not ours
    ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);
    EXPECT_EQ(io::cache_mac_key(true, &source, &why), "");
    EXPECT_HAS(why, "owned by uid 65534");
    ASSERT_EQ(::chown(file.c_str(), 0, 0), 0);
  }
  // Removed: a new, different key is made.
  fs::remove(file);
  const std::string k2 = io::cache_mac_key(true, &source, &why);
  ASSERT_EQ(k2.size(), 32u) << why;
  EXPECT_NE(k2, k1);

  // RLX_CACHE_SECRET: the key is BLAKE2b-256 of a label and the secret; the key file is not used.
  env.set("RLX_CACHE_SECRET", kSecret.c_str());
  EXPECT_EQ(io::cache_mac_key(true, &source, &why), key_from_secret(kSecret));
  EXPECT_EQ(source, "RLX_CACHE_SECRET");
  env.set("RLX_CACHE_SECRET", kOtherSecret.c_str());
  EXPECT_EQ(io::cache_mac_key(true, &source, &why), key_from_secret(kOtherSecret));
  EXPECT_NE(key_from_secret(kSecret), key_from_secret(kOtherSecret));
  env.set("RLX_CACHE_SECRET", "fifteen-bytes!!");
  EXPECT_EQ(io::cache_mac_key(true, &source, &why), "");
  EXPECT_HAS(why, "RLX_CACHE_SECRET is 15 bytes; it must be at least 16");
  env.set("RLX_CACHE_SECRET", "sixteen-bytes!!!");
  EXPECT_EQ(io::cache_mac_key(true, &source, &why), key_from_secret("sixteen-bytes!!!"));
}

// The directory checks, as ssh's: the cache's own directories must be this user's (or
// root's) and not writable by group or others; parents too, unless sticky (like /tmp).
TEST_F(BlobStore, UnsafeDirectories) {
  const std::string c = path("c");
  EXPECT_EQ(io::unsafe_cache_dir(c), "") << "not there yet: made 0700";
  io::BlobCache store(c, 0, kKeyA);
  ASSERT_TRUE(store.put("plan", "k", "v"));
  EXPECT_EQ(mode_of(c), 0700u);
  EXPECT_EQ(mode_of(c + "/v1/plan"), 0700u);
  EXPECT_EQ(io::unsafe_cache_dir(c), "");
  EXPECT_EQ(io::unsafe_cache_dir(c + "/not/yet"), "");
  fs::permissions(c, fs::perms(0777));
  EXPECT_HAS(io::unsafe_cache_dir(c), c + " is writable by group or others (mode 0777)");
  EXPECT_HAS(io::unsafe_cache_dir(c), "chmod go-w " + c);
  EXPECT_HAS(io::unsafe_cache_dir(c), "RLX_CACHE_SECRET");
  fs::permissions(c, fs::perms(0770));
  EXPECT_HAS(io::unsafe_cache_dir(c), "(mode 0770)");
  fs::permissions(c, fs::perms(01777));
  EXPECT_HAS(io::unsafe_cache_dir(c), "(mode 1777)") << "sticky is not enough for the cache itself";
  fs::permissions(c, fs::perms(0755));
  EXPECT_EQ(io::unsafe_cache_dir(c), "") << "readable by others is fine";
  fs::permissions(c + "/v1/plan", fs::perms(0777));
  EXPECT_HAS(io::unsafe_cache_dir(c), c + "/v1/plan is writable by group or others");
  fs::permissions(c + "/v1/plan", fs::perms(0700));
  // A parent writable by others: unsafe (they could swap the cache); sticky, as /tmp: fine.
  fs::create_directories(path("p/q"));
  fs::permissions(path("p"), fs::perms(0777));
  EXPECT_HAS(io::unsafe_cache_dir(path("p/q/cache")), path("p") + " is writable by group or others (mode 0777)");
  fs::permissions(path("p"), fs::perms(01777));
  EXPECT_EQ(io::unsafe_cache_dir(path("p/q/cache")), "");
  // A symbolic link is followed: what counts is where the cache really is.
  fs::create_directory_symlink(c, path("link"));
  fs::permissions(c, fs::perms(0777));
  EXPECT_HAS(io::unsafe_cache_dir(path("link")), "is writable by group or others");
  fs::permissions(c, fs::perms(0700));
  if (::geteuid() != 0) GTEST_SKIP() << "the other-owner cases need root (chown)";
  ASSERT_EQ(::chown(c.c_str(), 65534, 65534), 0);
  EXPECT_HAS(io::unsafe_cache_dir(c), c + " is owned by uid 65534, not by you (uid 0)");
  ASSERT_EQ(::chown(c.c_str(), 0, 0), 0);
  ASSERT_EQ(::chown(path("p").c_str(), 65534, 65534), 0);
  fs::permissions(path("p"), fs::perms(0755));
  EXPECT_HAS(io::unsafe_cache_dir(path("p/q/cache")), path("p") + " is owned by uid 65534");
}

// Over the size limit, the least recently used entries go (a read counts as a use).
TEST_F(BlobStore, EvictsLeastRecentlyUsed) {
  const std::string blob(10000, 'b');
  io::BlobCache c(path("c"), 35000, kKeyA);  // room for 3 entries of ~10 KB
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
  io::set_active_cache(std::make_unique<io::BlobCache>(path("c"), 0, kKeyA));
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
    // The key file in the test's own directory, never the user's.
    o.env = {{"RLX_CACHE_DIR", cache_}, {"XDG_CONFIG_HOME", path("config")}};
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
// and what they leave is one valid entry (a later process hits it) and no temporaries. With
// the per-user key, they also race to make the key file and must agree on one key; under
// one RLX_CACHE_SECRET (a CI cache), the same.
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
  // One key file, and nothing else, in the key's directory.
  std::vector<std::string> keydir;
  for (const auto& e : fs::directory_iterator(path("config/rlx"))) keydir.push_back(e.path().filename().string());
  EXPECT_EQ(keydir, std::vector<std::string>{"cache.key"});
  Proc p = run_rlx(run_args(path("y.npy")), env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "compile cache: hit");
  EXPECT_FALSE(has(p.err, "warning")) << p.err;
}

TEST_F(CacheCli, ConcurrentProcessesShareOneCacheUnderOneSecret) {
  const int n = 6;
  std::vector<std::unique_ptr<Child>> kids;
  for (int k = 0; k < n; ++k)
    kids.push_back(std::make_unique<Child>(run_args(path("y" + std::to_string(k) + ".npy")), env({{"RLX_CACHE_SECRET", kSecret}})));
  for (int k = 0; k < n; ++k) {
    Proc p = kids[k]->wait();
    ASSERT_EQ(p.code, 0) << show(p);
    EXPECT_FALSE(has(p.err, "warning")) << p.err;
    expect_y(path("y" + std::to_string(k) + ".npy"));
  }
  EXPECT_EQ(entries(cache_, "plan").size(), 1u);
  EXPECT_FALSE(fs::exists(path("config"))) << "with RLX_CACHE_SECRET no key file is made";
  // Another "job" with the same secret hits; one with another secret does not trust it.
  Proc p = run_rlx(run_args(path("y.npy")), env({{"RLX_CACHE_SECRET", kSecret}}));
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "compile cache: hit");
  EXPECT_FALSE(has(p.err, "warning")) << p.err;
  p = run_rlx(run_args(path("y2.npy")), env({{"RLX_CACHE_SECRET", kOtherSecret}}));
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "entry not authenticated under this key");
  expect_y(path("y2.npy"));
}

// y = x + c*d with c = 1234.5 and d = 2: compiled mode folds c*d into one constant, 2469.
const char* kFoldGraph = R"({"format": "rlx.graph", "version": 1, "name": "folded",
  "nodes": [{"id": "x", "op": "input", "shape": [4]},
            {"id": "c", "op": "constant", "shape": [], "value": 1234.5},
            {"id": "d", "op": "constant", "shape": [], "value": 2.0},
            {"id": "cd", "op": "mul", "inputs": ["c", "d"]},
            {"id": "y", "op": "add", "inputs": ["x", "cd"]}],
  "outputs": ["y"]})";

// Issue 28's reproduction: the plan entry edited (the folded constant 2469 replaced by
// -1000) and its unkeyed checksum recomputed. The next run must not use it: the right values
// (1 + 2469 = 2470, ...), exit 0, and the entry reported as not authenticated and rewritten.
TEST_F(CacheCli, PoisonedPlanEntryNeverChangesAResult) {
  std::ofstream(path("fold.json")) << kFoldGraph;
  auto run = [&](const std::string& out) {
    return run_rlx({"run", path("fold.json"), "--input", "x=4xf32=1,2,3,4", "--mode", "compiled", "-v", "--output", "y=" + out},
                   env());
  };
  auto expect_fold_y = [&](const std::string& npy) {
    Tensor t = io::read_npy(npy);
    ASSERT_EQ(t.shape(), (Shape{4}));
    const float want[4] = {2470, 2471, 2472, 2473};  // x + 1234.5 * 2, by hand
    for (int i = 0; i < 4; ++i) EXPECT_EQ(t.data()[i], want[i]) << i;
  };
  Proc p = run(path("y1.npy"));
  ASSERT_EQ(p.code, 0) << show(p);
  expect_fold_y(path("y1.npy"));
  auto files = entries(cache_, "plan");
  ASSERT_EQ(files.size(), 1u);
  const std::string good = slurp(files[0]);
  Entry e = parse_entry(good);
  replace_once(e.payload, 2469.0f, -1000.0f);  // the folded constant, as the attacker found it
  spit(files[0], form_entry(e));
  p = run(path("y2.npy"));
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_FALSE(has(p.err, "checksum mismatch")) << "the forged checksum is right; only the MAC can tell:\n" << p.err;
  EXPECT_HAS(p.err, "warning: compile cache: ignored a bad entry (" + files[0]);
  EXPECT_HAS(p.err, "entry not authenticated under this key");
  EXPECT_HAS(p.err, "compile cache: miss");
  EXPECT_FALSE(has(p.err, "compile cache: hit")) << p.err;
  expect_fold_y(path("y2.npy"));
  EXPECT_EQ(slurp(files[0]), good) << "replaced by the entry this run computed";
  p = run(path("y3.npy"));
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "compile cache: hit");
  expect_fold_y(path("y3.npy"));

  // A whole entry copied from a cache written under another secret (another job's): rejected
  // the same way. Same graph, so the same file name in both caches.
  const std::string other = path("other-cache");
  auto other_env = env({{"RLX_CACHE_DIR", other}, {"RLX_CACHE_SECRET", kOtherSecret}});
  ASSERT_EQ(run_rlx({"run", path("fold.json"), "--input", "x=4xf32=1,2,3,4", "--mode", "compiled"}, other_env).code, 0);
  auto theirs = entries(other, "plan");
  ASSERT_EQ(theirs.size(), 1u);
  ASSERT_EQ(fs::path(theirs[0]).filename(), fs::path(files[0]).filename());
  fs::copy_file(theirs[0], files[0], fs::copy_options::overwrite_existing);
  p = run(path("y4.npy"));
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "entry not authenticated under this key");
  EXPECT_FALSE(has(p.err, "compile cache: hit")) << p.err;
  expect_fold_y(path("y4.npy"));
}

// A cache directory others can write, or another user's, is not used (one warning line that
// names it and the fix); the run is right and exits 0. RLX_CACHE_SECRET makes it usable.
TEST_F(CacheCli, UnsafeCacheDirectoryIsNotUsed) {
  fs::create_directory(cache_);
  fs::permissions(cache_, fs::perms(0777));
  Proc p = run_rlx(run_args(path("y.npy")), env());
  ASSERT_EQ(p.code, 0) << show(p);
  expect_y(path("y.npy"));
  EXPECT_HAS(p.err, "warning: compile cache: not using " + cache_ + ": " + cache_ +
                        " is writable by group or others (mode 0777); fix with 'chmod go-w " + cache_ + "'");
  size_t warnings = 0;
  for (size_t at = p.err.find("warning"); at != std::string::npos; at = p.err.find("warning", at + 1)) ++warnings;
  EXPECT_EQ(warnings, 1u) << "said once:\n" << p.err;
  EXPECT_FALSE(fs::exists(cache_ + "/v1")) << "nothing written";
  EXPECT_FALSE(fs::exists(path("config"))) << "no key made for a cache that is not used";
  p = run_rlx({"cache", "info"}, env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.out, "(off: not used: " + cache_ + " is writable by group or others");
  p = run_rlx({"cache", "clear"}, env());
  EXPECT_EQ(p.code, 2) << show(p);
  EXPECT_HAS(p.err, "not touching " + cache_);
  // Shared under a secret: used, and the entries are authenticated by it.
  for (int round = 0; round < 2; ++round) {
    p = run_rlx(run_args(path("y.npy")), env({{"RLX_CACHE_SECRET", kSecret}}));
    ASSERT_EQ(p.code, 0) << show(p);
    EXPECT_FALSE(has(p.err, "warning")) << p.err;
    EXPECT_HAS(p.err, round == 0 ? "compile cache: miss" : "compile cache: hit");
    expect_y(path("y.npy"));
  }
  if (::geteuid() != 0) GTEST_SKIP() << "the other-owner case needs root (chown)";
  fs::remove_all(cache_);
  fs::create_directory(cache_);
  fs::permissions(cache_, fs::perms(0755));
  ASSERT_EQ(::chown(cache_.c_str(), 65534, 65534), 0);
  p = run_rlx(run_args(path("y2.npy")), env());
  ASSERT_EQ(p.code, 0) << show(p);
  expect_y(path("y2.npy"));
  EXPECT_HAS(p.err, "warning: compile cache: not using " + cache_ + ": " + cache_ + " is owned by uid 65534, not by you");
  EXPECT_FALSE(fs::exists(cache_ + "/v1")) << "nothing written";
}

// The key file: made 0600 on first use; with mode 0644 it is not used (a warning, the run
// goes on without the cache); a too-short RLX_CACHE_SECRET likewise.
TEST_F(CacheCli, KeyFileOthersCanReadIsNotUsed) {
  ASSERT_EQ(run_rlx(run_args(path("y.npy")), env()).code, 0);
  const std::string key = path("config/rlx/cache.key");
  ASSERT_TRUE(fs::exists(key));
  EXPECT_EQ(mode_of(key), 0600u);
  EXPECT_EQ(fs::file_size(key), 32u);
  fs::permissions(key, fs::perms(0644));
  Proc p = run_rlx(run_args(path("y2.npy")), env());
  ASSERT_EQ(p.code, 0) << show(p);
  expect_y(path("y2.npy"));
  EXPECT_HAS(p.err, "warning: compile cache: not using the key file " + key + ": mode 0644");
  EXPECT_FALSE(has(p.err, "compile cache: hit")) << p.err;
  p = run_rlx({"cache", "info"}, env());
  EXPECT_HAS(p.out, "(off: not using the key file " + key);
  fs::permissions(key, fs::perms(0600));
  p = run_rlx(run_args(path("y3.npy")), env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "compile cache: hit");
  p = run_rlx(run_args(path("y4.npy")), env({{"RLX_CACHE_SECRET", "short"}}));
  ASSERT_EQ(p.code, 0) << show(p);
  expect_y(path("y4.npy"));
  EXPECT_HAS(p.err, "warning: compile cache: RLX_CACHE_SECRET is 5 bytes; it must be at least 16");
  EXPECT_FALSE(has(p.err, "compile cache: hit")) << p.err;
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
// refused with a warning (a pipeline cache of another device by its header). Under a shared
// secret, so that the test can forge entries whose MAC is right and check what comes after.
TEST_F(CacheCli, VulkanSpirvAndPipelineCache) {
  if (!vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  const auto o = env({{"RLX_CACHE_SECRET", kSecret}});
  const std::string mac_key = key_from_secret(kSecret);
  Proc p = run_rlx(run_args(path("y.npy"), "vulkan"), o);
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "0 SPIR-V from the cache, 1 compiled with glslang");
  expect_y(path("y.npy"));
  ASSERT_EQ(entries(cache_, "spirv").size(), 1u);
  ASSERT_EQ(entries(cache_, "vkpipeline").size(), 1u);
  p = run_rlx(run_args(path("y2.npy"), "vulkan"), o);
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "1 SPIR-V from the cache, 0 compiled with glslang");
  EXPECT_FALSE(has(p.err, "pipeline cache: 0 bytes loaded")) << p.err;
  EXPECT_FALSE(has(p.err, "warning")) << p.err;
  expect_y(path("y2.npy"));

  // Damaged SPIR-V: refused, compiled again, right answer.
  const std::string spv = entries(cache_, "spirv")[0];
  const std::string good_spv = slurp(spv);
  spit(spv, "not spirv");
  p = run_rlx(run_args(path("y3.npy"), "vulkan"), o);
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "warning: compile cache: ignored a bad entry (" + spv);
  EXPECT_HAS(p.err, "1 compiled with glslang");
  expect_y(path("y3.npy"));

  // An authenticated entry (its MAC right under the secret) that is not valid SPIR-V: the
  // validator refuses it before the driver sees it.
  Entry e = parse_entry(good_spv);
  ASSERT_GE(e.payload.size(), 40u);
  for (size_t i = 20; i < e.payload.size(); ++i) e.payload[i] = (char)0xff;  // header kept, body garbage
  e.mac = entry_mac(mac_key, "spirv", e);
  spit(spv, form_entry(e));
  p = run_rlx(run_args(path("y3b.npy"), "vulkan"), o);
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "warning: compile cache: ignored a bad entry (" + spv + ": invalid SPIR-V");
  EXPECT_HAS(p.err, "1 compiled with glslang");
  expect_y(path("y3b.npy"));

  // A pipeline cache whose header names another vendor, in an entry whose checksum and MAC
  // are right: the header check refuses it before the driver sees it.
  const std::string vkp = entries(cache_, "vkpipeline")[0];
  e = parse_entry(slurp(vkp));
  ASSERT_GE(e.payload.size(), 32u);
  e.payload[8] ^= 0x5a;  // vendorID
  e.mac = entry_mac(mac_key, "vkpipeline", e);
  spit(vkp, form_entry(e));
  p = run_rlx(run_args(path("y4.npy"), "vulkan"), o);
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "warning: compile cache: ignored a bad Vulkan pipeline cache");
  EXPECT_HAS(p.err, "another vendor or device");
  EXPECT_HAS(p.err, "pipeline cache: 0 bytes loaded");
  expect_y(path("y4.npy"));
  // The same without the MAC (checksum recomputed only): refused by the MAC first.
  e.mac = std::string(32, '\0');
  spit(vkp, form_entry(e));
  p = run_rlx(run_args(path("y5.npy"), "vulkan"), o);
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_HAS(p.err, "entry not authenticated under this key");
  EXPECT_HAS(p.err, "pipeline cache: 0 bytes loaded");
  expect_y(path("y5.npy"));
}

// A poisoned SPIR-V entry: the fused kernel's constant 3 (in (3x + 1) * x) replaced by 5 in
// the SPIR-V, which stays valid SPIR-V, and the checksum recomputed. Only the MAC can tell;
// the kernel is compiled again and the values are the test's own.
TEST_F(CacheCli, PoisonedSpirvEntryNeverChangesAResult) {
  if (!vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  ASSERT_EQ(run_rlx(run_args(path("y.npy"), "vulkan"), env()).code, 0);
  auto files = entries(cache_, "spirv");
  ASSERT_EQ(files.size(), 1u);
  const std::string good = slurp(files[0]);
  Entry e = parse_entry(good);
  replace_once(e.payload, 3.0f, 5.0f);  // OpConstant %float 3
  spit(files[0], form_entry(e));
  Proc p = run_rlx(run_args(path("y2.npy"), "vulkan"), env());
  ASSERT_EQ(p.code, 0) << show(p);
  EXPECT_FALSE(has(p.err, "checksum mismatch")) << p.err;
  EXPECT_HAS(p.err, "warning: compile cache: ignored a bad entry (" + files[0]);
  EXPECT_HAS(p.err, "entry not authenticated under this key");
  EXPECT_HAS(p.err, "0 SPIR-V from the cache, 1 compiled with glslang");
  expect_y(path("y2.npy"));
  EXPECT_EQ(slurp(files[0]), good) << "replaced by what glslang made";
}

}  // namespace
