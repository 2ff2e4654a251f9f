// Splitting a kernel's independent work items over threads the kernels own.
//
// XLA's intra-op pool was used before: a helper scheduled on it started 0.7-1.25 ms into a
// 2-2.8 ms decode call on a 2-core host, so nearly every item ran on the calling thread and
// the second core stayed idle for most of the call. The kernels now keep their own helpers
// (one fewer than the cores this process may run on: the calling thread works too). A helper
// that has finished an item spins for a short while (kSpin) before it sleeps, so the calls a
// step makes one after another (a layer's projections, its attention, the next layer's) find
// it awake; between steps it sleeps on a condition variable and costs nothing.
//
// Calls may come from several threads at once (independent XLA ops, several virtual devices):
// one call at a time gets the helpers, any other runs its items on its own thread. The number
// of threads can be set (ClaimbenchSetKernelThreads, CLAIMBENCH_NATIVE_THREADS) so that one and
// two threads can be measured in one process.

#ifndef CLAIMBENCH_PARALLEL_H_
#define CLAIMBENCH_PARALLEL_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sched.h>
#include <time.h>

namespace claimbench {

// One call's items, claimed from a shared counter. Shared-owned: a helper that wakes after
// the call has returned finds nothing left and never calls the (by then dangling) work.
struct ParallelJob {
  explicit ParallelJob(int64_t total) : total(total) {}
  virtual ~ParallelJob() = default;
  virtual void Run(int64_t item) = 0;
  void Drain() {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < total;) {
      Run(i);
      done.fetch_add(1, std::memory_order_release);
    }
  }
  const int64_t total;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
};

template <typename Work>
struct ParallelWork final : ParallelJob {
  ParallelWork(Work w, int64_t total) : ParallelJob(total), work(std::move(w)) {}
  void Run(int64_t item) override { work(item); }
  Work work;
};

// CPU nanoseconds the calling thread has run so far: the spin is counted in the time it held a
// core, not in wall time, which also runs while the host has the spinning thread descheduled.
inline int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

class KernelThreads {
 public:
  // How long an idle helper spins before it sleeps: longer than the gap between two kernel
  // calls of one step (an XLA elementwise op or two), shorter than a step's host work.
  static constexpr std::chrono::microseconds kSpin{200};

  static KernelThreads& Get() {
    static KernelThreads* threads = [] {
      auto* made = new KernelThreads();  // never destroyed: helpers outlive main
      pthread_atfork([] { Get().BeforeFork(); }, [] { Get().AfterForkParent(); },
                     [] { Get().AfterForkChild(); });
      return made;
    }();
    return *threads;
  }

  // CPU seconds the kernels' threads have spent spinning without work (a helper waiting for
  // the next call, a caller for a helper's last item): CPU time that computed nothing, which a
  // measure of idle cores from CPU time must count as idle. Counted on each thread's CPU clock
  // (ThreadCpuNs), so it never exceeds the CPU time the process spent.
  double waiting_seconds() const { return waiting_ns_.load(std::memory_order_relaxed) * 1e-9; }

  // Threads a call computes on, the calling one included.
  int threads() const { return wanted_.load(std::memory_order_relaxed); }

  // Sets the threads a call computes on (at least 1); helpers are started as needed.
  int Set(int n) {
    n = std::max(1, n);
    std::lock_guard<std::mutex> busy(busy_);  // not while a call holds the helpers
    std::lock_guard<std::mutex> lock(mu_);
    Spawn(n - 1);
    return wanted_.exchange(n);
  }

  void Run(int64_t n, std::shared_ptr<ParallelJob> job) {
    const int helpers = std::min<int64_t>(threads() - 1, n - 1);
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (helpers <= 0 || !busy.owns_lock()) {
      job->Drain();  // alone, or another call has the helpers
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      Spawn(helpers);  // again after a fork: the child has none of the parent's threads
      job_ = job;
      active_ = helpers;
      generation_.fetch_add(1, std::memory_order_release);
      if (sleeping_ > 0) wake_.notify_all();
    }
    job->Drain();
    // The last items may be on a helper that the host has descheduled: yield the core to it
    // after a short spin rather than spin against it.
    if (job->done.load(std::memory_order_acquire) < n) {
      const int64_t since = ThreadCpuNs();
      for (int spins = 0; job->done.load(std::memory_order_acquire) < n; ++spins) {
        if (spins < 4096) {
          Pause();
        } else {
          std::this_thread::yield();
        }
      }
      CountWaiting(since);
    }
    std::lock_guard<std::mutex> lock(mu_);
    job_.reset();
  }

 private:
  KernelThreads() {
    int n = 0;
    if (const char* env = std::getenv("CLAIMBENCH_NATIVE_THREADS"); env && *env) {
      n = std::atoi(env);
    }
    if (n <= 0) {
      cpu_set_t set;
      n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
                                                        : static_cast<int>(
                                                              std::thread::hardware_concurrency());
    }
    Set(std::max(1, n));
  }

  // Adds the calling thread's CPU time since `since` (ThreadCpuNs) to the waiting.
  void CountWaiting(int64_t since) {
    waiting_ns_.fetch_add(ThreadCpuNs() - since, std::memory_order_relaxed);
  }

  // Starts helpers until there are `n`; mu_ held.
  void Spawn(int n) {
    while (static_cast<int>(helpers_.size()) < n) {
      // The generation it starts from is read here, before a call can publish the next one.
      helpers_.emplace_back([this, index = static_cast<int>(helpers_.size()),
                             seen = generation_.load(std::memory_order_acquire)] {
        Loop(index, seen);
      });
      helpers_.back().detach();
    }
  }

  // A fork copies only the forking thread: the locks are taken around it so that no helper
  // holds one in the child, whose helpers are then started again on its first call.
  void BeforeFork() {
    busy_.lock();
    mu_.lock();
  }
  void AfterForkParent() {
    mu_.unlock();
    busy_.unlock();
  }
  void AfterForkChild() {
    helpers_.clear();  // detached: the objects are only names of the parent's threads
    job_.reset();
    active_ = 0;
    sleeping_ = 0;
    mu_.unlock();
    busy_.unlock();
  }

  void Loop(int index, uint64_t seen) {
    for (;;) {
      const int64_t since = ThreadCpuNs();
      const auto until = std::chrono::steady_clock::now() + kSpin;
      int spins = 0;
      while (generation_.load(std::memory_order_acquire) == seen) {
        Pause();
        if (++spins % 64 == 0 && std::chrono::steady_clock::now() > until) break;
      }
      CountWaiting(since);
      std::shared_ptr<ParallelJob> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (generation_.load(std::memory_order_relaxed) == seen) {
          ++sleeping_;
          wake_.wait(lock, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
          --sleeping_;
        }
        seen = generation_.load(std::memory_order_relaxed);
        // Only the call's first `active_` helpers join it (fewer threads than started).
        if (job_ && index < active_) job = job_;
      }
      if (job) job->Drain();
    }
  }

  std::mutex busy_;  // held by the call that has the helpers
  std::mutex mu_;    // guards job_, active_, sleeping_ and the helpers list
  std::condition_variable wake_;
  std::shared_ptr<ParallelJob> job_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> wanted_{1};
  std::atomic<int64_t> waiting_ns_{0};
  int active_ = 0;
  int sleeping_ = 0;
  std::vector<std::thread> helpers_;
};

// Runs work(i) for i in [0, n) on the kernels' threads; returns once every item is done.
template <typename Work>
void ParallelFor(int64_t n, Work work) {
  if (n <= 0) return;
  if (n == 1) {
    work(0);
    return;
  }
  KernelThreads::Get().Run(n, std::make_shared<ParallelWork<Work>>(std::move(work), n));
}

}  // namespace claimbench

#endif  // CLAIMBENCH_PARALLEL_H_
