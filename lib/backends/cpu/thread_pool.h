#pragma once
// A small persistent thread pool for data-parallel kernels.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rlx::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  int size() const { return (int)workers_.size() + 1; }
  // Runs fn(begin, end) over [0, n) split into chunks of at least `grain`.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
  static ThreadPool& global();

 private:
  void worker(int index);
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0, chunk_ = 0, chunks_ = 0;
  int64_t next_ = 0, finished_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

int default_num_threads();

}  // namespace rlx::cpu
