#pragma once
// A small persistent thread pool for data-parallel kernels.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace rlx::cpu {

// RLX_NUM_THREADS: at most this many threads per core (more only adds contention).
constexpr int kMaxThreadsPerCore = 4;
// The pool size from RLX_NUM_THREADS's value (null/empty: one per core). Throws InputError
// unless `value` is a positive integer; a value above kMaxThreadsPerCore x cores is capped,
// with `*note` (when given) saying so.
int parse_num_threads(const char* value, std::string* note);
int default_num_threads();  // from the environment

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  int size() const { return (int)workers_.size() + 1; }
  // Runs fn(begin, end) over [0, n) split into chunks of at least `grain`. An exception from
  // any chunk (an rlx error, std::bad_alloc from a kernel's scratch) is rethrown here, in the
  // caller, once every chunk already started has finished; chunks not yet started are skipped.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
  static ThreadPool& global();
  // How long threads poll before sleeping, and why ("auto: load 0.3 of 2 CPUs", "RLX_POOL_SPIN_US=0").
  int spin_us() const { return spin_us_; }
  const std::string& spin_why() const { return spin_why_; }

 private:
  void worker(int index);
  // Runs chunk c of the current job (mu_ held on entry and on return); records its exception.
  void run_chunk(std::unique_lock<std::mutex>& l, int64_t c);
  std::vector<std::thread> workers_;
  // RLX_POOL_SPIN_US: workers and the caller poll this many microseconds before sleeping on the
  // condition variables (workers only while jobs come back to back). A kernel follows the
  // previous one within microseconds and waking a sleeping thread costs tens of microseconds,
  // as much as a small kernel takes: on an idle machine 100 us made the decode step's best runs
  // 0.50 ms instead of 0.93 and the PaddleOCR classifier 0.8x ONNX Runtime's time instead of
  // 1.5x. On a loaded machine the polling threads take CPU time from the caller and from
  // others (medians 1.5-1.6 ms against 1.2-1.4 at load 3-4 on 2 cores). So the default, `auto`,
  // polls 100 us when the machine has CPUs to spare at start-up (1-minute load average below
  // the CPU count, /proc/loadavg) and not at all otherwise; a number sets it (0: off).
  int spin_us_ = 0;
  std::string spin_why_;
  std::atomic<uint64_t> gen_seen_{0};   // generation_, readable without the lock
  std::atomic<int64_t> finished_seen_{0};  // finished_, readable without the lock
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0, chunk_ = 0, chunks_ = 0;
  int64_t next_ = 0, finished_ = 0;
  uint64_t generation_ = 0;
  std::exception_ptr error_;  // the current job's first exception
  bool stop_ = false;
};

}  // namespace rlx::cpu
