#pragma once
// Control flow at run time (docs/ir-design.md section 3, docs/modes.md): a graph with control
// nodes (if, loop, scan) runs as planned segments separated by host steps. Each segment is the
// maximal set of ordinary nodes between two control nodes, run by its own Session in the
// requested mode (eager, lazy, or compiled: planned, recorded and replayed, cached by input
// signature). A host step reads back the predicate or trip count, then runs the chosen body,
// itself a ControlRunner over the body graph, built once per body and reused (its Sessions
// cache one plan per input signature), never unrolled. First version: values cross between
// segments and bodies through the host.
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
enum class Mode;

class ControlRunner {
 public:
  ControlRunner(std::shared_ptr<const ir::Graph> g, Executor& ex, std::map<std::string, Tensor> params,
                const SessionOptions& opts);
  ~ControlRunner();
  // `inputs`: the value of every input node, by node id. Returns the graph's outputs in order.
  std::vector<Tensor> run(Mode mode, const std::map<std::string, Tensor>& inputs);
  int kernels() const { return kernels_; }
  int segments_run() const { return segments_run_; }
  // The largest device memory one segment (or body segment) held in the last run: segments run
  // one at a time, their values between them are on the host.
  int64_t peak_bytes() const { return peak_bytes_; }
  std::string plan_text() const;

  static bool has_control(const ir::Graph& g);

 private:
  struct Segment;
  struct Plan;
  void build(const std::map<std::string, Tensor>& inputs);
  std::vector<Tensor> run_body(Mode mode, const ir::Node& ctl, int body, const std::vector<Tensor>& ins);
  std::vector<Tensor> run_control(Mode mode, int node, const std::vector<Tensor>& ins);

  std::shared_ptr<const ir::Graph> g_;
  Executor& ex_;
  std::map<std::string, Tensor> params_;
  std::unique_ptr<SessionOptions> opts_;
  std::unique_ptr<Plan> plan_;
  std::string plan_sig_;
  std::map<const ir::Graph*, std::unique_ptr<ControlRunner>> bodies_;
  int kernels_ = 0, segments_run_ = 0;
  int64_t peak_bytes_ = 0;
};

}  // namespace rlx
