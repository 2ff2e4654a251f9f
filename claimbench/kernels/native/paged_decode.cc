// Paged decode attention for CPUs, called from XLA through the typed FFI.
//
// One query token per sequence slot, attending over that sequence's pages in
// place: no gathered copy of the cache is ever made, which is what an XLA:CPU
// formulation cannot avoid (gather, then transposes for the batched dots).
// Pages are [num_pages, page_size, 2 * num_kv_heads, head_dim] with K of head
// h at row 2h and V at row 2h + 1 (kernels/kv_quant.py); page storage may be
// f32, f16, bf16 (or its uint16 bit container), int8 with per-row f32 scales
// [num_pages, page_size, 2 * num_kv_heads], or fp8 e4m3fn (or its uint8 bit
// container) with per-tensor scales f32[2] = (k_scale, v_scale).
//
// Work is split over sequences across XLA's intra-op thread pool. Each
// (sequence, kv head) keeps an online softmax for the head's query group and
// consumes its context a page at a time: scores for the page, one rescale,
// then the value sum. Softmax and accumulation are in f32.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int kMaxHeadDim = 512;
constexpr int kMaxGroup = 64;

inline float Bf16ToFloat(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof(out));
  return out;
}

inline float F16ToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; no infinities,
// 0x7f / 0xff are NaN.
struct Fp8Table {
  float value[256];
  Fp8Table() {
    for (int i = 0; i < 256; ++i) {
      int sign = i >> 7, exp = (i >> 3) & 0xf, mant = i & 0x7;
      float v;
      if (exp == 0xf && mant == 0x7) {
        v = std::numeric_limits<float>::quiet_NaN();
      } else if (exp == 0) {
        v = std::ldexp(static_cast<float>(mant) / 8.0f, -6);
      } else {
        v = std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
      }
      value[i] = sign ? -v : v;
    }
  }
};
const Fp8Table kFp8;

enum class Storage { kF32, kF16, kBf16, kInt8, kFp8 };

struct Problem {
  const float* q;            // [n, num_q_heads, head_dim]
  const void* pages;         // [num_pages, page_size, rows, head_dim]
  const float* scales;       // int8: [num_pages, page_size, rows]; fp8: [2]
  const int32_t* kv_lens;    // [n]; 0 = nothing to attend (output zeros)
  const int32_t* page_table; // [n, pages_per_seq]
  float* out;                // [n, num_q_heads, head_dim]
  Storage storage;
  int64_t num_seqs, num_pages, page_size, rows, head_dim, num_q_heads, pages_per_seq;
  float sm_scale, soft_cap;  // soft_cap 0 = off
  int32_t sliding_window;    // 0 = off
};

// Dequantize row `row` of token `slot` (page * page_size + offset) into dst.
inline void LoadRow(const Problem& p, int64_t slot, int64_t row, float* dst) {
  const int64_t d = p.head_dim;
  const int64_t index = (slot * p.rows + row) * d;
  switch (p.storage) {
    case Storage::kF32: {
      const float* src = static_cast<const float*>(p.pages) + index;
      for (int64_t i = 0; i < d; ++i) dst[i] = src[i];
      break;
    }
    case Storage::kF16: {
      const uint16_t* src = static_cast<const uint16_t*>(p.pages) + index;
      for (int64_t i = 0; i < d; ++i) dst[i] = F16ToFloat(src[i]);
      break;
    }
    case Storage::kBf16: {
      const uint16_t* src = static_cast<const uint16_t*>(p.pages) + index;
      for (int64_t i = 0; i < d; ++i) dst[i] = Bf16ToFloat(src[i]);
      break;
    }
    case Storage::kInt8: {
      const int8_t* src = static_cast<const int8_t*>(p.pages) + index;
      const float scale = p.scales[slot * p.rows + row];
      for (int64_t i = 0; i < d; ++i) dst[i] = static_cast<float>(src[i]) * scale;
      break;
    }
    case Storage::kFp8: {
      const uint8_t* src = static_cast<const uint8_t*>(p.pages) + index;
      const float scale = p.scales[row % 2];
      for (int64_t i = 0; i < d; ++i) dst[i] = kFp8.value[src[i]] * scale;
      break;
    }
  }
}

// f32 rows are read in place; other storages are dequantized into scratch.
inline const float* Row(const Problem& p, int64_t slot, int64_t row, float* scratch) {
  if (p.storage == Storage::kF32) {
    return static_cast<const float*>(p.pages) + (slot * p.rows + row) * p.head_dim;
  }
  LoadRow(p, slot, row, scratch);
  return scratch;
}

void AttendSequence(const Problem& p, int64_t seq) {
  const int64_t d = p.head_dim;
  const int64_t num_kv_heads = p.rows / 2;
  const int64_t group = p.num_q_heads / num_kv_heads;
  const int64_t num_q = p.num_q_heads;
  float* __restrict out = p.out + seq * num_q * d;  // accumulators, [num_q, d]
  std::memset(out, 0, sizeof(float) * num_q * d);
  const int64_t len = p.kv_lens[seq];
  if (len <= 0) return;
  const int64_t first = p.sliding_window > 0 ? std::max<int64_t>(0, len - p.sliding_window) : 0;
  const int32_t* table = p.page_table + seq * p.pages_per_seq;
  const float* __restrict q = p.q + seq * num_q * d;  // [num_q, d]; head h owns rows h*G..

  std::vector<float> buffer(num_q * p.page_size + 2 * num_q);
  float* __restrict scores = buffer.data();  // [num_q, page_size]
  float* __restrict m = scores + num_q * p.page_size;
  float* __restrict l = m + num_q;
  for (int64_t j = 0; j < num_q; ++j) {
    m[j] = -std::numeric_limits<float>::infinity();
    l[j] = 0.0f;
  }
  float k_scratch[kMaxHeadDim], v_scratch[kMaxHeadDim];

  const int64_t elem_bytes = p.storage == Storage::kF32 ? 4 : (p.storage == Storage::kF16 || p.storage == Storage::kBf16 ? 2 : 1);
  const int64_t token_bytes = p.rows * d * elem_bytes;
  const char* page_base = static_cast<const char*>(p.pages);

  // Page by page: one sequential pass for the scores (every head), the softmax
  // update, then the value sum over the same page, now in L1. The next page is
  // prefetched a token row at a time during the score pass.
  for (int64_t start = first - first % p.page_size; start < len; start += p.page_size) {
    const int64_t page = table[start / p.page_size];
    const bool has_next = start + p.page_size < len;
    const char* next_page =
        has_next ? page_base + table[start / p.page_size + 1] * p.page_size * token_bytes : nullptr;
    const int64_t lo = std::max(start, first), hi = std::min(start + p.page_size, len);
    const int64_t n = hi - lo;
    const int64_t slot0 = page * p.page_size + lo % p.page_size;
    for (int64_t t = 0; t < n; ++t) {
      if (has_next) {
        const char* row = next_page + (lo % p.page_size + t) * token_bytes;
        for (int64_t off = 0; off < token_bytes; off += 64) __builtin_prefetch(row + off);
      }
      for (int64_t h = 0; h < num_kv_heads; ++h) {
        const float* __restrict k = Row(p, slot0 + t, 2 * h, k_scratch);
        for (int64_t g = 0; g < group; ++g) {
          const float* __restrict qg = q + (h * group + g) * d;
          float s = 0.0f;
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < d; ++i) s += qg[i] * k[i];
          s *= p.sm_scale;
          if (p.soft_cap > 0.0f) s = p.soft_cap * std::tanh(s / p.soft_cap);
          scores[(h * group + g) * p.page_size + t] = s;
        }
      }
    }
    // One rescale per page and query, then exponentiate in place.
    for (int64_t j = 0; j < num_q; ++j) {
      float* __restrict s = scores + j * p.page_size;
      float page_max = s[0];
      for (int64_t t = 1; t < n; ++t) page_max = std::max(page_max, s[t]);
      const float m_new = std::max(m[j], page_max);
      const float rescale = std::exp(m[j] - m_new);
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t t = 0; t < n; ++t) {
        s[t] = std::exp(s[t] - m_new);
        sum += s[t];
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
        const float* __restrict v = Row(p, slot0 + t, 2 * h + 1, v_scratch);
        for (int64_t g = 0; g < group; ++g) {
          const int64_t j = h * group + g;
          const float w = scores[j * p.page_size + t];
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

// Sequences are claimed from a shared counter by the calling thread and by
// helpers scheduled on XLA's pool; the caller returns once every claimed
// sequence is done. State is shared-owned: a helper that starts late finds
// nothing left and exits without touching freed memory.
struct Shared {
  Problem problem;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
};

void Drain(Shared& shared) {
  const int64_t total = shared.problem.num_seqs;
  for (int64_t seq; (seq = shared.next.fetch_add(1)) < total;) {
    AttendSequence(shared.problem, seq);
    shared.done.fetch_add(1, std::memory_order_release);
  }
}

ffi::Error PagedDecodeImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::AnyBuffer pages,
                           ffi::Buffer<ffi::F32> scales, ffi::Buffer<ffi::S32> kv_lens,
                           ffi::Buffer<ffi::S32> page_table, ffi::ResultBuffer<ffi::F32> out,
                           float sm_scale, float soft_cap, int32_t sliding_window) {
  auto q_dims = q.dimensions();
  auto page_dims = pages.dimensions();
  auto table_dims = page_table.dimensions();
  if (q_dims.size() != 3 || page_dims.size() != 4 || table_dims.size() != 2) {
    return ffi::Error::InvalidArgument("paged_decode: expected q [n,Hq,D], pages [P,ps,2H,D], table [n,pps]");
  }
  Problem p;
  p.num_seqs = q_dims[0];
  p.num_q_heads = q_dims[1];
  p.head_dim = q_dims[2];
  p.num_pages = page_dims[0];
  p.page_size = page_dims[1];
  p.rows = page_dims[2];
  p.pages_per_seq = table_dims[1];
  if (page_dims[3] != p.head_dim || p.rows % 2 || p.num_q_heads % (p.rows / 2) ||
      table_dims[0] != p.num_seqs || kv_lens.element_count() != static_cast<size_t>(p.num_seqs)) {
    return ffi::Error::InvalidArgument("paged_decode: inconsistent shapes");
  }
  if (p.head_dim > kMaxHeadDim || p.num_q_heads / (p.rows / 2) > kMaxGroup) {
    return ffi::Error::InvalidArgument("paged_decode: head_dim or query group too large");
  }
  switch (pages.element_type()) {
    case ffi::DataType::F32: p.storage = Storage::kF32; break;
    case ffi::DataType::F16: p.storage = Storage::kF16; break;
    case ffi::DataType::BF16:
    case ffi::DataType::U16: p.storage = Storage::kBf16; break;
    case ffi::DataType::S8: p.storage = Storage::kInt8; break;
    case ffi::DataType::F8E4M3FN:
    case ffi::DataType::U8: p.storage = Storage::kFp8; break;
    default: return ffi::Error::InvalidArgument("paged_decode: unsupported page dtype");
  }
  const size_t want_scales = p.storage == Storage::kInt8
                                 ? static_cast<size_t>(p.num_pages * p.page_size * p.rows)
                                 : (p.storage == Storage::kFp8 ? 2 : 0);
  if (scales.element_count() < want_scales) {
    return ffi::Error::InvalidArgument("paged_decode: scales too small for the page dtype");
  }
  p.q = q.typed_data();
  p.pages = pages.untyped_data();
  p.scales = scales.typed_data();
  p.kv_lens = kv_lens.typed_data();
  p.page_table = page_table.typed_data();
  p.out = out->typed_data();
  p.sm_scale = sm_scale;
  p.soft_cap = soft_cap;
  p.sliding_window = sliding_window;

  auto shared = std::make_shared<Shared>();
  shared->problem = p;
  const int64_t helpers = std::min<int64_t>(pool.num_threads() - 1, p.num_seqs - 1);
  for (int64_t i = 0; i < helpers; ++i) {
    pool.Schedule([shared] { Drain(*shared); });
  }
  Drain(*shared);
  while (shared->done.load(std::memory_order_acquire) < p.num_seqs) {
    std::this_thread::yield();
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ClaimbenchPagedDecode, PagedDecodeImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<float>("sm_scale")
                                  .Attr<float>("soft_cap")
                                  .Attr<int32_t>("sliding_window"));
