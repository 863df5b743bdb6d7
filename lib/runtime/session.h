#pragma once
// A Session runs one graph on one executor, many times. Parameters and
// constants are uploaded once and stay on the device. The three modes:
//   eager    : per node, allocate, launch, flush (wait); errors at the node
//   lazy     : plan the whole graph (liveness-based arena), launch all, flush once
//   compiled : optimise (CSE, folding, simplification, fusion), plan a static
//              arena, record once; cached by input shapes/dtypes and replayed
#include <map>
#include <set>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "passes/memory_plan.h"
#include "passes/passes.h"
#include "runtime/executor.h"

namespace rlx {

enum class Mode { Eager, Lazy, Compiled };
const char* mode_name(Mode m);
// Case-insensitive; throws InputError listing the valid values.
Mode parse_mode(const std::string& s, const std::string& where = "mode");
// RLX_MLX_MODE, default lazy.
Mode mode_from_env();
std::vector<Mode> parse_modes(const std::string& csv);

struct SessionOptions {
  bool check_numerics = false;
  bool verbose = false;
  bool profile = false;
  bool disable_compile = false;  // RLX_DISABLE_COMPILE=1: compiled runs as lazy
  // The caller promises not to modify a tensor given to set_input in place: a host
  // value then goes to a compiled plan's input buffer once, not on every replay
  // (`rlx bench` sets this; by default every run uploads, seeing in-place changes).
  bool inputs_constant = false;
  // Inputs a plan reads straight from the host tensor given to set_input, where the backend can
  // (the CPU: no input buffer, no upload). The caller keeps that tensor, changes it only through
  // input_bytes_changed, and sets no other tensor for it while the session lives (an internal
  // error otherwise). rlx generate's KV cache (lib/runtime/kv_cache.h).
  std::set<std::string> in_place_inputs;
  std::ostream* log = nullptr;   // notes (--verbose), default std::cerr
  // Compiled plans go through the persistent compile cache (io::active_cache(), when the
  // program installed one; docs/cache.md).
  bool disk_cache = true;
};

struct RunStats {
  Mode mode = Mode::Lazy;     // the mode that actually ran
  bool compiled = false;      // this run built a new compiled plan
  std::string compile_reason;
  int kernels = 0;            // kernels launched (or replayed)
  int nodes = 0;              // graph nodes that compute (non-leaf)
  int64_t arena_bytes = 0;    // intermediates (lazy/compiled)
  int64_t peak_bytes = 0;     // device memory held at peak: params, inputs, intermediates
  int64_t unplanned_bytes = 0;  // what intermediates would take without reuse
  double seconds = 0;
  // Bytes of graph inputs copied by this run: uploads, feed copies, and what concat kernels copy
  // of an input into their output; an input appended in place (set_append_storage) adds none.
  int64_t input_copy_bytes = 0;
  int appends_in_place = 0;   // concats written into the caller's storage this run
  std::vector<ProfileEntry> profile;
  // Data-dependent sizes (graphs with nonzero, unique, ...; control.h): this run's sizes that
  // needed a new plan, those whose plan was cached, and new plans over the session's life.
  int sizes_planned = 0, sizes_reused = 0, sizes_planned_total = 0;
};

class ControlRunner;

class Session {
 public:
  // `params`: value of every param node, by node id (validated by the binder).
  Session(std::shared_ptr<const ir::Graph> graph, Executor& ex, std::map<std::string, Tensor> params,
          SessionOptions opts = {});
  ~Session();

  const ir::Graph& graph() const { return *graph_; }
  Executor& executor() { return ex_; }

  // Sets an input's value for the next run (converted to the input's dtype).
  void set_input(const std::string& id, const Tensor& value);
  // After a run: the output `out_id` becomes input `in_id` of the next run,
  // copied on the device (no round trip through the host).
  void feed(const std::string& out_id, const std::string& in_id);
  // The caller wrote bytes [offset, offset + bytes) of `value`, the tensor it gave set_input(id)
  // (tensors share storage when copied, so the session's host copy sees the change). Where a
  // compiled plan's input buffer already holds the rest (inputs_constant), only those bytes are
  // uploaded now; otherwise the next run uploads the whole value, as after set_input. A tensor
  // that is not the one set (other storage) is set anew. Used for a KV cache kept as
  // persistent input state and appended to in place (rlx generate, lib/runtime/kv_cache.h).
  void input_bytes_changed(const std::string& id, const Tensor& value, size_t offset, size_t bytes);
  // In-place append (the KV cache's concat written into the cache): input `id`'s one reader is
  // concat(id, x), and `storage.buf`, a buffer of this session's executor, holds that concat's
  // output (shape `storage.shape`, dtype `storage.dtype`, from byte 0) whose leading part along
  // the axis already holds the input's values. The input then reads the storage (its shape
  // `storage.input_shape`, for shape inference; never uploaded, copied or read in its own layout)
  // and every mode writes the concat's output into the storage, copying only x: no copy of the
  // input and no buffer of the concat's size. The buffer is host memory in place on the CPU
  // (wrap_host) and device memory on Vulkan (KvCache makes it). Needs ex.appends_in_place() and
  // no control nodes (an internal error otherwise); the input takes no other value afterwards.
  struct AppendStorage {
    std::shared_ptr<DeviceBuffer> buf;
    Shape input_shape, shape;
    DType dtype = DType::f32;
  };
  void set_append_storage(const std::string& id, AppendStorage storage);

  // Runs the graph; returns the outputs (in graph order) on the host.
  std::vector<Tensor> run(Mode mode);
  const RunStats& last_stats() const { return stats_; }
  int compile_count() const { return compiles_; }
  // Text of the plan the last run used (--dump-plan).
  std::string plan_text() const;

 private:
  struct Exec;
  struct PendingInput;
  std::unique_ptr<Exec> build_exec(Mode mode, const ir::TypedShapes& ts);
  void check_backend_dtypes(const ir::Graph& g, const ir::TypedShapes& ts) const;
  std::unique_ptr<passes::OptimizedGraph> optimized(const ir::TypedShapes& ts);
  ir::TypedShapes bind_shapes() const;
  std::string signature() const;
  TensorRef leaf_ref(int original_index);
  void bind_inputs(Exec& e);
  std::vector<Tensor> run_eager(const ir::TypedShapes& ts);
  std::vector<Tensor> run_planned(Exec& e, bool replay);
  std::vector<Tensor> download_outputs(const std::vector<TensorRef>& refs);
  std::ostream& log() const;

  std::shared_ptr<const ir::Graph> graph_;
  Executor& ex_;
  SessionOptions opts_;
  std::map<std::string, Tensor> params_;
  std::map<int, std::unique_ptr<DeviceBuffer>> leaf_bufs_;  // params and constants, by node index
  std::map<std::string, std::unique_ptr<PendingInput>> inputs_;
  std::map<std::string, std::unique_ptr<Exec>> cache_;
  std::string last_signature_;
  Exec* last_exec_ = nullptr;                 // the exec whose outputs feeds read
  std::unique_ptr<Exec> lazy_exec_;           // lazy mode's plan for this run
  std::vector<TensorRef> last_outputs_;
  std::vector<std::unique_ptr<DeviceBuffer>> eager_keep_;  // eager outputs kept for feeds
  std::vector<std::pair<int64_t, std::shared_ptr<uint8_t>>> host_pool_;  // output storage, by size in bytes
  RunStats stats_;
  int compiles_ = 0;
  std::string plan_text_;
  std::string merge_text_;  // what merge_sibling_products did to the graph (for the plan text)
  // A graph with control nodes (if, loop, scan) runs as segments and host steps (control.h).
  std::unique_ptr<ControlRunner> control_;
  std::vector<Tensor> control_outputs_;  // its last outputs, for feeds (on the host)
  std::map<std::string, AppendStorage> append_storage_;  // set_append_storage, by input id
  int64_t pending_copy_bytes_ = 0;  // input_bytes_changed's uploads since the last run (counted by the next)
};

}  // namespace rlx
