// A STREAM-like read: the sum of a float array, split over a given number of threads.
//
// It measures the host's read ceiling for memory-bound kernels such as paged decode,
// which reads each KV row once: benchmarks/attention_kernel.py times it over the same
// number of bytes as a decode step's KV and reports the decode kernel's bytes/s as a
// fraction of it. The loop must be limited by memory, not by the adder: each thread
// keeps kLanes independent f32 sums (several vector registers, so consecutive adds do
// not wait on each other's latency), and the sum is returned to the caller so that no
// load can be dropped by the compiler. The f32 lanes are added into a double after each
// block of kBlock floats, so a long array's sum keeps its precision.
//
// The paged read sums a KV pool's pages in a given order (a decode step's pages, sequence by
// sequence), each page front to back with the next one prefetched, as the decode kernel reads
// them: the host's read rate for that access pattern, beside the contiguous one.
//
// Threads are started before the clock runs and released together once every one of them
// is running; the time is from their release to the last one's finish, so it holds the
// reads and neither thread creation nor a helper scheduled late (on a virtual machine a
// sleeping core can take a few hundred microseconds to wake, a good part of one read).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "timed_shares.h"

namespace claimbench {
namespace {

constexpr int kLanes = 64;  // independent f32 sums: four AVX-512 or eight AVX2 vectors
constexpr int64_t kBlock = int64_t{1} << 14;  // floats summed in f32 before joining the double

double SumRange(const float* __restrict data, int64_t n) {
  double total = 0.0;
  int64_t i = 0;
  while (i < n) {
    const int64_t block_end = std::min(n, i + kBlock);
    float lanes[kLanes] = {};
    for (; i + kLanes <= block_end; i += kLanes) {
#pragma omp simd
      for (int j = 0; j < kLanes; ++j) lanes[j] += data[i + j];
    }
    for (; i < block_end; ++i) total += data[i];  // the block's tail, under one vector group
    for (int j = 0; j < kLanes; ++j) total += lanes[j];
  }
  return total;
}

// One page summed front to back while the same span of `next` (the page read after it; null
// for none) is prefetched into the outer caches, a few lines per vector group, as the decode
// kernel fetches its next page (decode_tiles.h, PrefetchLines).
double SumPage(const float* __restrict page, const float* next, int64_t n) {
  double total = 0.0;
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    if (next != nullptr) {
      for (int64_t line = 0; line < kLanes; line += 16) __builtin_prefetch(next + i + line, 0, 1);
    }
#pragma omp simd
    for (int j = 0; j < kLanes; ++j) lanes[j] += page[i + j];
  }
  for (; i < n; ++i) total += page[i];
  for (int j = 0; j < kLanes; ++j) total += lanes[j];
  return total;
}

// A thread's partial sum, on its own cache line so the threads never share one.
struct alignas(64) Partial {
  double sum = 0.0;
};

double Total(const std::vector<Partial>& partials) {
  double total = 0.0;
  for (const Partial& p : partials) total += p.sum;
  return total;
}

}  // namespace
}  // namespace claimbench

// Sums data[0:n] over `threads` threads (the calling thread is one of them), each taking
// one contiguous share; writes the seconds the reads took to *seconds. Returns the sum.
extern "C" double ClaimbenchReadSum(const float* data, int64_t n, int32_t threads,
                                    double* seconds) {
  using claimbench::Partial;
  const int64_t num_threads = std::clamp<int64_t>(threads, 1, std::max<int64_t>(n, 1));
  // Shares start on whole vector groups (of kLanes floats) so each one's loads stay aligned
  // as the array's start is.
  const int64_t groups = (n + claimbench::kLanes - 1) / claimbench::kLanes;
  const int64_t per_thread = (groups + num_threads - 1) / num_threads * claimbench::kLanes;
  std::vector<Partial> partials(num_threads);
  claimbench::TimedShares(
      num_threads,
      [&](int64_t t) {
        const int64_t begin = std::min(n, t * per_thread);
        const int64_t end = std::min(n, begin + per_thread);
        partials[t].sum = claimbench::SumRange(data + begin, end - begin);
      },
      seconds);
  return claimbench::Total(partials);
}

// Sums the pages pool[pages[0]], pool[pages[1]], ... (each `page_floats` floats; the caller
// checks the indices) in that order over `threads` threads, each taking one contiguous share
// of the list and prefetching its next page while it reads one; writes the seconds the reads
// took to *seconds. Returns the sum.
extern "C" double ClaimbenchReadPages(const float* pool, int64_t page_floats,
                                      const int32_t* pages, int64_t count, int32_t threads,
                                      double* seconds) {
  using claimbench::Partial;
  const int64_t num_threads = std::clamp<int64_t>(threads, 1, std::max<int64_t>(count, 1));
  const int64_t per_thread = (count + num_threads - 1) / num_threads;
  std::vector<Partial> partials(num_threads);
  claimbench::TimedShares(
      num_threads,
      [&](int64_t t) {
        const int64_t begin = std::min(count, t * per_thread);
        const int64_t end = std::min(count, begin + per_thread);
        double sum = 0.0;
        for (int64_t i = begin; i < end; ++i) {
          const float* next = i + 1 < end ? pool + pages[i + 1] * page_floats : nullptr;
          sum += claimbench::SumPage(pool + pages[i] * page_floats, next, page_floats);
        }
        partials[t].sum = sum;
      },
      seconds);
  return claimbench::Total(partials);
}
