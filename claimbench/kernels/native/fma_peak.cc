// The host's compute ceiling for the f32 kernels: multiply-adds on registers only, no memory,
// over a given number of threads. The dense kernel and prefill attention are bound by it
// rather than by memory; benchmarks report their FLOP/s as a fraction of it on as many
// threads (kernels/native_bandwidth.py, ``fma_peak``).
//
// Each thread runs kChains independent multiply-add chains of one register vector (as many
// accumulators as the dense kernel's register tile holds), enough to cover the adder's
// latency on both of its pipes, so the loop is limited by the multiply-add rate alone.

#include <cstdint>
#include <vector>

#include "timed_shares.h"
#include "vec_math.h"

namespace claimbench {
namespace {

constexpr int kChains = kVecRegs == 32 ? 24 : 12;

float Chains(int64_t iters, float seed) {
  VecR acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = VecR{} + seed * static_cast<float>(c + 1);
  const VecR a = VecR{} + 0.999999f, b = VecR{} + 1e-7f * seed;
  // Without -ffast-math the chains cannot be reassociated or folded: every multiply-add runs.
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 24
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b;
  }
  float total = 0.0f;
  for (int c = 0; c < kChains; ++c) {
    for (int j = 0; j < kRegLanes; ++j) total += acc[c][j];
  }
  return total;
}

}  // namespace
}  // namespace claimbench

// FLOPs one thread does per iteration of ClaimbenchFmaPeak (two per multiply-add lane).
extern "C" int64_t ClaimbenchFmaFlopsPerIter() {
  return 2 * claimbench::kChains * claimbench::kRegLanes;
}

// `iters` iterations on each of `threads` threads (the calling one included); writes the
// seconds from their release to the last one's end to *seconds. Returns the chains' sum.
extern "C" double ClaimbenchFmaPeak(int64_t iters, int32_t threads, double* seconds) {
  const int64_t num_threads = threads < 1 ? 1 : threads;
  std::vector<float> sums(num_threads * 16);  // a cache line apart
  claimbench::TimedShares(
      num_threads,
      [&](int64_t t) { sums[t * 16] = claimbench::Chains(iters, 1.0f + t); },
      seconds);
  double total = 0.0;
  for (int64_t t = 0; t < num_threads; ++t) total += sums[t * 16];
  return total;
}
