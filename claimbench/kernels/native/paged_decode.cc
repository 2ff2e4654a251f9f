// Paged decode attention for CPUs, called from XLA through the typed FFI.
//
// One query token per sequence slot, attending over that sequence's pages in
// place: no gathered copy of the cache is ever made, which is what an XLA:CPU
// formulation cannot avoid (gather, then transposes for the batched dots).
// Decode is bound by memory bandwidth, so each page is streamed once: a pass
// for the scores of every head (the next page prefetched meanwhile), one
// softmax rescale per page and query, then the value sum over the same page,
// now in L1. Sequences are split across the kernels' threads. Softmax and
// accumulation are in f32.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "decode_page_regs.h"
#include "decode_tiles.h"
#include "paged_kv.h"
#include "parallel.h"
#include "vec_math.h"
#include "xla/ffi/api/ffi.h"

namespace claimbench {
namespace {

struct Decode {
  PagedKV kv;
  const float* q;             // [n, num_q_heads, head_dim]
  const int32_t* kv_lens;     // [n]; 0 = nothing to attend (output zeros)
  const int32_t* page_table;  // [n, pages_per_seq]
  float* out;                 // [n, num_q_heads, head_dim]
  int64_t num_q_heads, pages_per_seq;
  float sm_scale, soft_cap;   // soft_cap 0 = off
  int32_t sliding_window;     // 0 = off
};

// 64-byte-aligned scratch of `floats` floats, held by `buffer`.
inline float* AlignedScratch(std::vector<float>& buffer, int64_t floats) {
  buffer.resize(floats + kLanes);
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buffer.data()) + 63) &
                                  ~uintptr_t{63});
}

void AttendSequence(const Decode& p, int64_t seq) {
  const PagedKV& kv = p.kv;
  const int64_t d = kv.head_dim, page_size = kv.page_size;
  const int64_t num_kv_heads = kv.rows / 2;
  const int64_t group = p.num_q_heads / num_kv_heads;
  const int64_t num_q = p.num_q_heads;
  float* __restrict out = p.out + seq * num_q * d;  // accumulators, [num_q, d]
  std::memset(out, 0, sizeof(float) * num_q * d);
  const int64_t len = p.kv_lens[seq];
  if (len <= 0) return;
  const int64_t first = p.sliding_window > 0 ? std::max<int64_t>(0, len - p.sliding_window) : 0;
  const int32_t* table = p.page_table + seq * p.pages_per_seq;
  const float* __restrict q = p.q + seq * num_q * d;  // [num_q, d]; head h owns rows h*G..

  // Scores per query row, padded to whole vectors: [num_q, stride].
  const int64_t stride = (page_size + kLanes - 1) / kLanes * kLanes;
  std::vector<float> buffer;
  float* __restrict scores = AlignedScratch(buffer, num_q * stride + 2 * num_q);
  float* __restrict m = scores + num_q * stride;
  float* __restrict l = m + num_q;
  for (int64_t j = 0; j < num_q; ++j) {
    m[j] = -std::numeric_limits<float>::infinity();
    l[j] = 0.0f;
  }
  float k_scratch[kMaxHeadDim], v_scratch[kMaxHeadDim];
  const int64_t token_bytes = kv.token_bytes();
  const char* page_base = static_cast<const char*>(kv.pages);

  for (int64_t start = first - first % page_size; start < len; start += page_size) {
    const int64_t page = table[start / page_size];
    const bool has_next = start + page_size < len;
    const char* next_page =
        has_next ? page_base + table[start / page_size + 1] * page_size * token_bytes : nullptr;
    const int64_t lo = std::max(start, first), hi = std::min(start + page_size, len);
    const int64_t n = hi - lo;
    const int64_t slot0 = page * page_size + lo % page_size;
    for (int64_t t = 0; t < n; ++t) {
      if (has_next) {
        const char* row = next_page + (lo % page_size + t) * token_bytes;
        PrefetchLines(row, (token_bytes + kCacheLine - 1) / kCacheLine);
      }
      for (int64_t h = 0; h < num_kv_heads; ++h) {
        const float* __restrict k = kv.Row(slot0 + t, 2 * h, k_scratch);
        for (int64_t g = 0; g < group; ++g) {
          const float* __restrict qg = q + (h * group + g) * d;
          float s = 0.0f;
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < d; ++i) s += qg[i] * k[i];
          s *= p.sm_scale;
          if (p.soft_cap > 0.0f) s = p.soft_cap * std::tanh(s / p.soft_cap);
          scores[(h * group + g) * stride + t] = s;
        }
      }
    }
    // One rescale per page and query, then exponentiate in place.
    for (int64_t j = 0; j < num_q; ++j) {
      float* __restrict s = scores + j * stride;
      float page_max = s[0];
      for (int64_t t = 1; t < n; ++t) page_max = std::max(page_max, s[t]);
      for (int64_t t = n; t < stride; ++t) s[t] = -std::numeric_limits<float>::infinity();
      const float m_new = std::max(m[j], page_max);
      const float rescale = std::exp(m[j] - m_new);
      float sum = 0.0f;
      for (int64_t c = 0; c < stride; c += kLanes) {
        const Vec16 e = Exp16(*reinterpret_cast<const Vec16*>(s + c) - m_new);
        *reinterpret_cast<Vec16*>(s + c) = e;
        for (int64_t t = 0; t < kLanes; ++t) sum += e[t];
      }
      l[j] = l[j] * rescale + sum;
      m[j] = m_new;
      if (rescale != 1.0f) {
        float* __restrict a = out + j * d;
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) a[i] *= rescale;
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < num_kv_heads; ++h) {
        const float* __restrict v = kv.Row(slot0 + t, 2 * h + 1, v_scratch);
        for (int64_t g = 0; g < group; ++g) {
          const int64_t j = h * group + g;
          const float w = scores[j * stride + t];
          float* __restrict a = out + j * d;
#pragma omp simd
          for (int64_t i = 0; i < d; ++i) a[i] += w * v[i];
        }
      }
    }
  }
  for (int64_t j = 0; j < num_q; ++j) {
    const float inv = 1.0f / std::max(l[j], 1e-30f);
    float* __restrict a = out + j * d;
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) a[i] *= inv;
  }
}

// One sequence's pages as the specialized loops walk them: from the page holding the window's
// first token to the last, each with the slot of its first attended token, how many tokens it
// attends and the page after it (null for the last), which the loops prefetch meanwhile.
struct SequencePages {
  const char* base;
  const int32_t* table;
  int64_t page_size, page_bytes, len, first;

  SequencePages(const Decode& p, int64_t seq)
      : base(static_cast<const char*>(p.kv.pages)),
        table(p.page_table + seq * p.pages_per_seq),
        page_size(p.kv.page_size),
        page_bytes(p.kv.page_size * p.kv.token_bytes()),
        len(p.kv_lens[seq]),
        first(p.sliding_window > 0 ? std::max<int64_t>(0, len - p.sliding_window) : 0) {}

  // The page holding token `token`.
  const char* Page(int64_t token) const { return base + table[token / page_size] * page_bytes; }

  // fn(slot0, n, next) for each page in order.
  template <typename Fn>
  void Walk(Fn&& fn) const {
    for (int64_t start = first - first % page_size; start < len; start += page_size) {
      const int64_t lo = std::max(start, first), hi = std::min(start + page_size, len);
      const char* next = start + page_size < len ? Page(start + page_size) : nullptr;
      fn(table[start / page_size] * page_size + lo % page_size, hi - lo, next);
    }
  }
};

// The specialized path (decode_tiles.h): page by page, each KV head's G queries attend the
// page with their state in registers (State: HeadState, all G at once, or QueryState, one at a
// time). A page is read whole and in order (all heads of a token
// are adjacent), and the next one is prefetched meanwhile; pages not stored as f32 are
// dequantized one page and head at a time into a tile.
template <int D, int G, template <int, int> class State>
void AttendSequenceTiled(const Decode& p, int64_t seq) {
  const PagedKV& kv = p.kv;
  const int64_t page_size = kv.page_size, rows = kv.rows, num_kv_heads = rows / 2;
  float* out = p.out + seq * p.num_q_heads * D;
  const SequencePages walk(p, seq);
  if (walk.len <= 0) {
    std::memset(out, 0, sizeof(float) * p.num_q_heads * D);
    return;
  }
  const bool in_place = kv.storage == Storage::kF32;
  const int64_t score_stride = (page_size + kLanes - 1) / kLanes * kLanes;
  std::vector<float> buffer;
  float* scores =
      AlignedScratch(buffer, G * score_stride + (in_place ? 0 : 2 * page_size * D));
  float* k_tile = scores + G * score_stride;
  float* v_tile = k_tile + page_size * D;
  std::vector<State<D, G>> states(num_kv_heads);
  for (int64_t h = 0; h < num_kv_heads; ++h) {
    states[h].Init(p.q + (seq * p.num_q_heads + h * G) * D, p.sm_scale);
  }
  // The first page is fetched whole at once: nothing is read before it.
  PrefetchLines(walk.Page(walk.first), walk.page_bytes / kCacheLine);
  // While f32 pages are attended in place, the next page is fetched a few lines per token and
  // pass, each head's passes fetching an equal share. Measured on a 2-core Zen 4 host (the
  // kernel alone, 64 sequences of 256-512 tokens, 25 MB of f32 KV; the two ways alternating
  // call by call in one process, two runs): 0.77-0.79 of the time of fetching the whole next
  // page at once before attending this one (a burst of 256 prefetches, which stalls the loop
  // until the memory system has taken them), pages in random order; 0.71-0.75 with each
  // sequence's pages in order. Our engine's rounds (benchmarks/engine_vs_vllm.py's workload,
  // six alternating pairs in one process): 1.17x output tokens/s by the median (1.11-1.21).
  const int64_t share_lines = (walk.page_bytes / num_kv_heads + kCacheLine - 1) / kCacheLine;
  walk.Walk([&](int64_t slot0, int64_t n, const char* next) {
    // Spread over this page's 2n token passes a head where its share divides evenly; else
    // (a partial first page, or pages not read in place) the share is fetched at once.
    const bool spread = next != nullptr && in_place && share_lines % (2 * n) == 0;
    for (int64_t h = 0; h < num_kv_heads; ++h) {
      const char* ahead = next == nullptr ? nullptr : next + h * share_lines * kCacheLine;
      if (!spread) PrefetchLines(ahead, share_lines);
      if (in_place) {
        const float* k = static_cast<const float*>(kv.pages) + (slot0 * rows + 2 * h) * D;
        states[h].Attend(k, k + D, rows * D, n, p.soft_cap, scores, score_stride,
                         spread ? ahead : nullptr, spread ? share_lines / (2 * n) : 0);
      } else {
        for (int64_t t = 0; t < n; ++t) {  // not f32: Row dequantizes into the tile
          kv.Row(slot0 + t, 2 * h, k_tile + t * D);
          kv.Row(slot0 + t, 2 * h + 1, v_tile + t * D);
        }
        states[h].Attend(k_tile, v_tile, D, n, p.soft_cap, scores, score_stride);
      }
    }
  });
  for (int64_t h = 0; h < num_kv_heads; ++h) states[h].Store(out + h * G * D);
}

// The page loop (decode_tiles.h: PageState or PageRowState): every KV head of each f32 page
// together, in place. The next page is prefetched as in AttendSequenceTiled, its lines spread
// over this page's 2n token passes.
template <int D, int H, int G, template <int, int, int> class State>
void AttendSequencePage(const Decode& p, int64_t seq) {
  const int64_t token_stride = p.kv.rows * D;
  float* out = p.out + seq * p.num_q_heads * D;
  const SequencePages walk(p, seq);
  if (walk.len <= 0) {
    std::memset(out, 0, sizeof(float) * p.num_q_heads * D);
    return;
  }
  const int64_t score_stride = (walk.page_size + kLanes - 1) / kLanes * kLanes;
  std::vector<float> buffer;
  float* scores = AlignedScratch(buffer, H * G * score_stride);
  const int64_t page_lines = (walk.page_bytes + kCacheLine - 1) / kCacheLine;
  const float* pages = static_cast<const float*>(p.kv.pages);
  State<D, H, G> state;
  state.Init(p.q + seq * p.num_q_heads * D, p.sm_scale);
  PrefetchLines(walk.Page(walk.first), page_lines);
  walk.Walk([&](int64_t slot0, int64_t n, const char* next) {
    const bool spread = next != nullptr && page_lines % (2 * n) == 0;
    if (!spread) PrefetchLines(next, page_lines);
    state.Attend(pages + slot0 * token_stride, token_stride, n, p.soft_cap, scores, score_stride,
                 spread ? next : nullptr, spread ? page_lines / (2 * n) : 0);
  });
  state.Store(out);
}

using AttendFn = void (*)(const Decode&, int64_t);

template <int D, template <int, int> class State>
AttendFn PickGroup(int64_t group) {
  switch (group) {
    case 1: return AttendSequenceTiled<D, 1, State>;
    case 2: return AttendSequenceTiled<D, 2, State>;
    case 4: return AttendSequenceTiled<D, 4, State>;
    case 8: return AttendSequenceTiled<D, 8, State>;
    default: return AttendSequence;
  }
}

// HeadState keeps a KV head's queries and accumulators in vector registers (D = 64, G = 2: 20
// 512-bit ones). AVX-512 has 32 such registers; with AVX2's 16 of 256 bits every Vec16 takes
// two and the state spills: that loop was slower than the general one (Zen 3,
// benchmarks/attention_kernel.py decode-heavy f32: 6.3 ms against 3.9 ms). QueryState attends
// one query at a time with vectors one register wide, and there it pays: built for AVX2
// (CLAIMBENCH_NATIVE_MARCH=znver3) on a 2-core Zen 4 host, one core, 27 MB of f32 KV a call in
// random page order, alternating call by call: 0.70 of the general loop's time at D = 64 and
// 0.83 at D = 128 (0.55 and 0.59 with the pages in L2); through XLA with both threads, 0.74.
// With AVX-512, HeadState stays: QueryState took 1.13-1.15 of its time.
//
// The page loop walks each f32 page front to back once a pass, every KV head of a token
// together, for models with few query heads (PickPageGroup's shapes: the shipped model's 4
// queries of D = 64): PageState with AVX-512 (its queries and accumulators in 16-lane
// registers), PageRowState without (one register wide, the queries and accumulators in L1,
// where PageState's state would spill AVX2's 16 registers). Built for AVX2 on the 2-core Zen 4
// host, the decode kernel alone at the shipped model's shape (64 sequences of 300-600 tokens,
// 30 MB of f32 KV a call in random page order, four pools in turn, both threads; alternating
// pass by pass in one process): PageRowState 0.79 of QueryState's time (23.7 against 18.8
// GB/s of KV); built for AVX-512, 1.17 of PageState's.
//
// PageRegState (decode_page_regs.h) takes PageRowState's place on AVX2: the same page walk with
// the state in registers, in passes that fit them. On a 2-core Zen 3 host (AVX2 only), the
// kernel alone at that shape, one thread, alternating process by process: 1.4-2x PageRowState's
// KV rate with the KV in L3 (14-29 against 10-15 GB/s, median and best pass), the same out of
// cache (7.2-7.6 against 7.0 GB/s: one thread's DRAM reads bind there, with pages in random
// order or contiguous, prefetched one to three pages ahead, into any cache level).
//
// So the default is the page loop where it applies (PageState with AVX-512, PageRegState with
// AVX2) and else HeadState with AVX-512, QueryState without. CLAIMBENCH_NATIVE_DECODE forces
// one: page (this build's page loop, else its default fallback), page-reg (PageRegState on an
// AVX2 build, PageRowState on others; else QueryState), page-row (PageRowState on any build,
// else QueryState), tiled (HeadState), tiled-query (QueryState) or general; the tests run each
// on every host.
#if defined(__AVX512F__)
constexpr bool kAvx512 = true;
#else
constexpr bool kAvx512 = false;
#endif

enum class Loop { kPage, kPageReg, kPageRow, kTiled, kTiledQuery, kGeneral };

Loop ChosenLoop() {
  const char* forced = std::getenv("CLAIMBENCH_NATIVE_DECODE");
  if (forced == nullptr || *forced == '\0') return Loop::kPage;
  if (std::strcmp(forced, "page-reg") == 0) return Loop::kPageReg;
  if (std::strcmp(forced, "page-row") == 0) return Loop::kPageRow;
  if (std::strcmp(forced, "tiled") == 0) return Loop::kTiled;
  if (std::strcmp(forced, "tiled-query") == 0) return Loop::kTiledQuery;
  if (std::strcmp(forced, "general") == 0) return Loop::kGeneral;
  return Loop::kPage;
}

// The page loop with State for f32 pages where every query fits 16 vectors (num_q_heads *
// head_dim <= 256: the shipped model's 4 x 64), else nullptr.
template <int D, template <int, int, int> class State>
AttendFn PickPageGroup(int64_t num_kv_heads, int64_t group) {
  switch (num_kv_heads * 8 + group) {
    case 1 * 8 + 1: return AttendSequencePage<D, 1, 1, State>;
    case 1 * 8 + 2: return AttendSequencePage<D, 1, 2, State>;
    case 2 * 8 + 1: return AttendSequencePage<D, 2, 1, State>;
    default: break;
  }
  if constexpr (D == 64) {
    switch (num_kv_heads * 8 + group) {
      case 1 * 8 + 4: return AttendSequencePage<D, 1, 4, State>;
      case 2 * 8 + 2: return AttendSequencePage<D, 2, 2, State>;
      case 4 * 8 + 1: return AttendSequencePage<D, 4, 1, State>;
      default: break;
    }
  }
  return nullptr;
}

// PageRowState is taken at D = 64 only: at 128 a token's K row alone is AVX2's 16 registers
// (not measured there; QueryState is).
template <template <int, int, int> class State>
AttendFn PickPage(const PagedKV& kv, int64_t group, int64_t max_head_dim) {
  if (kv.storage != Storage::kF32 || kv.head_dim > max_head_dim) return nullptr;
  switch (kv.head_dim) {
    case 64: return PickPageGroup<64, State>(kv.rows / 2, group);
    case 128: return PickPageGroup<128, State>(kv.rows / 2, group);
    default: return nullptr;
  }
}

template <template <int, int> class State>
AttendFn PickHeadDim(int64_t head_dim, int64_t group) {
  switch (head_dim) {
    case 64: return PickGroup<64, State>(group);
    case 128: return PickGroup<128, State>(group);
    default: return AttendSequence;
  }
}

// The specialized kernel for this shape where it pays here, else the general one.
AttendFn PickAttend(const PagedKV& kv, int64_t group) {
  const int64_t head_dim = kv.head_dim;
  switch (ChosenLoop()) {
    case Loop::kPage:
      if constexpr (kAvx512) {
        if (AttendFn page = PickPage<PageState>(kv, group, 128)) return page;
        return PickHeadDim<HeadState>(head_dim, group);
      } else {
        if (AttendFn page = PickPage<PageRegState>(kv, group, 64)) return page;
        return PickHeadDim<QueryState>(head_dim, group);
      }
    case Loop::kPageReg:
      if (AttendFn page = PickPage<PageRegState>(kv, group, 64)) return page;
      return PickHeadDim<QueryState>(head_dim, group);
    case Loop::kPageRow:
      if (AttendFn page = PickPage<PageRowState>(kv, group, 64)) return page;
      return PickHeadDim<QueryState>(head_dim, group);
    case Loop::kTiled: return PickHeadDim<HeadState>(head_dim, group);
    case Loop::kTiledQuery: return PickHeadDim<QueryState>(head_dim, group);
    case Loop::kGeneral: return AttendSequence;
  }
  return AttendSequence;
}

ffi::Error PagedDecodeImpl(ffi::Buffer<ffi::F32> q, ffi::AnyBuffer pages,
                           ffi::Buffer<ffi::F32> scales, ffi::Buffer<ffi::S32> kv_lens,
                           ffi::Buffer<ffi::S32> page_table, ffi::ResultBuffer<ffi::F32> out,
                           float sm_scale, float soft_cap, int32_t sliding_window) {
  Decode p;
  if (ffi::Error error = DescribePages(pages, scales, &p.kv); error.failure()) return error;
  auto q_dims = q.dimensions();
  auto table_dims = page_table.dimensions();
  if (q_dims.size() != 3 || table_dims.size() != 2 || q_dims[2] != p.kv.head_dim ||
      q_dims[1] % (p.kv.rows / 2) != 0 || table_dims[0] != q_dims[0] ||
      kv_lens.element_count() != static_cast<size_t>(q_dims[0])) {
    return ffi::Error::InvalidArgument("paged_decode: q, kv_lens and page table disagree");
  }
  p.q = q.typed_data();
  p.kv_lens = kv_lens.typed_data();
  p.page_table = page_table.typed_data();
  p.out = out->typed_data();
  p.num_q_heads = q_dims[1];
  p.pages_per_seq = table_dims[1];
  p.sm_scale = sm_scale;
  p.soft_cap = soft_cap;
  p.sliding_window = sliding_window;
  for (int64_t seq = 0; seq < q_dims[0]; ++seq) {
    const int32_t* row = p.page_table + seq * p.pages_per_seq;
    ffi::Error error =
        CheckBlockTable("paged_decode", seq, p.kv_lens[seq], row, p.pages_per_seq, p.kv);
    if (error.failure()) return error;
  }
  const AttendFn attend = PickAttend(p.kv, p.num_q_heads / (p.kv.rows / 2));
  ParallelFor(q_dims[0], [&p, attend](int64_t seq) { attend(p, seq); });
  return ffi::Error::Success();
}

}  // namespace
}  // namespace claimbench

XLA_FFI_DEFINE_HANDLER_SYMBOL(ClaimbenchPagedDecode, claimbench::PagedDecodeImpl,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Attr<float>("sm_scale")
                                  .Attr<float>("soft_cap")
                                  .Attr<int32_t>("sliding_window"));
