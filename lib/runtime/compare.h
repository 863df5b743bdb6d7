#pragma once
// `rlx compare`: run every mode x backend combination on the same inputs and
// parameters and measure each against a reference combination.
#include <optional>
#include <string>
#include <vector>

#include "runtime/runner.h"

namespace rlx {

struct Combo {
  Mode mode;
  std::string backend;
  std::string name() const { return std::string(mode_name(mode)) + ":" + backend; }
};
Combo parse_combo(const std::string& s);  // "eager:cpu"

struct OutputMetrics {
  std::string output;
  Diff diff;
};

struct ComboResult {
  Combo combo;
  bool skipped = false;
  std::string skip_reason;   // backend unavailable
  std::string error;         // the run failed
  double first_seconds = 0;  // includes planning/compilation
  double steady_seconds = 0;
  std::vector<OutputMetrics> metrics;  // against the reference
  bool within_tolerance = true;
};

struct CompareOptions {
  std::vector<Mode> modes{Mode::Eager, Mode::Lazy, Mode::Compiled};
  std::vector<std::string> backends{"cpu"};
  Combo reference{Mode::Eager, "cpu"};
  double atol = 1e-4, rtol = 1e-4;
  int device = 0;
  SessionOptions session;
  // The reference combination runs this binding instead (e.g. the graph as declared, in f32,
  // when the others run with --dtype bf16); null: the same binding as the others.
  const Loaded* reference_binding = nullptr;
};

struct CompareReport {
  std::string reference;
  std::vector<ComboResult> results;
  bool ok() const;
  std::string text() const;
  std::string json() const;
  std::string csv() const;
};

CompareReport compare_combinations(const Loaded& loaded, const CompareOptions& o);

}  // namespace rlx
