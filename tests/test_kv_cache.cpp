// The capacity KV cache of rlx generate (lib/runtime/kv_cache.h): the cache's writes and growth
// against a plain model of it, the step graph rewrite, and Session::input_bytes_changed (a row
// written into an input the plan already holds) in every mode against a plain loop.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "ir/loader.h"
#include "runtime/executor.h"
#include "runtime/kv_cache.h"
#include "runtime/session.h"

using namespace rlx;

namespace {

std::shared_ptr<ir::Graph> graph_text(const std::string& nodes, const std::string& outputs) {
  return std::make_shared<ir::Graph>(ir::load_graph_text(
      R"({"format": "rlx.graph", "version": 1, "nodes": [)" + nodes + R"(], "outputs": )" + outputs + "}", "t.json"));
}

// rows [1, heads, t, dim] whose values name (step, head, row, column)
Tensor rows(int64_t heads, int64_t t, int64_t dim, int step) {
  Tensor r(Shape{1, heads, t, dim});
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < t; ++i)
      for (int64_t d = 0; d < dim; ++d) r.mutable_data()[(h * t + i) * dim + d] = step * 1000.f + h * 100.f + i * 10.f + d;
  return r;
}

}  // namespace

TEST(KvCache, CapacityIsAPowerOfTwoOfAtLeast64) {
  EXPECT_EQ(KvCache::capacity_for(1), 64);
  EXPECT_EQ(KvCache::capacity_for(64), 64);
  EXPECT_EQ(KvCache::capacity_for(65), 128);
  EXPECT_EQ(KvCache::capacity_for(513), 1024);
}

TEST(KvCache, WritesRowsAtTheLengthAndKeepsThemThroughGrowth) {
  const int64_t H = 2, D = 3;
  KvCache kv({H}, {D}, {DType::f32}, 4);
  // the plain model: per head, the rows in order
  std::vector<std::vector<std::vector<float>>> want(H);
  int step = 0;
  auto append = [&](int64_t t) {
    Tensor r = rows(H, t, D, ++step);
    if (kv.length() + t > kv.capacity()) kv.grow(2 * kv.capacity());
    auto ranges = kv.write(0, r);
    ASSERT_EQ(ranges.size(), (size_t)H);
    for (int64_t h = 0; h < H; ++h) {
      EXPECT_EQ(ranges[h].first, (size_t)((h * kv.capacity() + kv.length()) * D * 4));
      EXPECT_EQ(ranges[h].second, (size_t)(t * D * 4));
      for (int64_t i = 0; i < t; ++i) {
        std::vector<float> row;
        for (int64_t d = 0; d < D; ++d) row.push_back(r.data()[(h * t + i) * D + d]);
        want[h].push_back(row);
      }
    }
    kv.advance(t);
  };
  append(3);
  for (int k = 0; k < 7; ++k) append(1);  // grows 4 -> 8 -> 16
  EXPECT_EQ(kv.length(), 10);
  EXPECT_EQ(kv.capacity(), 16);
  const Tensor& c = kv.tensor(0);
  ASSERT_EQ(c.shape(), (Shape{1, H, 16, D}));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < 16; ++i)
      for (int64_t d = 0; d < D; ++d)
        EXPECT_EQ(c.data()[(h * 16 + i) * D + d], i < 10 ? want[h][i][d] : 0.f) << "head " << h << " slot " << i << " column " << d;
  Tensor v = kv.valid(0);
  ASSERT_EQ(v.shape(), (Shape{1, H, 10, D}));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < 10; ++i)
      for (int64_t d = 0; d < D; ++d) EXPECT_EQ(v.data()[(h * 10 + i) * D + d], want[h][i][d]);
  EXPECT_THROW(kv.write(0, rows(H, 1, D + 1, 0)), RuntimeError);  // wrong head_dim
  EXPECT_THROW(kv.write(0, rows(H, 7, D, 0)), RuntimeError);      // beyond the capacity
}

TEST(KvCache, StepGraphOutputsTheNewRowsInPlaceOfPresent) {
  auto g = graph_text(R"({"id": "past", "op": "input", "shape": [1, 2, 4, 3]},
      {"id": "x", "op": "input", "shape": [1, 2, 1, 3]},
      {"id": "new", "op": "mul", "inputs": ["x", "x"]},
      {"id": "present", "op": "concat", "inputs": ["past", "new"], "attrs": {"axis": 2}},
      {"id": "y", "op": "sum", "inputs": ["present"], "attrs": {"axes": [2]}})",
                      R"(["y", "present"])");
  CapacityGraph cg = capacity_step_graph(*g, {"past"}, {"present"});
  ASSERT_TRUE(cg.graph) << cg.why_not;
  ASSERT_EQ(cg.new_rows, std::vector<int>{1});
  EXPECT_EQ(cg.graph->nodes[cg.graph->outputs[1]].id, "new");
  EXPECT_EQ(cg.graph->nodes[cg.graph->outputs[0]].id, "y");
  // present along another axis, or not from the past input: refused, saying which output
  auto h = graph_text(R"({"id": "past", "op": "input", "shape": [1, 2, 4, 3]},
      {"id": "x", "op": "input", "shape": [1, 2, 4, 1]},
      {"id": "present", "op": "concat", "inputs": ["past", "x"], "attrs": {"axis": 3}})",
                      R"(["present"])");
  CapacityGraph bad = capacity_step_graph(*h, {"past"}, {"present"});
  EXPECT_FALSE(bad.graph);
  EXPECT_NE(bad.why_not.find("'present'"), std::string::npos) << bad.why_not;
  EXPECT_FALSE(capacity_step_graph(*g, {"x"}, {"present"}).graph);
}

TEST(KvCache, ChangedInputBytesReachTheNextRunInEveryMode) {
  auto g = graph_text(R"({"id": "c", "op": "input", "shape": [1, 2, 8, 3]},
      {"id": "two", "op": "constant", "shape": [], "value": 2.0},
      {"id": "y", "op": "mul", "inputs": ["c", "two"]})",
                      R"(["y"])");
  std::vector<std::string> backends{"cpu"};
  try {
    make_executor("vulkan");
    backends.push_back("vulkan");
  } catch (const std::exception&) {
  }
  for (const auto& backend : backends)
    for (Mode mode : {Mode::Eager, Mode::Lazy, Mode::Compiled})
      for (bool in_place : {false, true}) {
      SCOPED_TRACE(backend + " " + mode_name(mode) + (in_place ? " read in place" : ""));
      auto ex = make_executor(backend);
      SessionOptions so;
      so.inputs_constant = true;
      if (in_place) so.in_place_inputs = {"c"};  // the CPU's plans read the cache tensor itself
      Session s(g, *ex, {}, so);
      KvCache kv({2}, {3}, {DType::f32}, 8);
      s.set_input("c", kv.tensor(0));
      for (int step = 1; step <= 5; ++step) {
        for (const auto& [at, bytes] : kv.write(0, rows(2, 1, 3, step))) s.input_bytes_changed("c", kv.tensor(0), at, bytes);
        kv.advance(1);
        std::vector<Tensor> out = s.run(mode);
        ASSERT_EQ(out[0].shape(), (Shape{1, 2, 8, 3}));
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t i = 0; i < 8; ++i)
            for (int64_t d = 0; d < 3; ++d) {
              const float want = i < step ? 2.f * ((i + 1) * 1000.f + h * 100.f + d) : 0.f;
              ASSERT_EQ(out[0].to_f32().data()[(h * 8 + i) * 3 + d], want) << "step " << step << " head " << h << " slot " << i;
            }
      }
      // a tensor of other storage is set anew, not patched (refused where a plan reads the
      // first one in place: the CPU's compiled plan; lazy plans each run and reads the new one)
      Tensor other = kv.tensor(0).astype(DType::f32);
      Tensor copy(other.shape());
      std::copy(other.data(), other.data() + other.numel(), copy.mutable_data());
      copy.mutable_data()[0] = 7.f;
      s.input_bytes_changed("c", copy, 0, 4);
      if (in_place && backend == "cpu" && mode == Mode::Compiled)
        EXPECT_THROW(s.run(mode), RuntimeError);
      else
        EXPECT_EQ(s.run(mode)[0].to_f32().data()[0], 14.f);
    }
}

TEST(KvCache, SpareSlotLayoutKeepsRowsThroughGrowthAndRelayout) {
  // capacity C + 1 slots per head (the last the plan's append slot); rows at [0, length)
  const int64_t H = 2, D = 3;
  KvCache kv({H}, {D}, {DType::f32}, 4, /*spare_slot=*/true);
  ASSERT_EQ(kv.storage(0).shape(), (Shape{1, H, 5, D}));
  ASSERT_EQ(kv.tensor(0).shape(), (Shape{1, H, 4, D}));
  EXPECT_EQ(kv.tensor(0).raw(), kv.storage(0).raw());  // a view over the same bytes
  std::vector<std::vector<float>> want(H);  // per head, the rows' values in order
  for (int step = 1; step <= 9; ++step) {
    if (kv.length() + 1 > kv.capacity()) kv.grow(2 * kv.capacity());
    Tensor r = rows(H, 1, D, step);
    auto ranges = kv.write(0, r);
    for (int64_t h = 0; h < H; ++h) {
      EXPECT_EQ(ranges[h].first, (size_t)((h * (kv.capacity() + 1) + kv.length()) * D * 4)) << "step " << step;
      for (int64_t d = 0; d < D; ++d) want[h].push_back(r.data()[h * D + d]);
    }
    kv.advance(1);
  }
  ASSERT_EQ(kv.capacity(), 16);
  auto check = [&](int64_t stride) {
    const float* c = static_cast<const float*>(kv.storage(0).raw());
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < stride; ++i)
        for (int64_t d = 0; d < D; ++d)
          ASSERT_EQ(c[(h * stride + i) * D + d], i < 9 ? want[h][i * D + d] : 0.f) << "head " << h << " slot " << i;
    Tensor v = kv.valid(0);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < 9 * D; ++i) ASSERT_EQ(v.data()[h * 9 * D + i], want[h][i]);
  };
  check(17);
  kv.relayout(16, false);  // a plan that reads the past as it is: no spare slot
  EXPECT_FALSE(kv.spare_slot());
  ASSERT_EQ(kv.tensor(0).shape(), (Shape{1, H, 16, D}));
  check(16);
  EXPECT_EQ(kv.held_bytes(), H * 9 * D * 4);
}

// The backends built here: the CPU, and Vulkan where a device answers (the sanitizer build has none).
std::vector<std::string> backends_here() {
  std::vector<std::string> backends{"cpu"};
  try {
    make_executor("vulkan");
    backends.push_back("vulkan");
  } catch (const std::exception&) {
  }
  return backends;
}

// Session::set_append_storage: concat(past, new) written into the cache's storage (host pages
// on the CPU, device buffers on Vulkan), in every mode, against a plain loop; the past is
// neither uploaded nor copied (RunStats' counter); the new rows then move to slot `length`
// (commit_appended: a memcpy on the host, Executor::copy_ranges on the device) and valid() reads the
// plain loop's rows back.
TEST(KvCache, ConcatAppendsIntoTheCallersStorageInEveryMode) {
  const int64_t H = 2, C = 6, D = 3;
  auto g = graph_text(R"({"id": "past", "op": "input", "shape": [1, 2, 6, 3]},
      {"id": "x", "op": "input", "shape": [1, 2, 1, 3]},
      {"id": "new", "op": "mul", "inputs": ["x", "x"]},
      {"id": "present", "op": "concat", "inputs": ["past", "new"], "attrs": {"axis": 2}},
      {"id": "two", "op": "constant", "shape": [], "value": 2.0},
      {"id": "y", "op": "mul", "inputs": ["present", "two"]},
      {"id": "s", "op": "sum", "inputs": ["present"], "attrs": {"axes": [2]}})",
                      R"(["y", "s", "new"])");
  for (const auto& backend : backends_here())
  for (Mode mode : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {
    SCOPED_TRACE(backend + " " + mode_name(mode));
    auto ex = make_executor(backend);
    ASSERT_TRUE(ex->appends_in_place());
    SessionOptions so;
    so.inputs_constant = true;
    Session s(g, *ex, {}, so);
    KvCache kv({H}, {D}, {DType::f32}, C, /*spare_slot=*/true, ex.get());
    EXPECT_EQ(kv.on_device(), backend == "vulkan");  // Vulkan cannot use the host pages in place
    s.set_append_storage("past", kv.append_storage(0));
    EXPECT_THROW(s.set_input("past", Tensor(Shape{1, H, C, D})), RuntimeError);  // it takes no other value
    std::vector<std::vector<float>> held(H);  // the plain loop: per head, the rows held
    for (int step = 1; step <= 4; ++step) {
      Tensor x = rows(H, 1, D, step);
      s.set_input("x", x);
      std::vector<Tensor> out = s.run(mode);
      EXPECT_EQ(s.last_stats().appends_in_place, 1);
      EXPECT_EQ(s.last_stats().input_copy_bytes, H * D * 4)
          << "only x is uploaded: the past is read where it is";
      const Tensor y = out[0].to_f32(), sum = out[1].to_f32();
      ASSERT_EQ(y.shape(), (Shape{1, H, C + 1, D}));
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          double want_sum = 0;
          for (int64_t i = 0; i <= C; ++i) {
            const float xv = x.data()[h * D + d];
            const float want = i == C ? xv * xv : i < (int64_t)held[h].size() / D ? held[h][i * D + d] : 0.f;
            ASSERT_EQ(y.data()[(h * (C + 1) + i) * D + d], 2 * want) << "step " << step << " head " << h << " slot " << i;
            want_sum += want;
          }
          ASSERT_NEAR(sum.data()[h * D + d], want_sum, 1e-6 * want_sum + 1e-3);  // f32 sums of values near 1e7
          if (!kv.on_device()) {  // the concat wrote the new rows into the storage's spare slot
            ASSERT_EQ(static_cast<const float*>(kv.storage(0).raw())[(h * (C + 1) + C) * D + d], x.data()[h * D + d] * x.data()[h * D + d]);
          }
        }
      EXPECT_EQ(kv.commit_appended(), H * D * 4);  // one row per head moved to slot `length`
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) held[h].push_back(x.data()[h * D + d] * x.data()[h * D + d]);
      const Tensor v = kv.valid(0).to_f32();
      ASSERT_EQ(v.shape(), (Shape{1, H, step, D}));
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < step * D; ++i) ASSERT_EQ(v.data()[h * step * D + i], held[h][i]) << "step " << step << " head " << h;
    }
  }
  auto ex = make_executor("cpu");
  // storage of another shape, or a past read other than by its concat: refused
  Session s(g, *ex, {}, {});
  KvCache kv({H}, {D}, {DType::f32}, C, true, ex.get());
  Session::AppendStorage view = kv.append_storage(0);
  view.shape = view.input_shape;  // the past's shape, not the concat's
  s.set_append_storage("past", view);
  s.set_input("x", rows(H, 1, D, 1));
  EXPECT_THROW(s.run(Mode::Lazy), RuntimeError);
  auto once = graph_text(R"({"id": "past", "op": "input", "shape": [1, 2, 6, 3]},
      {"id": "x", "op": "input", "shape": [1, 2, 1, 3]},
      {"id": "present", "op": "concat", "inputs": ["past", "x"], "attrs": {"axis": 2}},
      {"id": "z", "op": "mul", "inputs": ["present", "present"]})",
                         R"(["present", "z"])");
  CapacityGraph cg = capacity_step_graph(*once, {"past"}, {"present"});
  ASSERT_TRUE(cg.graph);
  EXPECT_TRUE(cg.appendable);
  auto twice = graph_text(R"({"id": "past", "op": "input", "shape": [1, 2, 6, 3]},
      {"id": "x", "op": "input", "shape": [1, 2, 1, 3]},
      {"id": "present", "op": "concat", "inputs": ["past", "x"], "attrs": {"axis": 2}},
      {"id": "z", "op": "mul", "inputs": ["past", "past"]})",
                          R"(["present", "z"])");
  CapacityGraph cg2 = capacity_step_graph(*twice, {"past"}, {"present"});
  ASSERT_TRUE(cg2.graph);
  EXPECT_FALSE(cg2.appendable);  // the past is read by another node too
  for (Mode mode : {Mode::Eager, Mode::Lazy, Mode::Compiled}) {  // so a session refuses to append it
    Session t(twice, *ex, {}, {});
    KvCache kv2({H}, {D}, {DType::f32}, C, true, ex.get());
    t.set_append_storage("past", kv2.append_storage(0));
    t.set_input("x", rows(H, 1, D, 1));
    EXPECT_THROW(t.run(mode), RuntimeError) << mode_name(mode);
  }
}

// The cache in device buffers (an executor that cannot use its host pages: Vulkan): the prompt's
// rows uploaded, growth copied on the device, valid() and a relayout without the spare slot (back
// to host tensors) give the plain loop's rows; the unused slots are zeros. On the CPU the same
// calls run over the wrapped host pages.
TEST(KvCache, StorageOnTheExecutorKeepsRowsThroughGrowthAndRelayout) {
  const int64_t H = 3, D = 4;
  for (const auto& backend : backends_here()) {
    SCOPED_TRACE(backend);
    auto ex = make_executor(backend);
    KvCache kv({H, 1}, {D, 2}, {DType::f32, DType::f32}, 4, true, ex.get());
    std::vector<std::vector<std::vector<float>>> want(2);  // per tensor, per head, the rows' values
    want[0].resize(H), want[1].resize(1);
    auto add = [&](int64_t t, int step) {
      if (kv.length() + t > kv.capacity()) kv.grow(2 * kv.capacity());
      for (size_t k = 0; k < 2; ++k) {
        const int64_t heads = k ? 1 : H, dim = k ? 2 : D;
        Tensor r = rows(heads, t, dim, step + (int)k * 50);
        kv.write(k, r);
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t i = 0; i < t * dim; ++i) want[k][h].push_back(r.data()[h * t * dim + i]);
      }
      kv.advance(t);
    };
    add(3, 1);
    for (int step = 2; step <= 8; ++step) add(1, step);  // grows 4 -> 8 -> 16
    EXPECT_EQ(kv.capacity(), 16);
    auto check = [&](const char* when) {
      for (size_t k = 0; k < 2; ++k) {
        const Tensor v = kv.valid(k).to_f32();
        const int64_t heads = k ? 1 : H, dim = k ? 2 : D;
        ASSERT_EQ(v.shape(), (Shape{1, heads, 10, dim})) << when;
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t i = 0; i < 10 * dim; ++i) ASSERT_EQ(v.data()[h * 10 * dim + i], want[k][h][i]) << when << " tensor " << k << " head " << h;
      }
    };
    check("after growth");
    kv.relayout(16, false);  // a plan that reads the past as it is: host tensors, no spare slot
    EXPECT_FALSE(kv.on_device());
    check("after the relayout");
    const Tensor c = kv.tensor(0).to_f32();
    ASSERT_EQ(c.shape(), (Shape{1, H, 16, D}));
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 10 * D; i < 16 * D; ++i) ASSERT_EQ(c.data()[h * 16 * D + i], 0.f) << "head " << h << ": unused slots are zeros";
  }
}
