/*!
 * \file kokoro_ext/low_precision.h
 * \brief Products with low-precision operands: bf16 pairs (AVX512_BF16 ``vdpbf16ps``) with
 *  float32 sums, and int8 quads (AVX512_VNNI ``vpdpbusd``) with int32 sums.
 *
 * ``vdpbf16ps`` multiplies pairs of bf16 values and adds both products to a float32 lane:
 * 32 multiply-adds per instruction against 16 for a float32 FMA, on operands of half the
 * bytes.  A pair is two adjacent input channels, so both operands hold their channels in
 * pairs: the filter as [blocks][depth / 2][kPack][2] (one 32-bit pair per output channel,
 * broadcast to every column), the columns as [C_in / 2][stride][2] (one pair per column,
 * 16 columns per register).  The sums are float32, as in products.h, in sums of
 * kSumLength input channels.  An int8 weight (|q| <= 128) is a bf16 value exactly: on
 * int8 filters only the columns are rounded (to 8 significant bits, round to nearest
 * even), and the filter's scale applies to the sums.
 *
 * ``vpdpbusd`` multiplies four unsigned bytes by four signed bytes and adds the four
 * products to an int32 lane: 64 multiply-adds per instruction.  The columns are quantized
 * to int8 with one scale per tile of columns (over all channels and the tile's halo:
 * s = max|x| / 127), and stored as unsigned bytes q + 128 in quads of channels,
 * [C_in / 4][stride][4]; the filter's int8 taps in quads, [K][C_in / 4][kPack][4].  The
 * sums are exact, and sum_c w (q + 128) - 128 sum_c w = sum_c w q.
 *
 * The kernels are compiled for their instruction sets whatever the library's -march, and
 * run only where the host has them (HostHasBf16, HostHasVnni); elsewhere they throw,
 * naming the feature.
 */
#ifndef KOKORO_EXT_LOW_PRECISION_H_
#define KOKORO_EXT_LOW_PRECISION_H_

#include <kokoro_ext/products.h>

#include <cstdint>
#include <cstring>

namespace kokoro_ext {

/*! \brief Whether this CPU executes AVX512_BF16 (with AVX512F, BW and VL). */
bool HostHasBf16();

/*! \brief Throws a RuntimeError naming ``kernel`` and the missing feature unless HostHasBf16. */
void RequireBf16(const char* kernel);

/*! \brief Whether this CPU executes AVX512_VNNI (with AVX512F and BW). */
bool HostHasVnni();

/*! \brief Throws a RuntimeError naming ``kernel`` and the missing feature unless HostHasVnni. */
void RequireVnni(const char* kernel);

/*! \brief f rounded to bf16, to nearest even (a NaN stays a NaN). */
inline uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/*!
 * \brief dst[p][q][j] = bf16(src[2 p + j][q]) for p < rows / 2 (rows even), q < cols:
 *  rows of src_stride floats to pairs of rows with dst_stride columns.
 */
void PairRowsBf16(const float* src, int64_t rows, int64_t src_stride, int64_t cols,
                  uint16_t* dst, int64_t dst_stride);

/*!
 * \brief An int8 filter packed as [blocks][depth][kPack] to bf16 pairs of its depth rows,
 *  [blocks][depth / 2][kPack][2] (depth even; exact), vectorized where the host has
 *  AVX512_BF16.
 */
void PairInt8FilterBf16(const int8_t* packed, int64_t blocks, int64_t depth, uint16_t* dst);

/*!
 * \brief products.h's PackedProduct with bf16 operands: M[o][q] = sum_chunk sum_c
 *  w[o][chunk C_in + c] U[c][chunk shift + q] for o < o_blocks kPack, q < cols16, w as
 *  PairInt8FilterBf16 makes it, U as PairRowsBf16 makes it (pair stride u_stride columns).
 *  C_in even.
 */
void PackedProductBf16(const uint16_t* gw, int64_t depth, int64_t o_blocks, int64_t chunks,
                       int64_t C_in, const uint16_t* U, int64_t u_stride, int64_t shift,
                       int64_t cols16, float* M, int64_t m_stride);

/*!
 * \brief Columns [t0, t0 + cols) of rows [C_in][row_stride] quantized with one scale
 *  s = max|x| / 127 (1 where all are zero) to unsigned quads, dst[c / 4][q][c % 4] =
 *  round(x[c][t0 + q] / s) + 128 for c < ceil(C_in / 4) 4, with zeros (128) where t0 + q
 *  is outside [0, T) or c past C_in.  Returns s.
 */
float QuantizeColumnsInt8(const float* x, int64_t C_in, int64_t row_stride, int64_t T,
                          int64_t t0, int64_t cols, uint8_t* dst);

/*!
 * \brief int8 taps packed as [blocks][K][C_in][kPack] to quads of input channels,
 *  [blocks][K][ceil(C_in / 4)][kPack][4] (a last quad of fewer than 4 channels padded with
 *  zeros), and sums[o] = the sum of output channel o's taps, for o < blocks kPack.
 */
void QuadFilterInt8(const int8_t* taps, int64_t blocks, int64_t K, int64_t C_in, int8_t* out,
                    int32_t* sums);

/*!
 * \brief Rows [0, M) of x [M][K] (rows of x_stride floats) quantized each to unsigned bytes
 *  with a scale and zero point of its own, as ONNX Runtime's DynamicQuantizeLinear does
 *  a tensor: the row's range with 0 in it, [lo, hi], over 255 steps, scale[m] = (hi - lo)
 *  / 255 (1 where the row is all zeros), zero[m] = round(-lo / scale[m]); laid out as
 *  QuantizeColumnsInt8 lays out columns: dst[k / 4][m][k % 4] = round(x[m][k] / scale[m])
 *  + zero[m] for k < K, zero[m] for k in [K, 4 quads); columns [M, cols) hold zeros with
 *  scale 1 and zero point 0.  A row is a column of the product (addmm's x @ w as w^T x^T).
 */
void QuantizeRowsInt8(const float* x, int64_t M, int64_t K, int64_t x_stride, int64_t quads,
                      int64_t cols, uint8_t* dst, float* scale, int32_t* zero);

/*!
 * \brief Where PackedProductInt8 puts its exact int32 sums M[o][q]: y[o][q] = (M[o][q] -
 *  zero[o] column_zero[q]) scale[o] column_scale[q] + bias[o] for o < rows, q < width
 *  (float32 rows of y_stride; without column_zero or column_scale, 1), written from the
 *  registers that hold the sums, so that they never go through memory as int32.  A
 *  convolution's zero[o] is 128 times its filter's sum (its columns are offset by 128);
 *  addmm_q8_int8's is the weight's column sum, its columns' zero points column_zero.
 */
struct Int8Output {
  float* y;
  int64_t y_stride;
  int64_t rows;
  int64_t width;
  const int32_t* zero;
  const float* scale;
  const float* bias;
  const float* column_scale = nullptr;  // per column, indexed like y's columns
  const int32_t* column_zero = nullptr;
};

/*!
 * \brief M[o][q] = sum_k sum_c w[o][k][c] U[c][k shift + q] for o < o_blocks kPack,
 *  q < cols16 (a multiple of 16), exact in int32, then written as ``out`` says: w as
 *  QuadFilterInt8 makes it, U as QuantizeColumnsInt8 makes it (u_stride columns per quad
 *  of rows).
 */
void PackedProductInt8(const int8_t* w, int64_t o_blocks, int64_t K, int64_t C_in,
                       const uint8_t* U, int64_t u_stride, int64_t shift, int64_t cols16,
                       const Int8Output& out);

}  // namespace kokoro_ext

#endif  // KOKORO_EXT_LOW_PRECISION_H_
