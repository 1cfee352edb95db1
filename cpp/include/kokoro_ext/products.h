/*!
 * \file kokoro_ext/products.h
 * \brief Products on filters packed at build time, the sums held in registers.
 *
 * out[o][q] = sum_k sum_c w[o][k][c] u[c][q + k shift] is both a Winograd interpolation
 * point's products over the chunks of a long filter (winograd.cc) and a direct stride-1
 * convolution over its taps (dense.cc).  BLAS GEMMs pack both operands at every call and
 * write each tap's (chunk's) partial sums to memory; here the filter is packed once, when
 * the build transforms the weights, in blocks of kPack output channels with the kPack
 * values of one input channel side by side, and a block's sums stay in registers.
 */
#ifndef KOKORO_EXT_PRODUCTS_H_
#define KOKORO_EXT_PRODUCTS_H_

#include <kokoro_ext/threading.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace kokoro_ext {

/*! \brief Output channels per packed filter block (a multiple of every kernel's row count). */
constexpr int64_t kPack = 8;

/*! \brief Output channel blocks of a packed filter for C_out channels (the last zero-padded). */
inline int64_t PackedBlocks(int64_t C_out) { return (C_out + kPack - 1) / kPack; }

/*!
 * \brief The shape of a [C_out, C_in, K] filter packed as taps (PackTaps):
 *  [ceil(C_out / kPack)][K][C_in][kPack], zero rows past C_out.
 */
inline std::vector<int64_t> PackedTapsShape(int64_t C_out, int64_t C_in, int64_t K) {
  return {PackedBlocks(C_out), K, C_in, kPack};
}

/*!
 * \brief taps[o / kPack][k][c][o % kPack] = w[o][c][k], zero past C_out: a [C_out, C_in, K]
 *  filter packed as taps (float32, or the int8 values of a quantized one).
 */
template <typename T>
void PackTaps(const T* w, T* taps, int64_t C_out, int64_t C_in, int64_t K) {
  std::fill(taps, taps + PackedBlocks(C_out) * K * C_in * kPack, T{0});
  ParallelFor(C_out, [&](int64_t o) {
    for (int64_t c = 0; c < C_in; ++c) {
      for (int64_t k = 0; k < K; ++k) {
        taps[((o / kPack * K + k) * C_in + c) * kPack + o % kPack] = w[(o * C_in + c) * K + k];
      }
    }
  }, C_out * C_in * K >= (int64_t{1} << 18));
}

/*! \brief Product columns come in multiples of this (of every host's kVectorLanes). */
constexpr int64_t kColumnMultiple = 16;

/*! \brief n rounded up to a whole number of product columns. */
inline int64_t RoundColumns(int64_t n) {
  return (n + kColumnMultiple - 1) / kColumnMultiple * kColumnMultiple;
}

// Register blocking over the host's own vector registers (f32x16 is two registers on
// AVX2, and GCC spills a block of those): on AVX-512, 8 rows x 48 columns hold 24 of its
// 32 registers; on AVX2, 4 rows x 24 columns hold 12 of its 16.  AArch64 (NEON, 32
// registers of 4 floats) takes AVX2's block as pairs of registers: 24 sums, 6 columns and
// the weight fit its 32; 8 lanes also keep kVectorLanes a multiple of kPack.
#if defined(__AVX512F__)
constexpr int kVectorLanes = 16, kKernelRows = 8, kKernelVectors = 3;
#elif defined(__wasm_simd128__)
// WebAssembly (the wasm target, kokoro_ext.build.web.kernels): engines give wasm's 128-bit
// vectors the host's 16 xmm registers on x86-64, so 4 rows of one pair of sums (8
// vectors) with their loads fit, and AVX2's 4 x 3 spills: a 128-channel, 7-tap
// convolution in node 56 GFLOP/s against 36.
constexpr int kVectorLanes = 8, kKernelRows = 4, kKernelVectors = 1;
#else  // AVX2, NEON and the baseline
constexpr int kVectorLanes = 8, kKernelRows = 4, kKernelVectors = 3;
#endif
typedef float RegisterVector __attribute__((vector_size(kVectorLanes * sizeof(float))));

/*! \brief x in every lane (V{} + x would add 0 to x, which the compiler must keep). */
inline RegisterVector Splat(float x) {
#ifdef __AVX512F__
  return RegisterVector{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
#else
  return RegisterVector{x, x, x, x, x, x, x, x};
#endif
}

/*! \brief RegisterVector at any float's alignment, aliasing floats.  Loads through it, not
 *  memcpy: clang for wasm32 copies a 32-byte memcpy through the stack, which made the
 *  products 4x slower there (GCC and clang for x86-64 give both the same code). */
typedef float UnalignedVector
    __attribute__((vector_size(kVectorLanes * sizeof(float)), aligned(4), may_alias));

/*! \brief The kVectorLanes floats at p, any alignment. */
inline RegisterVector LoadRegister(const float* p) {
  return *reinterpret_cast<const UnalignedVector*>(p);
}

/*! \brief v to the kVectorLanes floats at p, any alignment. */
inline void StoreRegister(float* p, RegisterVector v) {
  *reinterpret_cast<UnalignedVector*>(p) = v;
}

/*!
 * \brief m[r][q] (+)= sum_{c < count} w[c][r] u[c][q] for r < kRows,
 *  q < kVectors * kVectorLanes, the sums kept in registers.  w is part of one packed
 *  block (row stride kPack); with accumulate, the sums are added to m.
 */
template <int kRows, int kVectors>
inline void ProductKernel(const float* w, int64_t count, const float* u, int64_t u_stride, float* m,
                   int64_t m_stride, bool accumulate) {
  using V = RegisterVector;
  V acc[kRows][kVectors];
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVectors; ++v) acc[r][v] = V{};
  }
  for (int64_t c = 0; c < count; ++c, u += u_stride, w += kPack) {
    V uv[kVectors];
    for (int v = 0; v < kVectors; ++v) uv[v] = LoadRegister(u + v * kVectorLanes);
    for (int r = 0; r < kRows; ++r) {
      const V wr = Splat(w[r]);
      for (int v = 0; v < kVectors; ++v) acc[r][v] += wr * uv[v];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVectors; ++v) {
      float* p = m + r * m_stride + v * kVectorLanes;
      StoreRegister(p, accumulate ? LoadRegister(p) + acc[r][v] : acc[r][v]);
    }
  }
}

// Input channels summed in registers before a partial sum goes to memory: a float sum's
// rounding error grows with its length.  Winograd at 11 taps and 128 channels: 3.2x the
// direct convolution's error with sums of 64, 5x with OpenBLAS's GEMMs, 12.6x with one
// sum over all chunks and channels.
constexpr int64_t kSumLength = 64;

/*!
 * \brief product(ob, q, kernel) for every packed block ob < o_blocks and every column panel
 *  each_panel visits, in the order that reads the larger operand once: where the filter
 *  is larger (short inputs through wide layers), blocks outside, each block read once and
 *  serving every panel from cache; otherwise panels outside, a panel of U (C_in rows of a
 *  panel's columns, plus the chunk shifts) staying in L1 while the blocks stream past it.
 */
template <typename EachPanel, typename Product>
inline void LargerOperandOnce(int64_t o_blocks, int64_t depth, int64_t C_in, int64_t cols16,
                              EachPanel&& each_panel, Product&& product) {
  if (o_blocks * depth * kPack > C_in * cols16) {
    for (int64_t ob = 0; ob < o_blocks; ++ob) {
      each_panel([&](int64_t q, auto kernel) { product(ob, q, kernel); });
    }
    return;
  }
  each_panel([&](int64_t q, auto kernel) {
    for (int64_t ob = 0; ob < o_blocks; ++ob) product(ob, q, kernel);
  });
}

/*!
 * \brief M[o][q] = sum_chunk sum_c w[o / kPack][chunk C_in + c][o % kPack] U[c][chunk shift + q]
 *  for o < o_blocks kPack and q < cols16 (a multiple of kColumnMultiple), w packed as
 *  [o_blocks][depth = chunks C_in][kPack].  One Winograd interpolation point's products
 *  (chunks of a long filter), or a direct convolution's (chunks = taps, shift = dilation).
 *  Reads U up to column cols16 - 1 + (chunks - 1) shift.
 */
inline void PackedProduct(const float* gw, int64_t depth, int64_t o_blocks, int64_t chunks,
                  int64_t C_in, const float* U, int64_t u_stride, int64_t shift, int64_t cols16,
                  float* M, int64_t m_stride) {
  constexpr int64_t kWide = kKernelVectors * kVectorLanes;
  // One packed block's products over a panel of columns from q.
  auto product = [&](int64_t ob, int64_t q, auto kernel) {
    for (int64_t half = 0; half < kPack; half += kKernelRows) {
      float* m = M + (ob * kPack + half) * m_stride + q;
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        for (int64_t c0 = 0; c0 < C_in; c0 += kSumLength) {
          const float* w = gw + (ob * depth + chunk * C_in + c0) * kPack + half;
          kernel(w, std::min(kSumLength, C_in - c0), U + c0 * u_stride + chunk * shift + q,
                 u_stride, m, m_stride, chunk > 0 || c0 > 0);
        }
      }
    }
  };
  // Column panels of kWide columns, then of two vectors and of one (one vector's
  // kKernelRows sums are too few to keep both FMA pipes busy): visit(q, kernel) for each.
  auto each_panel = [&](auto visit) {
    int64_t q = 0;
    for (; q + kWide <= cols16; q += kWide) visit(q, ProductKernel<kKernelRows, kKernelVectors>);
    for (; q + 2 * kVectorLanes <= cols16; q += 2 * kVectorLanes) {
      visit(q, ProductKernel<kKernelRows, 2>);
    }
    for (; q < cols16; q += kVectorLanes) visit(q, ProductKernel<kKernelRows, 1>);
  };
  LargerOperandOnce(o_blocks, depth, C_in, cols16, each_panel, product);
}

}  // namespace kokoro_ext

#endif  // KOKORO_EXT_PRODUCTS_H_
