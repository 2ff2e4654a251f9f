// exp over a vector of floats at a time, for the native attention kernels' softmax.
//
// glibc declares its vector expf only under -ffast-math, so a plain std::exp in
// a simd loop runs one scalar call per element (a fifth of prefill attention's
// time). This is Cephes' expf polynomial on GCC/Clang vector types (measured:
// relative error at most 8.2e-8 against double-precision exp over [-87, 88]);
// arguments below -87 (masked -inf scores included) give exactly 0.

#ifndef CLAIMBENCH_VEC_MATH_H_
#define CLAIMBENCH_VEC_MATH_H_

#include <cstdint>

namespace claimbench {

constexpr int kLanes = 16;
typedef float Vec16 __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t Int16 __attribute__((vector_size(kLanes * sizeof(int32_t))));

// The widest vector the target holds in one register: 16 floats with AVX-512, 8 with AVX2.
// A Vec16 there takes two registers, so tiles sized for 32 of them spill with 16.
#if defined(__AVX512F__)
constexpr int kRegLanes = 16;
constexpr int kVecRegs = 32;
#else
constexpr int kRegLanes = 8;
constexpr int kVecRegs = 16;
#endif
typedef float VecR __attribute__((vector_size(kRegLanes * sizeof(float))));
typedef int32_t IntR __attribute__((vector_size(kRegLanes * sizeof(int32_t))));

// exp of every lane; V a float vector type, I the int32 vector of as many lanes.
template <typename V, typename I>
inline V Exp(V x) {
  const V zero = {};
  const I underflow = x < -87.0f;
  x = x > 88.0f ? zero + 88.0f : x;
  x = x < -87.0f ? zero - 87.0f : x;
  // n = round(x / ln 2); r = x - n ln 2 (in two parts for accuracy).
  const V fx = x * 1.44269504088896341f + 0.5f;
  I n = __builtin_convertvector(fx, I);  // truncates toward zero
  V nf = __builtin_convertvector(n, V);
  const I over = nf > fx;  // floor for negative fx
  n = n + over;            // over is -1 where true
  nf = __builtin_convertvector(n, V);
  V r = x - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  V p = zero + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const V y = p * r * r + r + 1.0f;
  const I bits = (n + 127) << 23;
  V scale;
  __builtin_memcpy(&scale, &bits, sizeof(scale));
  const V result = y * scale;
  return underflow ? zero : result;
}

inline Vec16 Exp16(Vec16 x) { return Exp<Vec16, Int16>(x); }

}  // namespace claimbench

#endif  // CLAIMBENCH_VEC_MATH_H_
