/*!
 * \file dense.cc
 * \brief kokoro_ext.conv1d, conv1d_transpose, addmm and bmm: GEMM-shaped ops on OpenBLAS,
 *  stride-1 convolutions on products.h.
 *
 * TVM 0.27's default llvm pipeline leaves these loops unscheduled (scalar, one thread);
 * they are most of Kokoro's FLOPs.  Each splits its output into tiles that run in
 * parallel on TVM's thread pool (threading.h), each a single-threaded BLAS GEMM, so the
 * result of a column does not depend on the thread count.
 *
 *   kokoro_ext.conv1d(options, x, w, bias, out)      PyTorch conv1d, groups = 1
 *     options  Shape (stride, padding, dilation)
 *     x [B, C_in, T_in]   w [C_out, C_in, K]   bias [C_out]   out [B, C_out, T_out]
 *   kokoro_ext.conv1d_taps(options, x, taps, bias, out)      the same, stride 1, on the
 *     filter packed as taps [ceil(C_out / 8), K, C_in, 8] for products.h (done once, at
 *     build time, where the filter is a weight), zero rows past C_out
 *     options  Shape (padding, dilation)
 *   kokoro_ext.taps_filter_shape(C_out, C_in, K) -> Shape [ceil(C_out / 8), K, C_in, 8]
 *   kokoro_ext.taps_filter(w, taps)       w [C_out, C_in, K] packed as conv1d_taps takes it
 *   kokoro_ext.conv1d_transpose(options, x, w, bias, out)   conv_transpose1d, groups = 1
 *     options  Shape (stride, padding, output_padding)
 *     x [B, C_in, T_in]   w [C_in, C_out, K]   bias [C_out]   out [B, C_out, T_out]
 *   kokoro_ext.addmm(bias, x, w, out)                out = bias + x @ w (products.h for few rows)
 *     bias [N]   x [M, K]   w [K, N]   out [M, N]
 *   kokoro_ext.addmm_q8(bias, x, q, scale, out)      addmm on an int8 weight, scale per column
 *   kokoro_ext.addmm_q8_int8(bias, x, quads, sums, scale, out)   the same in int8 products
 *     (low_precision.h), each row of x quantized with a scale and zero point of its own
 *     quads [ceil(N / 8), ceil(K / 4), 8, 4] int8   sums [N] int32   scale [N]
 *   kokoro_ext.columns_q8_quads_shape(K, N) -> Shape [ceil(N / 8), ceil(K / 4), 8, 4]
 *   kokoro_ext.bmm(x, w, out)                        out[b] = x[b] @ w[b]
 *     x [B, M, K]   w [B, K, N]   out [B, M, N]
 *
 * Long stride-1 convolutions with constant weights take Winograd F(m, r) instead
 * (winograd.cc), chosen at compile time.
 */
#include <kokoro_ext/low_precision.h>
#include <kokoro_ext/products.h>
#include <kokoro_ext/quantized.h>
#include <kokoro_ext/tensor_args.h>
#include <kokoro_ext/threading.h>
#include <cblas.h>
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace kokoro_ext {
namespace {

constexpr int64_t kColumnTile = 256;
constexpr int64_t kMinParallelFlops = int64_t{1} << 22;
// addmm rows up to which products.h beats OpenBLAS (one thread, ALBERT's 768 x 2048
// products: 2-3x at 15 rows, level at 64, 20-30% behind at 250).
constexpr int64_t kSmallRows = 64;

/*! \brief A direct convolution's work item: batch b, output columns [t0, t0 + width) of
 *  tile ``tile`` (``cols`` rounded up for the products), output channels [o0, o0 + rows)
 *  of a block of ``block``. */
struct TapsItem {
  int64_t b, tile, t0, width, cols, o0, rows, block;
};

/*!
 * \brief f(TapsItem) for every (batch, tile of kColumnTile output columns, block of output
 *  channels) of a direct convolution, in parallel: blocks of whole packed blocks, as many
 *  as OutputBlocks wants for the threads.
 */
template <typename F>
void ForEachTapsItem(int64_t B, int64_t T_out, int64_t C_out, F&& f) {
  const int64_t tiles = (T_out + kColumnTile - 1) / kColumnTile;
  const int64_t packed = PackedBlocks(C_out);
  const int64_t wanted = OutputBlocks(B * tiles, C_out);
  const int64_t block = (packed + wanted - 1) / wanted * kPack;  // output channels per item
  const int64_t blocks = (C_out + block - 1) / block;
  ParallelFor(B * tiles * blocks, [&](int64_t item) {
    const int64_t tile = item / blocks % tiles, t0 = tile * kColumnTile;
    const int64_t o0 = item % blocks * block, width = std::min(kColumnTile, T_out - t0);
    f(TapsItem{item / (tiles * blocks), tile, t0, width, RoundColumns(width), o0,
               std::min(block, C_out - o0), block});
  });
}

/*!
 * \brief Stride-1 convolution over a zero-padded copy of each input (no im2col copy K
 *  times the input's size), its taps the chunks of products.h's PackedProduct: the taps
 *  come packed as [ceil(C_out / kPack)][K][C_in][kPack], and the K taps' sums add up in
 *  registers instead of in K GEMM outputs.
 */
void Conv1dTaps(const float* px, const PackedFilter& taps, const float* pb, float* po, int64_t B,
                int64_t C_in, int64_t T_in, int64_t C_out, int64_t K, int64_t pad,
                int64_t dilation, int64_t T_out) {
  // Padded rows are read up to kColumnMultiple - 1 columns past the last output's inputs.
  const int64_t T_pad = T_in + 2 * pad + kColumnMultiple;
  float* padded = Workspace<1>(B * C_in * T_pad);
  ParallelFor(B * C_in, [&](int64_t bc) {
    std::fill(padded + bc * T_pad, padded + bc * T_pad + pad, 0.f);
    std::memcpy(padded + bc * T_pad + pad, px + bc * T_in, T_in * sizeof(float));
    std::fill(padded + bc * T_pad + pad + T_in, padded + (bc + 1) * T_pad, 0.f);
  }, B * C_in * T_pad >= kMinParallelFlops / 16);
  ForEachTapsItem(B, T_out, C_out, [&](const TapsItem& it) {
    const auto [b, tile, t0, width, cols, o0, rows, block] = it;
    float* M = Workspace<2>(block * cols);
    PackedProduct(taps, o0 / kPack, K * C_in, PackedBlocks(rows), K, C_in,
                  padded + b * C_in * T_pad + t0, T_pad, dilation, cols, M, cols);
    for (int64_t o = 0; o < rows; ++o) {
      float* y = po + (b * C_out + o0 + o) * T_out + t0;
      const float* m = M + o * cols;
      const float bias = pb[o0 + o];
      for (int64_t q = 0; q < width; ++q) y[q] = m[q] + bias;
    }
  });
}

/*!
 * \brief Conv1dTaps on a [C_out][C_in][K] filter, packed here at every call (a
 *  1024 x 1090 x 3 filter takes milliseconds): where the filter is a weight, compilation
 *  passes kokoro_ext.conv1d_taps the packed filter instead (frontend/winograd.py).
 */
void Conv1dStride1(const float* px, const float* pw, const float* pb, float* po, int64_t B,
                   int64_t C_in, int64_t T_in, int64_t C_out, int64_t K, int64_t pad,
                   int64_t dilation, int64_t T_out) {
  float* taps = Workspace<0>(PackedBlocks(C_out) * K * C_in * kPack);
  PackTaps(pw, taps, C_out, C_in, K);
  Conv1dTaps(px, PackedFilter{taps}, pb, po, B, C_in, T_in, C_out, K, pad, dilation, T_out);
}

/*! \brief Any-stride convolution through im2col tiles. */
void Conv1dIm2col(const float* px, const float* pw, const float* pb, float* po, int64_t B,
                  int64_t C_in, int64_t T_in, int64_t C_out, int64_t K, int64_t stride,
                  int64_t pad, int64_t dilation, int64_t T_out) {
  const int64_t tile_width = RoundsOfColumns(T_out, kColumnTile, kColumnMultiple);
  const int64_t tiles = (T_out + tile_width - 1) / tile_width, rows = C_in * K;
  ParallelFor(B * tiles, [&](int64_t item) {
    float* col = Workspace<0>(rows * tile_width);
    const int64_t b = item / tiles, tile = item % tiles;
    const int64_t t0 = tile * tile_width, width = std::min(tile_width, T_out - t0);
    const float* xb = px + b * C_in * T_in;
    // im2col: row (c, k), column j reads x[c, (t0 + j) * stride - pad + k * dilation].
    for (int64_t c = 0; c < C_in; ++c) {
      for (int64_t k = 0; k < K; ++k) {
        float* row = col + (c * K + k) * width;
        const int64_t offset = k * dilation - pad;
        for (int64_t j = 0; j < width; ++j) {
          const int64_t t = (t0 + j) * stride + offset;
          row[j] = (t >= 0 && t < T_in) ? xb[c * T_in + t] : 0.f;
        }
      }
    }
    float* ob = po + b * C_out * T_out + t0;
    for (int64_t o = 0; o < C_out; ++o) std::fill(ob + o * T_out, ob + o * T_out + width, pb[o]);
    scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, C_out, width, rows, 1.f, pw,
                      rows, col, width, 1.f, ob, T_out);
  });
}

void Conv1d(tvm::ffi::Shape options, tvm::ffi::TensorView x, tvm::ffi::TensorView w,
            tvm::ffi::TensorView bias, tvm::ffi::TensorView out) {
  constexpr const char* kName = "kokoro_ext.conv1d";
  CheckConvArgs(kName, "(stride, padding, dilation)", 3, options, x, "w", w, 3, bias, out);
  const int64_t stride = options[0], pad = options[1], dilation = options[2];
  const int64_t B = x.shape()[0], C_in = x.shape()[1], T_in = x.shape()[2];
  const int64_t C_out = w.shape()[0], K = w.shape()[2];
  const int64_t T_out = (T_in + 2 * pad - dilation * (K - 1) - 1) / stride + 1;
  CheckShape(kName, "w", w, {C_out, C_in, K});
  CheckShape(kName, "bias", bias, {C_out});
  CheckShape(kName, "out", out, {B, C_out, T_out});
  const float* px = DataPtr<const float>(x);
  const float* pw = DataPtr<const float>(w);
  const float* pb = DataPtr<const float>(bias);
  float* po = DataPtr<float>(out);
  if (stride == 1) {
    Conv1dStride1(px, pw, pb, po, B, C_in, T_in, C_out, K, pad, dilation, T_out);
  } else {
    Conv1dIm2col(px, pw, pb, po, B, C_in, T_in, C_out, K, stride, pad, dilation, T_out);
  }
}

void Conv1dTapsPacked(tvm::ffi::Shape options, tvm::ffi::TensorView x,
                      tvm::ffi::TensorView taps, tvm::ffi::TensorView bias,
                      tvm::ffi::TensorView out) {
  constexpr const char* kName = "kokoro_ext.conv1d_taps";
  CheckConvArgs(kName, "(padding, dilation)", 2, options, x, "taps", taps, 4, bias, out);
  const int64_t pad = options[0], dilation = options[1];
  if (dilation < 1 || pad < 0) {
    TVM_FFI_THROW(ValueError) << kName << ": options (padding, dilation) = (" << pad << ", "
                              << dilation << ") are out of range";
  }
  const int64_t B = x.shape()[0], C_in = x.shape()[1], T_in = x.shape()[2];
  const int64_t K = taps.shape()[1], C_out = bias.shape()[0];
  const int64_t T_out = T_in + 2 * pad - dilation * (K - 1);
  CheckShape(kName, "taps", taps, PackedTapsShape(C_out, C_in, K));
  CheckShape(kName, "out", out, {B, C_out, T_out});
  Conv1dTaps(DataPtr<const float>(x), PackedFilter{DataPtr<const float>(taps)},
             DataPtr<const float>(bias), DataPtr<float>(out), B, C_in, T_in, C_out, K, pad,
             dilation, T_out);
}

void Conv1dTapsQ8(tvm::ffi::Shape options, tvm::ffi::TensorView x, tvm::ffi::TensorView taps,
                  tvm::ffi::TensorView scale, tvm::ffi::TensorView bias,
                  tvm::ffi::TensorView out) {
  constexpr const char* kName = "kokoro_ext.conv1d_taps_q8";
  const ConvShape s = CheckQuantizedConvArgs(kName, options, x, taps, scale, bias, out);
  Conv1dTaps(DataPtr<const float>(x),
             PackedFilter{nullptr, DataPtr<const int8_t>(taps), DataPtr<const float>(scale)},
             DataPtr<const float>(bias), DataPtr<float>(out), s.B, s.C_in, s.T_in, s.C_out,
             s.K, s.pad, s.dilation, s.T_out);
}

/*!
 * \brief conv1d_taps_q8 with bf16 products (kokoro_ext/low_precision.h): the input rounded to bf16
 *  pairs of channels once, the int8 taps exact as bf16, the scale and bias applied to the
 *  float32 sums.  An odd number of input channels takes conv1d_taps_q8.
 */
void Conv1dTapsQ8Bf16(tvm::ffi::Shape options, tvm::ffi::TensorView x,
                      tvm::ffi::TensorView taps, tvm::ffi::TensorView scale,
                      tvm::ffi::TensorView bias, tvm::ffi::TensorView out) {
  constexpr const char* kName = "kokoro_ext.conv1d_taps_q8_bf16";
  const ConvShape s = CheckQuantizedConvArgs(kName, options, x, taps, scale, bias, out);
  if (s.C_in % 2 != 0) {
    Conv1dTapsQ8(options, x, taps, scale, bias, out);
    return;
  }
  RequireBf16(kName);
  const int64_t B = s.B, C_in = s.C_in, T_in = s.T_in, C_out = s.C_out, K = s.K;
  const int64_t pad = s.pad, T_out = s.T_out;
  const float* px = DataPtr<const float>(x);
  const int8_t* q8 = DataPtr<const int8_t>(taps);
  const float* ps = DataPtr<const float>(scale);
  const float* pb = DataPtr<const float>(bias);
  float* po = DataPtr<float>(out);
  // Zero-padded input as bf16 pairs of channels, [B][C_in / 2][T_pad][2].
  const int64_t T_pad = T_in + 2 * pad + kColumnMultiple;
  const int64_t pairs = B * C_in / 2;
  uint16_t* padded = reinterpret_cast<uint16_t*>(Workspace<1>(pairs * T_pad));
  ParallelFor(pairs, [&](int64_t bp) {
    float* rows = Workspace<3>(2 * T_pad);
    for (int64_t j = 0; j < 2; ++j) {
      float* row = rows + j * T_pad;
      std::fill(row, row + pad, 0.f);
      std::memcpy(row + pad, px + (2 * bp + j) * T_in, T_in * sizeof(float));
      std::fill(row + pad + T_in, row + T_pad, 0.f);
    }
    PairRowsBf16(rows, 2, T_pad, T_pad, padded + bp * 2 * T_pad, T_pad);
  }, pairs * T_pad >= kMinParallelFlops / 16);
  const int64_t depth = K * C_in;
  ForEachTapsItem(B, T_out, C_out, [&](const TapsItem& it) {
    const auto [b, tile, t0, width, cols, o0, rows, block] = it;
    const int64_t o_blocks = PackedBlocks(rows);
    uint16_t* w = reinterpret_cast<uint16_t*>(Workspace<4>(o_blocks * depth * kPack / 2));
    PairInt8FilterBf16(q8 + o0 / kPack * depth * kPack, o_blocks, depth, w);
    float* M = Workspace<2>(block * cols);
    PackedProductBf16(w, depth, o_blocks, K, C_in, padded + (b * C_in / 2 * T_pad + t0) * 2,
                      T_pad, s.dilation, cols, M, cols);
    for (int64_t o = 0; o < rows; ++o) {
      float* y = po + (b * C_out + o0 + o) * T_out + t0;
      const float* m = M + o * cols;
      const float k = ps[o0 + o], bias = pb[o0 + o];
      for (int64_t q = 0; q < width; ++q) y[q] = m[q] * k + bias;
    }
  });
}

/*!
 * \brief conv1d_taps_q8 with int8 products (kokoro_ext/low_precision.h): each tile of
 *  kColumnTile output columns quantizes its input window (over all channels) with a scale
 *  of its own, the int8 taps are used as they are, and the sums are exact; the two scales
 *  and the bias apply to them.  The taps come in quads of input channels, as
 *  taps_filter_q8_quads packs them at build time, the last quad padded with zero taps.
 */
void Conv1dTapsQ8Int8(tvm::ffi::Shape options, tvm::ffi::TensorView x,
                      tvm::ffi::TensorView quads, tvm::ffi::TensorView sums,
                      tvm::ffi::TensorView scale, tvm::ffi::TensorView bias,
                      tvm::ffi::TensorView out) {
  constexpr const char* kName = "kokoro_ext.conv1d_taps_q8_int8";
  const ConvShape s = CheckQuantizedConvArgs(kName, options, x, quads, scale, bias, out, &sums);
  RequireVnni(kName);
  const int64_t B = s.B, C_in = s.C_in, T_in = s.T_in, C_out = s.C_out, K = s.K;
  const int64_t pad = s.pad, dilation = s.dilation, T_out = s.T_out;
  const float* px = DataPtr<const float>(x);
  const int8_t* w = DataPtr<const int8_t>(quads);
  const int32_t* psum = DataPtr<const int32_t>(sums);
  const float* ps = DataPtr<const float>(scale);
  const float* pb = DataPtr<const float>(bias);
  float* po = DataPtr<float>(out);
  // Input channels in whole quads: where C_in % 4 != 0 the last one has zero taps (so its
  // input rows, 128 from QuantizeColumnsInt8, count for nothing).
  const int64_t C4 = (C_in + 3) / 4 * 4, depth = K * C4;
  // Each tile's window: its columns rounded up, and the taps' reach past them.
  const int64_t tiles = (T_out + kColumnTile - 1) / kColumnTile;
  const int64_t window = RoundColumns(kColumnTile) + (K - 1) * dilation;
  // Where each work item is a whole tile (long inputs), it quantizes its own window, which
  // its products then read from cache; else the items of a tile share a window quantized
  // in a pass of its own.
  const bool whole_tiles = OutputBlocks(B * tiles, C_out) == 1;
  uint8_t* windows = nullptr;
  float* steps = nullptr;
  if (!whole_tiles) {
    windows = reinterpret_cast<uint8_t*>(Workspace<1>(B * tiles * C4 * window / 4));
    steps = Workspace<5>(B * tiles);
    ParallelFor(B * tiles, [&](int64_t bt) {
      const int64_t b = bt / tiles, t0 = bt % tiles * kColumnTile;
      steps[bt] = QuantizeColumnsInt8(px + b * C_in * T_in, C_in, T_in, T_in, t0 - pad, window,
                                      windows + bt * C4 * window);
    }, B * C_in * T_in >= kMinParallelFlops / 16);
  }
  ForEachTapsItem(B, T_out, C_out, [&](const TapsItem& it) {
    const auto [b, tile, t0, width, cols, o0, rows, block] = it;
    const int64_t bt = b * tiles + tile;
    const uint8_t* own = nullptr;
    float step = 0.f;
    if (whole_tiles) {
      uint8_t* quantized = reinterpret_cast<uint8_t*>(Workspace<4>(C4 * window / 4));
      step = QuantizeColumnsInt8(px + b * C_in * T_in, C_in, T_in, T_in, t0 - pad, window,
                                 quantized);
      own = quantized;
    } else {
      own = windows + bt * C4 * window;
      step = steps[bt];
    }
    // Per row of the block: the zero point's share of the sums, and the two scales.
    float* scale = Workspace<2>(2 * block);
    int32_t* zero = reinterpret_cast<int32_t*>(scale + block);
    for (int64_t o = 0; o < rows; ++o) {
      zero[o] = 128 * psum[o0 + o];
      scale[o] = step * ps[o0 + o];
    }
    const Int8Output y{po + (b * C_out + o0) * T_out + t0, T_out, rows, width, zero, scale,
                       pb + o0};
    PackedProductInt8(w + o0 / kPack * depth * kPack, PackedBlocks(rows), K, C4, own, window,
                      dilation, cols, y);
  });
}

void TapsFilter(tvm::ffi::TensorView w, tvm::ffi::TensorView taps) {
  const auto [C_out, C_in, K] =
      CheckFilterTransformArgs("kokoro_ext.taps_filter", w, "taps", taps, PackedTapsShape);
  PackTaps(DataPtr<const float>(w), DataPtr<float>(taps), C_out, C_in, K);
}

/*!
 * \brief w [C_out, C_in, K] quantized per output channel (quantized.h) and packed as
 *  taps_filter packs it, the scales [ceil(C_out / 8) 8] (zero past C_out).  Returns the
 *  rows quantized off a grid.
 */
int64_t QuantizeTaps(const float* w, int64_t C_out, int64_t C_in, int64_t K, int8_t* taps,
                     float* scale) {
  std::vector<int8_t> q(C_out * C_in * K);
  std::fill(scale, scale + PackedBlocks(C_out) * kPack, 0.f);
  const int64_t lossy = QuantizeRows(w, C_out, C_in * K, C_in * K, 1, q.data(), C_in * K, 1, scale);
  PackTaps(q.data(), taps, C_out, C_in, K);
  return lossy;
}

/*! \brief QuantizeTaps into the tensors taps and scale; returns the rows off a grid. */
int64_t TapsFilterQ8(tvm::ffi::TensorView w, tvm::ffi::TensorView taps,
                     tvm::ffi::TensorView scale) {
  constexpr const char* kName = "kokoro_ext.taps_filter_q8";
  CheckFloat32Cpu(kName, "w", w, 3);
  const int64_t C_out = w.shape()[0], C_in = w.shape()[1], K = w.shape()[2];
  CheckInt8Cpu(kName, "taps", taps, 4);
  CheckShape(kName, "taps", taps, PackedTapsShape(C_out, C_in, K));
  CheckFloat32Cpu(kName, "scale", scale, 1);
  CheckShape(kName, "scale", scale, {PackedBlocks(C_out) * kPack});
  return QuantizeTaps(DataPtr<const float>(w), C_out, C_in, K, DataPtr<int8_t>(taps),
                      DataPtr<float>(scale));
}

/*!
 * \brief taps_filter_q8's int8 taps packed for conv1d_taps_q8_int8: quads
 *  [ceil(C_out / 8)][K][ceil(C_in / 4)][8][4] (zero taps past C_in and C_out), with each
 *  output channel's sum of taps [ceil(C_out / 8) 8] and its scale [ceil(C_out / 8) 8].
 *  Returns the rows quantized off a grid.
 */
int64_t TapsFilterQ8Quads(tvm::ffi::TensorView w, tvm::ffi::TensorView quads,
                          tvm::ffi::TensorView sums, tvm::ffi::TensorView scale) {
  constexpr const char* kName = "kokoro_ext.taps_filter_q8_quads";
  CheckFloat32Cpu(kName, "w", w, 3);
  const int64_t C_out = w.shape()[0], C_in = w.shape()[1], K = w.shape()[2];
  CheckInt8Cpu(kName, "quads", quads, 5);
  CheckShape(kName, "quads", quads, TapsQuadsShape(C_out, C_in, K));
  CheckCpuTensor(kName, "sums", sums, 1, kDLInt, 32, "int32");
  CheckShape(kName, "sums", sums, {PackedBlocks(C_out) * kPack});
  CheckFloat32Cpu(kName, "scale", scale, 1);
  CheckShape(kName, "scale", scale, {PackedBlocks(C_out) * kPack});
  std::vector<int8_t> taps(PackedBlocks(C_out) * K * C_in * kPack);
  const int64_t lossy = QuantizeTaps(DataPtr<const float>(w), C_out, C_in, K, taps.data(),
                                     DataPtr<float>(scale));
  QuadFilterInt8(taps.data(), PackedBlocks(C_out), K, C_in, DataPtr<int8_t>(quads),
                 DataPtr<int32_t>(sums));
  return lossy;
}

void Conv1dTranspose(tvm::ffi::Shape options, tvm::ffi::TensorView x, tvm::ffi::TensorView w,
                     tvm::ffi::TensorView bias, tvm::ffi::TensorView out) {
  constexpr const char* kName = "kokoro_ext.conv1d_transpose";
  CheckConvArgs(kName, "(stride, padding, output_padding)", 3, options, x, "w", w, 3, bias, out);
  const int64_t stride = options[0], pad = options[1], output_pad = options[2];
  const int64_t B = x.shape()[0], C_in = x.shape()[1], T_in = x.shape()[2];
  const int64_t C_out = w.shape()[1], K = w.shape()[2];
  const int64_t T_out = (T_in - 1) * stride - 2 * pad + K + output_pad;
  CheckShape(kName, "w", w, {C_in, C_out, K});
  CheckShape(kName, "bias", bias, {C_out});
  CheckShape(kName, "out", out, {B, C_out, T_out});
  const float* px = DataPtr<const float>(x);
  const float* pw = DataPtr<const float>(w);
  const float* pb = DataPtr<const float>(bias);
  float* po = DataPtr<float>(out);
  // cols[(c, k), t] = sum_i w[i, c, k] x[i, t], then out[c, t * stride + k - pad] += cols.
  // Items are blocks of output channels, so no two threads add to the same output; the
  // input is walked in column tiles so that cols stays in cache.
  constexpr int64_t kChannelBlock = 16;
  const int64_t blocks = (C_out + kChannelBlock - 1) / kChannelBlock;
  ParallelFor(B * blocks, [&](int64_t item) {
    float* cols = Workspace<0>(kChannelBlock * K * kColumnTile);
    const int64_t b = item / blocks, block = item % blocks;
    const int64_t c0 = block * kChannelBlock, width = std::min(kChannelBlock, C_out - c0);
    for (int64_t c = 0; c < width; ++c) {
      float* oc = po + (b * C_out + c0 + c) * T_out;
      std::fill(oc, oc + T_out, pb[c0 + c]);
    }
    for (int64_t t0 = 0; t0 < T_in; t0 += kColumnTile) {
      const int64_t span = std::min(kColumnTile, T_in - t0);
      scipy_cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, width * K, span, C_in, 1.f,
                        pw + c0 * K, C_out * K, px + b * C_in * T_in + t0, T_in, 0.f,
                        cols, span);
      for (int64_t c = 0; c < width; ++c) {
        float* oc = po + (b * C_out + c0 + c) * T_out;
        for (int64_t k = 0; k < K; ++k) {
          const float* row = cols + (c * K + k) * span;
          for (int64_t t = 0; t < span; ++t) {
            const int64_t o = (t0 + t) * stride + k - pad;
            if (o >= 0 && o < T_out) oc[o] += row[t];
          }
        }
      }
    }
  });
}

/*!
 * \brief A [K, N] weight, float32 or int8 with a scale per column (output), read a tile of
 *  columns at a time.
 */
struct ColumnWeight {
  const float* f32 = nullptr;
  const int8_t* q8 = nullptr;
  const float* scale = nullptr;  // [N] with q8

  /*! \brief Columns [n0, n0 + cols) as float32 rows of *stride: the weight itself, or
   *  dequantized into the calling thread's scratch (slot 4). */
  const float* Columns(int64_t K, int64_t N, int64_t n0, int64_t cols, int64_t* stride) const {
    if (f32 != nullptr) {
      *stride = N;
      return f32 + n0;
    }
    float* dst = Workspace<4>(K * cols);
    DequantizeColumns(q8, scale, K, N, n0, cols, dst);
    *stride = cols;
    return dst;
  }

};

/*!
 * \brief out[m][n] = (bias ? bias[n] : 0) + sum_k x[m][k] w[k][n] for few rows M (kokoro's
 *  style projections: one; ALBERT on a short text: a few dozen tokens): the weight is
 *  nearly all the bytes, and OpenBLAS packed it at every call.  products.h instead, with
 *  the rows of x packed as the broadcast operand and w's columns as the vector operand:
 *  w is read once, as it is, its columns shared out to the threads.
 */
void SmallRowsProduct(const float* px, const ColumnWeight& w, const float* pb, float* po,
                      int64_t M, int64_t K, int64_t N) {
  // x [M, K] packed as a one-tap filter of M output channels over K input channels.
  const int64_t packed = PackedBlocks(M);
  float* xp = Workspace<0>(packed * K * kPack);
  PackTaps(px, xp, M, K, 1);
  // Columns of whole vectors; the last N % 16 (w's row ends, which a vector would read
  // past) one at a time.
  const int64_t N16 = N / kColumnMultiple * kColumnMultiple;
  const int64_t width = std::max<int64_t>(
      kColumnMultiple, std::min(kColumnTile, RoundColumns(N16 / (4 * MaxThreads()))));
  const int64_t tiles = (N16 + width - 1) / width;
  // Small products (kokoro's AdaIN style projections: one row) cost less than waking
  // the thread team.
  ParallelFor(tiles, [&](int64_t tile) {
    const int64_t n0 = tile * width, cols = std::min(width, N16 - n0);
    float* Mo = Workspace<2>(packed * kPack * cols);
    int64_t stride = 0;
    const float* columns = w.Columns(K, N, n0, cols, &stride);
    PackedProduct(xp, K, packed, 1, K, columns, stride, 0, cols, Mo, cols);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t q = 0; q < cols; ++q) {
        po[m * N + n0 + q] = Mo[m * cols + q] + (pb ? pb[n0 + q] : 0.f);
      }
    }
  }, M * N * K >= kMinParallelFlops);
  if (N16 == N) return;
  int64_t stride = 0;
  const float* tail = w.Columns(K, N, N16, N - N16, &stride);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = N16; n < N; ++n) {
      float acc = 0.f;
      for (int64_t k = 0; k < K; ++k) acc += px[m * K + k] * tail[k * stride + n - N16];
      po[m * N + n] = (pb ? pb[n] : 0.f) + acc;
    }
  }
}

/*! \brief out = bias + x @ w: OpenBLAS on column tiles past kSmallRows rows, else products.h. */
void AddmmOn(const float* px, const ColumnWeight& w, const float* pb, float* po, int64_t M,
             int64_t K, int64_t N) {
  if (M > kSmallRows) {
    const int64_t tile_width = RoundsOfColumns(N, kColumnTile, kColumnMultiple);
    const int64_t tiles = (N + tile_width - 1) / tile_width;
    ParallelFor(tiles, [&](int64_t tile) {
      const int64_t n0 = tile * tile_width, width = std::min(tile_width, N - n0);
      for (int64_t m = 0; m < M; ++m) std::memcpy(po + m * N + n0, pb + n0, width * sizeof(float));
      int64_t stride = 0;
      const float* columns = w.Columns(K, N, n0, width, &stride);
      scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, width, K, 1.f, px, K,
                        columns, stride, 1.f, po + n0, N);
    }, M * N * K >= kMinParallelFlops);
    return;
  }
  SmallRowsProduct(px, w, pb, po, M, K, N);
}

/*! \brief addmm's checks but the weight's dtype (the caller's): {M, K, N}. */
std::array<int64_t, 3> CheckAddmmArgs(const char* kName, const tvm::ffi::TensorView& bias,
                                      const tvm::ffi::TensorView& x,
                                      const tvm::ffi::TensorView& w,
                                      const tvm::ffi::TensorView& out) {
  CheckFloat32Cpu(kName, "bias", bias, 1);
  CheckFloat32Cpu(kName, "x", x, 2);
  CheckFloat32Cpu(kName, "out", out, 2);
  const int64_t M = x.shape()[0], K = x.shape()[1], N = w.shape()[1];
  CheckShape(kName, "w", w, {K, N});
  CheckShape(kName, "bias", bias, {N});
  CheckShape(kName, "out", out, {M, N});
  return {M, K, N};
}

void Addmm(tvm::ffi::TensorView bias, tvm::ffi::TensorView x, tvm::ffi::TensorView w,
           tvm::ffi::TensorView out) {
  constexpr const char* kName = "kokoro_ext.addmm";
  CheckFloat32Cpu(kName, "w", w, 2);
  const auto [M, K, N] = CheckAddmmArgs(kName, bias, x, w, out);
  AddmmOn(DataPtr<const float>(x), ColumnWeight{DataPtr<const float>(w)},
          DataPtr<const float>(bias), DataPtr<float>(out), M, K, N);
}

/*! \brief addmm on an int8 weight [K, N] with a scale per column [N]. */
void AddmmQ8(tvm::ffi::TensorView bias, tvm::ffi::TensorView x, tvm::ffi::TensorView w,
             tvm::ffi::TensorView scale, tvm::ffi::TensorView out) {
  constexpr const char* kName = "kokoro_ext.addmm_q8";
  CheckInt8Cpu(kName, "w", w, 2);
  const auto [M, K, N] = CheckAddmmArgs(kName, bias, x, w, out);
  CheckFloat32Cpu(kName, "scale", scale, 1);
  CheckShape(kName, "scale", scale, {N});
  AddmmOn(DataPtr<const float>(x),
          ColumnWeight{nullptr, DataPtr<const int8_t>(w), DataPtr<const float>(scale)},
          DataPtr<const float>(bias), DataPtr<float>(out), M, K, N);
}

/*!
 * \brief w [K, N] quantized per column (quantized.h): q [K, N] int8, scale [N].  Returns
 *  the columns quantized off a grid.
 */
int64_t ColumnsQ8(tvm::ffi::TensorView w, tvm::ffi::TensorView q, tvm::ffi::TensorView scale) {
  constexpr const char* kName = "kokoro_ext.columns_q8";
  CheckFloat32Cpu(kName, "w", w, 2);
  const int64_t K = w.shape()[0], N = w.shape()[1];
  CheckInt8Cpu(kName, "q", q, 2);
  CheckShape(kName, "q", q, {K, N});
  CheckFloat32Cpu(kName, "scale", scale, 1);
  CheckShape(kName, "scale", scale, {N});
  return QuantizeRows(DataPtr<const float>(w), N, K, 1, N, DataPtr<int8_t>(q), 1, N,
                      DataPtr<float>(scale));
}

/*! \brief The shape of addmm_q8_int8's weight: [ceil(N / 8), ceil(K / 4), 8, 4]. */
std::vector<int64_t> QuadColumnsShape(int64_t K, int64_t N) {
  return {PackedBlocks(N), (K + 3) / 4, kPack, 4};
}

/*! \brief The checks of a [K, N] weight in columns_q8_quads' layout: quads, sums, scale. */
void CheckQuadColumns(const char* kName, const tvm::ffi::TensorView& quads,
                      const tvm::ffi::TensorView& sums, const tvm::ffi::TensorView& scale,
                      int64_t K, int64_t N) {
  CheckInt8Cpu(kName, "quads", quads, 4);
  CheckShape(kName, "quads", quads, QuadColumnsShape(K, N));
  CheckCpuTensor(kName, "sums", sums, 1, kDLInt, 32, "int32");
  CheckShape(kName, "sums", sums, {N});
  CheckFloat32Cpu(kName, "scale", scale, 1);
  CheckShape(kName, "scale", scale, {N});
}

/*!
 * \brief w [K, N] quantized per column as columns_q8 does, its int8 values packed for the
 *  int8 products (low_precision.h, the filter of a one-tap convolution): quads [ceil(N /
 *  8)][ceil(K / 4)][8][4] (zeros past K and N), with each column's sum [N] and scale [N].
 *  Returns the columns quantized off a grid.
 */
int64_t ColumnsQ8Quads(tvm::ffi::TensorView w, tvm::ffi::TensorView quads,
                       tvm::ffi::TensorView sums, tvm::ffi::TensorView scale) {
  constexpr const char* kName = "kokoro_ext.columns_q8_quads";
  CheckFloat32Cpu(kName, "w", w, 2);
  const int64_t K = w.shape()[0], N = w.shape()[1];
  CheckQuadColumns(kName, quads, sums, scale, K, N);
  // The columns are the rows of a one-tap filter [N, K, 1], whose quads (TapsQuadsShape,
  // one tap) are this layout: packed as taps_filter_q8_quads packs a filter; the sums
  // past N are dropped.
  std::vector<int8_t> q(N * K), taps(PackedBlocks(N) * K * kPack);
  std::vector<int32_t> padded_sums(PackedBlocks(N) * kPack);
  const int64_t lossy =
      QuantizeRows(DataPtr<const float>(w), N, K, 1, N, q.data(), K, 1, DataPtr<float>(scale));
  PackTaps(q.data(), taps.data(), N, K, 1);
  QuadFilterInt8(taps.data(), PackedBlocks(N), 1, K, DataPtr<int8_t>(quads), padded_sums.data());
  std::copy_n(padded_sums.data(), N, DataPtr<int32_t>(sums));
  return lossy;
}

/*!
 * \brief addmm on columns_q8_quads' weight with int8 products: each row of x quantized
 *  to unsigned bytes with a scale and zero point of its own (ONNX Runtime's dynamic
 *  quantization of a MatMul's input, per row rather than per tensor), exact int32 sums,
 *  the zero points taken out with the column sums, the scales and the bias applied.  The
 *  product is w^T x^T, x's rows its columns.
 */
void AddmmQ8Int8(tvm::ffi::TensorView bias, tvm::ffi::TensorView x, tvm::ffi::TensorView quads,
                 tvm::ffi::TensorView sums, tvm::ffi::TensorView scale,
                 tvm::ffi::TensorView out) {
  constexpr const char* kName = "kokoro_ext.addmm_q8_int8";
  CheckFloat32Cpu(kName, "bias", bias, 1);
  CheckFloat32Cpu(kName, "x", x, 2);
  CheckFloat32Cpu(kName, "out", out, 2);
  const int64_t M = x.shape()[0], K = x.shape()[1], N = bias.shape()[0];
  CheckQuadColumns(kName, quads, sums, scale, K, N);
  CheckShape(kName, "out", out, {M, N});
  RequireVnni(kName);
  if (M == 0) return;
  const int64_t depth = (K + 3) / 4 * 4, cols = RoundColumns(M);
  uint8_t* U = reinterpret_cast<uint8_t*>(Workspace<1>(depth / 4 * cols));
  float* row_scale = Workspace<5>(2 * cols);
  int32_t* row_zero = reinterpret_cast<int32_t*>(row_scale + cols);
  QuantizeRowsInt8(DataPtr<const float>(x), M, K, K, depth / 4, cols, U, row_scale, row_zero);
  const int8_t* pq = DataPtr<const int8_t>(quads);
  const int32_t* psum = DataPtr<const int32_t>(sums);
  const float* ps = DataPtr<const float>(scale);
  const float* pb = DataPtr<const float>(bias);
  float* po = DataPtr<float>(out);
  ForEachTapsItem(1, M, N, [&](const TapsItem& it) {
    const auto [b, tile, t0, width, tile_cols, o0, rows, block] = it;
    // The block's sums as w^T x^T's rows, then written to out's columns.
    float* Y = Workspace<2>(block * tile_cols);
    const Int8Output y{Y, tile_cols, rows, width, psum + o0, ps + o0, pb + o0, row_scale + t0,
                       row_zero + t0};
    PackedProductInt8(pq + o0 / kPack * depth * kPack, PackedBlocks(rows), 1, depth, U + t0 * 4,
                      cols, 0, tile_cols, y);
    for (int64_t q = 0; q < width; ++q) {
      float* row = po + (t0 + q) * N + o0;
      for (int64_t o = 0; o < rows; ++o) row[o] = Y[o * tile_cols + q];
    }
  });
}

void Bmm(tvm::ffi::TensorView x, tvm::ffi::TensorView w, tvm::ffi::TensorView out) {
  constexpr const char* kName = "kokoro_ext.bmm";
  CheckFloat32Cpu(kName, "x", x, 3);
  CheckFloat32Cpu(kName, "w", w, 3);
  CheckFloat32Cpu(kName, "out", out, 3);
  const int64_t B = x.shape()[0], M = x.shape()[1], K = x.shape()[2], N = w.shape()[2];
  CheckShape(kName, "w", w, {B, K, N});
  CheckShape(kName, "out", out, {B, M, N});
  const float* px = DataPtr<const float>(x);
  const float* pw = DataPtr<const float>(w);
  float* po = DataPtr<float>(out);
  if (M <= kSmallRows && B < MaxThreads()) {
    // Too few entries to spread over the cores (ALBERT's attention output projection, an
    // einsum with its weight: one), and few rows: the columns go to the cores instead.
    for (int64_t b = 0; b < B; ++b) {
      SmallRowsProduct(px + b * M * K, ColumnWeight{pw + b * K * N}, nullptr, po + b * M * N, M,
                       K, N);
    }
    return;
  }
  // One GEMM per batch entry (ALBERT's attention heads), the heads spread over the cores.
  ParallelFor(B, [&](int64_t b) {
    scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.f, px + b * M * K, K,
                      pw + b * K * N, N, 0.f, po + b * M * N, N);
  }, B * M * N * K >= kMinParallelFlops);
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  // The kernels parallelize around BLAS calls themselves.
  scipy_openblas_set_num_threads(1);
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef().def("kokoro_ext.conv1d", Scoped<Conv1d>)
      .def("kokoro_ext.conv1d_taps", Scoped<Conv1dTapsPacked>)
      .def("kokoro_ext.taps_filter_shape",
           [](int64_t C_out, int64_t C_in, int64_t K) {
             return tvm::ffi::Shape(PackedTapsShape(C_out, C_in, K));
           })
      .def("kokoro_ext.taps_filter", Scoped<TapsFilter>)
      .def("kokoro_ext.taps_filter_q8", Scoped<TapsFilterQ8>)
      .def("kokoro_ext.taps_filter_q8_quads_shape",
           [](int64_t C_out, int64_t C_in, int64_t K) {
             return tvm::ffi::Shape(TapsQuadsShape(C_out, C_in, K));
           })
      .def("kokoro_ext.taps_filter_q8_quads", Scoped<TapsFilterQ8Quads>)
      .def("kokoro_ext.conv1d_taps_q8", Scoped<Conv1dTapsQ8>)
      .def("kokoro_ext.conv1d_taps_q8_bf16", Scoped<Conv1dTapsQ8Bf16>)
      .def("kokoro_ext.conv1d_taps_q8_int8", Scoped<Conv1dTapsQ8Int8>)
      .def("kokoro_ext.columns_q8", Scoped<ColumnsQ8>)
      .def("kokoro_ext.addmm_q8", Scoped<AddmmQ8>)
      .def("kokoro_ext.columns_q8_quads_shape",
           [](int64_t K, int64_t N) { return tvm::ffi::Shape(QuadColumnsShape(K, N)); })
      .def("kokoro_ext.columns_q8_quads", Scoped<ColumnsQ8Quads>)
      .def("kokoro_ext.addmm_q8_int8", Scoped<AddmmQ8Int8>)
      .def("kokoro_ext.conv1d_transpose", Scoped<Conv1dTranspose>)
      .def("kokoro_ext.addmm", Scoped<Addmm>)
      .def("kokoro_ext.bmm", Scoped<Bmm>);
}

}  // namespace kokoro_ext
