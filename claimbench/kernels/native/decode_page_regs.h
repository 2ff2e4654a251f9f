// The decode kernel's page loop for AVX2 (16 vector registers of 8 floats) with the work's
// state in registers: PageRegState.
//
// PageRowState (decode_tiles.h) walks each token of an f32 page once a pass, every KV head
// together, with the queries and output accumulators in memory: per token, every accumulator
// is loaded, multiplied-added and stored again, and every query's score is reduced across
// lanes on its own. PageRegState instead takes the page in passes small enough for the
// registers:
// - scores: one query at a time, eight tokens at once (the query's D / 8 vectors and eight
//   dot products: 16 registers, the K rows read as memory operands), the eight dots reduced
//   into one vector of eight scores together;
// - values: one KV head and part of D at a time (its G queries' accumulators for that part, at
//   most 8 registers, with the weights broadcast and the V rows loaded once for the G queries).
// The page's rows are read from memory by the first pass over them and from L1 after.

#ifndef CLAIMBENCH_DECODE_PAGE_REGS_H_
#define CLAIMBENCH_DECODE_PAGE_REGS_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "decode_tiles.h"
#include "vec_math.h"

namespace claimbench {

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)

// The sums of eight 8-lane vectors' lanes, as one vector: lane u holds the sum of d[u].
inline VecR SumsOfEight(const VecR d[8]) {
  auto m = [](VecR v) { return reinterpret_cast<__m256>(v); };
  const __m256 s01 = _mm256_hadd_ps(m(d[0]), m(d[1]));
  const __m256 s23 = _mm256_hadd_ps(m(d[2]), m(d[3]));
  const __m256 s45 = _mm256_hadd_ps(m(d[4]), m(d[5]));
  const __m256 s67 = _mm256_hadd_ps(m(d[6]), m(d[7]));
  // Each 128-bit half: partial sums of d[0..3] (s0123) and d[4..7] (s4567) over its lanes.
  const __m256 s0123 = _mm256_hadd_ps(s01, s23);
  const __m256 s4567 = _mm256_hadd_ps(s45, s67);
  const __m256 lo = _mm256_permute2f128_ps(s0123, s4567, 0x20);
  const __m256 hi = _mm256_permute2f128_ps(s0123, s4567, 0x31);
  return reinterpret_cast<VecR>(_mm256_add_ps(lo, hi));
}

// PageSoftmax (decode_tiles.h) in one-register vectors: its 16-lane exp, built for AVX2, ran
// in 128-bit halves through the stack, and its scalar max read back the scores just stored as
// vectors. Same contract, `s` with room for n rounded up to kRegLanes.
inline float PageSoftmaxRegs(float* s, int64_t n, float soft_cap, float& m, float& l) {
  if (soft_cap > 0.0f) {
    for (int64_t t = 0; t < n; ++t) s[t] = soft_cap * std::tanh(s[t] / soft_cap);
  }
  const int64_t padded = (n + kRegLanes - 1) / kRegLanes * kRegLanes;
  for (int64_t t = n; t < padded; ++t) s[t] = -std::numeric_limits<float>::infinity();
  VecR top = Load<VecR>(s);
  for (int64_t c = kRegLanes; c < padded; c += kRegLanes) {
    const VecR x = Load<VecR>(s + c);
    top = x > top ? x : top;
  }
  float page_max = top[0];
  for (int i = 1; i < kRegLanes; ++i) page_max = top[i] > page_max ? top[i] : page_max;
  const float m_new = m > page_max ? m : page_max;
  const float rescale = std::exp(m - m_new);
  VecR sum = {};
  for (int64_t c = 0; c < padded; c += kRegLanes) {
    const VecR e = Exp<VecR, IntR>(Load<VecR>(s + c) - m_new);
    std::memcpy(s + c, &e, sizeof(e));
    sum += e;
  }
  l = l * rescale + HorizontalSum(sum);
  m = m_new;
  return rescale;
}

template <int D, int H, int G>
struct PageRegState : SoftmaxState<VecR, kRegLanes, D, H * G> {
  using Base = SoftmaxState<VecR, kRegLanes, D, H * G>;
  using Base::acc, Base::kChunks, Base::l, Base::m, Base::q;
  static constexpr int kQueries = H * G;
  static constexpr int kGroup = 8;  // tokens whose scores one query computes at once
  // The value pass's chunks of D a pass: its G queries' accumulators in at most 8 registers.
  static constexpr int kPart = 8 / G < kChunks ? 8 / G : kChunks;
  static_assert(kRegLanes == 8 && kChunks * kRegLanes == D, "AVX2's 8-lane vectors, whole");
  static_assert(kPart >= 1 && kChunks % kPart == 0, "whole parts");

  // PageState::Attend's contract: n tokens of an f32 page in place, token t's rows (K0 V0 K1
  // V1 ..., D floats each) at `tokens + t * token_stride`; `scores`: kQueries rows of
  // `score_stride` (>= n rounded up to kLanes) floats, scratch. The next `2 n ahead_lines`
  // cache lines from `ahead` are prefetched into the outer caches as it goes.
  void Attend(const float* tokens, int64_t token_stride, int64_t n, float soft_cap,
              float* scores, int64_t score_stride, const char* ahead = nullptr,
              int64_t ahead_lines = 0) {
    // The prefetches spread where they divide evenly: half over the score pass (kQueries
    // queries' n / kGroup groups) and half over the value pass (H * kChunks / kPart passes of n
    // tokens), else all over the value pass, else issued with the first query's scores.
    // One thread's misses in flight bound its read here: prefetches issued only in the value
    // pass leave the memory idle through the score pass, and the page after waits on them.
    // Measured on a 2-core Zen 3 host (AVX2), the kernel alone at the shipped model's shape (64
    // sequences of 300-600 tokens, 30 MB of f32 KV a call, four pools in turn; four alternating
    // pairs of processes): 1.07-1.17x the KV rate of the value pass alone on two threads,
    // 1.08-1.20x on one (docs/performance/kernel_threads.md).
    constexpr int64_t kValuePasses = H * (kChunks / kPart);
    const bool halves = n % kGroup == 0 && (kGroup * ahead_lines) % kQueries == 0 &&
                        ahead_lines % kValuePasses == 0;
    const bool spread = halves || (2 * ahead_lines) % kValuePasses == 0;
    const int64_t group_lines = halves ? kGroup * ahead_lines / kQueries : 0;
    const int64_t value_lines = halves    ? ahead_lines / kValuePasses
                                : spread ? 2 * ahead_lines / kValuePasses
                                         : 0;
    const int64_t score_lines = spread ? 0 : ahead_lines;
    for (int j = 0; j < kQueries; ++j) {
      const int h = j / G;
      const float* k = tokens + 2 * h * D;
      float* s = scores + j * score_stride;
      VecR qj[kChunks];  // a local copy stays in registers: `s` may alias the members
      for (int c = 0; c < kChunks; ++c) qj[c] = q[j][c];
      int64_t t = 0;
      for (; t + kGroup <= n; t += kGroup) {
        ahead = PrefetchLines(ahead, group_lines + (j == 0 ? 2 * kGroup * score_lines : 0));
        VecR dot[kGroup];
        for (int u = 0; u < kGroup; ++u) dot[u] = qj[0] * Load<VecR>(k + (t + u) * token_stride);
        for (int c = 1; c < kChunks; ++c) {
          for (int u = 0; u < kGroup; ++u) {
            dot[u] += qj[c] * Load<VecR>(k + (t + u) * token_stride + c * kRegLanes);
          }
        }
        const VecR sums = SumsOfEight(dot);
        std::memcpy(s + t, &sums, sizeof(sums));
      }
      for (; t < n; ++t) {  // a partial page's last tokens
        if (j == 0) ahead = PrefetchLines(ahead, 2 * score_lines);
        const float* kt = k + t * token_stride;
        VecR dot[2] = {qj[0] * Load<VecR>(kt), VecR{}};
        if (kChunks > 1) dot[1] = qj[1] * Load<VecR>(kt + kRegLanes);
        for (int c = 2; c < kChunks; ++c) dot[c % 2] += qj[c] * Load<VecR>(kt + c * kRegLanes);
        s[t] = HorizontalSum(dot[0] + dot[1]);
      }
    }
    float rescale[kQueries];
    for (int j = 0; j < kQueries; ++j) {
      rescale[j] = PageSoftmaxRegs(scores + j * score_stride, n, soft_cap, m[j], l[j]);
    }
    for (int h = 0; h < H; ++h) {
      const float* v = tokens + (2 * h + 1) * D;
      for (int part = 0; part < kChunks; part += kPart) {
        VecR a[G][kPart];
        for (int g = 0; g < G; ++g) {
          for (int c = 0; c < kPart; ++c) a[g][c] = acc[h * G + g][part + c] * rescale[h * G + g];
        }
        const float* w = scores + h * G * score_stride;
        for (int64_t t = 0; t < n; ++t) {
          ahead = PrefetchLines(ahead, value_lines);
          const float* vt = v + t * token_stride + part * kRegLanes;
          VecR vr[kPart];
          for (int c = 0; c < kPart; ++c) vr[c] = Load<VecR>(vt + c * kRegLanes);
          for (int g = 0; g < G; ++g) {
            const float wg = w[g * score_stride + t];
            for (int c = 0; c < kPart; ++c) a[g][c] += wg * vr[c];
          }
        }
        for (int g = 0; g < G; ++g) {
          for (int c = 0; c < kPart; ++c) acc[h * G + g][part + c] = a[g][c];
        }
      }
    }
  }
};
#else
// Elsewhere (AVX-512 or no AVX2) "page-reg" runs PageRowState.
template <int D, int H, int G>
using PageRegState = PageRowState<D, H, G>;
#endif

}  // namespace claimbench

#endif  // CLAIMBENCH_DECODE_PAGE_REGS_H_
