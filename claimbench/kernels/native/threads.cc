// The threads the native kernels compute on (parallel.h), read and set from Python: the
// benchmarks time each kernel on one thread and on all of them in one process.

#include "parallel.h"

// Threads a kernel call computes on, the calling one included.
extern "C" int ClaimbenchKernelThreads() { return claimbench::KernelThreads::Get().threads(); }

// Sets them (at least 1) and returns the previous number; waits for a call in flight.
extern "C" int ClaimbenchSetKernelThreads(int n) { return claimbench::KernelThreads::Get().Set(n); }

// Seconds the kernels' threads have spent spinning without work since the library loaded.
extern "C" double ClaimbenchKernelWaitingSeconds() {
  return claimbench::KernelThreads::Get().waiting_seconds();
}

// How many distinct threads ran `items` items of ~`item_us` microseconds each through
// ParallelFor: the tests' check that the helpers take work, not only the calling thread.
extern "C" int ClaimbenchThreadsSeen(int64_t items, int64_t item_us) {
  std::mutex mu;
  std::vector<std::thread::id> seen;
  claimbench::ParallelFor(items, [&](int64_t) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(item_us);
    while (std::chrono::steady_clock::now() < until) claimbench::Pause();
    std::lock_guard<std::mutex> lock(mu);
    if (std::find(seen.begin(), seen.end(), std::this_thread::get_id()) == seen.end()) {
      seen.push_back(std::this_thread::get_id());
    }
  });
  return static_cast<int>(seen.size());
}
