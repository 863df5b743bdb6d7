#pragma once
// `rlx bench`: timings per mode x backend, with first run (load/compile) apart
// from steady state; median, p10/p90, stddev, min; GFLOP/s, GB/s; peak memory.
// The timed runs of a backend's modes are interleaved (one run of each in turn).
#include <string>
#include <vector>

#include "runtime/compare.h"

namespace rlx {

struct BenchOptions {
  std::vector<Mode> modes{Mode::Eager, Mode::Lazy, Mode::Compiled};
  std::vector<std::string> backends{"cpu"};
  int warmup = 2, reps = 10, device = 0;
  SessionOptions session;
};

struct BenchRow {
  Combo combo;
  std::string device, skipped, error;
  double first_ms = 0, median_ms = 0, p10_ms = 0, p90_ms = 0, stddev_ms = 0, min_ms = 0;
  double gflops = 0, gbps = 0;
  int kernels = 0;
  double peak_mib = 0;      // device memory the plan holds at peak
  double rss_mib = 0;       // process peak resident memory after this mode's set-up (cumulative)
  // Per timed run (medians), from Executor::take_device_stats(): device (timestamp) time
  // where the backend has it (device_ms < 0 where not), host <-> device copies.
  double device_ms = -1;
  double upload_mb = 0, upload_ms = 0, download_mb = 0, download_ms = 0;
};

struct BenchReport {
  std::string graph;
  double flops = 0, bytes = 0;  // per run
  std::vector<BenchRow> rows;
  bool ok() const;
  std::string markdown() const;
  std::string json() const;
  std::string csv() const;
};

BenchReport run_bench(const Loaded& loaded, const BenchOptions& o);

// Per-kernel profile table sorted by time (for --profile).
std::string format_profile(const std::vector<ProfileEntry>& p);

// FLOPs of one run and bytes touched by the graph's kernels (unfused).
double graph_flops(const ir::Graph& g, const ir::TypedShapes& ts);
double graph_bytes(const ir::Graph& g, const ir::TypedShapes& ts);

}  // namespace rlx
