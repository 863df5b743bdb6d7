#pragma once
// Control flow at run time (docs/ir-design.md section 3, docs/modes.md): a graph with control
// nodes (if, loop, scan) runs as planned segments separated by host steps. Each segment is the
// maximal set of ordinary nodes between two control nodes, run by its own Session in the
// requested mode (eager, lazy, or compiled: planned, recorded and replayed, cached by input
// signature). A host step reads back the predicate or trip count, then runs the chosen body,
// itself a ControlRunner over the body graph, built once per body and reused (its Sessions
// cache one plan per input signature), never unrolled. First version: values cross between
// segments and bodies through the host.
//
// Data-dependent ops (nonzero, compress, unique, topk_dynamic, non_max_suppression) are host
// steps too: their kernels run on the host (host_ops.h) and give the size of their results.
// Nodes after such a step (by position) always run in later segments. When the size differs from
// the one the graph was made for, the graph's `resize` (an ONNX import) makes the graph for the
// observed sizes, and a ControlRunner over it (a *continuation*, cached by those sizes, at most
// kMaxContinuations) resumes from that step with the values computed so far: a repeated size
// plans nothing.
//
// A body whose import read some of its inputs' values (a Slice start or a Resize size computed
// from the iteration number, ir::Graph::respecialize) is made again for each other value it is
// given, cached the same way (at most kMaxContinuations per body, least recently used dropped);
// data-dependent nodes inside a body continue in a body made for their observed sizes, as at
// the top level (the body's own `resize`).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "runtime/executor.h"

namespace rlx {

class Session;
struct SessionOptions;
struct HostStepResult;
enum class Mode;

class ControlRunner {
 public:
  ControlRunner(std::shared_ptr<const ir::Graph> g, Executor& ex, std::map<std::string, Tensor> params,
                const SessionOptions& opts);
  ~ControlRunner();
  // `inputs`: the value of every input node, by node id. Returns the graph's outputs in order.
  // `known`: values already computed by the runner this one continues (by node id); segments and
  // host steps whose results are all known are not run again.
  std::vector<Tensor> run(Mode mode, const std::map<std::string, Tensor>& inputs,
                          const std::map<std::string, Tensor>* known = nullptr);
  int kernels() const { return kernels_; }
  // --profile: every kernel of the last run's segments, bodies and continuations (the host
  // steps between them are not kernels and are not listed).
  const std::vector<ProfileEntry>& profile() const { return profile_; }
  int segments_run() const { return segments_run_; }
  // The largest device memory one segment (or body segment) held in the last run: segments run
  // one at a time, their values between them are on the host.
  int64_t peak_bytes() const { return peak_bytes_; }
  std::string plan_text() const;
  // Data-dependent sizes in the last run: graphs made and planned for a size not seen before
  // (continuations built), and continuations found in the cache; and continuations built in all runs.
  int sizes_planned() const { return sizes_planned_; }
  int sizes_reused() const { return sizes_reused_; }
  int sizes_planned_total() const { return sizes_planned_total_; }
  static constexpr size_t kMaxContinuations = 16;

  static bool has_control(const ir::Graph& g);

 private:
  struct Segment;
  struct Plan;
  void build(const std::map<std::string, Tensor>& inputs);
  std::vector<Tensor> run_body(Mode mode, const ir::Node& ctl, int body, const std::vector<Tensor>& ins);
  std::vector<Tensor> run_control(Mode mode, int node, const std::vector<Tensor>& ins);
  std::vector<Tensor> continue_with(Mode mode, const std::map<std::string, Tensor>& inputs, int node,
                                    const std::map<std::string, int64_t>& observed, const std::vector<Tensor>& outs,
                                    const std::vector<Tensor>& val, const std::vector<bool>& have);

  std::shared_ptr<const ir::Graph> g_;
  Executor& ex_;
  std::map<std::string, Tensor> params_;
  std::unique_ptr<SessionOptions> opts_;
  std::unique_ptr<Plan> plan_;
  std::string plan_sig_;
  std::map<const ir::Graph*, std::unique_ptr<ControlRunner>> bodies_;
  std::map<std::string, std::unique_ptr<ControlRunner>> continuations_;  // by observed sizes
  // Bodies made again for other input values or shapes (ir::Graph::respecialize), per body
  // attached to a control node; least recently used first, at most kMaxContinuations each.
  struct BodySpec;
  std::map<const ir::Graph*, std::vector<std::unique_ptr<BodySpec>>> body_specs_;
  ControlRunner& body_runner(const ir::Node& ctl, int body, const std::map<std::string, Tensor>& inputs);
  std::vector<std::string> continuation_order_;                           // least recently used first
  int kernels_ = 0, segments_run_ = 0, sizes_planned_ = 0, sizes_reused_ = 0, sizes_planned_total_ = 0;
  int64_t peak_bytes_ = 0;
  // Adds what a body or continuation runner's last run did to this run's counts and profile.
  void absorb(const ControlRunner& o);
  std::vector<ProfileEntry> profile_;
};

}  // namespace rlx
