/*!
 * \file kokoro_ext/gemm.h
 * \brief Single-precision GEMM in the layout of PyTorch weights.
 */
#ifndef KOKORO_EXT_GEMM_H_
#define KOKORO_EXT_GEMM_H_

#include <cstdint>

namespace kokoro_ext {

/*!
 * \brief C[m, n] = sum_k A[m, k] * B[n, k] + bias[n]   (C = A B^T + bias)
 *
 * B is in the [out_features, in_features] layout of nn.Linear / nn.LSTM weights.  Rows
 * are strided (lda, ldb, ldc elements); bias may be null.  Parallel over output tiles.
 *
 * Two kernels with the same contract:
 *   GemmABtInPlace  reads B in place (dot products); best when M is small.
 *   GemmABtPacked   repacks B into column panels first (outer products); best when M
 *                   is large enough to amortize the packing.
 * Each computes every row of C with the same arithmetic whatever M is, so a row does
 * not depend on the other rows of the call; the two kernels round differently, so a
 * caller that needs batch-invariant results must choose between them by something
 * other than M.
 */
void GemmABtInPlace(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                    const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc);
void GemmABtPacked(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                   const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc);

}  // namespace kokoro_ext

#endif  // KOKORO_EXT_GEMM_H_
