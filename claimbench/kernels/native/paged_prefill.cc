// Paged prefill attention for CPUs, called from XLA through the typed FFI.
//
// The sequences after the decode group (prefill chunks, from position 0 or
// continuing a cached prefix) attend causally over their pages, read in place.
// Unlike decode this is compute-bound, so the work is tiled like a small GEMM:
// an item is (sequence, KV head, tile of query tokens); its rows (token, group
// member) meet the keys 16 at a time, transposed into an L1 tile so the score
// products run 16 keys to a vector, and the value sum runs along head_dim. An
// online softmax carries across key tiles, which stop at the tile's last
// position (and start at its sliding window). Items are split across the
// kernels' threads; output rows of other sequences are left as they came in.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "paged_kv.h"
#include "parallel.h"
#include "vec_math.h"
#include "xla/ffi/api/ffi.h"

namespace claimbench {
namespace {

constexpr int64_t kKeys = kLanes;  // keys per tile: one 512-bit vector of f32 scores
// Query rows per item: four registers of rows (64 with AVX-512, 32 with AVX2), so the score
// tile of two keys (eight accumulators) stays in registers on either.
constexpr int64_t kMaxRows = 4 * kRegLanes;

// 16 floats: one AVX-512 register, or split by the compiler where vectors are narrower.
typedef Vec16 KeyVec;

struct Prefill {
  PagedKV kv;
  const float* q;             // [T, num_q_heads, head_dim]
  const int32_t* cu_q_lens;   // [N + 1]
  const int32_t* kv_lens;     // [N]
  const int32_t* page_table;  // [N, pages_per_seq]
  float* out;                 // [T, num_q_heads, head_dim]
  int64_t num_q_heads, pages_per_seq;
  float sm_scale, soft_cap;   // soft_cap 0 = off
  int32_t sliding_window;     // 0 = off
};

struct Item {
  int64_t seq, head, first_token, num_tokens;
};

// Any head_dim: query rows one at a time against a transposed key tile. (Head
// dims that are multiples of 16 take AttendTileLanes below instead.)
void AttendTile(const Prefill& p, const Item& item) {
  const PagedKV& kv = p.kv;
  const int64_t d = kv.head_dim;
  const int64_t num_kv_heads = kv.rows / 2;
  const int64_t group = p.num_q_heads / num_kv_heads;
  const int64_t start = p.cu_q_lens[item.seq];
  const int64_t q_len = p.cu_q_lens[item.seq + 1] - start;
  const int64_t context = p.kv_lens[item.seq] - q_len;  // cached tokens before the chunk
  const int32_t* table = p.page_table + item.seq * p.pages_per_seq;
  const int64_t rows = item.num_tokens * group;

  alignas(64) float qt[kMaxRows * kMaxHeadDim];  // scaled queries, [rows, d]
  alignas(64) float acc[kMaxRows * kMaxHeadDim];
  alignas(64) float kt[kMaxHeadDim * kKeys];  // keys transposed, [d, kKeys]
  alignas(64) float vt[kKeys * kMaxHeadDim];  // values, [kKeys, d]
  alignas(64) float s[kMaxRows * kKeys];
  float m[kMaxRows], l[kMaxRows], scratch[kMaxHeadDim];
  int64_t pos[kMaxRows];

  for (int64_t j = 0; j < item.num_tokens; ++j) {
    for (int64_t g = 0; g < group; ++g) {
      const int64_t r = j * group + g;
      const float* src =
          p.q + ((start + item.first_token + j) * p.num_q_heads + item.head * group + g) * d;
      for (int64_t i = 0; i < d; ++i) qt[r * d + i] = src[i] * p.sm_scale;
      pos[r] = context + item.first_token + j;
      m[r] = -std::numeric_limits<float>::infinity();
      l[r] = 0.0f;
    }
  }
  std::memset(acc, 0, sizeof(float) * rows * d);
  const int64_t hi = context + item.first_token + item.num_tokens;  // past the last position
  int64_t lo = 0;
  if (p.sliding_window > 0) lo = std::max<int64_t>(0, pos[0] - p.sliding_window + 1);

  for (int64_t kb = lo - lo % kKeys; kb < hi; kb += kKeys) {
    const int64_t nk = std::min(kKeys, hi - kb);
    for (int64_t t = 0; t < kKeys; ++t) {
      if (t < nk) {
        const int64_t at = kb + t;
        const int64_t slot = table[at / kv.page_size] * kv.page_size + at % kv.page_size;
        const float* k = kv.Row(slot, 2 * item.head, scratch);
        for (int64_t i = 0; i < d; ++i) kt[i * kKeys + t] = k[i];
        const float* v = kv.Row(slot, 2 * item.head + 1, scratch);
        std::memcpy(vt + t * d, v, sizeof(float) * d);
      } else {
        for (int64_t i = 0; i < d; ++i) kt[i * kKeys + t] = 0.0f;
        std::memset(vt + t * d, 0, sizeof(float) * d);
      }
    }
    // Scores, eight rows at a time sharing each key vector (eight independent
    // FMA chains keep both FMA units busy).
    int64_t r = 0;
    for (; r + 8 <= rows; r += 8) {
      KeyVec acc8[8] = {};
      const float* q0 = qt + r * d;
      for (int64_t i = 0; i < d; ++i) {
        const KeyVec k = *reinterpret_cast<const KeyVec*>(kt + i * kKeys);
        for (int64_t u = 0; u < 8; ++u) acc8[u] += q0[u * d + i] * k;
      }
      for (int64_t u = 0; u < 8; ++u) *reinterpret_cast<KeyVec*>(s + (r + u) * kKeys) = acc8[u];
    }
    for (; r < rows; ++r) {
      KeyVec s0 = {};
      const float* q0 = qt + r * d;
      for (int64_t i = 0; i < d; ++i) s0 += q0[i] * *reinterpret_cast<const KeyVec*>(kt + i * kKeys);
      *reinterpret_cast<KeyVec*>(s + r * kKeys) = s0;
    }
    // Mask (only where the tile crosses a row's causal or window edge), online
    // softmax, value sum.
    for (r = 0; r < rows; ++r) {
      float* sr = s + r * kKeys;
      const int64_t last = pos[r];  // keys <= last, and > last - window
      const int64_t first = p.sliding_window > 0 ? last - p.sliding_window + 1 : 0;
      if (kb > last || kb + nk <= first) continue;  // nothing visible in this tile
      if (p.soft_cap > 0.0f) {
        for (int64_t t = 0; t < kKeys; ++t) sr[t] = p.soft_cap * std::tanh(sr[t] / p.soft_cap);
      }
      if (nk < kKeys || kb + kKeys - 1 > last || kb < first) {
        for (int64_t t = 0; t < kKeys; ++t) {
          const int64_t at = kb + t;
          if (t >= nk || at > last || at < first) sr[t] = -std::numeric_limits<float>::infinity();
        }
      }
      float tile_max = sr[0];
      for (int64_t t = 1; t < kKeys; ++t) tile_max = std::max(tile_max, sr[t]);
      const float m_new = std::max(m[r], tile_max);
      const float rescale = std::exp(m[r] - m_new);
      const Vec16 e = Exp16(*reinterpret_cast<const Vec16*>(sr) - m_new);
      *reinterpret_cast<Vec16*>(sr) = e;
      float sum = 0.0f;
      for (int64_t t = 0; t < kKeys; ++t) sum += e[t];
      l[r] = l[r] * rescale + sum;
      m[r] = m_new;
      float* __restrict a = acc + r * d;
      for (int64_t i = 0; i < d; ++i) a[i] *= rescale;
      for (int64_t t = 0; t < nk; ++t) {
        const float w = sr[t];
        const float* v = vt + t * d;
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) a[i] += w * v[i];
      }
    }
  }
  for (int64_t j = 0; j < item.num_tokens; ++j) {
    for (int64_t g = 0; g < group; ++g) {
      const int64_t r = j * group + g;
      const float inv = 1.0f / std::max(l[r], 1e-30f);
      float* dst =
          p.out + ((start + item.first_token + j) * p.num_q_heads + item.head * group + g) * d;
      for (int64_t i = 0; i < d; ++i) dst[i] = acc[r * d + i] * inv;
    }
  }
}

// The same work with query rows in vector lanes, for head_dim a multiple of the register
// width (kD): the softmax's max, rescale and sums run down columns of a key tile (as many
// keys as a register has lanes), so no horizontal reductions; keys are read as rows (each
// element broadcast against the transposed queries) and values as vectors along head_dim,
// both in place for f32 pages. Vectors are one register wide (VecR), so the tile fits the
// registers of AVX-512 and of AVX2 alike.
template <int64_t kD>
void AttendTileLanes(const Prefill& p, const Item& item) {
  static_assert(kD % kRegLanes == 0 && kD > 0, "head_dim: a multiple of the lanes");
  constexpr int64_t kRowVecs = kMaxRows / kRegLanes;
  constexpr int64_t kDVecs = kD / kRegLanes;
  // Two accumulator chains per row (even and odd keys) where they fit half the registers
  // (AVX-512); with AVX2's 16, head_dim 64 already takes 8 registers, enough chains alone.
  constexpr bool kTwoChains = 2 * kDVecs <= kVecRegs / 2;
  // Keys a score pass takes together, each a broadcast against the same loaded query vectors:
  // four with AVX-512's 32 registers (16 accumulators), two with AVX2's 16 (8). With two keys
  // and one value row at a time the AVX-512 loops loaded 0.75 and 1.25 vectors a multiply-add;
  // with four keys and two rows, 0.5 and 0.75, every output bit for bit the same. On a 2-core
  // Intel Xeon (AVX-512), benchmarks/attention_kernel.py's prefill-heavy step at the shipped
  // model's shape, alternating process by process (two pairs): 0.82-0.92 of the time on one
  // thread, 0.85-0.92 on two.
  constexpr int64_t kScoreKeys = kVecRegs == 32 ? 4 : 2;
  // Rows the value sum takes together, each V vector loaded once for both: two where their
  // two chains fit (2 x 2 x kDVecs accumulators; AVX-512 at head_dim 64), else one.
  constexpr int64_t kValueRows = kTwoChains && 4 * kDVecs + 2 * kDVecs + 4 <= kVecRegs ? 2 : 1;
  constexpr float kFloor = -1e30f;  // running max before any key: finite, so no inf - inf
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const PagedKV& kv = p.kv;
  const int64_t num_kv_heads = kv.rows / 2;
  const int64_t group = p.num_q_heads / num_kv_heads;
  const int64_t start = p.cu_q_lens[item.seq];
  const int64_t q_len = p.cu_q_lens[item.seq + 1] - start;
  const int64_t context = p.kv_lens[item.seq] - q_len;
  const int32_t* table = p.page_table + item.seq * p.pages_per_seq;
  const int64_t rows = item.num_tokens * group;
  const int64_t first_pos = context + item.first_token;
  const int64_t last_pos = first_pos + item.num_tokens - 1;

  alignas(64) float qt[kD * kMaxRows] = {};  // [d][row], scaled; padding rows zero
  alignas(64) float acc[kMaxRows * kD] = {};  // [row][d]
  alignas(64) float st[kRegLanes * kMaxRows];  // [key][row]: scores, then weights
  alignas(64) float resc[kMaxRows];
  alignas(64) float k_scratch[kRegLanes * kD], v_scratch[kRegLanes * kD];
  VecR m[kRowVecs], l[kRowVecs];
  IntR pos[kRowVecs];
  const float* krow[kRegLanes];
  const float* vrow[kRegLanes];

  for (int64_t r = 0; r < kMaxRows; ++r) {
    const int64_t j = r / group, g = r % group;
    pos[r / kRegLanes][r % kRegLanes] = r < rows ? static_cast<int32_t>(first_pos + j) : -1;
    if (r >= rows) continue;
    const float* src =
        p.q + ((start + item.first_token + j) * p.num_q_heads + item.head * group + g) * kD;
    for (int64_t i = 0; i < kD; ++i) qt[i * kMaxRows + r] = src[i] * p.sm_scale;
  }
  for (int64_t v = 0; v < kRowVecs; ++v) {
    m[v] = VecR{} + kFloor;
    l[v] = VecR{};
  }
  const int64_t hi = last_pos + 1;
  int64_t lo = 0;
  if (p.sliding_window > 0) lo = std::max<int64_t>(0, first_pos - p.sliding_window + 1);

  for (int64_t kb = lo - lo % kRegLanes; kb < hi; kb += kRegLanes) {
    const int64_t nk = std::min<int64_t>(kRegLanes, hi - kb);
    for (int64_t t = 0; t < nk; ++t) {
      const int64_t at = kb + t;
      const int64_t slot = table[at / kv.page_size] * kv.page_size + at % kv.page_size;
      krow[t] = kv.Row(slot, 2 * item.head, k_scratch + t * kD);
      vrow[t] = kv.Row(slot, 2 * item.head + 1, v_scratch + t * kD);
    }
    // Scores, kScoreKeys keys at a time, then two, then one: each score is one chain over
    // head_dim in order, however many keys share the query loads.
    int64_t t = 0;
    for (; t + kScoreKeys <= nk; t += kScoreKeys) {
      VecR a[kScoreKeys][kRowVecs] = {};
      const float* k[kScoreKeys];
      for (int64_t u = 0; u < kScoreKeys; ++u) k[u] = krow[t + u];
      for (int64_t i = 0; i < kD; ++i) {
        const VecR* q = reinterpret_cast<const VecR*>(qt + i * kMaxRows);
        for (int64_t v = 0; v < kRowVecs; ++v) {
          const VecR qv = q[v];
          for (int64_t u = 0; u < kScoreKeys; ++u) a[u][v] += k[u][i] * qv;
        }
      }
      for (int64_t u = 0; u < kScoreKeys; ++u) {
        for (int64_t v = 0; v < kRowVecs; ++v) {
          reinterpret_cast<VecR*>(st + (t + u) * kMaxRows)[v] = a[u][v];
        }
      }
    }
    for (; t + 2 <= nk; t += 2) {
      VecR a0[kRowVecs] = {}, a1[kRowVecs] = {};
      const float *k0 = krow[t], *k1 = krow[t + 1];
      for (int64_t i = 0; i < kD; ++i) {
        const VecR* q = reinterpret_cast<const VecR*>(qt + i * kMaxRows);
        for (int64_t v = 0; v < kRowVecs; ++v) {
          a0[v] += k0[i] * q[v];
          a1[v] += k1[i] * q[v];
        }
      }
      for (int64_t v = 0; v < kRowVecs; ++v) {
        reinterpret_cast<VecR*>(st + t * kMaxRows)[v] = a0[v];
        reinterpret_cast<VecR*>(st + (t + 1) * kMaxRows)[v] = a1[v];
      }
    }
    for (; t < nk; ++t) {
      VecR a0[kRowVecs] = {};
      for (int64_t i = 0; i < kD; ++i) {
        const VecR* q = reinterpret_cast<const VecR*>(qt + i * kMaxRows);
        for (int64_t v = 0; v < kRowVecs; ++v) a0[v] += krow[t][i] * q[v];
      }
      for (int64_t v = 0; v < kRowVecs; ++v) reinterpret_cast<VecR*>(st + t * kMaxRows)[v] = a0[v];
    }
    for (; t < kRegLanes; ++t) {
      for (int64_t r = 0; r < kMaxRows; ++r) st[t * kMaxRows + r] = neg_inf;
    }
    if (p.soft_cap > 0.0f) {
      for (int64_t i = 0; i < nk * kMaxRows; ++i) st[i] = p.soft_cap * std::tanh(st[i] / p.soft_cap);
    }
    // Mask only where the tile crosses some row's causal or window edge.
    const bool window_edge = p.sliding_window > 0 && kb < last_pos - p.sliding_window + 1;
    if (kb + nk - 1 > first_pos || window_edge) {
      for (t = 0; t < nk; ++t) {
        const int32_t at = static_cast<int32_t>(kb + t);
        VecR* sv = reinterpret_cast<VecR*>(st + t * kMaxRows);
        for (int64_t v = 0; v < kRowVecs; ++v) {
          IntR visible = at <= pos[v];
          if (p.sliding_window > 0) visible &= at > pos[v] - p.sliding_window;
          sv[v] = visible ? sv[v] : VecR{} + neg_inf;
        }
      }
    }
    // Online softmax down the key columns.
    for (int64_t v = 0; v < kRowVecs; ++v) {
      VecR tile_max = reinterpret_cast<const VecR*>(st)[v];
      for (t = 1; t < kRegLanes; ++t) {
        const VecR x = reinterpret_cast<const VecR*>(st + t * kMaxRows)[v];
        tile_max = x > tile_max ? x : tile_max;
      }
      const VecR m_new = tile_max > m[v] ? tile_max : m[v];
      const VecR rescale = Exp<VecR, IntR>(m[v] - m_new);
      VecR sum = {};
      for (t = 0; t < kRegLanes; ++t) {
        VecR* x = reinterpret_cast<VecR*>(st + t * kMaxRows) + v;
        *x = Exp<VecR, IntR>(*x - m_new);
        sum += *x;
      }
      l[v] = l[v] * rescale + sum;
      m[v] = m_new;
      reinterpret_cast<VecR*>(resc)[v] = rescale;
    }
    // Value sum: each row's accumulator stays in registers across the tile; kValueRows rows
    // at a time share each V vector's load, each row's chains summed as one row's alone are.
    int64_t r = 0;
    if constexpr (kValueRows == 2) {
      for (; r + 2 <= rows; r += 2) {
        VecR even[2][kDVecs], odd[2][kDVecs] = {};
        VecR* a0 = reinterpret_cast<VecR*>(acc + r * kD);
        VecR* a1 = reinterpret_cast<VecR*>(acc + (r + 1) * kD);
        for (int64_t c = 0; c < kDVecs; ++c) {
          even[0][c] = a0[c] * resc[r];
          even[1][c] = a1[c] * resc[r + 1];
        }
        for (t = 0; t + 2 <= nk; t += 2) {
          const float w00 = st[t * kMaxRows + r], w01 = st[(t + 1) * kMaxRows + r];
          const float w10 = st[t * kMaxRows + r + 1], w11 = st[(t + 1) * kMaxRows + r + 1];
          const VecR* v0 = reinterpret_cast<const VecR*>(vrow[t]);
          const VecR* v1 = reinterpret_cast<const VecR*>(vrow[t + 1]);
          for (int64_t c = 0; c < kDVecs; ++c) {
            const VecR x0 = v0[c], x1 = v1[c];
            even[0][c] += w00 * x0;
            odd[0][c] += w01 * x1;
            even[1][c] += w10 * x0;
            odd[1][c] += w11 * x1;
          }
        }
        if (t < nk) {
          const float w0 = st[t * kMaxRows + r], w1 = st[t * kMaxRows + r + 1];
          const VecR* v0 = reinterpret_cast<const VecR*>(vrow[t]);
          for (int64_t c = 0; c < kDVecs; ++c) {
            even[0][c] += w0 * v0[c];
            even[1][c] += w1 * v0[c];
          }
        }
        for (int64_t c = 0; c < kDVecs; ++c) {
          a0[c] = even[0][c] + odd[0][c];
          a1[c] = even[1][c] + odd[1][c];
        }
      }
    }
    for (; r < rows; ++r) {
      VecR even[kDVecs], odd[kDVecs] = {};
      VecR* a = reinterpret_cast<VecR*>(acc + r * kD);
      for (int64_t c = 0; c < kDVecs; ++c) even[c] = a[c] * resc[r];
      for (t = 0; t + 2 <= nk; t += 2) {
        const float w0 = st[t * kMaxRows + r], w1 = st[(t + 1) * kMaxRows + r];
        const VecR* v0 = reinterpret_cast<const VecR*>(vrow[t]);
        const VecR* v1 = reinterpret_cast<const VecR*>(vrow[t + 1]);
        for (int64_t c = 0; c < kDVecs; ++c) {
          even[c] += w0 * v0[c];
          if constexpr (kTwoChains) {
            odd[c] += w1 * v1[c];
          } else {
            even[c] += w1 * v1[c];
          }
        }
      }
      if (t < nk) {
        const float w0 = st[t * kMaxRows + r];
        const VecR* v0 = reinterpret_cast<const VecR*>(vrow[t]);
        for (int64_t c = 0; c < kDVecs; ++c) even[c] += w0 * v0[c];
      }
      for (int64_t c = 0; c < kDVecs; ++c) {
        if constexpr (kTwoChains) {
          a[c] = even[c] + odd[c];
        } else {
          a[c] = even[c];
        }
      }
    }
  }
  alignas(64) float lsum[kMaxRows];
  for (int64_t v = 0; v < kRowVecs; ++v) reinterpret_cast<VecR*>(lsum)[v] = l[v];
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t j = r / group, g = r % group;
    const float inv = 1.0f / std::max(lsum[r], 1e-30f);
    float* dst =
        p.out + ((start + item.first_token + j) * p.num_q_heads + item.head * group + g) * kD;
    for (int64_t i = 0; i < kD; ++i) dst[i] = acc[r * kD + i] * inv;
  }
}

ffi::Error PagedPrefillImpl(ffi::Buffer<ffi::F32> q, ffi::AnyBuffer pages,
                            ffi::Buffer<ffi::F32> scales, ffi::Buffer<ffi::S32> cu_q_lens,
                            ffi::Buffer<ffi::S32> kv_lens, ffi::Buffer<ffi::S32> page_table,
                            ffi::Buffer<ffi::S32> seq_range, ffi::Buffer<ffi::F32> out_in,
                            ffi::ResultBuffer<ffi::F32> out, float sm_scale, float soft_cap,
                            int32_t sliding_window) {
  Prefill p;
  if (ffi::Error error = DescribePages(pages, scales, &p.kv); error.failure()) return error;
  auto q_dims = q.dimensions();
  auto table_dims = page_table.dimensions();
  const int64_t num_slots = kv_lens.element_count();
  if (q_dims.size() != 3 || table_dims.size() != 2 || q_dims[2] != p.kv.head_dim ||
      q_dims[1] % (p.kv.rows / 2) != 0 || table_dims[0] != num_slots ||
      cu_q_lens.element_count() != static_cast<size_t>(num_slots + 1) ||
      seq_range.element_count() != 2 || out_in.element_count() != q.element_count()) {
    return ffi::Error::InvalidArgument("paged_prefill: inconsistent shapes");
  }
  const int64_t group = q_dims[1] / (p.kv.rows / 2);
  if (group > kMaxRows) {
    return ffi::Error::InvalidArgument("paged_prefill: query group larger than a row tile");
  }
  p.q = q.typed_data();
  p.cu_q_lens = cu_q_lens.typed_data();
  p.kv_lens = kv_lens.typed_data();
  p.page_table = page_table.typed_data();
  p.out = out->typed_data();
  p.num_q_heads = q_dims[1];
  p.pages_per_seq = table_dims[1];
  p.sm_scale = sm_scale;
  p.soft_cap = soft_cap;
  p.sliding_window = sliding_window;
  if (p.out != out_in.typed_data()) {
    std::memcpy(p.out, out_in.typed_data(), sizeof(float) * q.element_count());
  }
  const int32_t* range = seq_range.typed_data();
  const int64_t first_seq = std::max<int64_t>(range[0], 0);
  const int64_t end_seq = std::min<int64_t>(range[1], num_slots);
  const int64_t tile = std::max<int64_t>(1, kMaxRows / group);
  const int64_t num_tokens = q_dims[0];
  std::vector<Item> items;
  for (int64_t seq = first_seq; seq < end_seq; ++seq) {
    // Query rows are read and written at cu_q_lens, keys at positions up to kv_len: both
    // must stay inside their buffers before any work starts.
    const int64_t q_start = p.cu_q_lens[seq], q_end = p.cu_q_lens[seq + 1];
    const int64_t q_len = q_end - q_start, kv_len = p.kv_lens[seq];
    if (q_start < 0 || q_end < q_start || q_end > num_tokens || q_len > kv_len) {
      return ffi::Error::InvalidArgument(
          "paged_prefill: sequence " + std::to_string(seq) + ": query rows [" +
          std::to_string(q_start) + ", " + std::to_string(q_end) + ") with kv_len=" +
          std::to_string(kv_len) + " do not fit num_tokens=" + std::to_string(num_tokens) +
          " (need 0 <= start <= end <= num_tokens and end - start <= kv_len)");
    }
    const int32_t* row = p.page_table + seq * p.pages_per_seq;
    ffi::Error error = CheckBlockTable("paged_prefill", seq, kv_len, row, p.pages_per_seq, p.kv);
    if (error.failure()) return error;
    for (int64_t j = 0; j < q_len; j += tile) {
      for (int64_t h = 0; h < p.kv.rows / 2; ++h) {
        items.push_back({seq, h, j, std::min(tile, q_len - j)});
      }
    }
  }
  // Later tiles see more keys: hand them out first so threads finish together.
  std::stable_sort(items.begin(), items.end(), [&p](const Item& a, const Item& b) {
    const int64_t ka = p.kv_lens[a.seq] - (p.cu_q_lens[a.seq + 1] - p.cu_q_lens[a.seq]) +
                       a.first_token;
    const int64_t kb = p.kv_lens[b.seq] - (p.cu_q_lens[b.seq + 1] - p.cu_q_lens[b.seq]) +
                       b.first_token;
    return ka > kb;
  });
  const int64_t d = p.kv.head_dim;
  ParallelFor(static_cast<int64_t>(items.size()), [&p, &items, d](int64_t i) {
    if (d == 64) {
      AttendTileLanes<64>(p, items[i]);
    } else if (d == 128) {
      AttendTileLanes<128>(p, items[i]);
    } else {
      AttendTile(p, items[i]);
    }
  });
  return ffi::Error::Success();
}

}  // namespace
}  // namespace claimbench

XLA_FFI_DEFINE_HANDLER_SYMBOL(ClaimbenchPagedPrefill, claimbench::PagedPrefillImpl,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Attr<float>("sm_scale")
                                  .Attr<float>("soft_cap")
                                  .Attr<int32_t>("sliding_window"));
