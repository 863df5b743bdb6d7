#include "backends/cpu/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"

namespace rlx::cpu {

int thread_cap() { return kMaxThreadsPerCore * (int)std::max(1u, std::thread::hardware_concurrency()); }

int parse_num_threads(const char* value, std::string* note) {
  const int cores = (int)std::max(1u, std::thread::hardware_concurrency());
  if (!value || !*value) return cores;
  std::string v = value;
  bool digits = std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); });
  if (!digits || v.find_first_not_of('0') == std::string::npos)
    throw InputError("RLX_NUM_THREADS=" + v + ": expected a positive integer (a thread count, e.g. RLX_NUM_THREADS=" +
                     std::to_string(cores) + "), or unset it to use every core");
  const int cap = thread_cap();
  // More digits than any sane count: compare lengths before converting, so huge values do not overflow.
  std::string trimmed = v.substr(v.find_first_not_of('0'));
  long long n = trimmed.size() > 9 ? LLONG_MAX : std::stoll(trimmed);
  if (n > cap) {
    if (note)
      *note = "note: RLX_NUM_THREADS=" + v + " is more than " + std::to_string(kMaxThreadsPerCore) + " threads per core (" +
              std::to_string(cores) + " core(s)); using " + std::to_string(cap);
    return cap;
  }
  return (int)n;
}

int default_num_threads() { return parse_num_threads(std::getenv("RLX_NUM_THREADS"), nullptr); }

ThreadPool::ThreadPool(int threads) {
  const char* e = std::getenv("RLX_POOL_SPIN_US");
  if (e && *e && std::strcmp(e, "auto") != 0) {
    spin_us_ = std::clamp(std::atoi(e), 0, 100000);
    spin_why_ = std::string("RLX_POOL_SPIN_US=") + e;
  } else {
    const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
    double load = -1;
    if (FILE* f = std::fopen("/proc/loadavg", "r")) {
      if (std::fscanf(f, "%lf", &load) != 1) load = -1;
      std::fclose(f);
    }
    spin_us_ = (load >= 0 && load < cpus) ? 100 : 0;
    char buf[96];
    std::snprintf(buf, sizeof buf, "auto: load %.1f of %u CPUs", load, cpus);
    spin_why_ = load < 0 ? std::string("auto: no /proc/loadavg") : std::string(buf);
  }
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

namespace {
// Polls `done` for up to `us` microseconds; true when it became true.
template <class F>
bool spin_until(int us, F done) {
  if (us <= 0) return done();
  const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      _mm_pause();
    }
    if (std::chrono::steady_clock::now() >= end) return done();
  }
}
}  // namespace

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(default_num_threads());
  return pool;
}

void ThreadPool::worker(int) {
  uint64_t seen = 0;
  // Spin only while jobs come back to back: when the last job arrived more than spin_us_
  // after the one before finished (the caller was busy elsewhere or descheduled, as on a
  // loaded machine), the next wait sleeps at once instead of taking a core from the caller.
  bool spin = true;
  auto idle_since = std::chrono::steady_clock::now();
  for (;;) {
    if (spin) spin_until(spin_us_, [&] { return gen_seen_.load(std::memory_order_acquire) != seen; });
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    spin = std::chrono::steady_clock::now() - idle_since <= std::chrono::microseconds(spin_us_);
    seen = generation_;
    while (next_ < chunks_) {
      run_chunk(l, next_++);
      if (finished_ == chunks_) done_cv_.notify_all();
    }
    idle_since = std::chrono::steady_clock::now();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int threads = size();
  if (threads == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, threads * 4);
  int64_t chunk = (n + chunks - 1) / chunks;
  chunks = (n + chunk - 1) / chunk;
  std::unique_lock<std::mutex> l(mu_);
  job_ = &fn;
  n_ = n;
  chunk_ = chunk;
  chunks_ = chunks;
  next_ = 0;
  finished_ = 0;
  finished_seen_.store(0, std::memory_order_relaxed);
  generation_++;
  gen_seen_.store(generation_, std::memory_order_release);
  cv_.notify_all();
  while (next_ < chunks_) run_chunk(l, next_++);
  if (finished_ != chunks_ && spin_us_ > 0) {
    l.unlock();
    spin_until(spin_us_, [&] { return finished_seen_.load(std::memory_order_acquire) == chunks; });
    l.lock();
  }
  done_cv_.wait(l, [&] { return finished_ == chunks_; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadPool::run_chunk(std::unique_lock<std::mutex>& l, int64_t c) {
  if (!error_) {  // after a failure the remaining chunks are only counted
    const int64_t b = c * chunk_, e = std::min(n_, b + chunk_);
    l.unlock();
    std::exception_ptr err;
    try {
      (*job_)(b, e);
    } catch (...) {
      err = std::current_exception();
    }
    l.lock();
    if (err && !error_) error_ = err;
  }
  finished_seen_.store(++finished_, std::memory_order_release);
}

}  // namespace rlx::cpu
