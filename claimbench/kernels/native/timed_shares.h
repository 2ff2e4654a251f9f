// Timing work split over a given number of fresh threads, all released together: the host
// ceilings (read_bandwidth.cc, fma_peak.cc) time the work itself, not thread start-up.

#ifndef CLAIMBENCH_TIMED_SHARES_H_
#define CLAIMBENCH_TIMED_SHARES_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace claimbench {

// Runs share(t) for t in [0, num_threads) on as many threads (the caller is thread 0), all
// released together once every one is running; writes the seconds from their release to the
// last one's end to *seconds.
template <typename Share>
inline void TimedShares(int64_t num_threads, Share share, double* seconds) {
  using Clock = std::chrono::steady_clock;
  std::atomic<bool> go{false};
  std::atomic<int64_t> running{0};
  std::vector<std::thread> helpers;
  helpers.reserve(num_threads - 1);
  for (int64_t t = 1; t < num_threads; ++t) {
    helpers.emplace_back([&, t] {
      running.fetch_add(1, std::memory_order_acq_rel);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      share(t);
    });
  }
  while (running.load(std::memory_order_acquire) < num_threads - 1) std::this_thread::yield();
  const Clock::time_point start = Clock::now();
  go.store(true, std::memory_order_release);
  share(0);
  for (std::thread& helper : helpers) helper.join();
  *seconds = std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace claimbench

#endif  // CLAIMBENCH_TIMED_SHARES_H_
