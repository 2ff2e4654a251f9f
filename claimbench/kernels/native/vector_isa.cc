// The vector width this library was compiled for, which benchmarks report beside their
// figures: the -march the build used (native, or CLAIMBENCH_NATIVE_MARCH) decides it, not
// the CPU the process runs on. The kernels' tiles follow the same macros (vec_math.h).

extern "C" int ClaimbenchVectorBits() {
#if defined(__AVX512F__)
  return 512;
#elif defined(__AVX2__) && defined(__FMA__)
  return 256;
#else
  return 0;
#endif
}
