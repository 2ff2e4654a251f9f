// Splitting a kernel's independent work items over XLA's intra-op thread pool.

#ifndef CLAIMBENCH_PARALLEL_H_
#define CLAIMBENCH_PARALLEL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "xla/ffi/api/ffi.h"

namespace claimbench {

// Runs work(i) for i in [0, n). Items are claimed from a shared counter by the
// calling thread and by helpers scheduled on the pool; the call returns once
// every item is done. The state is shared-owned: a helper that starts late
// finds nothing left and exits without touching freed memory.
template <typename Work>
void ParallelFor(xla::ffi::ThreadPool& pool, int64_t n, Work work) {
  struct Shared {
    explicit Shared(Work w, int64_t total) : work(std::move(w)), total(total) {}
    Work work;
    int64_t total;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    void Drain() {
      for (int64_t i; (i = next.fetch_add(1)) < total;) {
        work(i);
        done.fetch_add(1, std::memory_order_release);
      }
    }
  };
  if (n <= 0) return;
  auto shared = std::make_shared<Shared>(std::move(work), n);
  // The calling thread works too: one helper fewer than the pool has threads.
  const int64_t helpers = std::min<int64_t>(pool.num_threads() - 1, n - 1);
  for (int64_t i = 0; i < helpers; ++i) {
    pool.Schedule([shared] { shared->Drain(); });
  }
  shared->Drain();
  while (shared->done.load(std::memory_order_acquire) < n) {
    std::this_thread::yield();
  }
}

}  // namespace claimbench

#endif  // CLAIMBENCH_PARALLEL_H_
