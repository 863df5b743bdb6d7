#pragma once
// `rlx run MODEL --batch LIST --out-dir DIR`: the flags of a batch job and the command around
// lib/runtime/batch.h (progress bar, summary, exit code). docs/batch.md.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "runtime/batch.h"

namespace rlx {

struct BatchFlags {
  std::string list, shard;
  int batch_size = 1;
  int64_t max_errors = 0;
  bool force = false;
  bool batch_size_given = false;
};

void add_batch_options(CLI::App* run, BatchFlags& f);
// Refuses the --batch flags without --batch, and `conflicting` (the run flags given that a
// batch job does not take) with it.
void check_batch_flags(const BatchFlags& f, const std::vector<std::string>& conflicting);
// Runs the job; `o` carries the model, executor and session settings. Exit codes: 0 when every
// item is ok (or skipped), 1 when some failed (or --max-errors stopped the job).
int cmd_batch(const BatchFlags& f, BatchOptions o);

}  // namespace rlx
