// y = x @ w for f32 activations and a weight packed once, at load, into column panels.
//
// XLA:CPU's dot packs its weight operand on every call (the weights are runtime
// arguments of the step) and runs the engine's decode-step shapes (64 rows, K of 256
// or 768) at about 40% of the machine's FMA rate. Here the weight [K, N] arrives packed
// as panels [ceil(N / P), K, P] (column j of the weight is lane j % P of panel j / P;
// the last panel zero-padded; P is two vectors, 32 with AVX-512, 16 with AVX2), so a
// register tile of up to 12 (or 6) rows streams its panel front to back: per k, two
// vector loads of the panel and one broadcast of x per row feed two multiply-adds per
// row. Each output element is one f32 multiply-add chain over k = 0..K-1 in order,
// whatever the number of rows or how they are tiled, so a row's result does not depend
// on the batch it is in.
//
// Work items are (panel group, row block) pairs split over the kernels' threads (parallel.h).
//
// Gated (a llama MLP's silu(x @ gate) * (x @ up)): the gate and up weights [K, N] are packed
// together, panel j holding gate columns [jH, jH + H) in its first vector and the same up
// columns in its second (H = P / 2), so the tile's two accumulators of a row are a gate and
// its up, and the epilogue writes silu(gate) * up: H outputs a panel, on the kernels'
// threads, rather than two N-wide products and an XLA fusion over them on one thread.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "parallel.h"
#include "vec_math.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace claimbench {
namespace {

// The register tile is sized to the target's vector registers (vec_math.h): with AVX-512,
// 32 registers of 16 floats hold a 12 x 32 tile (24 accumulators, two panel vectors and a
// broadcast); with AVX2, 16 registers of 8 floats hold 6 x 16 (12 accumulators).
typedef VecR Vec;
constexpr int kMaxRows = kVecRegs == 32 ? 12 : 6;  // rows per register tile
constexpr int64_t kPanel = 2 * kRegLanes;            // columns per panel
constexpr int64_t kItemFlops = 1 << 22;              // about this much work per parallel item
constexpr int64_t kItemsPerThread = 4;               // at least this many items a thread, where panels allow
constexpr int64_t kMinItemFlops = 1 << 18;           // but items no smaller than this
constexpr int64_t kLine = 64;                        // bytes a cache line

inline Vec Load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// rows x (up to) 32 outputs of one panel: out[i, 0:cols] = x[i, :] @ panel; gated, rows x
// (up to) 16 outputs: silu(the first vector's product) * the second's. Meanwhile the cache
// lines [ahead, ahead_end) (a share of the next panel) are prefetched into the outer caches,
// up to two a step of k.
template <int kRows, bool kGated>
void Tile(const float* x, int64_t ldx, const float* panel, int64_t k_len, float* out,
          int64_t ldo, int64_t cols, const char* ahead, const char* ahead_end) {
  Vec acc0[kRows], acc1[kRows];
  for (int i = 0; i < kRows; ++i) acc0[i] = acc1[i] = Vec{};
  for (int64_t k = 0; k < k_len; ++k) {
    if (ahead < ahead_end) {
      __builtin_prefetch(ahead, 0, 1);
      __builtin_prefetch(ahead + kLine < ahead_end ? ahead + kLine : ahead, 0, 1);
      ahead += 2 * kLine;
    }
    const Vec w0 = Load(panel + k * kPanel);
    const Vec w1 = Load(panel + k * kPanel + kRegLanes);
    for (int i = 0; i < kRows; ++i) {
      const float a = x[i * ldx + k];
      acc0[i] += a * w0;
      acc1[i] += a * w1;
    }
  }
  for (int i = 0; i < kRows; ++i) {
    float* row = out + i * ldo;
    if constexpr (kGated) {
      const Vec g = acc0[i];
      const Vec y = g / (1.0f + Exp<Vec, IntR>(-g)) * acc1[i];
      if (cols == kRegLanes) {
        std::memcpy(row, &y, sizeof(Vec));
      } else {
        float lanes[kRegLanes];
        std::memcpy(lanes, &y, sizeof(Vec));
        std::memcpy(row, lanes, cols * sizeof(float));
      }
    } else if (cols == kPanel) {
      std::memcpy(row, &acc0[i], sizeof(Vec));
      std::memcpy(row + kRegLanes, &acc1[i], sizeof(Vec));
    } else {
      float lanes[kPanel];
      std::memcpy(lanes, &acc0[i], sizeof(Vec));
      std::memcpy(lanes + kRegLanes, &acc1[i], sizeof(Vec));
      std::memcpy(row, lanes, cols * sizeof(float));
    }
  }
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t,
                        const char*, const char*);

template <bool kGated, int... kRows>
constexpr TileFn kTiles[] = {nullptr, Tile<kRows + 1, kGated>...};
template <bool kGated, int... kRows>
constexpr auto& TilesUpTo(std::integer_sequence<int, kRows...>) {
  return kTiles<kGated, kRows...>;
}
constexpr auto& kTileFor = TilesUpTo<false>(std::make_integer_sequence<int, kMaxRows>());
constexpr auto& kGatedTileFor = TilesUpTo<true>(std::make_integer_sequence<int, kMaxRows>());

struct Dense {
  const float* x;
  const float* w;
  float* out;
  int64_t m, k, n, panels;
  bool gated;
};

// Rows [row0, row1) of panels [p0, p1), in register tiles of about equal height. While a
// panel's tiles run, the next panel of the item is prefetched, an equal share a tile: in a
// decode step the weights come from memory (the step's KV read since the last use has
// evicted them), and a tile that waits on its panel's lines computes nothing meanwhile. On a
// 2-core Zen 5 host, process against process: the head (64 rows by 256 x 4,096) with its
// weights evicted, 0.87 of the time (two pairs); benchmarks/engine_vs_vllm.py's workload,
// 1.05x output tokens/s by the median of eight pairs (within their spread), decode step
// 0.95x; at batch 1, decode step 0.95x (three pairs, each faster).
void Block(const Dense& d, int64_t row0, int64_t row1, int64_t p0, int64_t p1) {
  const int64_t rows = row1 - row0;
  const int64_t tiles = (rows + kMaxRows - 1) / kMaxRows;
  const int64_t panel_bytes = d.k * kPanel * static_cast<int64_t>(sizeof(float));
  const int64_t share = (panel_bytes / kLine + tiles - 1) / tiles * kLine;  // a tile's bytes
  for (int64_t p = p0; p < p1; ++p) {
    const float* panel = d.w + p * d.k * kPanel;
    const char* next = p + 1 < p1 ? reinterpret_cast<const char*>(panel + d.k * kPanel) : nullptr;
    const int64_t width = d.gated ? kRegLanes : kPanel;  // outputs a panel gives
    const int64_t col = p * width;
    const int64_t cols = std::min(width, d.n - col);
    const auto& tile_for = d.gated ? kGatedTileFor : kTileFor;
    int64_t r = row0;
    for (int64_t t = 0; t < tiles; ++t) {
      // Spread the rows evenly: 64 rows are 11, 11, 11, 11, 10, 10, not 12 x 5 + 4.
      const int64_t height = (rows - (r - row0) + (tiles - t) - 1) / (tiles - t);
      const char* ahead = next == nullptr ? nullptr : next + std::min(t * share, panel_bytes);
      const char* ahead_end =
          next == nullptr ? nullptr : next + std::min((t + 1) * share, panel_bytes);
      tile_for[height](d.x + r * d.k, d.k, panel, d.k, d.out + r * d.n + col, d.n, cols, ahead,
                       ahead_end);
      r += height;
    }
  }
}

ffi::Error Run(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
               ffi::ResultBuffer<ffi::F32> out, bool gated) {
  auto x_dims = x.dimensions();
  auto w_dims = w.dimensions();
  auto out_dims = out->dimensions();
  const int64_t width = gated ? kRegLanes : kPanel;
  if (x_dims.size() != 2 || w_dims.size() != 3 || out_dims.size() != 2 ||
      w_dims[2] != kPanel || w_dims[1] != x_dims[1] || out_dims[0] != x_dims[0] ||
      w_dims[0] != (out_dims[1] + width - 1) / width) {
    return ffi::Error::InvalidArgument(
        gated ? "dense_gated: need x [M, K], w [ceil(N / (panel / 2)), K, panel] and out [M, N]"
              : "dense: need x [M, K], w [ceil(N / panel), K, panel] and out [M, N]");
  }
  const Dense d{x.typed_data(), w.typed_data(), out->typed_data(),
                x_dims[0],      x_dims[1],      out_dims[1],
                w_dims[0],      gated};
  if (d.m == 0 || d.n == 0) return ffi::Error::Success();
  // An item is a block of rows against a group of panels. Up to 96 rows stay one block
  // (a decode step: the threads split the columns); past that, blocks of 48 rows, whose
  // activations stay in cache while every panel of the group streams past them. Groups
  // are as wide as keeps an item at about kItemFlops, or all panels.
  const int64_t block_rows = d.m <= 96 ? d.m : 48;
  const int64_t blocks = (d.m + block_rows - 1) / block_rows;
  const int64_t panel_flops = 2 * block_rows * kPanel * std::max<int64_t>(d.k, 1);
  int64_t group = std::clamp<int64_t>(kItemFlops / panel_flops, 1, d.panels);
  // A call too small for kItemsPerThread items of kItemFlops on every thread (a decode step's
  // K and V projections: 64 rows by 128 columns were one item, on one thread) is split
  // finer, down to a panel an item, but not into items under kMinItemFlops (batch 1's rows
  // stay one item, as waking a helper would cost more than it saves).
  // Gated, the call does twice the multiply-adds of its N outputs, but it is split as the
  // gate's product alone was: at batch 1 two items (a helper woken) cost more than they save.
  const int64_t call_flops = 2 * d.m * d.k * d.n;
  const int64_t want = std::min<int64_t>(kItemsPerThread * KernelThreads::Get().threads(),
                                         std::max<int64_t>(1, call_flops / kMinItemFlops));
  if (blocks * ((d.panels + group - 1) / group) < want) {
    group = std::max<int64_t>(1, d.panels * blocks / want);
  }
  const int64_t groups = (d.panels + group - 1) / group;
  ParallelFor(blocks * groups, [&](int64_t item) {
    const int64_t row0 = (item / groups) * block_rows;
    const int64_t p0 = (item % groups) * group;
    Block(d, row0, std::min(d.m, row0 + block_rows), p0, std::min(d.panels, p0 + group));
  });
  return ffi::Error::Success();
}

ffi::Error DenseImpl(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
                     ffi::ResultBuffer<ffi::F32> out) {
  return Run(x, w, out, false);
}

ffi::Error DenseGatedImpl(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
                          ffi::ResultBuffer<ffi::F32> out) {
  return Run(x, w, out, true);
}

}  // namespace
}  // namespace claimbench

// The panel width the packed weight must have (Python packs to it).
extern "C" int64_t ClaimbenchDensePanel() { return claimbench::kPanel; }

XLA_FFI_DEFINE_HANDLER_SYMBOL(ClaimbenchDense, claimbench::DenseImpl,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(ClaimbenchDenseGated, claimbench::DenseGatedImpl,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>());
