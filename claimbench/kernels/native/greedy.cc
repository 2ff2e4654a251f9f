// The greedy token and the log-sum-exp of each row of f32 logits [N, V], for the sampler:
// every step takes each sequence's greedy token (its token when greedy, its fallback when
// a temperature rounds to greedy) and the log-sum-exp its token's log-prob is reported
// against. XLA:CPU ran the two as separate reductions on one thread, a max and a
// first-index search (greedy_tokens) beside a max and an exp-sum (logsumexp): about
// 0.6 ms a decode step of the shipped model (64 rows of 4,096). Here one pass finds the
// row's max and whether it holds a NaN, one finds the first index of the max, and one sums
// exp(x - max); rows are split over the kernels' threads (parallel.h), so a row's result
// does not depend on the rows beside it.
//
// The same values as the jnp reference (kernels/native_greedy.py: greedy_tokens and
// jax.nn.logsumexp): the first index of the row's maximum, V - 1 for a row holding a NaN
// (no element equals a NaN maximum); log-sum-exp around the max where it is finite, else
// around 0 (+inf for a row holding +inf, -inf for a row of -inf, NaN with a NaN). The
// exp-sum is summed in another order than XLA's, so it matches to rounding, not bitwise.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "parallel.h"
#include "vec_math.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace claimbench {
namespace {

inline VecR LoadR(const float* p) {
  VecR v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// (max, holds a NaN) of x[0:v].
inline float RowMax(const float* x, int64_t v, bool& nan) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  VecR top = VecR{} + neg_inf;
  IntR unordered = {};
  int64_t i = 0;
  for (; i + kRegLanes <= v; i += kRegLanes) {
    const VecR a = LoadR(x + i);
    unordered |= a != a;
    top = a > top ? a : top;
  }
  float m = neg_inf;
  bool any_nan = false;
  for (int l = 0; l < kRegLanes; ++l) {
    m = top[l] > m ? top[l] : m;
    any_nan |= unordered[l] != 0;
  }
  for (; i < v; ++i) {
    any_nan |= x[i] != x[i];
    m = x[i] > m ? x[i] : m;
  }
  nan = any_nan;
  return m;
}

// The first index of `m` in x[0:v] (m is an element of it).
inline int64_t FirstIndexOf(const float* x, int64_t v, float m) {
  int64_t i = 0;
  for (; i + kRegLanes <= v; i += kRegLanes) {
    const IntR hit = LoadR(x + i) == m;
    bool any = false;
    for (int l = 0; l < kRegLanes; ++l) any |= hit[l] != 0;
    if (any) break;
  }
  for (; i < v; ++i) {
    if (x[i] == m) return i;
  }
  return v - 1;  // not reached: m is in the row
}

// Vectors summed per lane in f32 before the lanes fold into the double total: each lane's
// partial sum then holds at most kFoldVectors terms, so its rounding stays near f32's
// epsilon times log2(kFoldVectors) whatever V is (about 18,000 terms a lane at V = 150k
// summed in f32 alone drifted by about 1e-5 relative).
constexpr int64_t kFoldVectors = 256;

// log(sum(exp(x - shift))) + shift over x[0:v], for x - shift <= 0 (or all -inf).
inline float LogSumExp(const float* x, int64_t v, float shift) {
  double total = 0.0;
  int64_t i = 0;
  while (i + kRegLanes <= v) {
    const int64_t end = std::min(v - kRegLanes, i + (kFoldVectors - 1) * kRegLanes);
    VecR sum = {};
    for (; i <= end; i += kRegLanes) sum += Exp<VecR, IntR>(LoadR(x + i) - shift);
    for (int l = 0; l < kRegLanes; ++l) total += sum[l];
  }
  for (; i < v; ++i) total += std::exp(x[i] - shift);
  return static_cast<float>(std::log(total)) + shift;
}

void Row(const float* x, int64_t v, int32_t* token, float* lse) {
  bool nan = false;
  const float m = RowMax(x, v, nan);
  if (nan) {
    *token = static_cast<int32_t>(v - 1);
    *lse = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  *token = static_cast<int32_t>(FirstIndexOf(x, v, m));
  if (m == std::numeric_limits<float>::infinity()) {
    *lse = m;  // exp(+inf) sums to +inf
  } else {
    *lse = LogSumExp(x, v, std::isfinite(m) ? m : 0.0f);
  }
}

ffi::Error GreedyImpl(ffi::Buffer<ffi::F32> logits, ffi::ResultBuffer<ffi::S32> tokens,
                      ffi::ResultBuffer<ffi::F32> lse) {
  auto dims = logits.dimensions();
  if (dims.size() != 2 || dims[1] < 1 || tokens->dimensions().size() != 1 ||
      tokens->dimensions()[0] != dims[0] || lse->dimensions().size() != 1 ||
      lse->dimensions()[0] != dims[0]) {
    return ffi::Error::InvalidArgument(
        "greedy: need logits [N, V >= 1], tokens [N] and log-sum-exp [N]");
  }
  const int64_t n = dims[0], v = dims[1];
  if (v > std::numeric_limits<int32_t>::max()) {
    return ffi::Error::InvalidArgument("greedy: V must fit the i32 tokens (at most 2^31 - 1)");
  }
  const float* x = logits.typed_data();
  int32_t* out_tokens = tokens->typed_data();
  float* out_lse = lse->typed_data();
  ParallelFor(n, [=](int64_t r) { Row(x + r * v, v, out_tokens + r, out_lse + r); });
  return ffi::Error::Success();
}

}  // namespace
}  // namespace claimbench

XLA_FFI_DEFINE_HANDLER_SYMBOL(ClaimbenchGreedy, claimbench::GreedyImpl,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>());
