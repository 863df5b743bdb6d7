#include "batch.h"

#include <unistd.h>

#include <chrono>
#include <iostream>

#include <fmt/format.h>

#include "core/error.h"

namespace rlx {

void add_batch_options(CLI::App* run, BatchFlags& f) {
  run->add_option("--batch", f.list,
                  "Run every item of a JSON Lines LIST (- for standard input), one line per item:\n"
                  "  {\"id\": \"page-0001\", \"inputs\": {\"x\": \"pages/0001.npy\"}}; outputs go to DIR/<id>/<output>.npy\n"
                  "  (--out-dir DIR), one result line per item to DIR/results.jsonl and stdout (docs/batch.md)");
  run->add_option("--batch-size", f.batch_size, "With --batch: stack up to N items of one shape along the leading (batch) dim")
      ->each([&f](const std::string&) { f.batch_size_given = true; });
  run->add_option("--shard", f.shard, "With --batch: take the lines whose index is I mod N, I/N (e.g. $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT)");
  run->add_option("--max-errors", f.max_errors, "With --batch: stop after K failed items (default 0: never stop)");
  run->add_flag("--force", f.force, "With --batch: redo items whose outputs are already there (default: they are skipped)");
}

void check_batch_flags(const BatchFlags& f, const std::vector<std::string>& conflicting) {
  if (f.list.empty()) {
    std::vector<std::string> given;
    if (f.batch_size_given) given.push_back("--batch-size");
    if (!f.shard.empty()) given.push_back("--shard");
    if (f.max_errors) given.push_back("--max-errors");
    if (f.force) given.push_back("--force");
    if (!given.empty()) throw InputError(given.front() + " is for batch jobs: give it with --batch LIST --out-dir DIR");
    return;
  }
  if (!conflicting.empty())
    throw InputError("--batch and " + conflicting.front() + ": a batch job takes its inputs from the list and writes each item's outputs to "
                     "--out-dir DIR/<id>/ (docs/batch.md)");
}

namespace {

std::string duration_text(double s) {
  if (s < 0 || s > 360000) return "?";
  const int t = (int)(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60) : fmt::format("{}:{:02}", t / 60, t % 60);
}

}  // namespace

int cmd_batch(const BatchFlags& f, BatchOptions o) {
  o.list = f.list;
  o.batch_size = f.batch_size;
  o.max_errors = f.max_errors;
  o.force = f.force;
  if (!f.shard.empty()) parse_shard(f.shard, o.shard_index, o.shard_count);
  o.results_out = &std::cout;
  // A progress bar on stderr when it is a terminal: done, failed, items/s, ETA.
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0 - std::chrono::seconds(1);
  const bool bar = isatty(2);
  if (bar)
    o.on_progress = [&](int64_t ok, int64_t failed, int64_t skipped, int64_t total) {
      const auto now = std::chrono::steady_clock::now();
      const int64_t done = ok + failed + skipped;
      if (now - last < std::chrono::milliseconds(100) && done != total) return;
      last = now;
      const double s = std::chrono::duration<double>(now - t0).count();
      const double rate = s > 0 ? done / s : 0;
      std::string line = fmt::format("\r{} done", done);
      if (total >= 0) line += fmt::format(" of {}", total);
      line += fmt::format(", {} failed, {} skipped, {:.1f} items/s", failed, skipped, rate);
      if (total >= 0 && rate > 0) line += ", ETA " + duration_text((total - done) / rate);
      std::cerr << line << "   " << std::flush;
    };
  BatchSummary s = run_batch(o);
  if (bar) std::cerr << "\n";
  std::cerr << fmt::format("batch: {} ok, {} failed, {} skipped in {:.2f} s{}; results in {}\n", s.ok, s.failed, s.skipped, s.seconds,
                           s.stopped ? fmt::format(" (stopped after {} errors: --max-errors)", s.failed) : "", s.results_file);
  return s.failed || s.stopped ? kExitExpectFailed : kExitOk;
}

}  // namespace rlx
