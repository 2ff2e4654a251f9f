// Reading the paged KV cache in place from native CPU kernels.
//
// Pages are [num_pages, page_size, 2 * num_kv_heads, head_dim] with K of head h
// at row 2h and V at row 2h + 1 (kernels/kv_quant.py). Storage may be f32, f16,
// bf16 (or its uint16 bit container), int8 with per-row f32 scales
// [num_pages, scale_lanes] (page p's row: token t's head rows at t * rows + r, padded to
// 128 lanes), or fp8 e4m3fn (or its uint8 bit
// container) with per-tensor scales f32[2] = (k_scale, v_scale).

#ifndef CLAIMBENCH_PAGED_KV_H_
#define CLAIMBENCH_PAGED_KV_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#ifdef __F16C__
#include <immintrin.h>
#endif

#include "xla/ffi/api/ffi.h"

namespace claimbench {

namespace ffi = xla::ffi;

constexpr int64_t kMaxHeadDim = 512;

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
inline const Fp8Table& Fp8() {
  static const Fp8Table table;
  return table;
}

enum class Storage { kF32, kF16, kBf16, kInt8, kFp8 };

struct PagedKV {
  const void* pages;
  const float* scales;  // int8: [num_pages, scale_lanes]; fp8: [2]; else unused
  Storage storage;
  int64_t num_pages, page_size, rows, head_dim;
  int64_t scale_lanes = 0;  // int8: floats per page of scales (page_size * rows, padded)

  int64_t token_bytes() const {
    const int64_t elem = storage == Storage::kF32                                 ? 4
                         : (storage == Storage::kF16 || storage == Storage::kBf16) ? 2
                                                                                   : 1;
    return rows * head_dim * elem;
  }

  // Row `row` of token `slot` (page * page_size + offset) as f32: in place for
  // f32 pages, else dequantized into scratch (head_dim floats).
  const float* Row(int64_t slot, int64_t row, float* scratch) const {
    const int64_t d = head_dim;
    const int64_t index = (slot * rows + row) * d;
    switch (storage) {
      case Storage::kF32:
        return static_cast<const float*>(pages) + index;
      case Storage::kF16: {
        const uint16_t* src = static_cast<const uint16_t*>(pages) + index;
        int64_t i = 0;
#ifdef __F16C__
        // Eight at a time in hardware. With only the software conversion below, f16 KV ran the
        // bf16-not-fp16 claim at 0.71x bf16's speed; with this, 0.86x.
        for (; i + 8 <= d; i += 8) {
          const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
          _mm256_storeu_ps(scratch + i, _mm256_cvtph_ps(half));
        }
#endif
        for (; i < d; ++i) scratch[i] = F16ToFloat(src[i]);
        break;
      }
      case Storage::kBf16: {
        const uint16_t* src = static_cast<const uint16_t*>(pages) + index;
        for (int64_t i = 0; i < d; ++i) scratch[i] = Bf16ToFloat(src[i]);
        break;
      }
      case Storage::kInt8: {
        const int8_t* src = static_cast<const int8_t*>(pages) + index;
        const int64_t page = slot / page_size, offset = slot % page_size;
        const float scale = scales[page * scale_lanes + offset * rows + row];
        for (int64_t i = 0; i < d; ++i) scratch[i] = static_cast<float>(src[i]) * scale;
        break;
      }
      case Storage::kFp8: {
        const uint8_t* src = static_cast<const uint8_t*>(pages) + index;
        const float scale = scales[row % 2];
        const float* table = Fp8().value;
        for (int64_t i = 0; i < d; ++i) scratch[i] = table[src[i]] * scale;
        break;
      }
    }
    return scratch;
  }
};

// Validate the pages and scales buffers and describe them; an error names the problem.
inline ffi::Error DescribePages(ffi::AnyBuffer pages, ffi::Buffer<ffi::F32> scales, PagedKV* kv) {
  auto dims = pages.dimensions();
  if (dims.size() != 4 || dims[2] % 2 != 0) {
    return ffi::Error::InvalidArgument("pages must be [num_pages, page_size, 2 * kv_heads, D]");
  }
  kv->num_pages = dims[0];
  kv->page_size = dims[1];
  kv->rows = dims[2];
  kv->head_dim = dims[3];
  if (kv->head_dim > kMaxHeadDim) {
    return ffi::Error::InvalidArgument("head_dim is larger than the native kernels support");
  }
  switch (pages.element_type()) {
    case ffi::DataType::F32: kv->storage = Storage::kF32; break;
    case ffi::DataType::F16: kv->storage = Storage::kF16; break;
    case ffi::DataType::BF16:
    case ffi::DataType::U16: kv->storage = Storage::kBf16; break;
    case ffi::DataType::S8: kv->storage = Storage::kInt8; break;
    case ffi::DataType::F8E4M3FN:
    case ffi::DataType::U8: kv->storage = Storage::kFp8; break;
    default: return ffi::Error::InvalidArgument("unsupported page dtype");
  }
  if (kv->storage == Storage::kInt8) {
    auto scale_dims = scales.dimensions();
    if (scale_dims.size() != 2 || scale_dims[0] != kv->num_pages ||
        scale_dims[1] < kv->page_size * kv->rows) {
      return ffi::Error::InvalidArgument(
          "int8 scales must be [num_pages, >= page_size * 2 * kv_heads] = [" +
          std::to_string(kv->num_pages) + ", >= " + std::to_string(kv->page_size * kv->rows) +
          "]");
    }
    kv->scale_lanes = scale_dims[1];
  } else if (kv->storage == Storage::kFp8 && scales.element_count() < 2) {
    return ffi::Error::InvalidArgument("fp8 pages need scales f32[2] (k_scale, v_scale)");
  }
  kv->pages = pages.untyped_data();
  kv->scales = scales.typed_data();
  return ffi::Error::Success();
}

// The kernels index the pages through the block table without clamping (an XLA gather
// would clamp; a C++ read past the pool reads whatever lies there, on a shared server
// another tenant's KV). So before any work: sequence `seq` of `kernel`, holding `kv_len`
// tokens, must fit its table row of `pages_per_seq` entries, and every entry it reads
// (those of positions [0, kv_len)) must name a page of the pool.
inline ffi::Error CheckBlockTable(const char* kernel, int64_t seq, int64_t kv_len,
                                  const int32_t* table_row, int64_t pages_per_seq,
                                  const PagedKV& kv) {
  if (kv_len <= 0) return ffi::Error::Success();
  const int64_t used = (kv_len + kv.page_size - 1) / kv.page_size;
  if (used > pages_per_seq) {
    return ffi::Error::InvalidArgument(
        std::string(kernel) + ": sequence " + std::to_string(seq) + ": kv_len=" +
        std::to_string(kv_len) + " needs " + std::to_string(used) + " pages of " +
        std::to_string(kv.page_size) + ", the block table has pages_per_seq=" +
        std::to_string(pages_per_seq));
  }
  for (int64_t j = 0; j < used; ++j) {
    const int64_t page = table_row[j];
    if (page < 0 || page >= kv.num_pages) {
      return ffi::Error::InvalidArgument(
          std::string(kernel) + ": sequence " + std::to_string(seq) + ": page index " +
          std::to_string(page) + " at block table entry " + std::to_string(j) +
          " is outside the pool [0, num_pages=" + std::to_string(kv.num_pages) + ")");
    }
  }
  return ffi::Error::Success();
}

}  // namespace claimbench

#endif  // CLAIMBENCH_PAGED_KV_H_
