#pragma once
// What the command line does, as a library: load a graph with its parameters
// and inputs, compare tensors, summarise and write outputs. apps/rlx only
// parses flags and calls these.
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/spec.h"
#include "ir/graph.h"
#include "runtime/session.h"

namespace rlx {

// Flags shared by run, compare and bench.
struct Binding {
  std::string graph;
  std::vector<std::string> params;           // --params FILE (repeatable)
  std::optional<uint64_t> random_params;     // --random-params[=SEED]
  std::vector<std::string> inputs;           // --input ID=SPEC
  std::vector<std::string> dims;             // --dim NAME=SIZE (for random inputs with symbolic dims)
  std::string dtype;                         // --dtype f16|bf16: run in half precision ("" or f32: as declared)
};

// --dtype: every f32 input, param and constant of `g` becomes `dt` (f16 or bf16; constants
// rounded to nearest even). With the registry's dtype rule (an op on half operands gives a
// half result), the whole float computation then runs in `dt`. Returns the nodes changed.
int convert_graph_dtype(ir::Graph& g, DType dt);

struct Loaded {
  std::shared_ptr<ir::Graph> graph;
  std::map<std::string, Tensor> params;  // by node id
  std::map<std::string, Tensor> inputs;  // by input id
  std::vector<std::string> random_params_filled;
  // ONNX models: inputs whose values the specialisation used (an If condition, a Reshape
  // shape, ...), with those values, and how to specialise again for other input values (a
  // step that feeds another value into such an input must not reuse the graph). Null for
  // graph files.
  std::map<std::string, std::vector<double>> value_deps;
  std::function<Loaded(const std::map<std::string, Tensor>&)> respecialize;
  // True when `inputs` give one of value_deps' inputs another value.
  bool values_changed(const std::map<std::string, Tensor>& inputs) const;
};

// Splits "ID=SPEC" (at the first '='); throws InputError naming the flag.
std::pair<std::string, std::string> split_assignment(const std::string& s, const std::string& flag);

// --dim NAME=SIZE flags: a non-negative size per name (InputError otherwise).
std::map<std::string, int64_t> parse_dims(const std::vector<std::string>& dims);
// Refuses a --dim naming no symbolic dimension of the graph, listing the ones it has (a
// mistyped name would otherwise be ignored and the run go on with the wrong sizes, or fail later).
void check_dim_names(const std::map<std::string, int64_t>& dims, const std::set<std::string>& known, const std::string& file);

// One declared input with an --input value, for load_input_values.
struct InputDecl {
  std::string name;
  const std::vector<ir::Dim>* dims;  // declared shape, symbols included
  DType dtype;
  int64_t index_bound;  // exclusive bound for random integer values
  const io::TensorSpec* spec;
};
// Loads the values of `decls` into `out`: the values read first, as their shapes bind the
// symbolic dimensions (into `dims`) that random values then take their sizes from.
void load_input_values(const std::vector<InputDecl>& decls, std::map<std::string, int64_t>& dims,
                       std::map<std::string, Tensor>& out);

// Loads the graph, binds params and inputs. Every input of the graph must be given
// (the error lists those missing); an --input naming no input node is an error.
Loaded load_binding(const Binding& b);

// Loads --expect ID=SPEC tensors; an ID that is not an output is an error.
std::map<std::string, Tensor> load_expectations(const ir::Graph& g, const std::vector<std::string>& specs);

struct Diff {
  bool shape_ok = true;
  int64_t count = 0, bad = 0;
  double max_abs = 0, max_rel = 0, nmse = 0, cosine = 1;
  int64_t worst = -1;  // index of the worst element
  float worst_got = 0, worst_expected = 0;
  bool ok() const { return shape_ok && bad == 0; }
};
// |got - expected| <= atol + rtol * |expected|; NaN equals only NaN; equal infinities match.
Diff compare_tensors(const Tensor& got, const Tensor& expected, double atol, double rtol);
std::string describe_diff(const std::string& name, const Diff& d, const Tensor& got, const Tensor& expected);
// Flat index -> "[i, j, k]".
std::string index_str(int64_t flat, const Shape& s);

// Human summary: name, shape, dtype, min/max/mean, first values.
std::string summarize(const std::string& name, const Tensor& t, int first = 8);

// Why an output id cannot be used as a file name under --out-dir, or "" when it can: it must
// be 1 to 200 bytes, not start with '.', and hold no '/', '\\' or control character.
std::string plain_file_name_problem(const std::string& id);

// --output ID=FILE (.npy or .safetensors) and --out-dir DIR (ID.npy for each output that no
// --output names; the id must be a plain file name, see plain_file_name_problem), checked
// before anything runs: (output index, file) pairs. Writes are atomic.
using OutputPlan = std::vector<std::pair<int, std::string>>;
OutputPlan plan_outputs(const ir::Graph& g, const std::vector<std::string>& output_specs, const std::string& out_dir);
// Makes FILE's directory (with its parents, as `mkdir -p`) when missing, before anything runs;
// InputError when it exists as something else or cannot be made, or FILE is a directory.
void prepare_output_file(const std::string& file);
void write_outputs(const ir::Graph& g, const std::vector<Tensor>& outs, const OutputPlan& plan);

// Output index by id, or -1.
int output_index(const ir::Graph& g, const std::string& id);

}  // namespace rlx
