// The decode kernel's inner loops for the common shapes, specialized at compile time.
//
// With head_dim D and the query group G known to the compiler, one KV head's G queries, their
// output accumulators and the rows just loaded all stay in vector registers while that head
// attends a page (D = 64, G = 2: 20 of them); each head's state is loaded and stored once per
// page, not once per token. Scores are a dot product per token and query,
// reduced across lanes at the end; the softmax is rescaled once per page (online softmax).
// Rows are read in place from f32 pages (`stride` floats apart) or from a page's rows
// dequantized once into a tile. HeadState is sized for AVX-512's 32 registers; QueryState, for
// targets with 16 (AVX2), attends a head's queries one at a time; PageState, for models with
// few query heads, attends every KV head of an f32 page together, and PageRowState does the
// same with vectors one register wide and its state in L1 (AVX2).

#ifndef CLAIMBENCH_DECODE_TILES_H_
#define CLAIMBENCH_DECODE_TILES_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "vec_math.h"

namespace claimbench {

typedef float Vec8 __attribute__((vector_size(8 * sizeof(float))));
typedef float Vec4 __attribute__((vector_size(4 * sizeof(float))));

// The sum of a vector's lanes, in registers. Written as halves copied out with memcpy, GCC 12
// stored each score's vector to the stack and reloaded its halves (twice per token and query in
// the score pass). With AVX-512's own reduction, on one core of a 2-core Zen 4 host (the kernel
// alone, 64 sequences of 200-640 tokens, 27 MB of f32 KV in random page order, alternating call
// by call): 0.88-0.94 of the time (four runs), 0.90 with the pages in L1.
#if defined(__AVX512F__)
inline float HorizontalSum(Vec16 v) { return _mm512_reduce_add_ps(reinterpret_cast<__m512>(v)); }
#else
inline float HorizontalSum(Vec16 v) {
  Vec8 lo, hi;
  std::memcpy(&lo, &v, sizeof(lo));
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof(lo), sizeof(hi));
  const Vec8 a = lo + hi;
  Vec4 a_lo, a_hi;
  std::memcpy(&a_lo, &a, sizeof(a_lo));
  std::memcpy(&a_hi, reinterpret_cast<const char*>(&a) + sizeof(a_lo), sizeof(a_hi));
  const Vec4 b = a_lo + a_hi;
  return (b[0] + b[2]) + (b[1] + b[3]);
}
#endif

// The same for 8 lanes (one AVX2 register; QueryState's dots there).
#if defined(__AVX__)
inline float HorizontalSum(Vec8 v) {
  const __m256 x = reinterpret_cast<__m256>(v);
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  const Vec4 b = reinterpret_cast<Vec4>(h);
  return (b[0] + b[2]) + (b[1] + b[3]);
}
#else
inline float HorizontalSum(Vec8 v) {
  Vec4 lo, hi;
  std::memcpy(&lo, &v, sizeof(lo));
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof(lo), sizeof(hi));
  const Vec4 b = lo + hi;
  return (b[0] + b[2]) + (b[1] + b[3]);
}
#endif

template <typename V>
inline V Load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline Vec16 LoadVec(const float* p) {
  Vec16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void StoreVec(float* p, Vec16 v) { std::memcpy(p, &v, sizeof(v)); }

constexpr int64_t kCacheLine = 64;

// Prefetches `lines` cache lines from `from` (none when null) into the outer caches, not L1
// (read, locality 1: prefetcht2 on x86); returns where the next call continues. The loop
// steps a pointer: GCC 12 at -O3 deletes the same loop written over a line index.
// Measured on a 2-core Zen 4 host, the decode kernel alone (64 sequences of 384 tokens, 25 MB
// of f32 KV in random page order), this hint against L1's alternating call by call in one
// process: the tiled loop 27-31% less time a call (four runs; each next page then fetched
// whole), the general one 5-18% (two); with 4 MB already in cache, 1.03 of the time (one run).
// A whole page (16 KB at the shipped shapes) fetched into the 32 KB L1 at once likely evicted
// the page being read.
inline const char* PrefetchLines(const char* from, int64_t lines) {
  if (from == nullptr) return nullptr;
  const char* end = from + lines * kCacheLine;
  for (const char* line = from; line < end; line += kCacheLine) __builtin_prefetch(line, 0, 1);
  return end;
}

// One query's scores of a page's n tokens, s[0, n) (room for n rounded up to kLanes):
// soft-capped, exponentiated in place against the running max m (updated), their sum folded
// into the running sum l. Returns the factor that rescales what was accumulated before.
inline float PageSoftmax(float* s, int64_t n, float soft_cap, float& m, float& l) {
  if (soft_cap > 0.0f) {
    for (int64_t t = 0; t < n; ++t) s[t] = soft_cap * std::tanh(s[t] / soft_cap);
  }
  float page_max = s[0];
  for (int64_t t = 1; t < n; ++t) page_max = s[t] > page_max ? s[t] : page_max;
  const int64_t padded = (n + kLanes - 1) / kLanes * kLanes;
  for (int64_t t = n; t < padded; ++t) s[t] = -std::numeric_limits<float>::infinity();
  const float m_new = m > page_max ? m : page_max;
  const float rescale = std::exp(m - m_new);
  Vec16 sum = {};
  for (int64_t c = 0; c < padded; c += kLanes) {
    const Vec16 e = Exp16(LoadVec(s + c) - m_new);
    StoreVec(s + c, e);
    sum += e;
  }
  l = l * rescale + HorizontalSum(sum);
  m = m_new;
  return rescale;
}

// The online-softmax state of one KV head's G queries over one sequence, in vectors V of L
// floats: what HeadState and QueryState share (they differ in how they attend a page).
template <typename V, int L, int D, int G>
struct SoftmaxState {
  static constexpr int kChunks = D / L;
  V q[G][kChunks];    // queries, pre-multiplied by the softmax scale
  V acc[G][kChunks];  // unnormalized output
  float m[G], l[G];   // running max and sum of exponentials

  void Init(const float* queries, float sm_scale) {
    for (int g = 0; g < G; ++g) {
      for (int c = 0; c < kChunks; ++c) {
        q[g][c] = Load<V>(queries + g * D + c * L) * sm_scale;
        acc[g][c] = V{};
      }
      m[g] = -std::numeric_limits<float>::infinity();
      l[g] = 0.0f;
    }
  }

  void Store(float* out) const {
    for (int g = 0; g < G; ++g) {
      const float inv = 1.0f / (l[g] > 1e-30f ? l[g] : 1e-30f);
      for (int c = 0; c < kChunks; ++c) {
        const V o = acc[g][c] * inv;
        std::memcpy(out + g * D + c * L, &o, sizeof(o));
      }
    }
  }
};

// All G queries of a KV head attend each token together, in 16-lane vectors (AVX-512).
template <int D, int G>
struct HeadState : SoftmaxState<Vec16, kLanes, D, G> {
  using Base = SoftmaxState<Vec16, kLanes, D, G>;
  using Base::acc, Base::kChunks, Base::l, Base::m, Base::q;

  // Attend n (<= stride of `scores`, a multiple of kLanes) tokens whose K rows start at
  // `k` and V rows at `v`, `row_stride` floats from one token to the next. `scores` is
  // scratch: G rows of `score_stride` floats. With `ahead` set, each pass over a token (the
  // score pass and the value pass: 2n in all) also prefetches the next `ahead_lines` cache
  // lines from `ahead` on (the memory read later), into the outer caches.
  void Attend(const float* k, const float* v, int64_t row_stride, int64_t n, float soft_cap,
              float* scores, int64_t score_stride, const char* ahead = nullptr,
              int64_t ahead_lines = 0) {
    // Local copies: the compiler keeps them in registers across the token loops.
    Vec16 qr[G][kChunks], a[G][kChunks];
    for (int g = 0; g < G; ++g) {
      for (int c = 0; c < kChunks; ++c) {
        qr[g][c] = q[g][c];
        a[g][c] = acc[g][c];
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      ahead = PrefetchLines(ahead, ahead_lines);
      const float* kt = k + t * row_stride;
      Vec16 kr[kChunks];
      for (int c = 0; c < kChunks; ++c) kr[c] = LoadVec(kt + c * kLanes);
      for (int g = 0; g < G; ++g) {
        Vec16 dot = qr[g][0] * kr[0];
        for (int c = 1; c < kChunks; ++c) dot += qr[g][c] * kr[c];
        scores[g * score_stride + t] = HorizontalSum(dot);
      }
    }
    float weight_scale[G];
    for (int g = 0; g < G; ++g) {
      weight_scale[g] = PageSoftmax(scores + g * score_stride, n, soft_cap, m[g], l[g]);
    }
    for (int g = 0; g < G; ++g) {
      if (weight_scale[g] != 1.0f) {
        for (int c = 0; c < kChunks; ++c) a[g][c] *= weight_scale[g];
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      ahead = PrefetchLines(ahead, ahead_lines);
      const float* vt = v + t * row_stride;
      Vec16 vr[kChunks];
      for (int c = 0; c < kChunks; ++c) vr[c] = LoadVec(vt + c * kLanes);
      for (int g = 0; g < G; ++g) {
        const float w = scores[g * score_stride + t];
        for (int c = 0; c < kChunks; ++c) a[g][c] += w * vr[c];
      }
    }
    for (int g = 0; g < G; ++g) {
      for (int c = 0; c < kChunks; ++c) acc[g][c] = a[g][c];
    }
  }

};

// The online-softmax state of one KV head's G queries, attended one query at a time with
// vectors one register wide (kRegLanes): for targets with 16 vector registers (AVX2), where
// HeadState's G queries and accumulators (20 of AVX-512's 32 registers at D = 64, G = 2)
// would spill. A query's score pass holds its D / kRegLanes query vectors and two partial
// dots; its value pass, its accumulators; the G passes over a page's rows after the first
// read them from L1.
template <int D, int G>
struct QueryState : SoftmaxState<VecR, kRegLanes, D, G> {
  using Base = SoftmaxState<VecR, kRegLanes, D, G>;
  using Base::acc, Base::kChunks, Base::l, Base::m, Base::q;
  // The value pass's accumulators held at once: at most 8 of the 16 registers.
  static constexpr int kPart = kChunks < 8 ? kChunks : 8;
  static_assert(D % kRegLanes == 0 && kChunks % kPart == 0, "whole vectors, whole parts");

  // HeadState::Attend's contract. The prefetches ride on the first query's 2n token passes.
  void Attend(const float* k, const float* v, int64_t row_stride, int64_t n, float soft_cap,
              float* scores, int64_t score_stride, const char* ahead = nullptr,
              int64_t ahead_lines = 0) {
    for (int g = 0; g < G; ++g) {
      float* s = scores + g * score_stride;
      VecR qg[kChunks];  // a local copy stays in registers: `s` may alias the members
      for (int c = 0; c < kChunks; ++c) qg[c] = q[g][c];
      for (int64_t t = 0; t < n; ++t) {
        ahead = PrefetchLines(ahead, ahead_lines);
        const float* kt = k + t * row_stride;
        // Two partial dots: half the multiply-add chain's length.
        VecR dot[2] = {qg[0] * Load<VecR>(kt), VecR{}};
        if (kChunks > 1) dot[1] = qg[1] * Load<VecR>(kt + kRegLanes);
        for (int c = 2; c < kChunks; ++c) dot[c % 2] += qg[c] * Load<VecR>(kt + c * kRegLanes);
        s[t] = HorizontalSum(dot[0] + dot[1]);
      }
      const float rescale = PageSoftmax(s, n, soft_cap, m[g], l[g]);
      for (int part = 0; part < kChunks; part += kPart) {
        VecR a[kPart];
        for (int c = 0; c < kPart; ++c) a[c] = acc[g][part + c] * rescale;
        for (int64_t t = 0; t < n; ++t) {
          if (part == 0) ahead = PrefetchLines(ahead, ahead_lines);
          const float* vt = v + t * row_stride + part * kRegLanes;
          const float w = s[t];
          for (int c = 0; c < kPart; ++c) a[c] += w * Load<VecR>(vt + c * kRegLanes);
        }
        for (int c = 0; c < kPart; ++c) acc[g][part + c] = a[c];
      }
      if (g == 0) ahead_lines = 0;
    }
  }

};


// Every KV head of a page at once, token by token: H KV heads of G queries each, all H * G
// queries and their accumulators in 16-lane vectors (H * G * D / 16 of each, at most 16: the
// shipped model's 4 queries of D = 64 take 16 and 16 of AVX-512's 32 registers, the queries in
// the score pass and the accumulators in the value pass). The score pass reads each token's K
// rows of every head and the value pass its V rows, so each walks the page front to back once;
// HeadState walks it once per KV head and pass. Through XLA with both threads, at the shipped
// model's shape (64 sequences of 300-600 tokens, f32 pages in random order, four layer pools in
// turn; a 2-core Zen 4 host, the loops alternating call by call): 0.81-0.88 of HeadState's
// time in three runs (21 GB/s of KV against 17-19).
template <int D, int H, int G>
struct PageState : SoftmaxState<Vec16, kLanes, D, H * G> {
  using Base = SoftmaxState<Vec16, kLanes, D, H * G>;
  using Base::acc, Base::kChunks, Base::l, Base::m, Base::q;
  static constexpr int kQueries = H * G;
  static_assert(kQueries * kChunks <= 16, "the queries (or the accumulators) fit 16 vectors");

  // Attend n tokens of an f32 page in place, token t's rows (K0 V0 K1 V1 ..., D floats each)
  // at `tokens + t * token_stride`. `scores`: kQueries rows of `score_stride` floats, scratch.
  // With `ahead` set, each token pass of either pass also prefetches the next `ahead_lines`
  // cache lines from `ahead` on (the memory read later), into the outer caches.
  void Attend(const float* tokens, int64_t token_stride, int64_t n, float soft_cap,
              float* scores, int64_t score_stride, const char* ahead = nullptr,
              int64_t ahead_lines = 0) {
    {
      Vec16 qr[kQueries][kChunks];  // a local copy stays in registers through the pass
      for (int j = 0; j < kQueries; ++j) {
        for (int c = 0; c < kChunks; ++c) qr[j][c] = q[j][c];
      }
      for (int64_t t = 0; t < n; ++t) {
        ahead = PrefetchLines(ahead, ahead_lines);
        const float* token = tokens + t * token_stride;
        for (int h = 0; h < H; ++h) {
          Vec16 kr[kChunks];
          for (int c = 0; c < kChunks; ++c) kr[c] = LoadVec(token + 2 * h * D + c * kLanes);
          for (int g = 0; g < G; ++g) {
            const int j = h * G + g;
            Vec16 dot = qr[j][0] * kr[0];
            for (int c = 1; c < kChunks; ++c) dot += qr[j][c] * kr[c];
            scores[j * score_stride + t] = HorizontalSum(dot);
          }
        }
      }
    }
    Vec16 a[kQueries][kChunks];
    for (int j = 0; j < kQueries; ++j) {
      const float rescale = PageSoftmax(scores + j * score_stride, n, soft_cap, m[j], l[j]);
      for (int c = 0; c < kChunks; ++c) a[j][c] = acc[j][c] * rescale;
    }
    for (int64_t t = 0; t < n; ++t) {
      ahead = PrefetchLines(ahead, ahead_lines);
      const float* token = tokens + t * token_stride;
      for (int h = 0; h < H; ++h) {
        Vec16 vr[kChunks];
        for (int c = 0; c < kChunks; ++c) vr[c] = LoadVec(token + (2 * h + 1) * D + c * kLanes);
        for (int g = 0; g < G; ++g) {
          const int j = h * G + g;
          const float w = scores[j * score_stride + t];
          for (int c = 0; c < kChunks; ++c) a[j][c] += w * vr[c];
        }
      }
    }
    for (int j = 0; j < kQueries; ++j) {
      for (int c = 0; c < kChunks; ++c) acc[j][c] = a[j][c];
    }
  }
};

// PageState's walk (every KV head of an f32 page, token by token, each pass front to back
// once) with vectors one register wide and the queries and accumulators in memory (L1): for
// targets with 16 vector registers (AVX2), where PageState's 16-lane state spills. A token's
// K (or V) row of a head is loaded into registers once and used by the head's G queries.
template <int D, int H, int G>
struct PageRowState : SoftmaxState<VecR, kRegLanes, D, H * G> {
  using Base = SoftmaxState<VecR, kRegLanes, D, H * G>;
  using Base::acc, Base::kChunks, Base::l, Base::m, Base::q;
  static constexpr int kQueries = H * G;

  // PageState::Attend's contract.
  void Attend(const float* tokens, int64_t token_stride, int64_t n, float soft_cap,
              float* scores, int64_t score_stride, const char* ahead = nullptr,
              int64_t ahead_lines = 0) {
    for (int64_t t = 0; t < n; ++t) {
      ahead = PrefetchLines(ahead, ahead_lines);
      const float* token = tokens + t * token_stride;
      for (int h = 0; h < H; ++h) {
        VecR kr[kChunks];
        for (int c = 0; c < kChunks; ++c) kr[c] = Load<VecR>(token + 2 * h * D + c * kRegLanes);
        for (int g = 0; g < G; ++g) {
          const int j = h * G + g;
          VecR dot[2] = {q[j][0] * kr[0], VecR{}};
          if (kChunks > 1) dot[1] = q[j][1] * kr[1];
          for (int c = 2; c < kChunks; ++c) dot[c % 2] += q[j][c] * kr[c];
          scores[j * score_stride + t] = HorizontalSum(dot[0] + dot[1]);
        }
      }
    }
    for (int j = 0; j < kQueries; ++j) {
      const float rescale = PageSoftmax(scores + j * score_stride, n, soft_cap, m[j], l[j]);
      if (rescale != 1.0f) {
        for (int c = 0; c < kChunks; ++c) acc[j][c] *= rescale;
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      ahead = PrefetchLines(ahead, ahead_lines);
      const float* token = tokens + t * token_stride;
      for (int h = 0; h < H; ++h) {
        VecR vr[kChunks];
        for (int c = 0; c < kChunks; ++c) {
          vr[c] = Load<VecR>(token + (2 * h + 1) * D + c * kRegLanes);
        }
        for (int g = 0; g < G; ++g) {
          const int j = h * G + g;
          const float w = scores[j * score_stride + t];
          for (int c = 0; c < kChunks; ++c) acc[j][c] += w * vr[c];
        }
      }
    }
  }
};

}  // namespace claimbench

#endif  // CLAIMBENCH_DECODE_TILES_H_
