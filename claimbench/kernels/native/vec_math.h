// exp over 16 floats at a time, for the native attention kernels' softmax.
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

inline Vec16 Exp16(Vec16 x) {
  const Vec16 zero = {};
  const Int16 underflow = x < -87.0f;
  x = x > 88.0f ? zero + 88.0f : x;
  x = x < -87.0f ? zero - 87.0f : x;
  // n = round(x / ln 2); r = x - n ln 2 (in two parts for accuracy).
  const Vec16 fx = x * 1.44269504088896341f + 0.5f;
  Int16 n = __builtin_convertvector(fx, Int16);  // truncates toward zero
  Vec16 nf = __builtin_convertvector(n, Vec16);
  const Int16 over = nf > fx;  // floor for negative fx
  n = n + over;                // over is -1 where true
  nf = __builtin_convertvector(n, Vec16);
  Vec16 r = x - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  Vec16 p = zero + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const Vec16 y = p * r * r + r + 1.0f;
  const Int16 bits = (n + 127) << 23;
  Vec16 scale;
  __builtin_memcpy(&scale, &bits, sizeof(scale));
  const Vec16 result = y * scale;
  return underflow ? zero : result;
}

}  // namespace claimbench

#endif  // CLAIMBENCH_VEC_MATH_H_
