#pragma once
// Batch jobs: `rlx run MODEL --batch LIST --out-dir DIR` runs one model over many input sets
// (docs/batch.md). One model load; one plan per input shape (a Session's compiled-mode cache,
// and the persistent compile cache); the next items' inputs are read on another thread while
// the current one runs. Each item's outputs go to DIR/<id>/<output>.npy (atomic writes), and
// one JSON line per item to the results file and to `results_out`. A failed item is reported
// and the job goes on. rlx is a well-behaved worker for job arrays (--shard I/N), not a
// scheduler: shards share nothing but the output directory.
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "runtime/runner.h"
#include "runtime/session.h"

namespace rlx {

struct BatchOptions {
  Binding model;            // graph, params, random params, --dim, --dtype (inputs come from the list)
  std::string list;         // JSON Lines file, or "-" for standard input
  std::string out_dir;      // DIR: DIR/<id>/<output>.npy and the results file
  int shard_index = 0, shard_count = 1;  // --shard I/N: the lines whose index is I mod N
  int batch_size = 1;       // --batch-size: items of one shape stacked along the leading dim
  int64_t max_errors = 0;   // --max-errors K: stop after K failed items (0: never)
  bool force = false;       // --force: redo items whose outputs are present
  Mode mode = Mode::Compiled;
  std::string backend = "cpu";
  int device = 0;
  SessionOptions session;   // check_numerics, verbose, ...
  std::ostream* results_out = nullptr;  // also gets each result line, flushed (stdout), or null
  // Called after each item with the counts so far and, when known, the items of this shard
  // (-1 for standard input): the progress bar.
  std::function<void(int64_t ok, int64_t failed, int64_t skipped, int64_t total)> on_progress;
};

struct BatchSummary {
  int64_t ok = 0, failed = 0, skipped = 0;
  bool stopped = false;       // --max-errors was reached
  std::string results_file;   // where the result lines went
  double seconds = 0;
};

// "I/N" with 0 <= I < N; InputError naming --shard otherwise.
void parse_shard(const std::string& text, int& index, int& count);
// The results file of a shard: DIR/results.jsonl, or DIR/results.I-of-N.jsonl under --shard
// (one file per shard: appends from several hosts to one file are not safe on every file system).
std::string batch_results_file(const std::string& out_dir, int shard_index, int shard_count);

// Runs the job. Job-level problems (the model, the list file, the output directory) throw
// InputError before any item runs; an item's problem is that item's "error" line.
BatchSummary run_batch(const BatchOptions& o);

}  // namespace rlx
